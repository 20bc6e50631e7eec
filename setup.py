"""Builds chute's one optional C extension; everything else is in pyproject.toml.

``chute._sources._highway_hash_c`` computes the HighwayHash-64 checksums of ArrayRecord
chunks at memory speed.  It is optional: where no C compiler is found, or the build fails,
the install goes on and chute checks the same hashes with NumPy, more slowly
(``chute --version`` says which one runs).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "chute._sources._highway_hash_c",
            sources=["src/chute/_sources/_highway_hash_c.c"],
            optional=True,
        )
    ]
)

"""Fixtures for the source tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chute._sources import checksums

sys.path.insert(0, str(Path(__file__).parent))  # highway_hash_reference, the tests' own


@pytest.fixture(params=["compiled", "numpy"])
def checksum_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Chunk hashes computed by the compiled extension, then by the NumPy fallback."""
    if request.param == "compiled" and checksums._COMPILED is None:
        pytest.skip("chute's C extension _highway_hash_c is not built (pip install -e .)")
    previous = checksums.use_compiled(request.param == "compiled")
    try:
        yield str(request.param)
    finally:
        checksums.use_compiled(previous)

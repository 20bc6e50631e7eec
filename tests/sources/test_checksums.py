"""HighwayHash-64: the compiled extension, the NumPy fallback and the pure-Python reference
agree on every input, and chute says which one runs."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import sysconfig
from typing import Any

import numpy as np
import pytest
from highway_hash_reference import RIEGELI_KEY, highway_hash64
from hypothesis import given, settings
from hypothesis import strategies as st

from chute._sources import checksums
from chute._sources._highway_hash_many import highway_hash64_each, highway_hash64_many

LENGTHS = [*range(301), 511, 1000, 4095, 4096, 65_536 + 13, (1 << 20) + 5]


def _inputs(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(n) for n in LENGTHS]


def _compiled() -> Any:
    if checksums._COMPILED is None:
        pytest.skip("chute's C extension _highway_hash_c is not built (pip install -e .)")
    return checksums._COMPILED


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "portable"])
def test_compiled_hash_equals_the_python_reference_for_lengths_0_to_300_and_large(
    simd: bool,
) -> None:
    compiled = _compiled()
    if simd and compiled.CPU != "avx2":
        pytest.skip("this CPU has no AVX2: the portable packet loop is the only one")
    previous = compiled.use_simd(simd)
    try:
        messages = _inputs(0)
        reference = [highway_hash64(m) for m in messages]
        assert [compiled.hash64(m, RIEGELI_KEY) for m in messages] == reference
        lengths = np.array([len(m) for m in messages], np.int64)
        ranges = compiled.hash64_ranges(messages, RIEGELI_KEY, 0, lengths)
        assert np.frombuffer(ranges, np.uint64).tolist() == reference
        inner = compiled.hash64_ranges(messages[3:], RIEGELI_KEY, 3, lengths[3:] - 3)
        assert np.frombuffer(inner, np.uint64).tolist() == [
            highway_hash64(m[3:]) for m in messages[3:]
        ]
        rng = random.Random(1)
        for message in messages[::7]:
            key = tuple(rng.getrandbits(64) for _ in range(4))
            assert compiled.hash64(message, key) == highway_hash64(message, key)
    finally:
        compiled.use_simd(previous)


def test_numpy_lockstep_hash_equals_the_python_reference_for_lengths_0_to_300_and_large() -> None:
    messages = _inputs(2)
    reference = [highway_hash64(m) for m in messages]
    assert highway_hash64_each(messages) == reference
    shuffled = list(zip(messages, reference))
    random.Random(3).shuffle(shuffled)
    assert highway_hash64_each([m for m, _ in shuffled]) == [h for _, h in shuffled]
    assert highway_hash64_each([]) == []
    for length in (16, 32, 100):
        same = [m[:length] for m in messages[length:][:9]]
        many = highway_hash64_many(np.frombuffer(b"".join(same), np.uint8).reshape(9, length))
        assert many.tolist() == [highway_hash64(m) for m in same]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=400), max_size=12))
def test_every_implementation_gives_the_same_hashes(messages: list[bytes]) -> None:
    reference = [highway_hash64(m) for m in messages]
    previous = checksums.use_compiled(False)
    try:
        assert checksums.hash_each(messages) == reference
        if checksums._COMPILED is not None:
            checksums.use_compiled(True)
            assert checksums.hash_each([memoryview(m) for m in messages]) == reference
    finally:
        checksums.use_compiled(previous)


def test_the_numpy_fallback_hashes_a_lone_input_as_the_reference_does() -> None:
    previous = checksums.use_compiled(False)
    try:
        for message in _inputs(4)[::7]:
            assert checksums.hash_each([message]) == [highway_hash64(message)]
    finally:
        checksums.use_compiled(previous)


def test_checksums_is_the_one_highway_hash_entry_point() -> None:
    import ast
    import importlib.util
    from pathlib import Path

    import chute

    assert importlib.util.find_spec("chute._sources._highway_hash") is None  # no scalar copy
    root = Path(chute.__file__).parent
    importers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
            if any("_highway_hash" in name for name in names):
                importers.add(path.relative_to(root).as_posix())
    assert importers == {"_sources/checksums.py"}


def test_the_compiled_hash_refuses_bad_arguments_with_a_reason() -> None:
    compiled = _compiled()
    one = np.array([2], np.int64)
    with pytest.raises(TypeError):
        compiled.hash64("text", RIEGELI_KEY)
    with pytest.raises(TypeError):
        compiled.hash64_ranges([3], RIEGELI_KEY, 0, one)
    with pytest.raises(ValueError, match="4 integers"):
        compiled.hash64(b"", (1, 2, 3))
    with pytest.raises(ValueError, match="holds 3 bytes, not the 2 to 4"):
        compiled.hash64_ranges([b"abc"], RIEGELI_KEY, 2, one)
    with pytest.raises(ValueError, match="int64 array of one length per buffer"):
        compiled.hash64_ranges([b"abc", b"d"], RIEGELI_KEY, 0, one)
    with pytest.raises(ValueError, match="int64"):
        compiled.hash64_ranges([b"abc"], RIEGELI_KEY, 0, one.astype(np.int32))


def test_the_extension_is_built_wherever_a_c_compiler_exists() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): chute hashes with NumPy, as designed")
    assert checksums._COMPILED is not None, (
        "a C compiler is present but chute's extension _highway_hash_c is not built: "
        "pip install -e . (or python setup.py build_ext --inplace) builds it"
    )


def test_an_environment_variable_forces_the_numpy_fallback() -> None:
    env = {**os.environ, checksums.ENV: "numpy"}
    code = (
        "from chute._sources import checksums; from chute.cli import build_parser; "
        "print(checksums.implementation()); build_parser().parse_args(['--version'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"NumPy, {checksums.ENV}=numpy",
        f"chute {__import__('chute').__version__} (ArrayRecord checksums: "
        f"NumPy, {checksums.ENV}=numpy)",
    ]


def test_forcing_the_compiled_hash_where_it_is_not_built_says_how_to_build_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checksums, "_COMPILED", None)
    with pytest.raises(ValueError, match="not built.*pip install -e"):
        checksums.use_compiled(True)

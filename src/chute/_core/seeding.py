"""Seeds: validation, derivation from ``.seed()`` marks, per-element RNGs.

Randomness in chute is a pure function of (seed, epoch, index).  A random
stage without an explicit seed derives one from the ``.seed()`` marks of its
ancestors: a breadth-first walk from the stage (depth 0) through its parents
records ``(seed, depth)`` at each marked node and stops descending there; the
flat list of pairs feeds ``numpy.random.SeedSequence``.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from chute._core.capabilities import CarriesSeedMark
from chute._core.validate import grain_first

MAX_SEED = 2**32


class _Node(Protocol):
    _seed: int | None

    @property
    def parents(self) -> tuple[Any, ...]: ...


class SeedRangeError(TypeError, ValueError):
    """A seed outside ``[0, 2**32)`` for a window shuffle: a ``TypeError``, as Grain
    raises there, and still the ``ValueError`` that chute raised before."""


def check_seed(
    seed: object, what: str = "seed", *, out_of_range: type[ValueError] = ValueError
) -> int:
    """Returns ``seed`` as an int after checking it is in ``[0, 2**32)``.

    Shuffles key their cipher with the seed, so it must fit in 32 bits (as in
    Grain, whose message the error starts with).  ``out_of_range`` is the
    error raised for an int outside that range.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"{what} must be an int in [0, 2**32) (got {seed!r} that is a {type(seed).__name__})."
        )
    if not 0 <= int(seed) < MAX_SEED:
        raise out_of_range(
            f"Seed must be an integer between 0 and 2**32-1 (got seed={seed}). "
            f"chute: {what} must be an int in [0, 2**32) (got {seed})."
        )
    return int(seed)


def check_wide_seed(seed: object, what: str = "seed") -> int:
    """Returns ``seed`` as an int after checking it is an int >= 0 (of any size).

    ``.seed()`` marks and ``random_map`` seeds feed ``numpy.random.SeedSequence``
    (directly or through ``Philox(seed)``), which takes any non-negative int, so
    Grain accepts seeds such as 893247023984 there and so does chute.

    >>> check_wide_seed(893247023984)
    893247023984
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"{what} must be an int >= 0 (got {seed!r} that is a {type(seed).__name__})."
        )
    if int(seed) < 0:
        raise ValueError(f"expected non-negative integer: {what} must be an int >= 0 (got {seed}).")
    return int(seed)


def derive_seed(node: _Node) -> int | None:
    """Derives the seed of a random stage from the ``.seed()`` marks above it."""
    pairs = _mark_pairs(node)
    if not pairs:
        return None
    return int(np.random.SeedSequence(pairs).generate_state(1, np.uint32)[0])


def seed_label(node: Any, seed: int) -> str:
    """How a stage's seed reads in its name: only what the user wrote.

    ``seed=7`` for a seed passed to the stage, ``seed from .seed(42)`` for one
    derived from the ``.seed()`` marks above it (``resolve_seed`` notes them).
    """
    marks = getattr(node, "_seed_marks", None)
    if not marks:
        return f"seed={seed}"
    return "seed from " + ", ".join(f".seed({mark})" for mark in marks)


def _mark_pairs(node: _Node) -> list[int]:
    """``[seed, depth, seed, depth, ...]`` of the marks ``derive_seed`` reads (see the module)."""
    pairs: list[int] = []
    queue: collections.deque[tuple[Any, int]] = collections.deque([(node, 0)])
    while queue:
        current, depth = queue.popleft()
        mark = current._seed if isinstance(current, CarriesSeedMark) else None
        if mark is not None:
            pairs.extend((mark, depth))
            continue
        for parent in getattr(current, "parents", ()):
            queue.append((parent, depth + 1))
    return pairs


# Grain's words when a random stage has no seed (its window shuffles require one by signature).
_GRAINS_NO_SEED = {
    "random_map": (
        "`random_map` requires a seed. Please either provide it with `ds.seed(seed)` before "
        "any random transformations or pass it directly with `ds.random_map(transform, "
        "seed=seed)`."
    ),
    "shuffle": "`shuffle` requires a seed. Please provide it with `ds.seed(seed)`",
}


def resolve_seed(
    node: _Node,
    explicit: int | None,
    stage: str,
    *,
    wide: bool = False,
    out_of_range: type[ValueError] = ValueError,
) -> int:
    """Returns the explicit seed or the derived one; raises if there is none.

    Args:
        node: The random stage.
        explicit: The seed given to the stage, if any.
        stage: The stage's name, for messages.
        wide: Accept any explicit int >= 0 (``random_map``), not only 32-bit ones.
        out_of_range: The error for a 32-bit seed out of range (``SeedRangeError``
            where Grain raises a ``TypeError``).
    """
    if explicit is not None:
        if wide:
            return check_wide_seed(explicit, f"{stage}: seed")
        return check_seed(explicit, f"{stage}: seed", out_of_range=out_of_range)
    pairs = _mark_pairs(node)
    if pairs:  # its name shows the marks the user wrote, not the number derived from them
        node._seed_marks = tuple(pairs[::2])  # type: ignore[attr-defined]
    derived = derive_seed(node)
    if derived is None:
        advice = (
            f"{stage} needs a seed: pass seed=... to it, or call .seed(s) on the "
            "dataset earlier in the pipeline, e.g. ds.seed(42)."
        )
        grains = _GRAINS_NO_SEED.get(stage)
        raise ValueError(advice if grains is None else grain_first(grains, advice))
    return derived


class ElementRng:
    """Hands out the RNG of element ``index``: Philox(seed) at counter [0,0,0,index].

    One generator is reused and its state reset per element, which is far
    cheaper than building a new generator, and yields the same numbers.
    """

    def __init__(self, seed: int) -> None:
        self._bit_generator = np.random.Philox(seed)
        self._state = self._bit_generator.state
        self._state["buffer_pos"] = 4
        self._counter = np.zeros(4, dtype=np.uint64)
        self._state["state"]["counter"] = self._counter
        self.generator = np.random.Generator(self._bit_generator)

    def at(self, index: int) -> np.random.Generator:
        self._counter[3] = index
        self._bit_generator.state = self._state
        return self.generator


def element_rngs(seed: int, indices: Iterable[int]) -> Iterable[np.random.Generator]:
    """Yields the RNG of each element index in turn (reusing one generator)."""
    rng = ElementRng(seed)
    for index in indices:
        yield rng.at(index)


class KeyedRng:
    """Hands out ``Generator(Philox(key=key))`` for many keys from one generator.

    The DataLoader's per-record RNG is keyed by ``seed + index``; resetting one
    bit generator's state is much cheaper than building a new one per record.
    """

    _MASK64 = (1 << 64) - 1

    def __init__(self) -> None:
        self._bit_generator = np.random.Philox(key=0)
        self._state = self._bit_generator.state
        self._key = np.zeros(2, dtype=np.uint64)
        self._state["state"]["key"] = self._key
        self._state["state"]["counter"] = np.zeros(4, dtype=np.uint64)
        self._state["buffer_pos"] = 4
        self._state["has_uint32"] = 0
        self.generator = np.random.Generator(self._bit_generator)

    def at(self, key: int) -> np.random.Generator:
        self._key[0] = key & self._MASK64
        self._key[1] = (key >> 64) & self._MASK64
        self._state["state"]["counter"][:] = 0
        self._bit_generator.state = self._state
        return self.generator

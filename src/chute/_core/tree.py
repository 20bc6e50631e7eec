"""PyTree helpers: map over leaves and stack a list of trees into one.

Containers are dicts (and other mappings), lists, tuples and namedtuples;
``None`` is an empty container, as in JAX; everything else is a leaf.  When
JAX is already imported, its tree utilities are used so that user-registered
PyTree nodes work too; chute never imports JAX just for this.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def _jax_tree() -> Any:
    jax = sys.modules.get("jax")
    return getattr(jax, "tree_util", None) if jax is not None else None


def is_namedtuple(x: object) -> bool:
    """Whether ``x`` is a namedtuple (a tuple with ``_fields``, Python's own name)."""
    return isinstance(x, tuple) and hasattr(x, "_fields")


def map_structure(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Applies ``fn`` to the leaves of ``tree`` (and matching leaves of ``rest``)."""
    jtu = _jax_tree()
    if jtu is not None:
        return jtu.tree_map(fn, tree, *rest)
    return _map(fn, tree, rest)


def _map(fn: Callable[..., Any], tree: Any, rest: Sequence[Any]) -> Any:
    if tree is None:
        return None
    if isinstance(tree, Mapping):
        return type(tree)(  # type: ignore[call-arg]
            {k: _map(fn, v, [r[k] for r in rest]) for k, v in tree.items()}
        )
    if is_namedtuple(tree):
        return type(tree)(*(_map(fn, v, [r[i] for r in rest]) for i, v in enumerate(tree)))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map(fn, v, [r[i] for r in rest]) for i, v in enumerate(tree))
    return fn(tree, *rest)


def describe(tree: Any) -> str:
    """A short description of a tree's structure, for error messages."""
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in tree.items()) + "}"
    if is_namedtuple(tree):
        inner = ", ".join(f"{f}={describe(v)}" for f, v in zip(tree._fields, tree))
        return f"{type(tree).__name__}({inner})"
    if isinstance(tree, list):
        return "[" + ", ".join(describe(v) for v in tree) + "]"
    if isinstance(tree, tuple):
        return "(" + ", ".join(describe(v) for v in tree) + ("," if len(tree) == 1 else "") + ")"
    if tree is None:
        return "None"
    if isinstance(tree, np.ndarray):
        return f"array{tree.shape}:{tree.dtype}"
    return type(tree).__name__


#: Grain's first line when the elements of a batch do not match; chute's details follow.
GRAINS_MISMATCH = "Expected all input elements to have the same structure but got:"


class StructureMismatchError(ValueError, TypeError):
    """Elements of one batch do not share the same tree structure.

    A ``ValueError``, as Grain's ``batch`` raises, and a ``TypeError``, as Grain's
    legacy ``BatchOperation`` raises (called on records, or in a ``DataLoader``).
    """


def _mismatch(first: Any, other: Any, position: int) -> StructureMismatchError:
    return StructureMismatchError(
        f"{GRAINS_MISMATCH}\nchute: elements of different structures cannot be batched: "
        f"element 0 is {describe(first)} but element {position} is {describe(other)}. Make "
        "every element the same structure, or pass batch_fn= to combine them yourself."
    )


def _stack_leaves(leaves: list[Any]) -> Any:
    first = leaves[0]
    if isinstance(first, np.ndarray):
        if first.dtype != object:
            try:  # np.array stacks equal-shaped arrays about twice as fast as np.stack
                stacked = np.array(leaves)
            except ValueError:
                stacked = None
            if stacked is not None and stacked.shape == (len(leaves), *first.shape):
                return stacked
        try:
            return np.stack(leaves)
        except ValueError as exc:
            shapes = sorted({np.shape(x) for x in leaves}, key=str)
            raise ValueError(
                f"{GRAINS_MISMATCH}\nchute: arrays of different shapes {shapes} cannot be "
                "stacked into a batch; pad them first, or pass batch_fn= (e.g. "
                "chute.experimental.batch_and_pad)."
            ) from exc
    return np.asarray(leaves)


_LEAF_TYPES = (np.ndarray, int, float, str, bytes, bool, np.generic)


def _stack(elements: list[Any], leaves_fn: Callable[[list[Any]], Any] = _stack_leaves) -> Any:
    first = elements[0]
    kinds = set(map(type, elements))
    if len(kinds) == 1:
        kind = kinds.pop()
        if kind is dict:
            keys = first.keys()
            if not all(map(keys.__eq__, map(dict.keys, elements))):
                pos = next(p for p, e in enumerate(elements) if e.keys() != keys)
                raise _mismatch(first, elements[pos], pos)
            return {k: _stack([e[k] for e in elements], leaves_fn) for k in keys}
        if kind in _LEAF_TYPES or issubclass(kind, np.generic):
            return leaves_fn(elements)
    if first is None:
        for pos, e in enumerate(elements):
            if isinstance(e, (Mapping, list, tuple, np.ndarray)):
                raise _mismatch(first, e, pos)
        if all(e is None for e in elements):
            return None
        return leaves_fn(elements)  # None among leaves: an object array, as in Grain
    if isinstance(first, Mapping):
        keys = first.keys()
        for pos, e in enumerate(elements):
            if not isinstance(e, Mapping) or e.keys() != keys:
                raise _mismatch(first, e, pos)
        return type(first)(  # type: ignore[call-arg]
            {k: _stack([e[k] for e in elements], leaves_fn) for k in keys}
        )
    if isinstance(first, (list, tuple)):
        kind, size = type(first), len(first)
        for pos, e in enumerate(elements):
            if type(e) is not kind or len(e) != size:
                raise _mismatch(first, e, pos)
        parts = [_stack([e[i] for e in elements], leaves_fn) for i in range(size)]
        return kind(*parts) if is_namedtuple(first) else kind(parts)
    arrays = isinstance(first, np.ndarray)
    for pos, e in enumerate(elements):
        if isinstance(e, (Mapping, list, tuple)) or (arrays and e is None):
            raise _mismatch(first, e, pos)
    return leaves_fn(elements)


def stack(elements: Sequence[Any], leaves_fn: Callable[[list[Any]], Any] = _stack_leaves) -> Any:
    """Stacks a non-empty list of trees leaf by leaf along a new leading axis.

    Numbers become a numpy array, strings and bytes a numpy string array.  A
    ``None`` in every element stays ``None`` (an empty subtree); ``None``
    beside numbers or strings makes an object array, as in Grain.
    ``leaves_fn`` combines each group of leaves (a worker process uses it to
    stack arrays straight into shared memory).

    >>> stack([{"a": 1, "b": (2.0, "x")}, {"a": 3, "b": (4.0, "yz")}])
    {'a': array([1, 3]), 'b': (array([2., 4.]), array(['x', 'yz'], dtype='<U2'))}
    """
    items = list(elements)
    if not items:
        raise ValueError("cannot stack an empty list of elements into a batch.")
    jtu = _jax_tree()
    if jtu is not None and not _plain(items[0]):
        leaves0, treedef = jtu.tree_flatten(items[0])
        columns: list[list[Any]] = [[] for _ in leaves0]
        for pos, e in enumerate(items):
            leaves, other = jtu.tree_flatten(e)
            if other != treedef:
                raise _mismatch(items[0], e, pos)
            for column, leaf in zip(columns, leaves):
                column.append(leaf)
        return jtu.tree_unflatten(treedef, [leaves_fn(c) for c in columns])
    return _stack(items, leaves_fn)


def _plain(tree: Any) -> bool:
    """True when ``tree`` uses only containers the pure-Python path knows."""
    if isinstance(tree, (Mapping, list, tuple)):
        values = tree.values() if isinstance(tree, Mapping) else tree
        return all(_plain(v) for v in values)
    return True


def unstack(batch: Any) -> list[Any]:
    """Splits a batched tree back into its elements (inverse of :func:`stack`)."""
    leaves: list[Any] = []
    map_structure(leaves.append, batch)
    if not leaves:
        raise ValueError("cannot unbatch a tree without leaves.")
    size = len(leaves[0])
    return [map_structure(lambda x, i=i: x[i], batch) for i in range(size)]

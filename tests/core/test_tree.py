"""Stacking PyTrees into batches and splitting them again."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute._core import tree

Point = collections.namedtuple("Point", "x y")


def test_stacks_dicts_tuples_and_namedtuples() -> None:
    batch = tree.stack(
        [{"a": Point(1, 2.0), "b": [np.zeros(2)]}, {"a": Point(3, 4.0), "b": [np.ones(2)]}]
    )
    assert isinstance(batch["a"], Point)
    assert batch["a"].x.tolist() == [1, 3]
    assert batch["b"][0].shape == (2, 2)


def test_strings_and_bytes_become_numpy_string_arrays() -> None:
    assert tree.stack(["ab", "cde"]).dtype == np.dtype("<U3")
    assert tree.stack([b"ab", b"c"]).tolist() == [b"ab", b"c"]


def test_mismatched_structures_name_both() -> None:
    with pytest.raises(
        ValueError, match=r"element 0 is \{'a': int\} but element 1 is \{'b': int\}"
    ):
        tree.stack([{"a": 1}, {"b": 2}])
    with pytest.raises(ValueError, match=r"element 0 is \(int, int\) but element 2 is \(int,\)"):
        tree.stack([(1, 2), (3, 4), (5,)])


def test_arrays_of_different_shapes_suggest_padding() -> None:
    with pytest.raises(ValueError, match="batch_and_pad"):
        tree.stack([np.zeros(2), np.zeros(3)])


def test_empty_list_is_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        tree.stack([])


def test_none_is_an_empty_container() -> None:
    assert tree.stack([{"a": None, "b": 1}, {"a": None, "b": 2}])["a"] is None


def test_none_beside_numbers_batches_as_an_object_array() -> None:
    for column in ([1, None], [None, 1]):
        stacked = tree.stack(column)
        assert stacked.dtype == object and stacked.tolist() == column
    with pytest.raises(tree.StructureMismatchError, match="element 1 is None"):
        tree.stack([np.zeros(2), None])


elements = st.lists(
    st.fixed_dictionaries(
        {
            "i": st.integers(-1000, 1000),
            "f": st.floats(allow_nan=False),
            "s": st.text(st.characters(blacklist_characters="\x00"), max_size=5),
        }
    ),
    min_size=1,
    max_size=20,
)


@given(elements)
def test_unstack_inverts_stack(items: list[dict[str, object]]) -> None:
    back = tree.unstack(tree.stack(items))
    assert [{k: v.item() for k, v in e.items()} for e in back] == items

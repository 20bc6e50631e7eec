"""Record and RecordMetadata: fields, copies and Grain's printed form."""

from __future__ import annotations

import copy
import pickle

import numpy as np

import chute
from chute._loader.record import Record, RecordMetadata


def test_repr_without_rng_matches_grain() -> None:
    assert repr(RecordMetadata(index=0, record_key=0, rng=None)) == (
        "RecordMetadata(index=0, record_key=0, rng=None)"
    )


def test_repr_of_rng_has_no_address() -> None:
    rng = np.random.Generator(np.random.Philox(key=134))
    metadata = RecordMetadata(index=0, record_key=134, rng=rng)
    # Grain prints the generator as Generator(Philox), without numpy's address.
    assert repr(metadata) == "RecordMetadata(index=0, record_key=134, rng=Generator(Philox))"
    assert str(metadata) == repr(metadata)


def test_repr_names_other_bit_generators() -> None:
    metadata = RecordMetadata(index=1, record_key=2, rng=np.random.default_rng(0))
    assert repr(metadata) == "RecordMetadata(index=1, record_key=2, rng=Generator(PCG64))"


def test_record_key_and_rng_default_to_none() -> None:
    assert RecordMetadata(3) == RecordMetadata(index=3, record_key=None, rng=None)


def test_remove_record_key_returns_a_copy_keeping_the_rng() -> None:
    rng = np.random.default_rng(0)
    metadata = RecordMetadata(index=4, record_key=7, rng=rng)
    removed = metadata.remove_record_key()
    assert removed is not metadata
    assert (removed.index, removed.record_key, removed.rng) == (4, None, rng)
    assert metadata.record_key == 7


def test_metadata_is_mutable_like_grains() -> None:
    metadata = RecordMetadata(index=0, record_key=0)
    metadata.index = 5
    assert metadata.index == 5


def test_record_repr_and_equality() -> None:
    record = Record(RecordMetadata(index=0, record_key=5), data="five")
    assert repr(record) == (
        "Record(metadata=RecordMetadata(index=0, record_key=5, rng=None), data='five')"
    )
    assert record == Record(RecordMetadata(0, 5), "five")
    assert record != Record(RecordMetadata(0, 5), "six")


def test_record_survives_pickle_and_deepcopy() -> None:
    record = Record(RecordMetadata(index=2, record_key=3), data=[1, 2])
    assert pickle.loads(pickle.dumps(record)) == record
    assert copy.deepcopy(record) == record


def test_record_is_generic() -> None:
    assert Record[int] is not None


def test_top_level_names_are_these_classes() -> None:
    assert chute.Record is Record
    assert chute.RecordMetadata is RecordMetadata

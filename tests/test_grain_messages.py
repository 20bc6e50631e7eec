"""chute's errors start with (or contain) Grain's words, so code that matches them works.

Every pinned sentence was observed by triggering the same error with Grain 0.2.18.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import numpy as np
import pytest

import chute
from chute import IterDataset, MapDataset
from chute.experimental import (
    BestFitPackIterDataset,
    BOSHandling,
    ConcatThenSplitIterDataset,
    DatasetOptions,
    ElasticIterator,
    FirstFitPackIterDataset,
    FlatMapMapDataset,
    FlatMapTransform,
    InterleaveIterDataset,
    LimitIterDataset,
    RebatchIterDataset,
    RepeatIterDataset,
    ThreadPrefetchIterDataset,
    WithOptionsIterDataset,
    ZipIterDataset,
    ZipMapDataset,
    batch_and_pad,
    get_next_index,
    index_shuffle,
)
from chute.python import BatchOperation, RangeDataSource


def _text(sentence: str) -> str:
    return re.escape(sentence)


def test_index_shuffle_out_of_range_index_gives_grains_message() -> None:
    with pytest.raises(
        ValueError,
        match=_text("index must be in [0, max_index], but got index = 10 and max_index = 5"),
    ):
        index_shuffle(10, max_index=5, seed=1, rounds=4)


@pytest.mark.parametrize("rounds", [3, 2000])
def test_index_shuffle_bad_rounds_give_grains_message(rounds: int) -> None:
    sentence = f"rounds must be an even integer between 4 and 1024, but got rounds = {rounds}"
    with pytest.raises(ValueError, match=_text(sentence)):
        index_shuffle(1, max_index=5, seed=1, rounds=rounds)


@pytest.mark.parametrize("iterate", [False, True])
def test_batching_elements_of_different_structures_gives_grains_message(iterate: bool) -> None:
    ds: Any = MapDataset.source([{"a": 1}, {"b": 2}])
    if iterate:
        ds = ds.to_iter_dataset()
    sentence = "Expected all input elements to have the same structure but got:"
    with pytest.raises(ValueError, match=_text(sentence)):
        list(ds.batch(2))


def test_map_batch_after_filter_gives_grains_message() -> None:
    sentence = (
        "`MapDataset.batch` can not follow `MapDataset.filter` because `filter` can discard "
        "elements. Convert `MapDataset` to `IterDataset` with `to_iter_dataset()` before "
        "calling `batch`."
    )
    with pytest.raises(ValueError, match=_text(sentence)):
        MapDataset.range(5).filter(lambda x: True).map(lambda x: x).batch(2)


def test_element_spec_of_a_map_without_output_spec_gives_grains_message() -> None:
    with pytest.raises(ValueError, match="does not implement `output_spec`"):
        _ = MapDataset.range(10).map(lambda x: x)._element_spec


def _needs_positive_rows(rows: list) -> Any:
    if not all(np.all(np.asarray(r) > 0) for r in rows):
        raise ValueError("rows must be positive")
    return np.stack(rows)


def test_element_spec_of_a_custom_batch_fn_that_cannot_run_gives_grains_message() -> None:
    sentence = "Element spec inference is not supported with custom batching functions"
    for ds in (
        MapDataset.range(10).batch(4, batch_fn=_needs_positive_rows),
        MapDataset.range(10).to_iter_dataset().batch(4, batch_fn=_needs_positive_rows),
    ):
        with pytest.raises(NotImplementedError, match=sentence):
            _ = ds._element_spec


def test_element_spec_of_a_custom_batch_fn_is_inferred_from_its_output() -> None:
    from chute.experimental import ShapeDtypeStruct, get_element_spec

    rows = MapDataset.source(np.zeros((10, 3), np.float32))
    joined = rows.batch(4, batch_fn=lambda xs: {"x": np.concatenate(xs), "n": len(xs)})
    spec = get_element_spec(joined)
    assert spec["x"] == ShapeDtypeStruct((None,), np.float32)  # 12 or fewer in the last batch
    assert spec["n"].shape == ()
    full = get_element_spec(
        rows.to_iter_dataset().batch(4, batch_fn=np.concatenate, drop_remainder=True)
    )
    assert full == ShapeDtypeStruct((12,), np.float32)


@pytest.mark.parametrize("packer", [FirstFitPackIterDataset, BestFitPackIterDataset])
def test_non_positive_max_sequences_per_bin_gives_grains_message(packer: Any) -> None:
    parent = MapDataset.source([{"x": np.arange(3)}] * 4).to_iter_dataset()
    sentence = "If specified, `max_sequences_per_bin` must be a positive integer, but got -1."
    with pytest.raises(ValueError, match=_text(sentence)):
        packer(parent, length_struct={"x": 4}, num_packing_bins=2, max_sequences_per_bin=-1)


def _mostly_filtered(**options: Any) -> IterDataset[int]:
    ds = MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 10 == 0)
    return WithOptionsIterDataset(ds, DatasetOptions(**options))


def _threshold_text(field: str) -> str:
    return (
        r"Transformation .* skipped 90\.00 % of the last seen 1000 elements\. Please check the "
        r"filtering logic\. If this is intended, consider pre-filtering the input dataset "
        r"before training\. To disable this check, set "
        + _text(f"`grain.experimental.DatasetOptions.{field}` used in `WithOptionsIterDataset`")
        + r" to `None`\."
    )


def test_filter_raise_threshold_gives_grains_message() -> None:
    with pytest.raises(ValueError, match=_threshold_text("filter_raise_threshold_ratio")):
        list(_mostly_filtered(filter_raise_threshold_ratio=0.5))


def test_filter_warn_threshold_logs_grains_message(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="chute"):
        assert len(list(_mostly_filtered(filter_warn_threshold_ratio=0.5))) == 300
    pattern = re.compile(_threshold_text("filter_warn_threshold_ratio"))
    assert any(pattern.match(message) for message in caplog.messages)


@pytest.mark.parametrize(
    ("lengths", "sentence"),
    [
        ([3, 2], "ZipIterDataset argument 2 is shorter than argument 1"),
        ([2, 3], "ZipIterDataset argument 2 is longer than argument 1"),
        ([2, 2, 3], "ZipIterDataset argument 3 is longer than arguments 1-2"),
    ],
)
def test_strict_zip_of_unequal_lengths_gives_grains_message(
    lengths: list[int], sentence: str
) -> None:
    zipped = ZipIterDataset([MapDataset.range(n).to_iter_dataset() for n in lengths])
    with pytest.raises(ValueError, match=_text(sentence)):
        list(zipped)


def test_mixing_an_empty_dataset_gives_grains_message() -> None:
    sentence = (
        "All datasets must have positive length for mixing, but dataset(s) at index 1 "
        "(RangeMapDataset(start=0, stop=0, step=1)) have length 0."
    )
    with pytest.raises(ValueError, match=_text(sentence)):
        MapDataset.mix([MapDataset.range(3), MapDataset.range(0)])


def test_mixing_with_a_zero_weight_gives_grains_message() -> None:
    with pytest.raises(ValueError, match="Must specify all non-zero proportions for mixing."):
        MapDataset.mix([MapDataset.range(3), MapDataset.range(3)], [1, 0])


def test_concatenating_an_infinite_dataset_gives_grains_message() -> None:
    with pytest.raises(ValueError, match=r"Cannot concatenate infinite datasets\. .* is infinite"):
        MapDataset.concatenate([MapDataset.range(3).repeat(), MapDataset.range(3)])


def test_reprs_of_mixes_and_sources_are_grains() -> None:
    mixed = MapDataset.mix([MapDataset.range(3), MapDataset.range(4)], [1, 2])
    assert repr(mixed) == (
        "MixedMapDataset(parent_lengths=[3, 4], selection_map=SelectionWithProportionsMap("
        "proportions=(100, 200), length=6))"
    )
    assert repr(RangeDataSource(0, 10, 2)) == "RangeDataSource(start=0, stop=10, step=2)"
    assert str(MapDataset.range(2, 10, 3)) == "RangeMapDataset(start=2, stop=10, step=3)"
    assert str(MapDataset.source([1, 2])) == "SourceMapDataset(source=list)"
    assert str(MapDataset.source(RangeDataSource(0, 3, 1))) == (
        "SourceMapDataset(source=RangeDataSource)"
    )


def test_repeat_after_an_infinite_repeat_names_the_parent() -> None:
    parent = MapDataset.range(3).repeat()
    sentence = f"Repeating already infinite dataset {parent} does nothing."
    with pytest.raises(ValueError, match=_text(sentence)):
        parent.repeat()
    assert len(parent) == sys.maxsize


@pytest.mark.parametrize(
    ("seed", "error", "grains_words"),
    [
        (-1, ValueError, "Seed should be positive 32-bit integer."),
        (2**32, ValueError, "Seed should be positive 32-bit integer."),
        (1.5, TypeError, "Expected seed of int type. Got seed with type <class 'float'>"),
        (None, ValueError, "Shuffling requires specifying a seed."),
    ],
)
def test_index_sampler_seed_errors_start_with_grains_words(
    seed: object, error: type, grains_words: str
) -> None:
    with pytest.raises(error) as info:
        chute.IndexSampler(10, chute.NoSharding(), shuffle=True, seed=seed)  # type: ignore[arg-type]
    assert str(info.value).startswith(grains_words)


# Argument checks: each bad call, the exception type Grain raises for it, and the sentence
# Grain 0.2.18 starts its message with (observed by making the same call with Grain).
# chute raises that type (or a subclass) and adds its own advice after "chute:".

_NO_SHARDING = chute.NoSharding()
_TOKENS = [{"x": np.arange(3)}]


class _Twice(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: Any) -> list[Any]:
        return [element, element]


def _loader(**kwargs: Any) -> Any:
    sampler = chute.SequentialSampler(3, _NO_SHARDING)
    return chute.DataLoader(data_source=[1, 2, 3], sampler=sampler, **kwargs)


def _concat_then_split(elements: list[Any], **kwargs: Any) -> Any:
    source = MapDataset.source(elements).to_iter_dataset()
    return list(ConcatThenSplitIterDataset(source, length_struct={"x": 4}, **kwargs))


def _interleave_next_index() -> Any:
    parents = [MapDataset.range(3).to_iter_dataset() for _ in range(2)]
    return get_next_index(iter(InterleaveIterDataset(parents, cycle_length=2)))


_BOS = BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS

_GRAINS_ARGUMENT_CHECKS: list[tuple[str, Any, type, str]] = [
    (
        "random_map without a seed",
        lambda: MapDataset.range(5).random_map(lambda x, rng: x),
        ValueError,
        "`random_map` requires a seed. Please either provide it with `ds.seed(seed)` before any "
        "random transformations or pass it directly with `ds.random_map(transform, seed=seed)`.",
    ),
    (
        "IterDataset.random_map without a seed",
        lambda: MapDataset.range(5).to_iter_dataset().random_map(lambda x, rng: x),
        ValueError,
        "`random_map` requires a seed. Please either provide it with `ds.seed(seed)` before any "
        "random transformations or pass it directly with `ds.random_map(transform, seed=seed)`.",
    ),
    (
        "shuffle without a seed",
        lambda: MapDataset.range(5).shuffle(),
        ValueError,
        "`shuffle` requires a seed. Please provide it with `ds.seed(seed)`",
    ),
    (
        "shuffle with a seed of 33 bits",
        lambda: MapDataset.range(5).shuffle(seed=2**32),
        ValueError,
        "Seed must be an integer between 0 and 2**32-1 (got seed=4294967296).",
    ),
    (
        "MapDataset.batch(0)",
        lambda: MapDataset.range(5).batch(0),
        ValueError,
        "batch_size must be positive.",
    ),
    (
        "IterDataset.batch(0)",
        lambda: MapDataset.range(5).to_iter_dataset().batch(0),
        ValueError,
        "batch_size must be positive.",
    ),
    (
        "MapDataset.batch after a flat map",
        lambda: FlatMapMapDataset(MapDataset.range(5), _Twice()).batch(2),
        ValueError,
        "`MapDataset.batch` can not follow `FlatMapMapDataset` because `FlatMapMapDataset` can "
        "discard elements. Convert `MapDataset` to `IterDataset` with `to_iter_dataset()` "
        "before calling `batch`.",
    ),
    (
        "transforms.Batch(0) in a DataLoader",
        lambda: _loader(operations=[chute.transforms.Batch(batch_size=0)]),
        ValueError,
        "batch_size must be positive.",
    ),
    (
        "legacy BatchOperation(0)",
        lambda: BatchOperation(batch_size=0),
        ValueError,
        "batch_size must be a positive integer. Got 0.",
    ),
    (
        "RebatchIterDataset(batch_size=0)",
        lambda: RebatchIterDataset(MapDataset.range(3).to_iter_dataset(), batch_size=0),
        ValueError,
        "batch_size must be positive.",
    ),
    (
        "batch_and_pad with more values than batch_size",
        lambda: batch_and_pad([np.zeros(2)] * 3, batch_size=2),
        ValueError,
        "Cannot batch 3 values to 2.",
    ),
    (
        "batch_and_pad with batch_size=0",
        lambda: batch_and_pad([np.zeros(2)] * 3, batch_size=0),
        ValueError,
        "Cannot batch 3 values to 0.",
    ),
    (
        "batch_and_pad with no values",
        lambda: batch_and_pad([], batch_size=2),
        ValueError,
        "Cannot batch 0 values.",
    ),
    (
        "IndexSampler(num_records=0)",
        lambda: chute.IndexSampler(num_records=0, shard_options=_NO_SHARDING),
        ValueError,
        "Invalid number of records in Sampler. Got 0 records, but number of records must be "
        "greater than 0.",
    ),
    (
        "SequentialSampler(num_records=0)",
        lambda: chute.SequentialSampler(num_records=0, shard_options=_NO_SHARDING),
        ValueError,
        "Invalid number of records in Sampler. Got 0 records, but number of records must be "
        "greater than 0.",
    ),
    (
        "IndexSampler(num_epochs=0)",
        lambda: chute.IndexSampler(5, _NO_SHARDING, num_epochs=0),
        ValueError,
        "Invalid number of epochs in Index Sampler.Got 0 epochs, but number of epochs must be "
        "greater than 0.",
    ),
    (
        "IndexSampler position past the end",
        lambda: chute.IndexSampler(5, _NO_SHARDING, num_epochs=1)[5],
        IndexError,
        "RecordMetadata object index is out of bounds; Got index 5, allowed indices should be "
        "in [0, 5]",
    ),
    (
        "endless IndexSampler at a negative position",
        lambda: chute.IndexSampler(5, _NO_SHARDING)[-1],
        IndexError,
        "RecordMetadata object index is out of bounds; Got index -1, allowed indices should be "
        "in [0, None]",
    ),
    (
        "SequentialSampler position past the end",
        lambda: chute.SequentialSampler(5, _NO_SHARDING)[7],
        IndexError,
        "RecordMetadata object index is out of bounds; Got index 7, allowed indices should be "
        "in [0, 5]",
    ),
    (
        "ShardOptions with shard_index == shard_count",
        lambda: chute.ShardOptions(shard_index=3, shard_count=3),
        ValueError,
        "Shard shard_index must be in [0, shard_count - 1], shard_count was 3 and shard_index "
        "was 3.",
    ),
    (
        "ShardOptions with a negative shard_index",
        lambda: chute.ShardOptions(shard_index=-1, shard_count=2),
        ValueError,
        "Shard shard_index must be in [0, shard_count - 1], shard_count was 2 and shard_index "
        "was -1.",
    ),
    (
        "ShardOptions(shard_count=0)",
        lambda: chute.ShardOptions(shard_index=0, shard_count=0),
        ValueError,
        "Number of shards must be a positive integer but got 0.",
    ),
    (
        "DataLoader(worker_count=-1)",
        lambda: _loader(worker_count=-1),
        ValueError,
        "Worker count should be greater than or equal zero.Current worker_count is -1.",
    ),
    (
        "DataLoader(worker_buffer_size=-1)",
        lambda: _loader(worker_buffer_size=-1),
        ValueError,
        "Worker buffer size must be greater than or equal zero.Current worker_buffer_size is -1.",
    ),
    (
        "ZipMapDataset over parents of unequal length",
        lambda: ZipMapDataset([MapDataset.range(3), MapDataset.range(4)]),
        ValueError,
        "All parents must have the same length.",
    ),
    (
        "ZipMapDataset of no parents",
        lambda: ZipMapDataset([]),
        ValueError,
        "At least one parent must be provided.",
    ),
    (
        "ZipIterDataset of no parents",
        lambda: ZipIterDataset([]),
        ValueError,
        "At least one parent must be provided.",
    ),
    (
        "LimitIterDataset(count=0)",
        lambda: LimitIterDataset(MapDataset.range(3).to_iter_dataset(), count=0),
        ValueError,
        "Count must be a non-negative integer. Got 0",
    ),
    (
        "MapDataset.repeat(0)",
        lambda: MapDataset.range(3).repeat(0),
        ValueError,
        "num_epochs must be positive, but got 0.",
    ),
    (
        "RepeatIterDataset(num_epochs=-1)",
        lambda: RepeatIterDataset(MapDataset.range(3).to_iter_dataset(), num_epochs=-1),
        ValueError,
        "num_epochs must be positive, but got -1.",
    ),
    (
        "MapDataset.slice of an int",
        lambda: MapDataset.range(3).slice(1),  # type: ignore[arg-type]
        ValueError,
        "sl is not a slice: <class 'int'>",
    ),
    (
        "IterDataset.mix with a zero weight",
        lambda: IterDataset.mix([MapDataset.range(3).to_iter_dataset()] * 2, [1, 0]),
        ValueError,
        "Must specify all non-zero proportions for mixing.",
    ),
    (
        "ThreadPrefetchIterDataset(prefetch_buffer_size=-1)",
        lambda: ThreadPrefetchIterDataset(
            MapDataset.range(3).to_iter_dataset(), prefetch_buffer_size=-1
        ),
        ValueError,
        "`prefetch_buffer_size` must be greater than or equal to 0, got -1.",
    ),
    (
        "ReadOptions(num_threads=-1)",
        lambda: chute.ReadOptions(num_threads=-1),
        ValueError,
        "num_threads must be non-negative, got -1",
    ),
    (
        "ReadOptions(prefetch_buffer_size=-1)",
        lambda: chute.ReadOptions(prefetch_buffer_size=-1),
        ValueError,
        "prefetch_buffer_size must be non-negative, got -1",
    ),
    (
        "SharedMemoryDataSource of nothing",
        lambda: chute.sources.SharedMemoryDataSource(),
        ValueError,
        "Elements or name must be provided.",
    ),
    (
        "config.update of an unknown option",
        lambda: chute.config.update("no_such_option", 1),
        ValueError,
        "Unrecognized config option: no_such_option",
    ),
    (
        "setting a config option as an attribute",
        lambda: setattr(chute.config, "py_debug_mode", True),
        ValueError,
        "Please use update().",
    ),
    (
        "ElasticIterator with a batch that does not split over the shards",
        lambda: next(iter(ElasticIterator(MapDataset.range(10), 3, chute.ShardOptions(0, 2)))),
        ValueError,
        "Global batch size 3 is not divisible by shard count 2.",
    ),
    (
        "ElasticIterator(global_batch_size=0)",
        lambda: next(iter(ElasticIterator(MapDataset.range(10), 0, chute.ShardOptions(0, 1)))),
        ValueError,
        "batch_size must be positive.",
    ),
    (
        "ElasticIterator over a filter",
        lambda: ElasticIterator(
            MapDataset.range(10).filter(lambda x: True).map(lambda x: x),
            2,
            chute.ShardOptions(0, 1),
        ),
        ValueError,
        "ElasticIterator does not support `filter` transformation.",
    ),
    (
        "ConcatThenSplitIterDataset with a BOS token but no BOS handling",
        lambda: _concat_then_split(_TOKENS, bos_token_id=1),
        ValueError,
        "bos_handling=BOSHandling.DO_NOTHING indicates that BOS handling is not used. So "
        "bos_token_id and bos_features should not be set.",
    ),
    (
        "ConcatThenSplitIterDataset with BOS handling but no token",
        lambda: _concat_then_split(_TOKENS, bos_handling=_BOS, bos_features=["x"]),
        ValueError,
        "bos_token_id must be set if bos_handling is BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS.",
    ),
    (
        "ConcatThenSplitIterDataset with a BOS feature that is a meta feature",
        lambda: _concat_then_split(
            _TOKENS, bos_handling=_BOS, bos_token_id=1, bos_features={"x"}, meta_features={"x"}
        ),
        ValueError,
        "bos_features and meta_features should not overlap. bos_features: {'x'}, "
        "meta_features: {'x'}",
    ),
    (
        "ConcatThenSplitIterDataset over elements that are not dicts",
        lambda: _concat_then_split([[np.arange(3)]]),
        ValueError,
        "Parent elements must be unnested dictionaries but got list<ndarray>[1, 3].",
    ),
    (
        "ConcatThenSplitIterDataset over elements with other features",
        lambda: _concat_then_split([{"y": np.arange(3, dtype=np.int64)}]),
        ValueError,
        "Parent element has structure {'y': 'int64[3]'} but target sequence length is "
        "{'x': 4}. There must be a sequence length for each feature.",
    ),
    (
        "apply() of something that is not a transform",
        lambda: MapDataset.range(3).apply(3),  # type: ignore[arg-type]
        NotImplementedError,
        "Transformation type: 3 is not supported.",
    ),
    (
        "get_next_index of an interleave of two datasets",
        _interleave_next_index,
        NotImplementedError,
        "get_next_index is not supported for InterleaveDatasetIterator with more than one dataset.",
    ),
    (
        "ArrayRecordDataSource of no paths",
        lambda: chute.ArrayRecordDataSource([]),
        ValueError,
        "Paths sequence can not be of 0 length",
    ),
]


@pytest.mark.parametrize(
    ("bad_call", "grains_type", "grains_sentence"),
    [case[1:] for case in _GRAINS_ARGUMENT_CHECKS],
    ids=[case[0] for case in _GRAINS_ARGUMENT_CHECKS],
)
def test_argument_checks_start_with_grains_sentence_then_give_chutes_advice(
    bad_call: Any, grains_type: type, grains_sentence: str
) -> None:
    with pytest.raises(grains_type) as info:
        bad_call()
    message = str(info.value)
    assert message.startswith(grains_sentence)
    assert "chute: " in message[len(grains_sentence) :]


def test_restoring_a_missing_checkpoint_file_gives_grains_message(tmp_path: Any) -> None:
    from chute.checkpoint import CheckpointHandler

    missing = tmp_path / "no_such_step"
    iterator = iter(MapDataset.range(3).to_iter_dataset())
    with pytest.raises(ValueError) as info:
        CheckpointHandler().restore(missing, item=iterator)
    assert isinstance(info.value, FileNotFoundError)  # what chute raised before, still caught
    assert str(info.value).startswith(f"File {missing}/process_0-of-1.json does not exist.")


def _starts_with_grains_then_chutes(message: str, grains_sentence: str) -> None:
    assert message.startswith(grains_sentence), message
    assert "chute: " in message[len(grains_sentence) :]


@pytest.mark.parametrize("iterate", [False, True])
@pytest.mark.parametrize(
    "elements",
    [[np.zeros(2), np.zeros(3)], [{"a": np.zeros(2)}, {"a": np.zeros(3)}], [{"a": 1}, {"b": 2}]],
    ids=["shapes", "nested shapes", "structures"],
)
def test_batching_unlike_elements_starts_with_grains_sentence(
    elements: list[Any], iterate: bool
) -> None:
    ds: Any = MapDataset.source(elements)
    if iterate:
        ds = ds.to_iter_dataset()
    with pytest.raises(ValueError) as info:
        list(ds.batch(2))
    grains = "Expected all input elements to have the same structure but got:\n"
    _starts_with_grains_then_chutes(str(info.value), grains)


@pytest.mark.parametrize(
    ("packer", "grains_name"),
    [(FirstFitPackIterDataset, "PackedBatch"), (BestFitPackIterDataset, "packer")],
)
def test_a_sequence_longer_than_its_bin_starts_with_grains_sentence(
    packer: Any, grains_name: str
) -> None:
    rows = [{"row": np.arange(3)}, {"row": np.arange(9)}]
    ds = packer(
        MapDataset.source(rows).to_iter_dataset(), length_struct={"row": 5}, num_packing_bins=2
    )
    with pytest.raises(ValueError) as info:
        list(ds)
    grains = (
        f"Inputs to {grains_name} must be truncated to max length. Exceeds: "
        "(feature_path, feature_length, max_length) = [(('row',), 9, 5)]"
    )
    _starts_with_grains_then_chutes(str(info.value), grains)
    assert "element 1" in str(info.value)


@pytest.mark.parametrize(
    ("lengths", "sentence"),
    [
        ([3, 2], "ZipIterDataset argument 2 is shorter than argument 1."),
        ([2, 2, 3], "ZipIterDataset argument 3 is longer than arguments 1-2."),
    ],
)
def test_strict_zip_gives_grains_sentence_then_chutes_advice(
    lengths: list[int], sentence: str
) -> None:
    zipped = ZipIterDataset([MapDataset.range(n).to_iter_dataset() for n in lengths])
    with pytest.raises(ValueError) as info:
        list(zipped)
    assert str(info.value).startswith(f"{sentence} chute: stage zip")


def _keep_tenth(x: int) -> bool:
    return x % 10 == 0


def test_filter_threshold_names_the_stage_as_grain_does() -> None:
    import inspect

    path = inspect.getsourcefile(_keep_tenth)
    assert path is not None
    where = ".../" + "/".join(path.split("/")[-3:])
    line = inspect.getsourcelines(_keep_tenth)[1]
    raise_half = DatasetOptions(filter_raise_threshold_ratio=0.5)
    filtered = MapDataset.range(3000).to_iter_dataset().filter(_keep_tenth)
    with pytest.raises(ValueError) as info:
        list(WithOptionsIterDataset(filtered, raise_half))
    grains = f"Transformation FilterDatasetIterator(transform=_keep_tenth @ {where}:{line}) skipped"
    _starts_with_grains_then_chutes(str(info.value), grains)
    holes = MapDataset.range(3000).filter(_keep_tenth).to_iter_dataset()
    with pytest.raises(ValueError) as info:
        list(WithOptionsIterDataset(holes, raise_half))
    grains = (
        "Transformation PrefetchDatasetIterator(read_options=ReadOptions(num_threads=16, "
        "prefetch_buffer_size=500), allow_nones=False) skipped 90.00 %"
    )
    _starts_with_grains_then_chutes(str(info.value), grains)


def test_str_of_an_in_memory_source_is_grains() -> None:
    source = chute.InMemoryDataSource(list(range(12)))
    try:
        assert str(source) == f"InMemoryDataSource(name={source.name}, len=12)"
    finally:
        source.close()
        source.unlink()

"""Every public name of Grain 0.2.18, namespace by namespace, exists in chute.

The lists are Grain's public names (``dir()`` of each module, private names
left out), written down here: chute never imports Grain.
"""

from __future__ import annotations

import importlib

import pytest

GRAIN_0_2_18 = {
    "": [
        "DataLoader", "DataLoaderIterator", "DatasetIterator", "IterDataset", "MapDataset",
        "MultiprocessingOptions", "ReadOptions", "Record", "RecordMetadata", "checkpoint",
        "config", "constants", "experimental", "load", "monitoring", "multiprocessing",
        "proto", "samplers", "sharding", "sources", "transforms",
    ],
    "experimental": [
        "BOSHandling", "BestFitPackIterDataset", "CacheIterDataset",
        "ConcatThenSplitIterDataset", "DatasetOptions", "ElasticIterator",
        "ExecutionTrackingMode", "FirstFitPackIterDataset", "FlatMapIterDataset",
        "FlatMapMapDataset", "FlatMapTransform", "InterleaveIterDataset", "LimitIterDataset",
        "MapWithIndexTransform", "PackAndBatchOperation", "ParquetIterDataset",
        "PerformanceConfig", "RebatchIterDataset", "RepeatIterDataset", "RngPool",
        "ShapeDtypeStruct", "ShapeDtypeStructProtocol", "TFRecordIterDataset",
        "ThreadPrefetchDatasetIterator", "ThreadPrefetchIterDataset",
        "WindowShuffleIterDataset", "WindowShuffleMapDataset", "WithOptionsIterDataset",
        "ZipIterDataset", "ZipMapDataset", "apply_transformations",
        "assert_equal_output_after_checkpoint", "batch_and_pad", "device_put",
        "get_element_spec", "get_next_index", "index_shuffle", "multithread_prefetch",
        "pick_performance_config", "set_next_index",
    ],
    "transforms": [
        "Batch", "DatasetSelectionMap", "Filter", "Map", "MapWithIndex", "RandomMap",
        "TfRandomMap", "Transformation", "Transformations",
    ],
    "sources": [
        "ArrayRecordDataSource", "RandomAccessDataSource", "RangeDataSource",
        "SharedMemoryDataSource",
    ],
    "samplers": ["IndexSampler", "Sampler", "SequentialSampler"],
    "sharding": ["NoSharding", "ShardByJaxProcess", "ShardOptions"],
    "checkpoint": ["CheckpointHandler"],
    "multiprocessing": [
        "MultiprocessingOptions", "SharedMemoryArray", "SharedMemoryArrayMetadata",
    ],
    "constants": [
        "DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED",
    ],
    "python": [
        "ArrayRecordDataSource", "Batch", "BatchOperation", "DATASET_INDEX", "DataLoader",
        "DatasetIterator", "DatasetSelectionMap", "EPOCH", "FilterOperation",
        "FilterTransform", "INDEX", "InMemoryDataSource", "IndexSampler", "IterDataset",
        "META_FEATURES", "MapDataset", "MapOperation", "MapTransform",
        "MapWithIndexTransform", "MultiprocessingOptions", "NoSharding", "Operation",
        "PyGrainCheckpointHandler", "PyGrainDatasetIterator", "RECORD", "RECORD_KEY",
        "RandomAccessDataSource", "RandomMapOperation", "RandomMapTransform",
        "RangeDataSource", "ReadOptions", "Record", "RecordMetadata", "SEED", "Sampler",
        "SequentialSampler", "ShardByJaxProcess", "ShardOptions", "SharedMemoryArray",
        "Transformation", "Transformations", "config", "experimental", "load",
    ],
}  # fmt: skip

# Names chute leaves out on purpose, with the reason.
NOT_PROVIDED = {
    ("", "proto"): "Grain's protocol-buffer messages of its execution summaries",
}
# Names that are still to come (each must be removed from here when it lands).
PENDING: set[tuple[str, str]] = set()


@pytest.mark.parametrize("namespace", sorted(GRAIN_0_2_18))
def test_every_grain_name_exists_in_chute(namespace: str) -> None:
    module = importlib.import_module("chute" + ("." + namespace if namespace else ""))
    missing = {
        (namespace, name)
        for name in GRAIN_0_2_18[namespace]
        if not hasattr(module, name) and (namespace, name) not in NOT_PROVIDED
    }
    assert missing == {key for key in PENDING if key[0] == namespace}


@pytest.mark.parametrize("namespace", sorted(GRAIN_0_2_18))
def test_public_modules_list_grains_names_in_all(namespace: str) -> None:
    module = importlib.import_module("chute" + ("." + namespace if namespace else ""))
    exported = set(getattr(module, "__all__", ()))
    expected = {
        name
        for name in GRAIN_0_2_18[namespace]
        if (namespace, name) not in NOT_PROVIDED and (namespace, name) not in PENDING
    }
    assert expected <= exported


def test_legacy_namespace_is_the_same_objects() -> None:
    import chute
    import chute.python as legacy
    import chute.python.experimental as legacy_experimental

    assert legacy.MapDataset is chute.MapDataset
    assert legacy.PyGrainDatasetIterator is chute.DataLoaderIterator
    assert legacy.PyGrainCheckpointHandler is chute.checkpoint.CheckpointHandler
    assert legacy.InMemoryDataSource is chute.SharedMemoryDataSource
    assert legacy.config is chute.config
    assert legacy.INDEX == chute.constants.INDEX == "_index"
    assert legacy_experimental.ThreadPrefetchDatasetIterator is (
        chute.experimental.ThreadPrefetchDatasetIterator
    )
    assert legacy.experimental.__all__ == chute.experimental.__all__


def test_the_readme_marks_new_only_names_grain_lacks() -> None:
    """A row of the README's table of Grain names that starts with "| — |" says chute added
    the names it writes as ``chute.X``: none of them may be one of Grain 0.2.18's."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    grain_names = {name for names in GRAIN_0_2_18.values() for name in names}
    for row in (line for line in readme.splitlines() if line.startswith("| — |")):
        named = row.split("|")[2]
        found = {n.rpartition(".")[2] for n in re.findall(r"`chute\.([\w.]+)`", named)}
        assert not found & grain_names, f"{sorted(found & grain_names)} are Grain's: {row}"

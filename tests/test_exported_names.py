"""Pins the public surface: adding or removing a name must be deliberate."""

from __future__ import annotations

import chute


def test_top_level_names() -> None:
    assert sorted(chute.__all__) == chute.__all__
    assert set(chute.__all__) >= {
        "Batch",
        "DatasetIterator",
        "FilterTransform",
        "IterDataset",
        "MapDataset",
        "MapTransform",
        "MapWithIndexTransform",
        "RandomMapTransform",
        "ReadOptions",
        "experimental",
        "transforms",
        # chute's own errors
        "ChuteError",
        "CredentialsNotFoundError",
        "ObjectStoreError",
    }
    for name in chute.__all__:
        assert hasattr(chute, name), name


def test_transforms_names() -> None:
    assert chute.transforms.__all__ == [
        "Batch",
        "DatasetSelectionMap",
        "Filter",
        "FlatMap",
        "Map",
        "MapWithIndex",
        "RandomMap",
        "TfRandomMap",
        "Transformation",
        "Transformations",
    ]
    assert chute.MapTransform is chute.transforms.Map
    assert chute.experimental.FlatMapTransform is chute.transforms.FlatMap


def test_experimental_names() -> None:
    expected = {
        "DatasetSelectionMap",
        "FlatMapIterDataset",
        "FlatMapMapDataset",
        "FlatMapTransform",
        "LimitIterDataset",
        "RebatchIterDataset",
        "RepeatIterDataset",
        "ThreadPrefetchIterDataset",
        "WindowShuffleIterDataset",
        "WindowShuffleMapDataset",
        "ZipIterDataset",
        "ZipMapDataset",
        "assert_equal_output_after_checkpoint",
        "batch_and_pad",
        "get_next_index",
        "index_shuffle",
        "multithread_prefetch",
        "set_next_index",
        "BOSHandling",
        "BestFitPackIterDataset",
        "CacheIterDataset",
        "ConcatThenSplitIterDataset",
        "DatasetOptions",
        "ExecutionTrackingMode",
        "FirstFitPackIterDataset",
        "InterleaveIterDataset",
        "PackAndBatchOperation",
        "RngPool",
        "ShapeDtypeStruct",
        "ShapeDtypeStructProtocol",
        "WithOptionsIterDataset",
        "apply_transformations",
        "get_element_spec",
        # chute's own additions
        "ErrorBudgetIterDataset",
        "PipelinePicture",
        "VirtualShardsIterDataset",
        "merge_states",
        "skip_errors",
        "virtual_shards",
        "visualize",
    }
    assert sorted(chute.experimental.__all__) == chute.experimental.__all__
    assert set(chute.experimental.__all__) >= expected
    for name in chute.experimental.__all__:
        assert hasattr(chute.experimental, name), name


def test_testing_names() -> None:
    import chute.testing

    assert chute.testing.__all__ == ["ResumeReport", "Topology", "assert_resumes_exactly"]
    for name in chute.testing.__all__:
        assert hasattr(chute.testing, name), name


def test_data_loader_names() -> None:
    assert set(chute.__all__) >= {
        "BatchOperation",
        "DataLoader",
        "DataLoaderIterator",
        "FilterOperation",
        "InMemoryDataSource",
        "IndexSampler",
        "MapOperation",
        "NoSharding",
        "RandomAccessDataSource",
        "RandomMapOperation",
        "RangeDataSource",
        "Record",
        "RecordMetadata",
        "SequentialSampler",
        "ShardByJaxProcess",
        "ShardOptions",
        "SharedMemoryDataSource",
        "MultiprocessingOptions",
        "load",
        "multiprocessing",
        "samplers",
        "sharding",
        "sources",
    }
    assert chute.InMemoryDataSource is chute.SharedMemoryDataSource
    assert chute.samplers.__all__ == ["IndexSampler", "Sampler", "SequentialSampler"]
    assert chute.sharding.__all__ == ["NoSharding", "ShardByJaxProcess", "ShardOptions"]
    assert chute.sources.__all__ == [
        "ArrayRecordDataSource",
        "ParquetDataSource",
        "RandomAccessDataSource",
        "RangeDataSource",
        "SharedMemoryDataSource",
    ]
    assert chute.ArrayRecordDataSource is chute.sources.ArrayRecordDataSource
    assert {"ParquetIterDataset", "TFRecordIterDataset", "write_array_record"} <= set(
        chute.experimental.__all__
    )


def test_every_chute_exception_is_exported_and_listed_in_the_errors_module() -> None:
    from chute._core import errors
    from chute._execution import worker_process

    def tree(cls: type) -> list[type]:
        return [cls] + [c for sub in cls.__subclasses__() for c in tree(sub)]

    for cls in tree(chute.ChuteError):
        assert getattr(chute, cls.__name__) is cls, cls
        assert cls.__name__ in chute.__all__
        assert cls.__name__ in (errors.__doc__ or ""), cls
    assert chute.WorkerDiedError is worker_process.WorkerDiedError  # the same class

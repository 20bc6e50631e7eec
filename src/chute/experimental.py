"""Experimental stages and helpers, named as in Grain, plus chute's own additions.

chute's own additions (not in Grain): ``ErrorBudgetIterDataset`` and
``skip_errors``, which skip failing elements up to a budget (the same budget
as ``DatasetOptions(max_errors=..., max_error_ratio=...)``),
``TFRecordIterDataset``, a checksum-verifying TFRecord reader in pure Python,
``write_array_record``, which writes records into ArrayRecord shards, and
``visualize``, a picture of a pipeline (text, Graphviz DOT, SVG or HTML) that
shows where its time went when it kept statistics.
"""

from chute._accel.device_put import device_put
from chute._accel.multihost import make_global_batch
from chute._accel.torch import to_torch, to_torch_dataset
from chute._core.dataset_options import DatasetOptions, ExecutionTrackingMode
from chute._core.element_spec import ShapeDtypeStruct, ShapeDtypeStructProtocol
from chute._core.index_shuffle import index_shuffle
from chute._core.rng_pool import RngPool
from chute._core.transforms import FlatMap as FlatMapTransform
from chute._core.transforms import MapWithIndex as MapWithIndexTransform
from chute._core.transforms import apply_transformations
from chute._execution.performance import PerformanceConfig, pick_performance_config
from chute._loader.pack_and_batch import PackAndBatchOperation
from chute._sources.array_record.writer import write_array_record
from chute._sources.parquet.iter import ParquetIterDataset
from chute._sources.tfrecord import TFRecordIterDataset
from chute._stages.batch import batch_and_pad
from chute._stages.cache import CacheIterDataset
from chute._stages.concat_then_split import BOSHandling, ConcatThenSplitIterDataset
from chute._stages.conformance import assert_equal_output_after_checkpoint
from chute._stages.elastic import ElasticIterator
from chute._stages.element_spec import get_element_spec
from chute._stages.error_budget import ErrorBudgetIterDataset, skip_errors
from chute._stages.flat_map import FlatMapIterDataset, FlatMapMapDataset
from chute._stages.interleave import InterleaveIterDataset
from chute._stages.limit import LimitIterDataset
from chute._stages.mix import DatasetSelectionMap
from chute._stages.mix_weights import WeightSchedule, set_mix_weights
from chute._stages.multithread_prefetch import multithread_prefetch
from chute._stages.next_index import get_next_index, set_next_index
from chute._stages.packing_fit import BestFitPackIterDataset, FirstFitPackIterDataset
from chute._stages.rebatch import RebatchIterDataset
from chute._stages.repeat import RepeatIterDataset
from chute._stages.thread_prefetch import ThreadPrefetchDatasetIterator, ThreadPrefetchIterDataset
from chute._stages.virtual_shards import VirtualShardsIterDataset, merge_states, virtual_shards
from chute._stages.window_shuffle import WindowShuffleIterDataset, WindowShuffleMapDataset
from chute._stages.with_options import WithOptionsIterDataset
from chute._stages.zip import ZipIterDataset, ZipMapDataset
from chute._stats.reads import ReadStats
from chute._stats.summary import BufferStats, ExecutionSummary, StageStats, execution_summary
from chute._stats.visualize import PipelinePicture, visualize

__all__ = [
    "BOSHandling",
    "BestFitPackIterDataset",
    "BufferStats",
    "CacheIterDataset",
    "ConcatThenSplitIterDataset",
    "DatasetOptions",
    "DatasetSelectionMap",
    "ElasticIterator",
    "ErrorBudgetIterDataset",
    "ExecutionSummary",
    "ExecutionTrackingMode",
    "FirstFitPackIterDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "InterleaveIterDataset",
    "LimitIterDataset",
    "MapWithIndexTransform",
    "PackAndBatchOperation",
    "ParquetIterDataset",
    "PerformanceConfig",
    "PipelinePicture",
    "ReadStats",
    "RebatchIterDataset",
    "RepeatIterDataset",
    "RngPool",
    "ShapeDtypeStruct",
    "ShapeDtypeStructProtocol",
    "StageStats",
    "TFRecordIterDataset",
    "ThreadPrefetchDatasetIterator",
    "ThreadPrefetchIterDataset",
    "VirtualShardsIterDataset",
    "WeightSchedule",
    "WindowShuffleIterDataset",
    "WindowShuffleMapDataset",
    "WithOptionsIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
    "batch_and_pad",
    "device_put",
    "execution_summary",
    "get_element_spec",
    "get_next_index",
    "index_shuffle",
    "make_global_batch",
    "merge_states",
    "multithread_prefetch",
    "pick_performance_config",
    "set_mix_weights",
    "set_next_index",
    "skip_errors",
    "to_torch",
    "to_torch_dataset",
    "virtual_shards",
    "visualize",
    "write_array_record",
]

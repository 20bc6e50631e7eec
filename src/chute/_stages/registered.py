"""The stages that ``MapDataset``'s and ``IterDataset``'s fluent methods build, by name.

``chute._core`` may not import this package, so it reaches these names through
``chute._core.registry.stages``: ``chute._stages`` registers every name listed
here when it is imported.  Type checkers and editors read ``stages`` as this
module (an import under ``TYPE_CHECKING``, which never runs), so the body of
``MapDataset.map``, ``stages.MapMapDataset(self, transform)``, is checked
against the stage class and go-to-definition reaches it.
"""

from chute._stages.batch import BatchIterDataset, BatchMapDataset
from chute._stages.element_spec import spec_from_rules
from chute._stages.filter import FilterIterDataset, FilterMapDataset
from chute._stages.flat_map import FlatMapIterDataset, FlatMapMapDataset
from chute._stages.map import (
    MapIterDataset,
    MapMapDataset,
    MapWithIndexIterDataset,
    MapWithIndexMapDataset,
    RandomMapIterDataset,
    RandomMapMapDataset,
)
from chute._stages.mix import ConcatenateMapDataset, MixedMapDataset, SelectionMapDataset
from chute._stages.mix_iter import MixedIterDataset
from chute._stages.mp_prefetch import prefetch
from chute._stages.prefetch import PrefetchIterDataset
from chute._stages.repeat import RepeatMapDataset
from chute._stages.shuffle import ShuffleMapDataset
from chute._stages.slice import SliceMapDataset
from chute._stages.source_dataset import RangeMapDataset, SourceMapDataset
from chute._stages.virtual_shards import mp_prefetch

__all__ = [
    "BatchIterDataset",
    "BatchMapDataset",
    "ConcatenateMapDataset",
    "FilterIterDataset",
    "FilterMapDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "MapIterDataset",
    "MapMapDataset",
    "MapWithIndexIterDataset",
    "MapWithIndexMapDataset",
    "MixedIterDataset",
    "MixedMapDataset",
    "PrefetchIterDataset",
    "RandomMapIterDataset",
    "RandomMapMapDataset",
    "RangeMapDataset",
    "RepeatMapDataset",
    "SelectionMapDataset",
    "ShuffleMapDataset",
    "SliceMapDataset",
    "SourceMapDataset",
    "mp_prefetch",
    "prefetch",
    "spec_from_rules",
]

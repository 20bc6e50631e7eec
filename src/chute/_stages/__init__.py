"""One module per transformation; each holds a dataset node and its iterator.

Importing this package registers the stages that the fluent methods of
``MapDataset`` and ``IterDataset`` build, and the element-spec rules, with
``chute._core.registry`` (``_core`` imports nothing from here).
"""

from chute._core.registry import register_stages
from chute._stages import (  # noqa: F401
    batch,
    element_spec,
    error_budget,
    filter,
    flat_map,
    limit,
    map,
    mix,
    mix_iter,
    mp_prefetch,
    multithread_prefetch,
    prefetch,
    rebatch,
    repeat,
    shuffle,
    slice,
    source_dataset,
    thread_prefetch,
    window_shuffle,
    zip,
)

register_stages(
    BatchIterDataset=batch.BatchIterDataset,
    BatchMapDataset=batch.BatchMapDataset,
    ConcatenateMapDataset=mix.ConcatenateMapDataset,
    FilterIterDataset=filter.FilterIterDataset,
    FilterMapDataset=filter.FilterMapDataset,
    FlatMapIterDataset=flat_map.FlatMapIterDataset,
    FlatMapMapDataset=flat_map.FlatMapMapDataset,
    MapIterDataset=map.MapIterDataset,
    MapMapDataset=map.MapMapDataset,
    MapWithIndexIterDataset=map.MapWithIndexIterDataset,
    MapWithIndexMapDataset=map.MapWithIndexMapDataset,
    MixedIterDataset=mix_iter.MixedIterDataset,
    MixedMapDataset=mix.MixedMapDataset,
    PrefetchIterDataset=prefetch.PrefetchIterDataset,
    RandomMapIterDataset=map.RandomMapIterDataset,
    RandomMapMapDataset=map.RandomMapMapDataset,
    RangeMapDataset=source_dataset.RangeMapDataset,
    RepeatMapDataset=repeat.RepeatMapDataset,
    SelectionMapDataset=mix.SelectionMapDataset,
    ShuffleMapDataset=shuffle.ShuffleMapDataset,
    SliceMapDataset=slice.SliceMapDataset,
    SourceMapDataset=source_dataset.SourceMapDataset,
    mp_prefetch=mp_prefetch.mp_prefetch,
    prefetch=mp_prefetch.prefetch,
    spec_from_rules=element_spec.spec_from_rules,
)

"""One module per transformation; each holds a dataset node and its iterator.

Importing this package registers the stages that the fluent methods of
``MapDataset`` and ``IterDataset`` build, and the element-spec rules, with
``chute._core.registry`` (``_core`` imports nothing from here); ``registered``
lists them.
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
    registered,
    repeat,
    shuffle,
    slice,
    source_dataset,
    thread_prefetch,
    window_shuffle,
    zip,
)

register_stages(**{name: getattr(registered, name) for name in registered.__all__})

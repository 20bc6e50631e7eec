"""One module per transformation; each holds a dataset node and its iterator."""

from chute._stages import (  # noqa: F401
    batch,
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
    source,
    thread_prefetch,
    window_shuffle,
    zip,
)

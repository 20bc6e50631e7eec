"""The workloads of ``bench_workers.py``, one module each, and what they share.

* ``cpu``, ``images``, ``arrayrecord`` (its photos in ``photos``, its clean parent process
  in ``clean_parent``) and ``first_batch``: one workload each, a ``bench_*`` function
  that returns its results;
* ``harness``: sizes, output checks and the group of measurements every workload runs;
* ``processes``: the processes below the benchmark (/proc), worker shutdown after every
  ``close()``, and what is left at the end;
* ``memory``: the untimed run that measures peak memory;
* ``report``: the tables.

The limits (bare processes) and the peers' runners (Grain, PyTorch) are in
``benchmarks/runners.py``, which other benchmarks share.
"""

import runners

# Grain's spawned workers re-import the benchmark's script, and with it this package.
runners.mark_grain_flags_parsed()

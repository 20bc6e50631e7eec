# bench-requires: torch==2.13.0 pillow jax[cpu]
"""Worker-process benchmarks: chute's ``mp_prefetch`` against Grain's and PyTorch's DataLoader.

Four implementations run in one process, alternating, with 2 worker processes
each:

* ``chute`` and ``grain``: the very same pipeline code (a function that takes
  the module), then ``.mp_prefetch(MultiprocessingOptions(num_workers=2))``;
* ``torch``: ``torch.utils.data.DataLoader(dataset, batch_size=32,
  num_workers=2)`` over a map-style ``Dataset`` whose ``__getitem__(i)`` calls
  the same function on index ``i`` (the default collate);
* ``limit``: two bare processes, forked inside the timed run, each running the
  same function over half the items (``w::2``) and handing back nothing; the
  parent waits for both.

The workloads:

1. ``cpu``: ``MapDataset.range(N).map(work).to_iter_dataset().batch(32)``
   where ``work`` is about 1 ms of pure-Python arithmetic (its iteration count
   calibrated once at start); also chute with 0 workers.
2. ``images``: the same shape of pipeline whose map makes a seeded random
   224x224x3 uint8 image and flips it; rates also in MB/s of output batches.
   Also chute and PyTorch with 4 and 8 workers (more workers than cores), and the limit
   with 4 and 8 bare processes: what the machine itself loses with more processes than cores.
3. ``arrayrecord``: 5,000 JPEG-encoded 256x256 photos in one ArrayRecord
   file, read in a global shuffle, decoded with Pillow and cropped at random
   to 224x224 in the workers.
4. ``first_batch``: seconds from ``iter()`` to the first batch of the
   ``images`` pipeline, each trial in a fresh Python process, for a plain
   script and for one that has imported JAX and runs a background thread.

In ``arrayrecord`` PyTorch's DataLoader and the limit run in a clean parent
process (see ``CleanParent``): a process forked after an array_record reader was
opened cannot read with array_record itself.

Also: peak RSS of the parent and of the workers, whether the workers are gone
after every ``close()``, and whether /dev/shm is left with chute segments.

chute, grain and torch are imported inside ``main()`` (and the first-batch
child), not at the top: Grain's workers are spawned processes that re-import
this file, and they should import what a user's script would, not all three
libraries.

Run through ``bash benchmarks/run workers``; see README.md.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.connection import Client, Listener
from typing import Any

import numpy as np

import common
from common import Impl, Ratio

# Grain reads absl flags in its worker processes; with JAX installed next to it (this
# benchmark installs it for the first-batch trials) an unparsed flag crashes them.  Mark
# the flags as parsed, with their defaults, here at import time, which Grain's spawned
# workers repeat when they re-import this script.
try:
    from absl import flags as _absl_flags

    _absl_flags.FLAGS.mark_as_parsed()
except ImportError:  # pragma: no cover - absl comes with grain
    pass

TARGETS = {
    "cpu chute 2 workers/chute 0 workers": 1.6,
    "cpu chute 2 workers/grain 2 workers": 3.0,
    "cpu chute 2 workers/limit": 0.92,
    "cpu chute 2 workers/torch 2 workers": 1.05,
    "images chute/grain": 3.0,
    "images chute/limit": 0.85,
    "images chute/torch": 1.2,
    "images chute 8 workers/chute 2 workers": 0.9,
    "images parent peak torch/chute": 1.0,
    "arrayrecord chute/torch": 1.2,
    "first_batch torch time/chute time (plain)": 1.0,
    # PyTorch forks even this parent (JAX warns that this can deadlock); chute does not, and
    # its target for this parent is the 0.35 s below, so this ratio is shown without one.
    "first_batch torch time/chute time (jax-thread)": None,
    "first_batch chute plain": 0.5,  # seconds, at most
    "first_batch chute jax-thread": 0.35,  # seconds, at most
}

WORKERS = 2
MANY_WORKERS = (4, 8)  # images: more workers than the machine's 2 cores
BATCH = 32
SEED = 7  # the arrayrecord shuffle and torch.manual_seed
CPU_N = 4096  # 128 batches; about 4 s for chute with 0 workers, 2 s with 2
CPU_WORK_S = 1e-3  # the calibrated cost of one call of ``work``
IMAGES_N = 4096  # 128 batches of 32 x 224x224x3 uint8 (616 MB per epoch)
IMAGE_SHAPE = (224, 224, 3)
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))
PHOTOS_N = 5000  # JPEG records of the arrayrecord workload
PHOTO_SIDE = 256  # stored photos are 256x256x3; the crop is IMAGE_SHAPE
CANVAS_SIDE = 1024  # photos are windows of a few large generated scenes
CANVASES = 8
JPEG_QUALITY = 90
FIRST_BATCH_TRIALS = 3
FIRST_BATCH_LIBS = ("chute", "torch", "grain")
FIRST_BATCH_PARENTS = ("plain", "jax-thread")
CHECK_FULL_BATCHES = 3  # image batches compared value by value; the others by hashes
SHUTDOWN_WAIT_S = 10.0  # how long workers may take to exit after close()
SAMPLE_EVERY_S = 0.02  # the memory sampler's period
CHILD_FLAG = "--first-batch-child"
CHILD_TAG = "FIRST_BATCH_RESULT "
CLEAN_PARENT_FLAG = "--clean-parent"
LIMIT = "limit"
MIB = 1 << 20

# -- the pipelines ------------------------------------------------------------------------------


def work(x: int, iterations: int) -> int:
    """About 1 ms of pure-Python arithmetic (``iterations`` is calibrated); holds the GIL."""
    acc = x
    for i in range(iterations):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def image(index: int) -> np.ndarray:
    """A random 224x224x3 uint8 image seeded by ``index``, flipped left to right."""
    rng = np.random.default_rng(index)
    img = rng.integers(0, 256, size=IMAGE_SHAPE, dtype=np.uint8)
    return np.ascontiguousarray(img[:, ::-1])


def decode_and_crop(record: bytes, rng: np.random.Generator) -> np.ndarray:
    """Decodes a JPEG record with Pillow; a 224x224 crop at offsets drawn from ``rng``."""
    from PIL import Image  # here, not at the top: the other workloads' workers never need it

    with Image.open(io.BytesIO(record)) as img:
        pixels = np.asarray(img)
    top, left = rng.integers(0, PHOTO_SIDE - IMAGE_SHAPE[0] + 1, size=2)
    return np.ascontiguousarray(pixels[top : top + IMAGE_SHAPE[0], left : left + IMAGE_SHAPE[1]])


def with_workers(lib: Any, ds: Any, workers: int) -> Any:
    """``ds.mp_prefetch`` with ``workers`` processes (0: chute returns ``ds`` itself)."""
    return ds.mp_prefetch(lib.multiprocessing.MultiprocessingOptions(num_workers=workers))


def cpu_pipeline(lib: Any, iterations: int, workers: int) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    ds = (
        lib.MapDataset.range(CPU_N)
        .map(functools.partial(work, iterations=iterations))
        .to_iter_dataset()
        .batch(BATCH)
    )
    return with_workers(lib, ds, workers)


def images_pipeline(lib: Any, workers: int = WORKERS) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    ds = lib.MapDataset.range(IMAGES_N).map(image).to_iter_dataset().batch(BATCH)
    return with_workers(lib, ds, workers)


def photos_map(lib: Any, path: str) -> Any:
    """The same code for both libraries: shuffled records, decoded and cropped."""
    return (
        lib.MapDataset.source(lib.sources.ArrayRecordDataSource(path))
        .seed(SEED)
        .shuffle()
        .random_map(decode_and_crop)
    )


def photos_pipeline(lib: Any, path: str, workers: int = WORKERS) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    return with_workers(lib, photos_map(lib, path).to_iter_dataset().batch(BATCH), workers)


def expected_first_image_batch() -> np.ndarray:
    """Worker 0 reads indices 0, 2, 4, ...; its first batch comes first."""
    return np.stack([image(i) for i in range(0, WORKERS * BATCH, WORKERS)])


def worker_order(n: int, workers: int) -> list[int]:
    """The element order of ``mp_prefetch``: worker w batches w, w + W, ...; the parent
    takes one batch from each worker in turn."""
    batches = []
    for w in range(workers):
        mine = list(range(w, n, workers))
        batches.append([mine[s : s + BATCH] for s in range(0, len(mine), BATCH)])
    order: list[int] = []
    for k in range(max(len(b) for b in batches)):
        for own in batches:
            if k < len(own):
                order.extend(own[k])
    return order


# -- PyTorch's DataLoader -------------------------------------------------------------------------


def torch_datasets(torch: Any) -> Any:
    """Map-style datasets whose ``__getitem__(i)`` calls the workload's function on ``i``.

    Made here, from the ``torch`` module, because torch is imported in ``main()`` only.
    """

    class WorkDataset(torch.utils.data.Dataset):
        def __init__(self, iterations: int) -> None:
            self.iterations = iterations

        def __len__(self) -> int:
            return CPU_N

        def __getitem__(self, index: int) -> int:
            return work(index, self.iterations)

    class ImageDataset(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return IMAGES_N

        def __getitem__(self, index: int) -> np.ndarray:
            return image(index)

    class PhotoDataset(torch.utils.data.Dataset):
        """The ArrayRecord file's photos, decoded and cropped; the reader opens in each worker."""

        def __init__(self, path: str, n: int) -> None:
            self.path, self.n, self.source = path, n, None

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, index: int) -> np.ndarray:
            if self.source is None:
                from array_record.python.array_record_data_source import ArrayRecordDataSource

                self.source = ArrayRecordDataSource(self.path)
            return decode_and_crop(self.source[index], np.random.default_rng(index))

    return types.SimpleNamespace(work=WorkDataset, images=ImageDataset, photos=PhotoDataset)


def torch_loader(torch: Any, dataset: Any, workers: int, shuffle: bool = False) -> Any:
    if shuffle:
        torch.manual_seed(SEED)
    return torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, shuffle=shuffle, num_workers=workers
    )


def shutdown_torch(it: Any) -> None:
    """What the DataLoader iterator's ``__del__`` does, done now: stop and join its workers."""
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


# -- the limit: bare processes --------------------------------------------------------------------


def bare_processes(job: Callable[[int], None], processes: int = WORKERS) -> Iterator[Any]:
    """Forks ``processes`` processes running ``job(w)``, waits for them; an empty iterator.

    A process hands nothing back: its exit status says whether ``job`` finished.
    """
    pending: list[int] = []
    codes: list[int] = []
    try:
        for w in range(processes):
            pid = os.fork()
            if pid == 0:  # the child: the job, then out, skipping the parent's exit handlers
                status = 1
                try:
                    job(w)
                    status = 0
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(status)
            pending.append(pid)
        while pending:
            _, status = os.waitpid(pending[0], 0)
            pending.pop(0)
            codes.append(os.waitstatus_to_exitcode(status))
    finally:
        for pid in pending:  # interrupted (a timeout): no process outlives the run
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    if any(codes):
        raise RuntimeError(f"the bare processes exited with {codes}")
    return iter(())


def bare_map(fn: Callable[[int], Any], n: int, count: int = WORKERS) -> Callable[[int], None]:
    """The job of bare process w of ``count``: ``fn(i)`` for i in w, w + count, ..., dropped."""

    def job(w: int) -> None:
        for i in range(w, n, count):
            fn(i)

    return job


def bare_map_and_stack(
    fn: Callable[[int], Any], n: int, count: int = WORKERS
) -> Callable[[int], None]:
    """``bare_map``, plus stacking each 32 results into one reused batch array, as a
    pipeline that ends with ``batch(32)`` must; nothing is handed back."""

    def job(w: int) -> None:
        mine = range(w, n, count)
        out = np.empty((BATCH, *IMAGE_SHAPE), np.uint8)
        for start in range(0, len(mine), BATCH):
            np.stack([fn(i) for i in mine[start : start + BATCH]], out=out)

    return job


def bare_photos(path: str, order: np.ndarray) -> Callable[[int], None]:
    """The job of bare process w: its half of the shuffled records, read 32 at a time with
    array_record's reader, each decoded and cropped."""

    def job(w: int) -> None:
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(path, "readahead_buffer_size:0")
        mine = order[w::WORKERS].tolist()
        for start in range(0, len(mine), BATCH):
            keys = mine[start : start + BATCH]
            for key, record in zip(keys, reader.read(keys)):
                decode_and_crop(record, np.random.default_rng(key))
        reader.close()

    return job


# -- a clean parent process for the forked processes of the arrayrecord workload ----------------


class CleanParent:
    """A fresh Python process, as a PyTorch user's script: torch imported, no ArrayRecord
    reader ever opened.  PyTorch's DataLoader and the limit's bare processes of the
    arrayrecord workload fork from it.

    A process forked after its parent opened an array_record reader hangs or crashes
    when it opens one itself, and this process has opened readers for chute and Grain
    (whose workers are started from a fork server, or spawned).  The clean parent runs
    an epoch on command: ``iterate()`` gives an iterator in this process that asks it
    for one batch at a time (in lock-step) and whose ``close()`` closes the DataLoader
    there.  The reply is ``None``; while ``mode`` is ``"digest"`` it is the batch's
    digest, and while it is ``"touch"`` the clean parent touches every batch first.
    """

    def __init__(self, directory: str, path: str) -> None:
        address = os.path.join(directory, "clean-parent.sock")
        listener = Listener(address, family="AF_UNIX")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), CLEAN_PARENT_FLAG, address, path]
        )
        seen_pids.add(self.proc.pid)
        with common.time_limit(common.RUN_TIMEOUT_S):
            self.conn = listener.accept()
        listener.close()
        self.mode: str | None = None
        self.broken = False
        self.call("ping")

    def call(self, *command: Any) -> Any:
        if self.broken:
            raise RuntimeError("an earlier command to the clean parent process was interrupted")
        try:
            self.conn.send(command)
            status, value = self.conn.recv()
        except BaseException:
            self.broken = True  # a reply may still come: the next one would be out of step
            raise
        if status == "error":
            raise RuntimeError(f"in the clean parent process: {value}")
        return value

    def iterate(self, what: str) -> Iterator[Any]:
        """An epoch of ``what`` (``torch`` or ``limit``) in the clean parent."""
        self.call("iter", what, self.mode)
        return RemoteEpoch(self)

    def close(self) -> None:
        try:
            self.call("exit")
            self.proc.wait(timeout=SHUTDOWN_WAIT_S)
        except Exception:
            self.proc.kill()
            self.proc.wait()


class RemoteEpoch:
    """This process's end of an epoch that runs in the clean parent."""

    def __init__(self, parent: CleanParent) -> None:
        self.parent = parent

    def __iter__(self) -> RemoteEpoch:
        return self

    def __next__(self) -> Any:
        more, value = self.parent.call("next")
        if not more:
            raise StopIteration
        return value

    def close(self) -> None:
        self.parent.call("close")


def clean_parent(address: str, path: str) -> int:
    """Clean-parent mode: runs epochs of the arrayrecord workload on command (see above)."""
    import torch
    import torch.utils.data

    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    conn = Client(address, family="AF_UNIX")
    datasets = torch_datasets(torch)
    order = np.random.default_rng(SEED).permutation(PHOTOS_N)
    it: Any = None
    mode, digest = None, image_digest()
    while True:
        command, *args = conn.recv()
        reply: tuple[str, Any] = ("ok", None)
        try:
            if command == "iter":
                what, mode = args
                digest = image_digest()
                if what == "torch":
                    dataset = datasets.photos(path, PHOTOS_N)
                    it = iter(torch_loader(torch, dataset, WORKERS, shuffle=True))
                else:
                    it = bare_processes(bare_photos(path, order))
            elif command == "next":
                try:
                    batch = next(it)
                except StopIteration:
                    reply = ("ok", (False, None))
                else:
                    if mode == "touch":
                        touch(batch)
                    reply = ("ok", (True, digest(batch) if mode == "digest" else None))
            elif command == "close":
                shutdown_torch(it)
                it = None
            elif command == "reset_peak":
                reply = ("ok", (kib(proc_status("self"), "VmRSS"), reset_peak_rss()))
            elif command == "peak":
                reply = ("ok", kib(proc_status("self"), "VmHWM"))
            elif command == "exit":
                conn.send(reply)
                return 0
        except Exception:
            reply = ("error", traceback.format_exc(limit=6))
        conn.send(reply)


# -- the photos of the arrayrecord workload -------------------------------------------------------


def canvas(k: int) -> np.ndarray:
    """A 1024x1024 uint8 scene: colour gradients, 60 soft-edged discs, sensor-like noise."""
    rng = np.random.default_rng(1000 + k)
    side = CANVAS_SIDE
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    slope = rng.uniform(-1, 1, size=(3, 3, 1, 1)).astype(np.float32)
    img = rng.uniform(60, 200, size=(3, 1, 1)).astype(np.float32) + 60 * (
        slope[:, 0] * xx + slope[:, 1] * yy + slope[:, 2] * np.sin(9 * xx * yy + k)
    )
    img = np.ascontiguousarray(np.moveaxis(img, 0, -1))
    for _ in range(60):
        cy, cx = rng.uniform(0, 1, size=2)
        r = rng.uniform(0.01, 0.08)
        y0, y1 = max(0, int((cy - r) * side)), min(side, int((cy + r) * side) + 1)
        x0, x1 = max(0, int((cx - r) * side)), min(side, int((cx + r) * side) + 1)
        d2 = ((yy[y0:y1, x0:x1] - cy) ** 2 + (xx[y0:y1, x0:x1] - cx) ** 2) / (r * r)
        disc = np.clip(4 * (1 - d2), 0, 1)
        img[y0:y1, x0:x1] += disc[..., None] * rng.uniform(-90, 90, size=3).astype(np.float32)
    img += rng.normal(0, 10, size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def photo(canvases: list[np.ndarray], index: int) -> np.ndarray:
    """Photo ``index``: a 256x256 window of one of the scenes, chosen by ``default_rng(index)``."""
    rng = np.random.default_rng(index)
    scene = canvases[rng.integers(len(canvases))]
    y, x = rng.integers(0, CANVAS_SIDE - PHOTO_SIDE + 1, size=2)
    return scene[y : y + PHOTO_SIDE, x : x + PHOTO_SIDE]


def jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def write_photos(directory: str) -> tuple[str, list[bytes]]:
    """Writes PHOTOS_N JPEG photos to one ArrayRecord file; (its path, the records)."""
    from chute.experimental import write_array_record

    canvases = [canvas(k) for k in range(CANVASES)]
    records = [jpeg(photo(canvases, i)) for i in range(PHOTOS_N)]
    return write_array_record(records, f"{directory}/photos")[0], records


# -- processes under this one (/proc) -----------------------------------------------------------


def proc_status(pid: int | str) -> dict[str, str]:
    """The fields of /proc/<pid>/status ({} if the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def kib(status: dict[str, str], key: str) -> int | None:
    value = status.get(key, "").split()
    return int(value[0]) if value else None


def children(pid: int) -> list[int]:
    """The children of ``pid``, started by any of its threads."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def start_time(pid: int) -> str:
    """When ``pid`` started (field 22 of /proc/<pid>/stat), so a reused pid is a new process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


_kinds: dict[tuple[int, str], str] = {}
seen_pids: set[int] = {os.getpid()}


def kind_of(pid: int, parent: int) -> str:
    """``worker``, or a helper: ``forkserver`` (chute's) or ``resource tracker``.

    Workers are chute's (children of its fork server), Grain's (spawned), PyTorch's
    (forked from this process, like the limit's bare processes).
    """
    key = (pid, start_time(pid))
    if key not in _kinds:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = ""
        if "resource_tracker" in cmd:
            _kinds[key] = "resource tracker"
        elif parent == os.getpid() and "forkserver" in cmd:
            _kinds[key] = "forkserver"  # chute's workers are its children (same cmdline)
        elif parent == os.getpid() and CLEAN_PARENT_FLAG in cmd:
            _kinds[key] = "clean parent"  # its DataLoader's workers are its children
        else:
            _kinds[key] = "worker"
    return _kinds[key]


def descendants() -> list[tuple[int, str]]:
    """(pid, kind) of every live (not zombie) process below this one."""
    out, todo = [], [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid in children(parent):
            todo.append(pid)
            if proc_status(pid).get("State", "Z").startswith("Z"):
                continue
            seen_pids.add(pid)
            out.append((pid, kind_of(pid, parent)))
    return out


def live_workers() -> list[int]:
    return [pid for pid, kind in descendants() if kind == "worker"]


def shm_names() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


# -- worker shutdown after every close() --------------------------------------------------------


class ShutdownChecked:
    """An iterator whose ``close()`` also waits for the worker processes to exit.

    ``iter()`` of it is the library's own iterator, so a ``for`` loop over it
    costs nothing extra; ``close()`` (never timed) closes that iterator with
    ``closer`` and records how long the workers took to go, or which of them
    did not.
    """

    def __init__(
        self, it: Any, log: list[dict[str, Any]], closer: Callable[[Any], None] = common.close
    ) -> None:
        self._it, self._log, self._closer = it, log, closer

    def __iter__(self) -> Any:
        return self._it

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        self._closer(self._it)
        start = time.perf_counter()
        while (alive := live_workers()) and time.perf_counter() - start < SHUTDOWN_WAIT_S:
            time.sleep(0.01)
        self._log.append({"exit_s": time.perf_counter() - start, "left_alive": alive})


def checked(
    make: Any, log: list[dict[str, Any]], closer: Callable[[Any], None] = common.close
) -> Any:
    return lambda: ShutdownChecked(iter(make()), log, closer)


def shutdown_summary(log: list[dict[str, Any]]) -> str:
    if not log:
        return "never closed"
    bad = [e for e in log if e["left_alive"]]
    worst = max(e["exit_s"] for e in log)
    text = f"{len(log)} closes, workers gone within {worst:.2f} s"
    if bad:
        text += f"; {len(bad)} closes left workers alive after {SHUTDOWN_WAIT_S:g} s"
    return text


# -- peak memory ----------------------------------------------------------------------------------


def reset_peak_rss() -> bool:
    """Resets this process's VmHWM to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure_memory(impl: Impl, parent: CleanParent | None = None) -> dict[str, Any]:
    """One untimed run of ``impl`` with a sampler thread reading VmHWM of every process below.

    Not part of the timed runs, so the sampler cannot slow them.  The loop touches
    every batch, as a training step would (the timed runs do not).  ``parent``: the
    process that runs ``impl`` when it is not this one (its peak is the parent's).
    """
    common.wait_quiet()
    shm_before = shm_names()
    peaks: dict[int, tuple[str, int]] = {}
    shm_seen: set[str] = set()
    stop = threading.Event()

    def sample() -> None:
        while True:
            for pid, kind in descendants():
                hwm = kib(proc_status(pid), "VmHWM")
                if hwm is not None and hwm > peaks.get(pid, (kind, 0))[1]:
                    peaks[pid] = (kind, hwm)
            shm_seen.update(n for n in shm_names() - shm_before if ours_or_not_chute(n))
            if stop.wait(SAMPLE_EVERY_S):
                return

    if parent is None:
        rss_before = kib(proc_status("self"), "VmRSS")
        reset = reset_peak_rss()
    else:
        rss_before, reset = parent.call("reset_peak")
        parent.mode = "touch"
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    it = None
    try:
        with common.time_limit(common.RUN_TIMEOUT_S):
            it = impl.make_iter()
            batches = 0
            for batch in it:
                touch(batch)
                batches += 1
        parent_peak = kib(proc_status("self"), "VmHWM") if parent is None else parent.call("peak")
    finally:
        stop.set()
        sampler.join()
        if it is not None:
            common.close(it)
        if parent is not None:
            parent.mode = None
    workers = sorted(v for v in peaks.values() if v[0] == "worker")
    helpers = sorted(v for v in peaks.values() if v[0] != "worker")
    return {
        "batches": batches,
        "parent_rss_before_mib": rss_before / 1024 if rss_before else None,
        "parent_peak_mib": parent_peak / 1024 if parent_peak else None,
        "parent_peak_is_for_this_run": reset,
        "parent": "this process" if parent is None else "the clean parent process",
        "worker_peaks_mib": [hwm / 1024 for _, hwm in workers],
        "helper_peaks_mib": {kind: hwm / 1024 for kind, hwm in helpers},
        "new_shm_segments_seen": len(shm_seen),
        "new_shm_segment_names": sorted(shm_seen)[:20],
    }


def touch(batch: Any) -> None:
    """Reads one byte of every 4 KiB of a batch's arrays, so that all its pages are resident."""
    array = as_numpy(batch)
    if isinstance(array, np.ndarray) and array.size:
        int(np.ascontiguousarray(array).reshape(-1).view(np.uint8)[::4096].sum())


def measure_all(
    impls: list[Impl], parents: dict[str, CleanParent] | None = None
) -> dict[str, dict[str, Any]]:
    """``measure_memory`` of each implementation that has worker processes."""
    memory = {}
    for impl in impls:
        if impl.error is None and not impl.name.endswith(" 0 workers"):
            try:
                memory[impl.name] = measure_memory(impl, (parents or {}).get(impl.name))
            except Exception:
                common.fail(impl, "memory run")
    return memory


def parent_peak_ratio(
    label: str, memory: dict[str, dict[str, Any]], chute: Impl, torch: Impl, target: float | None
) -> Ratio:
    """A ratio of parent peaks as one of rates: (1 / chute's peak) / (1 / torch's peak)."""

    def peak(impl: Impl) -> Impl:
        mib = memory.get(impl.name, {}).get("parent_peak_mib")
        return Impl(
            f"{impl.name} parent peak",
            lambda: iter(()),
            1,
            times=[mib] if mib else [],
            check=impl.check,
            error=impl.error or (None if mib else "no memory measurement"),
        )

    return Ratio(label, peak(chute), peak(torch), target)


# -- output checks -------------------------------------------------------------------------------


def same_elements(out: list[Any], ref: list[Any]) -> str:
    """``out`` (chute, 0 workers) holds the elements of ``ref`` (2 workers), in full batches."""
    try:
        sizes = sorted({len(b) for b in out})
        got = np.sort(np.concatenate([np.asarray(b) for b in out]))
        want = np.sort(np.concatenate([np.asarray(b) for b in ref]))
    except Exception as e:
        return f"MISMATCH: batches are not 1-d arrays ({type(e).__name__}: {e})"
    if sizes != [BATCH]:
        return f"MISMATCH: batch sizes {sizes}, expected all {BATCH}"
    if got.shape != want.shape or not np.array_equal(got, want):
        return "MISMATCH: 0 workers and 2 workers give different elements"
    return "ok"


def as_numpy(batch: Any) -> Any:
    """PyTorch's tensors as numpy arrays (no copy); anything else as it is."""
    return batch.numpy() if hasattr(batch, "numpy") else batch


def image_hashes(batch: np.ndarray) -> np.ndarray:
    """A 16-byte BLAKE2 hash of every image of a batch, as an (n, 16) uint8 array."""
    batch = np.ascontiguousarray(batch)
    joined = b"".join(hashlib.blake2b(img.data, digest_size=16).digest() for img in batch)
    return np.frombuffer(joined, dtype=np.uint8).reshape(len(batch), 16)


def image_digest() -> Callable[[Any], Any]:
    """Every batch of images as shape, dtype and per-image hashes; the first ones whole too."""
    seen = [0]

    def digest(batch: Any) -> Any:
        batch = as_numpy(batch)
        if not isinstance(batch, np.ndarray) or batch.ndim != 4:
            return batch
        seen[0] += 1
        out = {"shape": batch.shape, "dtype": batch.dtype.str, "hashes": image_hashes(batch)}
        if seen[0] <= CHECK_FULL_BATCHES:
            out["pixels"] = np.array(batch)
        return out

    return digest


def check_images(
    out: list[Any], want: np.ndarray, sizes: list[int] | None = None, any_order: bool = False
) -> str:
    """``out`` (digests) holds the images whose hashes are the rows of ``want``, in this order.

    ``sizes``: the batch sizes expected, by default all ``BATCH``; ``any_order``: the
    same multiset of images is enough.
    """
    if sizes is None:
        sizes = [BATCH] * (len(want) // BATCH)
    if len(out) != len(sizes):
        return f"MISMATCH: {len(out)} batches, expected {len(sizes)}"
    for i, (d, n) in enumerate(zip(out, sizes)):
        if not (isinstance(d, dict) and "hashes" in d):
            return f"MISMATCH: batch {i} is not an array of images: {d!r:.200}"
        if tuple(d["shape"]) != (n, *IMAGE_SHAPE) or d["dtype"] != "|u1":
            shape = (n, *IMAGE_SHAPE)
            return f"MISMATCH: batch {i}: {d['shape']} {d['dtype']}, expected {shape} uint8"
    got = np.concatenate([d["hashes"] for d in out])
    if any_order:
        if not np.array_equal(sorted_rows(got), sorted_rows(want)):
            return "MISMATCH: the epoch's images are not the expected ones (as a multiset)"
        return "ok"
    if not np.array_equal(got, want):
        first = int(np.argwhere((got != want).any(axis=1))[0][0])
        return (
            f"MISMATCH: image {first} of the epoch (batch {first // BATCH}) is not the expected one"
        )
    return "ok"


def sorted_rows(hashes: np.ndarray) -> np.ndarray:
    """The rows of an (n, 16) hash array in sorted order (a multiset, comparable)."""
    return hashes[np.lexsort(hashes.T[::-1])]


def check_bare(impl: Impl, out: list[Any] | None) -> None:
    """The limit hands back nothing: its check is that both processes finished their items."""
    impl.check = "ok" if out == [] else common.CHECK_RAISED


def bench_group(
    impls: list[Impl], repeats: int, parents: dict[str, CleanParent] | None = None
) -> dict[str, dict[str, Any]]:
    """The timed runs, the warm first batches (not of the limit) and the memory runs."""
    common.time_runs(impls, repeats)
    common.time_first_batch([i for i in impls if not i.name.startswith(LIMIT)])
    return measure_all(impls, parents)


# -- 1. cpu ---------------------------------------------------------------------------------------


def timed_call(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def calibrate() -> tuple[int, float]:
    """(iterations of ``work`` that take CPU_WORK_S, the measured seconds per call).

    The count comes from the fastest of 5 long calls (the least disturbed by
    other load); the cost per call is then the median of 5 chunks of 50 calls.
    """
    n = 2_000
    while timed_call(work, 0, n) < 0.02:
        n *= 2
    per_iteration = min(timed_call(work, 0, n) for _ in range(5)) / n
    iterations = max(1, round(CPU_WORK_S / per_iteration))
    chunks = [timed_call(lambda: [work(i, iterations) for i in range(50)]) / 50 for _ in range(5)]
    return iterations, statistics.median(chunks)


def bench_cpu(chute: Any, grain: Any, torch: Any, repeats: int) -> dict[str, Any]:
    iterations, per_call = calibrate()
    description = (
        f"range({CPU_N}).map(work).to_iter_dataset().batch({BATCH}) [.mp_prefetch(2 workers)]; "
        f"torch: DataLoader(dataset, batch_size={BATCH}, num_workers=2), __getitem__(i) = "
        f"work(i); limit: 2 forked processes, work over w::2; work = {iterations:,} iterations "
        f"of pure-Python arithmetic, {per_call * 1e3:.2f} ms per call here; one run = one "
        f"epoch = {CPU_N // BATCH} batches"
    )
    print(f"  {description}")
    names = ("chute 2 workers", "grain 2 workers", "torch 2 workers", LIMIT)
    logs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    datasets = torch_datasets(torch)
    bound_work = functools.partial(work, iterations=iterations)
    impls = [
        Impl("chute 0 workers", lambda: iter(cpu_pipeline(chute, iterations, 0)), CPU_N),
        Impl(
            "chute 2 workers",
            checked(lambda: cpu_pipeline(chute, iterations, WORKERS), logs["chute 2 workers"]),
            CPU_N,
        ),
        Impl(
            "grain 2 workers",
            checked(lambda: cpu_pipeline(grain, iterations, WORKERS), logs["grain 2 workers"]),
            CPU_N,
        ),
        Impl(
            "torch 2 workers",
            checked(
                lambda: torch_loader(torch, datasets.work(iterations), WORKERS),
                logs["torch 2 workers"],
                shutdown_torch,
            ),
            CPU_N,
        ),
        Impl(
            LIMIT, checked(lambda: bare_processes(bare_map(bound_work, CPU_N)), logs[LIMIT]), CPU_N
        ),
    ]
    chute0, chute2, grain2, torch2, limit = impls

    # Output check, which is also every implementation's warm-up run.
    grain_out = common.collect(grain2)
    chute2_out = common.collect(chute2)
    chute0_out = common.collect(chute0)
    torch_out = common.collect(torch2, as_numpy)
    common.mark_reference(grain2, grain_out)
    common.check_against(chute2, chute2_out, "grain", grain_out)
    common.check_against(chute0, chute0_out, "chute 2 workers", chute2_out, same_elements)
    if chute0.check == "ok":
        want = np.array([work(i, iterations) for i in range(BATCH)])
        if not np.array_equal(np.asarray(chute0_out[0]), want):
            chute0.check = "MISMATCH: the first batch is not work(0..31)"
    common.check_against(torch2, torch_out, "chute 0 workers", chute0_out)
    check_bare(limit, common.collect(limit))
    del grain_out, chute2_out, chute0_out, torch_out
    common.report_check(
        impls,
        "grain",
        f"chute 2 workers = grain 2 workers, all {CPU_N // BATCH} batches in order; "
        "chute 0 workers: the same elements in full batches, the first batch = work(0..31); "
        "torch 2 workers = chute 0 workers, all batches in order (both read 0, 1, 2, ...); "
        "limit: both processes finished",
    )

    memory = bench_group(impls, repeats)
    ratios = [
        Ratio(
            "cpu chute 2 workers/chute 0 workers",
            chute2,
            chute0,
            TARGETS["cpu chute 2 workers/chute 0 workers"],
        ),
        Ratio(
            "cpu chute 2 workers/grain 2 workers",
            chute2,
            grain2,
            TARGETS["cpu chute 2 workers/grain 2 workers"],
        ),
        Ratio("cpu chute 2 workers/limit", chute2, limit, TARGETS["cpu chute 2 workers/limit"]),
        Ratio(
            "cpu chute 2 workers/torch 2 workers",
            chute2,
            torch2,
            TARGETS["cpu chute 2 workers/torch 2 workers"],
        ),
        Ratio("cpu torch 2 workers/limit", torch2, limit, None),
        # The most any 2-process loader can be ahead of Grain here: the 3x above is beyond it.
        Ratio("cpu limit/grain 2 workers", limit, grain2, None),
    ]
    common.mark_invalid(ratios)
    diagnosis = None
    if chute0.median and chute2.median:
        batches = CPU_N // BATCH
        ideal = chute0.median / WORKERS
        extra = chute2.median - ideal
        diagnosis = (
            f"chute 2 workers: {chute2.median:.2f} s a run against {ideal:.2f} s for half the "
            f"0-worker run; the difference, {extra:.2f} s, is {extra / batches * 1e3:.1f} ms a "
            f"batch ({extra / CPU_N * 1e6:.0f} us an element) of start-up, transfer and "
            "overlap loss"
        )
        if limit.median:
            diagnosis += (
                f"; the limit (2 bare processes, no batches handed back) took {limit.median:.2f} s"
            )
        print(f"  {diagnosis}")
    return {
        "name": "cpu",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": ratios,
        "work_iterations": iterations,
        "work_seconds_per_call": per_call,
        "n": CPU_N,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": diagnosis,
    }


# -- 2. images ------------------------------------------------------------------------------------


def bench_images(chute: Any, grain: Any, torch: Any, repeats: int) -> dict[str, Any]:
    per_image = statistics.median(
        timed_call(lambda: [image(i) for i in range(20)]) / 20 for _ in range(5)
    )
    description = (
        f"range({IMAGES_N}).map(image).to_iter_dataset().batch({BATCH}).mp_prefetch(W workers); "
        f"torch: DataLoader(dataset, batch_size={BATCH}, num_workers=W), __getitem__(i) = "
        f"image(i); limit: 2 forked processes, image over w::2; image(i) = a 224x224x3 uint8 "
        f"image from default_rng(i), flipped (img[:, ::-1] made contiguous), "
        f"{per_image * 1e3:.2f} ms here; one run = one epoch = {IMAGES_N // BATCH} batches, "
        f"{IMAGES_N * IMAGE_BYTES / 1e6:.0f} MB"
    )
    print(f"  {description}")
    datasets = torch_datasets(torch)
    logs: dict[str, list[dict[str, Any]]] = {}

    def chute_impl(workers: int) -> Impl:
        name = f"chute {workers} workers"
        logs[name] = []
        return Impl(name, checked(lambda: images_pipeline(chute, workers), logs[name]), IMAGES_N)

    def torch_impl(workers: int) -> Impl:
        name = f"torch {workers} workers"
        logs[name] = []
        make = checked(
            lambda: torch_loader(torch, datasets.images(), workers), logs[name], shutdown_torch
        )
        return Impl(name, make, IMAGES_N)

    def limit_impl(processes: int, stack: bool = False) -> Impl:
        """The machine's own limit with more processes than cores: bare forks, no transport;
        with ``stack``, each process also stacks its images into batches of 32."""
        name = f"{LIMIT}{'+stack' if stack else ''} {processes} processes"
        logs[name] = []
        job = (bare_map_and_stack if stack else bare_map)(image, IMAGES_N, processes)
        return Impl(name, checked(lambda: bare_processes(job, processes), logs[name]), IMAGES_N)

    logs["grain 2 workers"], logs[LIMIT] = [], []
    impls = [
        chute_impl(WORKERS),
        Impl(
            "grain 2 workers",
            checked(lambda: images_pipeline(grain), logs["grain 2 workers"]),
            IMAGES_N,
        ),
        torch_impl(WORKERS),
        Impl(
            LIMIT, checked(lambda: bare_processes(bare_map(image, IMAGES_N)), logs[LIMIT]), IMAGES_N
        ),
    ]
    for workers in MANY_WORKERS:
        impls += [chute_impl(workers), torch_impl(workers), limit_impl(workers)]
    impls += [limit_impl(WORKERS, stack=True), limit_impl(MANY_WORKERS[-1], stack=True)]
    by_name = {impl.name: impl for impl in impls}
    chute2, grain2, torch2, limit = impls[:4]

    # Output check, which is also every implementation's warm-up run.  The harness
    # computes every image's hash itself.
    want = np.concatenate(
        [
            image_hashes(np.stack([image(i) for i in range(s, s + BATCH)]))
            for s in range(0, IMAGES_N, BATCH)
        ]
    )
    grain_out = common.collect(grain2, image_digest())
    common.mark_reference(grain2, grain_out)
    for impl in impls[:1] + impls[2:]:
        if impl.name.startswith(LIMIT):
            check_bare(impl, common.collect(impl))
            continue
        out = common.collect(impl, image_digest())
        if out is None:
            impl.check = common.CHECK_RAISED
        elif impl is chute2:
            common.check_against(chute2, out, "grain", grain_out)
            if chute2.check == "ok":
                diff = common.tree_difference(out[0]["pixels"], expected_first_image_batch())
                if diff:
                    chute2.check = f"MISMATCH: first batch vs image(0, 2, ..., 62): {diff}"
        elif impl.name.startswith("chute"):
            workers = int(impl.name.split()[1])
            impl.check = check_images(out, want[worker_order(IMAGES_N, workers)])
        else:  # torch reads 0, 1, 2, ... whatever its number of workers
            impl.check = check_images(out, want)
        del out
    del grain_out
    common.report_check(
        impls,
        "grain",
        f"chute 2 workers = grain 2 workers, all {IMAGES_N // BATCH} batches in order (first "
        f"{CHECK_FULL_BATCHES} value by value, all by shape, dtype and a hash of every image), "
        "its first batch = image(0, 2, ..., 62); chute 4 and 8 workers: every image's hash "
        "= image(i)'s in mp_prefetch's order (worker w reads w, w + W, ...; one batch of each "
        "worker in turn); torch 2, 4, 8 workers: image(0), image(1), ... in order; limit: both "
        "processes finished",
    )

    memory = bench_group(impls, repeats)
    ratios = [
        Ratio("images chute/grain", chute2, grain2, TARGETS["images chute/grain"]),
        Ratio("images chute/limit", chute2, limit, TARGETS["images chute/limit"]),
        Ratio("images chute/torch", chute2, torch2, TARGETS["images chute/torch"]),
        Ratio("images torch/limit", torch2, limit, None),
    ]
    for lib in ("chute", "torch"):
        for workers in MANY_WORKERS:
            label = f"images {lib} {workers} workers/{lib} 2 workers"
            ratios.append(
                Ratio(
                    label,
                    by_name[f"{lib} {workers} workers"],
                    by_name[f"{lib} 2 workers"],
                    TARGETS.get(label),
                )
            )
    for workers in MANY_WORKERS:  # what the machine itself loses with more processes than cores
        ratios.append(
            Ratio(
                f"images limit {workers} processes/limit 2 processes",
                by_name[f"{LIMIT} {workers} processes"],
                limit,
                None,
            )
        )
        ratios.append(
            Ratio(
                f"images chute {workers} workers/limit {workers} processes",
                by_name[f"chute {workers} workers"],
                by_name[f"{LIMIT} {workers} processes"],
                None,
            )
        )
    most = MANY_WORKERS[-1]
    ratios.append(
        Ratio(
            f"images limit+stack {most} processes/limit+stack 2 processes",
            by_name[f"{LIMIT}+stack {most} processes"],
            by_name[f"{LIMIT}+stack {WORKERS} processes"],
            None,
        )
    )
    label = "images parent peak torch/chute"
    ratios.append(parent_peak_ratio(label, memory, chute2, torch2, TARGETS[label]))
    common.mark_invalid(ratios)
    diagnosis = None
    if chute2.rate():
        ceiling = WORKERS / per_image
        diagnosis = (
            f"the map alone costs {per_image * 1e3:.2f} ms an image here, so 2 workers could give "
            f"at most {ceiling:,.0f} images/s ({ceiling * IMAGE_BYTES / 1e6:,.0f} MB/s); "
            + ", ".join(
                f"{i.name} reached {i.rate() / ceiling:.0%} of that"
                for i in (chute2, grain2, torch2, limit)
                if i.rate()
            )
        )
        print(f"  {diagnosis}")
    return {
        "name": "images",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": ratios,
        "image_seconds_in_parent": per_image,
        "bytes_per_element": IMAGE_BYTES,
        "n": IMAGES_N,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": diagnosis,
    }


# -- 3. arrayrecord -------------------------------------------------------------------------------


def decode_some(records: list[bytes]) -> None:
    """``decode_and_crop`` of the first 20 records, as the workers do it."""
    for i in range(20):
        decode_and_crop(records[i], np.random.default_rng(i))


def bench_arrayrecord(chute: Any, grain: Any, repeats: int, directory: str) -> dict[str, Any]:
    start = time.perf_counter()
    path, records = write_photos(directory)
    written_s = time.perf_counter() - start
    parent = CleanParent(directory, path)
    try:
        return arrayrecord_runs(chute, grain, repeats, path, records, written_s, parent)
    finally:
        parent.close()


def arrayrecord_runs(
    chute: Any,
    grain: Any,
    repeats: int,
    path: str,
    records: list[bytes],
    written_s: float,
    parent: CleanParent,
) -> dict[str, Any]:
    kb = np.array([len(r) for r in records]) / 1e3
    per_photo = statistics.median(timed_call(decode_some, records) / 20 for _ in range(5))
    description = (
        f"{PHOTOS_N:,} JPEG photos of 256x256x3 (quality {JPEG_QUALITY}, {kb.mean():.1f} KB "
        f"on average, {kb.min():.1f}-{kb.max():.1f} KB) in one ArrayRecord file (written in "
        f"{written_s:.1f} s); MapDataset.source(ArrayRecordDataSource).seed({SEED}).shuffle()"
        f".random_map(decode_and_crop).to_iter_dataset().batch({BATCH}).mp_prefetch(2 workers); "
        f"torch: DataLoader(dataset, batch_size={BATCH}, shuffle=True, num_workers=2), "
        "__getitem__(i) = decode_and_crop(record i, default_rng(i)) through array_record's "
        "ArrayRecordDataSource opened in each worker; limit: 2 forked processes, each half of a "
        f"shuffled order through array_record's reader (torch and limit fork from a clean parent "
        f"process); decode_and_crop = Pillow decode + a random 224x224 crop, "
        f"{per_photo * 1e3:.2f} ms here; one run = one epoch"
    )
    print(f"  {description}")
    names = ("chute 2 workers", "grain 2 workers", "torch 2 workers", LIMIT)
    logs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    impls = [
        Impl(
            "chute 2 workers",
            checked(lambda: photos_pipeline(chute, path), logs["chute 2 workers"]),
            PHOTOS_N,
        ),
        Impl(
            "grain 2 workers",
            checked(lambda: photos_pipeline(grain, path), logs["grain 2 workers"]),
            PHOTOS_N,
        ),
        Impl(
            "torch 2 workers",
            checked(lambda: parent.iterate("torch"), logs["torch 2 workers"]),
            PHOTOS_N,
        ),
        Impl(LIMIT, checked(lambda: parent.iterate("limit"), logs[LIMIT]), PHOTOS_N),
    ]
    chute2, grain2, torch2, limit = impls

    # Output check, which is also every implementation's warm-up run.
    grain_out = common.collect(grain2, image_digest())
    chute_out = common.collect(chute2, image_digest())
    parent.mode = "digest"  # the clean parent digests PyTorch's batches
    torch_out = common.collect(torch2)
    parent.mode = None
    common.mark_reference(grain2, grain_out)
    common.check_against(chute2, chute_out, "grain", grain_out)
    if chute2.check == "ok":
        # Worker 0's first batch: elements 0, 2, ..., 62 of the same MapDataset, here.
        reference = photos_map(grain, path)
        first = np.stack([reference[i] for i in range(0, WORKERS * BATCH, WORKERS)])
        diff = common.tree_difference(chute_out[0]["pixels"], first)
        if diff:
            chute2.check = f"MISMATCH: first batch vs Grain's MapDataset[0, 2, ..., 62]: {diff}"
    if torch_out is None:
        torch2.check = common.CHECK_RAISED
    else:
        want = np.concatenate(
            [
                image_hashes(
                    np.stack(
                        [
                            decode_and_crop(records[i], np.random.default_rng(i))
                            for i in range(s, min(s + BATCH, PHOTOS_N))
                        ]
                    )
                )
                for s in range(0, PHOTOS_N, BATCH)
            ]
        )
        sizes = [BATCH] * (PHOTOS_N // BATCH) + ([PHOTOS_N % BATCH] if PHOTOS_N % BATCH else [])
        torch2.check = check_images(torch_out, want, sizes, any_order=True)
    check_bare(limit, common.collect(limit))
    del grain_out, chute_out, torch_out, records
    common.report_check(
        impls,
        "grain",
        "chute 2 workers = grain 2 workers, every batch in order (first "
        f"{CHECK_FULL_BATCHES} value by value, all by shape, dtype and a hash of every image), "
        "its first batch = Grain's MapDataset[0, 2, ..., 62] computed here; torch 2 workers: "
        f"{-(-PHOTOS_N // BATCH)} batches of (32, 224, 224, 3) uint8 (the last of "
        f"{PHOTOS_N % BATCH or BATCH}), and the epoch's images = decode_and_crop(record i, "
        "default_rng(i)) for every i, computed here (as a multiset: torch's shuffle order is its "
        "own); limit: both processes finished",
    )

    memory = bench_group(impls, repeats, {torch2.name: parent, limit.name: parent})
    ratios = [
        Ratio("arrayrecord chute/torch", chute2, torch2, TARGETS["arrayrecord chute/torch"]),
        Ratio("arrayrecord chute/grain", chute2, grain2, None),
        Ratio("arrayrecord chute/limit", chute2, limit, None),
        Ratio("arrayrecord torch/limit", torch2, limit, None),
    ]
    common.mark_invalid(ratios)
    diagnosis = None
    if chute2.rate():
        ceiling = WORKERS / per_photo
        diagnosis = (
            f"decode_and_crop alone costs {per_photo * 1e3:.2f} ms a photo here, so 2 workers "
            f"could give at most {ceiling:,.0f} photos/s; "
            + ", ".join(
                f"{i.name} reached {i.rate() / ceiling:.0%} of that" for i in impls if i.rate()
            )
        )
        print(f"  {diagnosis}")
    return {
        "name": "arrayrecord",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": ratios,
        "photo_seconds_in_parent": per_photo,
        "record_kb": {"mean": kb.mean(), "min": kb.min(), "max": kb.max()},
        "write_seconds": written_s,
        "bytes_per_element": IMAGE_BYTES,
        "n": PHOTOS_N,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": diagnosis,
    }


# -- 4. first batch, in a fresh process per trial -------------------------------------------------


def keep_busy() -> None:
    """The background thread of a ``jax-thread`` parent: wakes every 10 ms until the end."""
    while True:
        time.sleep(0.01)


def first_batch_child(lib_name: str, parent: str) -> int:
    """Child mode: time iter() to the first images batch of ``lib_name``; print JSON.

    ``parent``: ``plain``, or ``jax-thread`` (JAX imported, ``jax.devices()`` called and a
    background thread running before anything else).
    """
    setup_s = None
    if parent == "jax-thread":
        t = time.perf_counter()
        import jax

        jax.devices()
        threading.Thread(target=keep_busy, daemon=True).start()
        setup_s = time.perf_counter() - t
    t0 = time.perf_counter()
    lib = importlib.import_module(lib_name)
    if lib_name == "torch":
        importlib.import_module("torch.utils.data")
    imported = time.perf_counter() - t0
    if lib_name == "torch":
        pipeline = torch_loader(lib, torch_datasets(lib).images(), WORKERS)
        closer: Callable[[Any], None] = shutdown_torch
    else:
        pipeline, closer = images_pipeline(lib), common.close
    start = time.perf_counter()
    it = iter(pipeline)
    made = time.perf_counter()
    batch = next(it)
    done = time.perf_counter()
    if lib_name == "torch":  # PyTorch reads 0, 1, 2, ...
        want = np.stack([image(i) for i in range(BATCH)])
    else:
        want = expected_first_image_batch()
    diff = common.tree_difference(np.asarray(as_numpy(batch)), want)
    closer(it)
    result = {
        "seconds": done - start,
        "iter_s": made - start,
        "next_s": done - made,
        "import_s": imported,
        "jax_setup_s": setup_s,
        "pid": os.getpid(),
        "check": f"MISMATCH: {diff}" if diff else "ok",
    }
    print(CHILD_TAG + json.dumps(result), flush=True)
    return 0


def run_child(lib_name: str, parent: str) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    proc = subprocess.Popen(
        [sys.executable, script, CHILD_FLAG, lib_name, parent],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen_pids.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=common.RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise TimeoutError(f"the first-batch process took over {common.RUN_TIMEOUT_S} s") from None
    for line in out.splitlines():
        if line.startswith(CHILD_TAG):
            result = json.loads(line[len(CHILD_TAG) :])
            result["returncode"] = proc.returncode
            result["stderr_tail"] = err.strip()[-500:]
            return result
    raise RuntimeError(
        f"the first-batch process exited with {proc.returncode} and no result; "
        f"its stderr ends: {err[-2000:]}"
    )


def bench_first_batch() -> dict[str, Any]:
    description = (
        "seconds from iter() to the first batch of the images pipeline with 2 workers (torch: "
        f"iter(DataLoader) then next); each of {FIRST_BATCH_TRIALS} trials in a fresh Python "
        "process (worker start, and chute's fork server, included; the import of the library "
        "is not); parents: plain, and jax-thread (JAX imported, jax.devices() called, a "
        "background thread waking every 10 ms, all before the library's import)"
    )
    print(f"  {description}")
    impls = [
        Impl(f"{lib} {parent}", lambda: iter(()), 1)
        for parent in FIRST_BATCH_PARENTS
        for lib in FIRST_BATCH_LIBS
    ]
    by_name = {impl.name: impl for impl in impls}
    trials: dict[str, list[dict[str, Any]]] = {i.name: [] for i in impls}
    for t in range(FIRST_BATCH_TRIALS):
        k = t % len(impls)
        for impl in impls[k:] + impls[:k]:
            if impl.error is not None:
                continue
            try:
                common.wait_quiet()
                result = run_child(*impl.name.split())
            except Exception:
                common.fail(impl, f"first-batch trial {t + 1}")
                continue
            trials[impl.name].append(result)
            impl.times.append(result["seconds"])
            impl.first_batch.append(result["seconds"])
    for impl in impls:
        checks = {r["check"] for r in trials[impl.name]}
        impl.check = next((c for c in checks if c != "ok"), "ok" if checks else "not checked")
    common.report_check(
        impls,
        "the expected images",
        "the first batch = image(0, 2, ..., 62) (chute, grain), image(0, ..., 31) (torch)",
    )
    for impl in impls:
        parts = ", ".join(
            f"{r['seconds'] * 1e3:.0f} (iter {r['iter_s'] * 1e3:.0f} + "
            f"next {r['next_s'] * 1e3:.0f})"
            for r in trials[impl.name]
        )
        print(f"  {impl.name}: {parts} ms")
        warned = sum("os.fork() was called" in r["stderr_tail"] for r in trials[impl.name])
        if warned:
            print(f"    ({warned} of its trials printed JAX's warning that os.fork() was called)")

    def budget(seconds: float) -> Impl:
        """A target in seconds as an implementation: (1 / chute's median) / (1 / budget)."""
        return Impl(f"{seconds:g} s", lambda: iter(()), 1, times=[seconds], check="reference")

    ratios = []
    for parent in FIRST_BATCH_PARENTS:
        chute_impl = by_name[f"chute {parent}"]
        limit = TARGETS[f"first_batch chute {parent}"]
        label = f"first_batch torch time/chute time ({parent})"
        ratios += [
            Ratio(label, chute_impl, by_name[f"torch {parent}"], TARGETS[label]),
            Ratio(
                f"first_batch {limit:g} s/chute {parent} (chute <= {limit:g} s)",
                chute_impl,
                budget(limit),
                1.0,
            ),
            Ratio(
                f"first_batch grain time/chute time ({parent})",
                chute_impl,
                by_name[f"grain {parent}"],
                None,
            ),
        ]
    common.mark_invalid(ratios)
    return {
        "name": "first_batch",
        "description": description,
        "unit": "seconds to the first batch (run_time_s holds the trials; rate = 1/seconds)",
        "impls": impls,
        "ratios": ratios,
        "trials": trials,
        "target_seconds": {p: TARGETS[f"first_batch chute {p}"] for p in FIRST_BATCH_PARENTS},
    }


# -- reporting ------------------------------------------------------------------------------------


def mib(x: float | None) -> str:
    return common.fmt_num(x, 0)


def parent_peak_cell(mem: dict[str, Any]) -> str:
    """The parent's peak, and in parentheses how far above its RSS before the run."""
    peak, before = mem.get("parent_peak_mib"), mem.get("parent_rss_before_mib")
    if peak is None:
        return "-"
    return mib(peak) + (f" (+{peak - before:,.0f})" if before is not None else "")


def cleanup_report(shm_start: set[str]) -> tuple[dict[str, Any], list[str]]:
    """New /dev/shm entries since the start, and workers still alive; (JSON, problems)."""
    gc.collect()
    deadline = time.perf_counter() + 3.0
    while True:
        new = sorted(shm_names() - shm_start)
        ours = [n for n in new if n.startswith("chute") and owner(n) in seen_pids]
        if not ours or time.perf_counter() > deadline:
            break
        time.sleep(0.05)
    chute_other = [n for n in new if n.startswith("chute") and n not in ours]
    other = [n for n in new if not n.startswith("chute")]
    workers = live_workers()
    print(
        f"/dev/shm after the benchmark: {len(ours)} new chute segments of this benchmark's "
        f"processes left, {len(other)} other new entries (not chute's: Python's psm_* from Grain, "
        "PyTorch's, or other programs')"
        + (f", {len(chute_other)} chute segments of other processes" if chute_other else "")
    )
    print(f"worker processes still alive at the end: {len(workers)}")
    problems = []
    if ours:
        problems.append(f"chute left {len(ours)} /dev/shm segments: {', '.join(ours[:10])}")
    if workers:
        problems.append(f"{len(workers)} worker processes still alive at the end: {workers}")
    return {
        "new_chute_segments_ours": ours,
        "new_chute_segments_other_processes": chute_other,
        "new_other_entries": other,
        "workers_alive_at_end": workers,
    }, problems


def ours_or_not_chute(name: str) -> bool:
    """False for chute segments of other programs on this machine (their pid is not ours)."""
    return not name.startswith("chute") or owner(name) in seen_pids


def owner(segment: str) -> int | None:
    """The pid in a ``chute-<pid>-...`` segment name."""
    parts = segment.split("-")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


def print_results(results: list[dict[str, Any]]) -> None:
    rows, notes = [], []
    for res in results:
        if res["name"] == "first_batch":
            continue
        memory, logs = res.get("memory", {}), res.get("shutdown", {})
        element_bytes = res.get("bytes_per_element")
        for impl in res["impls"]:
            rate, fb, mem = impl.rate(), impl.first_batch, memory.get(impl.name, {})
            mb = rate * element_bytes / 1e6 if rate and element_bytes else None
            rows.append(
                [
                    res["name"],
                    impl.name,
                    "ERROR" if impl.error else common.fmt_num(rate),
                    common.fmt_num(rate / BATCH if rate else None, 1),
                    common.fmt_num(mb),
                    common.fmt_num(impl.median, 3),
                    f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
                    common.fmt_num(statistics.median(fb) * 1e3 if fb else None, 1),
                    parent_peak_cell(mem),
                    ", ".join(mib(x) for x in mem.get("worker_peaks_mib", [])) or "-",
                    impl.check.split(":")[0],
                ]
            )
            if impl.name in logs:
                shm = mem.get("new_shm_segments_seen")
                notes.append(
                    f"{res['name']} {impl.name}: {shutdown_summary(logs[impl.name])}"
                    + (f"; {shm} new /dev/shm entries during the memory run" if mem else "")
                )
    print()
    common.print_table(
        [
            "bench",
            "impl",
            "elements/s",
            "batches/s",
            "MB/s",
            "run s",
            "spread",
            "1st batch ms (warm)",
            "parent peak MiB (+run)",
            "worker peaks MiB",
            "output",
        ],
        rows,
        right={2, 3, 4, 5, 6, 7, 8, 9},
    )
    for res in results:
        if res["name"] != "first_batch":
            continue
        print()
        rows = [
            [
                "first_batch",
                impl.name,
                common.fmt_num(impl.median * 1e3 if impl.median else None, 0),
                ", ".join(f"{t * 1e3:.0f}" for t in impl.times) or "-",
                "ERROR" if impl.error else impl.check.split(":")[0],
            ]
            for impl in res["impls"]
        ]
        common.print_table(
            ["bench", "impl + parent", "1st batch ms (fresh process)", "trials ms", "output"],
            rows,
            right={2, 3},
        )
    print("\nworker shutdown after close() (all runs) and shared memory:")
    for line in notes:
        print(f"  {line}")
    print(
        "\nparent peak: VmHWM of the parent process during one extra untimed run that touches "
        "every batch (reset before it; in parentheses: above its RSS before the run; arrayrecord "
        "torch and limit: the clean parent's); worker peaks: VmHWM of each worker process "
        "(chute's workers count pages shared with chute's fork server, PyTorch's and the limit's "
        "forked processes those shared with the process they were forked from)"
    )


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    try:
        import grain
    except ImportError:
        sys.exit(
            "bench_workers: the peer library 'grain' is not installed; use bash benchmarks/run"
        )
    try:
        import chute
    except ImportError:
        sys.exit("bench_workers: chute is not installed; use bash benchmarks/run")
    try:
        import PIL
        import torch
        import torch.utils.data
    except ImportError:
        sys.exit(
            "bench_workers: the peers 'torch' and 'pillow' are not installed; "
            "use bash benchmarks/run workers"
        )
    # PyTorch warns on every DataLoader with more workers than cores; the 4 and 8 worker
    # runs are meant to be so.
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    shm_start = shm_names()
    env = common.environment()
    env["torch"] = torch.__version__
    env["pillow"] = PIL.__version__
    env["jax"] = common.version_of("jax")
    env["array_record"] = common.version_of("array_record")
    print(
        f"worker benchmarks: chute {env['chute']} vs grain {env['grain']} vs torch "
        f"{env['torch']} | {env['python']}, {env['cpus']} cpus, numpy {env['numpy']}, pillow "
        f"{env['pillow']}, jax {env['jax']}; {WORKERS} worker processes each unless named"
    )
    print(
        f"timing: 1 warm-up run per implementation (the output check), then the median of "
        f"{args.repeats} timed runs; implementations alternate in one process; workers are "
        "closed after every run and must be gone before the next"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="chute-bench-workers-") as directory:
        benches = (
            ("cpu", lambda: bench_cpu(chute, grain, torch, args.repeats)),
            ("images", lambda: bench_images(chute, grain, torch, args.repeats)),
            (
                "arrayrecord",
                lambda: bench_arrayrecord(chute, grain, args.repeats, directory),
            ),
            ("first_batch", bench_first_batch),
        )
        for name, bench in benches:
            print(f"\n[{name}]")
            t0 = time.perf_counter()
            res = bench()
            res["seconds"] = time.perf_counter() - t0
            results.append(res)

    print_results(results)
    print()
    cleanup, problems = cleanup_report(shm_start)
    for res in results:
        for name, log in res.get("shutdown", {}).items():
            # Grain's own shutdown is only reported; chute's, PyTorch's (closed by the
            # harness) and the limit's processes must be gone.
            if not name.startswith("grain") and any(e["left_alive"] for e in log):
                problems.append(f"{res['name']} {name}: {shutdown_summary(log)}")
    status = common.finish("workers", args, env, started, results)
    for line in problems:
        print(f"PROBLEM: {line}")
    if args.json and os.path.exists(args.json):
        with open(args.json) as f:
            data = json.load(f)
        data["cleanup"] = {**cleanup, "problems": problems}
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
    return 1 if problems else status


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == CHILD_FLAG:
        sys.exit(first_batch_child(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == CLEAN_PARENT_FLAG:
        sys.exit(clean_parent(sys.argv[2], sys.argv[3]))
    sys.exit(main())

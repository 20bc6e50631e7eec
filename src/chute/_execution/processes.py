"""Starting worker processes: forked from the parent when that is safe, else a fork server.

Two ways to start a worker:

* ``fork``, straight from the parent: a few milliseconds, and the pipeline
  is not pickled (the child has it already).  Used when forking is safe: on
  Linux, with only the main thread alive and no accelerator runtime (JAX,
  CUDA through torch, TensorFlow) initialised and no native thread pool
  started (array_record's reader starts one: ``add_fork_hazard``), since a
  fork copies locks that other threads may hold and runtimes that do not
  survive it.
* a ``forkserver`` preloaded with chute and numpy: a fresh interpreter,
  started once per process, that forks every worker from its clean,
  single-threaded state.  Loading numpy and chute takes it a few tenths of
  a second, so ``prepare()`` starts it in the background as early as it
  can tell the server will be needed: when chute is imported beside JAX,
  and when a pipeline with workers is built.  The
  pipeline travels by cloudpickle, so lambdas and closures work.  Unlike
  multiprocessing's own fork server, chute's workers never re-import the
  user's ``__main__`` module: a script without an
  ``if __name__ == "__main__":`` guard just works.  Functions defined in
  other modules are pickled by reference, so each such worker imports those
  modules, running their top-level code (``worker_errors.explain_import``
  names the module when that fails).

``CHUTE_WORKER_START=fork|forkserver`` forces one (``auto``, the default,
chooses as above).  A forked child closes the parent's ends of every other
worker's pipes at once, so a worker sees its pipes close when the parent
stops it, whatever was forked after it.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import pickle
import signal
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import popen_forkserver, spawn
from typing import Any, ClassVar

import cloudpickle

START_ENV = "CHUTE_WORKER_START"
_METHODS = ("auto", "fork", "forkserver")

_LOCK = threading.Lock()
_FORK_HAZARDS: list[Callable[[], str | None]] = []
_context: Any = None
_parent_ends: weakref.WeakSet[Any] = weakref.WeakSet()


def context() -> Any:
    """The forkserver context, its server preloaded with chute and numpy."""
    global _context
    with _LOCK:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["numpy", "cloudpickle", "chute"])
            _context = ctx
    return _context


def fork_unsafe_reason(*, as_pytorch_forks: bool = False) -> str | None:
    """Why forking this process now could deadlock or break a runtime; None if it is safe.

    With ``as_pytorch_forks``, only what breaks a forked child outright counts:
    threads running and CUDA initialised do not, as PyTorch's own DataLoader
    forks beside them (its workers must not use CUDA, and a lock another thread
    held at the fork stays held in the child).
    """
    if not sys.platform.startswith("linux"):
        return f"fork is only used on Linux (this is {sys.platform})"
    threads = threading.enumerate()
    if len(threads) > 1 and not as_pytorch_forks:
        others = ", ".join(t.name for t in threads if t is not threading.current_thread())
        return f"{len(threads)} threads are running ({others})"
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is not None and getattr(bridge, "_backends", True):
        return "JAX's runtime is initialised"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if (
        cuda is not None
        and getattr(cuda, "is_initialized", lambda: False)()
        and not (as_pytorch_forks)
    ):
        return "CUDA is initialised"
    if "tensorflow" in sys.modules:
        return "TensorFlow is imported"
    if "obstore" in sys.modules:  # imported by chute only to read a bucket: its runtime runs
        return "obstore's runtime (object-store reads) does not survive a fork"
    for hazard in _FORK_HAZARDS:
        reason = hazard()
        if reason is not None:
            return reason
    return None


def add_fork_hazard(hazard: Callable[[], str | None]) -> None:
    """Registers ``hazard``: says why forking now is unsafe (or None), for a library
    layered above this module whose native code starts threads Python cannot see
    (array_record's reader starts a pool of them, in which a forked child crashes)."""
    _FORK_HAZARDS.append(hazard)


def start_method() -> str:
    """``fork`` or ``forkserver``: what ``start()`` uses now (see the module docstring)."""
    chosen = os.environ.get(START_ENV, "auto") or "auto"
    if chosen not in _METHODS:
        raise ValueError(
            f"{START_ENV} must be one of {', '.join(_METHODS)} (got {chosen!r}); unset it to "
            "let chute choose."
        )
    if chosen != "auto":
        return chosen
    if _policy in _METHODS and _policy != "auto":
        return _policy
    like_pytorch = _policy == "as_pytorch"
    return "fork" if fork_unsafe_reason(as_pytorch_forks=like_pytorch) is None else "forkserver"


_policy = "auto"  # how workers start inside ``starting()``


@contextlib.contextmanager
def starting(policy: str) -> Iterator[None]:
    """Workers started inside start as ``policy`` says: ``"fork"``, ``"forkserver"``,
    ``"auto"`` or ``"as_pytorch"`` (fork unless the child would break: see
    ``fork_unsafe_reason``).  ``CHUTE_WORKER_START``, when set, still wins."""
    global _policy
    before, _policy = _policy, policy
    try:
        yield
    finally:
        _policy = before


def prepare(*, only_beside_jax: bool = False) -> None:
    """Starts the fork server in the background if the workers will likely need it.

    They will when this process cannot fork now, and when it has imported
    JAX, whose runtime (started before any training step) makes forking
    unsafe.  The server then loads numpy and chute while the program goes
    on; the caller does not wait.  With ``only_beside_jax`` (at chute's
    import), only JAX's presence counts.
    """
    chosen = os.environ.get(START_ENV, "auto") or "auto"
    if chosen == "fork":
        return
    beside_jax = "jax" in sys.modules
    if only_beside_jax and not beside_jax:
        return
    if beside_jax or start_method() == "forkserver":
        context()
        with _LOCK:
            multiprocessing.forkserver.ensure_running()


def _without_main(prepare: Any) -> Any:
    def preparation_data(name: str) -> dict[str, Any]:
        data = prepare(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return dict(data)

    return preparation_data


class WorkerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver process that does not re-import the parent's ``__main__``."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        context()  # make sure the server gets chute's preload list
        with _LOCK:
            original = spawn.get_preparation_data
            spawn.get_preparation_data = _without_main(original)
            try:
                return popen_forkserver.Popen(process_obj)
            finally:
                spawn.get_preparation_data = original


class ForkedWorkerProcess(multiprocessing.context.ForkProcess):
    """A worker forked straight from the parent."""


def start(
    target: Any, args: tuple[Any, ...], name: str, method: str | None = None
) -> multiprocessing.process.BaseProcess:
    """Starts ``target(*args)`` in a worker process (daemonic), by ``method`` or as chosen now.

    With ``forkserver``, ``args`` must be picklable.
    """
    method = method or start_method()
    kind = ForkedWorkerProcess if method == "fork" else WorkerProcess
    process = kind(target=target, args=args, name=name, daemon=True)
    process.start()
    return process


def keep_out_of_children(*connections: Any) -> None:
    """Marks parent-side pipe ends that a forked child must not hold open."""
    _parent_ends.update(connections)


def _close_parent_ends() -> None:
    for conn in list(_parent_ends):
        try:
            conn.close()
        except OSError:
            pass
    _parent_ends.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_parent_ends)


def dumps(obj: Any) -> bytes:
    """``obj`` pickled by value where needed, with the file names of its functions kept.

    cloudpickle 3.1.3 and later write every code object's file as
    ``<dynamic-code>``; a worker's traceback would then show no source line
    for the user's functions.  chute keeps the real name, so it does.
    """
    if _code_reduce is None:  # a cloudpickle without the hook: its own way
        return cloudpickle.dumps(obj)
    buffer = io.BytesIO()
    _NamedCodePickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()


_DYNAMIC_CODE = "<dynamic-code>"
_code_reduce = getattr(getattr(cloudpickle, "cloudpickle", None), "_code_reduce", None)


def _code_with_its_file(code: types.CodeType) -> Any:
    rebuild, args = _code_reduce(code)  # type: ignore[misc]
    return rebuild, tuple(code.co_filename if a == _DYNAMIC_CODE else a for a in args)


class _NamedCodePickler(cloudpickle.Pickler):
    dispatch_table: ClassVar[dict[Any, Any]] = {
        **cloudpickle.Pickler.dispatch_table,
        types.CodeType: _code_with_its_file,
    }


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_KEEP_FREE_BYTES = 256 << 20
_MMAP_ABOVE_BYTES = 32 << 20  # glibc's largest mmap threshold on 64-bit systems


def keep_freed_memory() -> None:
    """Makes glibc keep freed heap memory in this (worker) process instead of returning it.

    A worker frees a whole batch of elements at once (they were stacked);
    by default glibc then gives that memory back to the system and faults
    it in again, page by page, for the next batch: for a batch of images,
    system time that can reach a sixth of the work.  Kept, it is reused.
    Elements under 32 MiB come from the heap rather than fresh mappings.
    The peak memory stays what it was.  Nothing happens off glibc.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_ABOVE_BYTES)
    mallopt(_M_TRIM_THRESHOLD, _KEEP_FREE_BYTES)


def ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the parent, which stops them by closing their pipes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_for(conn: multiprocessing.connection.Connection, process: Any) -> bool:
    """Waits until ``conn`` has data (True) or the process has died (False)."""
    ready = multiprocessing.connection.wait([conn, process.sentinel])
    return conn in ready or conn.poll()


__all__ = [
    "START_ENV",
    "ForkedWorkerProcess",
    "WorkerProcess",
    "context",
    "dumps",
    "fork_unsafe_reason",
    "keep_freed_memory",
    "keep_out_of_children",
    "prepare",
    "start",
    "start_method",
    "wait_for",
]

"""Iterator checkpoints as JSON files, one per process, with or without Orbax.

A checkpoint directory holds ``process_{i}-of-{n}.json`` for process ``i`` of
``n`` (``jax.process_index()`` of ``jax.process_count()``, or 0 of 1 without
JAX), the text of the iterator's ``get_state()``: a dict for a
``DatasetIterator``, the JSON bytes of a ``DataLoaderIterator``.  The layout is
Grain's, so Grain and chute read each other's iterator checkpoints.

Each dataset iterator's state carries its pipeline's fingerprint, and a
restore into a different pipeline raises ``CheckpointError`` naming the first
stage that differs; ``allow_pipeline_change(iterator)`` accepts the change
deliberately, for ``set_state``, ``load`` and the Orbax handler alike.

``save``/``load`` need nothing beyond chute; ``CheckpointHandler`` plugs the
same files into ``orbax.checkpoint.CheckpointManager`` through the
``CheckpointSave``/``CheckpointRestore`` arguments, which are built (and
registered with Orbax) the first time they are asked for.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

from chute._core.errors import CheckpointError
from chute._core.iterator import DatasetIterator
from chute._core.pipeline_walk import pipeline_nodes
from chute._loader.data_loader import DataLoaderIterator
from chute._stages.virtual_shards import merge_states
from chute._stages.virtual_shards_iter import ShardTurns

It = TypeVar("It")


class MissingCheckpointFileError(FileNotFoundError, ValueError):
    """``CheckpointHandler.restore`` found no file: a ``ValueError`` as in Grain, and an OSError."""


def process_file_name(iterator: Any = None) -> str:
    """This process's file name in a checkpoint directory, ``process_{i}-of-{n}.json``.

    For an iterator of a ``virtual_shards`` pipeline, ``i`` of ``n`` is its host
    (``shard_options``), so hosts started without JAX write files of their own.
    """
    from chute._core.sharding import _jax_process_index_and_count

    host = _virtual_host(iterator)
    index, count = host if host is not None else _jax_process_index_and_count()
    return f"process_{index}-of-{count}.json"


def _virtual_host(iterator: Any) -> tuple[int, int] | None:
    """``(host, hosts)`` of a ``virtual_shards`` iterator in ``iterator``, or None."""
    if not isinstance(iterator, DatasetIterator):
        return None
    for node in pipeline_nodes(iterator):
        host = getattr(node, "host", None) if isinstance(node, ShardTurns) else None
        if host is not None:
            return (int(host[0]), int(host[1]))
    return None


def _read(
    iterator: Any, directory: Any, what: str, missing: Callable[[Any, list[str]], Exception]
) -> None:
    """Restores ``iterator`` from its file in ``directory``; a ``virtual_shards`` iterator
    from the merge of every host's file, so it resumes on any number of hosts."""
    if _virtual_host(iterator) is not None:
        files = sorted(directory.glob("process_*-of-*.json"))
        counts = {f.name.rsplit("-of-", 1)[1] for f in files}
        if len(counts) > 1:
            raise CheckpointError(
                f"{what}: {directory} holds process files of {len(counts)} different runs "
                f"({[f.name for f in files]}); keep one run's files per directory."
            )
        if files:
            states = [_parse(f.read_text(encoding="utf-8"), f) for f in files]
            iterator.set_state(merge_states(states))
            return
    target = directory / process_file_name(iterator)
    if not target.is_file():
        raise missing(target, sorted(p.name for p in directory.glob("process_*.json")))
    _decode(iterator, target.read_text(encoding="utf-8"), target)


def _no_file(target: Any, found: list[str]) -> FileNotFoundError:
    return FileNotFoundError(
        f"chute.checkpoint.load(): {target} does not exist (found {found or 'no'} process "
        "files; was it saved by a run with another process count?)."
    )


def _no_orbax_file(target: Any, found: list[str]) -> MissingCheckpointFileError:
    return MissingCheckpointFileError(
        f"File {target} does not exist. chute: no checkpoint file for this process in the "
        "directory; was it saved by a run with another process count?"
    )


def _check_iterator(iterator: Any, what: str) -> None:
    if not (callable(getattr(iterator, "get_state", None)) and hasattr(iterator, "set_state")):
        raise TypeError(
            f"{what} takes an iterator with get_state() and set_state() (a chute "
            f"DatasetIterator or DataLoaderIterator); got {type(iterator).__name__}."
        )


def _encode(iterator: Any) -> str:
    """The iterator's state as the text of a checkpoint file."""
    state = iterator.get_state()
    if isinstance(state, bytes):
        return state.decode()
    if isinstance(state, str):
        return state
    return json.dumps(state, indent=2)


def _takes_bytes(iterator: Any) -> bool:
    if isinstance(iterator, DatasetIterator):
        return False
    if isinstance(iterator, DataLoaderIterator):
        return True
    return isinstance(iterator.get_state(), (bytes, str))


def _decode(iterator: Any, text: str, where: Any) -> None:
    """Restores ``iterator`` from the text of the checkpoint file ``where``."""
    if _takes_bytes(iterator):
        iterator.set_state(text.encode())
        return
    iterator.set_state(_parse(text, where))


def _parse(text: str, where: Any) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"{where} is not a JSON iterator checkpoint ({exc}).") from None


def allow_pipeline_change(iterator: It) -> It:
    """Lets ``iterator`` restore states saved by a pipeline that differs from its own.

    chute's addition: a dataset iterator's state records the stages of the
    pipeline that saved it, and ``set_state()`` refuses a state from a
    different pipeline with ``CheckpointError`` naming the first stage that
    differs.  After a deliberate change (a renamed function, a new dataset
    length) call this on the fresh iterator before restoring; the saved
    positions are then taken as they are.  Returns the same iterator, so it
    also fits ``CheckpointRestore(allow_pipeline_change(iterator))``.

    Args:
      iterator: the fresh iterator that will restore the state.

    >>> import chute
    >>> it = iter(chute.MapDataset.range(8).batch(2).to_iter_dataset())
    >>> _ = next(it)
    >>> other = allow_pipeline_change(iter(chute.MapDataset.range(8).to_iter_dataset()))
    >>> other.set_state(it.get_state())
    >>> next(other)
    1
    """
    _check_iterator(iterator, "chute.checkpoint.allow_pipeline_change()")
    iterator._allow_pipeline_change = True  # type: ignore[attr-defined]
    return iterator


def save(iterator: Any, directory: str | os.PathLike[str]) -> pathlib.Path:
    """Writes ``iterator``'s state into ``directory`` (created if missing), atomically.

    The file is written beside its final name and renamed into place, so a
    crash never leaves a half-written checkpoint.  Returns the file's path.

    Args:
        iterator: A ``DatasetIterator`` or ``DataLoaderIterator``.
        directory: The folder to write into.

    >>> import tempfile, chute
    >>> it = iter(chute.MapDataset.range(5))
    >>> _ = next(it)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = save(it, d)
    ...     restored = load(iter(chute.MapDataset.range(5)), d)
    >>> next(restored)
    1
    """
    _check_iterator(iterator, "chute.checkpoint.save()")
    path = pathlib.Path(directory)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"chute.checkpoint.save(): {path} exists and is not a directory.")
    path.mkdir(parents=True, exist_ok=True)
    target = path / process_file_name(iterator)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_encode(iterator))
        os.replace(tmp, target)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load(iterator: It, directory: str | os.PathLike[str]) -> It:
    """Restores ``iterator`` from the checkpoint that ``save`` wrote into ``directory``.

    Returns the same iterator, moved to the saved position.  A missing
    directory or file raises ``FileNotFoundError`` naming what was looked for.

    Args:
        iterator: A fresh iterator of the same pipeline.
        directory: The folder ``save`` wrote.
    """
    _check_iterator(iterator, "chute.checkpoint.load()")
    path = pathlib.Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"chute.checkpoint.load(): no checkpoint directory {path}.")
    _read(iterator, path, "chute.checkpoint.load()", _no_file)
    return iterator


class CheckpointHandler:
    """An Orbax ``CheckpointHandler`` for chute iterators (DatasetIterator, DataLoaderIterator).

    Use it through ``CheckpointSave(iterator)`` and ``CheckpointRestore(iterator)``
    inside ``orbax.checkpoint.args.Composite`` to save a data iterator together
    with the model state in one ``CheckpointManager`` step.
    """

    def save(self, directory: Any, item: Any = None, args: Any = None) -> None:
        """Writes ``item`` (or ``args.item``)'s state into ``directory``.

        Args:
            directory: The checkpoint folder (an ``epath.Path`` or path).
            item: The iterator to save.
            args: A ``CheckpointSave`` holding the iterator, instead of ``item``.
        """
        item = item if item is not None else args.item
        _check_iterator(item, "chute.checkpoint.CheckpointHandler.save()")
        (directory / process_file_name(item)).write_text(_encode(item))

    def restore(self, directory: Any, item: Any = None, args: Any = None) -> Any:
        """Restores ``item`` (or ``args.item``) from ``directory`` and returns it.

        Args:
            directory: The checkpoint folder.
            item: The iterator to restore in place.
            args: A ``CheckpointRestore`` holding the iterator, instead of ``item``.
        """
        item = item if item is not None else args.item
        _check_iterator(item, "chute.checkpoint.CheckpointHandler.restore()")
        _read(item, directory, "chute.checkpoint.CheckpointHandler.restore()", _no_orbax_file)
        return item

    def structure(self, directory: Any) -> None:
        """Not used for iterator checkpoints.

        Args:
            directory: Unused.
        """
        del directory

    def metadata(self, directory: Any) -> None:
        """Iterator checkpoints carry no metadata.

        Args:
            directory: Unused.
        """
        del directory

    def finalize(self, directory: Any) -> None:
        """Nothing to finalize: each process's file is complete once written.

        Args:
            directory: Unused.
        """
        del directory

    def close(self) -> None:
        """Holds no resources."""

    @classmethod
    def typestr(cls) -> str:
        """The name Orbax records for this handler."""
        return f"{cls.__module__}.{cls.__qualname__}"


@functools.cache
def orbax_args() -> tuple[type, type]:
    """``(CheckpointSave, CheckpointRestore)``, built and registered with Orbax once."""
    try:
        import orbax.checkpoint as ocp
    except ImportError as exc:
        raise ImportError(
            "chute.checkpoint.CheckpointSave/CheckpointRestore need Orbax: pip install chute[orbax]"
        ) from exc

    @ocp.args.register_with_handler(CheckpointHandler, for_save=True)
    @dataclasses.dataclass
    class CheckpointSave(ocp.args.CheckpointArgs):
        """Orbax save argument: the iterator whose state to save.

        Args:
            item: The iterator (``DatasetIterator`` or ``DataLoaderIterator``) to save.
        """

        item: Any

    @ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
    @dataclasses.dataclass
    class CheckpointRestore(ocp.args.CheckpointArgs):
        """Orbax restore argument: the iterator to restore (in place) and return.

        Args:
            item: The iterator to restore in place.
        """

        item: Any

    for cls in (CheckpointSave, CheckpointRestore):
        cls.__module__ = "chute.checkpoint"
    return CheckpointSave, CheckpointRestore

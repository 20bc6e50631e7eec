"""Checking a DataLoader state whole before ``set_state()`` stops a worker.

A parsed state (chute's, or Grain's translated) is checked key by key: the
worker count, whose turn it is, which workers ran out, the stream of positions
left to re-deal, the workers' positions, and each worker's pipeline state,
against the pipeline that worker runs, built here as the worker builds it
(``chute._core.state_check`` says what is checked there).  A refusal is a
``CheckpointError`` naming the key; the loader's workers are left as they were.
"""

from __future__ import annotations

from typing import Any

from chute._core.errors import CheckpointError
from chute._core.nesting import inner_iterator
from chute._core.state_check import is_int
from chute._loader.pipeline import worker_dataset
from chute._stages.streams import Stream, positions_of

_NAME = "DataLoaderIterator"
_REQUIRED = ("worker_count", "turn", "exhausted", "stream", "positions", "workers")
_DESCRIPTIONS = ("version", "sampler", "data_source", "shard_options")  # checked by _parse


def _refuse(key: str, expected: str, value: Any) -> CheckpointError:
    got = f"{value!r}"
    got = got if len(got) <= 80 else got[:77] + "..."
    return CheckpointError(
        f"{_NAME}.set_state(): {key} must be {expected} (got {got}), at state[{key!r}]; pass "
        "the bytes that get_state() returned, unchanged."
    )


def check_loader_state(loader: Any, saved: dict[str, Any]) -> None:
    """Raises ``CheckpointError`` unless ``saved`` (parsed) fits ``loader``; changes nothing."""
    missing = [key for key in _REQUIRED if key not in saved]
    unknown = sorted(set(saved) - set(_REQUIRED) - set(_DESCRIPTIONS))
    if missing or unknown:
        raise CheckpointError(
            f"{_NAME}.set_state(): the state lacks {missing} and holds {unknown}, which a "
            f"DataLoader never writes (it writes {sorted(_REQUIRED + _DESCRIPTIONS)}); pass "
            "the bytes that get_state() returned, unchanged."
        )
    workers = saved["worker_count"]
    if not is_int(workers) or not workers:
        raise _refuse("worker_count", "an int >= 1", workers)
    states = saved["workers"]
    if not isinstance(states, list) or len(states) != workers:
        raise _refuse("workers", f"a list of {workers} worker states", states)
    if not is_int(saved["turn"], workers - 1):
        raise _refuse("turn", f"an int >= 0 and < {workers} (the worker count)", saved["turn"])
    exhausted = saved["exhausted"]
    if not (
        isinstance(exhausted, list)
        and len(exhausted) == workers
        and all(isinstance(x, bool) for x in exhausted)
    ):
        raise _refuse("exhausted", f"a list of {workers} bools", exhausted)
    stream = _stream(saved["stream"], loader._length())
    for w, state in enumerate(states):
        ds = worker_dataset(
            stream, w, workers, loader._sampler, loader._source, loader._operations,
            loader._read_options, loader._seed, loader._shard,
        )  # fmt: skip
        with inner_iterator(ds) as pipeline:
            pipeline._validate_state(state, f"state['workers'][{w}]")
    _check_positions(saved["positions"], states)


def _stream(saved: Any, end: int) -> Stream:
    """The stream of positions a state's workers read."""
    if not Stream.saved_well(saved, end):
        expected = f"{{'pending': [positions below {end}], 'tail': a position up to {end}}}"
        raise _refuse("stream", expected, saved)
    return Stream(tuple(saved["pending"]), saved["tail"], end)


def _check_positions(positions: Any, states: list[Any]) -> None:
    """The positions each worker consumed: those its state says (None inside a batch)."""
    try:
        expected = positions_of(states)
    except (ValueError, TypeError, KeyError, AttributeError):  # the worker check says why
        return
    if positions != expected:
        said = "None (a worker stopped inside a batch)" if expected is None else f"{expected}"
        raise _refuse("positions", f"{said}, as the workers' states say", positions)

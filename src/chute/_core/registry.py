"""Where ``_core`` calls up: the stages, statistics and Grain states that higher packages install.

``_core`` imports no other package of chute, not even inside a function.  Where
its code must reach a layer above, it calls through this module, which those
layers fill when they are imported (``import chute`` imports them all, and so
does a worker process, whose fork server imports chute):

* ``stages``: the stage classes that the fluent methods build (``ds.map(f)`` is
  ``stages.MapMapDataset(ds, f)``), and the element-spec rules; registered by
  ``chute._stages`` with ``register_stages``, from the list in
  ``chute._stages.registered``, which is what a type checker sees as ``stages``;
* ``stats``: whether ``iter(ds)`` keeps statistics and how it times a pipeline;
  installed by ``chute._stats`` with ``install_stats``;
* ``from_grain``: the translation of a state saved by Grain's iterator that
  ``set_state`` reads; installed by ``chute._grain`` with ``install_grain``.

Statistics time a pipeline through copies of its stages whose classes are
made for them; ``untimed_type`` tells the stage class of such a copy, so that
stages can recognise each other without knowing about statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from chute._core.errors import CheckpointError

__all__ = [
    "UNTIMED",
    "StatsHooks",
    "install_grain",
    "install_stats",
    "register_stages",
    "stages",
    "stats",
    "untimed_type",
]


class _Stages:
    """The stage classes (and stage functions) by name, filled by ``chute._stages``."""

    def __getattr__(self, name: str) -> Any:  # only reached for a name not registered
        raise AttributeError(
            f"no stage {name!r} is registered with chute._core.registry: chute._stages "
            "registers its stages when it is imported; import chute before building a pipeline."
        )


if TYPE_CHECKING:  # what type checkers and editors see: the stage classes themselves
    from chute._stages import registered as stages
else:
    #: The stage classes: ``stages.BatchMapDataset``, ``stages.mp_prefetch``, ...
    stages = _Stages()


def register_stages(**entries: Any) -> None:
    """Makes each ``name=class`` (or function) of ``entries`` available as ``stages.name``."""
    for name, entry in entries.items():
        setattr(stages, name, entry)


class StatsHooks(Protocol):
    """What ``iter(ds)`` asks the statistics (``chute._stats.instrument`` provides it)."""

    def wanted(self, ds: Any) -> bool:
        """Whether iterating ``ds`` should keep statistics."""

    def instrument(self, ds: Any) -> tuple[Any, Any]:
        """A timed copy of ``ds``'s graph, and the collector that reads its figures."""

    def picture_when_asked(self, ds: Any) -> None:
        """Writes ``ds``'s picture where the configuration asks for one."""


class _NoStats:
    """Before ``chute._stats`` installs its hooks: no statistics, no picture."""

    def wanted(self, ds: Any) -> bool:
        return False

    def instrument(self, ds: Any) -> tuple[Any, Any]:
        raise RuntimeError("chute._stats is not loaded: import chute to keep statistics.")

    def picture_when_asked(self, ds: Any) -> None:
        return None


#: The statistics hooks in force (read at each outermost ``iter()``).
stats: StatsHooks = _NoStats()


def install_stats(hooks: StatsHooks) -> None:
    """Makes ``hooks`` the statistics that ``iter(ds)`` asks."""
    global stats
    stats = hooks


#: The attribute where a timed copy's class keeps the stage class it copies.
UNTIMED = "_chute_untimed"


def untimed_type(obj: Any) -> type:
    """The stage class of ``obj``, whether or not it is a timed copy."""
    cls = type(obj)
    return cls.__dict__.get(UNTIMED, cls)


def _no_grain(it: Any, state: Any) -> dict[str, Any]:
    raise CheckpointError(
        f"{it._stage_name()}.set_state() got a state saved by Grain, but chute._grain, which "
        "translates such states, is not loaded: import chute first."
    )


#: ``from_grain(iterator, grain_state)``: the chute state at the position of Grain's state.
from_grain: Callable[[Any, Any], dict[str, Any]] = _no_grain


def install_grain(translate: Callable[[Any, Any], dict[str, Any]]) -> None:
    """Makes ``translate`` the translation ``set_state`` applies to a state Grain saved."""
    global from_grain
    from_grain = translate

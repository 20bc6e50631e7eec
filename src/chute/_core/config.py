"""``chute.config``: process-wide options, read and set by name as in Grain.

``chute.config.update("py_debug_mode", True)`` sets an option;
``chute.config.py_debug_mode`` and ``chute.config.get_or_default(name)`` read
it.  Every option can also be set before the program starts with an
environment variable: ``CHUTE_`` and the option's name in capitals
(``CHUTE_PY_DEBUG_MODE=1``).

Grain's ``tf_*`` options configure its TensorFlow data loaders, which chute
does not have: they are accepted and stored so that configuration code runs
unchanged, and change nothing.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any


@dataclasses.dataclass(frozen=True)
class _Option:
    default: Any
    kind: type | tuple[str, ...]  # a type, or the allowed strings
    help: str
    optional: bool = False  # None is allowed


_OPTIONS: dict[str, _Option] = {
    "py_debug_mode": _Option(
        False, bool, "Grain's switch for per-stage statistics of every pipeline."
    ),
    "py_dataset_visualization_output_dir": _Option(
        None, str, "Where to write a picture of each pipeline when it starts.", optional=True
    ),
    "stats_log_interval_s": _Option(
        60.0, float, "chute only: seconds between the statistics summaries logged while tracking."
    ),
    "remote_request_timeout_s": _Option(
        30.0,
        float,
        "chute only: seconds an object-store request may go unanswered before it fails "
        "(and is retried).",
    ),
    "py_relay_sigterm_to_main": _Option(
        False, bool, "Accepted for Grain's code; chute's workers exit with their parent."
    ),
    "py_traceback_filtering": _Option(
        "auto",
        ("auto", "off", "tracebackhide", "quiet_remove_frames", "remove_frames"),
        "Accepted for Grain's code; chute shows the user's frames of worker errors.",
    ),
    "tf_interleaved_shuffle": _Option(False, bool, "Grain's TensorFlow loaders only."),
    "tf_interleaved_shuffle_block_size": _Option(10, int, "Grain's TensorFlow loaders only."),
    "tf_interleaved_shuffle_parallel_blocks": _Option(10, int, "Grain's TensorFlow loaders only."),
    "tf_lookup_batch_size": _Option(100, int, "Grain's TensorFlow loaders only."),
    "tf_lookup_num_parallel_calls": _Option(-1, int, "Grain's TensorFlow loaders only."),
    "tf_lookup_fast_warmup": _Option(False, bool, "Grain's TensorFlow loaders only."),
    "tf_optimized_sequential_read": _Option(False, bool, "Grain's TensorFlow loaders only."),
    "tf_prefetch_buffer_size": _Option(-1, int, "Grain's TensorFlow loaders only."),
}

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _checked(name: str, option: _Option, value: Any) -> Any:
    if value is None and option.optional:
        return None
    kind = option.kind
    if isinstance(kind, tuple):
        if value not in kind:
            raise ValueError(f"chute.config: {name} must be one of {kind} (got {value!r}).")
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if (kind in (int, float) and isinstance(value, bool)) or not isinstance(value, kind):
        raise TypeError(
            f"chute.config: {name} takes a {kind.__name__} (got {value!r} that is a "
            f"{type(value).__name__})."
        )
    return value


def _from_environment(name: str, option: _Option) -> Any:
    variable = "CHUTE_" + name.upper()
    text = os.environ.get(variable)
    if text is None:
        return option.default
    if option.kind is bool:
        if text.strip().lower() not in _TRUE + _FALSE:
            raise ValueError(f"{variable}={text!r}: use 1 or 0.")
        return text.strip().lower() in _TRUE
    if option.kind in (int, float):
        try:
            return option.kind(text)
        except ValueError:
            raise ValueError(f"{variable}={text!r}: expected a number.") from None
    return _checked(name, option, text)


class Config:
    """Process-wide options (``chute.config``); set them with ``update``.

    >>> from chute import config
    >>> config.get_or_default("py_debug_mode")
    False
    >>> config.update("py_debug_mode", True); config.py_debug_mode
    True
    >>> config.update("py_debug_mode", False)
    """

    _HAS_DYNAMIC_ATTRIBUTES = True

    def __init__(self) -> None:
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_values", {})

    def _unknown(self, name: str) -> ValueError:
        return ValueError(
            f"Unrecognized config option: {name}. chute: the options are {', '.join(_OPTIONS)}."
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in _OPTIONS:
            if name.startswith("__"):
                raise AttributeError(name)
            raise self._unknown(name)
        values = self.__dict__["_values"]
        if name not in values:
            values[name] = _from_environment(name, _OPTIONS[name])
        return values[name]

    def get_or_default(self, name: str) -> Any:
        """The option's value: what ``update`` set, else the environment's, else the default."""
        return getattr(self, name)

    def update(self, name: str, value: Any) -> None:
        """Sets option ``name`` to ``value`` for this process (and workers started later).

        Raises:
          ValueError: ``name`` is not an option, or ``value`` is not one it allows.
          TypeError: ``value`` has the wrong type.
        """
        if name not in _OPTIONS:
            raise self._unknown(name)
        with self._lock:
            self._values[name] = _checked(name, _OPTIONS[name], value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise ValueError(f"Please use update(). chute: chute.config.update({name!r}, {value!r}).")

    def __dir__(self) -> list[str]:
        return sorted({"get_or_default", "update", *_OPTIONS})

    def __repr__(self) -> str:
        return "chute.config(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _OPTIONS) + ")"


config = Config()

"""``MODULE:FUNCTION`` and ``--arg K=V``: the user's pipeline function, found and called.

``MODULE`` is a dotted module name, imported with the current folder first on
``sys.path`` as ``python -m`` does, or the path of a ``.py`` file, imported
with its folder first on ``sys.path`` as ``python file.py`` does.  Such a
module (or a package found in the current folder) is pickled by value for
worker processes, which may not find it by name.  Mistakes
in the names are ``CliError``\\ s (exit status 2); an exception that the
user's own code raises is a ``UserCodeError`` carrying it, so that the
command can show its traceback.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from chute._cli.errors import CliError

__all__ = ["UserCodeError", "dataset_from", "load_function", "parse_kwargs"]

_NAME = r"[A-Za-z_]\w*"
_DOTTED = re.compile(rf"{_NAME}(\.{_NAME})*")
_FORM = "MODULE:FUNCTION (e.g. my_pipeline:make_dataset or path/to/file.py:make_dataset)"


class UserCodeError(Exception):
    """The user's module or function raised ``error`` while ``doing`` (its traceback is shown)."""

    def __init__(self, doing: str, error: BaseException) -> None:
        super().__init__(f"{doing} raised {type(error).__name__}: {error}")
        self.error = error


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``--arg`` values as keyword arguments: Python literals where they parse, else strings.

    >>> parse_kwargs(["n=30", "name=train", "sizes=[1, 2]", "flag=True", "path=data/x"])
    {'n': 30, 'name': 'train', 'sizes': [1, 2], 'flag': True, 'path': 'data/x'}
    """
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        key = key.strip()
        if not equals or not re.fullmatch(_NAME, key):
            raise CliError(f"--arg {pair!r}: expected NAME=VALUE, e.g. --arg batch_size=32")
        if key in kwargs:
            raise CliError(f"--arg {key}=...: given twice; give each argument once")
        try:
            kwargs[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            kwargs[key] = text
    return kwargs


def load_function(target: str) -> Callable[..., Any]:
    """The function that ``MODULE:FUNCTION`` names (``FUNCTION`` may be dotted: ``Cls.make``)."""
    module_text, colon, attribute = target.rpartition(":")
    if not colon or not module_text or not _DOTTED.fullmatch(attribute):
        raise CliError(f"{target!r}: expected {_FORM}")
    if module_text.endswith(".py") or "/" in module_text or os.sep in module_text:
        module = _import_file(Path(module_text), target)
    elif _DOTTED.fullmatch(module_text):
        module = _import_module(module_text, target)
    else:
        raise CliError(f"{target!r}: {module_text!r} is neither a module name nor a .py file")
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise CliError(f"{target!r}: {module_text} has no {attribute!r}; check the name")
        found = getattr(found, part)
    if not callable(found):
        raise CliError(
            f"{target!r}: {attribute} is a {type(found).__name__}, not a function; name a "
            "function that returns the pipeline"
        )
    return found


def _import_module(name: str, target: str) -> ModuleType:
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise CliError(
                f"{target!r}: no module named {exc.name!r} in the current folder or on "
                "sys.path; run from the folder that holds it, or give a path to the .py file"
            ) from None
        raise UserCodeError(f"importing {name}", exc) from exc
    except Exception as exc:
        raise UserCodeError(f"importing {name}", exc) from exc
    top = sys.modules[name.partition(".")[0]]
    if Path(getattr(top, "__file__", None) or "/").resolve().is_relative_to(here):
        _send_by_value(top)  # found in the current folder, which workers may not look in
    return module


def _send_by_value(module: ModuleType) -> None:
    """Workers get the module's functions by value, not by importing it by name.

    A fork-server worker has the ``sys.path`` the server started with, which
    may lack the user's folder.
    """
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def _import_file(path: Path, target: str) -> ModuleType:
    if path.suffix != ".py" or not path.is_file():
        raise CliError(f"{target!r}: {path} is not a .py file; check the path")
    path = path.resolve()
    name = path.stem
    if not _DOTTED.fullmatch(name) or _other_module(name, path):
        name = "_chute_profile_" + re.sub(r"\W", "_", name)  # leaves the module it would shadow
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"{target!r}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as `python file.py`: its neighbours import, workers find it
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise UserCodeError(f"importing {path.name}", exc) from exc
    _send_by_value(module)
    return module


def _other_module(name: str, path: Path) -> bool:
    """Whether ``name`` is already imported from somewhere other than ``path``."""
    module = sys.modules.get(name)
    if module is None:
        return False
    origin = getattr(module, "__file__", None)
    return origin is None or Path(origin).resolve() != path


def dataset_from(function: Callable[..., Any], kwargs: dict[str, Any], target: str) -> Any:
    """Calls ``function(**kwargs)`` and returns its pipeline as an ``IterDataset``.

    A ``MapDataset`` is read through ``to_iter_dataset()``.  Anything else is a
    ``CliError`` naming what came back.
    """
    from chute._core.dataset import IterDataset, MapDataset

    try:
        inspect.signature(function).bind(**kwargs)
    except TypeError as exc:
        raise CliError(f"{target}: {exc}; check the --arg names") from None
    except ValueError:  # a builtin without a signature: let the call say
        pass
    try:
        result = function(**kwargs)
    except Exception as exc:
        raise UserCodeError(target, exc) from exc
    if isinstance(result, MapDataset):
        return result.to_iter_dataset()
    if isinstance(result, IterDataset):
        return result
    shown = repr(result)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise CliError(
        f"{target} returned {shown} (a {type(result).__name__}), not a MapDataset or "
        "IterDataset; return the pipeline itself, e.g. MapDataset.source(...).map(...)"
    )

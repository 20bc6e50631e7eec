"""The API reference site: every page in mkdocs.yml exists and every ``:::`` target imports.

CI builds the site itself (``mkdocs build --strict`` in ``.ci/run``); this
test catches a renamed or removed name without the docs tools installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import re
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = (ROOT / "mkdocs.yml").read_text()
PAGES = re.findall(r"^\s+- [^:]+: ([\w/]+\.md)$", CONFIG, flags=re.M)


def _resolve(target: str) -> object:
    """Imports ``a.b.C`` as the longest importable module plus attributes."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(target)


def test_nav_lists_the_guide_and_reference_pages() -> None:
    assert "index.md" in PAGES
    assert len(PAGES) >= 8
    for page in PAGES:
        assert (ROOT / "docs" / page).is_file(), f"mkdocs.yml lists docs/{page}, which is missing"


@pytest.mark.parametrize("page", [p for p in PAGES if p.startswith("reference/")])
def test_reference_targets_exist(page: str) -> None:
    targets = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs" / page).read_text(), flags=re.M)
    assert targets, f"docs/{page} documents nothing"
    for target in targets:
        assert _resolve(target) is not None


def test_reference_covers_every_public_module() -> None:
    documented = "\n".join((ROOT / "docs" / p).read_text() for p in PAGES if p != "index.md")
    modules = ("transforms", "sources", "experimental", "checkpoint", "samplers", "sharding")
    for module in (*modules, "testing", "torch"):
        assert f"::: chute.{module}" in documented


def test_docs_build_is_strict_and_in_ci() -> None:
    assert re.search(r"^strict: true$", CONFIG, flags=re.M)
    assert "mkdocs build --strict" in (ROOT / ".ci" / "run").read_text()


def test_guide_page_is_the_readme() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)

    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="index.md"))
    text = hooks.on_page_markdown("", page)
    assert text.startswith("# chute")
    assert "](examples/" not in text  # repository links become plain text

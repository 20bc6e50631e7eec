"""``chute.experimental.visualize``: the pipeline as text, DOT, SVG and HTML, and saving it."""

from __future__ import annotations

import errno
import html.parser
import os
import pathlib
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

import chute
from chute._stats import visualize as visualize_module
from chute._stats.graph import StageNode
from chute._stats.summary import ExecutionSummary, StageStats
from chute.experimental import PipelinePicture, visualize

SVG = "{http://www.w3.org/2000/svg}"


def _linear() -> chute.MapDataset[Any]:
    return chute.MapDataset.range(8).map(str).batch(2)


def _two_branches() -> chute.IterDataset[Any]:
    left = chute.MapDataset.range(4).map(lambda x: x * 2)
    right = chute.MapDataset.range(3).map(str)
    return chute.MapDataset.mix([left, right], weights=[1, 1]).to_iter_dataset().batch(2)


def _stats(index: int, name: str, parents: tuple[int, ...], share: float) -> StageStats:
    return StageStats(
        index=index,
        name=name,
        kind="MapMapDataset",
        parents=parents,
        spec="int64[]",
        where="main",
        elements=1000,
        calls=1000,
        self_seconds=share,
        min_seconds=1e-6,
        mean_seconds=share / 1000,
        max_seconds=0.01,
        bytes_per_element=8.0,
        share=share,
    )


def _summary() -> ExecutionSummary:
    stages = (
        _stats(0, "range", (), 0.05),
        _stats(1, "map(decode)", (0,), 0.85),
        _stats(2, "batch(2)", (1,), 0.10),
    )
    return ExecutionSummary(stages, 1.0, 0.5, 500, 0, 2, "decode is the bottleneck")


def _svg_of(page: str) -> ET.Element:
    start, end = page.index("<svg"), page.index("</svg>") + len("</svg>")
    return ET.fromstring(page[start:end])


def _fills(svg: ET.Element) -> dict[str, str]:
    return {
        g.get("id", ""): g.find(f"{SVG}rect").get("fill", "")  # type: ignore[union-attr]
        for g in svg.iter(f"{SVG}g")
    }


def test_text_of_a_linear_pipeline_puts_the_dataset_first_and_the_source_last() -> None:
    lines = visualize(_linear()).text.splitlines()

    assert len(lines) == 3
    assert lines[0].startswith("batch(2)") and "BatchMapDataset" in lines[0]
    assert lines[1].startswith("└─ map(str)") and "MapMapDataset" in lines[1]
    assert lines[2].startswith("   └─ range") and "dtype=int64" in lines[2]
    assert str(visualize(_linear())) == visualize(_linear()).text


def test_text_of_two_branches_shows_each_source_once_under_its_branch() -> None:
    text = visualize(_two_branches()).text
    lines = text.splitlines()

    assert len(lines) == 7
    assert text.count("range") == 2
    assert [line.split()[-1] for line in lines[:3]] == [
        "BatchIterDataset",
        "PrefetchIterDataset",
        "MixedMapDataset",
    ]
    assert lines[3].lstrip().startswith("├─ map(<lambda>)")
    assert lines[4].lstrip().startswith("│  └─ range")
    assert lines[5].lstrip().startswith("└─ map(str)")
    assert lines[6].lstrip().startswith("└─ range")


def test_text_marks_a_stage_read_twice_as_shown_above() -> None:
    shared = chute.MapDataset.range(3).map(str)
    lines = visualize(chute.experimental.ZipMapDataset([shared, shared])).text.splitlines()

    assert lines[-1].strip() == "└─ map(str) (shown above)"
    assert sum("range" in line for line in lines) == 1


def test_text_with_figures_shows_share_elements_time_and_place() -> None:
    lines = visualize(_summary()).text.splitlines()

    assert lines[1].split()[:8] == [
        "└─",
        "map(decode)",
        "MapMapDataset",
        "85.0%",
        "1,000",
        "el",
        "850",
        "µs/el",
    ]
    assert lines[1].split()[8:] == ["main", "int64[]"]


def test_dot_has_every_stage_and_edge_and_balanced_braces() -> None:
    ds = _two_branches()
    dot = visualize(ds).to_dot()

    assert dot.startswith("digraph pipeline {") and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}") == 1
    for index in range(7):
        assert re.search(rf"^  s{index} \[label=", dot, flags=re.M)
    edges = set(re.findall(r"^  s(\d+) -> s(\d+);$", dot, flags=re.M))
    assert edges == {("0", "1"), ("2", "3"), ("1", "4"), ("3", "4"), ("4", "5"), ("5", "6")}
    assert dot.count('fillcolor="#d9d9d9"') == 7


def test_dot_escapes_quotes_backslashes_and_braces_in_stage_names() -> None:
    def quoted(x: Any) -> Any:
        return x

    quoted.__qualname__ = 'say "hi" {now}\\here'
    dot = visualize(chute.MapDataset.range(2).map(quoted)).to_dot()

    assert 'label="map(say \\"hi\\" {now}\\\\here)\\nMapMapDataset"' in dot
    assert re.sub(r'"(?:[^"\\]|\\.)*"', '""', dot).count("{") == 1  # braces only outside strings


def test_dot_colours_stages_by_share_when_figures_exist() -> None:
    dot = visualize(_summary()).to_dot()
    colours = re.findall(r'fillcolor="(#[0-9a-f]{6})"', dot)

    assert len(set(colours)) == 3
    assert "#d9d9d9" not in colours
    assert "85.0% · 1,000 el · 850 µs/el · main" in dot


def test_html_is_self_contained_and_its_svg_has_one_box_per_stage() -> None:
    page = visualize(_two_branches()).to_html()
    parser = html.parser.HTMLParser()
    parser.feed(page)
    parser.close()
    svg = _svg_of(page)

    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http://" not in page.replace(SVG[1:-1], "")
    assert len(svg.findall(f"{SVG}g")) == 7
    assert len([p for p in svg.iter(f"{SVG}path") if p.get("class") == "edge"]) == 6
    assert visualize(_two_branches()).text.splitlines()[-1] in page
    assert {g.findtext(f"{SVG}title", "").splitlines()[0] for g in svg.iter(f"{SVG}g")} >= {
        "range",
        "mixed",
        "batch(2)",
    }


def test_svg_puts_a_stage_one_layer_below_its_deepest_parent() -> None:
    svg = ET.fromstring(visualize(_two_branches()).to_svg())
    top = {g.get("id"): float(g.find(f"{SVG}rect").get("y", "")) for g in svg.iter(f"{SVG}g")}  # type: ignore[union-attr]

    assert top["stage-0"] == top["stage-2"] < top["stage-1"] == top["stage-3"] < top["stage-4"]
    assert top["stage-4"] < top["stage-5"] < top["stage-6"]


def test_svg_routes_an_edge_that_skips_layers_beside_the_boxes_between() -> None:
    near = chute.MapDataset.range(4).map(str)
    far = chute.MapDataset.range(4)
    svg = ET.fromstring(visualize(chute.experimental.ZipMapDataset([near, far])).to_svg())
    boxes = [g.find(f"{SVG}rect") for g in svg.iter(f"{SVG}g")]
    middle = [b for b in boxes if b is not None and b.get("y") == boxes[1].get("y")]  # type: ignore[union-attr]
    edges = [p.get("d", "") for p in svg.iter(f"{SVG}path") if p.get("class") == "edge"]
    long_edges = [d for d in edges if " L" in d]

    assert len(long_edges) == 1
    lane_x = float(long_edges[0].split(" L")[1].split(",")[0])
    for box in middle:
        left = float(box.get("x", ""))
        assert not left <= lane_x <= left + float(box.get("width", ""))


def test_svg_colours_differ_by_share_and_hottest_is_reddest() -> None:
    fills = _fills(ET.fromstring(visualize(_summary()).to_svg()))

    assert len(set(fills.values())) == 3
    red = {stage: int(fill[1:3], 16) - int(fill[5:7], 16) for stage, fill in fills.items()}
    assert max(red, key=red.__getitem__) == "stage-1"
    assert min(red, key=red.__getitem__) == "stage-0"


def test_svg_and_html_escape_markup_in_stage_names() -> None:
    def markup(x: Any) -> Any:
        return x

    markup.__qualname__ = '<b>&"x"\x01'
    picture = visualize(chute.MapDataset.range(2).map(markup))
    svg = ET.fromstring(picture.to_svg())

    assert "<b>" not in picture.to_html()
    assert any("<b>&" in (t.text or "") for t in svg.iter(f"{SVG}text"))


@pytest.mark.parametrize("long", ["decode_" * 20, "画像を読み込んで拡大縮小して正規化する" * 3])
def test_svg_keeps_a_long_label_inside_its_box_with_the_whole_name_in_the_tooltip(
    long: str,
) -> None:
    from chute._stats.svg import _CHAR, _PAD

    stages = (_stats(0, "range", (), 0.5), _stats(1, f"map({long})", (0,), 0.5))
    svg = ET.fromstring(visualize(ExecutionSummary(stages, 1.0, 0.5, 500, 0, 2, "")).to_svg())
    for group in svg.iter(f"{SVG}g"):
        rect = group.find(f"{SVG}rect")
        assert rect is not None
        right = float(rect.get("x", "")) + float(rect.get("width", "")) - _PAD
        for text in group.iter(f"{SVG}text"):
            shown = text.text or ""
            cells = sum(2 if ord(c) > 0x2E80 else 1 for c in shown)  # CJK: two cells
            length = float(text.get("textLength", "inf"))  # what the viewer fits it to
            assert length == pytest.approx(cells * _CHAR, abs=0.1)
            assert float(text.get("x", "")) + length <= right
    box = next(g for g in svg.iter(f"{SVG}g") if g.get("id") == "stage-1")
    assert box.findtext(f"{SVG}text", "").endswith("…")
    assert box.findtext(f"{SVG}title", "").splitlines()[0] == f"map({long})"


def test_visualize_reads_the_dataset_of_an_iterator() -> None:
    it = iter(_linear())

    assert visualize(it).stages == visualize(_linear()).stages


def test_visualize_uses_an_iterators_summary_when_it_has_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    summary = _summary()
    monkeypatch.setattr("chute._stats.summary.execution_summary", lambda it: summary, raising=False)

    assert visualize(iter(_linear())).stages == summary.stages


def test_visualize_falls_back_to_the_graph_when_the_iterator_kept_no_statistics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_statistics(it: Any) -> ExecutionSummary:
        raise ValueError("made without statistics")

    monkeypatch.setattr("chute._stats.summary.execution_summary", no_statistics, raising=False)

    assert not visualize(iter(_linear())).has_figures


def test_visualize_asks_for_the_dataset_when_an_iterator_has_no_pipeline() -> None:
    it = iter(_linear())
    it._pipeline = None

    with pytest.raises(ValueError, match="pass the dataset instead"):
        visualize(it)


def test_visualize_takes_a_summary_directly() -> None:
    picture = visualize(_summary())

    assert picture.has_figures
    assert repr(picture) == "PipelinePicture(3 stages ending in 'batch(2)', with figures)"


@pytest.mark.parametrize("bad", [3, "range", [chute.MapDataset.range(2)], None])
def test_visualize_rejects_anything_else_with_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="takes a MapDataset, an IterDataset, a DatasetIterator"):
        visualize(bad)


def test_picture_rejects_parents_that_are_not_earlier_stages() -> None:
    stages = (StageNode(0, "a", "A", (1,)), StageNode(1, "b", "B", ()))

    with pytest.raises(ValueError, match="parents must be earlier stages"):
        PipelinePicture(stages)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="StageNode or StageStats"):
        PipelinePicture(("range",))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("suffix", "start"),
    [(".dot", "digraph"), (".html", "<!DOCTYPE html>"), (".svg", "<svg"), (".txt", "batch(2)")],
)
def test_save_writes_the_format_its_suffix_names(
    tmp_path: pathlib.Path, suffix: str, start: str
) -> None:
    path = visualize(_linear()).save(tmp_path / "deep" / f"pipeline{suffix}")

    assert path == tmp_path / "deep" / f"pipeline{suffix}"
    assert path.read_text(encoding="utf-8").startswith(start)


def test_save_rejects_an_unknown_suffix_and_lists_the_known_ones(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match=r"\.dot, \.html, \.svg, \.txt"):
        visualize(_linear()).save(tmp_path / "pipeline.png")
    assert not list(tmp_path.iterdir())


def test_write_picture_writes_a_new_html_page_and_dot_each_time(tmp_path: pathlib.Path) -> None:
    first = visualize_module.write_picture(_linear(), tmp_path / "pictures")
    second = visualize_module.write_picture(iter(_linear()), tmp_path / "pictures")

    assert first != second
    for page in (first, second):
        assert re.fullmatch(rf"pipeline-{os.getpid()}-\d+\.html", page.name)
        assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        assert page.with_suffix(".dot").read_text(encoding="utf-8").startswith("digraph")


def test_write_picture_names_the_option_when_it_cannot_write(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    with pytest.raises(OSError, match="py_dataset_visualization_output_dir"):
        visualize_module.write_picture(_linear(), blocker / "pictures")


def test_write_picture_keeps_the_kind_of_os_error_and_names_the_option(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(visualize_module, "open", refuse, raising=False)

    with pytest.raises(PermissionError, match="py_dataset_visualization_output_dir") as caught:
        visualize_module.write_picture(_linear(), tmp_path)
    assert caught.value.errno == errno.EACCES
    assert "Permission denied" in str(caught.value)

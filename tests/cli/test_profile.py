"""``chute profile MODULE:FUNCTION``: the table, the verdict, the outputs, the mistakes."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import chute
from chute._cli.profiling import Progress
from chute.cli import main

ROOT = Path(__file__).resolve().parents[2]

PIPELINE = """
import time

import chute

CALLS = []


def make(n=1000, workers=0, delay=0.005):
    CALLS.append(n)

    def slow_square(x):
        time.sleep(delay)
        return x * x

    ds = chute.MapDataset.range(n).map(slow_square)
    if workers:
        ds = ds.to_iter_dataset().mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
    return ds


def not_a_dataset():
    return [1, 2, 3]


def broken():
    raise RuntimeError("the pipeline could not be built")


def fails_when_read():
    def explode(x):
        raise ValueError(f"bad element {x}")

    return chute.MapDataset.range(10).map(explode)


def empty():
    return chute.MapDataset.range(0)


def image_batches(workers=2):
    import numpy as np

    def image(x):
        return np.full((64, 64, 3), x % 256, np.uint8)

    ds = chute.MapDataset.range(64).map(image).batch(8).to_iter_dataset()
    return ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The pipeline module's file; what importing it changed is undone afterwards."""
    path = tmp_path / "slow_pipeline.py"
    path.write_text(textwrap.dedent(PIPELINE))
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield path
    for name in set(sys.modules) - before:
        with contextlib.suppress(ValueError):
            cloudpickle.unregister_pickle_by_value(sys.modules[name])
        del sys.modules[name]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_table_names_the_slow_stage_and_prints_the_verdict(
    module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "profile", f"{module}:make", "--elements", 50)
    assert status == 0, err
    assert "map(slow_square)" in out
    assert "50 elements in" in out
    assert "Your loop waited for data" in out
    assert "Suggested performance config" in out
    assert ".mp_prefetch(MultiprocessingOptions(" in out
    assert not chute.config.py_debug_mode  # restored


def test_html_and_json_outputs(
    module: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html, data = tmp_path / "out" / "picture.html", tmp_path / "summary.json"
    status, out, err = run_cli(
        capsys, "profile", f"{module}:make", "--elements", 20, "--html", html, "--json", data,
        "--no-suggest",
    )  # fmt: skip
    assert status == 0, err
    assert "map(slow_square)" in html.read_text()
    summary = json.loads(data.read_text())
    names = [stage["name"] for stage in summary["stages"]]
    assert "map(slow_square)" in names
    assert summary["elements"] == 20
    assert "Suggested performance config" not in out
    assert str(html) in out and str(data) in out


def test_arg_reaches_the_function_as_a_literal(
    module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(
        capsys, "profile", f"{module}:make", "--arg", "n=30", "--seconds", 60, "--no-suggest"
    )
    assert status == 0, err
    assert sys.modules["slow_pipeline"].CALLS == [30]  # a literal, not the string "30"
    assert "the pipeline ended after 30 elements" in err
    assert "30 elements in" in out


def test_dotted_module_is_imported_from_the_current_folder(
    module: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(module.parent)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(module.parent))])
    monkeypatch.delitem(sys.modules, "slow_pipeline", raising=False)
    status, out, err = run_cli(capsys, "profile", "slow_pipeline:make", "--elements", 5)
    assert status == 0, err
    assert "map(slow_square)" in out


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("slow_pipeline", "expected MODULE:FUNCTION"),
        ("{file}:", "expected MODULE:FUNCTION"),
        (":make", "expected MODULE:FUNCTION"),
        ("{file}:no_such_function", "has no 'no_such_function'"),
        ("{file}:CALLS", "not a function"),
        ("{folder}/missing.py:make", "is not a .py file"),
        ("no_such_module_here:make", "no module named 'no_such_module_here'"),
        ("{file}:not_a_dataset", "returned [1, 2, 3] (a list), not a MapDataset or IterDataset"),
    ],
)
def test_mistakes_exit_2_in_one_line(
    module: Path, capsys: pytest.CaptureFixture[str], target: str, expected: str
) -> None:
    target = target.format(file=module, folder=module.parent)
    status, out, err = run_cli(capsys, "profile", target, "--elements", 5)
    assert status == 2
    assert err.startswith("chute profile: error:") and err.count("\n") == 1, err
    assert expected in err
    assert out == ""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--arg", "n"], "expected NAME=VALUE"),
        (["--arg", "n=1", "--arg", "n=2"], "given twice"),
        (["--arg", "m=1"], "unexpected keyword argument 'm'"),
        (["--html", "picture.png"], "end the name in one of"),
    ],
)
def test_bad_options_exit_2_in_one_line(
    module: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    status, _, err = run_cli(capsys, "profile", f"{module}:make", *argv)
    assert status == 2
    assert err.count("\n") == 1 and expected in err, err


def test_seconds_and_elements_exclude_each_other(
    module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run_cli(capsys, "profile", f"{module}:make", "--seconds", 1, "--elements", 5)
    assert status == 2 and "not allowed with" in err


@pytest.mark.parametrize(
    ("function", "message"),
    [("broken", "the pipeline could not be built"), ("fails_when_read", "bad element 0")],
)
def test_errors_in_user_code_show_the_traceback_and_exit_1(
    module: Path, capsys: pytest.CaptureFixture[str], function: str, message: str
) -> None:
    status, out, err = run_cli(capsys, "profile", f"{module}:{function}", "--elements", 5)
    assert status == 1
    assert "Traceback (most recent call last)" in err
    assert message in err and str(module) in err
    assert "(traceback above)" in err.splitlines()[-1]
    assert out == ""
    assert not chute.config.py_debug_mode


def test_empty_pipeline_gets_no_suggestion(
    module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "profile", f"{module}:empty", "--elements", 5)
    assert status == 0, err
    assert "the pipeline ended after 0 elements" in err
    assert "No elements read yet" in out
    assert "Suggested performance config: none;" in out


def test_worker_stages_are_reported_from_the_workers(
    module: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "summary.json"
    # 2 workers x 25 elements x 20 ms of sleep: each works past its 0.2 s report interval.
    status, out, err = run_cli(
        capsys, "profile", f"{module}:make", "--arg", "workers=2", "--arg", "delay=0.02",
        "--elements", 50, "--json", data,
    )  # fmt: skip
    assert status == 0, err
    summary = json.loads(data.read_text())
    where = {stage["name"]: stage["where"] for stage in summary["stages"]}
    assert where["map(slow_square)"] == "workers"
    assert where["mp_prefetch(2 workers)"] == "main"
    assert summary["workers"] == 2
    assert "runs mp_prefetch(MultiprocessingOptions(num_workers=2)) now" in out


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_progress_line_off_a_terminal() -> None:
    quiet = io.StringIO()
    progress = Progress(10, stream=quiet)
    progress.update(3)
    progress.close()
    assert quiet.getvalue() == ""


def test_progress_is_a_tqdm_bar_on_a_terminal_without_a_thread() -> None:
    pytest.importorskip("tqdm")
    threads = threading.active_count()
    progress = Progress(10, stream=Terminal())
    assert progress.bar is not None
    progress.update(3)
    assert progress.bar.n == 3
    progress.close()
    assert threading.active_count() == threads  # workers can still be forked


def test_progress_is_a_counter_without_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if not installed
    shown = Terminal()
    progress = Progress(10, stream=shown)
    progress.update(3)
    progress.close()
    assert "\r3 of 10 elements read" in shown.getvalue()


def test_example_runs_under_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    example = ROOT / "examples" / "profile_me.py"
    status, out, err = run_cli(capsys, "profile", f"{example}:make_dataset", "--elements", 3)
    assert status == 0, err
    assert "map(jitter)" in out and "Your loop waited" in out


def test_console_script_help_shows_an_example() -> None:
    code = "import sys; from chute.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "profile", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    assert "chute profile examples/profile_me.py:make_dataset --seconds 5" in done.stdout


def test_batches_made_in_workers_show_their_real_size(
    module: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "summary.json"
    status, out, err = run_cli(
        capsys, "profile", f"{module}:image_batches", "--json", data, "--no-suggest"
    )
    assert status == 0, err
    sizes = {s["name"]: s["bytes_per_element"] for s in json.loads(data.read_text())["stages"]}
    assert sizes["batch(8)"] == sizes["mp_prefetch(2 workers)"] == 8 * 64 * 64 * 3
    assert "98.3 kB" in out
    assert "uint8 rather than float32" not in out  # the batches are uint8 already


def test_a_run_of_a_few_milliseconds_is_not_told_to_use_workers(
    module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(
        capsys, "profile", f"{module}:make", "--arg", "n=10", "--arg", "delay=0.002",
        "--no-suggest",
    )  # fmt: skip
    assert status == 0, err
    assert "the pipeline ended after 10 elements" in err
    assert "would not pay off" in out and "run it in worker processes" not in out

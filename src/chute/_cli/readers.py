"""The input formats of ``chute convert``: how each is recognised and read as rows.

Each reader takes the input paths and returns the rows (lazily) and their
number when it is cheap to know (``None`` otherwise, for the progress bar).
"""

from __future__ import annotations

import contextlib
import glob
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from chute._cli import images
from chute._cli.errors import CliError, need
from chute._sources.parquet import checks as parquet_checks

__all__ = ["FORMATS", "READERS", "detect_format", "notes", "parquet_rows", "resolve_inputs"]

FORMATS = ("parquet", "jsonl", "npy", "npz", "images", "tfrecord", "huggingface")
_SUFFIXES = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".npy": "npy",
    ".npz": "npz",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
}
_FOLDER_FORMATS = ("images", "huggingface")
_BLOCK_BYTES = 16 << 20
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile)

Reader = Callable[[list[Path]], tuple[Iterator[Any], "int | None"]]


def resolve_inputs(spec: str) -> list[Path]:
    """The paths that ``spec`` (a file, a folder or a glob) names, sorted."""
    if glob.has_magic(spec):
        paths = sorted(Path(p) for p in glob.glob(spec))
        if not paths:
            raise CliError(f"{spec}: no file matches this pattern; check the path")
        return paths
    path = Path(spec)
    if not path.exists():
        raise CliError(f"{spec}: no such file or folder; check the path")
    return [path]


def _guess(path: Path) -> str:
    if path.is_dir():
        if (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists():
            return "huggingface"
        files = [p for p in path.rglob("*") if p.is_file()]
        if any(p.suffix.lower() in images.IMAGE_SUFFIXES for p in files):
            return "images"
        data = [p.suffix.lower() for p in files if p.suffix.lower() in _SUFFIXES]
        raise CliError(
            f"{path}: a folder with neither image files nor a Hugging Face dataset saved "
            f"with save_to_disk (found {images.found_text(files)}); pass a file or a glob "
            f"such as '{path}/*{data[0] if data else '.parquet'}'"
        )
    name = path.name.lower()
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix) or (fmt == "tfrecord" and suffix + "-" in name):
            return fmt
    raise CliError(
        f"{path}: cannot tell the format from the file name; pass --format ({', '.join(FORMATS)})"
    )


def notes(fmt: str, paths: list[Path]) -> list[str]:
    """What ``convert`` prints before reading ``paths``: for images, how labels were found.

    Raises a ``CliError`` for a folder that mixes images with other data files.
    """
    return images.scan(paths, _SUFFIXES.keys()).notes() if fmt == "images" else []


def detect_format(paths: list[Path], fmt: str = "auto") -> str:
    """The format of ``paths``: ``fmt`` itself, or guessed from them when it is ``auto``."""
    if fmt != "auto":
        if fmt not in FORMATS:
            raise CliError(f"unknown format {fmt!r}; use one of auto, {', '.join(FORMATS)}")
        for path in paths:
            if path.is_dir() != (fmt in _FOLDER_FORMATS):
                kind = "a folder" if fmt in _FOLDER_FORMATS else "a file"
                raise CliError(f"{path}: --format {fmt} reads {kind}; check the input")
        return fmt
    formats = {path: _guess(path) for path in paths}
    if len(set(formats.values())) > 1:
        found = ", ".join(f"{p} ({f})" for p, f in list(formats.items())[:4])
        raise CliError(f"the inputs mix formats: {found}; convert each format on its own")
    return formats[paths[0]]


@contextlib.contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """Turns a failure to read ``path`` into a ``CliError`` that names it."""
    try:
        yield
    except _READ_ERRORS as exc:
        raise CliError(f"{path}: not a readable {what} file ({exc}); check the file") from None


def _parquet(paths: list[Path]) -> tuple[Iterator[Any], int | None]:
    pq = need("pyarrow.parquet", "reading Parquet", "pyarrow")
    total = 0
    for path in paths:
        with _reading(path, "Parquet"):
            total += pq.ParquetFile(path).metadata.num_rows

    def rows() -> Iterator[Any]:
        for path in paths:
            with _reading(path, "Parquet"):
                pf = pq.ParquetFile(path, **parquet_checks.verified({}))
            yield from parquet_rows(pf, str(path))

    return rows(), total


def parquet_rows(pf: Any, name: str) -> Iterator[Any]:
    """The rows of an open ``ParquetFile`` as dicts, its page checksums verified.

    A damaged page or an unreadable row group is a ``CliError`` naming the file and
    the row group.
    """
    try:
        yield from parquet_checks.rows(pf, name, "chute convert")
    except (OSError, ValueError) as exc:
        raise CliError(str(exc).removeprefix("chute convert: ")) from None


def json_rows(lines: Iterable[bytes], name: object) -> Iterator[Any]:
    """The JSON value of each non-blank line; a bad line is a ``CliError`` naming it."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError as exc:
            raise CliError(
                f"{name} line {number}: not valid JSON ({exc}); fix or remove that line"
            ) from None


def _jsonl_lines(path: Path) -> Iterator[Any]:
    with _reading(path, "JSON Lines"), path.open("rb") as file:
        yield from json_rows(file, path)


def _jsonl(paths: list[Path]) -> tuple[Iterator[Any], int | None]:
    total = 0
    for path in paths:
        with _reading(path, "JSON Lines"), path.open("rb") as file:
            total += sum(1 for line in file if line.strip())
    return (row for path in paths for row in _jsonl_lines(path)), total


def _load_npy(path: Path) -> np.ndarray:
    with _reading(path, ".npy"):
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError:  # object arrays cannot be memory-mapped
            array = np.load(path, allow_pickle=False)
    if not isinstance(array, np.ndarray) or array.ndim == 0:
        raise CliError(f"{path}: holds a single value, not rows along axis 0; save an array")
    return array


def _row(array: np.ndarray, index: int) -> Any:
    """Row ``index`` of ``array`` as a plain ndarray (never a memmap) or a NumPy scalar."""
    row = array[index]
    return np.asarray(row) if isinstance(row, np.ndarray) else row


def _npy_rows(array: np.ndarray) -> Iterator[Any]:
    """The rows of a (memory-mapped) array, read in blocks of about 16 MiB."""
    step = max(1, _BLOCK_BYTES // max(1, array[:1].nbytes))
    for start in range(0, len(array), step):
        block = np.array(array[start : start + step])
        for i in range(len(block)):
            yield _row(block, i)


def _npy(paths: list[Path]) -> tuple[Iterator[Any], int | None]:
    arrays = [_load_npy(path) for path in paths]
    rows = (row for array in arrays for row in _npy_rows(array))
    return rows, sum(len(array) for array in arrays)


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with _reading(path, ".npz"), np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    lengths = {name: (len(a) if a.ndim else None) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1 or None in lengths.values():
        shown = ", ".join(f"{n}: {'scalar' if k is None else k}" for n, k in lengths.items())
        raise CliError(
            f"{path}: the arrays must have the same number of rows along axis 0 "
            f"(got {shown}); save only the per-row arrays"
        )
    return arrays


def _npz_rows(arrays: dict[str, np.ndarray]) -> Iterator[dict[str, Any]]:
    length = len(next(iter(arrays.values()))) if arrays else 0
    for i in range(length):
        yield {name: _row(array, i) for name, array in arrays.items()}


def _npz(paths: list[Path]) -> tuple[Iterator[Any], int | None]:
    archives = [_load_npz(path) for path in paths]
    total = sum(len(next(iter(a.values()))) for a in archives if a)
    return (row for archive in archives for row in _npz_rows(archive)), total


def _images(paths: list[Path]) -> tuple[Iterator[Any], int | None]:
    folder = images.scan(paths, _SUFFIXES.keys())
    return folder.rows(), len(folder.files)


def _tfrecord(paths: list[Path]) -> tuple[Iterator[Any], int | None]:
    from chute._sources.tfrecord import read_tfrecord

    def rows() -> Iterator[Any]:
        for path in paths:
            with _reading(path, "TFRecord"):
                yield from read_tfrecord(str(path))

    return rows(), None


def _huggingface(paths: list[Path]) -> tuple[Iterator[Any], int | None]:
    datasets = need("datasets", "reading a Hugging Face dataset", "datasets")
    loaded = []
    for path in paths:
        with _reading(path, "Hugging Face dataset"):
            dataset = datasets.load_from_disk(str(path))
        if isinstance(dataset, datasets.DatasetDict):
            splits = ", ".join(dataset)
            raise CliError(
                f"{path}: holds several splits ({splits}); pick one, "
                f"e.g. {path / next(iter(dataset), 'train')}"
            )
        loaded.append(dataset)
    return _stored_rows(paths, loaded), sum(len(d) for d in loaded)


def _stored_rows(paths: list[Path], datasets: list[Any]) -> Iterator[Any]:
    """The rows as stored, in batches: no feature decoding (images stay bytes)."""
    for path, dataset in zip(paths, datasets):
        with _reading(path, "Hugging Face dataset"):
            for table in dataset.with_format("arrow").iter(batch_size=1024):
                yield from table.to_pylist()


READERS: dict[str, Reader] = {
    "parquet": _parquet,
    "jsonl": _jsonl,
    "npy": _npy,
    "npz": _npz,
    "images": _images,
    "tfrecord": _tfrecord,
    "huggingface": _huggingface,
}

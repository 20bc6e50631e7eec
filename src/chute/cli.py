"""The ``chute`` command: convert data sets to ArrayRecord, inspect files, profile pipelines.

Usage::

    chute --version
    chute convert INPUT OUTPUT_PREFIX [--format F] [--num-shards N] [--serializer S] [--overwrite]
    chute inspect PATH [-n N] [--max-chars C] [--trust-pickle]
    chute index SHARDS [--output INDEX]
    chute profile MODULE:FUNCTION [--arg K=V ...] [--seconds S | --elements N]
                  [--html PATH] [--json PATH] [--no-suggest] [--ram-budget-mb MB]

``chute profile`` reads the pipeline that FUNCTION returns with per-stage
statistics on and prints where the time went; ``chute profile --help`` says
more.  An exception in the user's code prints its traceback and exits with
status 1.

A mistake in the input or output (a missing file, an unknown format, an
empty input, an unwritable folder, a missing bucket, denied credentials)
prints one line to stderr and exits with status 2.

Input formats (--format auto guesses them from the file names):
  parquet      .parquet/.pq files; a record per row: {column: value}
  jsonl        .jsonl/.ndjson files; a record per non-blank line: its JSON value
  npy          .npy files; a record per row along axis 0: an ndarray
               (a NumPy scalar for 1-D arrays)
  npz          .npz files; a record per row: {array name: its row}, so all
               arrays need the same length along axis 0
  images       a folder of image files (.png, .jpg, ...), sorted by path; a
               record per file: {"image": the file's bytes, "filename": its
               path inside the folder, "label": its top sub-folder,
               "label_id": the label's index among the sorted labels}.
               Images directly in the folder (no sub-folders) give records
               without "label" and "label_id"; a folder with both, or with
               other data files (.npy, ...) beside the images, is refused.
               convert prints the labels it found ("labels: from sub-folder
               names, 2 classes: cat=0, dog=1") and the files it skipped
  tfrecord     .tfrecord files; records copied unchanged, as raw bytes
  huggingface  a folder written by Dataset.save_to_disk (pip install
               datasets); a record per row: {column: value} as stored, not
               decoded (an Image column gives {"bytes": ..., "path": ...})
INPUT may also be a quoted glob ('data/*.parquet'); its files are read in
sorted order.

Record format:
  Rows that are bytes (TFRecord records) are stored unchanged.  Other rows
  are serialized with --serializer:
  pickle   (default) pickle.dumps(row, protocol=5): keeps every Python and
           NumPy type; read back with pickle.loads(record).  Unpickling runs
           code, so read only files you trust.
  json     compact UTF-8 JSON, readable from any language.  NumPy arrays
           become lists, NumPy scalars numbers, dates ISO strings, Decimals
           strings, and bytes {"__bytes__": "<base64>"}; read back with
           json.loads(record) and base64-decode those objects.
  msgpack  msgpack.packb(row, use_bin_type=True) with the conversions of
           json but bytes kept (pip install msgpack); read back with
           msgpack.unpackb(record).
  chute inspect decodes all of them.

Output:
  OUTPUT_PREFIX-00000-of-0000N.array_record, ... (N = --num-shards), read
  back by chute's ArrayRecordDataSource("OUTPUT_PREFIX@N") or a glob.  Row k
  goes to shard k mod N, so the shards read one after another give the
  input's order only when N is 1.  The shards are written under temporary
  names (.tmp) and renamed only once all are complete: a final name never
  holds a half-written file, and an interrupted run leaves none (rerun it).
  OUTPUT_PREFIX.manifest.json records what the shards were converted from
  (the input files' paths, sizes and modification times) and how.  A rerun
  with the same input and options does nothing; one over shards made from
  another input, with other options or another --num-shards, or over shards
  without a manifest, is refused: --overwrite replaces them, once the new
  shards are complete.  Options as array_record's writer takes them
  (--options 'group_size:1,zstd:3').
  OUTPUT_PREFIX may be a bucket URL (s3://bucket/data/train, gs://...,
  az://...; credentials from the environment, as AWS_ACCESS_KEY_ID or
  GOOGLE_APPLICATION_CREDENTIALS).  The shards are converted in a local
  temporary folder, then each is uploaded whole under its final name, then
  the manifest and the index: an interrupted run leaves whole shards only,
  and no index until the set is complete (rerun it).  The same rerun and
  --overwrite rules hold.
  Read them in chute with:
    source = chute.sources.ArrayRecordDataSource("OUTPUT_PREFIX@N")
    dataset = chute.MapDataset.source(source).map(pickle.loads)
"""

from __future__ import annotations

import argparse
import io
import os
import sys

import chute
from chute._cli import convert, index, inspector, profile
from chute._cli.errors import CliError
from chute._sources.checksums import implementation

__all__ = ["main"]

_EPILOG_START = "Input formats ("  # the docstring from here on ends `chute convert --help`


def _convert_epilog() -> str:
    """The input formats, record format and output sections of this module's docstring."""
    doc = __doc__ or ""
    start = doc.find(_EPILOG_START)
    return doc[start:].rstrip() if start >= 0 else ""


def _version() -> str:
    """chute's version and which HighwayHash checks ArrayRecord chunks (compiled or NumPy)."""
    return f"chute {chute.__version__} (ArrayRecord checksums: {implementation()})"


def build_parser() -> argparse.ArgumentParser:
    """The ``chute`` argument parser, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="chute",
        description=(
            "Convert data sets to ArrayRecord shards, inspect record files, and profile pipelines."
        ),
        epilog="Run 'chute COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    convert.register(subparsers, epilog=_convert_epilog())
    inspector.register(subparsers)
    index.register(subparsers)
    profile.register(subparsers)
    return parser


def _stop_writing_stdout() -> None:
    """Points stdout at /dev/null, so that nothing more (not even the flush at exit)
    writes to the pipe that its reader has closed."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # stdout is not a file (a test's capture): nothing is left to flush
    finally:
        os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Runs the ``chute`` command line and returns its exit status.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` by default.

    Returns:
        0 on success, and when the reader of stdout stops early (``chute
        inspect ... | head``); 1 when the user's code that ``chute profile``
        runs raises (its traceback is shown); 2 for a usage or input/output
        mistake (reported on one line of stderr); 130 when interrupted.

    >>> main(["convert", "no_such_file.parquet", "out/data"])  # stderr names the file
    2
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has reported
        return exc.code if isinstance(exc.code, int) else 2
    try:
        status = int(args.run(args))
        sys.stdout.flush()  # a closed pipe raises here rather than at exit
        return status
    except BrokenPipeError:
        _stop_writing_stdout()
        return 0
    except CliError as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message holds
        print(f"chute {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = " (no shard was left half-written; rerun to convert)"
        print(
            f"chute {args.command}: interrupted{hint if args.command == 'convert' else ''}",
            file=sys.stderr,
        )
        return 130

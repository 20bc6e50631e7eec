"""``PackAndBatchOperation``: Grain's legacy DataLoader operation that packs.

Each DataLoader worker packs its own records first-fit into ``batch_size``
rows, in rounds: when a record fits no row, the rows are handed out as one
batch (rows left empty are all zeros) and the record opens the next batch;
the last batch comes at the end of the data.  A batch is the tuple ``(data,
segment_ids, positions)``, three trees shaped like ``length_struct`` whose
leaves are ``(batch_size, length)`` arrays (``int32`` for the ids and
positions).  Unlike Grain, the batch being filled is part of the checkpoint
(as positions), so a restored loader loses nothing.

For datasets, use ``FirstFitPackIterDataset``: this operation works only in
``DataLoader(operations=[...])``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.transforms import Batch
from chute._core.tree import is_namedtuple
from chute._core.validate import check_int, check_positive_int
from chute._loader.legacy_operation import IteratorIterDataset
from chute._loader.record import Record
from chute._stages.packing import Packer, as_sequence, check_max_per_bin
from chute._stages.packing_iter import PackIterator

_NAME = "PackAndBatchOperation"


def _flatten(struct: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(struct, Mapping):
        for key, value in struct.items():
            yield from _flatten(value, (*path, key))
    elif isinstance(struct, (list, tuple)):
        for k, value in enumerate(struct):
            yield from _flatten(value, (*path, k))
    else:
        yield path, struct


def _unflatten(struct: Any, leaves: Iterator[Any]) -> Any:
    if isinstance(struct, Mapping):
        return {key: _unflatten(value, leaves) for key, value in struct.items()}
    if isinstance(struct, (list, tuple)):
        parts = [_unflatten(value, leaves) for value in struct]
        if is_namedtuple(struct):
            return type(struct)(*parts)
        return type(struct)(parts)
    return next(leaves)


def _refuse_plain_batching(values: Sequence[Any]) -> Any:
    raise TypeError(
        "PackAndBatchOperation packs only inside DataLoader(operations=[...]); to pack a "
        "dataset use chute.experimental.FirstFitPackIterDataset."
    )


@dataclasses.dataclass(frozen=True, init=False, repr=False, eq=False)
class PackAndBatchOperation(Batch):
    """Packs records first-fit into batches of ``batch_size`` rows.

    Args:
      length_struct: a tree shaped like the records' data whose leaves are
        the packed lengths of the matching features.
      batch_size: rows per batch.
      max_sequences_per_bin: at most this many records per row.

    >>> import chute
    >>> loader = chute.DataLoader(
    ...     data_source=[np.arange(1, 4), np.arange(1, 5)],
    ...     sampler=chute.SequentialSampler(2, chute.NoSharding()),
    ...     operations=[PackAndBatchOperation(length_struct=5, batch_size=2)])
    >>> [(data.tolist(), segments.tolist()) for data, segments, _ in loader]
    [([[1, 2, 3, 0, 0], [1, 2, 3, 4, 0]], [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])]
    """

    length_struct: Any = None
    max_sequences_per_bin: int | None = None

    def __init__(
        self, length_struct: Any, batch_size: int, max_sequences_per_bin: int | None = None
    ) -> None:
        check_positive_int(batch_size, f"{_NAME}: batch_size")
        leaves = list(_flatten(length_struct))
        if not leaves or leaves == [((), None)]:
            raise TypeError(
                f"{_NAME}: length_struct must be a tree of packed lengths, e.g. "
                f"{{'inputs': 2048}} (got {length_struct!r})."
            )
        for path, n in leaves:
            check_int(n, f"{_NAME}: length_struct at {list(path)}", minimum=0)
        for name, value in (
            ("length_struct", length_struct),
            ("batch_size", int(batch_size)),
            ("drop_remainder", False),
            ("batch_fn", _refuse_plain_batching),
            ("max_sequences_per_bin", check_max_per_bin(max_sequences_per_bin, _NAME)),
        ):
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return (
            f"{_NAME}(length_struct={self.length_struct!r}, batch_size={self.batch_size}, "
            f"max_sequences_per_bin={self.max_sequences_per_bin})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PackAndBatchOperation):
            return NotImplemented
        mine = (self.length_struct, self.batch_size, self.max_sequences_per_bin)
        return mine == (other.length_struct, other.batch_size, other.max_sequences_per_bin)

    __hash__ = None  # type: ignore[assignment]

    def _dataset_stage(self, ds: Any) -> Any:
        """``ds.apply(op)``: refused when the pipeline is built (see ``_refuse_plain_batching``)."""
        return _refuse_plain_batching(())

    def _loader_stage(self, ds: IterDataset[Any]) -> IterDataset[Any]:
        """The DataLoader's stage for this operation (on the records' data)."""
        return PackAndBatchIterDataset(ds, self)

    def _on_records(self) -> Any:
        """This operation for a loader that passes ``Record``s between operations."""
        return _OnRecords(self)

    def __call__(self, input_iterator: Iterable[Any]) -> Iterator[Any]:
        """Packs an iterator (or any iterable) of records, as Grain's operations are called."""
        return iter(
            PackAndBatchIterDataset(IteratorIterDataset(input_iterator), self, records=True)
        )


class _OnRecords:
    def __init__(self, op: PackAndBatchOperation) -> None:
        self._op = op

    def _loader_stage(self, ds: IterDataset[Any]) -> IterDataset[Any]:
        return PackAndBatchIterDataset(ds, self._op, records=True)


class _TreeLayout:
    """Reads the leaves named by ``length_struct``; writes batches as tree triples."""

    name = _NAME

    def __init__(self, op: PackAndBatchOperation, records: bool) -> None:
        self._struct = op.length_struct
        self._paths, lengths = zip(*_flatten(op.length_struct))
        self.lengths = tuple(int(n) for n in lengths)
        self._rows, self._records = op.batch_size, records

    def parse(self, element: Any, index: int) -> tuple[list[Any], list[int], tuple[Any, ...]]:
        data = element.data if self._records else element
        arrays, sizes = [], []
        for path, length in zip(self._paths, self.lengths):
            a = self._leaf(data, path, index)
            n = a.shape[0]
            if n > length:
                raise ValueError(
                    f"{_NAME}: element {index} has a feature at {list(path)} of length {n}, "
                    f"longer than its rows ({length}); truncate it first with a MapOperation."
                )
            arrays.append(a)
            sizes.append(n)
        return arrays, sizes, ((element.metadata,) if self._records else ())

    @staticmethod
    def _leaf(data: Any, path: tuple[Any, ...], index: int) -> Any:
        node = data
        try:
            for key in path:
                node = node[key]
            return node if isinstance(node, np.ndarray) and node.ndim else as_sequence(node)
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(
                f"{_NAME}: element {index} does not match length_struct at {list(path)} "
                f"({type(exc).__name__}: {exc}); give every record the structure of "
                "length_struct."
            ) from None

    def outputs(self, packer: Packer, bins_before: int) -> list[Any]:
        count = len(self.lengths)
        built = packer.build((0,) * count, (True,) * count, bins=self._rows)
        values = [v if not isinstance(v, list) else _stack(v) for v in built.values]
        batch = tuple(
            _unflatten(self._struct, iter(leaves))
            for leaves in (values, built.segment_ids, built.positions)
        )
        if self._records:
            return [Record(packer.last_meta[0], batch)]
        return [batch]


def _stack(rows: list[Any]) -> Any:
    return np.stack([r.astype(rows[0].dtype, copy=False) for r in rows])


class PackAndBatchIterDataset(IterDataset[Any]):
    """The stage a DataLoader runs for a ``PackAndBatchOperation``."""

    def __init__(
        self, parent: IterDataset[Any], op: PackAndBatchOperation, records: bool = False
    ) -> None:
        super().__init__(parent)
        self._op, self._records = op, records

    def __iter__(self) -> DatasetIterator[Any]:
        layout = _TreeLayout(self._op, self._records)
        packer = Packer(
            layout.lengths,
            self._op.batch_size,
            best_fit=False,
            max_per_bin=self._op.max_sequences_per_bin,
        )
        return PackIterator(
            iter(self._parent), packer, layout, "pack_and_batch", always_holding=True
        )

    def _describe(self) -> str:
        return f"{self._parent!r}, {self._op!r}"

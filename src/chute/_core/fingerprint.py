"""A pipeline's fingerprint: what a checkpoint records of the pipeline that saved it.

A state's positions only make sense in the pipeline that wrote them: the
state of ``ds.batch(8).to_iter_dataset()`` after 3 batches holds
``next_index=3``, which ``ds.to_iter_dataset()`` would read as element 3.
So the outermost iterator's state carries a ``"fingerprint"``: one short
string per stage, sources first, such as ``"shuffle(seed=7) over 20000
elements"``.  It names each stage's kind (with the ``__qualname__`` of the
user's function), its seed, its batch size or other count, and the length of
each ``MapDataset``; never buffer sizes, thread counts or other settings that
a resumed run may change.  The worker count of ``mp_prefetch`` is left out,
since chute restores a checkpoint into another worker count on purpose (where
it cannot, ``mp_prefetch`` itself refuses and says why); so are error budgets
and options nodes, which a resumed run may change, and the datasets inside a
mix of *named* datasets, which Grain restores by name into a mix that gained
or lost some.

A stage that picks or reads data also names *which* data, after ``" from "``:
a slice its positions (``"slice over 50 elements from positions 1::2"``), a range
not starting at 0 by 1 its start and step, a source what it says of its data
(``chute_identity()``, see ``identity_of``: the files' names, record ranges and
sizes for ArrayRecord, for instance), so that host 1's shard or another data
set of the same length is refused too.  Worker shares are not part of it:
workers slice copies of the pipeline, never the pipeline the state describes.

``set_state()`` compares the saved fingerprint with the pipeline's and refuses
a mismatch with ``CheckpointError`` naming the first stage that differs;
``chute.checkpoint.allow_pipeline_change(iterator)`` accepts it deliberately.
States without a fingerprint (older chute, hand-made, Grain's) restore
unchecked.  (A state saved by a chute whose stages did not yet name their data
is refused where a stage now does; ``allow_pipeline_change`` restores it.)

The strings hold names, decimal ints and SHA-256 digests only (no ``id()``, no
``hash()``, no modification times), so the same pipeline gives the same
fingerprint in every process and run.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from chute._core.capabilities import IdentifiesData
from chute._core.pipeline_walk import parents_of
from chute._core.seeding import seed_label

#: Integer settings that change what a state's positions mean.
_COUNTS = ("_batch_size", "_epochs", "_count", "_window")
#: Stages whose kind reads better under the name of the method that builds them.
_KINDS = {
    "PrefetchIterDataset": "to_iter_dataset",
    "MultiprocessPrefetchIterDataset": "mp_prefetch",
    "RangeMapDataset": "range",
    "TFRecordIterDataset": "tfrecord",
}
#: Between a stage's description and the data it names.
_DATA = " from "
#: A seed in a stage's description: ``(seed=7)`` or, after other arguments, ``, seed=7``.
_SEED = re.compile(r"\(seed=\d+\)|, seed=\d+")


def fingerprint(ds: Any, *, people: bool = False) -> list[str]:
    """One description per stage of ``ds``'s pipeline, sources first.

    With ``people``, a seed derived from ``.seed()`` marks reads as the marks the
    user wrote (``shuffle(seed from .seed(42))``), for messages; states record the
    seeds themselves, which tell any two pipelines apart.

    >>> from chute import MapDataset
    >>> for part in fingerprint(MapDataset.range(4).shuffle(seed=3).batch(2).to_iter_dataset()):
    ...     print(part)
    range over 4 elements
    shuffle(seed=3) over 4 elements
    batch(batch_size=2) over 2 elements
    to_iter_dataset
    """
    parts: list[str] = []
    _walk(ds, parts, set(), people)
    if _is_map_dataset(ds):  # iterating a MapDataset reads it with to_iter_dataset()
        parts.append("to_iter_dataset")
    return parts


def _walk(node: Any, parts: list[str], seen: set[int], people: bool) -> None:
    if id(node) in seen:  # a diamond: describe a shared parent once
        return
    seen.add(id(node))
    if not _mixes_by_name(node):
        for parent in parents_of(node):
            _walk(parent, parts, seen, people)
    part = _describe(node, people)
    if part is not None:
        parts.append(part)


def _describe(node: Any, people: bool = False) -> str | None:
    name = type(node).__name__
    if name in ("WithOptionsIterDataset", "ErrorBudgetIterDataset"):
        return None  # options and budgets may change between runs
    fields = vars(node)
    args = [
        seed_label(node, v) if people else f"seed={v}" for k, v in fields.items() if _is_seed(k, v)
    ]
    args += [f"{k[1:]}={fields[k]}" for k in _COUNTS if isinstance(fields.get(k), int)]
    kind = "mix(named)" if _mixes_by_name(node) else None
    kind = kind or fields.get("_label") or _KINDS.get(name) or _snake(name)
    part = f"{kind}({', '.join(args)})" if args else kind
    if _is_map_dataset(node):
        length = len(node)
        part += " over infinite elements" if length == sys.maxsize else f" over {length} elements"
    data = node._data_identity() if isinstance(node, IdentifiesData) else None
    return f"{part}{_DATA}{data}" if data else part


def identity_of(source: Any) -> str | None:
    """What ``source`` says of the data it reads (its ``chute_identity()``), or None.

    A source names its data in a short string that is the same in every
    process and run (file names and sizes, an object's ETag, a query): no
    memory addresses, no random names, no modification times.  A source
    without the method is known by its type and length alone.
    """
    method = getattr(source, "chute_identity", None)
    if not callable(method):
        return None
    identity = method()
    if not isinstance(identity, str):
        raise TypeError(
            f"{type(source).__name__}.chute_identity() must return a str (got {identity!r})."
        )
    return identity


def digest(value: Any) -> str:
    """A short SHA-256 of bytes or of a JSON-able value (lists, str, int), the same in every run."""
    if not isinstance(value, bytes):
        value = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
    return hashlib.sha256(value).hexdigest()[:16]


def files_identity(files: Sequence[Sequence[Any]]) -> str:
    """The identity of data read from files: ``files`` holds, per file, its name first.

    >>> files_identity([("a.rec", 0, 10, 512), ("b.rec", 0, 8, 400)])
    '2 files a.rec to b.rec, sha256 bd339f4816cc3dc9'
    """
    names = [str(f[0]) for f in files]
    shown = names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"
    count = "1 file" if len(names) == 1 else f"{len(names)} files"
    return f"{count} {shown}, sha256 {digest([list(f) for f in files])}"


def _mixes_by_name(node: Any) -> bool:
    return type(node).__name__ == "MixedIterDataset" and vars(node).get("_keys") is not None


def _is_seed(key: str, value: Any) -> bool:
    # ``_seed`` is a ``.seed()`` mark: the seeds derived from it are named where used.
    return key.endswith("_seed") and key != "_seed" and type(value) is int


def _is_map_dataset(node: Any) -> bool:
    return any(cls.__name__ == "MapDataset" for cls in type(node).__mro__)


def _snake(class_name: str) -> str:
    stem = re.sub(r"(Map|Iter)?Dataset$", "", class_name) or class_name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", stem).lower()


def first_difference(saved: Any, mine: list[str], shown: list[str] | None = None) -> str | None:
    """Why a state with fingerprint ``saved`` does not fit ``mine``, or None when it does.

    ``shown``: ``mine`` as the message names it (``fingerprint(ds, people=True)``).
    """
    if not isinstance(saved, list) or not all(isinstance(s, str) for s in saved):
        return f"its fingerprint is not a list of stage descriptions (got {saved!r})"
    if shown is None or len(shown) != len(mine):
        shown = mine
    for k, (old, new) in enumerate(zip(saved, mine)):
        if old != new:
            if shown[k] != new and _SEED.sub("", old) == _SEED.sub("", new):
                # Only the seed differs, and this pipeline's is derived: the saved number
                # is most likely derived too, a number the user never wrote.
                return (
                    f"stage {k}: the saved pipeline's {_SEED.sub('', old)} ran with another "
                    f"seed than this pipeline's {shown[k]}"
                )
            return f"stage {k}: saved {old}, this pipeline has {shown[k]}"
    if len(saved) != len(mine):
        k = min(len(saved), len(mine))
        extra = saved[k:] if len(saved) > k else shown[k:]
        who = "the saved pipeline" if len(saved) > k else "this pipeline"
        return f"stage {k}: {who} has {len(extra)} more stage(s), starting with {extra[0]}"
    return None

"""Reading and writing objects in buckets (``s3://``, ``gs://``, ``az://``, ``https://``).

``open_source(url)`` gives a ranged byte source (``size()``, ``read_ranges()``,
``read_all()``, ``version``, ``retries``, ``close()``) that file readers take instead of a
local file; ``list_prefix(pattern)`` expands a shard glob; ``write_object`` and
``ObjectWriter`` write an object all at once or not at all; ``RangedFile`` is a
read-only, seekable file object over a ranged source, for readers that want a file.
Needs ``chute[remote]`` (obstore) for remote URLs; local paths need nothing.
"""

from chute._remote.file import RangedFile
from chute._remote.open import list_prefix, open_source
from chute._remote.ranged_object import RangedSource
from chute._remote.ranged_source import LocalRanges
from chute._remote.retry import RetryBudgetExceeded, RetryPolicy
from chute._remote.write import ObjectWriter, write_object

__all__ = [
    "LocalRanges",
    "ObjectWriter",
    "RangedFile",
    "RangedSource",
    "RetryBudgetExceeded",
    "RetryPolicy",
    "list_prefix",
    "open_source",
    "write_object",
]

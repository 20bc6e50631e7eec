"""Worker-process options (``grain.multiprocessing``)."""

from chute._core.options import MultiprocessingOptions

__all__ = ["MultiprocessingOptions"]

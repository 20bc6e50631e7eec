"""chute for PyTorch users: ``from chute.torch import DataLoader`` and nothing else changes.

* ``DataLoader``: ``torch.utils.data.DataLoader``'s arguments and batches, with
  chute's worker processes, and torchdata ``StatefulDataLoader``'s
  ``state_dict()`` / ``load_state_dict()``, exact and into another
  ``num_workers`` (see its docstring for what differs and why).
* ``GlobalShuffleSampler``: the order ``shuffle=True`` reads.
* ``ShardByRank``: ``shard_options`` from ``torch.distributed``'s rank and world size.
* ``to_torch`` / ``to_torch_dataset``: chute pipelines with tensor batches, and
  a chute pipeline inside PyTorch's own DataLoader.

PyTorch is imported when a loader is made (``pip install chute[torch]``).
"""

from chute._accel.torch import to_torch, to_torch_dataset
from chute._accel.torch_loader import DataLoader, GlobalShuffleSampler, ShardByRank

__all__ = ["DataLoader", "GlobalShuffleSampler", "ShardByRank", "to_torch", "to_torch_dataset"]

"""Checkpoints that cross between Grain and chute: Grain's iterator states, read and written.

``state`` translates a whole pipeline's state stage by stage; ``workers``,
``interleave`` and ``packing`` hold the translations of the stages whose states
differ most, and ``need`` the check they all start with.  The package stands
above the stages and the execution machinery, whose iterators it reads.

Importing it installs ``state.from_grain`` as the translation that
``DatasetIterator.set_state`` applies to a state Grain saved
(``chute._core.registry``; ``_core`` imports nothing from here).
"""

from chute._core.registry import install_grain
from chute._grain import state

install_grain(state.from_grain)

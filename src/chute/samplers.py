"""Samplers: the order in which the DataLoader reads records, as in Grain."""

from chute._loader.samplers import IndexSampler, Sampler, SequentialSampler

__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]

"""Sharding options: which part of the data this process reads, as in Grain."""

from chute._core.sharding import NoSharding, ShardByJaxProcess, ShardOptions

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions"]

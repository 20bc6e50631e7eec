"""chute's core: dataset base classes, determinism primitives and helpers."""

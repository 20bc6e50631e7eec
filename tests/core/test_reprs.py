"""Reprs name the functions and seeds a pipeline runs with, and where an iterator is."""

from __future__ import annotations

import chute as grain


def decode(x: int) -> int:
    return x


def test_dataset_repr_names_function_and_seed() -> None:
    ds = grain.MapDataset.range(10).shuffle(seed=42).map(decode)
    assert "map(decode)" in repr(ds)
    assert "shuffle(seed=42)" in repr(ds)


def test_dataset_repr_shows_the_mark_a_derived_seed_comes_from_not_the_number() -> None:
    ds = grain.MapDataset.range(10).seed(1).random_map(lambda x, rng: x)
    assert repr(ds).endswith("<lambda>, seed from .seed(1)))")
    assert str(ds._rng_seed) not in repr(ds)
    shuffled = grain.MapDataset.range(10).seed(42).shuffle().shuffle(seed=7)
    assert "shuffle(seed from .seed(42))" in repr(shuffled) and "shuffle(seed=7)" in repr(shuffled)
    window = grain.MapDataset.range(10).seed(3).to_iter_dataset()
    assert repr(grain.experimental.WindowShuffleIterDataset(window, window_size=4)).endswith(
        "window_size=4, seed from .seed(3))"
    )


def test_stage_names_show_only_the_seeds_the_user_wrote() -> None:
    from chute._stats.graph import stage_graph

    ds = grain.MapDataset.range(10).seed(42).shuffle().random_map(lambda x, rng: x)
    ds = ds.shuffle(seed=7).to_iter_dataset()
    names = [node.name for node in stage_graph(ds)]
    assert names == [
        "range",
        "shuffle(seed from .seed(42))",
        "random_map(<lambda>, seed from .seed(42))",
        "shuffle(seed=7)",
        "to_iter_dataset",
    ]


def test_repr_names_the_function_inside_a_transform_object() -> None:
    ds = grain.MapDataset.range(3).to_iter_dataset().map(grain.MapTransform(decode))
    assert "map(decode)" in repr(ds)


def test_iterator_repr_names_its_stages_and_position() -> None:
    it = iter(grain.MapDataset.range(10).to_iter_dataset().map(decode).batch(2))
    for _ in range(3):
        next(it)
    assert repr(it) == "<DatasetIterator batch <- map(decode) at element 6 <- to_iter_dataset>"


def test_iterator_repr_of_a_long_pipeline_stays_short() -> None:
    ds = grain.MapDataset.range(4).to_iter_dataset()
    for _ in range(10):
        ds = ds.map(decode)
    text = repr(iter(ds))
    assert text.count("map(decode)") == 4
    assert text.endswith(" <- ...>")

"""Dotted keys and nested mappings (elastune/dotted.py), both ways, with hand-written expectations:
the cases bench/mutation.py found no test held (a separator other than ".", paths three deep, a
value in the way of a path)."""

from __future__ import annotations

from elastune.dotted import flatten, nest, set_path


def test_flatten_joins_every_level_with_the_separator_given() -> None:
    tree = {"a": {"b": {"c": 1, "d": [2]}, "e": {}}, "f": None}
    assert flatten(tree) == {"a.b.c": 1, "a.b.d": [2], "a.e": {}, "f": None}
    assert flatten(tree, sep="/") == {"a/b/c": 1, "a/b/d": [2], "a/e": {}, "f": None}
    assert flatten({1: {2: "x"}}) == {"1.2": "x"}  # keys become strings


def test_nest_splits_on_the_separator_given() -> None:
    assert nest({"a.b.c": 1, "a.b.d": 2, "a.e": 3, "f": 4}) == {"a": {"b": {"c": 1, "d": 2}, "e": 3}, "f": 4}
    assert nest({"a/b": 1, "c.d": 2}, sep="/") == {"a": {"b": 1}, "c.d": 2}
    assert nest({}) == {}


def test_set_path_makes_or_replaces_the_mappings_on_its_way() -> None:
    target: dict[str, object] = {"a": {"keep": 0}, "x": 5}
    set_path(target, ["a", "b", "c"], 1)  # "a" kept and extended, "b" made
    set_path(target, ["x", "y"], 2)  # the 5 in the way is replaced by a mapping
    set_path(target, ["z"], None)  # one key: set at the top
    assert target == {"a": {"keep": 0, "b": {"c": 1}}, "x": {"y": 2}, "z": None}

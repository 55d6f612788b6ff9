"""YAML from someone who is not trusted (a web UI client's `key=value` overrides, a config read back
from the tracking store): refused, before any value is built, where YAML is expensive or surprising.

`yaml.safe_load` runs no code, but it expands aliases (a 227-character "billion laughs" body grows
nine-fold per level into gigabytes), builds values that contain themselves (`&a [*a]`, on which
any code that walks the value recurses until it fails), and resolves tags and merge keys. Here
each node is checked from the parser's events as the composer reads it: an anchor, an alias, an
explicit tag or a merge key (`<<`) is refused at once, as are text longer than `max_chars`, more
than `max_items` nodes and nesting deeper than `max_depth`. Nothing is expanded or built before a
refusal, so a hostile text costs at most what reading `max_chars` of it costs.

A bottom-layer module: it imports nothing of elastune.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["CLIENT_VALUE", "STORED_CONFIG", "Limits", "UnsafeYAML", "load"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SHOWN = 40  # characters of an anchor name or a tag quoted in a refusal: the sender has the rest


@dataclass(frozen=True)
class Limits:
    max_chars: int
    max_items: int  # nodes: every scalar, list and mapping, keys included
    max_depth: int  # lists and mappings inside each other


# One `--set` value (a number, a word, an MLP's widths, a small mapping of a section's keys).
CLIENT_VALUE = Limits(max_chars=4096, max_items=128, max_depth=6)
# A whole run config (a sweep's best_config.yaml, about 2 KB and 150 nodes when written by elastune).
STORED_CONFIG = Limits(max_chars=256 * 1024, max_items=20_000, max_depth=12)


class UnsafeYAML(ValueError):
    """Text this loader refuses to read; the message says what was found and what to write instead."""


def load(text: str, limits: Limits = CLIENT_VALUE) -> Any:
    """The value of one YAML document, built only from plain scalars, lists and mappings within
    `limits`; raises UnsafeYAML for what it refuses and yaml.YAMLError for text that is not YAML."""
    if len(text) > limits.max_chars:
        raise UnsafeYAML(f"is {len(text):,} characters long; at most {limits.max_chars:,} are read here")
    loader = _Loader(text, limits)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer checks each node's event before composing it."""

    def __init__(self, text: str, limits: Limits) -> None:
        super().__init__(text)
        self._limits = limits
        self._items = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        _refuse_event(event)
        self._items += 1
        if self._items > self._limits.max_items:
            raise UnsafeYAML(f"holds more than {self._limits.max_items:,} values; send fewer")
        nests = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if nests:
            self._depth += 1
            if self._depth > self._limits.max_depth:
                raise UnsafeYAML(f"nests lists or mappings more than {self._limits.max_depth} deep; flatten it")
        try:
            return super().compose_node(parent, index)
        finally:
            if nests:
                self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        # A plain `<<` key resolves to the merge tag: the constructor would copy another mapping in.
        if any(key.tag == _MERGE_TAG for key, _ in node.value):
            raise UnsafeYAML("uses a merge key (<<); write each key out instead")
        return node


def _refuse_event(event: Any) -> None:
    if isinstance(event, yaml.AliasEvent):
        raise UnsafeYAML(f"uses an alias (*{_cut(event.anchor or '')}); aliases are not accepted: write the value out")
    anchor = getattr(event, "anchor", None)
    if anchor is not None:
        raise UnsafeYAML(f"defines an anchor (&{_cut(anchor)}); anchors are not accepted: write the value out")
    tag = getattr(event, "tag", None)
    if tag is not None:  # an implicit (untagged) node has none; `!x`, `!!python/...` and even `!` do
        raise UnsafeYAML(f"has an explicit tag ({_cut(tag)}); tags are not accepted: write a plain value")


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."

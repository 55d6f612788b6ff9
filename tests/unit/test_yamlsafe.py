"""elastune.yamlsafe: YAML from someone who is not trusted. Plain values read as yaml.safe_load
reads them; what makes YAML expensive or surprising is refused before any value is built."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from elastune.config import parse_overrides
from elastune.errors import ConfigError
from elastune.yamlsafe import CLIENT_VALUE, STORED_CONFIG, Limits, UnsafeYAML, load
from hypothesis import given
from hypothesis import strategies as st


def _laughs(levels: int) -> str:
    """The "billion laughs": each level nine aliases of the one before (9**levels strings)."""
    lines = ['l0: &l0 "lol"']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("&a [*a]", "anchor"),  # a list that contains itself
        ("x: &a 1\ny: *a", "anchor"),
        ("*a", "alias"),
        (_laughs(12), "anchor"),  # 9**12 strings if expanded: refused at its first anchor, unexpanded
        ("!!python/object/apply:os.system [true]", "explicit tag"),
        ("!!binary aGVsbG8=", "explicit tag"),
        ("!!set {a, b}", "explicit tag"),
        ("! plain", "explicit tag"),  # even the non-specific tag
        ("{<<: {a: 1}, b: 2}", "merge key"),
        ("[" * 7 + "]" * 7, "deep"),
        ("[" + ",".join(["1"] * 128) + "]", "values"),
        ("x" * 4097, "characters long"),
    ],
)
def test_what_makes_yaml_expensive_or_surprising_is_refused(text: str, said: str) -> None:
    with pytest.raises(UnsafeYAML, match=said):
        load(text, CLIENT_VALUE)


def test_the_limits_are_the_ones_given() -> None:
    assert load("[" * 6 + "]" * 6) == [[[[[[]]]]]]  # CLIENT_VALUE: 6 deep
    assert load("[" * 12 + "]" * 12, STORED_CONFIG) is not None
    with pytest.raises(UnsafeYAML, match="2 deep"):
        load("[[[1]]]", Limits(max_chars=100, max_items=100, max_depth=2))


@pytest.mark.parametrize(
    "text", ["1", "-2.5e3", "true", "null", "bf16", "'quoted: text'", "[64, 32]", "{micro: 8, accum: 2}", "2001-12-14"]
)
def test_plain_values_read_as_safe_load_reads_them(text: str) -> None:
    assert load(text) == yaml.safe_load(text)


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(_PLAIN)
def test_anything_yaml_dump_writes_reads_back_the_same(value: Any) -> None:
    text = yaml.safe_dump(value)
    assert load(text, STORED_CONFIG) == yaml.safe_load(text) == value


def test_text_that_is_not_yaml_is_a_yaml_error_not_a_refusal() -> None:
    with pytest.raises(yaml.YAMLError):
        load("a: [")
    assert not issubclass(UnsafeYAML, yaml.YAMLError)  # callers tell "not YAML" from "refused"


def test_untrusted_overrides_name_the_key_and_trusted_ones_are_unchanged() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_overrides(
            ["steps=10", "seed=&a [*a]", "workload_options.top_mlp=!!python/name:os.system"], untrusted=True
        )
    assert {p.path for p in refused.value.problems} == {"seed", "workload_options.top_mlp"}
    # The command line's own --set (a person's, trusted) reads YAML as it always did.
    assert parse_overrides(["seed=&a 3"]) == {"seed": 3}
    assert parse_overrides(["workload_options.top_mlp=[64, 32]", "x=a: ["], untrusted=True) == {
        "workload_options": {"top_mlp": [64, 32]},
        "x": "a: [",  # not YAML: kept as text, for validation to name
    }

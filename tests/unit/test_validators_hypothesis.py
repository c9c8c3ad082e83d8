"""Property-based tests of emu's validators and the topology loader (issue 28).

Whatever a user types or a file holds, `--set` (`scenario.resolve_params`), the
Python API (`scenario.fabric_graph`) and the topology loader (`topofile.loads`,
`topofile.load`) either accept it or raise the one error type,
`emu.config.ConfigError`, with a one-line message; never another exception,
never a hang. Hypothesis draws arbitrary strings, numbers (NaN, inf, huge,
negative), YAML documents (aliases, deep nesting, binary) and mutations of a
good file. Sized to run in seconds: few enough examples, no per-example
deadline (the first example pays for imports), and pytest-timeout as the
guard against a hang.
"""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emu import scenario, topofile
from emu.config import ConfigError

FAST = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
pytestmark = pytest.mark.timeout(120)

GOOD_FILE = """\
name: two-leaves
defaults: {rate: 20M, delay: 0}
nodes:
  spine1: {kind: switch, role: spine}
  leaf1:  {kind: switch, role: leaf, hosts: 2}
  leaf2:  {kind: switch, role: leaf}
  h3:     {kind: host}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf2, b: spine1, rate: 10M}
  - {a: h3, b: leaf2, delay: 100us}
"""

# Numbers as a user would type them, the awkward ones first.
NUMBER_TEXT = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e400", "-0", "0", "1e-400", "9" * 400]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.from_regex(r"\A-?[0-9]{1,6}(\.[0-9]{1,3})?[KMGTkmgt]?\Z"),
)
VALUES = st.one_of(NUMBER_TEXT, st.text(max_size=20))
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.booleans(),
    st.none(),
    st.text(max_size=8),
)


def one_line(exc: ConfigError) -> None:
    text = str(exc)
    assert text and "\n" not in text, text


# ---------------------------------------------------------------- --set


@pytest.mark.parametrize("name", ["smoke", "incast", "failover", "pause-storm"])
@FAST
@given(data=st.data())
def test_set_accepts_or_raises_one_config_error(name, data):
    module = scenario.load(name)
    keys = sorted(module.PARAMS) + sorted(scenario.RATE_ALIASES) + ["nope", "", "k-"]
    items = data.draw(
        st.lists(
            st.one_of(
                st.builds(lambda k, v: f"{k}={v}", st.sampled_from(keys), VALUES),
                st.text(max_size=20),
            ),
            max_size=3,
        )
    )
    items = [i for i in items if not i.partition("=")[0].strip().startswith("topo")]
    try:
        params = scenario.resolve_params(module, items)
    except ConfigError as exc:
        one_line(exc)
        return
    for key, value in params.items():
        if isinstance(value, float):
            assert math.isfinite(value), (key, value)


@FAST
@given(key=st.sampled_from(sorted(scenario.fabric_params())), text=VALUES)
def test_every_fabric_parameter_parses_or_raises_one_config_error(key, text):
    param = scenario.fabric_params()[key]
    try:
        value = param.parse(key, text)
    except ConfigError as exc:
        one_line(exc)
        return
    param.validate(key, value)  # what parse accepted, validate accepts


# ---------------------------------------------------------------- the Python API


BUILDER_KEYS = [
    "leaves",
    "spines",
    "hosts_per_leaf",
    "host_rate_bps",
    "fabric_rate_bps",
    "delay_s",
    "time_scale",
    "modelled_rate_bps",
    "oversubscription",
    "uplinks_per_spine",
    "name",
    "k",
    "rate_bps",
    "rates",
    "groups",
    "dims",
    "hosts_per_switch",
    "nodes",
    "nvlink_ratio",
    "nvlink_domain",
]


@FAST
@given(
    topology=st.sampled_from([*scenario.BUILDERS, "fat-tree", "ring", ""]),
    kwargs=st.dictionaries(
        st.sampled_from(BUILDER_KEYS),
        st.one_of(
            NUMBERS, st.dictionaries(st.sampled_from(["host", "leaf-spine"]), NUMBERS, max_size=2)
        ),
        max_size=3,
    ),
)
def test_fabric_graph_builds_or_raises_one_config_error(topology, kwargs):
    # Keep accepted fabrics small: the property is about refusing, not building big ones.
    for key in ("leaves", "k", "groups", "nodes", "hosts_per_leaf", "hosts_per_switch"):
        if isinstance(kwargs.get(key), int) and kwargs[key] > 4:
            kwargs[key] = 4
    try:
        scenario.fabric_graph(topology, **kwargs)
    except ConfigError as exc:
        one_line(exc)


# ---------------------------------------------------------------- the topology loader


def loads_or_config_error(text: str) -> None:
    try:
        topofile.loads(text, "fuzz.yaml")
    except ConfigError as exc:
        assert isinstance(exc, topofile.TopoFileError)
        one_line(exc)


@FAST
@given(text=st.text(max_size=300))
def test_any_text_loads_or_raises_one_config_error(text):
    loads_or_config_error(text)


JSONISH = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.text(max_size=10),
        st.binary(max_size=10),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@FAST
@given(doc=JSONISH)
def test_any_yaml_document_loads_or_raises_one_config_error(doc):
    loads_or_config_error(yaml.dump(doc))


FIELDS = [
    ("defaults", "rate"),
    ("defaults", "delay"),
    ("nodes", "leaf1", "hosts"),
    ("nodes", "leaf1", "host_rate"),
    ("nodes", "leaf1", "dpid"),
    ("nodes", "h3", "ip"),
    ("nodes", "h3", "mac"),
    ("nodes", "spine1", "role"),
    ("nodes", "spine1", "kind"),
    ("links", 1, "rate"),
    ("links", 2, "delay"),
    ("links", 0, "ports"),
    ("links", 0, "b"),
    ("time_scale",),
    ("modelled_rate",),
    ("name",),
    ("nodes",),
]


@FAST
@given(path=st.sampled_from(FIELDS), value=st.one_of(NUMBERS, NUMBER_TEXT, JSONISH))
def test_a_good_file_with_any_value_anywhere_loads_or_raises_one_config_error(path, value):
    doc = yaml.safe_load(GOOD_FILE)
    here = doc
    for part in path[:-1]:
        here = here[part]
    here[path[-1]] = value
    loads_or_config_error(yaml.dump(doc))


@settings(FAST, max_examples=40)
@given(
    # PyYAML composes recursively: past ~300 levels it would hit Python's recursion limit.
    depth=st.integers(min_value=1, max_value=800),
    opener=st.sampled_from(["[", "{a: ", "- ", "? "]),
)
def test_deep_nesting_loads_or_raises_one_config_error(depth, opener):
    loads_or_config_error("x: " + opener * depth)


@FAST
@given(
    fanout=st.integers(min_value=1, max_value=12),
    levels=st.integers(min_value=1, max_value=9),
    self_ref=st.booleans(),
)
def test_aliases_however_nested_load_or_raise_one_config_error(fanout, levels, self_ref):
    lines = ["a0: &a0 [1, 2]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]")
    if self_ref:
        lines.append("loop: &loop {x: [*loop]}")
    loads_or_config_error(GOOD_FILE + "params:\n" + "".join(f"  {x}\n" for x in lines))


@FAST
@given(data=st.binary(max_size=300))
def test_any_bytes_in_a_file_load_or_raise_one_config_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "t.yaml"
    path.write_bytes(data)
    try:
        topofile.load(path)
    except ConfigError as exc:
        one_line(exc)


@FAST
@given(data=st.binary(max_size=200))
def test_binary_tags_load_or_raise_one_config_error(data):
    import base64

    loads_or_config_error(f"name: !!binary {base64.b64encode(data).decode() or 'AA=='}\n")

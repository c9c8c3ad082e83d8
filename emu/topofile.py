"""Topology files: a fabric written down as YAML, read into the builders' graph.

Owns the file format (its JSON schema is `emu/data/topology.schema.json`), reading
a file into the same networkx graph the builders of `emu.fabric` return
(`load`), checking it with errors that name the file, the line and the field in
one line (`TopoFileError`), and the rules that derive what a file leaves out;
writing a graph back in the same format is `emu.topowrite.dump`'s, so that a parametrised fabric stays one Python call and a hand-made
one stays one file. Does not own the graph's attribute contract (that is
`emu.fabric.validate`, which every loaded graph passes) nor anything that runs.
Called by `emu.scenario` (the `topo` parameter, `emu run --topo`, `emu cli
--topo`), by the `emu topo` commands and by labs.

A file, in the spirit of containerlab's ``.clab.yml``::

    # yaml-language-server: $schema=../emu/data/topology.schema.json
    name: two-leaves
    defaults: {rate: 20M}
    nodes:
      spine1: {kind: switch, role: spine}
      leaf1:  {kind: switch, role: leaf, hosts: 2}
      leaf2:  {kind: switch, role: leaf}
      h3:     {kind: host, ip: 10.0.2.1}
    links:
      - {a: leaf1, b: spine1}
      - {a: leaf2, b: spine1, rate: 10M}
      - {a: h3, b: leaf2}

What is left out is derived the way the builders derive it (module docstring
of `emu.fabric`): a switch's tier from its role, its dpid from its role and
its rank among switches of that role, a host's MAC from its number in file
order, its IP as 10.0.<S>.<n> (its switch the S-th that has hosts, it the
n-th host there), port numbers downward-facing first, each in file order. So
`emu.topowrite.dump(leaf_spine(...))` is a short file, and loading it gives
the graph back.

Checking goes in three steps, each stopping at the first error: YAML syntax
(PyYAML's marks), the schema (jsonschema, first error by line), then what a
schema cannot say (names in links, one link per host, duplicates, ports,
connectivity). PyYAML keeps the last of two equal keys silently; this module
reads the composed nodes and rejects the second.

What a file may hold is bounded before anything walks it (emu.yamlfile): MAX_FILE_BYTES of
text, MAX_DEPTH levels of nesting and MAX_VALUES values with aliases expanded
(so an alias that contains itself, `a: &a [*a]`, or a billion-laughs document is
one error, not a RecursionError or a hang). Its values are held to the bounds
that `--set` holds them to (emu.config: LINK_RATE_BPS, MODELLED_RATE_BPS,
LINK_DELAY_S, TIME_SCALE, HOSTS_PER_SWITCH), in the same words. `TopoFileError`
is a `ConfigError`, the one error type of emu's validators, and nothing else
escapes `load` or `loads`.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import networkx as nx

from emu import config, fabric
from emu.fabric import FabricSpecError
from emu.yamlfile import (
    FileError,
    Marks,
    Path_,
    field_name,
    parse,
    schema_error,
    show,
)

__all__ = [
    "SCHEMA_FILE",
    "TopoFileError",
    "graphs_equal",
    "load",
    "loads",
    "parse_rate",
    "schema",
    "schema_path",
]

SCHEMA_FILE = "topology.schema.json"
# Where an example in topologies/ finds the schema relative to itself, for editors.
SCHEMA_REF = "../emu/data/topology.schema.json"

_RATE_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_RATE_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)([KMGT]?)$")
_DELAY_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_DELAY_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?(?:[eE]-?[0-9]+)?)(ns|us|ms|s)$")
# The rules that fill in what a file leaves out (FIRST_PORT, node_rank,
# default_port_order, default_mac) are public: emu/topowrite.py leaves out
# exactly what they reproduce.
# A host's port is 0; a switch numbers its ports from 1 (emu.fabric, "Port numbering").
FIRST_PORT = {"host": 0, "switch": 1}
# The link tier the builders give a link between two switch roles; others are "fabric".
_LINK_TIER = {
    frozenset({"leaf", "spine"}): "leaf-spine",
    frozenset({"edge", "agg"}): "edge-agg",
    frozenset({"agg", "core"}): "agg-core",
    frozenset({"torus"}): "torus",
}
# Node attributes a file keeps (the builders' own: emu.fabric's contract); the
# first two a switch's generated hosts inherit.
NODE_KEYS = ("pod", "rail", "node", "group", "coords")
INHERITED_KEYS = ("pod", "rail")


class TopoFileError(FabricSpecError, FileError):
    """A topology file that cannot be read into a fabric, in one line
    (``topo.yaml:14: links[3].b: unknown node 'leaf9'``; emu.yamlfile.FileError)."""


# ---------------------------------------------------------------- schema


def schema() -> Dict[str, Any]:
    """The JSON schema of a topology file (draft-07), as shipped in emu/data/."""
    return json.loads(resources.files("emu").joinpath("data", SCHEMA_FILE).read_text())


def schema_path() -> Path:
    """The schema file as installed (for an editor's ``$schema=`` line)."""
    return Path(str(resources.files("emu").joinpath("data", SCHEMA_FILE)))


# ---------------------------------------------------------------- units


def parse_rate(value: Union[int, float, str]) -> int:
    """Bits per second from ``100M``, ``10G``, ``2.5G``, ``25e9`` or a number.

    Raises:
        ValueError: not a rate, or not a whole number of bit/s above 0.

    Examples:
        >>> parse_rate("2.5G"), parse_rate("25e9"), parse_rate(20_000_000)
        (2500000000, 25000000000, 20000000)
    """
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, str):
        match = _RATE_RE.match(value)
        if not match:
            raise ValueError(value)
        value = float(match.group(1)) * _RATE_SUFFIX[match.group(2)]
    rate = round(value)
    if rate <= 0 or abs(rate - value) > 1e-6 * rate:
        raise ValueError(value)
    return int(rate)


def format_rate(rate_bps: int) -> Union[str, int]:
    """The shortest exact spelling of `rate_bps`: ``20M``, ``2500M``, or the integer."""
    for suffix in ("T", "G", "M", "K"):
        if rate_bps % _RATE_SUFFIX[suffix] == 0:
            return f"{rate_bps // _RATE_SUFFIX[suffix]}{suffix}"
    return rate_bps


def parse_delay(value: Union[int, float, str]) -> float:
    """Seconds from ``100us``, ``1ms``, ``0.5s`` or a number of seconds."""
    if isinstance(value, str):
        match = _DELAY_RE.match(value)
        if not match:
            raise ValueError(value)
        # Rounded to a picosecond, so that "100us" is 0.0001 and not 9.999999999999999e-05.
        return round(float(match.group(1)) * _DELAY_UNIT[match.group(2)], 12)
    return float(value)


# ---------------------------------------------------------------- resolving


@dataclass
class _Node:
    name: str
    kind: str
    role: str
    spec: Dict[str, Any]
    path: Path_
    host_index: int = 0  # hosts: 1-based number in file order (the MAC)
    attached_to: Optional[str] = None  # hosts: the switch, once a link names it
    link_index: Optional[int] = None  # hosts: which link attaches it
    generated: bool = False  # made by a switch's `hosts:`
    attrs: Dict[str, Any] = field(default_factory=dict)
    nvswitch: Optional[str] = None  # GPU hosts: the NVSwitch its second port is on
    nvlink_path: Optional[Path_] = None  # ... and the link that says so


@dataclass
class _Link:
    a: str
    b: str
    rate_bps: int
    delay_s: float
    ports: Optional[Tuple[int, int]]
    path: Path_  # ("links", i), or the generating switch's ("nodes", name, "hosts")


class _Reader:
    """Turns a schema-valid document into a fabric graph, checking what the schema cannot."""

    def __init__(self, doc: Dict[str, Any], marks: Marks, filename: str):
        self.doc, self.marks, self.filename = doc, marks, filename

    def fail(self, path: Path_, problem: str, on_key: bool = False) -> TopoFileError:
        line = self.marks.key_line(path) if on_key else self.marks.value_line(path)
        return TopoFileError(self.filename, line, field_name(path), problem)

    def rate(self, path: Path_, value: Any, bound: config.Bound = config.LINK_RATE_BPS) -> int:
        """Bit/s from the file's spelling, within `bound` (the link rates': as `--set`'s)."""
        try:
            rate = parse_rate(value)
        except (ValueError, OverflowError):
            raise self.fail(path, f"{show(value)} is not a rate (e.g. 100M, 10G, 25e9)") from None
        if not bound.contains(rate):
            raise self.fail(path, f"{show(value)}: {bound.allowed}")
        return rate

    def delay(self, path: Path_, value: Any) -> float:
        """Seconds from the file's spelling, within emu.config.LINK_DELAY_S."""
        try:
            delay = parse_delay(value)
        except (ValueError, OverflowError):
            raise self.fail(path, f"{show(value)} is not a delay (e.g. 0, 100us, 1ms)") from None
        if not config.LINK_DELAY_S.contains(delay):
            raise self.fail(path, f"{show(value)}: {config.LINK_DELAY_S.allowed}")
        return delay

    def read(self) -> nx.Graph:
        defaults = self.doc.get("defaults", {})
        self.default_rate = (
            self.rate(("defaults", "rate"), defaults["rate"]) if "rate" in defaults else None
        )
        self.default_delay = self.delay(("defaults", "delay"), defaults.get("delay", 0.0))
        nodes, links = self.read_nodes()
        self.attach_hosts(nodes, links)
        self.number_ports(nodes, links)
        return self.build(nodes, links)

    def read_nodes(self) -> Tuple[Dict[str, _Node], List[_Link]]:
        """The declared nodes and the hosts their ``hosts: N`` make, in file order; all links."""
        nodes: Dict[str, _Node] = {}
        generated: List[_Link] = []
        host_count = 0
        for name, spec in self.doc["nodes"].items():
            node = self.read_node(name, spec)
            nodes[name] = node
            if node.kind == "host":
                host_count += 1
                node.host_index = host_count
            made = self.generate_hosts(node, host_count, nodes)
            host_count += len(made)
            generated += made
        return nodes, generated + self.read_links(nodes)

    def read_node(self, name: str, spec: Dict[str, Any]) -> _Node:
        """A declared node whose role fits its kind and which has no key of the other kind."""
        path: Path_ = ("nodes", name)
        kind = spec["kind"]
        role = spec.get("role", "host" if kind == "host" else "switch")
        if (role == "host") != (kind == "host"):
            allowed = "host" if kind == "host" else ", ".join(fabric.SWITCH_ROLES)
            raise self.fail(path + ("role",), f"{role!r} is not a {kind} role; allowed: {allowed}")
        only = (
            ("hosts", "host_rate") if kind == "host" else ("ip", "mac", "nvlink_ip", "nvlink_mac")
        )
        for key in only:
            if key in spec:
                raise self.fail(path + (key,), f"a {kind} has no {key}", on_key=True)
        if kind == "host" and "dpid" in spec:
            raise self.fail(path + ("dpid",), "a host has no dpid", on_key=True)
        return _Node(name, kind, role, spec, path)

    def generate_hosts(
        self, switch: _Node, host_count: int, nodes: Dict[str, _Node]
    ) -> List[_Link]:
        """Add the hosts a switch's ``hosts: N`` makes, numbered on from `host_count`; their links."""
        spec, hosts_path = switch.spec, switch.path + ("hosts",)
        if "hosts" in spec and (
            not isinstance(spec["hosts"], int)  # JSON Schema's integer takes 2.0 too
            or not config.HOSTS_PER_SWITCH.contains(spec["hosts"])
        ):
            raise self.fail(hosts_path, f"{show(spec['hosts'])}: {config.HOSTS_PER_SWITCH.allowed}")
        links: List[_Link] = []
        for _ in range(spec.get("hosts", 0)):
            host_count += 1
            host = f"h{host_count}"
            if host in self.doc["nodes"]:
                raise self.fail(
                    hosts_path,
                    f"generated host {host!r} clashes with node {host!r} "
                    f"(line {self.marks.key_line(('nodes', host))})",
                )
            inherited = {k: spec[k] for k in INHERITED_KEYS if k in spec}
            nodes[host] = _Node(
                host, "host", "host", inherited, hosts_path, host_count, switch.name, generated=True
            )
            rate = self.generated_host_rate(switch)
            links.append(_Link(host, switch.name, rate, self.default_delay, None, hosts_path))
        return links

    def generated_host_rate(self, switch: _Node) -> int:
        """The rate of a switch's generated hosts' links: its host_rate, else defaults.rate."""
        if "host_rate" in switch.spec:
            return self.rate(switch.path + ("host_rate",), switch.spec["host_rate"])
        if self.default_rate is not None:
            return self.default_rate
        raise self.fail(
            switch.path + ("hosts",),
            "no rate for the generated hosts' links: give host_rate or defaults.rate",
        )

    def read_links(self, nodes: Dict[str, _Node]) -> List[_Link]:
        """The file's links, in order, each between two known nodes."""
        return [
            self.read_link(("links", i), spec, nodes) for i, spec in enumerate(self.doc["links"])
        ]

    def read_link(self, path: Path_, spec: Dict[str, Any], nodes: Dict[str, _Node]) -> _Link:
        """One link: between two known nodes, with its rate, delay and ports if given."""
        for end in ("a", "b"):
            if spec[end] not in nodes:
                raise self.fail(path + (end,), f"unknown node {spec[end]!r}")
        if spec["a"] == spec["b"]:
            raise self.fail(path + ("b",), f"a link from {spec['a']!r} to itself")
        if "rate" in spec:
            rate = self.rate(path + ("rate",), spec["rate"])
        elif self.default_rate is not None:
            rate = self.default_rate
        else:
            raise self.fail(path, "missing rate (give one here or in defaults.rate)")
        delay = (
            self.delay(path + ("delay",), spec["delay"]) if "delay" in spec else self.default_delay
        )
        ports = tuple(spec["ports"]) if "ports" in spec else None
        if ports is not None and not all(isinstance(p, int) for p in ports):
            raise self.fail(path + ("ports",), f"{show(spec['ports'])}: ports are integers")
        return _Link(spec["a"], spec["b"], rate, delay, ports, path)

    def attach_hosts(self, nodes: Dict[str, _Node], links: List[_Link]) -> None:
        """Attach every host to the switch its one link names (a GPU also to its NVSwitch).

        Checks, in this order: one link per pair of nodes and none between two
        hosts, what links an NVSwitch, the hosts per switch, and that every
        host is attached and every switch linked.
        """
        seen: Dict[frozenset, _Link] = {}
        for link in links:
            self.check_new_pair(link, seen)
            a, b = nodes[link.a], nodes[link.b]
            if a.kind == b.kind == "host":
                raise self.fail(
                    link.path + ("b",),
                    f"links two hosts ({link.a}, {link.b}); a host attaches to a switch",
                )
            for host, switch in ((a, b), (b, a)):
                if host.kind == "host":
                    self.attach(host, switch, link)
        for link in links:
            self.check_nvswitch_link(nodes[link.a], nodes[link.b], link)
        self.check_hosts_per_switch(nodes)
        for node in nodes.values():
            self.check_attached(node, links)

    def check_new_pair(self, link: _Link, seen: Dict[frozenset, _Link]) -> None:
        """A link between two nodes that no link before it (in `seen`) joins."""
        pair = frozenset((link.a, link.b))
        if pair in seen:
            first = seen[pair].path
            raise self.fail(
                link.path,
                f"a second link between {link.a} and {link.b} "
                f"(first: {field_name(first)}, line {self.marks.value_line(first)})",
            )
        seen[pair] = link

    def attach(self, host: _Node, switch: _Node, link: _Link) -> None:
        """Record `link` as `host`'s NVLink link or its one network link (a generated host has it)."""
        if switch.role == "nvswitch":
            # A GPU's NVLink port: a second port, beside its NIC's.
            if host.nvswitch is not None:
                raise self.fail(
                    link.path,
                    f"host {host.name!r} already has its NVLink link "
                    f"({field_name(host.nvlink_path)}, line "
                    f"{self.marks.value_line(host.nvlink_path)})",
                )
            host.nvswitch, host.nvlink_path = switch.name, link.path
            return
        if host.generated:
            return
        if host.attached_to is not None:
            first = ("links", host.link_index)
            raise self.fail(
                link.path,
                f"host {host.name!r} already has its one link "
                f"({field_name(first)}, line {self.marks.value_line(first)})",
            )
        host.attached_to, host.link_index = switch.name, link.path[1]

    def check_nvswitch_link(self, a: _Node, b: _Node, link: _Link) -> None:
        """An NVSwitch links only GPUs (hosts)."""
        if "nvswitch" in (a.role, b.role) and "host" not in (a.kind, b.kind):
            other = b if a.role == "nvswitch" else a
            raise self.fail(
                link.path,
                f"links an nvswitch to {other.name!r}; an nvswitch links only GPUs "
                "(hosts), on their second port",
            )

    def check_hosts_per_switch(self, nodes: Dict[str, _Node]) -> None:
        """No switch has more hosts than emu.config.HOSTS_PER_SWITCH allows."""
        per_switch: Dict[str, int] = {}
        for node in nodes.values():
            if node.kind == "host" and node.attached_to is not None:
                per_switch[node.attached_to] = per_switch.get(node.attached_to, 0) + 1
        for name, count in per_switch.items():
            if count > config.HOSTS_PER_SWITCH.hi:
                raise self.fail(
                    nodes[name].path,
                    f"{count} hosts on one switch: {config.HOSTS_PER_SWITCH.allowed}",
                    on_key=True,
                )

    def check_attached(self, node: _Node, links: List[_Link]) -> None:
        """A host is on a network switch (NVLink keys only with an NVSwitch); a switch has links."""
        if node.kind == "host" and node.attached_to is None:
            raise self.fail(
                node.path,
                "host is not attached: no link names it"
                + (" but its NVLink link (a host needs a network switch)" if node.nvswitch else ""),
                on_key=True,
            )
        if node.kind == "host" and node.nvswitch is None:
            for key in ("nvlink_ip", "nvlink_mac"):
                if key in node.spec:
                    raise self.fail(
                        node.path + (key,), "a host without an nvswitch link", on_key=True
                    )
        if node.kind == "switch" and not any(node.name in (lk.a, lk.b) for lk in links):
            raise self.fail(node.path, "switch has no links", on_key=True)

    def number_ports(self, nodes: Dict[str, _Node], links: List[_Link]) -> None:
        """Give every link end a port: explicit ones first, then emu.fabric's default order."""
        self.port_of: Dict[Tuple[int, str], int] = {}
        owner: Dict[Tuple[str, int], _Link] = {}
        for i, link in enumerate(links):
            for end, name in enumerate((link.a, link.b)):
                if link.ports is None:
                    continue
                port = link.ports[end]
                if port < FIRST_PORT[nodes[name].kind]:
                    raise self.fail(
                        link.path + ("ports", end),
                        f"{name} is a {nodes[name].kind}; its ports start at {FIRST_PORT[nodes[name].kind]}",
                    )
                if (name, port) in owner:
                    raise self.fail(
                        link.path + ("ports", end),
                        f"port {port} of {name} already used by {field_name(owner[name, port].path)}",
                    )
                owner[name, port] = link
                self.port_of[i, name] = port
        order = default_port_order(
            [(link.a, link.b) for link in links],
            {n: node_rank(v.kind, v.role) for n, v in nodes.items()},
        )
        for name, link_indexes in order.items():
            port = FIRST_PORT[nodes[name].kind]
            for i in link_indexes:
                if (i, name) in self.port_of:
                    continue
                while (name, port) in owner:
                    port += 1
                owner[name, port] = links[i]
                self.port_of[i, name] = port
        for name, node in nodes.items():
            used = sorted(p for (n, p) in owner if n == name)
            first = FIRST_PORT[node.kind]
            if used != list(range(first, first + len(used))):
                gap = next(p for p in range(first, first + len(used) + 1) if p not in used)
                culprit = max((p, owner[name, p]) for p in used)[1]
                raise self.fail(
                    culprit.path + ("ports",),
                    f"{name}'s ports must be {first}..{first + len(used) - 1} with none skipped; port {gap} is missing",
                )
            longest = f"{name}-eth{used[-1]}"
            if len(longest) > fabric.MAX_INTF_NAME:
                raise self.fail(
                    node.path,
                    f"interface name {longest!r} has {len(longest)} characters, Linux allows at most {fabric.MAX_INTF_NAME}",
                    on_key=True,
                )

    def build(self, nodes: Dict[str, _Node], links: List[_Link]) -> nx.Graph:
        doc = self.doc
        host_rates = [
            link.rate_bps for link in links if "host" in (nodes[link.a].kind, nodes[link.b].kind)
        ]
        given_scale = doc.get("time_scale", 1.0)
        if not config.TIME_SCALE.contains(given_scale):
            raise self.fail(("time_scale",), f"{show(given_scale)}: {config.TIME_SCALE.allowed}")
        time_scale = float(given_scale)
        if "modelled_rate" in doc:
            if "time_scale" in doc:
                raise self.fail(
                    ("modelled_rate",), "give modelled_rate or time_scale, not both", on_key=True
                )
            if len(set(host_rates)) != 1:
                raise self.fail(
                    ("modelled_rate",),
                    f"host links run at {len(set(host_rates))} different rates; give time_scale instead",
                    on_key=True,
                )
            modelled = self.rate(("modelled_rate",), doc["modelled_rate"], config.MODELLED_RATE_BPS)
            time_scale = fabric.time_scale_for(host_rates[0], modelled)
        G = nx.Graph(
            name=doc["name"],
            kind=doc.get("kind", "custom"),
            params=dict(doc.get("params", {})),
            subnet=fabric.SUBNET,
            time_scale=time_scale,
        )
        role_rank: Dict[str, int] = {}
        seen: Dict[str, Dict[Any, Tuple[str, int]]] = {"dpid": {}, "ip": {}, "mac": {}}
        default_ips = _default_ips(
            [(n.name, n.kind, n.attached_to) for n in nodes.values()],
        )
        default_nvlink_ips = default_nvlink_addresses(
            [(n.name, n.nvswitch) for n in nodes.values() if n.kind == "host"]
        )
        for name, node in nodes.items():
            spec = node.spec
            if node.kind == "switch":
                role_rank[node.role] = role_rank.get(node.role, 0) + 1
                tier = fabric.SWITCH_ROLES[node.role]
                dpid = spec.get("dpid", ((tier + 1) << 16) | role_rank[node.role])
                self.unique(seen, "dpid", dpid, node.path + ("dpid",), node)
                attrs = dict(kind="switch", role=node.role, tier=tier, dpid=dpid)
            else:
                ip = spec.get("ip") or default_ips.get(name)
                if ip is None:
                    raise self.fail(
                        node.path,
                        "no ip, and its switch has too many hosts or switches with hosts for the default 10.0.<S>.<n>",
                        on_key=True,
                    )
                if ipaddress.ip_address(ip) not in ipaddress.ip_network(fabric.SUBNET):
                    raise self.fail(node.path + ("ip",), f"{ip!r} is not in {fabric.SUBNET}")
                self.unique(seen, "ip", ip, node.path + ("ip",), node)
                mac = spec.get("mac") or default_mac(node.host_index)
                self.unique(seen, "mac", mac, node.path + ("mac",), node)
                attrs = dict(
                    kind="host",
                    role="host",
                    ip=ip,
                    prefixlen=fabric.PREFIXLEN,
                    mac=mac,
                    leaf=node.attached_to,
                )
                if node.nvswitch is not None:
                    attrs.update(self.nvlink_address(node, default_nvlink_ips, seen))
            for key in NODE_KEYS:
                if key in spec:
                    attrs[key] = spec[key]
            G.add_node(name, **attrs)
        for i, link in enumerate(links):
            pa, pb = self.port_of[i, link.a], self.port_of[i, link.b]
            G.add_edge(
                link.a,
                link.b,
                rate_bps=link.rate_bps,
                delay_s=link.delay_s,
                tier=_link_tier(nodes[link.a], nodes[link.b]),
                ports={link.a: pa, link.b: pb},
                intfs={link.a: f"{link.a}-eth{pa}", link.b: f"{link.b}-eth{pb}"},
            )
        # A rail-only fabric (rail_optimized with no spines) is islands by design.
        rail_only = G.graph["kind"] == "rail_optimized" and G.graph["params"].get("spines") == 0
        if not rail_only and not nx.is_connected(G):
            parts = sorted(nx.connected_components(G), key=lambda c: -len(c))
            stray = sorted(parts[1], key=list(G.nodes).index)
            raise self.fail(
                ("links",),
                f"the fabric is not connected: {', '.join(stray[:4])}{' ...' if len(stray) > 4 else ''} cannot reach {next(iter(G.nodes))}",
                on_key=True,
            )
        try:
            fabric.validate(G)
        except FabricSpecError as exc:  # a rule this reader missed: still one line, no traceback
            raise TopoFileError(self.filename, None, "fabric", str(exc)) from None
        return G

    def nvlink_address(self, node: _Node, defaults: Dict[str, str], seen) -> Dict[str, str]:
        """A GPU's NVLink port: nvlink_ip (given, or 10.255.<S>.<n>) and nvlink_mac."""
        ip = node.spec.get("nvlink_ip") or defaults.get(node.name)
        if ip is None:
            raise self.fail(
                node.path,
                "no nvlink_ip, and its nvswitch is past the 255th or it past the 254th GPU "
                "there for the default 10.255.<S>.<n>",
                on_key=True,
            )
        if ipaddress.ip_address(ip) not in ipaddress.ip_network(fabric.NVLINK_NET):
            raise self.fail(node.path + ("nvlink_ip",), f"{ip!r} is not in {fabric.NVLINK_NET}")
        self.unique(seen, "ip", ip, node.path + ("nvlink_ip",), node)
        mac = node.spec.get("nvlink_mac") or default_nvlink_mac(node.host_index)
        self.unique(seen, "mac", mac, node.path + ("nvlink_mac",), node)
        return {"nvlink_ip": ip, "nvlink_mac": mac}

    def unique(self, seen, what: str, value: Any, path: Path_, node: _Node) -> None:
        """Reject `value` if another node has it; blame the field if given, else the node."""
        given = not node.generated and path[-1] in node.spec
        if value in seen[what]:
            other, line = seen[what][value]
            raise self.fail(
                path if given else node.path,
                f"{what} {value!r} already used by {other} (line {line})",
                on_key=not given,
            )
        seen[what][value] = (node.name, self.marks.key_line(node.path))


def node_rank(kind: str, role: str) -> int:
    """Hosts below NVSwitches (-1) below tier-0 switches below tier 1 below tier 2: which
    way a link faces. A GPU's links both face up from it: its NIC's (listed first) is
    port 0, its NVLink's port 1, as emu.fabric builds them."""
    return -2 if kind == "host" else fabric.SWITCH_ROLES[role]


def default_port_order(
    pairs: Sequence[Tuple[str, str]], rank: Dict[str, int]
) -> Dict[str, List[int]]:
    """Per node, its links (indexes into `pairs`) in port order: downward-facing first.

    As `emu.fabric._build._number_ports`: a link faces down from its higher-ranked
    end; between equal ranks, `a` counts as the lower end.
    """
    down: Dict[str, List[int]] = {}
    up: Dict[str, List[int]] = {}
    for i, (a, b) in enumerate(pairs):
        lower, upper = (b, a) if rank[a] > rank[b] else (a, b)
        up.setdefault(lower, []).append(i)
        down.setdefault(upper, []).append(i)
    return {n: down.get(n, []) + up.get(n, []) for n in rank}


def _default_ips(nodes: Sequence[Tuple[str, str, Optional[str]]]) -> Dict[str, str]:
    """Host -> 10.0.<S>.<n>: its switch the S-th (file order) with hosts, it the n-th there."""
    order = [name for name, _, _ in nodes]
    by_switch: Dict[str, List[str]] = {}
    for name, kind, attached in nodes:
        if kind == "host":
            by_switch.setdefault(attached, []).append(name)
    out = {}
    for s, switch in enumerate(sorted(by_switch, key=order.index), start=1):
        for n, host in enumerate(by_switch[switch], start=1):
            if s <= 255 and n <= 254:
                out[host] = f"10.0.{s}.{n}"
    return out


def default_nvlink_addresses(hosts: Sequence[Tuple[str, Optional[str]]]) -> Dict[str, str]:
    """GPU -> 10.255.<S>.<n>: its nvswitch the S-th (in host order) with GPUs, it the n-th there.

    As `emu.fabric.rail_optimized` numbers them: node S's GPU n.
    """
    by_switch: Dict[str, List[str]] = {}
    for name, nvswitch in hosts:
        if nvswitch is not None:
            by_switch.setdefault(nvswitch, []).append(name)
    out = {}
    for s, switch in enumerate(by_switch, start=1):
        for n, host in enumerate(by_switch[switch], start=1):
            if s <= 255 and n <= 254:
                out[host] = f"10.255.{s}.{n}"
    return out


def default_nvlink_mac(index: int) -> str:
    """As emu.fabric.rail_optimized: 02:00:01 and the host's 24-bit number."""
    return "02:00:01:%02x:%02x:%02x" % ((index >> 16) & 0xFF, (index >> 8) & 0xFF, index & 0xFF)


def default_mac(index: int) -> str:
    """As emu.fabric._build._add_host: 02:00:00 and the host's 24-bit number."""
    return "02:00:00:%02x:%02x:%02x" % ((index >> 16) & 0xFF, (index >> 8) & 0xFF, index & 0xFF)


def _link_tier(a: _Node, b: _Node) -> str:
    if "host" in (a.kind, b.kind):
        return "nvlink" if "nvswitch" in (a.role, b.role) else "host"
    if a.role == b.role == "router" and "group" in a.spec and "group" in b.spec:
        # A dragonfly's links: local within a group, global between groups.
        return "local" if a.spec["group"] == b.spec["group"] else "global"
    return _LINK_TIER.get(frozenset({a.role, b.role}), "fabric")


# ---------------------------------------------------------------- public API


def loads(text: str, filename: str = "<string>") -> nx.Graph:
    """Read a topology from YAML text; `filename` is what errors name.

    Raises:
        TopoFileError: the first thing wrong, in one line (FILE:LINE: FIELD: problem).
    """
    doc, marks = parse(text, filename, TopoFileError)
    error = schema_error(doc, marks, filename, schema(), TopoFileError)
    if error:
        raise error
    return _Reader(doc, marks, filename).read()


def load(path: Union[str, Path]) -> nx.Graph:
    """Read the topology file at `path` into a fabric graph (the builders' contract).

    Args:
        path: a YAML topology file (format: this module's docstring and the
            schema in emu/data/topology.schema.json).

    Returns:
        An ``nx.Graph`` that passes `emu.fabric.validate`: hand it to
        `emu.net.Fabric` as a builder's graph.

    Raises:
        TopoFileError: the file cannot be read, or the first thing wrong in
            it, in one line naming the file, the line and the field.

    Examples:
        >>> G = load("topologies/leaf-spine-2x2.yaml")  # from the repository's top
        >>> fabric.expected_counts(G)
        {'switches': 4, 'hosts': 4, 'host_addresses': 4, 'switch_links': 4}
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TopoFileError(str(path), None, "", f"cannot read: {exc}") from None
    return loads(text, str(path))


def graphs_equal(G: nx.Graph, H: nx.Graph) -> bool:
    """Same graph attributes, nodes, edges and every attribute (node order aside)."""
    if G.graph != H.graph or dict(G.nodes(data=True)) != dict(H.nodes(data=True)):
        return False
    return {frozenset((u, v)): d for u, v, d in G.edges(data=True)} == {
        frozenset((u, v)): d for u, v, d in H.edges(data=True)
    }

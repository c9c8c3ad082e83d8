"""Writing a fabric graph as a topology file: the inverse of `emu.topofile.load`.

Owns what a written file leaves out and how it is laid out: a switch's hosts
as ``hosts: N`` where they are what that shorthand makes, dpids, MACs and
ports only where emu.topofile's derivation rules would not reproduce them,
the most common rate and delay as defaults, one line per node and per link.
Does not own the format or its rules (emu/topofile.py, which this imports;
never the other way round). Called by `emu topo export` and by anyone saving a built fabric.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Set, Tuple

import networkx as nx
import yaml

from emu import fabric
from emu.topofile import (
    FIRST_PORT,
    INHERITED_KEYS,
    NODE_KEYS,
    SCHEMA_REF,
    default_mac,
    default_nvlink_addresses,
    default_nvlink_mac,
    default_port_order,
    format_rate,
    node_rank,
)


def dump(G: nx.Graph, schema_ref: str = SCHEMA_REF) -> str:
    """The topology file of `G` (a builder's graph, or one loaded from a file).

    Writes only what cannot be derived (see the module docstring): a switch's
    hosts as ``hosts: N`` where they are what that shorthand makes, dpids,
    MACs, IPs and ports only where they differ from the defaults. Loading the
    text gives `G` back (`graphs_equal`); tests check that for every builder.
    The first line points editors at the schema: `schema_ref`, a path
    relative to where the file will live, or a URL.

    Raises:
        FabricSpecError: `G` breaks the contract of emu.fabric.validate.
    """
    fabric.validate(G)
    default_rate, default_delay = _most_common_rate_and_delay(G)
    compact = _compact_switches(G, default_rate, default_delay)
    generated = {h for s in compact for h in _hosts_of(G, s)}
    doc: Dict[str, Any] = {"name": G.graph["name"], "kind": G.graph["kind"]}
    if G.graph["params"]:
        doc["params"] = G.graph["params"]
    if G.graph["time_scale"] != 1.0:
        doc["time_scale"] = G.graph["time_scale"]
    doc["defaults"] = {"rate": format_rate(default_rate)}
    if default_delay:
        doc["defaults"]["delay"] = default_delay
    doc["nodes"] = _node_specs(G, compact, generated, default_rate)
    doc["links"] = _link_specs(G, compact, generated, default_rate, default_delay)
    return _render(doc, schema_ref)


def _most_common_rate_and_delay(G: nx.Graph) -> Tuple[int, float]:
    """The defaults a file gets: the most common rate and delay (ties: the first link's)."""
    rates = [d["rate_bps"] for _, _, d in G.edges(data=True)]
    delays = [d["delay_s"] for _, _, d in G.edges(data=True)]
    return Counter(rates).most_common(1)[0][0], Counter(delays).most_common(1)[0][0]


def _node_specs(
    G: nx.Graph, compact: List[str], generated: Set[str], default_rate: int
) -> Dict[str, Dict[str, Any]]:
    """The ``nodes:`` of the file: every node but the `generated` hosts, in node order."""
    nvlink_ips = default_nvlink_addresses(
        [
            (h, next((p.switch for p in fabric.host_ports(G, h) if p.kind == "nvlink"), None))
            for h in fabric.hosts(G)
        ]
    )
    out: Dict[str, Dict[str, Any]] = {}
    role_rank: Dict[str, int] = {}
    host_index = 0  # the file's host numbering, which derives MACs: generated hosts count
    for name in (n for n in G.nodes if n not in generated):
        d = G.nodes[name]
        if d["kind"] == "switch":
            role_rank[d["role"]] = role_rank.get(d["role"], 0) + 1
            spec = _switch_spec(G, name, role_rank[d["role"]], name in compact, default_rate)
            host_index += spec.get("hosts", 0)
        else:
            host_index += 1
            spec = _host_spec(d, host_index, nvlink_ips.get(name))
        for key in NODE_KEYS:
            if key in d:
                spec[key] = d[key]
        out[name] = spec
    return out


def _switch_spec(
    G: nx.Graph, name: str, role_rank: int, compact: bool, default_rate: int
) -> Dict[str, Any]:
    """A switch's line: its role, its dpid if not derived, ``hosts: N`` if `compact`."""
    d = G.nodes[name]
    spec: Dict[str, Any] = {"kind": d["kind"], "role": d["role"]}
    if d["dpid"] != ((d["tier"] + 1) << 16) | role_rank:
        spec["dpid"] = d["dpid"]
    if compact:
        hosts = _hosts_of(G, name)
        spec["hosts"] = len(hosts)
        host_rate = G.edges[name, hosts[0]]["rate_bps"]
        if host_rate != default_rate:
            spec["host_rate"] = format_rate(host_rate)
    return spec


def _host_spec(
    d: Dict[str, Any], host_index: int, default_nvlink_ip: Optional[str]
) -> Dict[str, Any]:
    """A declared host's line: its IP, and its MAC and NVLink address where not derived."""
    spec: Dict[str, Any] = {"kind": d["kind"], "ip": d["ip"]}
    if d["mac"] != default_mac(host_index):
        spec["mac"] = d["mac"]
    if "nvlink_ip" in d and d["nvlink_ip"] != default_nvlink_ip:
        spec["nvlink_ip"] = d["nvlink_ip"]
    if "nvlink_mac" in d and d["nvlink_mac"] != default_nvlink_mac(host_index):
        spec["nvlink_mac"] = d["nvlink_mac"]
    return spec


def _link_specs(
    G: nx.Graph, compact: List[str], generated: Set[str], default_rate: int, default_delay: float
) -> List[Dict[str, Any]]:
    """The ``links:`` of the file: rates, delays and ports only where not the defaults."""
    rank = {n: node_rank(G.nodes[n]["kind"], G.nodes[n]["role"]) for n in G.nodes}
    generated_links = [(h, s) for s in compact for h in _hosts_of(G, s)]
    pairs = generated_links + _declared_edges(G, generated, rank)
    default_port = _default_ports(G, pairs, rank)
    out = []
    for i, (u, v) in enumerate(pairs[len(generated_links) :], start=len(generated_links)):
        e = G.edges[u, v]
        link: Dict[str, Any] = {"a": u, "b": v}
        if e["rate_bps"] != default_rate:
            link["rate"] = format_rate(e["rate_bps"])
        if e["delay_s"] != default_delay:
            link["delay"] = e["delay_s"]
        if (e["ports"][u], e["ports"][v]) != (default_port[i, u], default_port[i, v]):
            link["ports"] = [e["ports"][u], e["ports"][v]]
        out.append(link)
    return out


def _declared_edges(
    G: nx.Graph, generated: Set[str], rank: Dict[str, int]
) -> List[Tuple[str, str]]:
    """The links a file lists, each lower end first, in the order that needs no ``ports:``.

    That is the order that lets the default numbering reproduce a builder's
    ports: by tier, then by the lower end in node order, then by its port.
    NVLink links last: a GPU's NIC link is its port 0, as the default
    numbering gives the first of a host's links.
    """
    position = {n: i for i, n in enumerate(G.nodes)}

    def oriented(u: str, v: str) -> Tuple[str, str]:
        return (u, v) if (rank[u], position[u]) <= (rank[v], position[v]) else (v, u)

    edges = [(u, v) for u, v in G.edges if not ({u, v} & generated)]
    return sorted(
        (oriented(u, v) for u, v in edges),
        key=lambda e: (
            G.edges[e]["tier"] == "nvlink",
            rank[e[0]],
            rank[e[1]],
            position[e[0]],
            G.edges[e]["ports"][e[0]],
        ),
    )


def _default_ports(
    G: nx.Graph, pairs: List[Tuple[str, str]], rank: Dict[str, int]
) -> Dict[Tuple[int, str], int]:
    """``{(link index, node): port}`` as emu.topofile numbers links listed as `pairs`."""
    default_port = {}
    for name, indexes in default_port_order(pairs, rank).items():
        first = FIRST_PORT[G.nodes[name]["kind"]]
        for port, i in enumerate(indexes, start=first):
            default_port[i, name] = port
    return default_port


def _hosts_of(G: nx.Graph, switch: str) -> List[str]:
    return [n for n in G.nodes if G.nodes[n]["kind"] == "host" and G.nodes[n]["leaf"] == switch]


def _compact_switches(G: nx.Graph, default_rate: int, default_delay: float) -> List[str]:
    """Switches whose hosts are exactly what ``hosts: N`` would make of them.

    The shorthand numbers hosts h<i> in file order, right after their switch,
    with default IPs and MACs, the switch's pod and rail, one rate, the
    default delay and the default ports; a switch qualifies when all of that
    holds in `G`.
    """
    order = list(G.nodes)
    candidates = []
    with_hosts = [s for s in fabric.switches(G) if _hosts_of(G, s)]
    index = 0
    for name in order:
        d = G.nodes[name]
        if d["kind"] == "host":
            index += 1
            continue
        hosts = _hosts_of(G, name)
        if not hosts:
            continue
        s_rank = with_hosts.index(name) + 1
        expected = [f"h{index + n}" for n in range(1, len(hosts) + 1)]
        position = order.index(name)
        ok = hosts == expected and order[position + 1 : position + 1 + len(hosts)] == hosts
        for n, host in enumerate(hosts, start=1):
            hd, e = G.nodes[host], G.edges[host, name]
            inherited = {k: d[k] for k in INHERITED_KEYS if k in d}
            ok = ok and hd["ip"] == f"10.0.{s_rank}.{n}" and hd["mac"] == default_mac(index + n)
            ok = ok and {k: hd[k] for k in NODE_KEYS if k in hd} == inherited
            ok = ok and e["ports"][name] == n and e["delay_s"] == default_delay
            ok = ok and e["rate_bps"] == G.edges[hosts[0], name]["rate_bps"]
            ok = ok and "nvlink_ip" not in hd  # a GPU's NVLink address: declared with it
        if ok and len(hosts) <= 254:
            candidates.append(name)
    return candidates


def _render(doc: Dict[str, Any], schema_ref: str) -> str:
    """YAML with one flow-style line per node and per link, the way people write it."""
    lines = [f"# yaml-language-server: $schema={schema_ref}"]
    for key in ("name", "kind", "params", "time_scale", "defaults"):
        if key in doc:
            lines.append(f"{key}: {_flow(doc[key])}")
    lines.append("nodes:")
    width = max(len(n) for n in doc["nodes"]) + 1
    for name, spec in doc["nodes"].items():
        lines.append(f"  {(name + ':').ljust(width)} {_flow(spec)}")
    lines.append("links:")
    lines += [f"  - {_flow(link)}" for link in doc["links"]]
    return "\n".join(lines) + "\n"


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 16)
    # A bare scalar comes back as a document of its own, closed by "...".
    return text.strip().removesuffix("...").strip()

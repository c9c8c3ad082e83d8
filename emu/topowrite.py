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
from typing import Any, Dict, List, Tuple

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
    rates = [d["rate_bps"] for _, _, d in G.edges(data=True)]
    delays = [d["delay_s"] for _, _, d in G.edges(data=True)]
    # The most common rate and delay become the defaults (ties: the first link's).
    default_rate = Counter(rates).most_common(1)[0][0]
    default_delay = Counter(delays).most_common(1)[0][0]
    compact = _compact_switches(G, default_rate, default_delay)
    out_nodes: Dict[str, Dict[str, Any]] = {}
    out_links: List[Dict[str, Any]] = []
    generated = {h for s in compact for h in _hosts_of(G, s)}
    order = [n for n in G.nodes if n not in generated]
    role_rank: Dict[str, int] = {}
    host_index = 0
    nvlink_ips = default_nvlink_addresses(
        [
            (h, next((p.switch for p in fabric.host_ports(G, h) if p.kind == "nvlink"), None))
            for h in fabric.hosts(G)
        ]
    )
    for name in order:
        d = G.nodes[name]
        spec: Dict[str, Any] = {"kind": d["kind"]}
        if d["kind"] == "switch":
            spec["role"] = d["role"]
            role_rank[d["role"]] = role_rank.get(d["role"], 0) + 1
            if d["dpid"] != ((d["tier"] + 1) << 16) | role_rank[d["role"]]:
                spec["dpid"] = d["dpid"]
            if name in compact:
                spec["hosts"] = len(_hosts_of(G, name))
                host_rate = G.edges[name, _hosts_of(G, name)[0]]["rate_bps"]
                if host_rate != default_rate:
                    spec["host_rate"] = format_rate(host_rate)
                host_index += spec["hosts"]
        else:
            host_index += 1
            spec["ip"] = d["ip"]
            if d["mac"] != default_mac(host_index):
                spec["mac"] = d["mac"]
            if "nvlink_ip" in d and d["nvlink_ip"] != nvlink_ips.get(name):
                spec["nvlink_ip"] = d["nvlink_ip"]
            if "nvlink_mac" in d and d["nvlink_mac"] != default_nvlink_mac(host_index):
                spec["nvlink_mac"] = d["nvlink_mac"]
        for key in NODE_KEYS:
            if key in d:
                spec[key] = d[key]
        out_nodes[name] = spec
    edges = [(u, v) for u, v in G.edges if not ({u, v} & generated)]
    rank = {n: node_rank(G.nodes[n]["kind"], G.nodes[n]["role"]) for n in G.nodes}
    position = {n: i for i, n in enumerate(G.nodes)}

    def oriented(u: str, v: str) -> Tuple[str, str]:
        return (u, v) if (rank[u], position[u]) <= (rank[v], position[v]) else (v, u)

    # Links in the order that lets the default numbering reproduce the ports
    # (a builder's graph then needs no `ports:`): by tier, then by the lower
    # end in node order, then by its port.
    # NVLink links last: a GPU's NIC link is its port 0, as the default numbering
    # gives the first of a host's links.
    edges = sorted(
        (oriented(u, v) for u, v in edges),
        key=lambda e: (
            G.edges[e]["tier"] == "nvlink",
            rank[e[0]],
            rank[e[1]],
            position[e[0]],
            G.edges[e]["ports"][e[0]],
        ),
    )
    generated_links = [(h, s) for s in compact for h in _hosts_of(G, s)]
    pairs = generated_links + edges
    default_order = default_port_order(pairs, rank)
    default_port = {}
    for name, indexes in default_order.items():
        first = FIRST_PORT[G.nodes[name]["kind"]]
        for port, i in enumerate(indexes, start=first):
            default_port[i, name] = port
    for i, (u, v) in enumerate(pairs):
        e = G.edges[u, v]
        if i < len(generated_links):
            continue
        link: Dict[str, Any] = {"a": u, "b": v}
        if e["rate_bps"] != default_rate:
            link["rate"] = format_rate(e["rate_bps"])
        if e["delay_s"] != default_delay:
            link["delay"] = e["delay_s"]
        if (e["ports"][u], e["ports"][v]) != (default_port[i, u], default_port[i, v]):
            link["ports"] = [e["ports"][u], e["ports"][v]]
        out_links.append(link)
    doc: Dict[str, Any] = {"name": G.graph["name"], "kind": G.graph["kind"]}
    if G.graph["params"]:
        doc["params"] = G.graph["params"]
    if G.graph["time_scale"] != 1.0:
        doc["time_scale"] = G.graph["time_scale"]
    doc["defaults"] = {"rate": format_rate(default_rate)}
    if default_delay:
        doc["defaults"]["delay"] = default_delay
    doc["nodes"] = out_nodes
    doc["links"] = out_links
    return _render(doc, schema_ref)


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

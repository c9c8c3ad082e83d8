"""What a scenario picks from its fabric's graph, and what a graph lacks for its model.

Owns the choices that scenarios make from the graph alone, so that they run
on a fabric from a topology file (emu/topofile.py) as on the one their shape
parameters build: hosts grouped by their switch, a host's link rate, the
uplink that can fail without cutting the fabric, the top-tier switch that
can crash without cutting a host off, the links every path of some flows
must share, the first hops ECMP spreads over between two switches, the top
tier, a pair of hosts ECMP can spread between, and the one-line reasons a graph does not fit a model (links
slower than the hosts', links at different rates, flows that a hash may put
on one link). Pure functions of a graph with emu.fabric's attribute
contract: builds and runs nothing. Called by the modules in scenarios/; does
not own the topology file (emu/topofile.py) nor the builders (emu/fabric/).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set, Tuple

import networkx as nx

from emu import fabric

Edge = Tuple[str, str]


def rate_text(rate_bps: float) -> str:
    """A rate as a topology file writes it: 20M, 2.5G, 500K."""
    for suffix, unit in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if rate_bps >= unit:
            return f"{rate_bps / unit:g}{suffix}"
    return f"{rate_bps:g}"


def host_rate_bps(graph: nx.Graph, host: str) -> int:
    """The rate of `host`'s link to its switch."""
    return graph.edges[host, graph.nodes[host]["leaf"]]["rate_bps"]


def hosts_by_leaf(graph: nx.Graph) -> Dict[str, List[str]]:
    """{switch: its hosts}, switches in the order of their first host, hosts in host order."""
    out: Dict[str, List[str]] = {}
    for h in fabric.hosts(graph):
        out.setdefault(graph.nodes[h]["leaf"], []).append(h)
    return out


def uplinks(graph: nx.Graph, switch: str) -> List[str]:
    """`switch`'s neighbours of a higher tier, by `switch`'s port number towards them."""
    tier = graph.nodes[switch]["tier"]
    up = [
        n
        for n in graph.neighbors(switch)
        if graph.nodes[n]["kind"] == "switch" and graph.nodes[n]["tier"] > tier
    ]
    return sorted(up, key=lambda n: graph.edges[switch, n]["ports"][switch])


def spare_uplink(graph: nx.Graph) -> Optional[Edge]:
    """The first (switch, uplink) whose loss leaves the fabric connected, or None.

    Switches in the order of their first host, uplinks by port: on a leaf/spine
    built by emu.fabric that is leaf1 - spine1, on a fat tree e1 - a1.
    """
    bridges = {frozenset(e) for e in nx.bridges(graph)}
    for leaf in hosts_by_leaf(graph):
        for up in uplinks(graph, leaf):
            if frozenset((leaf, up)) not in bridges:
                return leaf, up
    return None


def spare_top_switch(graph: nx.Graph) -> Optional[str]:
    """The first switch of the top tier whose crash leaves every host reaching every other.

    A switch with hosts of its own never qualifies (its hosts would be cut off).
    """
    switches = fabric.switches(graph)
    top = max(graph.nodes[s]["tier"] for s in switches)
    hosts = set(fabric.hosts(graph))
    for sw in (s for s in switches if graph.nodes[s]["tier"] == top):
        if any(n in hosts for n in graph.neighbors(sw)):
            continue
        rest = fabric.network(graph).subgraph(n for n in graph.nodes if n != sw)
        if nx.is_connected(rest):
            return sw
    return None


def links_slower_than_hosts(graph: nx.Graph) -> List[Tuple[str, str, int]]:
    """Switch-to-switch links slower than the slowest host link: (u, v, rate_bps)."""
    slowest = min(host_rate_bps(graph, h) for h in fabric.hosts(graph))
    return [
        (u, v, graph.edges[u, v]["rate_bps"])
        for u, v in fabric.switch_links(graph)
        if graph.edges[u, v]["rate_bps"] < slowest
    ]


def mixed_rates(graph: nx.Graph) -> Optional[str]:
    """None if every link runs at one rate; else a phrase naming a link that differs."""
    rates: Dict[int, List[Edge]] = {}
    for u, v, d in graph.edges(data=True):
        rates.setdefault(d["rate_bps"], []).append((u, v))
    if len(rates) == 1:
        return None
    common = max(rates, key=lambda r: len(rates[r]))
    odd = next(r for r in rates if r != common)
    u, v = rates[odd][0]
    return f"{u}-{v} runs at {rate_text(odd)}, most links at {rate_text(common)}"


def shared_links(graph: nx.Graph, flows: Iterable[Edge]) -> Set[Edge]:
    """The directed links that every shortest path of every flow crosses."""
    common: Optional[Set[Edge]] = None
    for s, d in flows:
        for path in nx.all_shortest_paths(fabric.network(graph), s, d):
            hops = set(zip(path, path[1:]))
            common = hops if common is None else common & hops
    return common or set()


def may_collide(graph: nx.Graph, flows: List[Edge]) -> Optional[Tuple[Edge, Edge, Edge]]:
    """Two flows an ECMP hash may put on one directed switch-to-switch link, or None.

    Returns (flow, other flow, link) for the first such pair: each flow may
    take any of its shortest paths.
    """
    users: Dict[Edge, Edge] = {}
    for flow in flows:
        mine: Set[Edge] = set()
        for path in nx.all_shortest_paths(fabric.network(graph), *flow):
            mine |= {
                (u, v)
                for u, v in zip(path, path[1:])
                if graph.nodes[u]["kind"] == graph.nodes[v]["kind"] == "switch"
            }
        for link in sorted(mine):
            if link in users and users[link] != flow:
                return users[link], flow, link
            users[link] = flow
    return None


def collective_misfit(graph: nx.Graph, ring: bool) -> Optional[str]:
    """Why the all-reduce time model (emu/traffic/model.py) does not hold on `graph`, or None.

    The model puts every rank's bytes on its own host link at the slowest host
    rate: no switch link may be slower, and (for the ring, whose ranks are the
    hosts in order) no two ring neighbours' flows may be hashed onto one link.
    """
    slow = links_slower_than_hosts(graph)
    if slow:
        u, v, rate = slow[0]
        hosts_bps = min(host_rate_bps(graph, h) for h in fabric.hosts(graph))
        return (
            f"the switch link {u}-{v} runs at {rate_text(rate)}, below the hosts' "
            f"{rate_text(hosts_bps)}; the model needs every switch link at least as fast"
        )
    if ring:
        hosts = fabric.hosts(graph)
        clash = may_collide(graph, list(zip(hosts, hosts[1:] + hosts[:1])))
        if clash:
            (a, b), (c, d), (u, v) = clash
            return (
                f"the ring's {a}->{b} and {c}->{d} may hash onto {u}->{v}; the model needs "
                "each switch's hosts next to each other in host order, one ring flow per link"
            )
    return None


def first_hops(graph: nx.Graph, a: str, b: str) -> List[str]:
    """The neighbours of switch `a` on a shortest path to switch `b` (hop count, as routing)."""
    switch_graph = graph.subgraph(fabric.switches(graph))
    dist = nx.single_source_shortest_path_length(switch_graph, b)
    if a not in dist:
        return []
    return [n for n in switch_graph.neighbors(a) if dist.get(n) == dist[a] - 1]


def top_tier(graph: nx.Graph) -> List[str]:
    """The switches of the highest tier; [] in a flat fabric (torus, dragonfly: all tier 0).

    In a flat fabric every switch is "top", so the top tier says nothing there.
    """
    switches = fabric.switches(graph)
    tier = max(graph.nodes[n]["tier"] for n in switches)
    return [n for n in switches if graph.nodes[n]["tier"] == tier] if tier else []


def spread_pair(graph: nx.Graph) -> Edge:
    """The first host and a far host whose switches ECMP can reach by two first hops.

    Far: on another switch, in another pod where there are pods; among those,
    the last one (on a leaf/spine, the last host of the last leaf) whose
    switch the first host's switch reaches by shortest paths through more
    than one neighbour. A fabric with no such pair gets the last far host,
    and a measurement of spreading then shows what it saw.
    """
    hosts = fabric.hosts(graph)
    src = hosts[0]
    far = [h for h in hosts if graph.nodes[h]["leaf"] != graph.nodes[src]["leaf"]]
    pods = [h for h in far if graph.nodes[h].get("pod", 0) != graph.nodes[src].get("pod", 0)]
    candidates = pods[::-1] + [h for h in far[::-1] if h not in pods]
    for dst in candidates:
        if len(first_hops(graph, graph.nodes[src]["leaf"], graph.nodes[dst]["leaf"])) > 1:
            return src, dst
    return src, (pods or far)[-1]

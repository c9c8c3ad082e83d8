"""Where each node of a fabric runs when the fabric is spread over several servers.

Owns the partition of a fabric's graph over servers (issue 32): pure, a
graph and server names in, a `Placement` out; no SSH, no Mininet, no root.

What it keeps together is a *unit*: a fat-tree pod (its edge and aggregation
switches and their hosts), a dragonfly group, a rail (its leaf and its GPUs),
or else a leaf with its hosts; spines and cores are units of one. Every link
between two servers becomes a tunnel that carries its traffic over the
servers' own network, so the partition minimises the bandwidth that crosses
(each link weighted by its rate, an NVLink by its own) while each server gets
as many nodes as the others (a node's share of the CPU is what the placement
balances; a pod of 24 nodes weighs 24). It is a Kernighan-Lin bisection
(networkx) of the whole graph, in which the links inside a unit weigh more
than all the links between units together, so that it cuts between units;
where an even split of the nodes had to cut through a unit, the unit then
joins the server that holds most of it: units are never split, and servers
differ by at most a unit's size. More than two servers: the part with the
most servers is bisected again, in the ratio of the servers each half gets.

Mininet's cluster edition (`mininet.examples.cluster.MininetCluster`) takes
a placement as a `Placer` class; `placer_class(placement)` gives one. Its own
placers bin switches in the topology's order and cut about three times as
many links on a fat-tree (tests/unit/test_placement.py measures both).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from networkx.algorithms.community import kernighan_lin_bisection

from emu.fabric import natural_key


class PlacementError(ValueError):
    """Servers a fabric cannot be placed on; the message names the problem."""


@dataclass(frozen=True)
class Placement:
    """Which server each node of a fabric runs on, and what that costs in tunnels."""

    servers: tuple[str, ...]
    server_of: dict[str, str]  # node -> server
    unit_of: dict[str, str]  # node -> the unit it was kept with
    cut: tuple[tuple[str, str], ...]  # links whose ends run on different servers
    cut_bps: float  # their rates summed: what the tunnels must carry at line rate

    def nodes_on(self, server: str) -> list[str]:
        return sorted(n for n, s in self.server_of.items() if s == server)


def check_servers(servers) -> tuple[str, ...]:
    """`servers` as a tuple of distinct non-empty names, or PlacementError naming what is wrong."""
    names = tuple(servers)
    if not names:
        raise PlacementError("servers: at least one server is needed")
    for name in names:
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise PlacementError(f"servers: {name!r} is not a server name")
    seen = set()
    for name in names:
        if name in seen:
            raise PlacementError(f"servers: {name!r} is named twice")
        seen.add(name)
    return names


def units(graph: nx.Graph, by_node: bool = False) -> dict[str, str]:
    """Node -> the unit it is kept with (see the module's docstring).

    `by_node`: on a rail-optimized fabric, keep each GPU server's NVSwitch with
    its GPUs instead of each rail leaf with its GPUs (`place` tries both).
    """
    out: dict[str, str] = {}

    def own(n: str) -> str | None:
        d = graph.nodes[n]
        if by_node and "node" in d:
            return f"node{d['node']}"
        for key in ("pod", "group", "rail"):
            if key in d:
                return f"{key}{d[key]}"
        return None

    for n, d in graph.nodes(data=True):
        unit = own(n)
        if unit is None and d.get("kind") == "host" and d.get("leaf") in graph:
            unit = own(d["leaf"]) or d["leaf"]
        out[n] = unit or n
    return out


def place(graph: nx.Graph, servers) -> Placement:
    """Spread `graph`'s nodes over `servers` (their names, in order).

    Deterministic for a graph and a server list. Raises PlacementError for a
    bad server list, or more servers than the fabric has nodes or units.
    """
    names = check_servers(servers)
    if len(names) > graph.number_of_nodes():
        raise PlacementError(
            f"servers: {len(names)} servers for {graph.number_of_nodes()} nodes: "
            "each server needs at least one"
        )
    candidates = [units(graph)]
    if any("node" in d for _, d in graph.nodes(data=True)):
        candidates.append(units(graph, by_node=True))
    best, error = None, None
    for unit_of in candidates:
        try:
            placed = _partition(graph, names, unit_of)
        except PlacementError as exc:  # too few units this way; the other may do
            error = error or exc
            continue
        if best is None or (placed.cut_bps, len(placed.cut)) < (best.cut_bps, len(best.cut)):
            best = placed
    if best is None:
        raise error
    return best


def _partition(graph: nx.Graph, names: tuple[str, ...], unit_of: dict) -> Placement:
    weighted = _weighted(graph, unit_of)
    parts: list[tuple[tuple[str, ...], list[str]]] = [(names, _ordered(graph, unit_of))]
    while any(len(servers) > 1 for servers, _ in parts):
        parts.sort(key=lambda p: -len(p[0]))
        servers, nodes = parts.pop(0)
        half = len(servers) // 2
        first, second = servers[:half], servers[half:]
        # The first part's share of the nodes, in proportion to its servers; the
        # initial split keeps units whole (nodes are in unit order), KL refines it.
        size = round(len(nodes) * len(first) / len(servers))
        start = set(nodes[:size])
        a, b = kernighan_lin_bisection(
            weighted.subgraph(nodes),
            partition=(start, set(nodes) - start),
            weight="weight",
        )
        # KL swaps pairs, so each side keeps its size, but which side networkx
        # returns first is its own affair: the first servers take the side of
        # `size` nodes, or, when both sides are that size, the one with the first node.
        if len(a) != size or (len(a) == len(b) and nodes[0] not in a):
            a, b = b, a
        parts += [(first, _in_order(nodes, a)), (second, _in_order(nodes, b))]
    server_of = {n: servers[0] for servers, nodes in parts for n in nodes}
    # The balance may have split a unit (five dragonfly groups over two servers):
    # its nodes join the server that holds most of them, and a host link never
    # becomes a tunnel. The servers then differ by at most a unit's size.
    members: dict[str, list[str]] = {}
    for n in graph:
        members.setdefault(unit_of[n], []).append(n)
    rank = {name: i for i, name in enumerate(names)}
    if len(names) > len(members):
        raise PlacementError(
            f"servers: {len(names)} servers for {len(members)} "
            f"unit{'s' if len(members) > 1 else ''} of this fabric (pods, "
            "groups, rails, or leaves with their hosts, kept whole): each server needs one"
        )
    for nodes_of_unit in members.values():
        held = [server_of[n] for n in nodes_of_unit]
        home = min(set(held), key=lambda s: (-held.count(s), rank[s]))
        for n in nodes_of_unit:
            server_of[n] = home
    _fill_empty_servers(server_of, members, names)
    cut = tuple(sorted((u, v) for u, v in graph.edges() if server_of[u] != server_of[v]))
    return Placement(
        servers=names,
        server_of=server_of,
        unit_of=dict(unit_of),
        cut=cut,
        cut_bps=float(sum(graph.edges[u, v].get("rate_bps", 0.0) for u, v in cut)),
    )


def _fill_empty_servers(server_of: dict, members: dict, names: tuple[str, ...]) -> None:
    """A server that moving units whole left empty takes the smallest unit of the
    most loaded server that has more than one (there is one: units >= servers)."""
    for server in names:
        if server in server_of.values():
            continue
        units_on: dict[str, list[str]] = {}
        for unit, nodes in members.items():
            units_on.setdefault(server_of[nodes[0]], []).append(unit)
        donor = max(
            (s for s in names if len(units_on.get(s, [])) > 1),
            key=lambda s: (sum(len(members[u]) for u in units_on[s]), -names.index(s)),
        )
        smallest = min(units_on[donor], key=lambda u: (len(members[u]), natural_key(u)))
        for n in members[smallest]:
            server_of[n] = server


def _weighted(graph: nx.Graph, unit_of: dict) -> nx.Graph:
    """The graph with a weight per link: its rate between units, more than every
    such rate together inside a unit (so no cut through a unit is ever cheaper)."""
    slowest = min((d.get("rate_bps") or 1.0 for _, _, d in graph.edges(data=True)), default=1.0)
    between = {
        (u, v): (d.get("rate_bps") or slowest) / slowest
        for u, v, d in graph.edges(data=True)
        if unit_of[u] != unit_of[v]
    }
    inside = sum(between.values()) + 1.0
    weighted = nx.Graph()
    weighted.add_nodes_from(graph)
    for u, v in graph.edges():
        weighted.add_edge(u, v, weight=between.get((u, v), between.get((v, u), inside)))
    # Units whose nodes share no link (a rail's GPUs reach each other only through
    # their leaf, which is in the unit too) are held by their links to it; a unit
    # without any inner link (a lone spine) needs no weight.
    return weighted


def _ordered(graph: nx.Graph, unit_of: dict) -> list[str]:
    """Nodes grouped by unit, units in the order a walk of the unit graph meets them
    (neighbouring units start on the same side), nodes by name inside a unit."""
    quotient = nx.Graph()
    for n in graph:
        quotient.add_node(unit_of[n])
    for u, v in graph.edges():
        if unit_of[u] != unit_of[v]:
            quotient.add_edge(unit_of[u], unit_of[v])
    order: list[str] = []
    for start in sorted(quotient, key=natural_key):
        if start in order:
            continue
        order += [u for u in nx.bfs_tree(quotient, start, sort_neighbors=_sorted) if u not in order]
    members: dict[str, list[str]] = {}
    for n in sorted(graph, key=natural_key):
        members.setdefault(unit_of[n], []).append(n)
    return [n for unit in order for n in members[unit]]


def _in_order(nodes: list[str], chosen: set) -> list[str]:
    return [n for n in nodes if n in chosen]


def _sorted(nodes) -> list[str]:
    return sorted(nodes, key=natural_key)


def placer_class(placement: Placement):
    """A `Placer` for Mininet's cluster edition that places as `placement` does.

    `MininetCluster(placement=placer_class(p), servers=list(p.servers), ...)`
    builds it with the cluster's servers and the topology's nodes; a node the
    placement does not know, or servers other than its own, is an error there
    rather than a node on the wrong server.
    """
    from mininet.examples.cluster import Placer

    class EmuPlacer(Placer):
        """Places each node on the server emu.placement chose for it."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.servers and tuple(self.servers) != placement.servers:
                raise PlacementError(
                    f"servers: the cluster has {list(self.servers)}, the placement "
                    f"{list(placement.servers)}"
                )

        def place(self, node):
            try:
                return placement.server_of[node]
            except KeyError:
                raise PlacementError(f"{node!r}: not a node of the placed fabric") from None

    return EmuPlacer

"""A dragonfly's minimal routing as the literature means it: one global hop (`--next-hops`).

Kim, Dally, Scott, Abts ("Technology-Driven, Highly-Scalable Dragonfly
Topology", ISCA 2008, 4.1) route minimally in at most three steps: a local
link to the router of the source group that has a global link to the
destination group, that global link, a local link to the destination
router. Routing's own shortest paths in hops are not that: in the
builder's consecutive arrangement (emu/fabric/gpu.py) a path through a
third group, two global hops, is often as short as local-global-local, so
shortest-path ECMP spreads a group-to-group pattern over other groups'
links, Valiant-like, and no global link is the adversarial pattern's
bottleneck. This policy keeps exactly the shortest paths that use one
global link: towards a router of group D, a router may take its local
links and the global links *into* D, nothing else (the shortest paths of
that restricted graph).

`minimal_next_hops(groups)` builds the policy for routers whose groups are
known (``controllers.launch --dragonfly-routing``; the routing app uses it
then); `next_hops` is the same with each router's group read from the
dpid the dragonfly builder gives (``0x1GGRR``), for ``--next-hops FILE``.
A switch without a group (not a dragonfly router) is routed by plain
shortest paths.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional

import networkx as nx

NextHops = Callable[[nx.DiGraph, int, int], Iterable[int]]


def builder_group(dpid: int) -> Optional[int]:
    """The group of a router the dragonfly builder named (dpid ``0x1GGRR``), else None.

    Examples:
        >>> builder_group(0x10302), builder_group(0x2A)
        (3, None)
    """
    return (dpid >> 8) & 0xFF if dpid >> 16 == 1 else None


def minimal_next_hops(groups: Optional[Mapping[int, int]] = None) -> NextHops:
    """The policy for these routers' groups (dpid -> group; None: `builder_group`).

    Examples:
        >>> topo = nx.DiGraph()
        >>> for s, sp, d in [(0x10101, 2, 0x10102), (0x10102, 2, 0x10101),
        ...                  (0x10101, 3, 0x10301), (0x10301, 3, 0x10101),
        ...                  (0x10102, 3, 0x10202), (0x10202, 3, 0x10102),
        ...                  (0x10301, 4, 0x10201), (0x10201, 4, 0x10301),
        ...                  (0x10201, 2, 0x10202), (0x10202, 2, 0x10201)]:
        ...     topo.add_edge(s, d, port=sp)
        >>> policy = minimal_next_hops()
        >>> sorted(policy(topo, 0x10101, 0x10201))  # not through group 3: local, global
        [2]
    """
    state: dict = {"topology": None, "dist": {}}

    def group(dpid: int) -> Optional[int]:
        return groups.get(dpid) if groups is not None else builder_group(dpid)

    def allowed(u: int, v: int, target: Optional[int]) -> bool:
        """Whether a path towards group `target` may take the link u -> v."""
        gu, gv = group(u), group(v)
        return target is None or gu is None or gu == gv or (gv == target and gu != target)

    def dist_to(topology: nx.DiGraph, dst: int) -> Mapping[int, int]:
        if state["topology"] is not topology:
            state["topology"], state["dist"] = topology, {}
        if dst not in state["dist"]:
            target = group(dst)
            rev = nx.DiGraph()
            rev.add_nodes_from(topology)
            rev.add_edges_from((v, u) for u, v in topology.edges() if allowed(u, v, target))
            state["dist"][dst] = nx.single_source_shortest_path_length(rev, dst)
        return state["dist"][dst]

    def next_hops(topology: nx.DiGraph, switch: int, destination: int) -> set[int]:
        dist = dist_to(topology, destination)
        if switch == destination or switch not in dist:
            return set()
        target = group(destination)
        return {
            topology.edges[switch, n]["port"]
            for n in topology.successors(switch)
            if dist.get(n, -1) == dist[switch] - 1 and allowed(switch, n, target)
        }

    return next_hops


#: The policy with groups from the builder's dpids (``--next-hops`` this file).
next_hops = minimal_next_hops()

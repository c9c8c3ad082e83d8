"""A next-hop policy that sends every packet the same way around a ring (`--next-hops FILE`).

Each switch forwards every destination that is not its own to its ring
neighbour with the next larger dpid (the largest wraps to the smallest):
one rotational direction, however far the other way round would be. On a
ring of four switches each flow to the opposite switch crosses two
inter-switch hops clockwise, the routes of Hu et al., HotNets 2016, Fig. 1,
that build a cyclic buffer dependency (scenarios/pfc_deadlock.py).
"""

from __future__ import annotations

import networkx as nx


def clockwise(topology: nx.DiGraph, switch: int) -> int:
    """The ring neighbour after `switch` in cyclic dpid order.

    Raises:
        ValueError: `switch` does not have exactly two neighbours (not a ring).
    """
    neighbours = sorted(topology.successors(switch))
    if len(neighbours) != 2:
        raise ValueError(f"switch {switch} has {len(neighbours)} neighbours: not on a ring")
    order = sorted(topology.nodes)
    after = order[order.index(switch) + 1 :] + order[: order.index(switch)]
    return next(n for n in after if n in neighbours)


def next_hops(topology: nx.DiGraph, switch: int, destination: int) -> set[int]:
    """The port of `switch` towards its clockwise neighbour (routing's NextHops contract)."""
    if switch == destination:
        return set()
    return {topology.edges[switch, clockwise(topology, switch)]["port"]}

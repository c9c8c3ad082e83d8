"""ECMP policy, solved: every neighbour one hop closer to the destination.

See labs/ecmp_app/ecmp.py for the contract.
"""

import networkx as nx


def next_hops(topology: nx.DiGraph, switch: int, destination: int) -> set[int]:
    """Every port of `switch` towards a neighbour on some shortest path to `destination`."""
    # Distances *to* destination: shortest paths from it on the reversed graph.
    distance = nx.single_source_shortest_path_length(topology.reverse(copy=False), destination)
    if switch not in distance:
        return set()  # unreachable: no route rather than a wrong one
    return {
        data["port"]
        for _, neighbour, data in topology.out_edges(switch, data=True)
        if distance.get(neighbour) == distance[switch] - 1
    }

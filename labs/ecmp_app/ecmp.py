"""Your ECMP policy: where each switch sends traffic for the hosts behind another switch.

emu's routing controller (controllers/routing.py) discovers the fabric with
LLDP and calls next_hops() for every switch and every destination switch;
it installs a SELECT group over the ports you return, and the switch hashes
each flow's 5-tuple onto one of them.

Test it offline with:   emu lab test ecmp_app        (no sudo, no fabric, a second)
Grade your work with:   sudo emu lab check ecmp_app  (a leaf/spine and a fat-tree)
Try it in a CLI with:   sudo emu lab start ecmp_app
"""

import networkx as nx


def next_hops(topology: nx.DiGraph, switch: int, destination: int) -> set[int]:
    """The output ports of `switch` for packets to hosts attached to `destination`.

    Args:
        topology: the switches (by datapath id) and the links between them, one
            directed edge per direction; edge u -> v has attribute "port", u's
            port number towards v.
        switch: the switch that asks (never equal to `destination`).
        destination: the switch the destination host is attached to.

    Returns:
        A set of port numbers of `switch`, each on a link towards another switch.
    """
    # TODO: this follows ONE shortest path, so every flow between two leaves takes
    # the same spine. Equal-cost multi-path routing uses EVERY neighbour that lies on
    # a shortest path: each neighbour whose distance to `destination` is one less
    # than this switch's. Hint: nx.single_source_shortest_path_length on the
    # reversed graph gives every switch's distance to `destination` at once.
    path = nx.shortest_path(topology, switch, destination)
    return {topology.edges[path[0], path[1]]["port"]}

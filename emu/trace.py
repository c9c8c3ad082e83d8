"""Where a packet goes: the walk from switch to switch that `emu path` and
`Fabric.trace_path` make.

Owns turning a 5-tuple into a frame and following it: each switch is asked
what its pipeline would do with the frame as it arrives (`Pipeline.trace`,
the question `ovs-appctl ofproto/trace` answers, nothing changes in the
switch), and the walk follows its one output port to the peer the topology
graph names, with the frame as the switch would rewrite it. The switches are
reached through `ask`, so this module needs no fabric object: the CLI asks
over the run's management sockets, the Fabric through `switch_call`.
"""

from __future__ import annotations

from typing import Any, Callable

import networkx as nx

from emu import fabric as fabric_mod

# ask(switch, in_port, frame_hex) -> Pipeline.trace's answer
Ask = Callable[[str, int, str], Any]


class TraceError(RuntimeError):
    """The packet does not reach its destination on one path; the message says where."""


def frame_for(graph: nx.Graph, src: str, dst: str, proto: str, sport: int, dport: int) -> bytes:
    """The Ethernet frame of a `proto` packet src -> dst with these ports (hosts' own MAC/IP)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether

    for end in (src, dst):
        if end not in graph or graph.nodes[end].get("kind") != "host":
            hosts = ", ".join(fabric_mod.hosts(graph)[:4])
            raise TraceError(f"{end!r}: not a host of this fabric (hosts: {hosts}, ...)")
    if proto not in ("tcp", "udp"):
        raise TraceError(f"proto={proto!r}: must be tcp or udp")
    for name, port in (("sport", sport), ("dport", dport)):
        if not isinstance(port, int) or not 0 < port < 65536:
            raise TraceError(f"{name}={port!r}: must be a port number 1..65535")
    l4 = (TCP if proto == "tcp" else UDP)(sport=sport, dport=dport)
    return bytes(
        Ether(src=graph.nodes[src]["mac"], dst=graph.nodes[dst]["mac"])
        / IP(src=graph.nodes[src]["ip"], dst=graph.nodes[dst]["ip"])
        / l4
    )


def trace_path(
    graph: nx.Graph,
    ask: Ask,
    src: str,
    dst: str,
    proto: str = "tcp",
    sport: int = 49152,
    dport: int = 5201,
) -> list[str]:
    """The nodes from `src` to `dst` that a packet with this 5-tuple crosses now.

    Raises:
        TraceError: bad endpoints or ports, or a switch that would drop,
            flood, send to the controller, or choose per packet (flowlet
            groups, adaptive routing) instead of one port; or a loop.
    """
    frame = frame_for(graph, src, dst, proto, sport, dport)
    # From the host's NIC (port 0): a GPU's NVLink port (1) is no way into the network.
    _intf, node, in_port, _rate = fabric_mod.port_map(graph, src)[0]
    path = [src]
    while graph.nodes[node].get("kind") == "switch":
        if node in path:
            raise TraceError(f"{src}->{dst}: loops at {node} ({' '.join(path)})")
        path.append(node)
        res = ask(node, in_port, frame.hex())
        if res["flowlet"]:
            raise TraceError(
                f"{src}->{dst}: {node} picks among ports {res['flowlet']} per flowlet, not per flow"
            )
        for choice in res.get("adaptive", ()):
            raise TraceError(
                f"{src}->{dst}: {node} picks among ports {choice['ports']} per packet (adaptive "
                f"routing for priority {choice['prio']}; now port {choice['takes']}), not per flow"
            )
        if len(res["outputs"]) != 1:
            why = res["dropped"] or (f"{res['controller']} packet-in" if res["controller"] else "")
            raise TraceError(
                f"{src}->{dst}: {node} (in port {in_port}) sends it to ports "
                f"{[o[0] for o in res['outputs']]} {why}".rstrip()
            )
        out_port, _queue, frame_hex = res["outputs"][0]
        frame = bytes.fromhex(frame_hex)
        links = fabric_mod.port_map(graph, node)
        if out_port not in links:
            raise TraceError(f"{src}->{dst}: {node} sends it to port {out_port}, which has no link")
        _intf, node, in_port, _rate = links[out_port]
    path.append(node)
    if node != dst:
        raise TraceError(f"{src}->{dst}: delivered to {node} ({' '.join(path)})")
    return path

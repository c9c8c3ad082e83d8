"""The retransmission timeout a fabric calls for: the lossless buffer bound.

Owns the model that turns a fabric (its graph: switches, links, rates,
delays) and its switches' QoS (buffer, PFC, credit) into the longest round
trip a NIC's packet and its ACK can take through that fabric without being
lost, in emulated seconds. emu/traffic/rdma.py computes it for each NIC it
starts and hands it to the agent (`--path-rtt-bound-s`); the NIC model
(emu/host/rnic.py, `NicConfig.path_rtt_bound_s`) never lets its
retransmission timeout fall below it. Pure: no I/O, nothing is started.

Why (issue 29): a NIC infers a loss from silence, so its timeout must
outlast the longest time a packet that is not lost can take. A real NIC's
is set for its fabric: the IB local ACK timeout of 67 ms (4.096 us x 2^14,
NCCL_IB_TIMEOUT=14) is a few tens of the time a 100 Gbit/s switch's tens of
MB take to drain. At emulated rates the same bytes take far longer to drain
(a MiB is 0.42 s at 20 Mbit/s), and a timeout below that resends what is
only queued: go-back-N then resends the whole window behind it into the
queue that caused the wait, and a ring whose hops share uplinks stops
(measured on fat_tree(k=4) at its defaults: 67 ms, 1,976 timeouts,
278,566 packets resent, no NAK, no drop, no end after 120 s).

The model (lossless buffer bound). In a lossless class no frame is dropped
for congestion, so how long a frame can wait at a switch is bounded by the
bytes that can be ahead of it in its egress queue, drained at that port's
rate. emu's switch (emu/switch/buffer.py, after the HPCC ns-3 switch) takes
lossless bytes from an ingress (port, priority) until they reach
alpha_lossless x free (free <= the buffer size B) and then PAUSEs it; what
was already on the wire goes into that port's headroom. An egress queue
holds frames from the switch's other ports only, so for each lossless
priority it holds at most

    sum over the other ports p of (alpha_lossless x B + headroom(p)),

and never more than B (the switch holds no more than its buffer). On a
credit link a (port, VL) holds at most its credit buffer (`vl_buffer_bytes`)
instead; with PFC off the queue tail-drops above alpha_lossy x B (a frame
beyond it is lost, not late). A frame's wait at a hop is then those bytes
plus itself over the egress rate, plus the link's propagation delay; a
path's, the sum over its switches; the round trip, the data's path and the
ACK's (which rides the data's priority back, emu/host/rnic.py). Routes are
minimal (controllers/routing.py: shortest paths, ECMP over them), so the
bound for a NIC is the largest over its destinations of the heaviest
shortest path, twice (each switch is weighed by its worst egress, so the
way back weighs the same). It bounds waiting behind full buffers, not a
PAUSE that never ends (a storm, a deadlock): those are what the timeout is
there to end.

Not covered: lossy or strict-priority traffic above the QP's priority (CNPs,
control frames: a few bytes) and non-minimal routes.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping

import networkx as nx

from emu import fabric as fabric_mod
from emu.config import MTU_FRAME_BYTES, BufferSpec, CreditSpec, PfcSpec


def egress_hold_bytes(
    buffer: BufferSpec,
    pfc: PfcSpec,
    credit: CreditSpec,
    other_ports: list[tuple[int, float]],
) -> int:
    """The most bytes of the lossless class one egress queue of a switch can hold.

    Args:
        buffer, pfc, credit: the switch's QoS (emu/config.py).
        other_ports: (rate_bps, delay_s) of each of the switch's ports other
            than the egress (the ports its frames can come from).

    Returns:
        Bytes (the module docstring's model), at most `buffer.size_bytes`.
    """
    if credit.enabled:
        per_port = [credit.vl_buffer_bytes * len(credit.priorities) for _ in other_ports]
        held = sum(per_port)
    elif pfc.enabled:
        alpha_share = buffer.alpha_lossless * buffer.size_bytes
        held = len(pfc.lossless_priorities) * sum(
            alpha_share + buffer.headroom(rate, delay) for rate, delay in other_ports
        )
    else:
        held = buffer.alpha_lossy * buffer.size_bytes
    return int(min(buffer.size_bytes, held))


def switch_wait_bound_s(
    graph: nx.Graph, switch: str, qos: Mapping, within: nx.Graph | None = None
) -> float:
    """The longest a frame can wait at `switch` and cross the link it leaves by, in seconds.

    The worst over the switch's egress ports (in `within`, `graph` by
    default) of (egress_hold_bytes + one full frame) x 8 / egress rate +
    the egress link's delay.

    Args:
        graph: the fabric (emu/fabric/).
        switch: a switch of `graph`.
        qos: the fabric's QoS as `emu.config.parse_qos` returns it.
        within: the part of the graph whose links count (the network, or an
            NVLink domain).
    """
    g = graph if within is None else within
    links = [
        (g.edges[switch, n]["rate_bps"], g.edges[switch, n].get("delay_s", 0.0)) for n in g[switch]
    ]
    worst = 0.0
    for i, (rate, delay) in enumerate(links):
        held = egress_hold_bytes(
            qos["buffer"], qos["pfc"], qos["credit"], links[:i] + links[i + 1 :]
        )
        worst = max(worst, (held + MTU_FRAME_BYTES) * 8 / rate + delay)
    return worst


def path_rtt_bound_s(graph: nx.Graph, host: str, qos: Mapping, port: str = "nic") -> float:
    """The lossless buffer bound on a round trip from `host`'s `port` (module docstring).

    Args:
        graph: the fabric (emu/fabric/).
        host: a host of `graph`.
        qos: the fabric's QoS as `emu.config.parse_qos` returns it.
        port: "nic" (paths through the network) or "nvlink" (through the
            host's NVSwitch).

    Returns:
        Emulated seconds: twice the heaviest shortest path from the host's
        switch to any switch a host hangs off, switches weighed by
        `switch_wait_bound_s`, plus the host link's delay both ways.

    Raises:
        emu.fabric.FabricSpecError: `host` has no such port.

    Examples:
        >>> from emu import fabric
        >>> from emu.config import parse_qos
        >>> g = fabric.single_switch(hosts=2, rate_bps=10_000_000)
        >>> round(path_rtt_bound_s(g, "h1", parse_qos({})), 3)
        0.251
    """
    where = fabric_mod.host_port(graph, host, port)
    first = where.switch
    if port == "nic":
        net = fabric_mod.network(graph)
    else:
        net = graph.subgraph([first, *graph[first]])
    sw_nodes = [n for n in net if net.nodes[n]["kind"] == "switch"]
    switches = net.subgraph(sw_nodes)
    weight = {s: switch_wait_bound_s(graph, s, qos, within=net) for s in sw_nodes}
    # The heaviest shortest path to every switch: BFS levels, then the heaviest
    # predecessor on the level before (every shortest path is one of these chains).
    level = {first: 0}
    order = [first]
    todo = deque([first])
    while todo:
        u = todo.popleft()
        for v in switches[u]:
            if v not in level:
                level[v] = level[u] + 1
                order.append(v)
                todo.append(v)
    heaviest = {first: weight[first]}
    for v in order[1:]:
        heaviest[v] = weight[v] + max(
            heaviest[u] for u in switches[v] if level.get(u) == level[v] - 1
        )
    with_hosts = [s for s in order if any(net.nodes[n]["kind"] == "host" for n in net[s])]
    one_way = max(heaviest[s] for s in with_hosts)
    host_delay = graph.edges[host, first].get("delay_s", 0.0)
    return 2 * (one_way + host_delay)

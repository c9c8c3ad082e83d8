"""A training step's time from an alpha-beta model of each collective, its inputs from the fabric graph.

Owns `op_model_s` (one operation's communication time), `comm_model_s` (every
operation's, for emu/schedule.py's `timeline`) and `port_of` (whether a
group's traffic crosses the network or stays inside one node's NVLink
domain). The model is Hockney's ("The communication challenge for MPP:
Intel Paragon and Meiko CS-2", Parallel Computing 1994): a message costs
alpha + n beta, and a collective the sum over its rounds (Thakur,
Rabenseifner, Gropp, "Optimization of collective communication operations in
MPICH", IJHPCA 2005):

- ring all-reduce over p ranks: 2(p-1) alpha + 2(p-1)/p S beta;
  reduce-scatter and all-gather: (p-1) alpha + (p-1)/p S beta;
- in-network aggregation (SHARP): 2 alpha + S beta (up the tree and down,
  streamed);
- all-to-all with every message posted at once (emu/traffic/rail.py
  `run_alltoall`): alpha + the busiest link's bytes x beta;
- a send: alpha + S beta.

Its inputs come from the graph, not from a measurement: beta is 8 / the
group's slowest port rate (the NICs', or the NVLink ports' when every member
is in one node), applied to the frames emu puts on the wire, headers and
ACKs included (emu/traffic/model.py's frame counts, whose per-step maximum
over the ring is the (p-1)/p S term in frames; a send's ACKs go the other
way and cost it nothing); alpha is the one-way propagation delay of the path
between two members (the links' `delay_s`) less one frame's time: an
emulated link hands a frame on at the start of its slot (emu/traffic/model.py,
"Not counted"), so a round is over when its last frame starts on the last
link, one frame before its bytes have all been serialized. At 16 KiB over
NVLink that frame is 12% of a ring step; at 128 KiB on a NIC, 1.5%.
What the model leaves out is what the report shows the packets adding:
links shared between concurrent collectives (ECMP collisions), queueing,
and the NICs' own processing. Pure: numbers and graphs in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx

from emu import fabric as fabric_mod
from emu.host.rnic import DEFAULT_MTU_PAYLOAD
from emu.models.collective import alltoall_link_s
from emu.schedule import Op, Schedule
from emu.traffic import model


def port_of(graph: nx.Graph, hosts: Sequence[str]) -> str:
    """ "nvlink" when every host is a GPU of one node (its NVSwitch joins them), else "nic"."""
    if graph.graph.get("kind") != "rail_optimized":
        return "nic"
    for members in fabric_mod.nvlink_domains(graph).values():
        if set(hosts) <= set(members):
            return "nvlink"
    return "nic"


def _rate_bps(graph: nx.Graph, hosts: Sequence[str], port: str) -> float:
    return float(min(fabric_mod.host_port(graph, h, port).rate_bps for h in hosts))


def path_delay_s(graph: nx.Graph, a: str, b: str, port: str) -> float:
    """One-way propagation delay between hosts `a` and `b` through `port` (the links' delay_s)."""
    if port == "nvlink":
        hops = [(a, fabric_mod.host_port(graph, a, port).switch)]
        hops.append((fabric_mod.host_port(graph, b, port).switch, b))
    else:
        path = nx.shortest_path(fabric_mod.network(graph), a, b)
        hops = list(zip(path, path[1:]))
    return sum(float(graph.edges[u, v].get("delay_s", 0.0)) for u, v in hops)


def op_port(op: Op, members: Sequence[str], graph: nx.Graph) -> str:
    """Which port `op` runs on: in-network aggregation on the NICs (the network's switches
    aggregate), anything else as `port_of` says."""
    return "nic" if op.algo == "sharp" else port_of(graph, members)


def op_model_s(op: Op, hosts: Mapping[int, str], graph: nx.Graph) -> float:
    """`op`'s communication time in the alpha-beta model (module docstring); 0 for a compute.

    `hosts`: each rank's GPU (emu/job.py `place`). Never below 0: a message of
    less than a frame is its one frame, whose start ends the round.
    """
    if not op.communicates:
        return 0.0
    members = [hosts[r] for r in op.group]
    port = op_port(op, members, graph)
    rate = _rate_bps(graph, members, port)
    p = len(members)
    ring = list(zip(members, members[1:] + members[:1]))
    delay = max(path_delay_s(graph, a, b, port) for a, b in ring)
    if op.kind == "send":
        _, nbytes, _ = model.roce_message_frames(op.bytes)
        return max(0.0, delay - _last_frame_s(op.bytes, rate) + nbytes * 8 / rate)
    if op.kind == "alltoall":
        return _alltoall_s(op, members, graph)
    if op.algo == "sharp":
        alpha = delay - _last_frame_s(op.bytes, rate)
        return max(0.0, 2 * alpha + model.sharp_allreduce(op.bytes, p, rate).time_s)
    alpha = delay - _last_frame_s(op.bytes // p, rate)  # a ring step moves a chunk, S/p
    ring_s = model.ring_allreduce(op.bytes, p, rate).time_s
    if op.kind == "allreduce":
        return max(0.0, 2 * (p - 1) * alpha + ring_s)
    # A reduce-scatter or all-gather: half the ring's rounds.
    return max(0.0, (p - 1) * alpha + ring_s / 2)


def _last_frame_s(message_bytes: int, rate_bps: float) -> float:
    """The time of a message's last frame at `rate_bps`: its last packet of up to 1024
    bytes of data behind 58 of headers (a RoCEv2 SEND's or an aggregation frame's,
    emu/traffic/model.py); a round ends as that frame starts on the last link."""
    tail = message_bytes % DEFAULT_MTU_PAYLOAD or min(message_bytes, DEFAULT_MTU_PAYLOAD)
    return (tail + model.ROCE_SEND_OVERHEAD_BYTES) * 8 / rate_bps


def _alltoall_s(op: Op, members: list[str], graph: nx.Graph) -> float:
    """Every member sends every other `op.bytes` at once: NVLink pairs and network pairs
    each at their own ports' rate, the busier of the two (each GPU has both)."""
    sends = {"nic": [], "nvlink": []}
    for a in members:
        for b in members:
            if a != b:
                sends[port_of(graph, [a, b])].append((a, b, op.bytes))
    worst = 0.0
    for port, pairs in sends.items():
        if pairs:
            hosts = sorted({h for s, d, _ in pairs for h in (s, d)})
            rate = _rate_bps(graph, hosts, port)
            delay = max(path_delay_s(graph, s, d, port) for s, d, _ in pairs)
            alpha = delay - _last_frame_s(op.bytes, rate)
            worst = max(worst, alpha + alltoall_link_s(pairs, rate))
    return max(0.0, worst)


def comm_model_s(schedule: Schedule, graph: nx.Graph) -> dict[str, float]:
    """Every communicating op's model time, for `emu.schedule.timeline`.

    Ops of the same kind, bytes and group cost the same: computed once.
    """
    cache: dict[tuple, float] = {}
    out = {}
    for op in schedule.ops:
        if op.communicates:
            key = (op.kind, op.bytes, op.group, op.algo)
            if key not in cache:
                cache[key] = op_model_s(op, schedule.hosts, graph)
            out[op.id] = cache[key]
    return out

"""Collectives across a fat-tree's pods on RDMA NICs, and what the routing did to them.

Owns what scenarios/adaptive_collectives.py runs and reads on one fabric:

- the workloads: `cross_pod_ring` (the hosts in an order where every ring
  hop, the last one too, goes to another pod: the all-reduce whose every
  byte crosses the core) and `alltoall_sends` (one message between every
  ordered pair of hosts, most of them across pods);
- `measure_ring` and `measure_alltoall`: one collective on the fabric's NIC
  agents (emu/traffic/collectives.py `run_allreduce`, emu/traffic/rail.py
  `run_alltoall`), its time and its share of the links' RoCE goodput, the
  paths the switches' hashes gave its queue pairs (`Fabric.trace_path`,
  when the switches hash per flow), what the NICs counted on its queue pairs
  (`QpCounts`: retransmissions, NAKs, the deepest reordering a receiver
  saw) and the switches' queues meanwhile (`queue_occupancy`: priority 3's
  depth on each tier's ports, from the switches' 100 ms telemetry);
- `incast_share`: m queue pairs into one receiver on one switch, the share
  of a link DCQCN keeps busy when m flows share it (the lower edge of the
  collision model's band, emu/models/ecmp.py `collision_share`).

Shares are of the RoCE goodput of a host link (`roce_goodput_bps`): a
ring's bus bandwidth over it (nccl-tests: busbw = algbw x 2(n-1)/n), an
all-to-all's host-link floor (every host sends and receives n-1 messages)
over its time. A caller divides them by the non-blocking switch's own.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx

from emu import fabric as fabric_mod
from emu.models.collective import message_frame_bytes
from emu.net import Fabric
from emu.proto import roce
from emu.traffic import model as traffic_model
from emu.traffic import rail
from emu.traffic.collectives import roce_goodput_bps, run_allreduce
from emu.traffic.rdma import RdmaHosts

ROCE_PRIORITY = 3  # DSCP 26, the lossless class the NICs send in (DESIGN.md)
TIERS = ("edge-agg", "agg-core", "core-agg", "agg-edge")  # uplinks, then downlinks


def cross_pod_ring(graph: nx.Graph) -> list[str]:
    """The hosts in ring order, each hop (the last one too) to the next pod.

    Host i of pod 0, host i of pod 1, ..., then host i+1 of pod 0: with k
    pods of k^2/4 hosts, every hop leaves its pod.

    Raises:
        ValueError: hosts without a pod, or pods of different sizes.
    """
    pods: dict[int, list[str]] = {}
    for h in fabric_mod.hosts(graph):
        pod = graph.nodes[h].get("pod")
        if pod is None:
            raise ValueError(f"cross_pod_ring: host {h} has no pod (not a fat tree)")
        pods.setdefault(pod, []).append(h)
    sizes = {len(members) for members in pods.values()}
    if len(pods) < 2 or len(sizes) != 1:
        raise ValueError(f"cross_pod_ring: needs 2 or more pods of equal size, got {pods}")
    order = [pods[p] for p in sorted(pods)]
    return [order[p][i] for i in range(sizes.pop()) for p in range(len(order))]


def alltoall_sends(hosts: Sequence[str], size_bytes: int) -> list[rail.Send]:
    """One message of `size_bytes` from every host to every other host."""
    return [(s, d, size_bytes) for s in hosts for d in hosts if s != d]


@dataclass(frozen=True)
class QpCounts:
    """What the NICs counted on a collective's queue pairs (emu/answers.py SendQp, RecvQp).

    `reorder_depth_max` is the deepest reordering any receiver saw on those
    QPs since they were connected (the NICs keep no per-run maximum): for a
    ring, whose QPs every ring on the same NICs reuses, the deepest of them all.
    """

    retransmitted: int = 0  # packets sent again (go-back-N or selective)
    naks: int = 0  # PSN-sequence NAKs the senders received
    timeouts: int = 0  # retransmission timer expiries
    out_of_order: int = 0  # packets that arrived ahead of the expected PSN
    reorder_depth_max: int = 0  # PSNs past the expected one, at most
    beyond_window: int = 0  # packets a reordering receiver dropped past its window
    cnps: int = 0  # CNPs the senders received (DCQCN)

    def minus(self, before: QpCounts) -> QpCounts:
        """The counts since `before`; the depth stays the maximum since connection."""
        return QpCounts(
            **{
                k: getattr(self, k) - getattr(before, k)
                for k in QpCounts.__dataclass_fields__
                if k != "reorder_depth_max"
            },
            reorder_depth_max=self.reorder_depth_max,
        )


def qp_counts(nics: RdmaHosts, qps: Sequence[tuple[str, str, int]]) -> QpCounts:
    """The counters of queue pairs (src, dst, qpn), their senders' and receivers' sides."""
    hosts = {h for s, d, _ in qps for h in (s, d)}
    stats = {h: nics.nic_stats(h) for h in hosts}
    total: dict[str, int] = dict.fromkeys(QpCounts.__dataclass_fields__, 0)
    for s, d, q in qps:
        send, recv = stats[s].send.get(q), stats[d].recv.get(q)
        if send is not None:
            total["retransmitted"] += send.retransmitted
            total["naks"] += send.naks
            total["timeouts"] += send.timeouts
            total["cnps"] += send.cnps
        if recv is not None:
            total["out_of_order"] += recv.out_of_order
            total["beyond_window"] += recv.beyond_window
            total["reorder_depth_max"] = max(total["reorder_depth_max"], recv.reorder_depth_max)
    return QpCounts(**total)


@dataclass(frozen=True)
class Occupancy:
    """Priority 3's queue on one tier's ports over a window, from 100 ms samples."""

    mean_bytes: float
    max_bytes: int
    busy_share: float  # samples with anything queued
    samples: int


def tier_ports(graph: nx.Graph) -> dict[str, list[tuple[str, int]]]:
    """(switch, port) of every switch-to-switch port by tier and direction (`TIERS`)."""
    role = {n: graph.nodes[n].get("role") for n in fabric_mod.switches(graph)}
    out: dict[str, list[tuple[str, int]]] = {t: [] for t in TIERS}
    for sw in role:
        for port, (_intf, peer, _pp, _rate) in fabric_mod.port_map(graph, sw).items():
            tier = f"{role[sw]}-{role.get(peer)}"
            if tier in out:
                out[tier].append((sw, port))
    return out


def queue_occupancy(fab: Fabric, since: float, until: float) -> dict[str, Occupancy]:
    """Priority 3's depth on each tier's ports between unix times `since` and `until`."""
    depths: dict[str, list[int]] = {t: [] for t in TIERS}
    by_switch: dict[str, dict[int, str]] = {}
    for tier, ports in tier_ports(fab.graph).items():
        for sw, port in ports:
            by_switch.setdefault(sw, {})[port] = tier
    for sw, ports in by_switch.items():
        for row in fab.telemetry(sw, since=since):
            if row.t <= until and row.port in ports:
                depths[ports[row.port]].append(row.depth_bytes[ROCE_PRIORITY])
    return {
        tier: Occupancy(
            statistics.mean(d) if d else 0.0,
            max(d, default=0),
            sum(1 for x in d if x) / len(d) if d else 0.0,
            len(d),
        )
        for tier, d in depths.items()
    }


@dataclass
class CollectiveRun:
    """One collective on one fabric: its time, its share of the goodput, what it met."""

    kind: str  # "ring" or "alltoall"
    time_s: float
    share: float  # of a host link's RoCE goodput (the module's docstring)
    counts: QpCounts
    queues: dict[str, Occupancy]
    paths: list[list[str]] = field(default_factory=list)  # traced, hashing switches only
    weights: list[float] = field(default_factory=list)  # each path's bytes
    wrong: int = 0  # elements a ring's ranks found wrong


def roce_sport(qpn: int) -> int:
    """The UDP source port a QP's packets carry (emu/traffic/rdma.py `connect`)."""
    return 49152 + qpn % 16384


def trace(fab: Fabric, qps: Sequence[tuple[str, str, int]]) -> list[list[str]]:
    """The nodes each QP's data crosses now, hash and all (only where switches hash per flow)."""
    return [fab.trace_path(s, d, "udp", roce_sport(q), roce.ROCEV2_UDP_PORT) for s, d, q in qps]


def measure_ring(
    fab: Fabric,
    nics: RdmaHosts,
    hosts: Sequence[str],
    size_bytes: int,
    seed: int,
    traced: bool,
    timeout_s: float | None = None,
) -> CollectiveRun:
    """A float32 ring all-reduce of `size_bytes` per rank over `hosts` in order."""
    qpns = nics.ring_qps(hosts)
    qps = [(h, hosts[(i + 1) % len(hosts)], q) for i, (h, q) in enumerate(zip(hosts, qpns))]
    paths = trace(fab, qps) if traced else []
    before = qp_counts(nics, qps)
    t0 = time.time()
    [res] = run_allreduce(nics, hosts, size_bytes, "float32", seed=seed, timeout_s=timeout_s)
    t1 = time.time()
    link_bps = min(_host_rate(fab.graph, h) for h in hosts)
    return CollectiveRun(
        kind="ring",
        time_s=res.time_s,
        share=res.busbw_bytes_per_s * 8 / roce_goodput_bps(link_bps),
        counts=qp_counts(nics, qps).minus(before),
        queues=queue_occupancy(fab, t0, t1),
        paths=paths,
        weights=[1.0] * len(paths),
        wrong=res.wrong,
    )


def measure_alltoall(
    fab: Fabric,
    nics: RdmaHosts,
    hosts: Sequence[str],
    size_bytes: int,
    traced: bool,
    timeout_s: float,
) -> CollectiveRun:
    """Every host sends `size_bytes` to every other, one SEND per pair on a new QP."""
    sends = alltoall_sends(hosts, size_bytes)
    connected = rail.connect_sends(nics, sends)
    qps = [(s, d, q) for (s, d, _b), (_s, q, _b2) in zip(sends, connected)]
    paths = trace(fab, qps) if traced else []
    t0 = time.time()
    took = rail.run_alltoall(nics, sends, timeout_s, qps=connected)
    t1 = time.time()
    link_bps = min(_host_rate(fab.graph, h) for h in hosts)
    floor_s = (len(hosts) - 1) * message_frame_bytes(size_bytes) * 8 / link_bps
    return CollectiveRun(
        kind="alltoall",
        time_s=took,
        share=floor_s / took,
        counts=qp_counts(nics, qps),
        queues=queue_occupancy(fab, t0, t1),
        paths=paths,
        weights=[1.0] * len(paths),
    )


def incast_share(nics: RdmaHosts, senders: Sequence[str], receiver: str, size_bytes: int) -> float:
    """m = len(senders) QPs each send `size_bytes` to `receiver` at once: the share of the
    receiver link's RoCE goodput they got together, first post to last completion."""
    sends = [(s, receiver, size_bytes) for s in senders]
    connected = rail.connect_sends(nics, sends)
    link_bps = _host_rate(nics.fab.graph, receiver)
    # The receiver's link carries the data in; the ACKs go out the other way.
    ideal_s = len(senders) * traffic_model.roce_message_frames(size_bytes)[1] * 8 / link_bps
    took = rail.run_alltoall(nics, sends, 20 * ideal_s + 10.0, qps=connected)
    return ideal_s / took


def _host_rate(graph: nx.Graph, host: str) -> int:
    """The rate of `host`'s NIC link."""
    return fabric_mod.host_port(graph, host).rate_bps

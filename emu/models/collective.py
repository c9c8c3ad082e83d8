"""The byte and collective-time models of collectives on a rail-optimized fabric.

Owns what scenarios/rail_optimized.py judges the spines' and NVSwitches' byte
counters and its parts' times against:

- `ring_hop_frame_bytes`, `ring_spine_model`: a ring all-reduce moves
  2(n-1)/n x S bytes through every hop (Patarasuk & Yuan, "Bandwidth optimal
  all-reduce algorithms for clusters of workstations", JPDC 2009; NCCL's
  ring does the same, nccl-tests doc/PERFORMANCE.md's busbw factor), cut
  into the messages emu/host/ring.py sends; a hop between NICs of two rails
  goes leaf -> spine -> leaf, so the spines carry exactly the hops that
  change rail (`rail_changes`; NVIDIA DGX SuperPOD's rail-optimized
  network: GPU r of every node on leaf r).
- `message_frame_bytes`, `sends_frame_bytes`, `alltoall_spine_model`,
  `alltoall_link_s`: an all-to-all as one SEND per pair, the pairs between
  rails that the spines carry, and its floor, the busiest NIC link's time;
  with PXN (NVIDIA, "Doubling all2all performance with NCCL 2.12", 2022: a
  GPU hands its data for GPU j of another node to GPU j of its own node
  over NVLink, which sends it on rail j) every pair stays on its rail and
  no switch link carries more than a NIC link.
- `hierarchical_nvswitch_bytes`, `nvlink_phases_s`: an intra-node ring
  reduce-scatter then all-gather over NVLink, (p-1)/p x S per phase through
  each GPU's link (Thakur, Rabenseifner, Gropp, "Optimization of collective
  communication operations in MPICH", IJHPCA 2005, the (p-1)/p n beta
  term): the bytes through the NVSwitches and the busiest GPU's link time.

Bytes are frames as emu puts them on the wire, counted by emu/traffic/model.py
`roce_message_frames`: 1024-byte packets with 58 bytes of Ethernet, IPv4, UDP,
BTH and ICRC (emu/proto/roce.py, IBA annex A17 RoCEv2), and the 62-byte ACK
(BTH + AETH) the receiver returns every 4th packet and on each message's last
(emu/host/rnic.py ACK_EVERY). Pure: numbers and graphs in, numbers out; no
fabric, no clock (tests/unit/test_models_collective.py). It does not run the
collectives (emu/traffic/collectives.py) nor predict a ring's time from its
links (emu/traffic/model.py `ring_allreduce`).
"""

from __future__ import annotations

import networkx as nx

from emu.host.ring import DEFAULT_SLICE_BYTES
from emu.traffic import model


def ring_hop_frame_bytes(
    size_bytes: int, nranks: int, itemsize: int = 4, slice_bytes: int = DEFAULT_SLICE_BYTES
) -> list[int]:
    """Frame bytes on each ring hop r -> r+1 for one ring all-reduce, both ways (data + ACKs).

    As emu/traffic/model.py `ring_allreduce` counts them: rank r's SENDs in
    its 2(n-1) steps, and the ACKs rank r+1 returns for them.

    Args:
        size_bytes: S, the all-reduce's bytes per rank (whole elements).
        nranks: ranks in the ring, >= 1.
        itemsize: bytes per element.
        slice_bytes: the largest message a chunk is cut into (emu/host/ring.py).

    Returns:
        Hop r's bytes (rank r to rank r+1 mod n), for r in 0..n-1.

    Raises:
        ValueError: from `model.ring_step_messages` (partial elements, no ranks).

    Examples:
        >>> b = ring_hop_frame_bytes(256 << 10, 4)
        >>> len(b), b[0] > 2 * 3 / 4 * (256 << 10)
        (4, True)
    """
    chunks = model.ring_step_messages(size_bytes, nranks, itemsize, slice_bytes)
    out = []
    for r in range(nranks):
        psn = total = 0
        for k in range(2 * (nranks - 1)):
            for m in chunks[(r - k) % nranks]:
                packets, nbytes, acks = model.roce_message_frames(m, psn)
                psn += packets
                total += nbytes + acks * model.ROCE_ACK_FRAME_BYTES
        out.append(total)
    return out


def message_frame_bytes(size_bytes: int) -> int:
    """Frame bytes of one SEND on a fresh QP and of the ACKs it draws (both ways).

    Examples:
        >>> message_frame_bytes(4096)  # 4 x (1024 + 58) + one 62-byte ACK
        4390
    """
    _, nbytes, acks = model.roce_message_frames(size_bytes)
    return nbytes + acks * model.ROCE_ACK_FRAME_BYTES


def sends_frame_bytes(sends: list[tuple[str, str, int]]) -> int:
    """Frame bytes of SENDs, each one message on a fresh QP, and of the ACKs they draw.

    Examples:
        >>> sends_frame_bytes([("h1", "h3", 4096), ("h2", "h4", 4096)])
        8780
    """
    return sum(message_frame_bytes(b) for _, _, b in sends)


def rail_changes(graph: nx.Graph, ring: list[str]) -> int:
    """Hops of the ring (including the closing one) between NICs of different rails.

    Args:
        graph: a fabric whose hosts carry a ``rail`` attribute (emu/fabric rail_optimized).
        ring: the ranks' hosts in ring order.
    """
    rail = [graph.nodes[h]["rail"] for h in ring]
    return sum(rail[i] != rail[(i + 1) % len(ring)] for i in range(len(ring)))


def ring_spine_model(graph: nx.Graph, ring: list[str], size: int, itemsize: int) -> dict:
    """The ring's modelled spine bytes: payload (2(n-1)/n x S per crossing hop) and frames.

    Args:
        graph: a fabric whose hosts carry a ``rail`` attribute.
        ring: the ranks' hosts in ring order.
        size: S, the all-reduce's bytes per rank.
        itemsize: bytes per element.

    Returns:
        ``crossing_hops`` (hops that change rail), ``payload_bytes`` (their data)
        and ``frame_bytes`` (their frames and ACKs, `ring_hop_frame_bytes`).
    """
    n = len(ring)
    hop = ring_hop_frame_bytes(size, n, itemsize, DEFAULT_SLICE_BYTES)
    rail = [graph.nodes[h]["rail"] for h in ring]
    crossing = [i for i in range(n) if rail[i] != rail[(i + 1) % n]]
    return {
        "crossing_hops": len(crossing),
        # Patarasuk & Yuan 2009: 2(n-1)/n x S through every hop (as
        # emu/traffic/collectives.py model_bytes_per_host("ring") counts it).
        "payload_bytes": len(crossing) * (2 * (n - 1) / n * size),
        "frame_bytes": sum(hop[i] for i in crossing),
    }


def alltoall_spine_model(graph: nx.Graph, sends: list[tuple[str, str, int]]) -> dict:
    """An all-to-all's modelled spine bytes: the messages between NICs of different rails.

    A pair on one rail stays on its leaf; a pair between rails goes leaf ->
    spine -> leaf, its data one way and its ACKs the other.

    Args:
        graph: a fabric whose hosts carry a ``rail`` attribute.
        sends: (source, destination, bytes) of each SEND, one message on a fresh QP.

    Returns:
        ``crossing_pairs`` (messages between rails), ``payload_bytes`` (their
        data) and ``frame_bytes`` (their frames and ACKs, `sends_frame_bytes`).
    """
    crossing = [(s, d, b) for s, d, b in sends if graph.nodes[s]["rail"] != graph.nodes[d]["rail"]]
    return {
        "crossing_pairs": len(crossing),
        "payload_bytes": sum(b for _, _, b in crossing),
        "frame_bytes": sends_frame_bytes(crossing),
    }


def alltoall_link_s(sends: list[tuple[str, str, int]], rate_bps: float) -> float:
    """The all-to-all's floor: its busiest NIC link, data frames out plus ACKs for what comes in.

    Each link runs both ways at `rate_bps`; a NIC's way up carries its SENDs'
    frames and the ACKs it returns for the messages it receives
    (emu/traffic/model.py's frame counts), its way down the reverse. No
    fabric term: with every pair on its own rail (PXN) no switch link carries
    more than a NIC link does.

    Args:
        sends: (source, destination, bytes) of each SEND, one message on a fresh QP.
        rate_bps: every NIC link's rate, each way.

    Returns:
        The busiest way of the busiest NIC link, in seconds.
    """
    up: dict[str, int] = {}
    down: dict[str, int] = {}
    for s, d, b in sends:
        _, nbytes, acks = model.roce_message_frames(b)
        ack_bytes = acks * model.ROCE_ACK_FRAME_BYTES
        up[s] = up.get(s, 0) + nbytes
        down[d] = down.get(d, 0) + nbytes
        up[d] = up.get(d, 0) + ack_bytes
        down[s] = down.get(s, 0) + ack_bytes
    return max(max(up.values()), max(down.values())) * 8 / rate_bps


def nvlink_phases_s(size: int, gpus: int, nvlink_rate_bps: float, itemsize: int = 4) -> float:
    """An intra-node ring reduce-scatter then all-gather of S bytes over G GPUs, at NVLink rate.

    Each phase moves (G-1)/G x S bytes through each GPU's NVLink (Thakur et
    al. 2005, ring reduce-scatter: (p-1)/p n beta); counted here in frames
    with their ACKs, as the spine model counts them: the busiest GPU's
    NVLink hop (its data one way, the ACKs for it the other, each way at the
    link rate).

    Examples:
        >>> round(nvlink_phases_s(256 << 10, 2, 18e6) * 1000, 1)  # 2 x 128 KiB + headers
        124.9
    """
    return max(ring_hop_frame_bytes(size, gpus, itemsize)) * 8 / nvlink_rate_bps


def hierarchical_nvswitch_bytes(size: int, gpus: int, nodes: int, itemsize: int = 4) -> int:
    """What the NVSwitches receive in a hierarchical all-reduce's two NVLink phases.

    Reduce-scatter then all-gather of S in every node: the ring all-reduce's
    steps (`ring_hop_frame_bytes`), each hop GPU -> NVSwitch -> GPU, so each
    node's NVSwitch receives every hop's data and the ACKs coming back.

    Args:
        size: S, the all-reduce's bytes per GPU.
        gpus: G, GPUs per node (the NVLink ring's ranks).
        nodes: N, the nodes (one NVSwitch each).
        itemsize: bytes per element.

    Examples:
        >>> hierarchical_nvswitch_bytes(4096, 2, 4) == 4 * 2 * 4452
        True
    """
    return nodes * sum(ring_hop_frame_bytes(size, gpus, itemsize))

"""Collectives on a rail-optimized fabric, run on packets over each GPU's NIC and NVLink port,
and the bytes the spines and NVSwitches receive while each one runs.

A rail-optimized fabric (emu/fabric/ `rail_optimized`) puts GPU r of every
node on leaf rail<r> and gives each node an NVSwitch that joins its GPUs'
NVLink ports (`fabric.nvlink_domains`: node -> [GPU of rail 1, ...]). Each
GPU has two sets of agents here, `nics` (its NIC on the network) and
`nv_nics` (its NVLink port, the same NIC model at the NVLink rate), as
emu/traffic/rdma.py `gpu_ports` starts them. This module owns:

- what the collectives send, from the NVLink domains: `rail_rings` (rail r's
  ring across the nodes), `node_rings` (each node's GPUs, the NVLink rings),
  `nic_to_nic_sends` (an all-to-all's messages NIC to NIC) and `pxn_sends`
  (PXN's: NVIDIA, "Doubling all2all performance with NCCL 2.12", 2022: GPU
  (a, i) hands its data for every GPU (b, j) over NVLink to GPU (a, j), in
  one message, and NIC (a, j) sends G x M to (b, j) on rail j);
- running them: `run_rings` (ring all-reduces or their phases on disjoint
  rings at once), `run_alltoall` (one SEND per message, each on its own QP),
  `run_pxn` (the hand-over over NVLink, then the rail step) and
  `run_hierarchical` (a ring reduce-scatter of S inside each node over
  NVLink, one all-reduce of S/G per rail across the nodes, a ring all-gather
  inside each node over NVLink; each phase starts from the previous one's
  result, handed from a GPU's NVLink port to its NIC and back where
  `phase_handover` says: in the GPU's memory where both ports are one
  process, else in a file in the run's directory; emu/host/collective.py
  CHAIN_OPTIONS). Every rank checks its own result against the whole
  collective's (emu/host/data.py `expected_hierarchical`);
- measuring them: `RailLayout` (the GPUs by node and rail, the spines and
  NVSwitches, read from the graph), `SwitchBytes` (the `rx_bytes` of every
  spine and NVSwitch port before and after, and pcaps of one leaf-spine and
  one NVLink link), `RailRun` (a collective run under the meter, as a
  `Part`: its bytes and times, the model's fields left at 0 for the caller
  to fill from `ring_part_model`, `alltoall_part_model`,
  `hierarchical_part_model` or `pxn_part_model`).

It does not model the bytes or times (emu/models/collective.py does; the
`*_part_model` functions only name its figures as a `Part`'s fields), judge
them, or render them (emu/traffic/rail_report.py); the ring itself and its
data live with the NIC model (emu/host/), the orchestration of one
collective in emu/traffic/collectives.py `run_allreduce`. Used by
scenarios/rail_optimized.py; tests/unit/test_rail.py runs it on fakes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import networkx as nx

from emu import fabric as fabric_mod
from emu.host.collective import GPU_MEMORY_PREFIX
from emu.host.data import DTYPES, dtype_name
from emu.models.collective import (
    alltoall_link_s,
    alltoall_spine_model,
    hierarchical_nvswitch_bytes,
    nvlink_phases_s,
    ring_spine_model,
    sends_frame_bytes,
)
from emu.net import Fabric
from emu.registry import FabricError, wait_for
from emu.telemetry import start_capture
from emu.traffic import collectives
from emu.traffic.collectives import AllReduceResult
from emu.traffic.rdma import RdmaHosts, shares_memory

Send = tuple[str, str, int]  # one all-to-all message: source NIC, destination NIC, bytes
Domains = Mapping[int, Sequence[str]]  # node -> [GPU of rail 1, ...] (fabric.nvlink_domains)
T = TypeVar("T")

#: Node k's GPUs hold the inputs of seed SEED_BASE + k in `run_hierarchical`.
SEED_BASE = 1000
#: The hierarchical all-reduce's hand-overs: after the reduce-scatter, after the rails.
HANDOVER_PHASES = ("rs", "ar")


# ----------------------------------------------------------------- the fabric


@dataclass(frozen=True)
class RailLayout:
    """A rail-optimized fabric's GPUs by node and rail, and its spines and NVSwitches.

    Read from the graph (emu/fabric/ `rail_optimized`) before the fabric starts.
    """

    graph: nx.Graph
    domains: dict[int, list[str]]  # node -> [GPU of rail 1, ...] (fabric.nvlink_domains)
    spines: list[str]  # none when rail-only
    nvswitches: list[str]  # one per node

    @classmethod
    def of(cls, graph: nx.Graph) -> RailLayout:
        """`graph`'s layout.

        Raises:
            FabricSpecError: `graph` is not a rail_optimized fabric.

        Examples:
            >>> lay = RailLayout.of(fabric_mod.rail_optimized(nodes=2, gpus_per_node=2, spines=1))
            >>> lay.domains, lay.spines, lay.nvswitches, lay.gpu(2, 1)
            ({1: ['h1', 'h2'], 2: ['h3', 'h4']}, ['spine1'], ['nvsw1', 'nvsw2'], 'h3')
        """
        switches = fabric_mod.switches(graph)
        return cls(
            graph,
            fabric_mod.nvlink_domains(graph),
            [s for s in switches if s.startswith("spine")],
            [s for s in switches if graph.nodes[s]["role"] == "nvswitch"],
        )

    @property
    def nodes(self) -> list[int]:
        """The nodes' numbers, in order."""
        return sorted(self.domains)

    @property
    def gpus(self) -> int:
        """GPUs (and rails) per node."""
        return len(self.domains[self.nodes[0]])

    @property
    def nvlink_rate_bps(self) -> float:
        """The NVLink ports' rate (the builder's nvlink_ratio x the NIC's)."""
        return self.graph.graph["params"]["nvlink_rate_bps"]

    def gpu(self, node: int, rail: int) -> str:
        """Node `node`'s GPU (its NIC) on rail `rail`."""
        return self.domains[node][rail - 1]

    def rails_connected(self) -> bool:
        """Whether the network joins rail 1 to rail 2 (not when rail-only: islands).

        Needs two rails (gpus_per_node >= 2).
        """
        return nx.has_path(fabric_mod.network(self.graph), self.gpu(1, 1), self.gpu(1, 2))


# ----------------------------------------------------------------- what is sent


def rail_rings(domains: Domains) -> list[list[str]]:
    """One ring per rail across the nodes: rail r's is GPU r of every node, in node order.

    Examples:
        >>> rail_rings({1: ["h1", "h2"], 2: ["h3", "h4"]})
        [['h1', 'h3'], ['h2', 'h4']]
    """
    nodes = sorted(domains)
    return [[domains[k][i] for k in nodes] for i in range(len(domains[nodes[0]]))]


def node_rings(domains: Domains) -> list[list[str]]:
    """Each node's GPUs, in node order: the rings of the NVLink phases."""
    return [list(domains[k]) for k in sorted(domains)]


def nic_to_nic_sends(domains: Domains, size_bytes: int) -> list[Send]:
    """An all-to-all without PXN: `size_bytes` from every GPU to every GPU of the other nodes.

    Intra-node pairs would go over NVLink and are left out.

    Examples:
        >>> nic_to_nic_sends({1: ["h1", "h2"], 2: ["h3", "h4"]}, 8)[:3]
        [('h1', 'h3', 8), ('h1', 'h4', 8), ('h2', 'h3', 8)]
    """
    nodes = sorted(domains)
    return [
        (src, dst, size_bytes)
        for a in nodes
        for b in nodes
        if a != b
        for src in domains[a]
        for dst in domains[b]
    ]


def pxn_sends(domains: Domains, size_bytes: int) -> tuple[list[Send], list[Send]]:
    """An all-to-all with PXN, in its two steps: the hand-over over NVLink, then the rails.

    GPU (a, i) gives GPU (a, j), j != i, its data for every (b, j), b != a, in
    one message over NVLink, (N-1) x `size_bytes`; then NIC (a, j) sends G x
    `size_bytes` to (b, j) in one message on rail j, so no pair changes rail.

    Returns:
        (hand-over messages, rail messages).

    Examples:
        >>> hand, wire = pxn_sends({1: ["h1", "h2"], 2: ["h3", "h4"]}, 8)
        >>> hand[:2], wire[:2]
        ([('h1', 'h2', 8), ('h2', 'h1', 8)], [('h1', 'h3', 16), ('h2', 'h4', 16)])
    """
    nodes = sorted(domains)
    gpus = len(domains[nodes[0]])
    wire = [
        (domains[a][j], domains[b][j], gpus * size_bytes)
        for a in nodes
        for b in nodes
        if a != b
        for j in range(gpus)
    ]
    hand = [
        (domains[a][i], domains[a][j], (len(nodes) - 1) * size_bytes)
        for a in nodes
        for i in range(gpus)
        for j in range(gpus)
        if i != j
    ]
    return hand, wire


# ----------------------------------------------------------------- running them


def run_rings(
    nics: RdmaHosts,
    rings: Sequence[Sequence[str]],
    size: int,
    dtype: str,
    algo: str = "ring",
    seeds: Sequence[int] | None = None,
    rank_options: Mapping[str, dict] | None = None,
) -> list[AllReduceResult]:
    """`algo` (the ring all-reduce or one of its phases) on every ring at once, one thread each.

    Args:
        nics: the agents the rings run on (the NICs, or the NVLink ports).
        rings: disjoint lists of hosts, each a ring in rank order.
        size: bytes per rank.
        dtype: the elements' type (emu/traffic/collectives.py DTYPES).
        algo: one of collectives.ALGORITHM_NAMES.
        seeds: ring i's data seed (default 0 for every ring).
        rank_options: each host's options (a phase's chain, emu/host/collective.py).

    Returns:
        One result per ring, in order.

    Raises:
        collectives.CollectiveError: a ring failed; names every ring that did and why.
        Anything else a ring raised (a bug) is raised as it is.
    """
    for ring in rings:
        nics.ring_qps(ring)  # connected here, one at a time: RdmaHosts hands out QP numbers
    results: list = [None] * len(rings)
    errors: list[tuple[tuple, Exception]] = []

    def one(i: int) -> None:
        try:
            (results[i],) = collectives.run_allreduce(
                nics,
                list(rings[i]),
                [size],
                dtype=dtype,
                algo=algo,
                seed=seeds[i] if seeds else 0,
                rank_options={h: rank_options[h] for h in rings[i]} if rank_options else None,
            )
        except Exception as exc:  # reported below, with the ring it came from
            errors.append((tuple(rings[i]), exc))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(rings))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _, exc in errors:
        if not isinstance(exc, FabricError):
            raise exc
    if errors:
        raise collectives.CollectiveError("; ".join(f"ring {list(r)}: {e}" for r, e in errors))
    return results


def connect_sends(nics: RdmaHosts, sends: Sequence[Send]) -> list[tuple[str, int, int]]:
    """A QP of its own for each (src, dst, bytes): (src, QP number, bytes) in order."""
    return [(s, nics.connect(s, d), b) for s, d, b in sends]


def run_alltoall(
    nics: RdmaHosts,
    sends: Sequence[Send],
    timeout_s: float,
    qps: Sequence[tuple[str, int, int]] | None = None,
) -> float:
    """One SEND per (src, dst, bytes) on its own QP, all posted at once; returns completion time.

    `qps`: the sends' QPs, connected beforehand (`connect_sends`) by a caller
    that reads their counters or traces their paths; None: connected here.

    The slowest sender's time, from its first post to its last completion
    (the receiver's ACK), as nccl-tests times each rank from its own start:
    the posts reach the agents one management call after another, about a
    millisecond apart, which is the driver's skew, not the network's (a
    16 KiB PXN hand-over at 18 Mbit/s measured 18% above its link time from
    the first post of all).

    Raises:
        FabricError: not every completion within `timeout_s` (emu/registry.py wait_for).
    """
    qps = list(qps) if qps is not None else connect_sends(nics, sends)
    for s, q, b in qps:
        nics.post(s, q, b)
    done: dict[tuple[str, int], dict] = {}

    def all_done() -> bool:
        for s, q, _ in qps:
            if (s, q) not in done:
                got = nics.poll_completions(s, q)
                if not got:
                    return False
                done[(s, q)] = got[0]
        return True

    wait_for(all_done, timeout_s, f"all-to-all of {len(qps)} messages", interval_s=0.1)
    spans: dict[str, list[float]] = {}
    for (src, _), c in done.items():
        first, last = spans.setdefault(src, [c["posted_at"], c["completed_at"]])
        spans[src] = [min(first, c["posted_at"]), max(last, c["completed_at"])]
    return max(last - first for first, last in spans.values())


def run_pxn(
    nics: RdmaHosts,
    nv_nics: RdmaHosts,
    handover: Sequence[Send],
    sends: Sequence[Send],
    timeout_s: float,
) -> tuple[float, float]:
    """An all-to-all with PXN (`pxn_sends`): the hand-over over NVLink, then the rail step.

    Returns:
        (the hand-over's time on the NVLink ports, the rail step's on the NICs),
        each as `run_alltoall` times it.
    """
    nvlink_s = run_alltoall(nv_nics, handover, timeout_s)
    wire_s = run_alltoall(nics, sends, timeout_s)
    return nvlink_s, wire_s


def phase_handover(
    nics: RdmaHosts, nv_nics: RdmaHosts, hosts: Sequence[str], run_dir: str | Path
) -> tuple[dict[tuple[str, str], str], bool]:
    """Where each GPU's phase result waits for the next phase: (phase, host) -> its name.

    In the GPU's memory where its NIC and NVLink port are one process
    (`gpu_ports`, rdma.py `shares_memory`), else a file in `run_dir`.

    Returns:
        The names for every phase of HANDOVER_PHASES and host, and whether
        every host's are in GPU memory.
    """
    hand = {
        (phase, h): (
            f"{GPU_MEMORY_PREFIX}hierarchical-{phase}-{h}"
            if shares_memory(nics, nv_nics, h)
            else str(Path(run_dir) / f"hierarchical-{phase}-{h}.npy")
        )
        for phase in HANDOVER_PHASES
        for h in hosts
    }
    return hand, all(shares_memory(nics, nv_nics, h) for h in hosts)


@dataclass(frozen=True)
class Hierarchical:
    """A hierarchical all-reduce's phases and the whole (`run_hierarchical`)."""

    domains: Domains
    size: int  # S, the all-reduce's bytes per GPU
    itemsize: int  # bytes per element
    rails: list[AllReduceResult]  # rail r's ring across the nodes, r = 1..G
    reduce_scatter: list[AllReduceResult]  # node k's NVLink ring, in node order
    all_gather: list[AllReduceResult]  # the same rings, the last phase

    @property
    def wire_s(self) -> float:
        """The network phase: the slowest rail's ring."""
        return max(r.time_s for r in self.rails)

    @property
    def reduce_scatter_s(self) -> float:
        """The first NVLink phase: the slowest node's."""
        return max(r.time_s for r in self.reduce_scatter)

    @property
    def all_gather_s(self) -> float:
        """The last NVLink phase: the slowest node's."""
        return max(r.time_s for r in self.all_gather)

    @property
    def nvlink_s(self) -> float:
        """Both NVLink phases."""
        return self.reduce_scatter_s + self.all_gather_s

    @property
    def result(self) -> AllReduceResult:
        """The three phases as one all-reduce of S over all N x G GPUs, one after the other."""
        rails, nodes, size = self.rails, sorted(self.domains), self.size
        n_all = len(nodes) * len(self.domains[nodes[0]])
        time_s = self.reduce_scatter_s + self.wire_s + self.all_gather_s
        phases = rails + self.reduce_scatter + self.all_gather
        return replace(
            rails[0],
            size_bytes=size,
            count=size // self.itemsize,
            nranks=n_all,
            algo="hierarchical",
            time_s=time_s,
            algbw_bytes_per_s=size / time_s,
            busbw_bytes_per_s=size / time_s * 2 * (n_all - 1) / n_all,
            wrong=sum(r.wrong for r in phases),
            # Every GPU of every node ends with the same bytes: the rails' sums, gathered.
            # (A reduce-scatter's ranks end with different chunks: no digest to compare.)
            digests_agree=all(r.digests_agree for r in rails)
            and len({d for r in self.all_gather for d in r.digests.values()}) == 1,
            digests={h: d for r in self.all_gather for h, d in r.digests.items()},
        )

    def named(self) -> dict[str, AllReduceResult]:
        """The whole ("hierarchical") and each phase's ring, named for a report."""
        out = {"hierarchical": self.result}
        for rail, r in enumerate(self.rails, 1):
            out[f"inter-node ring, rail {rail}"] = r
        for label, results in (
            ("reduce-scatter", self.reduce_scatter),
            ("all-gather", self.all_gather),
        ):
            for node, r in zip(sorted(self.domains), results):
                out[f"NVLink {label}, node {node}"] = r
        return out


def run_hierarchical(
    nics: RdmaHosts,
    nv_nics: RdmaHosts,
    domains: Domains,
    size: int,
    dtype: str,
    hand: Mapping[tuple[str, str], str],
) -> Hierarchical:
    """One all-reduce of `size` bytes over all N x G GPUs, in three phases on packets.

    Node k's GPUs hold the inputs of seed SEED_BASE + k; each phase's input is
    the previous phase's result, handed from a GPU's NVLink port to its NIC
    and back in `hand` (`phase_handover`), and every rank checks what it ends
    with against the whole all-reduce's: after the reduce-scatter its node
    sum's chunk, after the rails the global sum's chunk, after the all-gather
    the global sum (emu/host/data.py `expected_hierarchical`). GPU r of a
    node is rank r-1 of its node's ring: it ends the reduce-scatter owning
    chunk r mod G, which rail r's ring then all-reduces, and which the
    all-gather spreads.

    Raises:
        collectives.CollectiveError: a phase's ring failed (`run_rings`).
    """
    nodes = sorted(domains)
    gpus = len(domains[nodes[0]])
    hosts = [h for k in nodes for h in domains[k]]
    seeds = [SEED_BASE + k for k in nodes]
    itemsize = DTYPES[dtype_name(dtype)].itemsize
    count = size // itemsize
    owned = {h: (i + 1) % gpus for k in nodes for i, h in enumerate(domains[k])}

    def expect(chunk: int | None) -> dict:
        return {"seeds": seeds, "gpus": gpus, "count": count, "chunk": chunk}

    in_node = node_rings(domains)
    rs = run_rings(
        nv_nics,
        in_node,
        size,
        dtype,
        "reduce_scatter",
        seeds=seeds,
        rank_options={h: {"chain_output": hand["rs", h]} for h in hosts},
    )
    rails = run_rings(
        nics,
        rail_rings(domains),
        size // gpus,
        dtype,
        rank_options={
            h: {
                "chain_input": hand["rs", h],
                "chain_output": hand["ar", h],
                "chain_expect": expect(owned[h]),
            }
            for h in hosts
        },
    )
    ag = run_rings(
        nv_nics,
        in_node,
        size,
        dtype,
        "all_gather",
        rank_options={
            h: {
                "chain_input": hand["ar", h],
                "chain_input_chunk": owned[h],
                "chain_expect": expect(None),
            }
            for h in hosts
        },
    )
    return Hierarchical(domains, size, itemsize, rails, rs, ag)


# ----------------------------------------------------------------- measuring them


def rx_bytes(fab: Fabric, switches: Sequence[str]) -> int:
    """Bytes received so far on every port of `switches` (the spines, or the NVSwitches)."""
    return sum(p.rx_bytes for sw in switches for p in fab.port_stats(sw).values())


def capture_interfaces(layout: RailLayout) -> list[str]:
    """Where a part's pcaps are taken (switch sides): the first spine's port to rail1, if
    there is a spine, and node 1's NVSwitch port to its first GPU."""
    graph, spines = layout.graph, layout.spines
    intfs = [graph.edges["rail1", spines[0]]["intfs"][spines[0]]] if spines else []
    intfs.append(graph.edges[layout.gpu(1, 1), "nvsw1"]["intfs"]["nvsw1"])
    return intfs


@dataclass
class SwitchBytes:
    """The bytes a rail fabric's spines and NVSwitches receive while a function runs.

    Read from every port's `rx_bytes` counter before and after; with a
    `pcap_dir`, each run is also captured on `interfaces` into
    pcap_dir/<name>-<interface>.pcap.
    """

    fab: Fabric
    spines: list[str]
    nvswitches: list[str]
    interfaces: list[str]
    pcap_dir: Path | None = None  # None: no captures

    @classmethod
    def on(cls, fab: Fabric, layout: RailLayout, pcap_dir: Path | None = None) -> SwitchBytes:
        """The meter of `layout`'s spines and NVSwitches on `fab` (`capture_interfaces`)."""
        return cls(fab, layout.spines, layout.nvswitches, capture_interfaces(layout), pcap_dir)

    def measure(self, name: str, fn: Callable[[], T]) -> tuple[T, int, int]:
        """`fn()` with `name`'s captures running.

        Returns:
            What `fn` returned, the bytes the spines received during it, and the
            bytes the NVSwitches received.
        """
        cap: list = []
        if self.pcap_dir is not None:
            cap = [
                start_capture(self.fab, i, self.pcap_dir / f"{name}-{i}.pcap")
                for i in self.interfaces
            ]
        before = rx_bytes(self.fab, self.spines)
        nv_before = rx_bytes(self.fab, self.nvswitches)
        try:
            out = fn()
        finally:
            for proc in cap:
                self.fab.stop_proc(proc)
        spine_rx = rx_bytes(self.fab, self.spines) - before
        return out, spine_rx, rx_bytes(self.fab, self.nvswitches) - nv_before


@dataclass
class Part:
    """One measured collective: its spine and NVSwitch bytes and its times, against a model.

    `RailRun` fills what was measured and leaves the model's fields at 0; the
    caller gives them (`dataclasses.replace`). metrics.json holds it as is.
    """

    name: str
    kind: str  # "allreduce" or "alltoall"
    spine_rx_bytes: int  # bytes the spines' ports received during it
    model_payload_bytes: float  # data bytes the model puts through the spines
    model_frame_bytes: int  # the same in frames, with ACKs: what is judged
    time_s: float  # iteration (all-reduce) or completion (all-to-all)
    wire_s: float  # the part of it measured on the network
    nvlink_s: float  # the part of it measured on the NVLink domains
    hops: int = 0  # crossing ring hops or crossing all-to-all pairs
    wrong: int = 0
    digests_agree: bool = True
    nvswitch_rx_bytes: int = 0  # bytes the NVSwitches' ports received during it
    model_nvlink_frame_bytes: int = 0  # the NVLink phases' frames with their ACKs (model)
    nvlink_model_s: float = 0.0  # the NVLink phases at the NVLink rate (model)


def ring_part_model(graph: nx.Graph, ring: Sequence[str], size: int, itemsize: int) -> dict:
    """A ring all-reduce's spine model (emu/models/collective.py `ring_spine_model`) as
    the `Part` fields it fills: its crossing hops, their data and their frames."""
    rm = ring_spine_model(graph, list(ring), size, itemsize)
    return {
        "hops": rm["crossing_hops"],
        "model_payload_bytes": rm["payload_bytes"],
        "model_frame_bytes": rm["frame_bytes"],
    }


def alltoall_part_model(graph: nx.Graph, sends: Sequence[Send]) -> dict:
    """An all-to-all's spine model (emu/models/collective.py `alltoall_spine_model`) as
    the `Part` fields it fills: its crossing pairs, their data and their frames."""
    am = alltoall_spine_model(graph, list(sends))
    return {
        "hops": am["crossing_pairs"],
        "model_payload_bytes": am["payload_bytes"],
        "model_frame_bytes": am["frame_bytes"],
    }


def hierarchical_part_model(layout: RailLayout, size: int, itemsize: int) -> dict:
    """A hierarchical all-reduce's NVLink model as the `Part` fields it fills: its two
    NVLink phases' frames and ACKs through the NVSwitches (`hierarchical_nvswitch_bytes`)
    and the busiest GPU's NVLink time (`nvlink_phases_s`). Nothing on the spines."""
    gpus, rate_bps = layout.gpus, layout.nvlink_rate_bps
    return {
        "model_nvlink_frame_bytes": hierarchical_nvswitch_bytes(
            size, gpus, len(layout.nodes), itemsize
        ),
        "nvlink_model_s": nvlink_phases_s(size, gpus, rate_bps, itemsize),
    }


def pxn_part_model(layout: RailLayout, handover: Sequence[Send]) -> dict:
    """An all-to-all with PXN's NVLink model as the `Part` fields it fills: the hand-over's
    frames and ACKs through the NVSwitches (`sends_frame_bytes`) and its busiest NVLink
    port's time (`alltoall_link_s`). Nothing on the spines."""
    return {
        "model_nvlink_frame_bytes": sends_frame_bytes(list(handover)),
        "nvlink_model_s": alltoall_link_s(list(handover), layout.nvlink_rate_bps),
    }


@dataclass
class RailRun:
    """A rail fabric's GPUs, each with its NIC and NVLink port, and the meter: each method
    says what it runs through `log`, runs one collective under the meter and returns it
    as a `Part`."""

    nics: RdmaHosts  # each GPU's NIC
    nv_nics: RdmaHosts  # each GPU's NVLink port
    meter: SwitchBytes
    log: Callable[[str], None] = lambda line: None

    def ring(
        self, name: str, ring: Sequence[str], size: int, dtype: str
    ) -> tuple[Part, AllReduceResult]:
        """One ring all-reduce of `size` bytes among `ring`'s NICs, captured as `name`."""
        self.log(f"{name}: ring {' -> '.join(ring)}")
        (r,), spine_rx, nv_rx = self.meter.measure(
            name, lambda: [run_rings(self.nics, [ring], size, dtype)[0]]
        )
        part = Part(name, "allreduce", spine_rx, 0.0, 0, r.time_s, r.time_s, 0.0)
        return _checked(part, r, nv_rx), r

    def handover(self, hosts: Sequence[str]) -> tuple[dict[tuple[str, str], str], bool]:
        """`phase_handover` for `hosts`, its files in the fabric's run directory."""
        return phase_handover(self.nics, self.nv_nics, hosts, self.meter.fab.run.sock_dir)

    def hierarchical(
        self, domains: Domains, size: int, dtype: str, hand: Mapping[tuple[str, str], str]
    ) -> tuple[Part, Hierarchical]:
        """`run_hierarchical`, captured as "hierarchical"; the part's NVLink time is both
        NVLink phases', its network time the slowest rail's."""
        gpus = len(next(iter(domains.values())))
        self.log(
            f"hierarchical: reduce-scatter in each node over NVLink, "
            f"{gpus} rings of {size // gpus} B (one per rail), all-gather over NVLink"
        )
        h, spine_rx, nv_rx = self.meter.measure(
            "hierarchical",
            lambda: run_hierarchical(self.nics, self.nv_nics, domains, size, dtype, hand),
        )
        r = h.result
        part = Part("hierarchical", "allreduce", spine_rx, 0.0, 0, r.time_s, h.wire_s, h.nvlink_s)
        return _checked(part, r, nv_rx), h

    def alltoall(self, name: str, capture: str, sends: Sequence[Send], timeout_s: float) -> Part:
        """`run_alltoall` on the NICs, captured as `capture`."""
        self.log(f"{name}, {len(sends)} messages of {_sizes(sends)}")
        t, spine_rx, nv_rx = self.meter.measure(
            capture, lambda: run_alltoall(self.nics, sends, timeout_s)
        )
        return Part(name, "alltoall", spine_rx, 0.0, 0, t, t, 0.0, nvswitch_rx_bytes=nv_rx)

    def pxn(
        self,
        name: str,
        capture: str,
        handover: Sequence[Send],
        sends: Sequence[Send],
        timeout_s: float,
    ) -> Part:
        """`run_pxn`, captured as `capture`: its time is the hand-over's plus the rails'."""
        self.log(
            f"{name}: hand-over of {len(handover)} messages of {_sizes(handover)} over NVLink, "
            f"then {len(sends)} of {_sizes(sends)} on the rails"
        )
        (nvlink_s, wire_s), spine_rx, nv_rx = self.meter.measure(
            capture, lambda: run_pxn(self.nics, self.nv_nics, handover, sends, timeout_s)
        )
        time_s = nvlink_s + wire_s
        return Part(
            name, "alltoall", spine_rx, 0.0, 0, time_s, wire_s, nvlink_s, nvswitch_rx_bytes=nv_rx
        )


def _sizes(sends: Sequence[Send]) -> str:
    """The messages' size for a log line: "N B", or "N-M B" where they differ."""
    sizes = sorted({b for _, _, b in sends})
    if not sizes:
        return "0 B"
    return f"{sizes[0]} B" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]} B"


def _checked(part: Part, result: AllReduceResult, nvswitch_rx_bytes: int) -> Part:
    """An all-reduce's part with what its ranks found and what the NVSwitches received."""
    return replace(
        part,
        wrong=result.wrong,
        digests_agree=result.digests_agree,
        nvswitch_rx_bytes=nvswitch_rx_bytes,
    )

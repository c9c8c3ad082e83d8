"""The rail-optimized workload (emu/traffic/rail.py) on fakes: no fabric, no agents.

What it sends is checked by invariants of the rail fabric (a ring per rail
stays on its rail, PXN's rail step never changes rail and carries what the
NIC-to-NIC all-to-all carries); how it runs by fakes of the NIC agents and of
collectives.run_allreduce that record what they were asked (the hierarchical
all-reduce's chain of phases, the all-to-all's timing from each sender's own
first post); what it measures by a fabric whose port counters move while the
measured function runs.
"""

from __future__ import annotations

import doctest
import threading
from types import SimpleNamespace

import pytest

from emu import fabric as fabric_mod
from emu.fabric import FabricSpecError
from emu.models.collective import (
    alltoall_link_s,
    hierarchical_nvswitch_bytes,
    message_frame_bytes,
    nvlink_phases_s,
    ring_spine_model,
)
from emu.registry import FabricError
from emu.traffic import collectives, rail
from emu.traffic.collectives import AllReduceResult


@pytest.fixture(scope="module")
def graph():
    # 3 nodes x 2 GPUs: node k's GPUs h2k-1 (rail 1) and h2k (rail 2).
    return fabric_mod.rail_optimized(nodes=3, gpus_per_node=2, spines=2)


@pytest.fixture(scope="module")
def layout(graph):
    return rail.RailLayout.of(graph)


def result(hosts, time_s=1.0, wrong=0, digest="d", size=1024, algo="ring", agree=True):
    return AllReduceResult(
        size_bytes=size,
        count=size // 4,
        dtype="float32",
        nranks=len(hosts),
        algo=algo,
        iters=1,
        time_s=time_s,
        algbw_bytes_per_s=size / time_s,
        busbw_bytes_per_s=size / time_s,
        wrong=wrong,
        tx_payload_bytes={},
        tx_frame_bytes={},
        retransmitted={},
        elapsed_s={},
        digests_agree=agree,
        digests={h: digest if digest else f"own-{h}" for h in hosts},
    )


# ----- the layout and what is sent -----------------------------------------------------------


def test_the_layout_reads_gpus_by_node_and_rail_and_the_switches(graph, layout):
    assert layout.domains == {1: ["h1", "h2"], 2: ["h3", "h4"], 3: ["h5", "h6"]}
    assert layout.nodes == [1, 2, 3] and layout.gpus == 2
    assert layout.spines == ["spine1", "spine2"]
    assert layout.nvswitches == ["nvsw1", "nvsw2", "nvsw3"]
    assert layout.gpu(2, 2) == "h4" and graph.nodes["h4"]["rail"] == 2
    assert layout.nvlink_rate_bps == graph.graph["params"]["nvlink_rate_bps"] > 0
    assert layout.rails_connected()
    island = rail.RailLayout.of(fabric_mod.rail_optimized(nodes=2, gpus_per_node=2, spines=0))
    assert island.spines == [] and not island.rails_connected()
    with pytest.raises(FabricSpecError, match="rail_optimized"):
        rail.RailLayout.of(fabric_mod.leaf_spine(2, 2, 2))


def test_a_ring_per_rail_stays_on_its_rail_and_the_node_rings_on_their_node(graph, layout):
    rings = rail.rail_rings(layout.domains)
    assert rings == [["h1", "h3", "h5"], ["h2", "h4", "h6"]]
    for r, ring in enumerate(rings, 1):
        assert {graph.nodes[h]["rail"] for h in ring} == {r}
        assert [graph.nodes[h]["node"] for h in ring] == [1, 2, 3]
    nodes = rail.node_rings(layout.domains)
    assert nodes == [["h1", "h2"], ["h3", "h4"], ["h5", "h6"]]
    assert sorted(h for ring in rings for h in ring) == sorted(h for n in nodes for h in n)


def test_nic_to_nic_sends_every_gpu_to_every_gpu_of_the_other_nodes(graph, layout):
    sends = rail.nic_to_nic_sends(layout.domains, 100)
    n, g = 3, 2
    assert len(sends) == n * (n - 1) * g * g
    pairs = [(s, d) for s, d, _ in sends]
    assert len(set(pairs)) == len(pairs)
    assert all(graph.nodes[s]["node"] != graph.nodes[d]["node"] for s, d in pairs)
    assert {b for _, _, b in sends} == {100}


def test_pxn_never_changes_rail_and_carries_what_the_nics_would(graph, layout):
    m = 100
    hand, wire = rail.pxn_sends(layout.domains, m)
    n, g = 3, 2
    # Hand-over: inside each node, from every GPU to every other, (N-1) x M each.
    assert len(hand) == n * g * (g - 1)
    assert all(graph.nodes[s]["node"] == graph.nodes[d]["node"] and s != d for s, d, _ in hand)
    assert {b for _, _, b in hand} == {(n - 1) * m}
    # Rail step: GPU (a, j) to (b, j) for every a != b, G x M each, on one rail.
    assert len(wire) == n * (n - 1) * g
    assert all(graph.nodes[s]["rail"] == graph.nodes[d]["rail"] for s, d, _ in wire)
    assert {b for _, _, b in wire} == {g * m}
    # The same data reaches every GPU as NIC to NIC: (N-1) x G x M each.
    direct = rail.nic_to_nic_sends(layout.domains, m)
    for h in graph.nodes:
        if graph.nodes[h].get("role") == "host":
            into = sum(b for _, d, b in wire if d == h)
            assert into == sum(b for _, d, b in direct if d == h) == (n - 1) * g * m


def test_part_models_are_the_collective_models_under_the_parts_field_names(graph, layout):
    ring = ["h1", "h4", "h5"]  # rails 1 2 1: two hops change rail
    rm = ring_spine_model(graph, ring, 4096, 4)
    assert rm["crossing_hops"] == 2
    assert rail.ring_part_model(graph, ring, 4096, 4) == {
        "hops": 2,
        "model_payload_bytes": rm["payload_bytes"],
        "model_frame_bytes": rm["frame_bytes"],
    }
    sends = [("h1", "h4", 4096), ("h1", "h3", 4096)]  # one between rails, one on rail 1
    assert rail.alltoall_part_model(graph, sends) == {
        "hops": 1,
        "model_payload_bytes": 4096,
        "model_frame_bytes": message_frame_bytes(4096),
    }
    nv = layout.nvlink_rate_bps
    assert rail.hierarchical_part_model(layout, 4096, 4) == {
        "model_nvlink_frame_bytes": hierarchical_nvswitch_bytes(4096, 2, 3, 4),
        "nvlink_model_s": nvlink_phases_s(4096, 2, nv, 4),
    }
    hand, _ = rail.pxn_sends(layout.domains, 1024)
    assert rail.pxn_part_model(layout, hand) == {
        "model_nvlink_frame_bytes": len(hand) * message_frame_bytes(2048),
        "nvlink_model_s": alltoall_link_s(hand, nv),
    }


# ----- running them ----------------------------------------------------------------------------


class FakeNics:
    """RdmaHosts' calls that the workload makes, recorded; completions as scripted."""

    def __init__(self, name="nic", completions=None):
        self.name = name
        self.calls: list[tuple] = []
        self.qpn = 0
        self.completions = completions or {}  # (src, dst) -> list of answers, one per poll
        self.qp_pair: dict[int, tuple[str, str]] = {}
        self.nics: dict = {}

    def ring_qps(self, hosts):
        self.calls.append(("ring_qps", tuple(hosts)))
        return []

    def connect(self, src, dst):
        self.qpn += 1
        self.qp_pair[self.qpn] = (src, dst)
        self.calls.append(("connect", src, dst))
        return self.qpn

    def post(self, src, qpn, size_bytes):
        self.calls.append(("post", src, qpn, size_bytes))
        return [1]

    def poll_completions(self, src, qpn):
        answers = self.completions[self.qp_pair[qpn]]
        return answers.pop(0) if len(answers) > 1 else answers[0]


def test_run_rings_runs_every_ring_at_once_with_its_seed_and_options(monkeypatch):
    seen = []
    started = threading.Barrier(2, timeout=5)  # both rings run at the same time
    second_done = threading.Event()

    def run_allreduce(nics, hosts, sizes, dtype, algo, seed, rank_options):
        started.wait()
        seen.append((tuple(hosts), sizes, dtype, algo, seed, rank_options))
        if hosts[0] == "a":  # the first ring ends last: results still come in ring order
            assert second_done.wait(5), "the second ring never finished"
        else:
            second_done.set()
        return [result(hosts, time_s=len(seen))]

    monkeypatch.setattr(collectives, "run_allreduce", run_allreduce)
    nics = FakeNics()
    opts = {h: {"chain_output": f"gpu:{h}"} for h in "abcd"}
    out = rail.run_rings(nics, [["a", "b"], ["c", "d"]], 64, "int32", "all_gather", [7, 8], opts)
    # QPs are connected one ring after the other before any ring starts.
    assert nics.calls == [("ring_qps", ("a", "b")), ("ring_qps", ("c", "d"))]
    assert [list(r.digests) for r in out] == [["a", "b"], ["c", "d"]]  # in ring order
    by_ring = {s[0]: s for s in seen}
    assert by_ring[("a", "b")][1:] == (
        [64],
        "int32",
        "all_gather",
        7,
        {"a": opts["a"], "b": opts["b"]},
    )
    assert by_ring[("c", "d")][4:] == (8, {"c": opts["c"], "d": opts["d"]})


def test_run_rings_defaults_to_seed_0_and_names_every_failed_ring(monkeypatch):
    calls = []

    def run_allreduce(nics, hosts, sizes, dtype, algo, seed, rank_options):
        calls.append((seed, rank_options))
        if hosts[0] != "e":
            raise collectives.CollectiveError(f"rank {hosts[0]} timed out")
        return [result(hosts)]

    monkeypatch.setattr(collectives, "run_allreduce", run_allreduce)
    with pytest.raises(RuntimeError) as err:
        rail.run_rings(FakeNics(), [["a", "b"], ["c", "d"], ["e", "f"]], 64, "float32")
    assert "ring ['a', 'b']: rank a timed out" in str(err.value)
    assert "ring ['c', 'd']: rank c timed out" in str(err.value)
    assert "'e'" not in str(err.value)
    assert calls == [(0, None)] * 3


def done(posted_at, completed_at):
    return [{"posted_at": posted_at, "completed_at": completed_at}]


def test_an_all_to_all_takes_its_slowest_senders_own_time():
    # h1's first post (by its clock, whichever message it was) is at 10 and its last
    # message completes at 12.5: 2.5 s. h2 posts at 11 and completes at 13: 2.0 s. From
    # the first post of all to the last completion it is 3 s, which would count the
    # driver's skew between h1's and h2's posts.
    nics = FakeNics(
        completions={
            ("h1", "h3"): [done(10.1, 12.0)],
            ("h1", "h4"): [[], done(10.0, 12.5)],  # not done at the first poll
            ("h2", "h3"): [done(11.0, 13.0)],
        }
    )
    sends = [("h1", "h3", 100), ("h1", "h4", 200), ("h2", "h3", 300)]
    assert rail.run_alltoall(nics, sends, timeout_s=5) == pytest.approx(2.5)
    posts = [c for c in nics.calls if c[0] == "post"]
    connects = [c for c in nics.calls if c[0] == "connect"]
    assert connects == [("connect", s, d) for s, d, _ in sends]  # a QP per message
    assert [(c[1], c[3]) for c in posts] == [("h1", 100), ("h1", 200), ("h2", 300)]
    assert nics.calls.index(posts[0]) > nics.calls.index(connects[-1])  # all posted at once


def test_an_all_to_all_that_does_not_complete_times_out():
    nics = FakeNics(completions={("h1", "h3"): [[]]})
    with pytest.raises(FabricError, match="all-to-all of 1 messages"):
        rail.run_alltoall(nics, [("h1", "h3", 100)], timeout_s=0.15)


def test_pxn_hands_over_on_nvlink_first_then_sends_on_the_rails(monkeypatch):
    order = []

    def run_alltoall(nics, sends, timeout_s):
        order.append((nics.name, list(sends), timeout_s))
        return {"nv": 0.25, "nic": 1.5}[nics.name]

    monkeypatch.setattr(rail, "run_alltoall", run_alltoall)
    hand, wire = [("h1", "h2", 8)], [("h1", "h3", 16)]
    assert rail.run_pxn(FakeNics("nic"), FakeNics("nv"), hand, wire, 9.0) == (0.25, 1.5)
    assert order == [("nv", hand, 9.0), ("nic", wire, 9.0)]


def test_phase_results_wait_in_gpu_memory_where_both_ports_are_one_process(tmp_path):
    nics, nv = FakeNics(), FakeNics("nv")
    shared, own = object(), object()
    nics.nics = {"h1": SimpleNamespace(proc=shared), "h2": SimpleNamespace(proc=own)}
    nv.nics = {"h1": SimpleNamespace(proc=shared), "h2": SimpleNamespace(proc=object())}
    hand, in_memory = rail.phase_handover(nics, nv, ["h1", "h2"], tmp_path)
    assert hand == {
        ("rs", "h1"): "gpu:hierarchical-rs-h1",
        ("ar", "h1"): "gpu:hierarchical-ar-h1",
        ("rs", "h2"): str(tmp_path / "hierarchical-rs-h2.npy"),
        ("ar", "h2"): str(tmp_path / "hierarchical-ar-h2.npy"),
    }
    assert not in_memory
    assert rail.phase_handover(nics, nv, ["h1"], tmp_path)[1]
    # A RailRun hands over in its fabric's run directory.
    fab = SimpleNamespace(run=SimpleNamespace(sock_dir=str(tmp_path / "run")))
    meter = rail.SwitchBytes(fab, [], [], [])
    assert rail.RailRun(nics, nv, meter).handover(["h2"]) == (
        {
            ("rs", "h2"): str(tmp_path / "run" / "hierarchical-rs-h2.npy"),
            ("ar", "h2"): str(tmp_path / "run" / "hierarchical-ar-h2.npy"),
        },
        False,
    )


def test_the_hierarchical_all_reduce_chains_its_phases(monkeypatch, layout):
    phases = []
    times = {"reduce_scatter": [0.2, 0.3, 0.1], "ring": [1.0, 1.5], "all_gather": [0.4, 0.1, 0.2]}

    def run_rings(nics, rings, size, dtype, algo="ring", seeds=None, rank_options=None):
        phases.append((nics.name, rings, size, algo, seeds, rank_options))
        digest = None if algo == "reduce_scatter" else "sum"
        return [result(r, times[algo][i], wrong=i, digest=digest) for i, r in enumerate(rings)]

    monkeypatch.setattr(rail, "run_rings", run_rings)
    hand = {
        (p, h): f"gpu:{p}-{h}" for p in rail.HANDOVER_PHASES for h in "h1 h2 h3 h4 h5 h6".split()
    }
    h = rail.run_hierarchical(
        FakeNics("nic"), FakeNics("nv"), layout.domains, 4096, "float32", hand
    )
    (rs_nics, rs_rings, rs_size, rs_algo, seeds, rs_opts), rails, ag = phases
    # Reduce-scatter of S in each node over NVLink, node k with seed 1000 + k.
    assert (rs_nics, rs_rings, rs_size, rs_algo) == (
        "nv",
        rail.node_rings(layout.domains),
        4096,
        "reduce_scatter",
    )
    assert seeds == [1001, 1002, 1003]
    assert rs_opts["h3"] == {"chain_output": "gpu:rs-h3"}
    # One all-reduce of S / G per rail, on the NICs, from the reduce-scatter's chunk:
    # GPU r owns chunk r mod G (h1, rail 1: chunk 1; h2, rail 2: chunk 0).
    assert rails[:4] == ("nic", rail.rail_rings(layout.domains), 2048, "ring")
    expect = {"seeds": [1001, 1002, 1003], "gpus": 2, "count": 1024}
    assert rails[5]["h1"] == {
        "chain_input": "gpu:rs-h1",
        "chain_output": "gpu:ar-h1",
        "chain_expect": {**expect, "chunk": 1},
    }
    assert rails[5]["h2"]["chain_expect"]["chunk"] == 0
    # All-gather of S in each node over NVLink, from the rail's result.
    assert ag[:4] == ("nv", rail.node_rings(layout.domains), 4096, "all_gather")
    assert ag[5]["h2"] == {
        "chain_input": "gpu:ar-h2",
        "chain_input_chunk": 0,
        "chain_expect": {**expect, "chunk": None},
    }
    # The whole: the slowest of each phase, one after the other.
    assert h.reduce_scatter_s == 0.3 and h.wire_s == 1.5 and h.all_gather_s == 0.4
    assert h.nvlink_s == pytest.approx(0.7)
    r = h.result
    assert (r.algo, r.size_bytes, r.count, r.nranks) == ("hierarchical", 4096, 1024, 6)
    assert r.time_s == pytest.approx(0.3 + 1.5 + 0.4)
    assert r.busbw_bytes_per_s == pytest.approx(4096 / r.time_s * 2 * 5 / 6)
    assert r.wrong == (0 + 1 + 2) + (0 + 1) + (0 + 1 + 2)
    assert r.digests_agree and set(r.digests) == {h for _, h in hand}
    assert list(h.named()) == [
        "hierarchical",
        "inter-node ring, rail 1",
        "inter-node ring, rail 2",
        "NVLink reduce-scatter, node 1",
        "NVLink reduce-scatter, node 2",
        "NVLink reduce-scatter, node 3",
        "NVLink all-gather, node 1",
        "NVLink all-gather, node 2",
        "NVLink all-gather, node 3",
    ]


def test_gpus_that_end_with_different_bytes_fail_the_hierarchical_all_reduce(layout):
    nodes = rail.node_rings(layout.domains)
    rails = [result(r) for r in rail.rail_rings(layout.domains)]
    gathered = [result(r, digest="sum") for r in nodes[:2]] + [result(nodes[2], digest="other")]
    h = rail.Hierarchical(layout.domains, 4096, 4, rails, [result(r) for r in nodes], gathered)
    assert not h.result.digests_agree
    bad_rail = [result(rail.rail_rings(layout.domains)[0], agree=False), rails[1]]
    same = [result(r, digest="sum") for r in nodes]
    h = rail.Hierarchical(layout.domains, 4096, 4, bad_rail, [result(r) for r in nodes], same)
    assert not h.result.digests_agree


# ----- measuring them --------------------------------------------------------------------------


class CountingFabric:
    """Port counters that move while the measured function runs; captures recorded."""

    def __init__(self):
        self.rx = {"spine1": 100, "spine2": 200, "nvsw1": 5, "nvsw2": 6, "nvsw3": 7}
        self.stopped = []
        self.run = SimpleNamespace(sock_dir="/run/emu/x")

    def port_stats(self, sw):
        return {1: SimpleNamespace(rx_bytes=self.rx[sw]), 2: SimpleNamespace(rx_bytes=1)}

    def stop_proc(self, proc):
        self.stopped.append(proc)


def test_the_meter_counts_what_the_spines_and_nvswitches_received_during_the_run(
    monkeypatch, layout, tmp_path
):
    fab = CountingFabric()
    started = []
    monkeypatch.setattr(rail, "start_capture", lambda f, i, path: started.append(path) or i)
    meter = rail.SwitchBytes.on(fab, layout, tmp_path)
    assert meter.interfaces == rail.capture_interfaces(layout) == ["spine1-eth1", "nvsw1-eth1"]

    def traffic():
        fab.rx["spine2"] += 1000
        fab.rx["nvsw3"] += 70
        return "out"

    assert meter.measure("flat ring", traffic) == ("out", 1000, 70)
    assert started == [
        tmp_path / "flat ring-spine1-eth1.pcap",
        tmp_path / "flat ring-nvsw1-eth1.pcap",
    ]
    assert fab.stopped == ["spine1-eth1", "nvsw1-eth1"]

    def fails():
        raise RuntimeError("ring broke")

    with pytest.raises(RuntimeError, match="ring broke"):
        meter.measure("x", fails)
    assert len(fab.stopped) == 4  # the captures stop anyway
    started.clear()
    assert rail.SwitchBytes.on(fab, layout).measure("y", lambda: 1) == (1, 0, 0)
    assert started == []  # no pcap_dir: no captures


def test_a_rail_only_fabric_is_captured_on_its_nvlink_only():
    lay = rail.RailLayout.of(fabric_mod.rail_optimized(nodes=2, gpus_per_node=2, spines=0))
    assert rail.capture_interfaces(lay) == ["nvsw1-eth1"]


def test_each_run_is_a_part_with_its_bytes_times_and_log(monkeypatch, layout):
    fab = CountingFabric()
    logs = []
    run = rail.RailRun(FakeNics(), FakeNics("nv"), rail.SwitchBytes.on(fab, layout), logs.append)

    def ring_traffic(nics, rings, size, dtype, algo="ring", seeds=None, rank_options=None):
        fab.rx["spine1"] += 500
        return [result(rings[0], time_s=2.0, wrong=3, agree=False)]

    monkeypatch.setattr(rail, "run_rings", ring_traffic)
    part, r = run.ring("crossing ring", ["h1", "h4", "h5"], 4096, "float32")
    assert r.wrong == 3
    assert (part.name, part.kind, part.spine_rx_bytes, part.nvswitch_rx_bytes) == (
        "crossing ring",
        "allreduce",
        500,
        0,
    )
    assert (part.time_s, part.wire_s, part.nvlink_s) == (2.0, 2.0, 0.0)
    assert (part.wrong, part.digests_agree, part.hops, part.model_frame_bytes) == (3, False, 0, 0)

    def pxn_traffic(nics, nv_nics, handover, sends, timeout_s):
        fab.rx["nvsw2"] += 64
        return 0.25, 1.5

    monkeypatch.setattr(rail, "run_pxn", pxn_traffic)
    hand, wire = rail.pxn_sends(layout.domains, 1024)
    part = run.pxn("all-to-all with PXN", "a2a-pxn", hand, wire, 30)
    assert (part.kind, part.time_s, part.wire_s, part.nvlink_s) == ("alltoall", 1.75, 1.5, 0.25)
    assert (part.spine_rx_bytes, part.nvswitch_rx_bytes) == (0, 64)
    monkeypatch.setattr(rail, "run_alltoall", lambda nics, sends, timeout_s: 0.8)
    part = run.alltoall(
        "all-to-all without PXN", "a2a", rail.nic_to_nic_sends(layout.domains, 8), 30
    )
    assert (part.time_s, part.wire_s, part.nvlink_s) == (0.8, 0.8, 0.0)
    assert logs == [
        "crossing ring: ring h1 -> h4 -> h5",
        "all-to-all with PXN: hand-over of 6 messages of 2048 B over NVLink, "
        "then 12 of 2048 B on the rails",
        "all-to-all without PXN, 24 messages of 8 B",
    ]


def test_the_hierarchical_part_is_the_whole_with_its_phases_times(monkeypatch, layout):
    fab = CountingFabric()
    logs = []
    run = rail.RailRun(FakeNics(), FakeNics("nv"), rail.SwitchBytes.on(fab, layout), logs.append)
    nodes, rings = rail.node_rings(layout.domains), rail.rail_rings(layout.domains)
    h = rail.Hierarchical(
        layout.domains,
        4096,
        4,
        [result(r, time_s=1.0) for r in rings],
        [result(r, time_s=0.2) for r in nodes],
        [result(r, time_s=0.3, digest="sum") for r in nodes],
    )

    def hierarchical(nics, nv_nics, domains, size, dtype, hand):
        fab.rx["nvsw1"] += 999
        return h

    monkeypatch.setattr(rail, "run_hierarchical", hierarchical)
    part, got = run.hierarchical(layout.domains, 4096, "float32", {})
    assert got is h
    assert (part.name, part.time_s, part.wire_s, part.nvlink_s) == (
        "hierarchical",
        pytest.approx(1.5),
        1.0,
        pytest.approx(0.5),
    )
    assert (part.nvswitch_rx_bytes, part.wrong, part.digests_agree) == (999, 0, True)
    assert logs == [
        "hierarchical: reduce-scatter in each node over NVLink, 2 rings of 2048 B "
        "(one per rail), all-gather over NVLink"
    ]


def test_the_docstrings_examples_hold():
    got = doctest.testmod(rail)
    assert got.attempted >= 4 and got.failed == 0


def test_a_failed_ring_is_a_collective_error_and_a_bug_in_one_is_raised_as_it_is(monkeypatch):
    nics = SimpleNamespace(ring_qps=lambda ring: None)

    def fabric_fails(nics, hosts, sizes, **kw):
        if hosts[0] == "h3":
            raise collectives.CollectiveError("rank 1 failed: NAK storm")
        return [f"result of {hosts[0]}"]

    monkeypatch.setattr(collectives, "run_allreduce", fabric_fails)
    with pytest.raises(collectives.CollectiveError, match=r"ring \['h3', 'h4'\]: rank 1 failed"):
        rail.run_rings(nics, [["h1", "h2"], ["h3", "h4"]], 1024, "float32")

    def has_a_bug(nics, hosts, sizes, **kw):
        if hosts[0] == "h3":
            raise TypeError("unsupported operand")
        raise collectives.CollectiveError("rank 0 failed")

    monkeypatch.setattr(collectives, "run_allreduce", has_a_bug)
    with pytest.raises(TypeError, match="unsupported operand"):
        rail.run_rings(nics, [["h1", "h2"], ["h3", "h4"]], 1024, "float32")
    monkeypatch.setattr(collectives, "run_allreduce", fabric_fails)
    assert rail.run_rings(nics, [["h1", "h2"]], 1024, "float32") == ["result of h1"]

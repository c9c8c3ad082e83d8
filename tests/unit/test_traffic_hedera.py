"""Hedera's workload (emu/traffic/hedera.py) without a fabric: the patterns and their
premises, what is read of iperf3's answers, the runs' and the reference's bookkeeping
on a stand-in fabric, and the report's pieces. Real packets:
tests/scenarios/test_ecmp_vs_adaptive.py."""

from __future__ import annotations

import contextlib
import random

import networkx as nx
import pytest

from emu import fabric as fabric_mod
from emu.models.ecmp import fan_in
from emu.traffic import hedera, iperf

K4 = fabric_mod.fat_tree(k=4)
HOSTS = fabric_mod.hosts(K4)


def test_strides_and_random_permutations():
    stride4 = hedera.traffic(K4, "stride4", random.Random(0))
    assert stride4[0] == ("h1", "h5") and stride4[-1] == ("h16", "h4")
    assert hedera.traffic(K4, "stride1", random.Random(0))[1] == ("h2", "h3")
    for seed in range(20):
        perm = hedera.traffic(K4, "random", random.Random(seed))
        assert [s for s, _d in perm] == HOSTS
        assert sorted(d for _s, d in perm) == sorted(HOSTS) and all(s != d for s, d in perm)
    assert hedera.traffic(K4, "random", random.Random(3)) == hedera.traffic(
        K4, "random", random.Random(3)
    )


def test_staggered_sends_to_the_edge_the_pod_or_elsewhere_by_its_probabilities():
    def where(p_edge, p_pod):
        flows = hedera.traffic(K4, "staggered", random.Random(1), p_edge, p_pod)
        assert [s for s, _d in flows] == HOSTS and all(s != d for s, d in flows)
        node = K4.nodes
        return {
            "edge"
            if node[s]["leaf"] == node[d]["leaf"]
            else "pod"
            if node[s]["pod"] == node[d]["pod"]
            else "other"
            for s, d in flows
        }

    assert where(1.0, 0.0) == {"edge"}
    assert where(0.0, 1.0) == {"pod"}
    assert where(0.0, 0.0) == {"other"}
    assert where(0.2, 0.3) == {"edge", "pod", "other"}


def test_the_premises_of_the_patterns():
    assert (
        hedera.pattern_misfit("stride16", 16) == "stride16 on 16 hosts sends every host to itself"
    )
    assert hedera.pattern_misfit("stride4", 16) is None
    assert hedera.pattern_misfit("random", 16) is None
    assert hedera.fat_tree_misfit(K4) is None
    assert hedera.fat_tree_misfit(fabric_mod.fat_tree(k=6)) is None
    leaf_spine = fabric_mod.leaf_spine()
    assert hedera.fat_tree_misfit(leaf_spine).startswith(
        "is not a k-ary fat tree: its kind is 'leaf_spine'"
    )
    moved = K4.copy()
    moved.nodes["h1"]["pod"] = 3
    assert hedera.fat_tree_misfit(moved) == (
        "is not the k=4 fat tree its kind says: h1 has pod 3, not 0"
    )


def test_a_workload_draws_its_matrices_from_one_seed_pattern_by_pattern():
    e = hedera.Elephants(duration_s=10.0, omit_s=4.0)
    work = hedera.Workload.draw(K4, ["random", "stride4", "staggered"], 3, 7, e, 0.2, 0.3)
    assert work.seeds == [7, 8, 9] and work.elephants == e and work.graph is K4
    assert list(work.matrices) == ["random", "stride4", "staggered"]
    rng = random.Random(7)
    expected = {
        pat: [hedera.traffic(K4, pat, rng, 0.2, 0.3) for _ in range(3)]
        for pat in ("random", "stride4", "staggered")
    }
    assert work.matrices == expected
    assert work.matrices["random"][0] != work.matrices["random"][1]


def test_ecmp_expectations_by_pattern():
    got = hedera.ecmp_expectations(K4, ["stride1", "stride4"], 60, random.Random(1))
    assert list(got) == ["stride1", "stride4"]
    # Stride 1's few flows that leave their edge switch never meet: no collision.
    assert got["stride1"] == pytest.approx(1.0)
    assert 0.5 < got["stride4"] < 0.75  # every flow crosses the core, where hashes collide
    assert got == hedera.ecmp_expectations(K4, ["stride1", "stride4"], 60, random.Random(1))


# ----- on a stand-in fabric --------------------------------------------------------------


class StandIn:
    """A fabric that answers what hedera asks: reseed, trace_path, controller_status."""

    def __init__(self, graph):
        self.graph = graph
        self.seeds = []
        self.traces = []

    def reseed(self, seed):
        self.seeds.append(seed)

    def trace_path(self, src, dst, proto, sport, dport):
        self.traces.append((src, dst, proto, sport, dport))
        return nx.shortest_path(fabric_mod.network(self.graph), src, dst)

    def controller_status(self):
        return {"adaptive": {"placements": []}}


def _doc(i, bps, rtt_us=None):
    doc = {
        "start": {"connected": [{"local_port": 40000 + i, "remote_port": 5600 + i}]},
        "end": {"sum_received": {"bits_per_second": bps}},
    }
    if rtt_us is not None:
        doc["end"]["streams"] = [{"sender": {"mean_rtt": rtt_us}}]
    return doc


@pytest.fixture
def iperf3(monkeypatch):
    """iperf3 stood in: each flow receives 1 Mbit/s + 0.1 per flow index, RTT 20 ms + 1 per index."""
    started = []

    def start_many(fab, flows, duration_s, first_port, omit_s, congestion):
        started.append((list(flows), duration_s, first_port, omit_s, congestion))
        return list(range(len(flows)))

    def finish(fab, i, timeout_s):
        return _doc(i, 1e6 + i * 1e5, 20000 + i * 1000)

    monkeypatch.setattr(iperf, "start_many", start_many)
    monkeypatch.setattr(iperf, "finish", finish)
    return started


def test_measure_reads_each_flows_throughput_ports_and_rtt(iperf3):
    e = hedera.Elephants(10.0, 4.0, "cubic", first_port=6000)
    got = hedera.measure(StandIn(K4), [("h1", "h5"), ("h2", "h6")], e)
    assert got.total_bps == pytest.approx(2.1e6)
    assert got.flow_bps == [1e6, 1.1e6]
    assert got.ports == [(40000, 5600), (40001, 5601)]
    assert got.rtt_s == pytest.approx([0.020, 0.021])
    assert iperf3 == [([("h1", "h5"), ("h2", "h6")], 10.0, 6000, 4.0, "cubic")]
    assert hedera.mean_rtt_s(_doc(0, 1e6)) == 0.0  # no TCP_INFO, no RTT


def test_measure_names_every_flow_iperf3_failed(monkeypatch, iperf3):
    monkeypatch.setattr(
        iperf, "finish", lambda fab, i, timeout_s: {"error": "refused"} if i else _doc(i, 1e6)
    )
    with pytest.raises(RuntimeError, match=r"iperf3 failed: h2->h6: refused$"):
        hedera.measure(StandIn(K4), [("h1", "h5"), ("h2", "h6")], hedera.Elephants(5.0))


def test_traced_asks_the_switches_for_data_one_way_and_acks_the_other():
    fab = StandIn(K4)
    data, acks = hedera.traced(fab, [("h1", "h5")], [(40000, 5600)])
    assert fab.traces == [("h1", "h5", "tcp", 40000, 5600), ("h5", "h1", "tcp", 5600, 40000)]
    assert data[0][0] == "h1" and data[0][-1] == "h5" and acks[0][0] == "h5"


def test_run_patterns_runs_every_matrix_under_its_seed(iperf3):
    work = hedera.Workload.draw(K4, ["stride4", "stride8"], 2, 10, hedera.Elephants(5.0))
    fab, lines, after = StandIn(K4), [], []
    runs = hedera.run_patterns(
        fab, work, trace=True, between_runs=after.append, log=lines.append, label="ecmp"
    )
    assert fab.seeds == [10, 11, 10, 11] and after == [fab] * 4
    assert [f for f, *_ in iperf3] == [*work.matrices["stride4"], *work.matrices["stride8"]]
    flows = len(HOSTS)
    total = sum(1e6 + i * 1e5 for i in range(flows))
    assert runs.total_bps == {"stride4": [total] * 2, "stride8": [total] * 2}
    assert len(runs.flow_bps["stride8"][1]) == flows and len(runs.rtt_s["stride4"][0]) == flows
    assert len(runs.paths["stride4"]) == 2 and len(runs.ack_paths["stride8"][0]) == flows
    assert lines[0] == f"  ecmp stride4 seed 10: {total / 1e6:.1f} Mbit/s"
    untraced = hedera.run_patterns(StandIn(K4), work, log=lines.append)
    assert untraced.paths == {} and untraced.ack_paths == {} and untraced.rtt_s


class Ctx:
    """A scenario context that opens stand-in fabrics and keeps what it was asked."""

    def __init__(self):
        self.opened, self.lines = [], []

    @contextlib.contextmanager
    def fabric(self, graph, label, **options):
        self.opened.append((graph, label, options))
        yield StandIn(graph)

    def log(self, line):
        self.lines.append(line)


def test_the_non_blocking_reference_runs_each_fan_in_and_one_flow_alone(iperf3):
    perm = hedera.traffic(K4, "stride4", random.Random(0))
    into_one = [(h, "h1") for h in HOSTS[1:3]] + perm[3:]
    work = hedera.Workload(
        K4, {"stride4": [perm, perm], "other": [into_one]}, [0, 1], hedera.Elephants(5.0)
    )
    ctx = Ctx()
    ref = hedera.measure_nonblocking(ctx, work, 3, 2_000_000, lone_flow=True, seed=4)
    [(graph, label, options)] = ctx.opened
    assert (label, options) == ("nonblocking", {"seed": 4})
    assert fabric_mod.hosts(graph) == HOSTS and graph.graph["kind"] == "single_switch"
    assert {d["rate_bps"] for _u, _v, d in graph.edges(data=True)} == {2_000_000}
    # 3 runs of each fan-in (the second stride4 matrix adds none), then the lone flow 3 times.
    assert [len(f) for f, *_ in iperf3] == [16] * 3 + [15] * 3 + [1] * 3
    assert iperf3[-1][0] == [("h1", "h5")]
    assert set(ref.runs_bps) == {fan_in(perm), fan_in(into_one)}
    assert all(len(v) == 3 for v in ref.runs_bps.values()) and ref.alone_bps == [1e6] * 3
    assert list(ref.flow_bps) == [str(fan_in(perm)), str(fan_in(into_one))]
    assert ctx.lines[-1] == "  non-blocking, one flow alone: 1.000 Mbit/s"
    assert hedera.measure_nonblocking(Ctx(), work, 2, 2_000_000).alone_bps == []


def test_the_reference_normalises_each_run_by_its_fan_in():
    ref = hedera.Reference(runs_bps={(1, 1): [10.0, 12.0], (2,): [5.0, 5.0]})
    assert ref.mean_bps() == {(1, 1): 11.0, (2,): 5.0}
    matrices = {"x": [[("a", "b"), ("b", "a")], [("a", "c"), ("b", "c")]]}
    assert ref.normalised({"x": [5.5, 4.0]}, matrices) == {"x": [0.5, 0.8]}


# ----- the report's pieces ----------------------------------------------------------------


NORM = {
    "ecmp": {"stride4": [0.5, 0.7], "random": [0.6, 0.6]},
    "adaptive": {"stride4": [0.9, 0.95], "random": [0.8, 0.9]},
}


def test_the_normalised_table():
    cols, rows = hedera.normalised_table(["stride4", "random"], ["ecmp", "adaptive"], NORM)
    assert cols == ["pattern", "ecmp (min-max)", "adaptive (min-max)", "adaptive / ecmp"]
    assert rows[0] == ["stride4", "0.60 (0.50-0.70)", "0.93 (0.90-0.95)", "1.54x"]
    assert rows[1] == ["random", "0.60 (0.60-0.60)", "0.85 (0.80-0.90)", "1.42x"]
    cols, rows = hedera.normalised_table(["random"], ["ecmp"], NORM)
    assert cols == ["pattern", "ecmp (min-max)"] and rows == [["random", "0.60 (0.60-0.60)"]]


def test_the_plot_is_written(tmp_path):
    path = hedera.plot_normalised(
        tmp_path / "p.png",
        ["stride4", "random"],
        ["ecmp", "adaptive"],
        NORM,
        {"stride4": 0.62, "random": 0.6},
        "a title",
    )
    assert path == tmp_path / "p.png" and path.read_bytes()[:4] == b"\x89PNG"


def test_matrices_and_paths_as_metrics_keep_them_and_back():
    matrices = {"stride4": [[("h1", "h5"), ("h2", "h6")]]}
    assert hedera.matrices_text(matrices) == {"stride4": [["h1->h5", "h2->h6"]]}
    assert hedera.matrices_from_text(hedera.matrices_text(matrices)) == matrices
    paths = {"stride4": [[["h1", "e1", "h2"], ["h2", "e1", "h1"]]]}
    assert hedera.paths_text(paths) == {"stride4": [["h1 e1 h2", "h2 e1 h1"]]}
    assert hedera.paths_from_text(hedera.paths_text(paths)) == paths

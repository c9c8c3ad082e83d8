"""The ring deadlock workload's pure pieces (emu/traffic/deadlock.py), on typed answers
(emu/answers.py) written by hand: the ring and its routes, the wait-for graph read from
the switches' pause state, the cycle's hops, goodput from NIC samples, and the two runs'
results (the pfc-deadlock scenario's metrics keys). The runs on real packets:
tests/scenarios/test_pfc_deadlock.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import networkx as nx
import pytest

from controllers import ring_next_hops
from emu.answers import (
    BufferState,
    FlowStats,
    LivePort,
    NicSample,
    QueueCounters,
    WatchdogEvent,
    WatchdogReport,
)
from emu.config import BufferSpec
from emu.traffic import deadlock as ring
from emu.traffic.deadlock import DeadlockRun, TaggerRun

SWITCHES = ["s1", "s2", "s3", "s4"]
XOFF = 100_000
WALL_ON = 1_700_000_000.0  # when each watchdog came on (unix time)


@pytest.fixture(scope="module")
def graph():
    return ring.ring_graph(10.0, 0.1)


# ----- typed answers, by hand -------------------------------------------------------


def _port(n: int, depth3: int = 0, paused=(), pausing=()) -> LivePort:
    depth = [0] * 8
    depth[3] = depth3
    zeros = [0] * 8
    return LivePort(
        n, f"x-eth{n}", True, 10**7, 0, 0, depth, list(paused), [0.0] * 8, list(pausing),
        zeros, zeros, zeros, 0,
    )  # fmt: skip


def frozen(broken: str | None = None) -> dict:
    """The live state of a deadlocked ring: every switch's clockwise port (3) paused on
    priority 3 with frames, its port from its predecessor (2) and its host port (1)
    pausing their peers. `broken`: that switch no longer pauses its predecessor."""
    return {
        sw: {
            1: _port(1, pausing=[3]),
            2: _port(2, pausing=[] if sw == broken else [3]),
            3: _port(3, depth3=30_000, paused=[3]),
        }
        for sw in SWITCHES
    }


def thawed() -> dict:
    return {sw: {n: _port(n) for n in (1, 2, 3)} for sw in SWITCHES}


def _buffer(ingress: int, headroom: int, xoff_sent: int) -> BufferState:
    q = (2, 3)
    return BufferState(
        1 << 20, 0, 0, XOFF, {}, {}, {}, {q: xoff_sent}, {}, frozenset({q}),
        {q: ingress}, {q: headroom}, {}, {},
    )  # fmt: skip


def _queues(tx: int) -> dict:
    return {n: [QueueCounters(0, 0, tx, 0, 0, 0, 0) for _ in range(8)] for n in (1, 2, 3)}


def snap(live: dict, ingress: int = 99_000, headroom: int = 0, xoff_sent: int = 5, tx: int = 0):
    """`ring.snapshot`'s shape: the live state and every switch's counters (only the
    fields the workload reads are real; the rest of SwitchCounters is left out)."""
    counters = {
        sw: SimpleNamespace(buffer=_buffer(ingress, headroom, xoff_sent), queues=_queues(tx))
        for sw in SWITCHES
    }
    return {"live": live, "counters": counters}


def samples(points: list[tuple[float, int]], qpn: int = 1) -> list[NicSample]:
    return [NicSample(t, {}, {qpn: b}, {}) for t, b in points]


# ----- the ring and its routes ------------------------------------------------------


def test_the_ring_runs_at_the_rate_and_stands_for_the_modelled_nic(graph):
    assert {d["rate_bps"] for _u, _v, d in graph.edges(data=True)} == {10_000_000}
    assert graph.graph["time_scale"] == pytest.approx(10.0)  # 100 Mbit/s over 10


def test_each_host_sends_two_switches_on(graph):
    assert ring.ring_flows(graph) == [("h1", "h3"), ("h2", "h4"), ("h3", "h1"), ("h4", "h2")]


def test_the_routes_turn_clockwise_and_load_every_ring_link_twice(graph):
    paths = ring.ring_paths(graph, ring.ring_flows(graph))
    assert paths[2] == [("h3", "s3"), ("s3", "s4"), ("s4", "s1"), ("s1", "h1")]
    ring_links = [link for path in paths for link in path[1:-1]]
    assert sorted(set(ring_links)) == [("s1", "s2"), ("s2", "s3"), ("s3", "s4"), ("s4", "s1")]
    assert all(ring_links.count(link) == 2 for link in ring_links)


def test_the_routes_are_the_ones_the_next_hop_policy_installs(graph):
    topo = nx.DiGraph()
    dpid = {sw: graph.nodes[sw]["dpid"] for sw in SWITCHES}
    for (sw, port), (peer, _) in ring.peer_ports(graph).items():
        topo.add_edge(dpid[sw], dpid[peer], port=port)
    for path in ring.ring_paths(graph, ring.ring_flows(graph)):
        dst = dpid[path[-1][0]]
        for here, nxt in path[1:-1]:
            port = graph.edges[here, nxt]["ports"][here]
            assert ring_next_hops.next_hops(topo, dpid[here], dst) == {port}


def test_the_qos_makes_both_tagger_queues_lossless_with_ecn_off():
    qos = ring.ring_qos({"enabled": False})
    assert qos["pfc"]["lossless_priorities"] == [3, 4]
    assert qos["ecn"] == {"enabled": False} and qos["watchdog"] == {"enabled": False}


# ----- the wait-for graph -----------------------------------------------------------


def test_a_frozen_ring_is_one_wait_for_cycle_through_every_switch(graph):
    cycle = ring.deadlock_cycle(graph, frozen())
    assert sorted(cycle) == [(sw, 3, 3) for sw in SWITCHES]
    g = ring.wait_for_graph(graph, frozen())
    # s1's clockwise egress waits for s2's, held by s2's ingress from s1 (port 2).
    assert g.edges[("s1", 3, 3), ("s2", 3, 3)]["ingress"] == ("s2", 2, 3)


def test_an_egress_does_not_wait_for_the_port_it_is_paused_through(graph):
    """s2's port back to s1, paused with frames too, is not what holds s1: s1's frames
    into s2 can only leave s2 by its other ports."""
    live = frozen()
    live["s2"][2] = _port(2, depth3=5_000, paused=[3], pausing=[3])
    g = ring.wait_for_graph(graph, live)
    assert set(g.successors(("s1", 3, 3))) == {("s2", 3, 3)}


def test_one_switch_that_stops_pausing_breaks_the_cycle(graph):
    assert ring.deadlock_cycle(graph, frozen(broken="s3")) == []
    assert ring.deadlock_cycle(graph, thawed()) == []


def test_a_paused_queue_without_frames_waits_for_nothing(graph):
    live = frozen()
    live["s2"][3] = _port(3, depth3=0, paused=[3])
    assert ring.deadlock_cycle(graph, live) == []


def test_each_hop_names_the_waiting_egress_and_the_ingress_that_holds_it(graph):
    s = snap(frozen(), ingress=99_000, headroom=0, xoff_sent=7)
    hops = ring.cycle_hops(graph, s, ring.deadlock_cycle(graph, s["live"]))
    by_switch = {h["switch"]: h for h in hops}
    assert by_switch["s1"] == {
        "waits": "s1-eth3 prio 3",
        "switch": "s1",
        "paused_by": "s2",
        "ingress": "s2-eth2 prio 3",
        "ingress_bytes": 99_000,
        "headroom_bytes": 0,
        "xoff_bytes": XOFF,
        "xon_bytes": XOFF - BufferSpec().resume_offset_bytes,
        "xoff_sent": 7,
        "ingress_key": ("s2", 2, 3),
        "egress_key": ("s1", 3, 3),
    }
    text = ring.cycle_text(hops)
    assert sorted(text.split(" -> ")[:-1]) == [f"{sw}-eth3" for sw in SWITCHES]
    assert text.endswith(f"-> {hops[0]['switch']}")
    assert ring.cycle_text([]) == "none"


def test_ring_frames_and_paused_hosts_are_read_from_the_snapshots(graph):
    before, after = snap(frozen(), tx=10), snap(frozen(), tx=13)
    # 3 frames on each of the 8 ring ports (4 links, both ends) on each lossless priority.
    assert ring.ring_tx(graph, before, after) == 3 * 8 * 2
    assert ring.hosts_paused(graph, after) == ["h1", "h2", "h3", "h4"]
    assert ring.hosts_paused(graph, snap(thawed())) == []


def test_storms_are_timed_from_their_own_switchs_watchdog():
    wd = {
        "s1": WatchdogReport(
            {}, [WatchdogEvent(5.0, "storm", 3, 3, WALL_ON + 2.05)], frozenset(), 1, 0, 9
        ),
        "s2": WatchdogReport(
            {},
            [
                WatchdogEvent(6.0, "restored", 3, 3, WALL_ON + 4.0),
                WatchdogEvent(6.0, "storm", 3, 4, None),  # no wall time: not placed
            ],
            frozenset(),
            1,
            1,
            0,
        ),
    }
    found = ring.storms(wd, {"s1": WALL_ON, "s2": WALL_ON + 1.0})
    assert found == [
        {"t": 5.0, "kind": "storm", "port": 3, "prio": 3, "wall": WALL_ON + 2.05}
        | {"switch": "s1", "after_s": 2.05}
    ]


# ----- goodput from the receivers' samples ------------------------------------------


def test_window_bytes_takes_the_last_sample_at_or_before_each_end():
    got = {"h3": samples([(1.0, 100), (2.0, 300), (3.0, 700)])}
    qps = {("h1", "h3"): 1}
    assert ring.window_bytes(got, qps, 1.5, 3.0) == {"h1->h3": 600}
    assert ring.window_bytes(got, qps, 0.0, 2.5) == {"h1->h3": 300}  # nothing before 1.0


def test_timelines_are_mbit_per_second_between_samples_from_half_a_second_before():
    points = [(8.0, 0), (9.0, 0), (9.6, 0), (10.0, 0), (10.5, 625_000), (11.0, 625_000)]
    got = {"h3": samples(points)}
    line = ring.timelines(got, {("h1", "h3"): 1}, t0=10.0)["h1->h3"]
    assert [t for t, _ in line] == pytest.approx([-0.4, 0.0, 0.5, 1.0])
    assert line[2][1] == pytest.approx(10.0)  # 625 kB in 0.5 s
    panel = ring.goodput_panel("ring", {"h1->h3": line}, 0.5, "watchdog on")
    assert panel.lines["h1->h3"][1][2] == pytest.approx(10.0)
    assert (panel.vline, panel.vline_label) == (0.5, "watchdog on")


# ----- the runs' results ------------------------------------------------------------

DEADLOCK_KEYS = {
    "posted_bytes", "formed_after_s", "cycle", "cycle_text", "hops", "cycle_switches",
    "above_xoff", "window_formed", "bytes_formed", "window_stopped", "bytes_stopped",
    "ring_tx_stopped", "pause_refreshed", "refresh_s", "watchdog_on_at_s", "storms",
    "storms_on_cycle", "watchdog_drops", "window_recovered", "bytes_recovered", "bytes_total",
    "cycle_after_watchdog", "hosts_paused", "timelines",
}  # fmt: skip
TAGGER_KEYS = {
    "posted_bytes", "finished", "done_at_s", "goodput_bps", "cycles_seen", "timeouts",
    "retransmitted", "storms", "tagger_status", "adaptive_status", "tagged_packets",
    "bytes_total", "timelines", "rate_bps",
}  # fmt: skip


def _flows(graph):
    return {f: 1 for f in ring.ring_flows(graph)}


def _deadlock_run(graph) -> DeadlockRun:
    """Senders from t0=100; frozen from 101 until the watchdog at 106; moving again by 110."""
    run = DeadlockRun(posted=32_768, qps=_flows(graph), t0=100.0)
    run.t_formed, run.a_from, run.a_to, run.b_from, run.b_to = 101.0, 102.0, 103.0, 103.5, 105.5
    run.refresh_s = 1.68
    run.snap_b0 = snap(frozen(), ingress=99_000, xoff_sent=5, tx=40)
    run.snap_b1 = snap(frozen(), ingress=99_000, xoff_sent=7, tx=40)
    run.cycle = ring.deadlock_cycle(graph, run.snap_b1["live"])
    run.hops = ring.cycle_hops(graph, run.snap_b1, run.cycle)
    run.t_wd, run.c_to = 106.0, 114.0
    run.wall_wd = {sw: WALL_ON for sw in SWITCHES}
    points = [(100.0, 0), (101.0, 20_000), (106.0, 20_000), (110.0, 20_000), (114.0, 32_768)]
    run.samples = {h: samples(points) for h in ("h1", "h2", "h3", "h4")}
    run.snap_end = snap(thawed())
    storm = WatchdogEvent(0.0, "storm", 3, 3, WALL_ON + 2.05)
    run.wd = {sw: WatchdogReport({}, [storm], frozenset(), 1, 0, 10) for sw in SWITCHES}
    return run


def test_the_deadlock_result_holds_what_the_scenario_checks(graph):
    r = ring.deadlock_result(graph, _deadlock_run(graph))
    assert set(r) == DEADLOCK_KEYS
    assert r["cycle_switches"] == SWITCHES and len(r["hops"]) == 4
    assert not any(k.endswith("_key") for h in r["hops"] for k in h)
    assert sorted(r["above_xoff"]) == [f"{sw}-eth2 prio 3" for sw in SWITCHES]
    assert set(r["bytes_formed"].values()) == {0} and set(r["bytes_stopped"].values()) == {0}
    assert r["ring_tx_stopped"] == 0
    assert set(r["pause_refreshed"].values()) == {2}
    assert r["formed_after_s"] == pytest.approx(1.0)
    assert r["watchdog_on_at_s"] == pytest.approx(6.0)
    assert [s["after_s"] for s in r["storms_on_cycle"]] == [2.05] * 4
    assert r["watchdog_drops"] == 40
    assert set(r["bytes_recovered"].values()) == {12_768}
    assert r["cycle_after_watchdog"] == "none"
    assert r["hosts_paused"] == ["h1", "h2", "h3", "h4"]


def test_a_queue_that_fell_below_xon_is_not_full(graph):
    run = _deadlock_run(graph)
    xon = XOFF - BufferSpec().resume_offset_bytes
    run.snap_b1 = snap(frozen(), ingress=xon, xoff_sent=5)
    run.hops = ring.cycle_hops(graph, run.snap_b1, run.cycle)
    r = ring.deadlock_result(graph, run)
    assert r["above_xoff"] == [] and set(r["pause_refreshed"].values()) == {0}


def test_the_tagger_result_times_each_flow_and_counts_taggers_packets(graph):
    run = TaggerRun(posted=40_000, qps=_flows(graph), t0=100.0, rate_bps=10e6)
    run.finished, run.t_end = True, 110.0
    run.cycles_seen = ["s1-eth3 -> s2-eth3", "s1-eth3 -> s2-eth3"]
    fast = samples([(100.0, 0), (104.0, 40_000)])
    slow = samples([(100.0, 0), (104.0, 20_000), (108.0, 40_000)])
    run.samples = {"h1": fast, "h2": fast, "h3": slow, "h4": samples([(100.0, 0)])}
    run.wd = {sw: WatchdogReport({}, [], frozenset(), 0, 0, 0) for sw in SWITCHES}
    run.send_stats = {f: SimpleNamespace(timeouts=1, retransmitted=5) for f in _flows(graph)}
    tagger_flow = FlowStats(0, 0x8400, "0x4000000000000001", {}, [], 12, 0, 1.0)
    route = FlowStats(0, 100, "0x1000000000000001", {}, [], 99, 0, 1.0)
    run.flows = {sw: [tagger_flow, route] for sw in SWITCHES}
    run.status = {"tagger": {"bounces": 2}}
    r = ring.tagger_result(run)
    assert set(r) == TAGGER_KEYS
    assert r["done_at_s"] == {"h1->h3": 8.0, "h2->h4": None, "h3->h1": 4.0, "h4->h2": 4.0}
    assert r["goodput_bps"]["h3->h1"] == pytest.approx(40_000 * 8 / 4.0)
    assert r["goodput_bps"]["h2->h4"] == 0.0
    assert r["cycles_seen"] == ["s1-eth3 -> s2-eth3"]
    assert r["tagged_packets"] == {sw: 12 for sw in SWITCHES}
    assert r["tagger_status"] == {"bounces": 2} and r["adaptive_status"] is None
    assert r["storms"] == 0 and r["timeouts"]["h1->h3"] == 1

"""Fidelity measures (emu/fidelity.py) on the scheduler and the NIC model, and the run's verdict."""

from __future__ import annotations

import json

import pytest

from emu import fidelity, scenario
from emu.cli import EXIT_CHECKS_FAILED, EXIT_UNFAITHFUL, run_status
from emu.host.rnic import NicConfig, Rnic
from emu.switch.scheduler import PortScheduler

from .fakes import fidelity_record as record

RATE = 20_000_000
FRAME_S = fidelity.frame_time_s(RATE)  # 605.6 us at 20 Mbit/s
FRAME = bytes(1514)


def backlogged(sched: PortScheduler, n: int, now: float = 0.0) -> None:
    for _ in range(n):
        sched.enqueue(FRAME, 0, None, now)


def test_frames_sent_at_their_slots_are_on_time():
    sched = PortScheduler(rate_bps=RATE)
    backlogged(sched, 50)
    t = 0.0
    for _ in range(50):
        assert sched.dequeue(t) is not None
        t = sched.free_at  # the loop wakes exactly at the next slot
    snap = sched.clock.snapshot()
    assert snap["frames"] == 50 and snap["hist"][0] == 50 and snap["deficit_s"] == 0


def test_a_late_loop_shows_in_the_histogram_and_beyond_the_burst_as_lost_link_time():
    sched = PortScheduler(rate_bps=RATE)
    backlogged(sched, 3)
    sched.dequeue(0.0)
    # The loop comes back 5 frame times after the next slot: beyond the 2-frame burst.
    late_by = 5 * FRAME_S
    sched.dequeue(sched.free_at + late_by)
    snap = sched.clock.snapshot()
    assert snap["hist"][fidelity.BUCKET_NAMES.index("<10")] == 1
    assert snap["max_late_s"] == pytest.approx(late_by, rel=1e-6)
    assert sched.clock.deficit_s == pytest.approx(late_by - sched.burst_s, rel=1e-6)
    assert fidelity.on_time_share(snap, 1.0) == 0.5


def test_a_frame_queued_on_an_idle_port_is_timed_from_when_it_was_queued():
    sched = PortScheduler(rate_bps=RATE)
    sched.enqueue(FRAME, 0, None, 10.0)  # the wire has been free since t=0
    sched.dequeue(10.0 + 0.2 * FRAME_S)
    assert sched.clock.snapshot()["hist"][1] == 1  # 0.2 frame times late, not 10 s


def test_a_paused_queue_is_timed_from_its_resume():
    sched = PortScheduler(rate_bps=RATE)
    sched.enqueue(FRAME, 3, None, 0.0)
    sched.pause(3, 1.0, 0.0)
    assert sched.dequeue(0.5) is None
    sched.dequeue(1.0 + 0.05 * FRAME_S)
    assert sched.clock.snapshot()["hist"][0] == 1


def test_a_frame_the_kernel_refused_is_not_counted_twice():
    sched = PortScheduler(rate_bps=RATE)
    backlogged(sched, 1)
    frame, prio, meta = sched.dequeue(0.0)
    sched.requeue_front(frame, prio, meta)
    assert sched.clock.snapshot()["frames"] == 0
    sched.dequeue(0.0)
    assert sched.clock.snapshot()["frames"] == 1


def test_the_nic_model_times_its_frames_against_its_wire():
    nic = Rnic(
        NicConfig(mac="02:00:00:00:00:01", ip="10.0.0.1", rate_bps=RATE, dcqcn=False), now=0.0
    )
    nic.connect(1, 1, "02:00:00:00:00:02", "10.0.0.2", 49153, 0.0)
    nic.post_send(1, 64 * 1024, 0.0)
    t, late = 0.0, 0
    while nic.next_frame(t) is not None:
        t = nic.free_at
        late += 1
        if late == 10:
            t += 4 * FRAME_S  # the loop is late once
    snap = nic.clock.snapshot()
    assert snap["frames"] == late
    assert snap["hist"][0] == late - 1
    assert snap["hist"][fidelity.BUCKET_NAMES.index("<5")] == 1


def test_a_faithful_run_passes_every_measure():
    verdict = fidelity.judge([("", record("leaf1")), ("", record("h1", kind="nic"))])
    assert verdict.faithful and verdict.processes == 2 and verdict.frames == 2000


@pytest.mark.parametrize(
    "bad, measure, named",
    [
        (dict(hist=[900, 50, 30, 20, 0, 0, 0, 0]), "on_time", "leaf2 port 3 (leaf2-eth3)"),
        (dict(stall_frames=25.0), "stall", "leaf2 (switch)"),
        (dict(drops=3), "kernel_drops", "leaf2 port 3"),
        (dict(deficit_s=0.5), "deficit", "leaf2 port 3"),
    ],
)
def test_each_measure_fails_naming_the_process_that_fell_behind(bad, measure, named):
    verdict = fidelity.judge([("pfc", record("leaf1")), ("pfc", record("leaf2", **bad))])
    assert not verdict.faithful
    [failure] = verdict.failures()
    assert failure.measure == measure
    assert f"pfc/{named}" in failure.where and named.split()[0] in failure.text


def test_a_port_with_few_frames_is_not_judged_on_a_percentile():
    verdict = fidelity.judge([("", record(hist=[10, 0, 0, 5, 0, 0, 0, 0]))])
    assert "on_time" not in verdict.worst


def ctx_with_records(tmp_path, records, passed=True) -> scenario.Context:
    ctx = scenario.Context("x", {}, tmp_path)
    # What ctx.fabric keeps of a fabric labelled "lossy" as it closes (emu/runs.py).
    ctx.fabrics.documents.append(("lossy", {"processes": records, "missing": []}))
    ctx.check("the network's own check", passed, 1, "1")
    scenario.add_fidelity(ctx)
    return ctx


def test_an_unfaithful_run_says_so_in_one_line_and_exits_3(tmp_path):
    ctx = ctx_with_records(tmp_path, [record("leaf1"), record("spine2", stall_frames=40.0)])
    report = scenario.render_report(ctx)
    line = report.splitlines()[-1]
    assert line.startswith("unfaithful run: lossy/spine2 stalled") and "40.0 frame times" in line
    assert run_status(ctx) == EXIT_UNFAITHFUL
    assert ctx.metrics["fidelity"]["faithful"] is False
    assert "fidelity (the emulator" in report


def test_failed_network_checks_keep_exit_1_even_when_unfaithful(tmp_path):
    ctx = ctx_with_records(tmp_path, [record("spine2", stall_frames=40.0)], passed=False)
    assert run_status(ctx) == EXIT_CHECKS_FAILED
    assert "may be the emulator's" in scenario.render_report(ctx).splitlines()[-1]


def test_a_faithful_run_has_four_passing_fidelity_checks(tmp_path):
    ctx = ctx_with_records(tmp_path, [record("leaf1")])
    fid = [c for c in ctx.checks if c.fidelity]
    assert len(fid) == 4 and all(c.passed for c in fid)
    assert run_status(ctx) == 0
    assert "unfaithful" not in scenario.render_report(ctx)


def test_a_run_without_fidelity_records_is_not_called_faithful(tmp_path):
    ctx = scenario.Context("x", {}, tmp_path)
    ctx.check("the network's own check", True, 1, "1")
    scenario.add_fidelity(ctx)
    assert run_status(ctx) == EXIT_UNFAITHFUL


def test_ctl_renders_a_record_with_its_buckets():
    text = fidelity.render_record(record("leaf1", hist=[90, 5, 3, 2, 0, 0, 0, 0]))
    assert "leaf1-eth3" in text and "98.00%" in text and "<0.1" in text


def test_a_stall_with_nothing_waiting_is_counted_apart_and_not_judged():
    loop = fidelity.LoopMonitor(FRAME_S)
    loop.pass_done(500 * FRAME_S, mattered=False)  # an idle NIC building its data
    loop.pass_done(3 * FRAME_S, mattered=True)
    snap = loop.snapshot()
    assert snap["longest_stall_s"] == pytest.approx(3 * FRAME_S, rel=1e-3)
    assert snap["idle_longest_stall_s"] == pytest.approx(500 * FRAME_S, rel=1e-3)
    assert snap["stalls_over_1"] == 1 and snap["stalls_over_10"] == 0


def test_stalls_are_judged_where_lossless_frames_flow():
    lossy = dict(record("leaf1", stall_frames=25.0), lossless_frames=0)
    assert fidelity.judge([("", lossy)]).worst["stall"].passed
    lossless = dict(record("leaf1", stall_frames=25.0), lossless_frames=7)
    finding = fidelity.judge([("", lossless)]).worst["stall"]
    assert not finding.passed and "7 lossless frames" in finding.text


def test_lost_link_time_is_a_share_of_the_time_the_link_was_in_use():
    rec = record("leaf1", deficit_s=0.05)
    rec["ports"]["3"]["busy_s"] = 0.45  # a short busy phase of a 10 s run
    finding = fidelity.judge([("", rec)]).worst["deficit"]
    assert finding.value == pytest.approx(0.1) and not finding.passed
    sched = PortScheduler(rate_bps=RATE)
    backlogged(sched, 2)
    sched.dequeue(0.0)
    assert sched.clock.busy_s == pytest.approx(FRAME_S)


def test_a_nearly_idle_port_is_not_judged_on_its_share_of_lost_time():
    rec = record("e6", hist=[3, 0, 0, 0, 0, 0, 0, 1], deficit_s=0.013)
    rec["ports"]["3"]["busy_s"] = 0.002  # four ARP frames; one was read 13 ms late
    verdict = fidelity.judge([("", rec)])
    assert "deficit" not in verdict.worst and verdict.worst["kernel_drops"].passed
    rec["ports"]["3"]["kernel_drops"] = 1  # drops are judged on every port
    assert not fidelity.judge([("", rec)]).worst["kernel_drops"].passed


def test_a_frame_that_found_its_port_idle_is_late_but_loses_no_link_time():
    sched = PortScheduler(rate_bps=RATE)
    sched.enqueue(FRAME, 0, None, 10.0)
    sched.dequeue(10.0 + 20 * FRAME_S)  # read 20 frame times late
    assert sched.clock.snapshot()["hist"][fidelity.BUCKET_NAMES.index("<100")] == 1
    assert sched.clock.deficit_s == 0.0


def stalled_at(name: str, stall_frames: float, ended_at: float) -> dict:
    rec = record(name, stall_frames=stall_frames)
    rec["loop"]["longest_stall_ended_at"] = ended_at
    return rec


def test_a_stall_every_process_shared_is_called_the_whole_emulator_stopping():
    # Real-time throttling stops every switch and NIC for the rest of a second:
    # their longest stalls overlap. The line must not blame one loop alone.
    records = [
        ("", stalled_at(n, 40.0 + i, 100.0 + i * FRAME_S) | {"pid": 100 + i})
        for i, n in enumerate(("leaf1", "leaf2", "spine1", "h1"))
    ]
    stall = fidelity.judge(records).worst["stall"]
    assert not stall.passed and stall.where == "h1 (switch)"
    assert "4 of 4 processes had their longest stall at that moment" in stall.text


def test_a_shared_stall_is_counted_within_its_fabric_and_once_per_process():
    # mixed-traffic runs two fabrics one after the other ("correct", then
    # "misconfigured"); two switches share a process. The NIC h1 and the
    # process of spine1 and leaf1 stalled together: 2 processes, + h3 idle.
    at = 11879.22
    correct = [
        stalled_at("spine1", 10.3, at) | {"pid": 1},
        stalled_at("leaf1", 10.3, at) | {"pid": 1},
        stalled_at("leaf2", 1.0, at - 3.0) | {"pid": 2},
        stalled_at("h1", 10.6, at + 1e-5) | {"pid": 3},
        stalled_at("h3", 10.4, at) | {"pid": 4},
    ]
    other = [stalled_at(n, 1.0, at - 20.0) | {"pid": 10 + i} for i, n in enumerate("abcdef")]
    records = [("correct", r) for r in correct] + [("misconfigured", r) for r in other]
    stall = fidelity.judge(records).worst["stall"]
    assert stall.where.startswith("correct/h1")
    assert "3 of 4 processes had their longest stall at that moment" in stall.text
    correct[4]["loop"]["longest_stall_ended_at"] = at - 5.0  # h3 elsewhere: 2 of 4, not the machine
    assert "whole emulator" not in fidelity.judge(records).worst["stall"].text


def test_a_stall_of_one_process_alone_is_its_own():
    records = [
        ("", stalled_at("leaf1", 40.0, 100.0)),
        ("", stalled_at("leaf2", 30.0, 50.0)),
        ("", stalled_at("spine1", 30.0, 70.0)),
        ("", stalled_at("h1", 0.5, 100.0)),
    ]
    stall = fidelity.judge(records).worst["stall"]
    assert not stall.passed and stall.where == "leaf1 (switch)"
    assert "whole emulator" not in stall.text


def test_the_loop_keeps_when_its_longest_stall_ended():
    loop = fidelity.LoopMonitor(FRAME_S)
    loop.woke(
        awake_since=10.0,
        asleep_at=10.0,
        timeout=0.0,
        woke=10.0 + 20 * FRAME_S,
        due_at=10.0,
        frames_ready=True,
    )
    snap = loop.snapshot()
    assert snap["longest_stall_ended_at"] == pytest.approx(10.0 + 20 * FRAME_S, abs=1e-6)


def test_the_longest_stall_says_how_many_frames_its_pass_read():
    """A backlog drained in one pass reads hundreds of frames; a slow frame, a few."""
    loop = fidelity.LoopMonitor(FRAME_S)
    loop.woke(10.0, 10.0 + 3 * FRAME_S, 0.0, 10.0 + 3 * FRAME_S, 10.0, True, ("port",), 0.001, 5)
    loop.woke(20.0, 20.0 + 30 * FRAME_S, 0.0, 20.0 + 30 * FRAME_S, 20.0, True, ("port",), 0.02, 640)
    loop.woke(30.0, 30.0 + 2 * FRAME_S, 0.0, 30.0 + 2 * FRAME_S, 30.0, True, ("port",), 0.0, 1)
    assert loop.snapshot()["longest_stall_frames"] == 640
    rec = record("leaf3", stall_frames=30.0)
    rec["loop"].update(loop.snapshot())
    stall = fidelity.judge([("ecn", rec)]).worst["stall"]
    assert "using 20.0 ms of CPU and reading 640 frames" in stall.text, stall.text


def test_the_report_quotes_the_hypervisor_s_steal_over_the_fabrics_windows(tmp_path):
    documents = [
        (fab, {"processes": [record()], "missing": [], "machine": {"steal_s": steal}})
        for fab, steal in (("a", 0.05), ("b", 0.02))
    ]
    assert fidelity.machine_of(documents)["steal_s"] == pytest.approx(0.07)
    assert fidelity.machine_sample().steal_s >= 0.0
    ctx = scenario.Context("t", {}, tmp_path)
    ctx.fabrics.documents.extend(documents)
    scenario.add_fidelity(ctx)
    assert "(steal): 70 ms" in scenario.render_report(ctx)
    assert ctx.metrics["fidelity"]["steal_s"] == pytest.approx(0.07)
    # Documents without the machine's idle time or pressure (older runs) report none.
    assert "the whole machine meanwhile" not in scenario.render_report(ctx)
    assert ctx.metrics["fidelity"]["idle_share"] is None
    # An unfaithful run's one line names the steal too: the likeliest cause on a busy VM.
    ctx.check(
        "fidelity: stand-in", False, "leaf1 stalled 30 ms", "<= 10 frame times", fidelity=True
    )
    assert (
        scenario.render_report(ctx)
        .splitlines()[-1]
        .endswith("the VM's host took 70 ms of CPU meanwhile (steal)")
    )


def test_the_machine_window_weights_idle_and_pressure_by_window(tmp_path):
    start = fidelity.MachineSample(
        at=100.0, steal_s=1.0, idle_s=50.0, total_s=200.0, pressure_s=7.0
    )
    end = fidelity.MachineSample(
        at=110.0, steal_s=1.02, idle_s=54.0, total_s=220.0, pressure_s=10.0
    )
    window = fidelity.machine_window(start, end)
    # 2 CPUs for 10 s: 20 s of CPU time, 4 of them idle; someone waited 3 of the 10 s.
    assert window == {
        "window_s": 10.0,
        "steal_s": 0.02,
        "steal_share": 0.001,
        "idle_share": 0.2,
        "cpu_pressure_share": 0.3,
    }
    no_psi = fidelity.MachineSample(
        at=110.0, steal_s=1.0, idle_s=54.0, total_s=220.0, pressure_s=None
    )
    assert fidelity.machine_window(start, no_psi)["cpu_pressure_share"] is None
    documents = [
        (fab, {"processes": [record()], "missing": [], "machine": machine})
        for fab, machine in (
            ("a", window),
            ("b", {**window, "window_s": 30.0, "idle_share": 0.6}),
        )
    ]
    assert fidelity.machine_of(documents) == {
        "steal_s": 0.04,
        "idle_share": pytest.approx(0.5),  # (0.2 x 10 + 0.6 x 30) / 40
        "cpu_pressure_share": pytest.approx(0.3),
    }
    ctx = scenario.Context("t", {}, tmp_path)
    ctx.fabrics.documents.extend(documents)
    scenario.add_fidelity(ctx)
    text = scenario.render_report(ctx)
    assert "CPUs idle 50% of the time; some task waited for a CPU 30% of the time (PSI)" in text
    sample = fidelity.machine_sample()  # this machine's own counters read at all
    assert sample.total_s > 0 and sample.idle_s <= sample.total_s


def test_garbage_collections_are_recorded_by_generation_with_the_longest_pause():
    import gc

    monitor = fidelity.GcMonitor.process()
    monitor.reset()
    for _ in range(1000):
        a: list = []
        a.append(a)  # a cycle: only the collector frees it
    gc.collect()
    snap = monitor.snapshot()
    assert snap["collections"][2] >= 1
    assert snap["longest_pause_s"] > 0 and snap["total_pause_s"] >= snap["longest_pause_s"]
    assert fidelity.GcMonitor.process() is monitor  # one collector, one monitor


def test_freezing_keeps_set_up_objects_out_of_later_collections():
    import gc

    keep = [[i] for i in range(50_000)]  # what a process builds at start-up
    try:
        frozen = fidelity.GcMonitor.freeze()
        assert frozen >= len(keep)
        assert len(gc.get_objects(generation=2)) < len(keep)
        # Reported from the count taken at freeze time (counting walks them all).
        assert fidelity.GcMonitor.process().snapshot()["frozen_objects"] == frozen
    finally:
        gc.unfreeze()
    assert len(gc.get_objects(generation=2)) >= len(keep)


def test_a_stall_that_held_a_garbage_collection_says_so():
    rec = stalled_at("leaf3", 27.2, 100.0)
    rec["gc"] = {
        "collections": [900, 80, 1],
        "longest_pause_s": 0.0297,
        "longest_generation": 2,
        "longest_ended_at": 100.0 - 0.001,
        "total_pause_s": 0.05,
        "frozen_objects": 0,
    }
    stall = fidelity.judge([("dcqcn", rec)]).worst["stall"]
    assert not stall.passed
    assert "of which a garbage collection (generation 2) took 29.7 ms" in stall.text
    rec["gc"]["longest_ended_at"] = 50.0  # a pause elsewhere in the run is not named
    assert "garbage collection" not in fidelity.judge([("dcqcn", rec)]).worst["stall"].text
    assert "gc: 981 collections" in fidelity.render_record(rec)


def test_switches_that_share_a_process_count_as_one_process_in_the_table():
    a, b, c = record("leaf1"), record("spine1"), record("leaf2")
    for rec, pid in ((a, 10), (b, 10), (c, 20)):
        rec["pid"] = pid
    a["process_switches"] = b["process_switches"] = ["leaf1", "spine1"]
    a["cpu"]["cpu_share"] = b["cpu"]["cpu_share"] = 0.8
    a["sched"] = b["sched"] = c["sched"] = {"policy": "SCHED_RR", "priority": 10}
    records = [("", a), ("", b), ("", c)]
    [row] = fidelity.table_rows(records)
    assert row[1] == 2
    assert row[7] == "80% leaf1 (+1 in its process)"
    assert fidelity.sched_summary(records).startswith(
        "scheduling of the 2 switch and NIC processes"
    )


def test_a_run_the_fabric_fails_midway_prints_its_report_and_fidelity_before_the_error(
    tmp_path, monkeypatch, capsys
):
    """A condition that never came, in a run where the emulator fell behind: the user sees
    what did happen and that the machine may be why (emu run, then the error, exit 1)."""
    import types

    from emu import cli
    from emu.registry import FabricError

    def stalls_then_times_out(ctx):
        # What ctx.fabric kept of the fabric "ring" as the error closed it (emu/runs.py).
        ctx.fabrics.documents.append(
            ("ring", {"processes": [record("s2", stall_frames=33.0)], "missing": []})
        )
        ctx.check("traffic started", True, 4, "4 flows")
        raise FabricError("timed out after 10 s waiting for a wait-for cycle")

    fake = types.SimpleNamespace(PARAMS={}, run=stalls_then_times_out, __doc__="x")
    monkeypatch.setattr(scenario, "load", lambda name: fake)
    monkeypatch.setattr(cli, "need_root", lambda what: None)
    status = cli.main(["run", "ring", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == EXIT_CHECKS_FAILED
    assert "[FAIL] scenario completed: FabricError: timed out after 10 s" in out
    assert "[PASS] traffic started" in out
    last = out.splitlines()[-1]
    assert last.startswith("unfaithful run (its failed checks may be the emulator's): ring/s2")
    assert err.strip() == "emu: timed out after 10 s waiting for a wait-for cycle"
    doc = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert doc["faithful"] is False and not doc["passed"]

"""A link cut under ping streams (emu/traffic/outage.py): the link that carried the
pings is the one cut, each sender's longest gap and when replies came back, the
controller's events that name the cut, and what goes into a scenario's context.
Pings are hand-made PingResults and the fabric a fake (tests/unit/fakes.py:
CounterFabric); the real cut runs in tests/scenarios/test_smoke.py."""

from __future__ import annotations

import time

import pytest

from emu import fabric
from emu.scenario import Context
from emu.traffic import outage
from emu.traffic.outage import LinkCut
from emu.traffic.ping import PingResult

from .fakes import CounterFabric

T0 = 1000.0  # the pings' start (unix time)
STEP = 0.02


def stream(sent: int, lost: set[int]) -> PingResult:
    """A stream whose seq n was sent at T0 + n x STEP and answered at once unless lost."""
    replied = tuple(s for s in range(1, sent + 1) if s not in lost)
    walls = tuple(T0 + s * STEP for s in replied)
    return PingResult(sent, len(replied), STEP, replied, walls, tuple(zip(replied, walls)))


def cut(results: dict, saw: list | None = None) -> LinkCut:
    return LinkCut(
        link=("leaf1", "spine2"),
        ping_bytes={"spine1": 98, "spine2": 3430},
        window_s=0.7,
        wall0=T0,
        wall_down=T0 + 1.01,  # between seq 50 and 51
        interval_s=STEP,
        duration_s=4.0,
        count=200,
        dst="h8",
        results=results,
        controller_saw=saw or [],
    )


def test_controller_events_are_those_of_the_kind_from_just_before_the_cut():
    status = {
        "events": [
            {"kind": "link_down", "t": T0 - 5.0},  # an older cut
            {"kind": "link_down", "t": T0 - 0.4},  # our clocks read a little apart
            {"kind": "host_learned", "t": T0 + 0.1},
            {"kind": "link_down", "t": T0 + 0.06},
        ]
    }
    assert [e["t"] for e in outage.controller_events(status, "link_down", T0)] == [
        T0 - 0.4,
        T0 + 0.06,
    ]
    assert outage.controller_events(status, "link_down", T0, slack_s=0.1) == [
        {"kind": "link_down", "t": T0 + 0.06}
    ]
    assert outage.controller_events({}, "link_down", T0) == []
    # Several kinds at once (failover: a link cut or a switch that left), in the log's order.
    status["events"].append({"kind": "switch_leave", "t": T0 + 0.08})
    both = outage.controller_events(status, ("link_down", "switch_leave"), T0, slack_s=0.2)
    assert [(e["kind"], e["t"]) for e in both] == [
        ("link_down", T0 + 0.06),
        ("switch_leave", T0 + 0.08),
    ]


def test_each_sender_has_its_longest_gap_and_the_worst_is_theirs():
    lc = cut({"h1": stream(200, {51, 52, 53}), "h2": stream(200, set())})
    assert lc.outages_s == {"h1": pytest.approx(3 * STEP), "h2": 0.0}
    assert lc.worst_outage_s == pytest.approx(3 * STEP)
    assert lc.t_down_s == pytest.approx(1.01) and lc.victim_bytes == 3430
    assert cut({}).worst_outage_s is None


def test_reachability_is_restored_at_the_first_reply_after_the_last_loss():
    lc = cut({"h1": stream(200, {51, 52, 53}), "h2": stream(200, {51, 55})})
    assert lc.restored_wall == pytest.approx(T0 + 56 * STEP)  # h2's, the later
    assert cut({"h1": stream(200, set())}).restored_wall == T0 + 1.01  # nothing lost


def test_the_controller_saw_it_at_its_first_event():
    saw = [{"kind": "link_down", "t": T0 + 1.2}, {"kind": "link_down", "t": T0 + 1.07}]
    assert cut({}, saw).controller_saw_wall == T0 + 1.07
    assert cut({}).controller_saw_wall is None


def test_pings_are_placed_by_when_they_were_sent():
    lc = cut({"h1": stream(5, {3})})
    assert lc.sent_s() == {"h1": [0.02, 0.04, 0.06, 0.08, 0.1]}


def test_the_report_writes_events_metrics_and_the_table(tmp_path):
    ctx = Context("t", {}, tmp_path, started_wall=T0)
    saw = [{"kind": "link_down", "t": T0 + 1.07}]
    cut({"h1": stream(200, {51, 52, 53}), "h2": stream(200, set())}, saw).report(ctx)
    assert [e["kind"] for e in ctx.events] == [
        "link_down",
        "controller saw link down",
        "reachability restored",
    ]
    assert ctx.events[0]["link"] == "leaf1-spine2" and ctx.events[1]["after_ms"] == 60
    assert ctx.events[2]["worst_outage_ms"] == 60
    assert list(ctx.metrics) == ["controller_reaction_s", "link_failure"]
    assert ctx.metrics["controller_reaction_s"] == pytest.approx(0.06)
    lf = ctx.metrics["link_failure"]
    assert list(lf) == [
        "link",
        "ping_bytes_per_first_hop",
        "t_down_s",
        "interval_s",
        "count",
        "outage_s",
        "replies",
        "sent_s",
        "controller_events",
    ]
    assert lf["link"] == ["leaf1", "spine2"] and len(lf["replies"]["h1"]) == 197
    [table] = ctx.tables
    assert table.title == (
        "link leaf1-spine2 down at t=1.01 s (from the pings' start), pings every 20 ms to h8"
    )
    assert table.rows == [["h1", pytest.approx(60)], ["h2", 0.0]]


def test_without_the_controllers_event_there_is_no_reaction_time(tmp_path):
    ctx = Context("t", {}, tmp_path, started_wall=T0)
    cut({"h1": stream(10, set())}).report(ctx)
    assert "controller_reaction_s" not in ctx.metrics
    assert [e["kind"] for e in ctx.events] == ["link_down", "reachability restored"]


def test_the_picture_marks_each_reply_and_the_cut():
    panel = cut({"h1": stream(4, {2})}).panel()
    assert panel.lines == {"h1": ([0.02, 0.04, 0.06, 0.08], [1, 0, 1, 1])}
    assert panel.vline == pytest.approx(1.01)


class Job:
    def __init__(self, result: PingResult) -> None:
        self.count, self.started_wall, self.result = result.sent, T0, result

    def wait(self) -> PingResult:
        return self.result


def test_the_cut_is_the_link_that_carried_the_pings_and_comes_after_the_watch():
    g = fabric.leaf_spine(hosts_per_leaf=2)
    fab = CounterFabric(g)
    started = []

    def starter(workload, **options):
        started.append((workload, options))
        return Job(stream(200, {51}))

    fab.starter = starter
    # The pings go over spine2: every read of leaf1's counters finds 98 more bytes there.
    fab.on_read = lambda sw: fab.send("leaf1", "spine2", 98) if sw == "leaf1" else None
    fab.status = {"events": [{"kind": "link_down", "t": time.time() + 30}]}
    t0 = time.monotonic()
    lc = outage.cut_under_pings(
        fab, "leaf1", ["spine1", "spine2"], ["h1", "h2"], "h8", watch_from_s=0.02, cut_at_s=0.08
    )
    assert time.monotonic() - t0 >= 0.08
    assert [(w, o["src"], o["dst"], o["interval_s"], o["duration_s"]) for w, o in started] == [
        ("ping", "h1", "h8", 0.02, 4.0),
        ("ping", "h2", "h8", 0.02, 4.0),
    ]
    assert fab.links_set == [("leaf1", "spine2", False)]
    assert lc.link == ("leaf1", "spine2") and lc.ping_bytes == {"spine1": 0, "spine2": 98}
    assert lc.window_s == pytest.approx(0.06, abs=0.05) and lc.count == 200
    assert lc.wall0 == T0 and len(lc.controller_saw) == 1 and set(lc.results) == {"h1", "h2"}

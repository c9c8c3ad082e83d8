"""A run's events are placed when they happened, not when the scenario logged them.

`Context.event(kind, at=...)` takes the moment itself; fault events carry
their own `wall` and are placed by it (emu/scenario.py `Context.timeline`).
"""

from __future__ import annotations

from emu import scenario


def test_events_are_placed_when_they_happened_not_when_logged(tmp_path):
    ctx = scenario.Context(name="x", params={}, out_dir=tmp_path)
    t0 = ctx.started_wall
    ctx.event("reachability restored", at=t0 + 2.5)  # learned of late, logged first
    ctx.event("link_down", at=t0 + 1.0, link="leaf1-spine1")
    # A fault's event counts `t` from its fabric's start; its `wall` places it in the run.
    ctx.events.append({"t": 0.1, "wall": t0 + 1.7, "kind": "controller_killed"})
    ctx.event("now")  # at once: the run is younger than a second
    kinds = [(e["kind"], e["t"]) for e in ctx.timeline()]
    assert kinds[0][0] == "now" and kinds[0][1] < 1.0
    assert kinds[1:] == [
        ("link_down", 1.0),
        ("controller_killed", 1.7),
        ("reachability restored", 2.5),
    ]
    report = scenario.render_report(ctx)
    lines = [line.split()[1] for line in report.splitlines() if line.startswith("     ")]
    assert lines == ["now", "link_down", "controller_killed", "reachability"]
    assert "wall=" not in report

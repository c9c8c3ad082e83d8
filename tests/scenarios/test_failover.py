"""The failover scenario's expected outcome, via `emu run failover`."""

from __future__ import annotations

from . import assert_checks, emu_run


def test_link_switch_and_controller_failures_recover_within_bounds(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "fo", "failover")
    assert_checks(res, doc, count=6)
    failures = doc["metrics"]["failures"]
    # A cut uplink fails over in the switch itself (bucket liveness): far under a second.
    assert failures["link"]["worst_outage_s"] <= 0.3
    # The controller hears of a dead link or switch within a second.
    assert failures["link"]["controller_saw_s"] is not None
    assert failures["link"]["controller_saw_s"] < 1.0
    # Every failure shows up in the report's events.
    kinds = {e["kind"] for e in doc["events"]}
    assert {
        "link: link_down",
        "switch: switch_killed",
        "switch: switch_restarted",
        "controller: controller_killed",
        "controller: controller_restarted",
    } <= kinds

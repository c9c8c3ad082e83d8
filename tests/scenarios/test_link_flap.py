"""The link-flap scenario via `emu run link-flap`: 30 s of flapping, damped, nothing stuck or dead,
and goodput during the flapping at least what the flow-level model leaves."""

from __future__ import annotations

from controllers.routing import RoutingConfig

from . import assert_checks, emu_run


def test_flapping_spine_link_is_damped_and_nothing_gets_stuck(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "lf", "link-flap", timeout_s=900)
    assert_checks(res, doc, count=10)
    for mode in ("static", "adaptive"):
        # The scenario's floor: max-min TCP over the worst ECMP outcome with the link damped,
        # over the same before (2/3 at the defaults), less the RTO backoff left in the window.
        assert_checks(
            res, doc, [f"{mode}: goodput during the flapping >= the flow-level model's floor"]
        )
        r = doc["metrics"]["modes"][mode]
        assert r["flaps"] == 100  # every 0.3 s for 30 s
        # Damped at the third down routing processed (its flap_threshold), well inside
        # the first seconds, so little RTO backoff reaches the window from 1 s on. A
        # controller that took a port status late damps a flap later on the wire:
        # the floor counts the downs up to the damping's time (one each 0.3 s).
        assert r["damped_at_down"] == RoutingConfig().flap_threshold == 3
        assert r["damped_after_s"] < 2.0
        downs = r["during_floor"]["downs_before_damping"]
        assert downs == int(r["damped_after_s"] / 0.3 + 1e-9) + 1 >= 3
        # Damping bounds the controller's work: far fewer recomputations than flaps.
        assert r["recomputations"] < 100
        assert r["after_mbps"] > 0

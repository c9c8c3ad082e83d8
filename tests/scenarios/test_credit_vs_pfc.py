"""credit-vs-pfc's expected outcome on real RoCEv2 traffic, via `emu run credit-vs-pfc`.

An incast and a victim flow under PFC, PFC + DCQCN and credits, and with the
victim on a class of its own under PFC and credits, each on a fresh fabric,
shortened to 5 s a mode. Beyond the scenario's own checks this
asserts on what the counters and the captures say: credit links carry credit
updates and no PAUSE, PFC links carry PAUSE, nothing is dropped, and the
victim is held back by head-of-line blocking under both link-level schemes
alike (one VL) while DCQCN, or a class of its own, gives it its share back.
"""

from __future__ import annotations

from . import assert_checks, emu_run

# The scenario's own checks: incast goodput x5, lossless x4, victim HOL x2, victim on its
# own class x2, per credit mode (x2) no PAUSE, credit updates, audit, blocked; DCQCN recovery.
OWN_CHECKS = 22


def test_credit_vs_pfc(tmp_path, no_leaks):
    out = tmp_path / "cvp"
    res, doc = emu_run(out, "credit-vs-pfc", "duration_s=5", "warmup_s=1.5", timeout_s=300)
    assert_checks(res, doc, count=OWN_CHECKS)
    modes = doc["metrics"]["modes"]
    credit, pfc = modes["credit"], modes["pfc"]
    # Counted on the wire: PAUSE on PFC links, credit updates (and no PAUSE) on credit links.
    assert sum(w["pause"] for w in pfc["wire"].values()) > 0
    assert sum(w["flow_control"] for w in pfc["wire"].values()) == 0
    assert sum(w["pause"] for w in credit["wire"].values()) == 0
    assert all(w["flow_control"] > 0 for w in credit["wire"].values())
    assert credit["pause_frames_sent"] == 0 and credit["fc_frames_sent"] > 0
    # Lossless both ways; the credit loop never overran a receiver.
    for mode in (credit, pfc):
        assert mode["switch_drops"] == 0 and mode["nic_drops"] == 0
    assert credit["overruns"] == 0
    assert all(a["violations"] == 0 and a["checked"] > 100 for a in credit["audit"].values())
    # One VL: the victim suffers the same head-of-line blocking under credits as under PFC
    # (the model: 1/6 of the line rate in both); DCQCN gives it back.
    assert 0.5 <= credit["victim_bps"] / pfc["victim_bps"] <= 2.0
    assert modes["dcqcn"]["victim_bps"] >= 2 * pfc["victim_bps"]
    # Per-class buffers and strict priority: on its own class the victim is not blocked,
    # under PFC and credits alike.
    for mode in ("pfc-2class", "credit-2vl"):
        assert modes[mode]["victim_bps"] >= 3 * pfc["victim_bps"]
    assert sum(w["pause"] for w in modes["credit-2vl"]["wire"].values()) == 0
    assert (out / "credit_vs_pfc.png").stat().st_size > 10_000

"""The straggler scenario via `emu run`: iterations take the time the link-rate model predicts."""

from __future__ import annotations

import pytest

from emu import reproduce
from emu.traffic import model

from . import assert_checks, emu_run

CHECKS = [
    f"{algo} {name}"
    for algo in ("ring", "sharp")
    for name in (
        "compute x1: iteration = 1 x C + predicted T_comm",
        "compute x2: iteration = 2 x C + predicted T_comm",
        "compute x4: iteration = 4 x C + predicted T_comm",
        "NIC x1.5: iteration = C + T_comm predicted at the slowest link",
    )
]


def test_compute_and_nic_stragglers_take_the_predicted_time(tmp_path, no_leaks):
    res, doc = emu_run(
        tmp_path / "st",
        "straggler",
        "factors=1,2,4",
        "nic_factors=1,1.5",
        "iters=2",
        "compute_s=0.4",
        timeout_s=600,
    )
    # Four points per algorithm, each a check of the model.
    assert_checks(res, doc, names=CHECKS, count=len(CHECKS))
    m = doc["metrics"]
    # The prediction comes from the link rate and the bytes, never from the run.
    for algo in ("ring", "sharp"):
        want = model.predict_allreduce(algo, 256 << 10, 8, m["link_rate_bps"]).time_s
        assert m["t_comm_predicted_s"][algo] == want
        assert m["t_comm_s"][algo] > 0  # measured at s = 1, reported beside it
        pts = {(p["kind"], p["factor"]): p for p in m["points"] if p["algo"] == algo}
        assert sorted(pts) == [("compute", 1.0), ("compute", 2.0), ("compute", 4.0), ("nic", 1.5)]
        # A NIC 1.5 x slower stretches the predicted all-reduce 1.5 x; compute adds s x C.
        assert pts[("nic", 1.5)]["predicted_comm_s"] == pytest.approx(1.5 * want)
        # No point may hide a PFC storm (the watchdog bound on nic_factors).
        assert all(p["storms"] == 0 for p in pts.values()), pts
        assert pts[("compute", 4.0)]["model_s"] == pytest.approx(4 * 0.4 + want)
        t = [pts[("compute", s)]["iteration_s"] for s in (1.0, 2.0, 4.0)]
        assert t[0] < t[1] < t[2]
        # The figures `emu reproduce` quotes find them.
        for s, want_s in zip(("1.0", "2.0", "4.0"), t):
            assert reproduce.lookup(m, ("measured_s", algo, s)) == want_s
    # SHARP's all-reduce is the shorter: S per link against the ring's 2(n-1)/n x S.
    assert m["t_comm_predicted_s"]["sharp"] < m["t_comm_predicted_s"]["ring"]
    assert (tmp_path / "st" / "straggler.png").stat().st_size > 10_000

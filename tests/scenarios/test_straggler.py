"""The straggler scenario via `emu run`: iteration time follows T = s x C + T_comm."""

from __future__ import annotations

from . import assert_checks, emu_run


def test_a_straggler_stretches_iterations_as_the_model_says(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "st", "straggler", "factors=1,2,4", "iters=2",
                       "compute_s=0.4", timeout_s=600)
    # Two slowed factors for each of ring and SHARP (s = 1 defines T_comm).
    assert_checks(res, doc, count=4)
    m = doc["metrics"]
    for algo in ("ring", "sharp"):
        t = {float(s): v for s, v in m["measured_s"][algo].items()}
        # Slower straggler, longer iteration, by about (4 - 2) x C.
        assert t[1.0] < t[2.0] < t[4.0]
        assert abs((t[4.0] - t[2.0]) - 2 * 0.4) <= 0.15 * (2 * 0.4) + 0.05
        assert m["t_comm_s"][algo] > 0
    assert (tmp_path / "st" / "straggler.png").stat().st_size > 10_000

"""training-step on packets: a job's step against the alpha-beta model, and what-if comparisons.

Each runs `emu run training-step` as a user would and reads metrics.json; the
checks are the scenario's own (scenarios/training_step.py), judged as every
scenario's are (an unfaithful run's failed check is xfail, naming why).
"""

from __future__ import annotations

import pytest

from . import assert_checks, emu_run, require_faithful


def test_dense_job_rail_against_crossing(tmp_path, no_leaks):
    res, doc = emu_run(
        tmp_path / "out", "training-step", "steps=1", "compare=placement=rail,crossing"
    )
    assert_checks(
        res,
        doc,
        [
            "placement=rail: every operation ran, every all-reduce's sum right on every rank",
            "placement=rail: every collective that shared no link within 10% of its model",
            "placement=crossing: every operation ran, every all-reduce's sum right on every rank",
            "rail-aligned placement keeps the gradients off the spines",
        ],
    )
    rail = doc["metrics"]["variants"]["placement=rail"]
    # The schedule's operations all ran, each timed by its NICs, on 8 GPUs.
    assert rail["ops"] == 52 and len(rail["comm_s"]) == 52 - 0
    assert rail["critical_path"][0].startswith("s0.m0.c0.l0.fwd")
    assert "step time per variant" in res.stdout and "phases" in res.stdout


@pytest.mark.slow
def test_moe_job_with_a_straggler(tmp_path, no_leaks):
    res, doc = emu_run(
        tmp_path / "out",
        "training-step",
        "job=moe-alltoall",
        "steps=1",
        "compare=straggler=off,gpu3:2",
    )
    assert_checks(res, doc)
    require_faithful(res, doc, "the straggler's delay")
    v = doc["metrics"]["variants"]
    assert v["straggler=gpu3:2"]["step_s"][0] > v["straggler=off"]["step_s"][0]

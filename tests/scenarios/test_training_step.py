"""training-step on packets: a job's step against the alpha-beta model, and what-if comparisons.

Each runs `emu run training-step` as a user would and reads metrics.json; the
checks are the scenario's own (scenarios/training_step.py), judged as every
scenario's are (an unfaithful run's failed check is xfail, naming why).
"""

from __future__ import annotations

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
    variants = doc["metrics"]["variants"]
    rail, crossing = variants["placement=rail"], variants["placement=crossing"]
    # Every operation of the schedule communicated and was timed by its NICs, on 8 GPUs:
    # 32 tensor-parallel all-reduces, 16 pipeline sends, 4 gradient all-reduces.
    assert rail["ops"] == 52 and len(rail["comm_s"]) == 52
    assert rail["critical_path"][0].startswith("s0.m0.c0.l0.fwd")
    # The model shares no link, so it gives both placements the same step; the packets
    # make crossing's longer (its gradients' rings cross the spines).
    assert rail["model_step_s"] == crossing["model_step_s"]
    require_faithful(res, doc, "crossing against rail")
    assert crossing["step_s"][0] > rail["step_s"][0]
    assert "where packets and model part" in res.stdout and "phases" in res.stdout


def test_moe_job_in_network_aggregation_shortens_the_gradients(tmp_path, no_leaks):
    res, doc = emu_run(
        tmp_path / "out", "training-step", "job=moe-alltoall", "steps=1", "compare=sharp=off,on"
    )
    assert_checks(
        res, doc, ["in-network aggregation shortens the gradients' all-reduce as its model says"]
    )
    ops = doc["metrics"]["variants"]["sharp=on"]["comm_s"]
    assert any(".alltoall" in i or "dispatch" in i for i in ops)  # the MoE all-to-alls ran


def test_a_straggler_delays_the_step_by_its_compute_excess(tmp_path, no_leaks):
    res, doc = emu_run(
        tmp_path / "out",
        "training-step",
        "job=moe-alltoall",
        "steps=1",
        "compare=straggler=off,gpu3:2",
    )
    assert_checks(res, doc, ["straggler=gpu3:2 delays the steps by its compute excess"])


def test_adaptive_routing_against_ecmp_where_the_gradients_cross_the_spines(tmp_path, no_leaks):
    res, doc = emu_run(
        tmp_path / "out",
        "training-step",
        "steps=1",
        "placement=crossing",
        "compare=routing=ecmp,adaptive",
    )
    assert_checks(
        res, doc, ["adaptive routing keeps the step at its model where ECMP's flows may collide"]
    )


def test_a_link_flapping_mid_step_costs_time_and_no_data(tmp_path, no_leaks):
    res, doc = emu_run(
        tmp_path / "out",
        "training-step",
        "steps=1",
        "placement=crossing",
        "fault=link spine1-rail1 flap at 0.5s every 0.4s count 3",
        "compare=fault=off,on",
    )
    assert_checks(
        res, doc, ["fault=on: every operation ran, every all-reduce's sum right on every rank"]
    )
    # The flap happened during the faulted variant only: three downs, three ups.
    kinds = [e["kind"] for e in doc["events"] if e.get("link") == "spine1-rail1"]
    assert kinds.count("link_down") == 3 and kinds.count("link_up") == 3
    require_faithful(res, doc, "the flap's cost")
    v = doc["metrics"]["variants"]
    assert v["fault=on"]["step_s"][0] > v["fault=off"]["step_s"][0]

"""A training step's operations (emu/schedule.py): derived from a job, written and read as a
trace, and timed along their dependencies; the alpha-beta model of each (emu/models/step.py)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from emu import fabric, job
from emu import schedule as sched
from emu.job import Job
from emu.models import step
from emu.schedule import Op, Schedule, TraceError
from emu.traffic import model

DENSE = Job(
    "dense",
    dp=2,
    tp=2,
    pp=2,
    steps=2,
    micro_batches=2,
    layers=4,
    forward_s=0.01,
    backward_s=0.02,
    tp_bytes=4096,
    pp_bytes=8192,
    dp_bytes=65536,
)


def kinds(s: Schedule, step: int = 0) -> Counter:
    return Counter((op.phase, op.kind) for op in s.ops if op.step == step)


def test_a_dense_job_has_the_collectives_its_parallelism_implies():
    s = sched.from_job(DENSE)
    per_step = kinds(s)
    # Each of 4 (stage, peer) groups runs 2 layers x 2 micro-batches, forward and backward.
    assert per_step["tp", "allreduce"] == 4 * 2 * 2 * 2
    # Each micro-batch crosses the one stage boundary both ways, once per TP rank and peer.
    assert per_step["pp", "send"] == 2 * 2 * 2 * 2
    # The gradients: one communicator per stage and TP rank, once a step.
    assert per_step["dp", "allreduce"] == 2 * 2
    assert kinds(s, 1) == per_step and s.steps == 2
    for op in s.ops:
        if op.phase == "dp":
            assert len(op.group) == 2 and op.bytes == 65536
            assert len({DENSE.coords(r)[2] for r in op.group}) == 1  # one TP rank's peers


def test_every_dependency_comes_earlier_and_a_groups_ops_are_chained():
    s = sched.from_job(DENSE)
    seen = set()
    for op in s.ops:
        assert set(op.deps) <= seen, op.id
        seen.add(op.id)
    # Stage 1's first forward waits for stage 0's activations of that micro-batch.
    first = next(op for op in s.ops if op.id == "s0.m0.c1.l2.fwd.d0")
    assert {"s0.m0.c0.act.d0.t0", "s0.m0.c0.act.d0.t1"} <= set(first.deps)
    # The next step's forward waits for the stage's gradients.
    nxt = next(op for op in s.ops if op.id == "s1.m0.c0.l0.fwd.d0")
    assert {"s0.c0.t0.grad.all", "s0.c0.t1.grad.all"} <= set(nxt.deps)


def test_overlap_all_reduces_each_layers_gradients_as_its_last_backward_ends():
    s = sched.from_job(DENSE.with_(overlap=True))
    grads = [op for op in s.ops if op.phase == "dp" and op.step == 0]
    assert len(grads) == 2 * 2 * 2  # a layer each, per stage and TP rank
    assert {op.bytes for op in grads} == {65536 // 2}
    by_id = s.by_id()
    # Layer 3's share (stage 1's last layer, the first backward) runs while layer 2 computes.
    l3 = by_id["s0.c1.t0.grad.l3"]
    assert "s0.m0.c1.l3.bwd.d0" in l3.deps and "s0.m0.c1.l3.bwd.d1" in l3.deps
    l2 = by_id["s0.c1.t0.grad.l2"]
    assert "s0.c1.t0.grad.l3" in l2.deps  # one communicator: one after the other
    # Communication in proportion to its bytes: the overlapped step is shorter.
    plain = sched.from_job(DENSE)
    times = [
        sched.timeline(x, {op.id: op.bytes * 1e-6 for op in x.ops if op.communicates}).total_s
        for x in (s, plain)
    ]
    assert times[0] < times[1]


def test_an_moe_layer_splits_its_compute_around_two_all_to_alls():
    moe = Job(
        "moe",
        dp=4,
        tp=2,
        ep=4,
        layers=2,
        moe_every=2,
        steps=1,
        forward_s=0.02,
        backward_s=0.04,
        tp_bytes=4096,
        dp_bytes=8192,
        ep_bytes=4096,
    )
    s = sched.from_job(moe)
    a2a = [op for op in s.ops if op.kind == "alltoall"]
    # dispatch and combine, forward and backward, one per TP rank.
    assert len(a2a) == 2 * 2 * 2
    assert {len(op.group) for op in a2a} == {4} and {op.bytes for op in a2a} == {4096}
    combine = s.by_id()["s0.m0.c0.l1.fwd.combine.e0.t0"]
    assert combine.compute_s == pytest.approx(0.01)  # the experts' half of the layer
    attention = s.by_id()["s0.m0.c0.l1.fwd.d0"]
    assert attention.compute_s == pytest.approx(0.01)


def test_a_trace_round_trips_and_reads_back_the_same_operations(tmp_path):
    s = sched.from_job(DENSE.with_(overlap=True, dp_algorithm="sharp"))
    path = tmp_path / "t.json"
    sched.dump_trace(s, path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "emu-training-trace" and doc["version"] == 1 and doc["ranks"] == 8
    back = sched.load_trace(path)
    assert back.ops == s.ops and back.ranks == s.ranks


def trace(*ops: dict, ranks: int = 4) -> dict:
    return {"format": "emu-training-trace", "version": 1, "ranks": ranks, "ops": list(ops)}


AR = {"id": "a", "kind": "allreduce", "group": [0, 1], "bytes": 1024}


@pytest.mark.parametrize(
    "doc, words",
    [
        ([], "top level: expected an object"),
        ({"format": "x", "version": 1}, "format: expected format 'emu-training-trace'"),
        (trace(ranks=0), "ranks: 0: expected an integer in 1..4096"),
        ({**trace(), "ops": []}, "ops: expected a non-empty list"),
        (trace({**AR, "kind": "broadcast"}), "ops[0].kind: 'broadcast' is not one of"),
        (trace({**AR, "group": [0, 9]}), "ops[0].group[1]: 9 is not a rank (0..3)"),
        (trace({**AR, "group": [1, 1]}), "ops[0].group: a rank is named twice"),
        (trace({**AR, "bytes": 10}), "ops[0].bytes: 10: expected whole 4-byte elements"),
        (trace({**AR, "deps": ["b"]}), "ops[0].deps[0]: 'b' is not an earlier operation's id"),
        (trace(AR, AR), "ops[1].id: 'a' is given twice"),
        (trace({**AR, "compute_ms": -1}), "ops[0].compute_ms: -1: expected milliseconds"),
        (trace({**AR, "kind": "send", "group": [0, 1, 2]}), "ops[0].group: a send needs exactly 2"),
        (trace({**AR, "algo": "sharp", "kind": "alltoall"}), "ops[0].algo: 'sharp'"),
        (trace({**AR, "colour": 1}), "ops[0].colour: unknown field"),
        (trace({**AR, "kind": "compute"}), "ops[0].bytes: a compute moves no bytes"),
    ],
)
def test_a_bad_trace_is_one_line_naming_the_field(doc, words):
    with pytest.raises(TraceError) as caught:
        sched.from_trace(doc, "t.json")
    assert str(caught.value).startswith("t.json: ") and words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_json_is_one_line(tmp_path):
    (tmp_path / "t.json").write_text("{ops: [")
    with pytest.raises(TraceError, match="not JSON"):
        sched.load_trace(tmp_path / "t.json")


def chain() -> Schedule:
    ops = [
        Op("a", "compute", (0,), compute_s=1.0),
        Op("b", "allreduce", (0, 1), 64, ("a",), 0.5, "dp"),
        Op("c", "compute", (1,), compute_s=4.0),
        Op("d", "send", (0, 1), 64, ("b", "c"), phase="pp"),
    ]
    return Schedule("chain", 2, ops)


def test_the_timeline_follows_the_dependencies_and_names_the_critical_path():
    s = chain()
    tl = sched.timeline(s, {"b": 2.0, "d": 1.0})
    assert tl.start == {"a": 0.0, "b": 1.0, "c": 0.0, "d": 4.0}
    assert tl.end["b"] == 3.5 and tl.total_s == 5.0
    assert tl.critical == ("c", "d")  # c (4 s) outlasts a + b (3.5 s)
    assert sched.timeline(s, {"b": 3.0, "d": 1.0}).critical == ("a", "b", "d")
    # Exposed: the step with its communication less the step without (c hides most of b).
    assert sched.exposed_s(s, {"b": 2.0, "d": 1.0}) == pytest.approx(5.0 - 4.0)


GRAPH = fabric.rail_optimized(nodes=4, gpus_per_node=2, spines=2, host_rate_bps=2_000_000)


FRAME_S = 1082 * 8 / 2e6  # one full RoCEv2 frame at the NICs' 2 Mbit/s


def test_the_model_of_each_kind_is_hockneys_with_emus_frames():
    hosts = {0: "h1", 1: "h3", 2: "h5", 3: "h7", 4: "h2"}
    # No link delay: alpha is minus one frame a round (a round ends as its last frame
    # starts on the last link), beta the frames emu sends, ACKs included.
    ring = Op("r", "allreduce", (0, 1, 2, 3), 65536, phase="dp")
    assert step.op_model_s(ring, hosts, GRAPH) == pytest.approx(
        model.ring_allreduce(65536, 4, 2e6).time_s - 2 * 3 * FRAME_S
    )
    sharp = Op("s", "allreduce", (0, 1, 2, 3), 65536, phase="dp", algo="sharp")
    assert step.op_model_s(sharp, hosts, GRAPH) == pytest.approx(
        model.sharp_allreduce(65536, 4, 2e6).time_s - 2 * FRAME_S
    )
    half = Op("h", "reduce_scatter", (0, 1, 2, 3), 65536, phase="dp")
    assert step.op_model_s(half, hosts, GRAPH) == pytest.approx(
        step.op_model_s(ring, hosts, GRAPH) / 2
    )
    # A send: its data frames one way (32 of 1082 bytes); its ACKs go the other way.
    send = Op("p", "send", (0, 1), 32768, phase="pp")
    assert step.op_model_s(send, hosts, GRAPH) == pytest.approx(31 * FRAME_S)
    # Two GPUs of one node: the NVLink ports' rate (9 x the NIC's).
    tp = Op("t", "allreduce", (0, 4), 4096, phase="tp")
    assert step.port_of(GRAPH, ["h1", "h2"]) == "nvlink"
    assert step.op_model_s(tp, hosts, GRAPH) == pytest.approx(
        model.ring_allreduce(4096, 2, 18e6).time_s - 2 * FRAME_S / 9
    )
    assert step.op_model_s(Op("c", "compute", (0,), compute_s=1.0), hosts, GRAPH) == 0.0


def test_alpha_is_the_paths_delay_from_the_graph():
    slow = fabric.rail_optimized(
        nodes=2, gpus_per_node=2, spines=1, host_rate_bps=2_000_000, delay_s=0.001
    )
    hosts = {0: "h1", 1: "h4"}  # rail 1 to rail 2: NIC, leaf, spine, leaf, NIC
    send = Op("p", "send", (0, 1), 4096, phase="pp")
    assert step.path_delay_s(slow, "h1", "h4", "nic") == pytest.approx(0.004)
    without = step.op_model_s(send, hosts, GRAPH)
    assert step.op_model_s(send, hosts, slow) == pytest.approx(0.004 + without)
    ring = Op("r", "allreduce", (0, 1), 4096, phase="dp")
    assert step.op_model_s(ring, hosts, slow) - step.op_model_s(
        ring, hosts, GRAPH
    ) == pytest.approx(2 * 0.004)


def test_the_examples_model_times_are_the_same_for_both_placements_the_model_shares_no_link():
    j = job.load("dense-dp-tp-pp")
    times = []
    for placement in ("rail", "crossing"):
        s = sched.from_job(j.with_(placement=placement))
        s.hosts = job.place(j.with_(placement=placement), GRAPH)
        times.append(sched.timeline(s, step.comm_model_s(s, GRAPH)).total_s)
    assert times[0] == pytest.approx(times[1]) and times[0] > 0

"""training-step's pure parts: stragglers, the links an operation uses and which ones it shared
(emu/traffic/training.py), and the scenario's parameters (one line, exit 2, before any fabric)."""

from __future__ import annotations

import pytest

from emu import cli, fabric, scenario
from emu import job as job_mod
from emu import schedule as sched
from emu.schedule import Op, Schedule
from emu.traffic import training

GRAPH = fabric.rail_optimized(nodes=4, gpus_per_node=2, spines=2, host_rate_bps=2_000_000)


def two_ranks() -> Schedule:
    ops = [
        Op("a", "compute", (0,), compute_s=1.0),
        Op("b", "compute", (1,), compute_s=0.5),
        Op("c", "allreduce", (0, 1), 64, ("a", "b"), 0.2, "dp"),
    ]
    return Schedule("s", 2, ops, {0: "h1", 1: "h3"})


def test_a_straggler_computes_longer_and_its_collectives_wait_for_it():
    s = sched.with_straggler(two_ranks(), 1, 3.0)
    assert [op.compute_s for op in s.ops] == [1.0, 1.5, 0.6000000000000001]
    tl = sched.timeline(s, {"c": 0.1})
    assert tl.critical == ("b", "c") and tl.total_s == pytest.approx(1.5 + 0.6 + 0.1)
    with pytest.raises(ValueError, match="0..1"):
        sched.with_straggler(two_ranks(), 2, 1.5)
    assert sched.parse_straggler("gpu5:1.3") == (5, 1.3) and sched.parse_straggler("2:2") == (
        2,
        2.0,
    )
    for bad in ("gpu5", "x:1", "5:0.5"):
        with pytest.raises(ValueError):
            sched.parse_straggler(bad)


def test_an_operations_links_are_its_nics_and_the_leaves_uplinks_between_rails():
    ring = Op("r", "allreduce", (0, 1), 64, phase="dp")
    assert training.op_links(ring, ["h1", "h3"], GRAPH) == {"h1 up", "h3 down", "h3 up", "h1 down"}
    crossing = training.op_links(ring, ["h1", "h4"], GRAPH)
    assert {"rail1 uplinks", "rail2 downlinks", "rail2 uplinks", "rail1 downlinks"} <= crossing
    send = Op("p", "send", (0, 1), 64, phase="pp")
    assert training.op_links(send, ["h1", "h2"], GRAPH) == {"h1 nvlink up", "h2 nvlink down"}
    # In-network aggregation: every member's NIC link both ways, and the leaves' uplinks
    # when the tree spans leaves (a rail's peers' tree is its leaf alone).
    sharp = Op("s", "allreduce", (0, 1), 64, phase="dp", algo="sharp")
    assert training.op_links(sharp, ["h1", "h3"], GRAPH) == {"h1 up", "h1 down", "h3 up", "h3 down"}
    assert "rail2 uplinks" in training.op_links(sharp, ["h1", "h4"], GRAPH)


def test_two_operations_share_a_link_only_if_their_communication_overlapped_in_time():
    ops = [
        Op("x", "send", (0, 1), 64, phase="pp"),
        Op("y", "send", (0, 2), 64, phase="pp"),
        Op("z", "send", (3, 1), 64, phase="pp"),
    ]
    s = Schedule("s", 4, ops, {0: "h1", 1: "h3", 2: "h5", 3: "h7"})
    run = training.TrainingRun(
        comm_s={"x": 1.0, "y": 1.0, "z": 1.0},
        wall={"x": (0.0, 2.0), "y": (0.0, 2.5), "z": (5.0, 6.0)},
    )
    shared = training.shared_links(s, run, GRAPH)
    assert shared == {"x": [("y", "h1 up")], "y": [("x", "h1 up")]}  # z (h3 down) came later


@pytest.fixture
def no_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("validation let a run through")

    monkeypatch.setattr(scenario, "run", refuse)
    monkeypatch.setattr(cli, "need_root", lambda what: None)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--set", "job=nope"], "parameter job='nope': no such file, nor an example"),
        (["--compare", "colour=red,blue"], "expected KEY=A,B with KEY one of placement"),
        (
            ["--compare", "placement=rail,diagonal"],
            "placement takes rail, crossing, not 'diagonal'",
        ),
        (["--set", "straggler=gpu9:1.5"], "the ranks are 0..7"),
        (["--set", "straggler=gpu-1:1.5"], "a rank is >= 0"),
        (["--compare", "straggler=off,gpu1"], "expected RANK:FACTOR"),
        (["--set", "nodes=2"], "need 4 nodes of 2 GPUs; the fabric has 2"),
        (["--set", "topology=leaf_spine"], "this scenario runs on rail_optimized only"),
        (["--compare", "routing=ecmp,bgp"], "routing takes ecmp, adaptive, not 'bgp'"),
        (["--fault", "link spine9-rail1 flap at 2s"], "unknown node 'spine9'"),
        (["--fault", "link h1-h3 down at 1s"], "no link h1-h3 in the fabric"),
        (["--fault", "link spine1-rail1 wobble at 2s"], "expected link A-B down|flap at Ts"),
        (["--compare", "fault=off,on"], "give the fault with --fault"),
        (["--set", "placement=diagonal"], "placement"),
    ],
)
def test_bad_parameters_are_one_line_and_exit_2(no_runs, capsys, argv, words):
    status = cli.main(["run", "training-step", *argv])
    err = capsys.readouterr().err.strip()
    assert status == 2 and words in err and "\n" not in err, err


def test_a_bad_job_file_or_trace_through_the_cli_is_one_line(tmp_path, capsys):
    (tmp_path / "j.yaml").write_text(
        "name: j\nparallel: {dp: 2, ep: 3}\ncompute: {forward: 1ms, backward: 1ms}\nmessages: {dp: 4K}\n"
    )
    (tmp_path / "t.json").write_text(
        '{"format": "emu-training-trace", "version": 1, "ranks": 2, "ops": [{"id": "a", "kind": "send", "group": [0], "bytes": 4}]}'
    )
    assert cli.main(["job", "validate", str(tmp_path / "j.yaml"), str(tmp_path / "t.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"emu: {tmp_path / 'j.yaml'}:2: parallel.ep: 3 does not divide dp=2",
        f"emu: {tmp_path / 't.json'}: ops[0].group: a send needs exactly 2 ranks",
    ]


def test_a_trace_refuses_the_comparisons_that_change_a_job_and_is_read_before_a_fabric(
    no_runs, capsys, tmp_path
):
    trace = tmp_path / "t.json"
    sched.dump_trace(sched.from_job(job_mod.load("dense-dp-tp-pp")), trace)
    status = cli.main(
        ["run", "training-step", "--set", f"trace={trace}", "--compare", "sharp=off,on"]
    )
    assert status == 2 and "a trace fixes its own operations" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"format": "emu-training-trace", "version": 1, "ranks": 2, "ops": '
        '[{"id": "a", "kind": "send", "group": [0, 1], "bytes": 4, "deps": [["x"]]}]}'
    )
    status = cli.main(["run", "training-step", "--set", f"trace={bad}"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "ops[0].deps[0]" in err and "\n" not in err


def test_emu_job_show_and_trace_say_a_trace_is_not_a_job(capsys, tmp_path):
    trace = tmp_path / "t.json"
    sched.dump_trace(sched.from_job(job_mod.load("moe-alltoall")), trace)
    for argv in (["job", "show", str(trace)], ["job", "trace", str(trace), "--out", "x.json"]):
        assert cli.main(argv) == 2
        assert "is a trace, not a job" in capsys.readouterr().err

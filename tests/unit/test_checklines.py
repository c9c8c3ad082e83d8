"""emu/checklines.py and `emu reproduce --check-lines`: the evidence under docs/results.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import checklines, cli
from emu.scenario import ScenarioError

REPORT = """emu scenario: smoke
parameters: topology=leaf_spine, rate_mbps=20.0

TCP h1 -> h8 (5 s, one flow)
goodput Mb/s  on wire Mb/s
------------  ------------
        19.1            20

checks
  [PASS] TCP reaches >= 90% of link rate: 1 (expected >= 0.9 of the link rate (frames on the wire))
  [FAIL] fidelity: no event-loop stall longer than 10 frame times where lossless frames flow: worst 31 at leaf3 (switch) (expected <= 10 frame times)
scheduling of the 6 switch and NIC processes: 6 SCHED_RR 10; CPU time the VM's host took meanwhile (steal): 140 ms

1/2 checks passed; results in /tmp/r/smoke/run-2
unfaithful run: worst 31 at leaf3 (switch); the VM's host took 140 ms of CPU meanwhile (steal)
"""


def _runs(tmp_path: Path) -> Path:
    out = tmp_path / "repro"
    for config, run in (("smoke", 2), ("smoke", 10), ("incast", 1), ("zz-extra", 1)):
        d = out / config / f"run-{run}"
        d.mkdir(parents=True)
        if config != "incast":
            (d / "report.txt").write_text(REPORT)
    (out / "smoke" / "run-2.log").write_text("not a run directory")
    (out / "empty").mkdir()
    return out


def test_a_report_keeps_checks_scheduling_summary_and_verdict() -> None:
    assert checklines.report_lines(REPORT) == [
        line.strip()
        for line in REPORT.splitlines()
        if line.strip().startswith(("[PASS]", "[FAIL]", "scheduling", "1/2", "unfaithful"))
    ]
    assert len(checklines.report_lines(REPORT)) == 5
    assert checklines.report_lines("goodput 19.1\nchecks\n") == []


def test_configurations_follow_the_given_order_and_runs_their_number(tmp_path: Path) -> None:
    text = checklines.render(_runs(tmp_path), "T", "intro", ["smoke", "incast"])
    heads = [line for line in text.splitlines() if line.startswith("#")]
    assert heads == [
        "# T",
        "## smoke",
        "### smoke run-2",
        "### smoke run-10",
        "## incast",
        "### incast run-1",
        "## zz-extra",
        "### zz-extra run-1",
    ]
    assert "unfaithful run: worst 31 at leaf3 (switch)" in text
    assert "no report.txt (No such file or directory): the run did not finish" in text
    assert "## empty" not in text and "goodput" not in text


def test_check_lines_command_writes_the_file_and_names_bad_input(tmp_path: Path) -> None:
    out = _runs(tmp_path)
    doc = tmp_path / "docs" / "runs" / "r.md"
    args = cli.build_parser().parse_args(
        [
            "reproduce",
            "--check-lines",
            str(doc),
            "--out",
            str(out),
            "--doc",
            str(tmp_path / "docs" / "results.md"),
        ]
    )
    assert args.func(args) == 0
    text = doc.read_text()
    assert "[results.md](../results.md)" in text and "### smoke run-10" in text
    args = cli.build_parser().parse_args(
        ["reproduce", "--check-lines", str(doc), "--out", str(tmp_path / "missing")]
    )
    with pytest.raises(ScenarioError, match="--check-lines: .*missing"):
        args.func(args)

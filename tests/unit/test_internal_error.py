"""A bug in emu's own code reaches the user as one line and a file, never a bare traceback.

The line names the error and where its traceback was written (the run's
results directory for `emu run`); the report written so far is printed first,
and the exit status (4) tells a bug from a failed check (1) and bad input (2).
"""

from __future__ import annotations

import os
import types

import pytest

from emu import cli, scenario
from emu.scenario import ScenarioError


def fake_scenario(monkeypatch, run) -> None:
    module = types.SimpleNamespace(PARAMS={}, run=run, __doc__="x")
    monkeypatch.setattr(scenario, "load", lambda name: module)
    monkeypatch.setattr(cli, "need_root", lambda what: None)


def report_breaks(ctx):
    ctx.check("traffic started", True, 4, "4 flows")
    ctx.metrics["ratio"] = {"a": 1} / 2  # the kind of slip a report's arithmetic makes


def test_a_scenario_that_breaks_prints_its_report_then_one_line_naming_the_traceback_file(
    tmp_path, monkeypatch, capsys
):
    fake_scenario(monkeypatch, report_breaks)
    status = cli.main(["run", "broken", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == cli.EXIT_INTERNAL == 4
    assert "[PASS] traffic started" in out
    assert "[FAIL] scenario completed: TypeError: unsupported operand" in out
    (line,) = err.strip().splitlines()
    path = tmp_path / "out" / "traceback.txt"
    assert line.startswith("emu: internal error: TypeError: unsupported operand"), line
    assert f"its traceback is in {path}" in line
    assert "Traceback" not in err
    text = path.read_text()
    assert text.startswith("Traceback (most recent call last):")
    assert "in report_breaks" in text and "TypeError" in text


def test_verbose_prints_the_traceback_too(tmp_path, monkeypatch, capsys):
    fake_scenario(monkeypatch, report_breaks)
    status = cli.main(["-v", "run", "broken", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == cli.EXIT_INTERNAL
    assert "Traceback (most recent call last):" in err and "in report_breaks" in err
    assert err.strip().splitlines()[-1].startswith("emu: internal error: TypeError")


def test_bad_input_found_mid_run_stays_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    def refuses(ctx):
        raise ScenarioError("parameter job='x.yaml': no such file")

    fake_scenario(monkeypatch, refuses)
    status = cli.main(["run", "broken", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == cli.EXIT_USAGE
    assert out == ""
    assert err == "emu: parameter job='x.yaml': no such file\n"
    assert not (tmp_path / "out" / "traceback.txt").exists()


def test_a_bug_in_any_other_command_is_one_line_and_a_temporary_file(monkeypatch, capsys):
    def ps_breaks(args):
        raise KeyError("pid")

    monkeypatch.setattr(cli, "cmd_ps", ps_breaks)  # the parser binds it when built
    status = cli.main(["ps"])
    err = capsys.readouterr().err
    assert status == cli.EXIT_INTERNAL
    (line,) = err.strip().splitlines()
    assert line.startswith("emu: internal error: KeyError: 'pid'")
    path = line.split("its traceback is in ")[1].split(",")[0]
    try:
        assert "in ps_breaks" in open(path).read()
    finally:
        os.unlink(path)


def test_an_interrupt_is_not_a_bug(tmp_path, monkeypatch, capsys):
    def interrupted(ctx):
        raise KeyboardInterrupt

    fake_scenario(monkeypatch, interrupted)
    status = cli.main(["run", "broken", "--out", str(tmp_path / "out")])
    assert status == 130
    assert "internal error" not in capsys.readouterr().err


def test_an_earlier_runs_report_is_not_shown_as_this_ones(tmp_path, monkeypatch, capsys):
    """A run that breaks before writing its report prints none, not the last run's."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.txt").write_text("[PASS] an earlier run\n")
    os.utime(out / "report.txt", (1e9, 1e9))
    fake_scenario(monkeypatch, report_breaks)
    monkeypatch.setattr(scenario, "write_results", lambda ctx: 1 / 0)
    status = cli.main(["run", "broken", "--out", str(out)])
    out_text, err = capsys.readouterr()
    assert status == cli.EXIT_INTERNAL
    assert "an earlier run" not in out_text
    assert err.startswith("emu: internal error: ZeroDivisionError")
    assert (out / "traceback.txt").is_file()


def test_an_out_that_is_a_file_is_bad_input(tmp_path, monkeypatch, capsys):
    fake_scenario(monkeypatch, report_breaks)
    (tmp_path / "taken").write_text("")
    status = cli.main(["run", "broken", "--out", str(tmp_path / "taken")])
    out, err = capsys.readouterr()
    assert status == cli.EXIT_USAGE and out == ""
    assert err == f"emu: --out {tmp_path / 'taken'}: File exists\n"


def test_a_collective_the_fabric_failed_is_the_fabrics_failure_not_a_bug(
    tmp_path, monkeypatch, capsys
):
    from emu.traffic.collectives import CollectiveError

    def tree_resets(ctx):
        ctx.check("traffic started", True, 4, "4 flows")
        raise CollectiveError("job ar1: aggregation tree reset 3 times; gave up")

    fake_scenario(monkeypatch, tree_resets)
    status = cli.main(["run", "broken", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == cli.EXIT_CHECKS_FAILED
    assert "[FAIL] scenario completed: CollectiveError: job ar1" in out
    assert err == "emu: job ar1: aggregation tree reset 3 times; gave up\n"


@pytest.mark.parametrize(
    "exc, says",
    [
        (RuntimeError("first\nsecond"), "RuntimeError: first ("),
        (AssertionError(), "AssertionError ("),
    ],
)
def test_the_line_is_one_line_whatever_the_message(tmp_path, monkeypatch, capsys, exc, says):
    def breaks(ctx):
        raise exc

    fake_scenario(monkeypatch, breaks)
    assert cli.main(["run", "broken", "--out", str(tmp_path / "out")]) == cli.EXIT_INTERNAL
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"emu: internal error: {says}"), line


def test_a_full_disk_is_the_machines_refusal_in_one_line(monkeypatch, capsys):
    import errno

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/out/report.txt")

    monkeypatch.setattr(cli, "cmd_ps", full)
    assert cli.main(["ps"]) == cli.EXIT_CHECKS_FAILED
    assert capsys.readouterr().err == "emu: No space left on device: /tmp/out/report.txt\n"


def test_a_closed_pipe_ends_quietly(monkeypatch, capsys):
    def reader_gone(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_ps", reader_gone)
    monkeypatch.setattr(cli.os, "dup2", lambda *a: None)  # keep pytest's stdout
    assert cli.main(["ps"]) == 141
    assert capsys.readouterr().err == ""


def test_bad_input_of_any_kind_is_exit_2():
    from emu.config import ConfigError

    assert issubclass(ScenarioError, ConfigError)
    assert ConfigError in cli.INPUT_ERRORS

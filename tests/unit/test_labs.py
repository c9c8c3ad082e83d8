"""The lab catalogue and its contract, a student's copy, answers files and the report (no root)."""

from __future__ import annotations

import pytest

from emu import cli, labs

from .fakes import fidelity_record as record

HANDOUT_SECTIONS = ("**Time:**", "## Goal", "## Background", "## Steps", "## Questions")


def test_every_lab_keeps_the_contract_and_ships_its_handout_start_and_solution():
    catalogue = labs.available()
    assert len(catalogue) >= 7  # issue 13; tests/labs grades each one on real packets
    for name, module in catalogue.items():
        here = labs.lab_dir(name)
        handout = (here / "README.md").read_text()
        assert all(section in handout for section in HANDOUT_SECTIONS), name
        assert module.FILES and isinstance(module.MINUTES, int) and module.GRADES
        for filename in module.FILES:
            assert (here / filename).is_file() and (here / "solution" / filename).is_file()
            assert (here / filename).read_bytes() != (here / "solution" / filename).read_bytes()


def test_which_work_is_graded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    here = labs.lab_dir("ecmp_app")
    assert labs.work_dir("ecmp_app") == here  # no copy yet: the untouched start
    assert labs.work_dir("ecmp_app", solution=True) == here / "solution"
    copy = labs.copy_starting_point("ecmp_app")
    assert labs.work_dir("ecmp_app") == copy
    (copy / "ecmp.py").write_text("# my work\n")
    labs.copy_starting_point("ecmp_app")  # a second start keeps the student's edits
    assert (copy / "ecmp.py").read_text() == "# my work\n"
    with pytest.raises(labs.LabError, match="ecmp.py is missing"):
        labs.work_dir("ecmp_app", work=str(tmp_path / "elsewhere"))
    with pytest.raises(labs.LabError, match="unknown lab 'nosuch'; labs: "):
        labs.load("nosuch")


def test_a_broken_answers_file_is_named_with_its_line(tmp_path):
    (tmp_path / "answers.yaml").write_text("a: 1\nb: [2\nc: 3\n")
    run = labs.new_run("ecmp_app", tmp_path, str(tmp_path / "out"), solution=False)
    with pytest.raises(labs.LabError, match=r"answers.yaml:\d+: not valid YAML"):
        run.answers()
    (tmp_path / "answers.yaml").write_text("culprti: h6\n")
    with pytest.raises(labs.LabError, match="culprti: this lab reads culprit only"):
        run.answers(keys=("culprit",))
    (tmp_path / "answers.yaml").write_text("- a list\n")
    with pytest.raises(labs.LabError, match="expected 'key: value' lines"):
        run.answers()


def test_the_report_puts_each_hint_under_its_failed_check(tmp_path):
    run = labs.new_run("ecmp_app", tmp_path, str(tmp_path / "out"), solution=False)
    run.check("one", True, 3, "3", "never shown")
    run.check("two", False, None, "spine2", "trace it with path")
    text = labs.render(run)
    assert "[PASS] one: 3 (expected 3)" in text and "never shown" not in text
    assert "[FAIL] two: None (expected spine2)\n         hint: trace it with path" in text
    assert "NOT YET: 1 of 2 checks passed" in text and not run.passed


def test_emu_lab_list_and_bad_names(capsys):
    assert cli.main(["lab", "list"]) == 0
    out = capsys.readouterr().out
    assert "ecmp-app" in out and "graded on:" in out
    assert cli.main(["lab", "check", "nosuch"]) == cli.EXIT_USAGE
    assert "emu: unknown lab 'nosuch'" in capsys.readouterr().err


class _FakeFabric:
    """emu.net.Fabric as emu/runs.py drives it: opens (or fails to), closes, measured itself."""

    built: list = []

    def __init__(self, graph, out_dir: str, fails: bool = False) -> None:
        self.fails, self.closed, self.out_dir = fails, False, out_dir
        self.fidelity_document = None
        _FakeFabric.built.append(self)

    def open(self) -> None:
        from emu.registry import FabricError

        if self.fails:
            raise FabricError("switch leaf1 refused the config\nmore detail")

    def close(self) -> None:
        self.closed = True
        self.fidelity_document = {"processes": [record(f"{self.out_dir[-1]}1")], "missing": []}


def test_a_fabric_the_work_keeps_from_starting_is_a_failed_check_and_is_closed(
    tmp_path, monkeypatch
):
    from emu import runs

    monkeypatch.setattr(runs, "Fabric", _FakeFabric)
    run = labs.new_run("ecmp_app", tmp_path, str(tmp_path / "out"), solution=False)
    assert run.open_fabric("the fabric starts", "read the switch's log", None, fails=True) is None
    broken = _FakeFabric.built[-1]
    assert broken.closed
    [c] = run.checks
    assert (c.name, c.passed, c.value, c.hint) == (
        "the fabric starts",
        False,
        "switch leaf1 refused the config",
        "read the switch's log",
    )
    healthy = run.open_fabric("the fabric starts", "", None, "a")
    assert healthy is _FakeFabric.built[-1] and not healthy.closed
    assert healthy.out_dir == str(tmp_path / "out" / "a")
    run.close_fabric(healthy)
    # Both fabrics measured themselves as they closed; the run holds what each measured.
    assert healthy.closed and [label for label, _ in run.fabrics.documents] == ["", "a"]


def _write_records(folder, records):
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fidelity.json").write_text(json.dumps({"processes": records, "missing": []}))


def test_a_check_in_which_the_emulator_fell_behind_says_so_and_ignores_older_records(tmp_path):
    out = tmp_path / "out"
    run = labs.new_run("ecmp_app", tmp_path, str(out), solution=False)
    # An earlier check into the same folder left a stalled fabric's record: not this run's,
    # and this run judges only the fabrics it opened (emu/runs.py), never the folder.
    _write_records(out / "old", [record("spine9", stall_frames=40.0)])
    run.fabrics.documents.append(("fabric", {"processes": [record("leaf1")], "missing": []}))
    labs.judge_fidelity(run)
    assert run.unfaithful == ""
    stalled = [record("leaf1"), record("spine2", stall_frames=40.0)]
    run.fabrics.documents.append(("fabric", {"processes": stalled, "missing": []}))
    labs.judge_fidelity(run)
    assert "fabric/spine2" in run.unfaithful and "spine9" not in run.unfaithful
    run.check("queue p99", True, 1, "<= 2", "")
    assert "fell behind" not in labs.render(run)  # nothing failed: nothing to excuse
    run.check("utilisation", False, 0.9, ">= 0.97", "lower Kmin")
    line = labs.render(run).splitlines()[-2]
    assert line.startswith("  the emulator fell behind its links during this check (")
    assert "fabric/spine2 stalled" in line and "check again" in line

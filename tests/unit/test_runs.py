"""The run layer (emu/runs.py): a run judges the fabrics it opened, from what each
measured of itself as it closed, whatever lies on disk; no root, no fabric."""

from __future__ import annotations

import json

import pytest

from emu import runs, scenario
from emu.registry import FabricError

from .fakes import fidelity_record as record


class FakeFabric:
    """emu.net.Fabric as RunFabrics drives it: open (or fail to), close, its fidelity."""

    def __init__(self, graph, out_dir: str, stalled: bool = False, fails: bool = False) -> None:
        self.out_dir, self.stalled, self.fails = out_dir, stalled, fails
        self.opened = self.closed = False
        self.fidelity_document = None

    def open(self) -> None:
        self.opened = True
        if self.fails:
            raise FabricError("the controller did not converge")

    def close(self) -> None:
        self.closed = True
        name = "spine1" if self.stalled else "leaf1"
        rec = record(name, stall_frames=40.0) if self.stalled else record(name)
        self.fidelity_document = {"processes": [rec], "missing": []}


@pytest.fixture
def fake_fabric(monkeypatch):
    monkeypatch.setattr(runs, "Fabric", FakeFabric)


def test_each_fabric_gets_its_folder_and_the_run_keeps_its_fidelity(tmp_path, fake_fabric):
    run = runs.RunFabrics(tmp_path)
    with run.open(None) as a, run.open(None, "mode-b") as b:
        assert (a.out_dir, b.out_dir) == (str(tmp_path), str(tmp_path / "mode-b"))
    assert a.closed and b.closed
    assert [label for label, _ in run.documents] == ["mode-b", ""]  # as they closed
    assert [r["name"] for _, r in run.latest_records()] == ["leaf1"]


def test_a_fabric_the_block_or_its_start_fails_is_closed_and_its_fidelity_kept(
    tmp_path, fake_fabric
):
    run = runs.RunFabrics(tmp_path)
    with pytest.raises(RuntimeError), run.open(None, "a", stalled=True):
        raise RuntimeError("the workload failed")
    with pytest.raises(FabricError):
        run.start(None, "b", fails=True)
    assert [label for label, _ in run.documents] == ["a", "b"]


def test_a_scenario_is_judged_on_its_fabrics_not_on_what_its_folder_holds(tmp_path, fake_fabric):
    # An earlier run's stalled fabric left its record in the same results folder.
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "fidelity.json").write_text(
        json.dumps({"processes": [record("spine9", stall_frames=40.0)], "missing": []})
    )
    ctx = scenario.Context("x", {}, tmp_path)
    with ctx.fabric(None, "now"):
        ctx.check("the network's own check", True, 1, "1")
    scenario.add_fidelity(ctx)
    assert scenario.faithful(ctx) and "spine9" not in scenario.render_report(ctx)
    with ctx.fabric(None, "later", stalled=True):
        pass
    ctx.checks = [c for c in ctx.checks if not c.fidelity]
    scenario.add_fidelity(ctx)
    assert not scenario.faithful(ctx) and "later/spine1" in scenario.render_report(ctx)


def test_a_run_that_opened_no_fabric_has_no_fidelity_to_judge_and_says_so(tmp_path):
    ctx = scenario.Context("x", {}, tmp_path)
    scenario.add_fidelity(ctx)
    [check] = ctx.checks
    assert not check.passed and "closed no fabric" in str(check.value)

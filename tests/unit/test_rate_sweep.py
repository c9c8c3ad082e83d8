"""bench/rate_sweep.py's bookkeeping: an unfaithful run's TCP figure is never the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import rate_sweep


def _metrics(wire_bps: float, faithful: bool, passed: bool, steal_s: float = 0.0) -> dict:
    return {
        "metrics": {"tcp": {"wire_bps": wire_bps}, "fidelity": {"steal_s": steal_s}},
        "faithful": faithful,
        "passed": passed,
    }


def test_unfaithful_runs_are_counted_but_not_quoted(tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    report.write_text(
        "checks\n  [FAIL] TCP reaches >= 90% of link rate: 0.5\n"
        "unfaithful run (its failed checks may be the emulator's): leaf4 port 1 sent 75.7%\n"
    )
    row = rate_sweep.RateRow(100.0)
    rate_sweep.record(row, _metrics(97e6, True, True), tmp_path / "none.txt")
    rate_sweep.record(row, _metrics(50e6, False, False, steal_s=0.02), report)
    rate_sweep.record(row, {"error": "exit 1: boom"}, tmp_path / "none.txt")
    assert (row.runs, row.faithful, row.passed) == (3, 1, 1)
    assert row.of_link_faithful == [0.97]
    assert row.of_link == [0.97, 0.5]
    assert row.verdict.startswith("unfaithful run") and "leaf4 port 1" in row.verdict
    assert row.errors == ["exit 1: boom"]
    text = rate_sweep.table([row], markdown=True)
    assert "| 100 | 3 | 1 | 1 | 0.970 / 0.970 / 0.970 | 0.500 / 0.735 / 0.970 | 20 |" in text


def test_a_run_without_metrics_is_an_error_not_a_zero(tmp_path: Path, monkeypatch) -> None:
    fake_emu = tmp_path / "fake_emu.py"
    fake_emu.write_text(
        "import sys\nprint('smoke: no such parameter', file=sys.stderr)\nsys.exit(2)\n"
    )
    result = rate_sweep.one_run(["python3", str(fake_emu)], 100.0, tmp_path / "out")
    assert result == {"error": "exit 2: smoke: no such parameter"}
    ok = tmp_path / "ok_emu.py"
    ok.write_text(
        "import json, sys, pathlib\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1])\n"
        "assert 'rate_mbps=100' in sys.argv and 'pause-storm' in sys.argv\n"
        "out.mkdir(parents=True)\n"
        f"(out / 'metrics.json').write_text({json.dumps(json.dumps(_metrics(1e8, True, True)))})\n"
    )
    result = rate_sweep.one_run(["python3", str(ok)], 100.0, tmp_path / "out2", "pause-storm")
    assert result["faithful"] is True


def test_bad_rates_are_named(capsys) -> None:
    for argv, words in ((["--rates", "20,fast"], "20,fast"), (["--rates", "0"], "> 0")):
        with pytest.raises(SystemExit) as exc:
            rate_sweep.main(argv)
        assert exc.value.code == 2
        assert words in capsys.readouterr().err

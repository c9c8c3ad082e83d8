"""The ecn-thresholds scenario's expected outcome, via `emu run ecn-thresholds`."""

from __future__ import annotations

import subprocess
import sys

from . import ROOT, assert_checks, emu_run


def test_training_vs_storage_thresholds(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "ecn", "ecn-thresholds")
    assert_checks(res, doc, count=4)
    v = doc["metrics"]["variants"]
    # Marks happen only where the thresholds say: the storage setting never marks
    # below its Kmin, so its median queue sits above it.
    assert v["storage"]["queue_p50_bytes"] >= v["storage"]["kmin_kmax"][0]


def test_kmin_above_kmax_is_rejected(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "emu.cli",
            "run",
            "ecn-thresholds",
            "--set",
            "training_kmin_frames=20",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 2 and "training_kmin_frames=20" in res.stderr

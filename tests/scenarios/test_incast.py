"""The incast scenario's expected outcome on real RoCEv2 traffic, via `emu run incast`.

8 NIC agents send to one over a 2-spine/3-leaf fabric, three times: PFC off
(drops, go-back-N), PFC (zero drops, full link), PFC + ECN/DCQCN (full link,
fair, short queue, little PAUSE). Every check is asserted by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHECKS = [
    "PFC: zero drops anywhere",
    "PFC: bottleneck utilisation >= 90%",
    "PFC off: frames are dropped",
    "PFC off: go-back-N retransmits",
    "DCQCN: bottleneck utilisation >= 90%",
    "DCQCN: Jain's fairness >= 0.9",
    "DCQCN: queue mostly between Kmin and Kmax",
    "DCQCN: PAUSE rare compared with PFC only",
]


def test_incast_lossy_vs_pfc_vs_dcqcn(tmp_path, no_leaks):
    out = tmp_path / "incast"
    res = subprocess.run([sys.executable, "-m", "emu.cli", "run", "incast", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    doc = json.loads((out / "metrics.json").read_text())
    checks = {c["name"]: c for c in doc["checks"]}
    for name in CHECKS:
        assert name in checks, f"{name!r} missing; report:\n{res.stdout}"
        assert checks[name]["passed"], f"{name}: {checks[name]}\n{res.stdout}"
    assert res.returncode == 0
    modes = doc["metrics"]["modes"]
    # The story in numbers: PFC trades drops for PAUSE; DCQCN removes most PAUSE.
    assert modes["pfc"]["pfc_frames"] > 0 and modes["lossy"]["pfc_frames"] == 0
    assert modes["dcqcn"]["cnps"] > 0 and modes["pfc"]["cnps"] == 0
    assert (out / "incast.png").stat().st_size > 10_000


def test_incast_bad_modes_is_a_clear_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "emu.cli", "run", "incast", "--set",
                          "modes=pfc,magic", "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 2 and "modes='pfc,magic'" in res.stderr
    assert "Traceback" not in res.stderr

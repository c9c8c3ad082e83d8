"""Scenario tests: each runs `emu run NAME` as a user would and reads metrics.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def emu_run(out, name: str, *sets: str, timeout_s: float = 600):
    """`emu run NAME --set ... --out OUT`; returns (completed process, metrics.json)."""
    argv = [sys.executable, "-m", "emu.cli", "run", name, "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s)
    metrics = out / "metrics.json"
    doc = json.loads(metrics.read_text()) if metrics.exists() else {}
    return res, doc


def assert_checks(res, doc, names=None, count=None):
    """Every named check (or every check) passed, and `emu run` exited 0.

    `count` is the number of the scenario's own checks; the fidelity checks that
    every run adds (emu/fidelity.py) must pass too, for the run to exit 0.
    """
    checks = {c["name"]: c for c in doc.get("checks", [])}
    if count is not None:
        own = [c for c in checks.values() if not c.get("fidelity")]
        assert len(own) == count, f"{len(own)} checks, expected {count}\n{res.stdout}"
    fidelity = [c for c in checks.values() if c.get("fidelity")]
    assert fidelity and all(c["passed"] for c in fidelity), \
        f"unfaithful run: {[c for c in fidelity if not c['passed']]}\n{res.stdout}"
    for name in names or list(checks):
        assert name in checks, f"check {name!r} missing; report:\n{res.stdout}{res.stderr}"
        assert checks[name]["passed"], f"{name}: {checks[name]}\n{res.stdout}"
    assert res.returncode == 0, res.stdout + res.stderr
    assert doc["passed"] is True

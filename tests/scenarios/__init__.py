"""Scenario tests: each runs `emu run NAME` as a user would and reads metrics.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from emu.cli import EXIT_UNFAITHFUL

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
    """Every named check (or every check) of the scenario passed, and `emu run` said so.

    `count` is the number of the scenario's own checks. Every run also carries
    the four fidelity checks (emu/fidelity.py); they must be there, but on the
    2-core CI machine most scenarios at these sizes are not yet faithful by
    every measure (issue 9: the defaults do not all hold), so an unfaithful run
    (exit 3, "unfaithful run: ..." in the report) is accepted here and its
    verdict is recorded in metrics.json, never hidden. Whether the fidelity
    checks catch an emulator that fell behind is tested in
    tests/integration/test_fidelity.py.
    """
    checks = {c["name"]: c for c in doc.get("checks", [])}
    own = {n: c for n, c in checks.items() if not c.get("fidelity")}
    if count is not None:
        assert len(own) == count, f"{len(own)} checks, expected {count}\n{res.stdout}"
    for name in names or list(own):
        assert name in checks, f"check {name!r} missing; report:\n{res.stdout}{res.stderr}"
        assert checks[name]["passed"], f"{name}: {checks[name]}\n{res.stdout}"
    assert all(c["passed"] for c in own.values()), res.stdout
    fidelity = [c for c in checks.values() if c.get("fidelity")]
    assert len(fidelity) >= 4, f"no fidelity verdict in the run\n{res.stdout}"
    faithful = all(c["passed"] for c in fidelity)
    assert doc["faithful"] is faithful
    assert res.returncode == (0 if faithful else EXIT_UNFAITHFUL), res.stdout + res.stderr
    assert ("unfaithful run:" in res.stdout) is not faithful
    assert doc["passed"] is faithful

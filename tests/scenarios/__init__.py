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
    the four fidelity checks (emu/fidelity.py), and their verdict decides what
    a failed check of the network means:

    - a faithful run (the emulator kept up) must pass every check: a failure
      is the emulated network's, a real regression;
    - an unfaithful run is never quoted (DESIGN.md), neither as a pass nor as a
      fail: if its network checks failed, the test is marked xfail with the
      run's one "unfaithful run" line, so the reason shows in the summary. On
      the 2-core CI machine most scenarios at these sizes are not yet faithful
      by every measure (issue 9: the defaults do not all hold).

    Whether the fidelity checks catch an emulator that fell behind is tested
    in tests/integration/test_fidelity.py.
    """
    import pytest

    checks = {c["name"]: c for c in doc.get("checks", [])}
    own = {n: c for n, c in checks.items() if not c.get("fidelity")}
    fidelity = [c for c in checks.values() if c.get("fidelity")]
    assert len(fidelity) >= 4, f"no fidelity verdict in the run\n{res.stdout}{res.stderr}"
    faithful = all(c["passed"] for c in fidelity)
    assert doc["faithful"] is faithful
    assert ("unfaithful run" in res.stdout) is not faithful, res.stdout
    failed = [n for n, c in own.items() if not c["passed"]]
    if failed and not faithful:
        # A run the fabric failed mid-way ("scenario completed", a condition that never
        # came) is judged the same way: in an unfaithful run it may be the machine's.
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith("unfaithful run"))
        pytest.xfail(f"checks {failed} failed in an unfaithful run: {line}")
    if count is not None:
        assert len(own) == count, f"{len(own)} checks, expected {count}\n{res.stdout}{res.stderr}"
    for name in names or list(own):
        assert name in checks, f"check {name!r} missing; report:\n{res.stdout}{res.stderr}"
    for name in names or list(own):
        assert checks[name]["passed"], f"{name}: {checks[name]}\n{res.stdout}"
    assert not failed, f"checks {failed} failed in a faithful run\n{res.stdout}"
    assert res.returncode == (0 if faithful else EXIT_UNFAITHFUL), res.stdout + res.stderr
    assert doc["passed"] is faithful


def require_faithful(res, doc, what: str) -> None:
    """Mark the test xfail, naming `what` is not judged, when the run was unfaithful.

    For a test's own assertions on timing (how many frames a loss cost, a rate, a
    delay) beyond the scenario's checks: in a run where the emulator fell behind
    they would measure the machine (DESIGN.md), as the checks would.
    """
    import pytest

    if not doc.get("faithful", False):
        line = next(
            (ln for ln in res.stdout.splitlines() if ln.startswith("unfaithful run")), "unfaithful"
        )
        pytest.xfail(f"{what}: not judged in an unfaithful run: {line}")


# The checks smoke reports on a fabric without tiers (torus, dragonfly: every
# switch is tier 0, so ECMP is judged at the first hop only).
FLAT_SMOKE_CHECKS = [
    "LLDP found every link",
    "ARP found every host",
    "all-pairs ping: 0% loss",
    "TCP reaches >= 90% of link rate",
    "pacing: never above link rate + burst",
    "ECMP spreads flows over more than one first hop",
    "the link cut carried the pings before the cut",
    "reachability returns after link down (no restart)",
    "all-pairs ping after link failure: 0% loss",
]
# ... and on a leaf/spine (built by parameters or from a file), a fat tree or a
# rail-optimized fabric: also over more than one top-tier switch.
LEAF_SPINE_CHECKS = FLAT_SMOKE_CHECKS + ["ECMP spreads flows over more than one top-tier switch"]

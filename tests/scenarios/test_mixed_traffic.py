"""The mixed-traffic scenario's expected outcome, via `emu run mixed-traffic`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tcp_on_the_rdma_class_hurts_rdma(tmp_path, no_leaks):
    out = tmp_path / "mixed"
    res = subprocess.run([sys.executable, "-m", "emu.cli", "run", "mixed-traffic", "--out",
                          str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    doc = json.loads((out / "metrics.json").read_text())
    failed = [c for c in doc["checks"] if not c["passed"]]
    assert len(doc["checks"]) == 4 and not failed, f"{failed}\n{res.stdout}"
    assert res.returncode == 0
    v = doc["metrics"]["variants"]
    # Only RDMA's packets are ECN-capable: only RDMA is told to slow down.
    assert v["misconfigured"]["rdma_cnps"] > 0 and v["correct"]["rdma_cnps"] == 0

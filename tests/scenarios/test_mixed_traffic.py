"""The mixed-traffic scenario's expected outcome, via `emu run mixed-traffic`."""

from __future__ import annotations

from . import assert_checks, emu_run


def test_tcp_on_the_rdma_class_hurts_rdma(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "mixed", "mixed-traffic")
    assert_checks(res, doc, count=4)
    v = doc["metrics"]["variants"]
    # Only RDMA's packets are ECN-capable: only RDMA is told to slow down.
    assert v["misconfigured"]["rdma_cnps"] > 0 and v["correct"]["rdma_cnps"] == 0

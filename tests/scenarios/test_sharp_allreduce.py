"""The sharp-allreduce scenario via `emu run`: ring vs in-network aggregation on 8 ranks."""

from __future__ import annotations

from . import assert_checks, emu_run


def test_ring_and_sharp_are_correct_and_sharp_gains_what_a_switch_can(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "sa", "sharp-allreduce", "sizes=1K:4M", "factor=4", timeout_s=600)
    assert_checks(res, doc, count=8)
    m = doc["metrics"]
    assert m["ranks"] == 8
    ring, sharp = m["results"]["ring"], m["results"]["sharp"]
    assert [r["size_bytes"] for r in ring] == [
        1 << 10,
        1 << 12,
        1 << 14,
        1 << 16,
        1 << 18,
        1 << 20,
        1 << 22,
    ]
    assert all(r["algo"] == "sharp" and r["wrong"] == 0 for r in sharp)
    # nccl-tests' table is in the report, with #wrong 0 on every row.
    assert "#wrong" in res.stdout and "# Out of bounds values : 0 OK" in res.stdout
    # The aggregation manager registered and released one job per algorithm run.
    kinds = [e["kind"] for e in m["aggregation_events"]]
    assert kinds.count("register") == 1 and kinds.count("unregister") == 1
    assert (tmp_path / "sa" / "sharp-allreduce.png").stat().st_size > 10_000

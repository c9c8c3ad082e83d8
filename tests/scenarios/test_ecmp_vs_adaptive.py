"""The ecmp-vs-adaptive scenario via `emu run`, and its flow-level model (no root for the model)."""

from __future__ import annotations

import random

import pytest

from emu import fabric as fabric_mod
from scenarios.ecmp_vs_adaptive import ecmp_expectation, max_min_rates, traffic

from . import assert_checks, emu_run

# Over 5 seeds on the 2-core VM adaptive/ECMP is 1.53x (stride 4) and 1.67x (stride 8),
# with ECMP's single seeds from 0.47 to 0.77 of non-blocking (README). Over the 3 seeds
# CI affords, the test guards that adaptive stays clearly ahead, below that spread.
MIN_GAIN_HERE = 1.25
MIN_ADAPTIVE_HERE = 0.85


def test_max_min_rates_progressive_filling():
    # Two flows share link a; the third is alone on b: 0.5, 0.5, 1.
    assert max_min_rates([[("a",)], [("a",)], [("b",)]]) == pytest.approx([0.5, 0.5, 1.0])
    # The bottleneck of flow 0 frees capacity for flow 1 on the shared link.
    rates = max_min_rates([[("x",), ("y",)], [("y",)], [("x",)], [("x",)]])
    assert rates == pytest.approx([1 / 3, 2 / 3, 1 / 3, 1 / 3])


def test_patterns_and_the_ecmp_expectation_on_k4():
    g = fabric_mod.fat_tree(k=4)
    hosts = fabric_mod.hosts(g)
    stride4 = traffic(g, "stride4", random.Random(0))
    assert stride4[0] == ("h1", "h5") and stride4[-1] == ("h16", "h4")
    perm = traffic(g, "random", random.Random(3))
    assert sorted(d for _s, d in perm) == sorted(hosts) and all(s != d for s, d in perm)
    rng = random.Random(1)
    # Random hashing on a k=4 fat-tree gives about 0.6 of a non-blocking switch.
    assert 0.55 < ecmp_expectation(g, lambda: traffic(g, "random", rng), 400, rng) < 0.65
    assert ecmp_expectation(g, lambda: traffic(g, "stride1", rng), 50, rng) == pytest.approx(1.0)


def test_adaptive_beats_ecmp_and_ecmp_hashes_like_real_ecmp(tmp_path, no_leaks):
    # 3 seeds here to keep CI short; the acceptance run (README) uses 5.
    res, doc = emu_run(tmp_path / "eva", "ecmp-vs-adaptive", "patterns=stride4,stride8,random",
                       "modes=ecmp,adaptive", "seeds=3", f"min_gain={MIN_GAIN_HERE}",
                       timeout_s=1500)
    assert_checks(res, doc, count=5)
    means = doc["metrics"]["mean_normalised"]
    for pat in ("stride4", "stride8"):
        assert len(doc["metrics"]["normalised"]["ecmp"][pat]) == 3
        assert means["adaptive"][pat] >= MIN_ADAPTIVE_HERE
    # The adaptive controller placed elephants (and released them between runs).
    assert doc["metrics"]["adaptive_status"]["placed_total"] >= 3 * 2 * 16 * 0.8
    assert (tmp_path / "eva" / "ecmp-vs-adaptive.png").stat().st_size > 10_000

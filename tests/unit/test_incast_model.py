"""DCQCN's fluid model (emu/models/dcqcn.py) of the incast scenario: fixed point, dynamics."""

from __future__ import annotations

import pytest

from emu import fabric as fabric_mod
from emu.models.dcqcn import DATA_FRAME_BYTES, dcqcn_model, empty_share, percentile, transient
from emu.scenario import build_fabric_graph
from scenarios import incast


def model(**overrides) -> tuple[dict, dict]:
    p = {k: v.default for k, v in incast.PARAMS.items()} | overrides
    graph = build_fabric_graph(p)
    hosts = fabric_mod.hosts(graph)
    return p, dcqcn_model(p, graph, hosts[: p["senders"]], hosts[-1], incast.QOS["dcqcn"])


def test_defaults_fixed_point_between_kmin_and_kmax_but_the_queue_cycles():
    """At 1 Gbit/s modelled over 20 Mbit/s the CNP interval is 2.5 ms, and marking at
    enqueue puts the queue's own ~10 ms into the loop: the fixed point is unstable,
    as on the fabric."""
    _, m = model()
    kmin, kmax = 6056, 24224  # 4 and 16 full frames: the thresholds' floors
    assert kmin < m["fixed_point"]["queue_bytes"] < kmax
    assert m["loop_delay_at_fixed_point_s"] > 4 * m["cnp_interval_s"]
    assert m["queue_p50_bytes"] == 0 and m["queue_empty_share"] > 0.3
    assert kmax < m["queue_p95_bytes"] < 1.5 * kmax
    # Every sender at line rate until the first CNPs: far above Kmax, then back.
    assert m["transient_peak_bytes"] > 5 * kmax
    assert m["transient_settled_s"] < 1.0


def test_slow_timers_settle_at_the_fixed_point():
    """At 10 Gbit/s modelled the CNP interval (50 ms) outlasts the loop delay: the fluid
    queue comes to rest where the closed-form fixed point says."""
    # alpha settles with time constant K/g = 55 ms x 256 = 14 s here: wait three of them.
    _, m = model(modelled_gbps=10.0, duration_s=60.0, warmup_s=50.0)
    assert m["loop_delay_at_fixed_point_s"] < m["cnp_interval_s"]
    assert m["queue_empty_share"] == 0
    assert m["queue_p50_bytes"] == pytest.approx(m["fixed_point"]["queue_bytes"], rel=0.02)


def test_transient_of_a_queue_series():
    depth = [(0.0, 0), (0.1, 50_000), (0.2, 30_000), (0.3, 20_000), (0.4, 25_000)]
    assert transient(depth, kmax=24_224) == (0.1, 50_000, 0.3)
    assert transient([(0.0, 0), (0.1, 90_000)], kmax=24_224)[2] is None


def test_percentile_and_empty_share_of_a_queue_series():
    xs = [40.0, 10.0, 30.0, 20.0]
    # Sorted 10, 20, 30, 40: rank floor(4 x 50 / 100) = 2 is 30; floor(4 x 99 / 100) = 3 is 40.
    assert (percentile(xs, 50), percentile(xs, 99), percentile(xs, 100)) == (30.0, 40.0, 40.0)
    assert percentile([], 50) == 0.0
    # Below one data frame counts as empty: 2 of 4.
    assert empty_share([0, DATA_FRAME_BYTES - 1, DATA_FRAME_BYTES, 90_000]) == 0.5
    assert empty_share([]) == 0.0

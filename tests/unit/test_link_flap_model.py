"""link-flap's flow-level model (emu/models/flap.py) on the scenario's flows, no fabric."""

from __future__ import annotations

import doctest
from types import SimpleNamespace

import pytest

from emu import fabric as fabric_mod
from emu.models import flap
from emu.models.flap import during_floor, goodput_floor
from scenarios import link_flap


def floor_of(spines: int) -> dict:
    g = fabric_mod.leaf_spine(leaves=4, spines=spines, hosts_per_leaf=2)
    return goodput_floor(g, link_flap.tcp_flows(g), link_flap.flapping_link(g))


def test_the_default_fabric_keeps_two_thirds_at_worst():
    """2 spines: leaf1's and leaf3's flows on both spines before, on one while damped, and
    the other leaves' flows colliding: (10 + 10 + 10 + 10) / (20 + 20 + 10 + 10)."""
    model = floor_of(2)
    assert model["worst_ratio"] == pytest.approx(2 / 3)
    assert model["outcomes"] == 2**8 and not model["sampled"]
    assert model["worst_ratio"] < model["mean_ratio"] < 1


def test_the_models_doctests_pass():
    result = doctest.testmod(flap, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_a_third_spine_loses_less_on_average():
    # Fewer flows collide before the flap, and leaf1 keeps two of its three uplinks.
    assert floor_of(3)["mean_ratio"] > floor_of(2)["mean_ratio"]


def test_the_floor_subtracts_the_rto_backoff_left_in_the_window():
    def floor_at(damped_after_s):
        # 30 s of flapping every 0.3 s; a 64 KiB lossy queue (1/16 of 1 MiB) at 10 Mbit/s.
        return during_floor(2 / 3, 30.0, 0.3, damped_after_s, 65536, 10e6)

    # Damped at the third down (0.6 s): RTO 0.2 s + a 64 KiB lossy queue at 10 Mbit/s
    # (52 ms), doubled twice, ends 0.66 s into the window that starts at 1 s.
    floor = floor_at(0.65)
    assert floor["downs_before_damping"] == 3
    rto_s = 0.2 + 65536 * 8 / 10e6
    assert floor["backoff_in_window_s"] == pytest.approx(0.65 + rto_s * 4 - 1, abs=1e-3)
    assert floor["ratio"] == pytest.approx(
        2 / 3 * (1 - floor["backoff_in_window_s"] / 29), abs=1e-4
    )
    # Never damped: no floor at all (the damping check fails instead).
    assert floor_at(None)["ratio"] == 0


def test_a_stuck_flow_is_named_with_when_and_its_retransmissions():
    def doc(written, received, retrans):
        return {
            "intervals": [
                {"sum": {"bits_per_second": r, "retransmits": x}} for r, x in zip(written, retrans)
            ],
            "server_output_json": {
                "intervals": [{"sum": {"bits_per_second": r}} for r in received]
            },
        }

    p = {"start_s": 3.0, "flap_s": 4.0, "stuck_s": 3.0}
    moving = doc([5e6] * 10, [5e6] * 10, [0] * 10)
    silent = doc(
        [5e6, 5e6, 5e6, 5e6, 0, 0, 0, 0, 5e6, 5e6],
        [5e6, 5e6, 5e6, 5e6, 0, 0, 0, 0, 5e6, 5e6],
        [0, 0, 0, 2, 1, 1, 0, 1, 0, 0],
    )
    # A sender whose socket buffer is full writes nothing while its receiver still
    # gets bytes: that flow moves, it is not stuck.
    draining = doc([5e6, 5e6, 5e6, 0, 0, 0, 0, 5e6, 5e6, 5e6], [1e6] * 10, [0] * 10)
    pings = {("h1", "h3"): SimpleNamespace(longest_outage_s=0.1)}
    r = link_flap.summarise(
        p,
        0.0,
        [moving, silent, draining],
        pings,
        {},
        [],
        0,
        3,
        [("h1", "h5"), ("h2", "h6"), ("h3", "h7")],
    )
    assert r["stuck_flows"] == 1
    # Goodput is the receivers' (5 + 5 + 1 Mbit/s), not the senders' writes (5 + 5 + 5).
    assert r["before_mbps"] == pytest.approx(11.0)
    assert r["stuck_detail"] == [
        {
            "flow": "h2->h6",
            "silent_from_s": 4,
            "silent_s": 4,
            "retransmits_before": 2,
            "retransmits_during": 3,
        }
    ]

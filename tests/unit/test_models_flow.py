"""The flow-level model (emu/models/flow.py): max-min and proportional fairness, ACKs, RTT bias."""

from __future__ import annotations

import pytest

from emu import fabric as fabric_mod
from emu.models.flow import (
    ack_load_from,
    max_min_rates,
    normalised_throughput,
    proportional_fair_rates,
    rtt_weights,
)


def test_max_min_rates_progressive_filling():
    # Two flows share link a; the third is alone on b: 0.5, 0.5, 1.
    assert max_min_rates([[("a",)], [("a",)], [("b",)]]) == pytest.approx([0.5, 0.5, 1.0])
    # The bottleneck of flow 0 frees capacity for flow 1 on the shared link.
    rates = max_min_rates([[("x",), ("y",)], [("y",)], [("x",)], [("x",)]])
    assert rates == pytest.approx([1 / 3, 2 / 3, 1 / 3, 1 / 3])


def test_proportional_fairness_penalises_the_flow_that_crosses_two_bottlenecks():
    # Links a and b, one flow on each and one across both: max-min gives all 1/2,
    # proportional fairness 2/3, 1/3, 2/3 (Kelly 1998), a larger total.
    paths = [[("a",)], [("a",), ("b",)], [("b",)]]
    assert max_min_rates(paths) == pytest.approx([0.5, 0.5, 0.5])
    assert proportional_fair_rates(paths) == pytest.approx([2 / 3, 1 / 3, 2 / 3], abs=1e-5)
    # Solved by hand from the Lagrangian: 1/4, 3/4, 3/8, 3/8.
    paths = [[("x",), ("y",)], [("y",)], [("x",)], [("x",)]]
    assert proportional_fair_rates(paths) == pytest.approx([0.25, 0.75, 0.375, 0.375], abs=1e-5)
    # Flows alone on their links get the link, and the rates always fit.
    assert proportional_fair_rates([[("a",)], [("b",)]]) == pytest.approx([1.0, 1.0])


def test_acks_share_the_links_of_the_data_going_their_way():
    # Two hosts send to each other: each link carries one flow's data and the
    # other's ACKs, so each flow gets 1 / (1 + k) of a link.
    paths = [[("a", "sw"), ("sw", "b")], [("b", "sw"), ("sw", "a")]]
    acks = [paths[1], paths[0]]
    assert proportional_fair_rates(paths, acks=acks, ack_load=0.0646) == pytest.approx(
        [1 / 1.0646] * 2, abs=1e-5
    )
    # Without an ACK load the ACK paths change nothing.
    assert proportional_fair_rates(paths, acks=acks) == pytest.approx([1.0, 1.0], abs=1e-5)


def test_the_ack_load_is_what_the_non_blocking_switch_measured():
    # A permutation of 16: every host sends and receives, k = n x alone / together - 1
    # (0.956 and 0.898 Mbit/s per flow were measured at 1 Mbit/s, /tmp-free: README).
    perm = [(f"h{i}", f"h{(i + 7) % 16 + 1}") for i in range(1, 17)]
    assert ack_load_from(perm, 0.956e6, 16 * 0.898e6) == pytest.approx(0.956 / 0.898 - 1, rel=1e-4)
    # Flows that lost nothing together need no ACK load; nor does one flow alone.
    assert ack_load_from(perm, 0.956e6, 16 * 0.956e6) == 0.0
    assert ack_load_from([("h1", "h2")], 0.956e6, 0.956e6) == 0.0


def test_a_host_whose_incoming_flow_collided_sends_faster_with_acks_in_the_model():
    g = fabric_mod.fat_tree(k=4)
    # h1 -> h5 and h2 -> h6 collide on every fabric link (half a link each); h5 -> h1
    # and h6 -> h2 come back on disjoint paths, and each shares its host's uplink
    # with the ACKs of the collided flow that host receives.
    flows = [("h1", "h5"), ("h2", "h6"), ("h5", "h1"), ("h6", "h2")]
    there = ["e1", "a1", "c1", "a3", "e3"]
    paths = [
        ["h1", *there, "h5"],
        ["h2", *there, "h6"],
        ["h5", "e3", "a3", "c1", "a1", "e1", "h1"],
        ["h6", "e3", "a4", "c4", "a2", "e1", "h2"],
    ]
    # The ACKs take the other core pair, as a hash may.
    acks = [
        ["h5", "e3", "a4", "c3", "a2", "e1", "h1"],
        ["h6", "e3", "a4", "c3", "a2", "e1", "h2"],
        ["h1", "e1", "a2", "c4", "a4", "e3", "h5"],
        ["h2", "e1", "a2", "c4", "a4", "e3", "h6"],
    ]
    assert all(g.has_edge(u, v) for nodes in paths + acks for u, v in zip(nodes, nodes[1:]))
    without = normalised_throughput(flows, paths, proportional_fair_rates)
    with_acks = normalised_throughput(flows, paths, ack_paths=acks, ack_load=0.0646)
    # The non-blocking switch loses 1/(1+k) on every flow; in the fabric the
    # collided flows' small ACK streams cost the returning flows less.
    assert without == pytest.approx(0.75, abs=1e-4)
    assert with_acks > without + 0.01
    # No ACK load: proportional fairness without ACKs, not max-min (the default
    # allocation, which the bound fell back to when a run's ACK load came out 0).
    assert normalised_throughput(flows, paths, ack_paths=acks, ack_load=0.0) == pytest.approx(
        without, abs=1e-5
    )


def test_rtt_weights_favour_short_round_trips_as_1_over_rtt_squared_with_mean_1():
    weights = rtt_weights([0.01, 0.02])
    assert weights == pytest.approx([1.6, 0.4])  # 1/0.01^2 : 1/0.02^2 = 4 : 1, mean 1
    assert rtt_weights([0.01, 0.0]) is None and rtt_weights([]) is None

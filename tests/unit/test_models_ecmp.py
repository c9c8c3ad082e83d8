"""ECMP's collision model (emu/models/ecmp.py): expectations over hash draws, the model of
traced paths and its band, the next hops a hash took. Recorded runs:
test_ecmp_model_recorded.py and test_ecmp_model_rtt.py."""

from __future__ import annotations

import random

import pytest

from emu import fabric as fabric_mod
from emu.models import ecmp, stats
from emu.models.flow import normalised_throughput

# Two cross-pod flows on a k=4 fat tree, up through a1 and c1 together, or apart.
FLOWS = [("h1", "h5"), ("h2", "h6")]
SAME = [["h1", "e1", "a1", "c1", "a3", "e3", "h5"], ["h2", "e1", "a1", "c1", "a3", "e3", "h6"]]
APART = [["h1", "e1", "a1", "c1", "a3", "e3", "h5"], ["h2", "e1", "a2", "c4", "a4", "e3", "h6"]]


def test_fan_in_is_the_receivers_in_degrees_sorted():
    assert ecmp.fan_in([("h1", "h3"), ("h2", "h3"), ("h3", "h1")]) == (1, 2)
    assert ecmp.fan_in([(f"h{i}", f"h{i % 4 + 1}") for i in range(1, 5)]) == (1, 1, 1, 1)
    assert ecmp.fan_in([]) == ()


def test_the_model_on_traced_paths_and_the_spread_of_next_hops():
    g = fabric_mod.fat_tree(k=4)
    assert all(g.has_edge(u, v) for nodes in SAME + APART for u, v in zip(nodes, nodes[1:]))
    # Sharing two links, the flows get half a link each.
    assert normalised_throughput(FLOWS, SAME) == pytest.approx(0.5)
    assert normalised_throughput(FLOWS, APART) == pytest.approx(1.0)
    # Each cross-pod path makes two binary choices (edge -> agg, agg -> core).
    assert ecmp.next_hop_choices(g, SAME) == {2: [4, 0]}
    assert ecmp.next_hop_choices(g, APART) == {2: [2, 2]}
    # Within a pod, one choice (edge -> agg); on one edge switch, none.
    assert ecmp.next_hop_choices(g, [["h1", "e1", "a2", "e2", "h3"]]) == {2: [0, 1]}
    assert ecmp.next_hop_choices(g, [["h1", "e1", "h2"]]) == {}
    # Summed over patterns and runs.
    assert ecmp.hop_choices(g, {"a": [SAME], "b": [APART, SAME]}) == {2: [10, 2]}
    assert ecmp.hop_choices(g, {}) == {}


def test_the_expectation_over_hash_draws():
    # Two flows from leaf1 to leaf2 over two spines: together half the time (0.5),
    # apart the other half (1.0): 0.75.
    g = fabric_mod.leaf_spine(leaves=2, spines=2, hosts_per_leaf=2)
    rng = random.Random(0)
    two = [("h1", "h3"), ("h2", "h4")]
    assert ecmp.ecmp_expectation(g, lambda: two, 4000, rng) == pytest.approx(0.75, abs=0.02)
    # One flow per host pair on one edge switch: no choice, no collision.
    k4 = fabric_mod.fat_tree(k=4)
    same_edge = [(f"h{i}", f"h{i + 1 if i % 2 else i - 1}") for i in range(1, 17)]
    assert ecmp.ecmp_expectation(k4, lambda: same_edge, 20, rng) == pytest.approx(1.0)


def test_no_traced_run_gives_no_model():
    assert ecmp.ecmp_model_on_paths(["stride4"], {"stride4": []}, {}, {}, {}, []) == ({}, 0.0)


def test_the_model_on_paths_takes_its_ack_load_from_the_reference():
    """For a permutation, ack_load_from gives k = n x alone / together - 1."""
    flows = [("h1", "h5"), ("h5", "h1")]
    there = ["h1", "e1", "a1", "c1", "a3", "e3", "h5"]
    back = there[::-1]
    matrices = {"x": [flows]}
    paths = {"x": [[there, back]]}
    acks = {"x": [[back, there]]}
    ideal = {(1, 1): [1.8, 1.8]}
    on_paths, k = ecmp.ecmp_model_on_paths(["x"], matrices, paths, acks, ideal, [1.0])
    assert k == pytest.approx(2 * 1.0 / 1.8 - 1, abs=1e-6)
    # Each flow alone on its links, ACKs included alike in fabric and switch: 1.
    assert on_paths["max-min"]["x"] == pytest.approx([1.0])
    assert on_paths["proportional"]["x"] == pytest.approx([1.0], abs=1e-4)
    # A reference no slower than the lone flow: no ACK load.
    assert ecmp.ecmp_model_on_paths(["x"], matrices, paths, acks, {(1, 1): [2.0]}, [1.0])[1] == 0.0


def test_the_model_on_paths_is_the_band_of_max_min_and_weighted_proportional_fairness():
    flows = FLOWS
    matrices = {"stride4": [flows, flows]}
    paths = {"stride4": [SAME, APART]}
    acks = {"stride4": [[p[::-1] for p in SAME], [p[::-1] for p in APART]]}
    on_paths, k = ecmp.ecmp_model_on_paths(
        ["stride4"], matrices, paths, acks, {(1, 1): [2.0, 2.0]}, [1.0]
    )
    assert k == 0.0
    assert on_paths["max-min"]["stride4"] == pytest.approx([0.5, 1.0])
    assert on_paths["proportional"]["stride4"] == pytest.approx([0.5, 1.0], abs=1e-4)
    # Weighted by RTT, the shorter round trip takes more of the shared links; their
    # sum stays one link's worth, so the collided run stays at 0.5.
    weighted, _ = ecmp.ecmp_model_on_paths(
        ["stride4"], matrices, paths, acks, {(1, 1): [2.0]}, [1.0], {"stride4": [[0.01, 0.02]] * 2}
    )
    assert weighted["proportional"]["stride4"] == pytest.approx([0.5, 1.0], abs=1e-4)


def test_the_band_flattens_patterns_in_order_with_each_runs_reference():
    patterns = ["stride4", "random"]
    measured = {"random": [0.6, 0.62], "stride4": [0.55, 0.57]}
    on_paths = {
        "max-min": {"stride4": [0.54, 0.56], "random": [0.59, 0.6]},
        "proportional": {"stride4": [0.56, 0.58], "random": [0.61, 0.63]},
    }
    perm = [(f"h{i}", f"h{i % 16 + 1}") for i in range(1, 17)]
    into_one = [(f"h{i}", "h1") for i in range(2, 4)] + perm[2:]
    matrices = {"stride4": [perm, perm], "random": [into_one, perm]}
    reference = {ecmp.fan_in(perm): [14.0, 14.2], ecmp.fan_in(into_one): [10.0, 10.4]}
    band = ecmp.model_band(patterns, measured, on_paths, matrices, reference)
    keys = [ecmp.fan_in(perm), ecmp.fan_in(perm), ecmp.fan_in(into_one), ecmp.fan_in(perm)]
    assert band == stats.between(
        [0.55, 0.57, 0.6, 0.62], [0.54, 0.56, 0.59, 0.6], [0.56, 0.58, 0.61, 0.63], keys, reference
    )
    assert band.references == 4 and band.holds
    assert ecmp.model_band(["random"], {"random": [0.6]}, on_paths, matrices, reference) is None

"""Head-of-line blocking's model (emu/models/hol_blocking.py), by hand on small fabrics:
a port feeding the bottleneck gets 1/n of it, its k incast flows 1/(n k) each, and a
victim through that port moves as each of them does."""

from __future__ import annotations

import doctest

import pytest

from emu import fabric as fabric_mod
from emu.models import hol_blocking
from emu.models.hol_blocking import ModelMisfit, hol_shares, line_goodput_bps, payload_share

# credit-vs-pfc's fabric: two leaves of four hosts under one spine.
TWO_LEAVES = fabric_mod.leaf_spine(leaves=2, spines=1, hosts_per_leaf=4)


def test_doctests_pass():
    assert doctest.testmod(hol_blocking, verbose=False).failed == 0


def test_payload_share_of_a_data_frame():
    # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 = 58 bytes around the payload.
    assert payload_share() == 1024 / 1082
    assert payload_share(512) == 512 / 570
    assert line_goodput_bps(10e6) == 10e6 * (1024 / 1082)


def test_credit_vs_pfc_victim_moves_at_a_sixth_of_the_line():
    # leaf2's egress to h8 serves three ports (spine1, h5, h6): 1/3 each. The spine's third
    # carries h1 and h2 (1/6 each), and the victim h3 -> h7 enters leaf2 by the same port.
    m = hol_shares(TWO_LEAVES, ["h1", "h2", "h5", "h6"], "h8", ("h3", "h7"))
    assert m.ports == ("h5", "h6", "spine1")
    assert m.incast == pytest.approx({"h1": 1 / 6, "h2": 1 / 6, "h5": 1 / 3, "h6": 1 / 3})
    assert m.victim == pytest.approx(1 / 6)
    assert sum(m.incast.values()) == pytest.approx(1.0)  # the bottleneck stays full


def test_a_victim_on_a_class_of_its_own_keeps_its_max_min_share():
    m = hol_shares(TWO_LEAVES, ["h1", "h2", "h5", "h6"], "h8", ("h3", "h7"), same_class=False)
    assert m.victim == 1.0
    assert m.incast["h1"] == pytest.approx(1 / 6)  # the incast shares as before


def test_a_victim_that_enters_by_a_port_no_incast_flow_uses_is_not_blocked():
    # h7 -> h5 enters leaf2 from h7's own port; h3 -> h4 never reaches leaf2.
    for victim in (("h7", "h5"), ("h3", "h4")):
        assert hol_shares(TWO_LEAVES, ["h1", "h2", "h5", "h6"], "h8", victim).victim == 1.0


def test_an_incast_from_the_receivers_leaf_alone_leaves_the_spine_link_free():
    m = hol_shares(TWO_LEAVES, ["h5", "h6"], "h8", ("h3", "h7"))
    assert m.ports == ("h5", "h6")
    assert m.incast == pytest.approx({"h5": 0.5, "h6": 0.5})
    assert m.victim == 1.0


def test_flows_from_two_leaves_through_one_spine_port_share_it():
    # Three leaves, one spine: h1 (leaf1) and h3 (leaf2) reach h6 (leaf3) by the spine's
    # port alone, 1/2 each; a victim h2 -> h5 on that port moves as they do.
    g = fabric_mod.leaf_spine(leaves=3, spines=1, hosts_per_leaf=2)
    m = hol_shares(g, ["h1", "h3"], "h6", ("h2", "h5"))
    assert m.ports == ("spine1",)
    assert m.incast == pytest.approx({"h1": 0.5, "h3": 0.5})
    assert m.victim == pytest.approx(0.5)


def test_a_fabric_where_ecmp_splits_a_flow_does_not_fit_the_model():
    g = fabric_mod.leaf_spine(leaves=2, spines=2, hosts_per_leaf=2)
    with pytest.raises(ModelMisfit, match="2 shortest paths"):
        hol_shares(g, ["h1"], "h4", ("h2", "h3"))

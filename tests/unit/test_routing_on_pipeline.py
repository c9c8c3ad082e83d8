"""The routing controller's messages, applied to emu's own pipeline, forward packets.

The pure routing manager runs against the simulated fabric of
`fakes.PipelineFabric`: every message it sends (serialized by os-ken, as on
the wire) is also fed to an emu OpenFlow session per switch, so each switch holds
exactly the flows and groups the controller installed. Frames are then traced
hop by hop through the pipelines: every host reaches every other, different
UDP source ports take different spines (ECMP), and after a link goes down the
dead port is never used.
"""

from __future__ import annotations

import pytest

from controllers.routing import RoutingConfig, RoutingManager

from .fakes import PipelineFabric, fat_tree, hosts_of, leaf_spine, learn_all_hosts


def build(graph, switches, cables, hosts) -> PipelineFabric:
    mgr = RoutingManager(
        RoutingConfig(expect_switches=switches, expect_links=cables, expect_hosts=hosts)
    )
    fab = PipelineFabric(graph, mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert mgr.converged()
    return fab


@pytest.mark.parametrize("shape", ["leaf_spine", "fat_tree"])
def test_every_host_reaches_every_other_on_shortest_paths(shape):
    if shape == "leaf_spine":
        fab = build(leaf_spine(), 6, 8, 4)
        longest = 3
    else:
        fab = build(fat_tree(4), 20, 32, 16)
        longest = 5
    hosts = hosts_of(fab)
    for src in hosts:
        for dst in hosts:
            if src != dst:
                assert len(fab.trace(src, dst)) <= longest


def test_ecmp_spreads_udp_source_ports_over_both_spines():
    fab = build(leaf_spine(), 6, 8, 4)
    spines = {fab.trace("h1", "h3", sport)[1] for sport in range(49152, 49152 + 64)}
    assert spines == {"s1", "s2"}


def test_after_link_down_no_path_uses_it_and_all_pairs_still_reach():
    fab = build(leaf_spine(), 6, 8, 4)
    fab.set_link("l3", "s1", up=False)
    hosts = hosts_of(fab)
    for src in hosts:
        for dst in hosts:
            if src != dst:
                for sport in (1000, 2000, 3000, 4000):
                    path = fab.trace(src, dst, sport)
                    assert not ("l3" in path and "s1" in path), path

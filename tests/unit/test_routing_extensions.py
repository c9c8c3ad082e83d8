"""Routing's extensions composed (issue 30): adaptive routing and Tagger attached together.

Routing dispatches each of its fixed points to a list of managers, as Faucet's
valve does; here adaptive routing and Tagger are attached to one routing
manager and drive emu's own pipelines (`PipelineFabric`, no root): on a k=4
fat-tree adaptive places elephants as it does alone while Tagger finds no
bounce (up*/down* routes); on a ring routed one way round, Tagger re-tags the
bouncing packets while adaptive pins an elephant only onto the way routing's
policy allows. The launcher's `--extensions` and its refusal of two routing apps.
"""

from __future__ import annotations

import pytest

from controllers import launch
from controllers.adaptive import AdaptiveConfig, AdaptiveManager
from controllers.ring_next_hops import next_hops
from controllers.routing import RoutingConfig, RoutingInvariantError, RoutingManager
from controllers.tagger import TaggerManager
from emu.registry import free_tcp_port

from .fakes import (
    POLL_S,
    StatsFabric,
    fat_tree,
    hosts_of,
    learn_all_hosts,
    links_used,
    ring_graph,
    roce_walk,
    run_polls,
    stride,
)


def compose(graph, config: RoutingConfig) -> StatsFabric:
    routing = RoutingManager(config)
    fab = StatsFabric(graph, routing)
    fab.adaptive = AdaptiveManager(routing, AdaptiveConfig(poll_interval_s=POLL_S))
    fab.tagger = TaggerManager(routing)
    assert routing.extensions == (fab.adaptive, fab.tagger)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert routing.converged()
    return fab


def test_on_a_fat_tree_adaptive_places_elephants_beside_tagger_which_finds_no_bounce():
    fab = compose(fat_tree(4), RoutingConfig(expect_switches=20, expect_links=32, expect_hosts=16))
    pairs = stride(fab, 4)
    run_polls(fab, pairs, 3)
    status = fab.mgr.status()
    assert status["adaptive"]["placed_total"] == 16  # as alone (test_adaptive)
    assert max(links_used(fab, pairs).values()) == 1  # link-disjoint, through the pipelines
    # Up*/down* routes never bounce: Tagger is attached, computed, and adds nothing.
    assert status["tagger"] == {"lossless_queues": [3, 4], "rules": 0, "installed": 0, "bounces": 0}


def test_on_a_one_way_ring_tagger_retags_and_adaptive_keeps_to_the_policy():
    config = RoutingConfig(expect_switches=4, expect_links=4, expect_hosts=4, next_hops=next_hops)
    fab = compose(ring_graph(), config)
    ip = {h: fab.graph.nodes[h]["ip"] for h in hosts_of(fab)}
    # h2 -> h4 has two shortest paths, r2-r1-r4 (first in node order) and r2-r3-r4;
    # the policy routes one way round, r2-r3-r4: the only one adaptive may take.
    run_polls(fab, [("h2", "h4")], 3)
    [(pair, placement)] = fab.adaptive.placements.items()
    assert pair == (ip["h2"], ip["h4"])
    names = {v: k for k, v in fab.dpid.items()}
    assert [names[dpid] for dpid, _port in placement.hops] == ["r2", "r3"]
    assert fab.trace("h2", "h4", sport=40000) == ["r2", "r3", "r4"]
    # Its reverse pair is not pinned the other way round: the policy has no such path.
    assert fab.mgr.status()["adaptive"]["reverse_pinned"] == []
    assert fab.trace("h4", "h2") == ["r4", "r1", "r2"]
    # Tagger beside it: the elephant's path goes down (r2 -> r3) then up (r3 -> r4), so
    # at r3 Tagger's flow (above the elephant's) moves it to tag 2, DSCP 27 on queue 4,
    # and forwards it by routing's next hop, the pinned one on this ring.
    assert fab.mgr.status()["tagger"]["bounces"] == 2
    assert roce_walk(fab, "h2", "h4") == [("r2", 26, None), ("r3", 27, 4), ("r4", 27, 4)]
    assert [h[:2] for h in roce_walk(fab, "h4", "h2")] == [("r4", 26), ("r1", 26), ("r2", 26)]


class _Weights:
    """An extension that only weights buckets (the rest of the contract is a no-op)."""

    def __init__(self, routing, weights):
        self.weights = weights
        routing.attach(self)

    def switch_enter(self, dpid, now):
        return []

    def before_resync(self, view, now):
        pass

    def bucket_weights(self, view, dpid, ports, now):
        return self.weights[: len(ports)]

    def switch_flows(self, view, dpid, routes, flows, now):
        return []

    def tick(self, now):
        return []

    def status(self):
        return {type(self).__name__: list(self.weights)}


class _MoreWeights(_Weights):
    pass


def test_several_extensions_multiply_bucket_weights_and_one_kind_attaches_once():
    fab = StatsFabric(fat_tree(4), RoutingManager(RoutingConfig(expect_switches=20)))
    routing = fab.mgr
    first = _Weights(routing, (1, 4))
    _MoreWeights(routing, (3, 1))
    routing.attach(first)  # the same one again: nothing changes
    with pytest.raises(RoutingInvariantError, match="already has a _Weights"):
        _Weights(routing, (1, 1))
    view = routing.view(0.0)
    assert routing._bucket_weights(view, 1, (1, 2), 0.0) == (3, 4)
    assert {"_Weights", "_MoreWeights"} <= set(routing.status())


def test_the_launcher_takes_extensions_and_refuses_two_routing_apps(capsys, tmp_path):
    port = str(free_tcp_port())
    base = ["--ofp-tcp-listen-port", port, "--status-file", str(tmp_path / "s.json")]
    args = launch.build_parser().parse_args(base + ["--extensions", "adaptive,tagger", "x"])
    assert args.extensions == ("adaptive", "tagger")
    assert "--extensions" in launch._os_ken_args(args)
    for bad in ("adaptive,nosuch", "tagger,tagger", ""):
        with pytest.raises(SystemExit) as exc:
            launch.build_parser().parse_args(base + ["--extensions", bad, "x"])
        assert exc.value.code == launch.EXIT_BAD_ARGS
        err = capsys.readouterr().err
        assert "adaptive, tagger" in err and "argument --extensions" in err, err
    parser = launch.build_parser()
    two = parser.parse_args(base + ["controllers.adaptive", "controllers.tagger"])
    with pytest.raises(SystemExit):
        launch._check(parser, two)
    err = capsys.readouterr().err
    assert "controllers.adaptive and controllers.tagger each run routing" in err
    assert "controllers.routing --extensions adaptive,tagger" in err

"""UGAL's controller side (issue 31): what controllers/ugal.py installs on a dragonfly.

The extension attached to routing drives emu's own pipelines (`PipelineFabric`,
no root) on a dragonfly of 5 groups, 2 routers each, 2 global links per
router: each router with hosts gets, per host of another group, a UGAL group
of routing's minimal next hops and its own global links to a third group,
weighted by path length, and a flow for packets from its host port. Walked
through the pipelines: idle queues keep every packet minimal; a deep minimal
queue at the source sends it through a third group, from where it goes
minimally, without a loop and in exactly the hops the weight said; only the
source router chooses. Valiant mode, classes, reconnects, the launcher's and
the Fabric's options.
"""

from __future__ import annotations

import networkx as nx
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controllers import launch, layout
from controllers.dragonfly_next_hops import builder_group, minimal_next_hops
from controllers.routing import RoutingConfig, RoutingManager, next_hops_of
from controllers.ugal import UgalConfig, UgalManager, config_from, route_hops
from emu import fabric
from emu.net import FabricError, dragonfly_routing_args
from emu.proto import ofext
from emu.registry import free_tcp_port

from .fakes import PipelineFabric, hosts_of, learn_all_hosts

ROCE_TOS = 26 << 2


def graph():
    return fabric.dragonfly(groups=5, routers_per_group=2, global_links_per_router=2)


def sim_groups(g) -> dict[int, int]:
    """The routers' groups under the dpids PipelineFabric gives (1.. in name order)."""
    switches = sorted(n for n, d in g.nodes(data=True) if d["kind"] == "switch")
    return {i: g.nodes[n]["group"] for i, n in enumerate(switches, start=1)}


def built(
    mode: str = "ugal", classes: int = ofext.CLASSES_ALL, minimal: str = "dragonfly"
) -> PipelineFabric:
    """UGAL beside routing; `minimal`: routing's one-global-hop routes (what
    --dragonfly-routing runs) or its plain shortest paths."""
    g = graph()
    groups = sim_groups(g)
    policy = minimal_next_hops(groups) if minimal == "dragonfly" else None
    routing = RoutingManager(
        RoutingConfig(expect_switches=10, expect_links=15, expect_hosts=10, next_hops=policy)
    )
    fab = PipelineFabric(g, routing)
    fab.ugal = UgalManager(routing, UgalConfig(mode, classes, 0, groups))
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert routing.converged()
    return fab


def walk(fab: PipelineFabric, src: str, dst: str, sport: int = 5000, tos: int = 0) -> list[str]:
    """The routers a UDP frame src -> dst crosses through the pipelines as they are now."""
    s, d = fab.graph.nodes[src], fab.graph.nodes[dst]
    frame = bytes(
        Ether(src=s["mac"], dst="02:00:00:00:00:ff")
        / IP(src=s["ip"], dst=d["ip"], tos=tos)
        / UDP(sport=sport, dport=4791)
        / bytes(64)
    )
    names = {v: k for k, v in fab.dpid.items()}
    dpid, port = fab.host_loc[src]
    path = []
    for _ in range(12):
        path.append(names[dpid])
        [(out_port, frame, _q)] = fab.pipelines[dpid].process(port, frame, fab.now)[0]
        if (dpid, out_port) in fab.host_at:
            assert (dpid, out_port) == fab.host_loc[dst], f"{src}->{dst} misdelivered"
            return path
        dpid, port = fab.peer[(dpid, out_port)]
    raise AssertionError(f"{src}->{dst}: loop along {path}")


def congest(fab: PipelineFabric, router: str, ports: set[int], depth: int = 100_000) -> None:
    """Make `ports` of `router` look deep to its adaptive choices (its egress view)."""

    def view(port_no, prio, now):
        return (depth if port_no in ports else 0), False

    fab.pipelines[fab.dpid[router]].adaptive.egress = view


def group_of(name: str) -> int:
    return int(name[1 : name.index("r")])


def global_hops(path: list[str]) -> int:
    return sum(group_of(a) != group_of(b) for a, b in zip(path, path[1:]))


def host_of(fab: PipelineFabric, router: str) -> str:
    [h] = [h for h in hosts_of(fab) if fab.graph.nodes[h]["leaf"] == router]
    return h


# ----- the buckets -------------------------------------------------------------------


@pytest.mark.parametrize("minimal", ["dragonfly", "shortest"])
def test_buckets_are_the_minimal_next_hops_and_the_routers_own_global_links_to_third_groups(
    minimal,
):
    fab = built(minimal=minimal)
    view = fab.mgr.view(fab.now)
    routes = fab.mgr.routes()
    group = fab.ugal.config.group
    plan = fab.ugal.plan
    hops = route_hops(view.links, routes)
    peer_of = {(s, sp): (d, dp) for s, sp, d, dp in view.links}
    for dpid in fab.dpids:
        remote = {ip for ip, h in view.hosts.items() if group(h.dpid) != group(dpid)}
        for ip in remote:
            host = view.hosts[ip]
            minimal_ports = routes[dpid][ip][1]
            # Every global link of the router to a third group, from which the way on
            # is not only back, is a candidate.
            candidates = {
                port: ofext.ugal_weight(1 + hops(d, ip), False)
                for (s, port), (d, back) in peer_of.items()
                if s == dpid
                and port not in minimal_ports
                and group(d) not in (group(dpid), group(host.dpid))
                and routes[d][ip][1] - {back}
            }
            buckets = dict(plan.buckets.get(dpid, {}).get(ip, ()))
            if not candidates:
                assert not buckets
                continue
            h_min = ofext.ugal_weight(hops(dpid, ip), True)
            assert buckets == {**{p: h_min for p in minimal_ports}, **candidates}
            for port in candidates:  # where routing would send it back, no U-turn
                mid, back = peer_of[(dpid, port)]
                if back in routes[mid][ip][1]:
                    assert plan.no_uturn[mid][(back, ip)] == routes[mid][ip][1] - {back}
    destinations = sum(len(b) for b in plan.buckets.values())
    assert destinations > 0.6 * 10 * 8  # most of the 8 remote hosts of each router's host
    status = fab.mgr.status()["ugal"]
    assert status["mode"] == "ugal" and status["routers"] == 10
    assert status["flows"] == destinations + status["no_uturn"]
    # One-global-hop routes never lead back the way a Valiant packet came.
    assert (status["no_uturn"] > 0) == (minimal == "shortest")


def routed_paths(fab: PipelineFabric, a: str, b: str, ip: str) -> list[list[str]]:
    """Every router path routing's routes allow from router `a` to host `ip` at `b`."""
    names = {v: k for k, v in fab.dpid.items()}
    routes = fab.mgr.routes()
    out, todo = [], [[fab.dpid[a]]]
    while todo:
        path = todo.pop()
        route = routes[path[-1]][ip]
        if route[0] == "local":
            out.append([names[d] for d in path])
            continue
        assert len(path) < 8, path
        todo += [path + [fab.peer[(path[-1], port)][0]] for port in route[1]]
    return out


def test_dragonfly_minimal_routes_cross_one_global_link_and_are_the_shortest_that_do():
    fab = built()
    net = nx.Graph(
        (u, v)
        for u, v in fab.graph.edges()
        if fab.graph.nodes[u]["kind"] == fab.graph.nodes[v]["kind"] == "switch"
    )
    through_third = 0
    for src in hosts_of(fab):
        for dst in hosts_of(fab):
            a, b = fab.graph.nodes[src]["leaf"], fab.graph.nodes[dst]["leaf"]
            if group_of(a) == group_of(b):
                continue
            through_third += any(global_hops(p) > 1 for p in nx.all_shortest_paths(net, a, b))
            best = min(
                len(p) for p in nx.all_simple_paths(net, a, b, cutoff=4) if global_hops(p) == 1
            )
            for path in routed_paths(fab, a, b, fab.graph.nodes[dst]["ip"]):
                assert global_hops(path) == 1 and len(path) == best, path
    assert through_third > 0  # routing's plain shortest paths do cross third groups


def test_builder_groups_come_from_the_dpid() -> None:
    g = graph()
    for n in fabric.switches(g):
        assert builder_group(g.nodes[n]["dpid"]) == g.nodes[n]["group"]


# ----- through the pipelines ----------------------------------------------------------


def test_idle_queues_keep_every_packet_minimal() -> None:
    fab = built()
    policy = minimal_next_hops(sim_groups(fab.graph))
    plain = PipelineFabric(graph(), RoutingManager(RoutingConfig(next_hops=policy)))
    plain.start()
    plain.settle()
    learn_all_hosts(plain)
    for src in hosts_of(fab):
        for dst in hosts_of(fab):
            if src != dst:
                assert walk(fab, src, dst) == walk(plain, src, dst)
    counts = [pl.adaptive.counts() for pl in fab.pipelines.values()]
    assert sum(c["ugal_decisions"] for c in counts) > 0
    assert sum(c["ugal_nonminimal"] for c in counts) == 0


def test_a_deep_minimal_queue_sends_packets_through_a_third_group_once() -> None:
    """g1r1's host to g2's: minimal is g1r1's own global link to g2; with it deep,
    the packet takes g1r1's other global link (to g3) and from there goes minimally."""
    fab = built()
    src, dst = host_of(fab, "g1r1"), host_of(fab, "g2r2")
    minimal = walk(fab, src, dst)
    assert minimal == ["g1r1", "g2r2"]
    to_g2 = fab.port[("g1r1", "g2r2")]
    congest(fab, "g1r1", {to_g2})
    detour = walk(fab, src, dst)
    assert detour[1].startswith("g3") and detour[-1] == "g2r2", detour
    assert global_hops(detour) == 2  # Valiant: two global hops, no loop
    # The detour is as long as the weight of its bucket said (the switch's trace).
    s, d = fab.graph.nodes[src], fab.graph.nodes[dst]
    frame = bytes(Ether(src=s["mac"]) / IP(src=s["ip"], dst=d["ip"]) / UDP(dport=4791))
    [choice] = fab.pipelines[fab.dpid["g1r1"]].trace(fab.host_loc[src][1], frame)["adaptive"]
    hops = dict(zip(choice["ports"], choice["hops"]))
    assert choice["mode"] == "ugal" and choice["takes"] == fab.port[("g1r1", detour[1])]
    assert hops[to_g2] == 1 and hops[choice["takes"]] == len(detour) - 1
    assert fab.pipelines[fab.dpid["g1r1"]].adaptive.counts()["ugal_nonminimal"] == 1


def test_only_the_source_router_chooses() -> None:
    """A packet that arrives over a fabric link is routed minimally, however deep the
    queues there: the intermediate group never sends it the long way again."""
    fab = built()
    src, dst = host_of(fab, "g1r1"), host_of(fab, "g2r2")
    congest(fab, "g1r1", {fab.port[("g1r1", "g2r2")]})
    detour = walk(fab, src, dst)
    middle = detour[1]
    # Deep everywhere at the intermediate router: still its minimal port.
    congest(fab, middle, set(range(1, 10)))
    assert walk(fab, src, dst) == detour
    assert fab.pipelines[fab.dpid[middle]].adaptive.counts()["ugal_decisions"] == 0


def test_classes_not_named_stay_minimal() -> None:
    fab = built(classes=1 << 3)
    src, dst = host_of(fab, "g1r1"), host_of(fab, "g2r2")
    congest(fab, "g1r1", {fab.port[("g1r1", "g2r2")]})
    assert walk(fab, src, dst, tos=0) == ["g1r1", "g2r2"]
    assert global_hops(walk(fab, src, dst, tos=ROCE_TOS)) == 2


def test_valiant_mode_takes_a_third_group_wherever_the_source_has_one() -> None:
    fab = built(mode="valiant")
    for src in hosts_of(fab):
        for dst in hosts_of(fab):
            s_router, d_router = fab.graph.nodes[src]["leaf"], fab.graph.nodes[dst]["leaf"]
            ip = fab.graph.nodes[dst]["ip"]
            if ip not in fab.ugal.plan.buckets.get(fab.dpid[s_router], {}):
                continue  # the same group, or no candidate: routing's minimal route
            for sport in (5000, 5001, 5002):
                path = walk(fab, src, dst, sport=sport)
                middle = group_of(path[1])
                assert middle not in (group_of(s_router), group_of(d_router)), path
    assert all(pl.adaptive.counts()["ugal_decisions"] == 0 for pl in fab.pipelines.values())


def test_a_reconnected_router_gets_its_groups_and_flows_again() -> None:
    fab = built()
    dpid = fab.dpid["g1r1"]
    before = sorted(
        (e.priority, str(e.cmatch))
        for e in fab.pipelines[dpid].tables[0].entries
        if e.cookie == layout.UGAL_COOKIE
    )
    assert len(before) == len(fab.ugal.plan.buckets[dpid]) + len(
        fab.ugal.plan.no_uturn.get(dpid, {})
    )
    fab.deliver(fab.mgr.switch_enter(dpid, fab.ports_of(dpid), fab.now))
    fab.settle()
    after = sorted(
        (e.priority, str(e.cmatch))
        for e in fab.pipelines[dpid].tables[0].entries
        if e.cookie == layout.UGAL_COOKIE
    )
    assert after == before
    modes = fab.pipelines[dpid].modes
    assert {m.describe()["mode"] for m in modes.by_group.values()} == {"ugal"}


def test_a_dead_global_link_leaves_the_buckets() -> None:
    fab = built()
    src, dst = host_of(fab, "g1r1"), host_of(fab, "g2r2")
    fab.set_link("g1r1", "g3r2", False)
    fab.settle()
    congest(fab, "g1r1", {fab.port[("g1r1", "g2r2")]})
    # g1r1's other global link is gone: no Valiant candidate of its own, minimal it is.
    assert walk(fab, src, dst) == ["g1r1", "g2r2"]


# ----- options ------------------------------------------------------------------------


class Options:
    def __init__(self, routing=None, groups=None):
        self.dragonfly_routing, self.dragonfly_groups = routing, groups
        self.next_hops = None


def test_dragonfly_routing_makes_routing_route_with_one_global_hop() -> None:
    assert next_hops_of(Options()) is None
    topo = nx.DiGraph()
    # g1r1 -(3)- g3r1 -(4)- g2r1 and g1r1 -(2)- g1r2 -(3)- g2r1: two hops either way.
    for s_, sp, d in [
        (0x10101, 2, 0x10102),
        (0x10101, 3, 0x10301),
        (0x10301, 4, 0x10201),
        (0x10102, 3, 0x10201),
    ]:
        topo.add_edge(s_, d, port=sp)
        topo.add_edge(d, s_, port=sp + 10)
    for groups in (None, "0x10101=1,0x10102=1,0x10301=3,0x10201=2"):
        policy = next_hops_of(Options("minimal", groups))
        assert policy(topo, 0x10101, 0x10201) == {2}


def test_the_launchers_options_make_the_config() -> None:
    assert config_from(Options()) == UgalConfig()
    cfg = config_from(Options("ugal:0,3:1500", "0x10101=1,0x10201=2"))
    assert cfg == UgalConfig("ugal", 0b1001, 1500, {0x10101: 1, 0x10201: 2})
    assert cfg.group(0x10201) == 2 and cfg.group(0x10301) is None
    assert config_from(Options("valiant")).mode == "valiant"
    with pytest.raises(ValueError, match="minimal"):
        config_from(Options("minimal"))
    with pytest.raises(ValueError):
        UgalConfig(classes=0)


def test_the_launcher_attaches_ugal_for_ugal_and_valiant(tmp_path) -> None:
    base = ["--ofp-tcp-listen-port", str(free_tcp_port()), "--status-file", str(tmp_path / "s")]
    args = launch.build_parser().parse_args(base + ["--dragonfly-routing", "ugal:3", "x"])
    out = launch._os_ken_args(args)
    assert out[out.index("--extensions") + 1] == "ugal"
    assert out[out.index("--dragonfly-routing") + 1] == "ugal:3"
    args = launch.build_parser().parse_args(
        base + ["--extensions", "tagger,ugal", "--dragonfly-routing", "valiant", "x"]
    )
    out = launch._os_ken_args(args)
    assert out[out.index("--extensions") + 1] == "tagger,ugal"
    args = launch.build_parser().parse_args(base + ["--dragonfly-routing", "minimal", "x"])
    assert "--extensions" not in launch._os_ken_args(args)


@pytest.mark.parametrize(
    "argv",
    [
        ["--dragonfly-routing", "ugal:9"],
        ["--dragonfly-routing", "fast"],
        ["--dragonfly-routing", "valiant:3"],
        ["--dragonfly-groups", "g1r1=1"],
    ],
)
def test_the_launcher_refuses_bad_dragonfly_options(tmp_path, argv, capsys) -> None:
    base = ["--ofp-tcp-listen-port", "6653", "--status-file", str(tmp_path / "s")]
    with pytest.raises(SystemExit) as exc:
        launch.build_parser().parse_args(base + argv + ["controllers.routing"])
    assert exc.value.code == launch.EXIT_BAD_ARGS
    assert "error" in capsys.readouterr().err


def test_the_fabric_passes_every_routers_group() -> None:
    args = dragonfly_routing_args(graph(), "ugal")
    assert args[:2] == ("--dragonfly-routing", "ugal")
    groups = ofext.parse_dragonfly_groups(args[3])
    assert len(groups) == 10 and set(groups.values()) == {1, 2, 3, 4, 5}
    assert dragonfly_routing_args(graph(), "minimal")[:2] == ("--dragonfly-routing", "minimal")
    with pytest.raises(FabricError, match="not a dragonfly"):
        dragonfly_routing_args(fabric.leaf_spine(2, 2), "ugal")
    with pytest.raises(FabricError, match="expected minimal"):
        dragonfly_routing_args(graph(), "ugal-ish")


@pytest.mark.parametrize(
    "text, want",
    [
        ("ugal", ofext.DragonflyRouting("ugal", 255, 0)),
        ("UGAL:3", ofext.DragonflyRouting("ugal", 8, 0)),
        ("ugal:all:4096", ofext.DragonflyRouting("ugal", 255, 4096)),
        ("valiant", ofext.DragonflyRouting("valiant", 255, 0)),
        ("minimal", ofext.DragonflyRouting("minimal", 255, 0)),
    ],
)
def test_dragonfly_routing_specs(text, want) -> None:
    got = ofext.parse_dragonfly_routing(text)
    assert got == want
    assert ofext.parse_dragonfly_routing(got.spec()) == got


@pytest.mark.parametrize("text", ["", "ugal:", "ugal:3:x", "ugal:3:1:2", "ugal:3:-1", "min"])
def test_bad_dragonfly_routing_specs_are_named(text) -> None:
    with pytest.raises(ofext.ExtensionError):
        ofext.parse_dragonfly_routing(text)

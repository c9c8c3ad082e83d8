"""Unit tests of the pure routing manager, driven by a simulated fabric (`fakes.SimFabric`).

The simulated fabric delivers what the manager sends: a PacketOut out of a
fabric port comes back as a packet-in on the peer port (so LLDP frames built
by the manager teach it the links), a PacketOut out of a host port reaches a
simulated host that answers ARP for its own address, a barrier gets a reply,
and every message is serialized with os-ken (as the real shim would).
"""

from __future__ import annotations

import json
import random
from typing import Any, List, Tuple

import pytest
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser
from scapy.layers.l2 import ARP, Ether

from controllers import layout, ofmsg
from controllers.routing import PortInfo, RoutingConfig, RoutingManager, write_status

from .fakes import SimFabric, fat_tree, leaf_spine, learn_all_hosts

OFP = ofproto_v1_3
PARSER = ofproto_v1_3_parser


class StubDatapath:
    """Just enough of an os-ken Datapath to build and serialize messages."""

    def __init__(self, dpid: int) -> None:
        self.id = dpid
        self.ofproto = OFP
        self.ofproto_parser = PARSER


@pytest.fixture
def leaf_spine_fab() -> SimFabric:
    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=4))
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    return fab


def test_leaf_spine_discovers_every_link(leaf_spine_fab: SimFabric) -> None:
    fab = leaf_spine_fab
    expected = sorted((s, sp, d, dp) for (s, sp), (d, dp) in fab.peer.items())
    assert fab.mgr.links == expected
    assert len(expected) == 16
    assert fab.mgr.cable_count() == 8
    assert fab.mgr.switches == fab.dpids


def test_leaf_spine_hosts_and_ecmp(leaf_spine_fab: SimFabric) -> None:
    fab = leaf_spine_fab
    assert [h.ip for h in fab.mgr.hosts] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    uplinks = frozenset(fab.port[("l1", s)] for s in ("s1", "s2"))
    for remote in ("h2", "h3", "h4"):
        assert fab.group_ports("l1", remote) == uplinks
    # one group per distinct port set, shared by all remote destinations
    assert len(fab.mgr.installed_groups(fab.dpid["l1"])) == 1
    local = fab.mgr.installed_flows(fab.dpid["l1"])["10.0.0.1"]
    assert local == (
        ("set_field", "eth_dst", "00:00:00:00:00:01"),
        ("output", fab.port[("l1", "h1")]),
    )
    assert fab.group_ports("s1", "h3") == frozenset({fab.port[("s1", "l3")]})


def test_converged_status_file(leaf_spine_fab: SimFabric, tmp_path: Any) -> None:
    fab = leaf_spine_fab
    path = tmp_path / "status.json"
    write_status(str(path), fab.mgr.status())
    st = json.loads(path.read_text())
    assert st["converged"] is True
    assert st["installed_version"] == st["topology_version"] > 0
    assert st["switches"] == fab.dpids
    assert len(st["links"]) == 16 and all(len(link) == 4 for link in st["links"])
    assert {h["ip"] for h in st["hosts"]} == {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}
    assert set(st["hosts"][0]) == {"ip", "mac", "dpid", "port"}
    kinds = {e["kind"] for e in st["events"]}
    assert {"switch_enter", "link_up", "host_learned"} <= kinds
    assert all("t" in e for e in st["events"])


def test_not_converged_until_barriers_answered() -> None:
    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=4))
    fab = SimFabric(leaf_spine(), mgr)
    fab.hold_barriers = True
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert mgr.installed_version() < mgr.topology_version
    assert mgr.status()["converged"] is False
    fab.release_barriers()
    assert mgr.status()["converged"] is True


def test_a_change_sends_barriers_only_to_the_switches_it_changed() -> None:
    """A host learned at one leaf changes the routes of every switch, but a link seen
    before any host is known changes none: it must not cost 6 barrier round trips."""
    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=4))
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    assert mgr.cable_count() == 8 and not mgr.hosts
    barriers = [(d, m) for d, m in fab.sent if isinstance(m, ofproto_v1_3_parser.OFPBarrierRequest)]
    # Two per switch when it entered (after its flushes, after its base flows);
    # discovery itself changed no switch's tables.
    assert sorted(d for d, _m in barriers) == sorted(fab.dpids * 2)
    assert mgr.installed_version() == mgr.topology_version > len(fab.dpids)
    before = len(fab.sent)
    learn_all_hosts(fab)
    assert mgr.converged()
    after = [
        (d, m) for d, m in fab.sent[before:] if isinstance(m, ofproto_v1_3_parser.OFPBarrierRequest)
    ]
    changed = {
        d
        for d, m in fab.sent[before:]
        if isinstance(m, (ofproto_v1_3_parser.OFPFlowMod, ofproto_v1_3_parser.OFPGroupMod))
    }
    assert {d for d, _m in after} == changed == set(fab.dpids)


def test_a_quiet_switch_is_installed_only_after_its_earlier_barriers() -> None:
    """A version that sends a switch nothing is in place there once the barriers sent
    before it are answered, not before: discovery sends nothing, but the flushes and
    base flows of each switch's entry must be acknowledged first."""
    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=0))
    fab = SimFabric(leaf_spine(), mgr)
    fab.hold_barriers = True
    fab.start()
    fab.settle()
    assert mgr.cable_count() == 8
    assert sorted(d for d, _xid in fab.held) == sorted(fab.dpids * 2)  # the entry barriers only
    assert mgr.installed_version() < mgr.topology_version and not mgr.converged()
    held, fab.held = fab.held, []
    for dpid, xid in held[:-1]:
        mgr.barrier_reply(dpid, xid, fab.now)
    assert not mgr.converged()  # one switch has not acknowledged its entry yet
    mgr.barrier_reply(*held[-1], fab.now)
    assert mgr.installed_version() == mgr.topology_version and mgr.converged()


def test_a_new_switch_is_not_installed_before_its_base_flows_are() -> None:
    """The barrier that orders the flush before the adds does not cover the base flows
    sent after it: a switch whose resync sends nothing is in place only once a barrier
    after its base flows is answered (found in review of the barrier economy)."""
    mgr = RoutingManager(RoutingConfig(expect_switches=1, expect_links=0, expect_hosts=0))
    msgs = mgr.switch_enter(1, [PortInfo(1, "02:00:00:00:00:01", True)], now=0.0)
    kinds = [type(m).__name__ for _d, m in msgs]
    barriers = [i for i, k in enumerate(kinds) if k == "OFPBarrierRequest"]
    assert len(barriers) == 2
    assert "OFPFlowMod" not in kinds[barriers[-1] :]  # nothing table-changing after the last
    mgr.barrier_reply(1, msgs[barriers[0]][1].xid, 0.0)
    assert not mgr.converged() and mgr.installed_version() < mgr.topology_version
    mgr.barrier_reply(1, msgs[barriers[1]][1].xid, 0.0)
    assert mgr.converged()


def test_a_lost_barrier_reply_is_covered_by_the_next_one() -> None:
    """A switch answers barriers in order: the reply to a later barrier stands for an
    earlier one whose reply never came, so one lost reply cannot hold a switch back."""
    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=4))
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert mgr.converged()
    fab.hold_barriers = True
    spine, leaf = fab.dpid["s1"], fab.dpid["l1"]
    port = fab.port[("l1", "s1")]
    fab.deliver(mgr.port_status(leaf, PortInfo(port, "02:00:00:01:00:03", False), fab.now))
    lost = [x for x in fab.held if x[0] == spine]
    assert lost
    fab.held = [x for x in fab.held if x[0] != spine]
    fab.release_barriers()
    fab.hold_barriers = False
    assert mgr.installed_version() < mgr.topology_version  # the spine's reply is lost
    fab.deliver(mgr.port_status(leaf, PortInfo(port, "02:00:00:01:00:03", True), fab.now))
    fab.settle(12)  # the link comes back: the spine's routes change again, a new barrier
    for _ in range(3):  # versions that change no switch: in place once nothing is owed
        fab.deliver(mgr.resync(fab.now))
    assert mgr.installed_version() == mgr.topology_version and mgr.converged()


def _random_interleaving(seed: int, expect_hosts: int) -> None:
    """One random boot-and-churn of a leaf/spine; asserts the installed-version invariant."""
    table = (ofproto_v1_3_parser.OFPFlowMod, ofproto_v1_3_parser.OFPGroupMod)
    rnd = random.Random(seed)
    mgr = RoutingManager(
        RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=expect_hosts)
    )
    fab = SimFabric(leaf_spine(), mgr)
    fab.hold_barriers = True
    version_of: dict = {}  # id(message) -> topology version when it was sent
    unacked: dict = {d: [] for d in fab.dpids}  # table messages no answered barrier covers
    pending: dict = {d: [] for d in fab.dpids}  # (xid, what it covers), oldest first
    seen = 0

    def account() -> None:
        nonlocal seen
        for d, m in fab.sent[seen:]:
            version_of.setdefault(id(m), mgr.topology_version)
            if isinstance(m, table):
                unacked[d].append(m)
            elif isinstance(m, ofproto_v1_3_parser.OFPBarrierRequest):
                pending[d].append((m.xid, list(unacked[d])))
        seen = len(fab.sent)
        fab.held = []

    def answer(d: int, n: int) -> None:
        for _ in range(n):
            if not pending[d]:
                return
            xid, covered = pending[d].pop(0)
            done = {id(m) for m in covered}
            unacked[d] = [m for m in unacked[d] if id(m) not in done]
            fab.deliver(mgr.barrier_reply(d, xid, fab.now))
            account()

    def ahead() -> list:
        """(seed, switch, its installed version) where that version runs ahead of it."""
        out = []
        for d in mgr.switches:
            acked = mgr.switch_installed_version(d)
            if any(version_of[id(m)] <= acked for m in unacked[d]):
                out.append((seed, d, acked))
        return out

    for d in fab.dpids:
        fab.deliver(mgr.switch_enter(d, fab.ports_of(d), fab.now))
        account()
        if rnd.random() < 0.5:
            answer(rnd.choice(fab.dpids), 2)
        assert ahead() == []
    for _step in range(60):
        r = rnd.random()
        if r < 0.25:
            fab.now += 0.1
            fab.deliver(mgr.tick(fab.now))
        elif r < 0.35 and mgr.cable_count() >= 8:
            learn_all_hosts(fab)
        elif r < 0.45:
            d = rnd.choice(fab.dpids)  # a new connection: the old one's replies are gone
            pending[d], unacked[d] = [], []
            fab.deliver(mgr.switch_enter(d, fab.ports_of(d), fab.now))
        elif r < 0.55:
            d, port = rnd.choice(sorted(fab.peer))
            info = PortInfo(port, "02:00:00:00:00:09", rnd.random() < 0.5)
            fab.deliver(mgr.port_status(d, info, fab.now))
        else:
            answer(rnd.choice(fab.dpids), rnd.randint(1, 3))
        account()
        assert ahead() == []
    for _ in range(40):
        for d in fab.dpids:
            answer(d, 10**6)
        fab.now += 0.1
        fab.deliver(mgr.tick(fab.now))
        account()
    for d in fab.dpids:
        answer(d, 10**6)
    assert ahead() == []
    assert mgr.installed_version() == mgr.topology_version, seed


@pytest.mark.parametrize("expect_hosts", [4, 0])
def test_installed_never_runs_ahead_of_the_switches(expect_hosts: int) -> None:
    """Invariant, over random interleavings of switch entries and reconnects, port
    changes, host learning, ticks and barrier replies (in order per switch, at random
    times): when a switch counts version v as installed, every FlowMod and GroupMod
    sent to it at a version <= v is followed by a barrier it answered; and once every
    reply is in, installed catches up with the topology version."""
    for seed in range(40):
        _random_interleaving(seed, expect_hosts)


def test_not_converged_when_expectations_unmet() -> None:
    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=5))
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert mgr.installed_version() == mgr.topology_version
    assert mgr.converged() is False


def test_proxy_arp_reply_bytes(leaf_spine_fab: SimFabric) -> None:
    fab = leaf_spine_fab
    fab.to_hosts.clear()
    fab.host_arp("h1", "10.0.0.3")  # known target: answered by the controller
    loc = fab.host_loc["h1"]
    replies = [data for d, p, data in fab.to_hosts if (d, p) == loc]
    assert len(replies) == 1
    pkt = Ether(replies[0])
    assert pkt[Ether].dst == "00:00:00:00:00:01"
    assert pkt[Ether].src == "00:00:00:00:00:03"
    assert pkt[ARP].op == 2
    assert pkt[ARP].hwsrc == "00:00:00:00:00:03" and pkt[ARP].psrc == "10.0.0.3"
    assert pkt[ARP].hwdst == "00:00:00:00:00:01" and pkt[ARP].pdst == "10.0.0.1"


def test_unknown_target_floods_edge_ports_only_and_answers_later() -> None:
    mgr = RoutingManager(RoutingConfig())
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    fab.sent.clear()
    fab.to_hosts.clear()
    fab.host_arp("h1", "10.0.0.4")
    probes = [
        (d, m)
        for d, m in fab.sent
        if isinstance(m, PARSER.OFPPacketOut)
        and (a := ofmsg.parse_arp(m.data))
        and a.src_mac == layout.CONTROLLER_MAC
    ]
    assert probes
    for dpid, m in probes:
        for action in m.actions:
            assert (dpid, action.port) not in fab.peer, "flooded onto an inter-switch port"
            assert (dpid, action.port) != fab.host_loc["h1"], "flooded back to the requester"
    flooded = {(d, a.port) for d, m in probes for a in m.actions}
    assert flooded == {fab.host_loc[h] for h in ("h2", "h3", "h4")}
    # h4 answered the probe: h1 got its answer from the controller
    replies = [Ether(data) for d, p, data in fab.to_hosts if (d, p) == fab.host_loc["h1"]]
    assert [(r[ARP].op, r[ARP].psrc, r[ARP].hwsrc) for r in replies] == [
        (2, "10.0.0.4", "00:00:00:00:00:04")
    ]
    assert {h.ip for h in mgr.hosts} == {"10.0.0.1", "10.0.0.4"}


def _replies_to(fab: SimFabric, host: str) -> list:
    """The ARP replies that reached ``host`` (LLDP reaches it too)."""
    frames = [Ether(data) for d, p, data in fab.to_hosts if (d, p) == fab.host_loc[host]]
    return [f for f in frames if ARP in f and f[ARP].op == 2]


def _h1_asks_for_h4_while_barriers_wait(config: RoutingConfig) -> Tuple[RoutingManager, SimFabric]:
    """A discovered leaf/spine whose switches hold their barrier replies; h1 asks for h4."""
    mgr = RoutingManager(config)
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    fab.to_hosts.clear()
    fab.hold_barriers = True
    fab.host_arp("h1", "10.0.0.4")
    return mgr, fab


def test_a_proxy_arp_reply_waits_for_the_routes_it_makes_usable() -> None:
    """Learning h4 (from its answer to the probe) sends every switch routes to it; h1
    is answered only when every switch has acknowledged them, so h1's first packet
    to h4 cannot meet a table miss (Mininet's pingall lost such an echo under load)."""
    mgr, fab = _h1_asks_for_h4_while_barriers_wait(RoutingConfig())
    assert "10.0.0.4" in {h.ip for h in mgr.hosts}  # h4 answered the probe: learned
    assert mgr.installed_version() < mgr.topology_version
    assert _replies_to(fab, "h1") == []  # the routes to h4 are not acknowledged yet
    *first, last = fab.held
    fab.held = [last]
    for dpid, xid in first:
        fab.deliver(mgr.barrier_reply(dpid, xid, fab.now))
    assert _replies_to(fab, "h1") == []  # one switch still owes its barrier reply
    fab.hold_barriers = False
    fab.release_barriers()
    assert mgr.installed_version() == mgr.topology_version
    assert [(r[ARP].op, r[ARP].psrc) for r in _replies_to(fab, "h1")] == [(2, "10.0.0.4")]
    # Once the routes are in place, a known target is answered at once.
    fab.to_hosts.clear()
    fab.host_arp("h2", "10.0.0.4")
    assert [(r[ARP].op, r[ARP].psrc) for r in _replies_to(fab, "h2")] == [(2, "10.0.0.4")]


def test_a_held_reply_goes_after_the_route_wait_when_a_switch_never_answers() -> None:
    """One switch that owes its barrier reply (hung, or the reply lost) must not leave
    every host unanswered: after arp_route_wait_s the reply goes anyway, once."""
    mgr, fab = _h1_asks_for_h4_while_barriers_wait(RoutingConfig(arp_route_wait_s=1.0))
    fab.now += 0.5
    fab.deliver(mgr.tick(fab.now))
    assert _replies_to(fab, "h1") == []
    fab.now += 0.6
    fab.deliver(mgr.tick(fab.now))
    assert [(r[ARP].op, r[ARP].psrc) for r in _replies_to(fab, "h1")] == [(2, "10.0.0.4")]
    fab.hold_barriers = False
    fab.release_barriers()
    assert len(_replies_to(fab, "h1")) == 1  # not a second time


def test_a_switch_that_reconnects_holds_the_reply_until_its_routes_are_back() -> None:
    """A reconnected switch's flush barrier says its tables are empty, not that a
    topology version is in place: the reply waits for its resync (found in review)."""
    mgr, fab = _h1_asks_for_h4_while_barriers_wait(RoutingConfig())
    spine = fab.dpid["s1"]
    before = len(fab.held)
    fab.deliver(mgr.switch_enter(spine, fab.ports_of(spine), fab.now))
    entry = [x for x in fab.held[before:] if x[0] == spine][:1]  # its new flush barrier
    others = [x for x in fab.held if x[0] != spine]
    fab.held = [x for x in fab.held if x not in entry + others]
    for dpid, xid in others + entry:
        fab.deliver(mgr.barrier_reply(dpid, xid, fab.now))
    assert mgr.switch_installed_version(spine) < mgr.topology_version
    assert _replies_to(fab, "h1") == []  # the spine has no routes yet
    fab.hold_barriers = False
    fab.release_barriers()
    assert mgr.installed_version() == mgr.topology_version
    assert [(r[ARP].op, r[ARP].psrc) for r in _replies_to(fab, "h1")] == [(2, "10.0.0.4")]


def test_a_switch_that_connects_after_a_flood_gets_the_next_one_at_once() -> None:
    mgr = RoutingManager(RoutingConfig(arp_flood_holddown_s=0.5))
    fab = SimFabric(leaf_spine(), mgr)
    h4_leaf = fab.host_loc["h4"][0]
    early = [d for d in fab.dpids if d != h4_leaf]
    for dpid in early:
        fab.deliver(mgr.switch_enter(dpid, fab.ports_of(dpid), fab.now))
    fab.host_arp("h1", "10.0.0.4")  # flooded, but h4's leaf is not connected yet
    assert "10.0.0.4" not in {h.ip for h in mgr.hosts}
    fab.now += 0.1  # well inside the holddown
    fab.deliver(mgr.switch_enter(h4_leaf, fab.ports_of(h4_leaf), fab.now))
    fab.sent.clear()
    fab.host_arp("h1", "10.0.0.4")  # h1 asks again
    probed = {
        (d, a.port)
        for d, m in fab.sent
        if isinstance(m, PARSER.OFPPacketOut)
        and (arp := ofmsg.parse_arp(m.data))
        and arp.src_mac == layout.CONTROLLER_MAC
        for a in m.actions
    }
    assert fab.host_loc["h4"] in probed
    assert "10.0.0.4" in {h.ip for h in mgr.hosts}


def _all_groups_avoid(fab: SimFabric, dead: List[Tuple[int, int]]) -> None:
    for dpid in fab.dpids:
        for gid, ports in fab.mgr.installed_groups(dpid).items():
            for d, p in dead:
                assert not (d == dpid and p in ports), (
                    f"group {gid:#x} on {dpid} still uses dead port {p}"
                )


def test_link_down_recompute_removes_dead_port(leaf_spine_fab: SimFabric) -> None:
    fab = leaf_spine_fab
    a = (fab.dpid["l1"], fab.port[("l1", "s1")])
    b = fab.peer[a]
    fab.sent.clear()
    fab.deliver(fab.mgr.port_status(a[0], PortInfo(a[1], "02:00:00:00:00:00", False), fab.now))
    assert all(a not in (link[:2], link[2:]) for link in fab.mgr.links)
    assert len(fab.mgr.links) == 14
    _all_groups_avoid(fab, [a, b])
    assert fab.group_ports("l1", "h3") == frozenset({fab.port[("l1", "s2")]})
    # the peer side (spine 1) now reaches h1 through another leaf and spine 2
    assert fab.group_ports("s1", "h1") == frozenset(fab.port[("s1", f"l{i}")] for i in (2, 3, 4))
    assert fab.mgr.converged() is False  # only 7 of 8 cables
    sent_types = {type(m).__name__ for _d, m in fab.sent}
    assert (
        "OFPGroupMod" in sent_types
        and "OFPFlowMod" in sent_types
        and "OFPBarrierRequest" in sent_types
    )
    # port back up: LLDP at once, link rediscovered, ECMP restored
    fab.deliver(fab.mgr.port_status(a[0], PortInfo(a[1], "02:00:00:00:00:00", True), fab.now))
    assert (a + b) in fab.mgr.links  # learned at once from the immediate LLDP
    fab.settle(ticks=12, step_s=0.1)  # the spine side never went down: its next periodic LLDP
    assert len(fab.mgr.links) == 16
    assert fab.group_ports("l1", "h3") == frozenset(fab.port[("l1", s)] for s in ("s1", "s2"))
    assert fab.mgr.converged() is True


def test_link_expires_without_lldp(leaf_spine_fab: SimFabric) -> None:
    fab = leaf_spine_fab
    a = (fab.dpid["l1"], fab.port[("l1", "s1")])
    b = fab.peer.pop(a)
    fab.peer.pop(b)  # the cable is cut silently: no port status
    fab.settle(ticks=45, step_s=0.1)  # 4 unanswered LLDPs: not yet
    assert len(fab.mgr.links) == 16
    fab.settle(ticks=20, step_s=0.1)  # 5 unanswered and more than 5 s
    assert len(fab.mgr.links) == 14
    _all_groups_avoid(fab, [a, b])


def test_links_survive_a_controller_that_fell_behind(leaf_spine_fab: SimFabric) -> None:
    # Under CPU load the controller may not run for seconds: no LLDP went out
    # meanwhile, so no link was shown to be down (the old time-only rule
    # expired every link here).
    fab = leaf_spine_fab
    fab.now += 10.0
    fab.deliver(fab.mgr.tick(fab.now))
    assert len(fab.mgr.links) == 16
    # Nor when the switches answer late: LLDP replies held back for 3 s.
    a = (fab.dpid["l1"], fab.port[("l1", "s1")])
    b = fab.peer.pop(a)
    fab.settle(ticks=30, step_s=0.1)
    fab.peer[a] = b
    fab.settle(ticks=15, step_s=0.1)
    assert len(fab.mgr.links) == 16
    assert not [e for e in fab.mgr.status()["events"] if e["kind"] == "link_down"]


def test_links_survive_a_switch_whose_packet_ins_wait(leaf_spine_fab: SimFabric) -> None:
    # s1's packet-ins wait for 8 s in a backed-up channel (or event queue)
    # while every other switch's are taken: the LLDP the leaves send to s1 go
    # unanswered that long, but s1 is behind, not its links.
    fab = leaf_spine_fab
    s1 = fab.dpid["s1"]
    fab.backed_up = {s1}
    fab.settle(ticks=80, step_s=0.1)
    assert fab.waiting_packet_ins
    assert len(fab.mgr.links) == 16
    fab.drain_packet_ins()
    fab.settle(ticks=15, step_s=0.1)
    assert len(fab.mgr.links) == 16
    assert not [e for e in fab.mgr.status()["events"] if e["kind"] == "link_down"]
    # A cable to s1 cut silently still expires: s1's other packet-ins are taken.
    a = (fab.dpid["l1"], fab.port[("l1", "s1")])
    b = fab.peer.pop(a)
    fab.peer.pop(b)
    fab.settle(ticks=65, step_s=0.1)
    assert len(fab.mgr.links) == 14
    _all_groups_avoid(fab, [a, b])


def test_fat_tree_k4_ecmp() -> None:
    g = fat_tree(4)
    mgr = RoutingManager(RoutingConfig(expect_switches=20, expect_links=32, expect_hosts=16))
    fab = SimFabric(g, mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert len(mgr.links) == 64
    assert len(mgr.hosts) == 16
    assert mgr.converged()
    # h1 lives under e0_0; h16 under e3_1 (another pod)
    e = "e0_0"
    assert fab.group_ports(e, "h16") == frozenset(fab.port[(e, a)] for a in ("a0_0", "a0_1"))
    a = "a0_0"
    cores = [nb for nb in g.neighbors(a) if nb.startswith("c")]
    assert fab.group_ports(a, "h16") == frozenset(fab.port[(a, c)] for c in cores)
    assert len(cores) == 2
    # intra-pod, other edge: up to both aggs, then down
    assert fab.group_ports(e, "h3") == frozenset(fab.port[(e, x)] for x in ("a0_0", "a0_1"))
    assert fab.group_ports(a, "h3") == frozenset({fab.port[(a, "e0_1")]})
    # core switch: single port down into the destination pod
    assert fab.group_ports("c0", "h16") == frozenset({fab.port[("c0", "a3_0")]})


def test_switch_reconnect_resyncs_with_cookie_and_group_delete(leaf_spine_fab: SimFabric) -> None:
    fab = leaf_spine_fab
    dpid = fab.dpid["l2"]
    fab.sent.clear()
    fab.deliver(fab.mgr.switch_enter(dpid, fab.ports_of(dpid), fab.now))
    first = [m for d, m in fab.sent if d == dpid][:2]
    assert isinstance(first[0], PARSER.OFPFlowMod) and first[0].command == OFP.OFPFC_DELETE
    assert (
        first[0].cookie == layout.ROUTING_COOKIE and first[0].cookie_mask == layout.COOKIE_BAND_MASK
    )
    assert isinstance(first[1], PARSER.OFPGroupMod) and first[1].command == OFP.OFPGC_DELETE
    assert first[1].group_id == OFP.OFPG_ALL
    fab.settle()
    assert fab.mgr.converged()
    assert len(fab.mgr.installed_flows(dpid)) == 4


def test_select_group_buckets_watch_their_port() -> None:
    msg = ofmsg.select_group(group_id=7, ports=[3, 1])
    msg.set_xid(1)
    msg.serialize()
    assert msg.type == OFP.OFPGT_SELECT
    assert [(b.weight, b.watch_port, b.actions[0].port) for b in msg.buckets] == [
        (1, 1, 1),
        (1, 3, 3),
    ]
    ff = ofmsg.fast_failover_group(group_id=8, ports=[3, 1])
    ff.set_xid(2)
    ff.serialize()
    assert [b.watch_port for b in ff.buckets] == [3, 1]


def test_messages_built_without_a_datapath_encode_as_bound_ones() -> None:
    """Faucet style: managers build unbound; the shim binds the switch's datapath to send."""
    unbound = ofmsg.flow_add(
        cookie=layout.ROUTING_COOKIE,
        table_id=0,
        priority=7,
        match={"eth_type": 0x0800},
        action_specs=[("output", 2)],
    )
    assert unbound.datapath is ofmsg.UNBOUND
    unbound.set_xid(5)
    unbound.serialize()
    bound = ofmsg.bound(
        ofmsg.flow_add(
            cookie=layout.ROUTING_COOKIE,
            table_id=0,
            priority=7,
            match={"eth_type": 0x0800},
            action_specs=[("output", 2)],
        ),
        StubDatapath(9),
    )
    assert bound.datapath.id == 9
    bound.set_xid(5)
    bound.serialize()
    assert bytes(bound.buf) == bytes(unbound.buf)


def test_lldp_round_trip_and_guard() -> None:
    frame = ofmsg.lldp_frame(dpid=0x1234, port_no=7, src_mac="02:00:00:00:00:01")
    assert len(frame) >= 60
    assert ofmsg.parse_lldp(frame) == (0x1234, 7)
    assert ofmsg.parse_lldp(frame[:20]) is None
    assert ofmsg.parse_lldp(b"\x00" * 12 + b"\x88\xcc" + b"\x02\x00" * 10) is None
    assert ofmsg.parse_arp(frame) is None
    assert ofmsg.eth_type(b"\x00" * 5) is None


def test_ipv4_miss_teaches_the_sender_and_probes_for_the_destination() -> None:
    """A restarted controller finds hosts whose ARP caches are warm from their IPv4."""
    from scapy.layers.inet import IP, UDP

    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=4))
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    assert mgr.hosts == []
    h1 = fab.graph.nodes["h1"]
    frame = bytes(
        Ether(src=h1["mac"], dst="02:00:00:00:00:99")
        / IP(src=h1["ip"], dst="10.0.0.3")
        / UDP(sport=1, dport=2)
    )
    dpid, port = fab.host_loc["h1"]
    fab.sent.clear()
    fab.deliver(mgr.packet_in(dpid, port, frame, fab.now))
    # h1 was learned from its packet; h3 answered the probe and was learned too.
    assert {h.ip for h in mgr.hosts} == {"10.0.0.1", "10.0.0.3"}
    # An IPv4 frame arriving on a fabric port teaches nothing.
    spine_port = fab.port[("s1", "l2")]
    h2 = fab.graph.nodes["h2"]
    leaked = bytes(Ether(src=h2["mac"]) / IP(src=h2["ip"], dst="10.0.0.4") / UDP())
    fab.deliver(mgr.packet_in(fab.dpid["s1"], spine_port, leaked, fab.now))
    assert "10.0.0.2" not in {h.ip for h in mgr.hosts}
    # Truncated or non-IPv4 bytes are ignored, never parsed further.
    assert mgr.packet_in(dpid, port, frame[:20], fab.now) == []


def test_a_flapping_link_is_damped_then_restored_when_stable(leaf_spine_fab: SimFabric) -> None:
    fab = leaf_spine_fab
    cfg = fab.mgr.config
    a = (fab.dpid["l1"], fab.port[("l1", "s1")])
    down = PortInfo(a[1], "02:00:00:00:00:00", False)
    up = PortInfo(a[1], "02:00:00:00:00:00", True)
    for _ in range(cfg.flap_threshold):
        fab.deliver(fab.mgr.port_status(a[0], down, fab.now))
        fab.now += 0.2
        fab.deliver(fab.mgr.port_status(a[0], up, fab.now))
        fab.now += 0.2
    kinds = [e["kind"] for e in fab.mgr.status()["events"]]
    assert "link_damped" in kinds
    [damped] = [d for d in fab.mgr.status()["damping"] if d["kind"] == "damped"]
    assert damped["downs"] == cfg.flap_threshold  # at the down that crossed the threshold
    # Up and answering LLDP, but out of rotation: no group at l1 uses the port.
    fab.settle(ticks=20, step_s=0.1)
    assert all(a not in (link[:2], link[2:]) for link in fab.mgr.links)
    assert fab.group_ports("l1", "h3") == frozenset({fab.port[("l1", "s2")]})
    assert [list(a)] == fab.mgr.status()["damped_ports"]
    # Stable for the hold time: back in rotation, ECMP over both spines again.
    fab.settle(ticks=int(cfg.damp_hold_s / 0.1) + 15, step_s=0.1)
    assert any(a == link[:2] for link in fab.mgr.links)
    assert fab.group_ports("l1", "h3") == frozenset(fab.port[("l1", s)] for s in ("s1", "s2"))
    assert "link_undamped" in [e["kind"] for e in fab.mgr.status()["events"]]


def _settled(next_hops) -> SimFabric:
    config = RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=4, next_hops=next_hops)
    fab = SimFabric(leaf_spine(), RoutingManager(config))
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    return fab


def test_a_next_hop_policy_chooses_the_ports_and_routing_installs_them() -> None:
    """The pluggable policy a lab's student writes (`--next-hops FILE`): one path, not ECMP."""
    import networkx as nx

    def first_shortest_path(topology, switch, destination):
        path = nx.shortest_path(topology, switch, destination)
        return {topology.edges[path[0], path[1]]["port"]}

    fab = _settled(first_shortest_path)
    for remote in ("h2", "h3", "h4"):
        assert len(fab.group_ports("l1", remote)) == 1
    # The topology it is given: every directed link, with the port it leaves by.
    topology = fab.mgr.topology()
    assert topology.number_of_edges() == 16
    assert all(
        topology.edges[fab.dpid[a], fab.dpid[b]]["port"] == fab.port[(a, b)]
        for a, b in (("l1", "s1"), ("s2", "l3"))
    )


def test_a_policy_naming_a_port_with_no_link_is_refused_naming_it() -> None:
    from controllers.routing import RoutingInvariantError

    with pytest.raises(RoutingInvariantError, match=r"returned \[99\]: switch \d+'s links"):
        _settled(lambda topology, switch, destination: {99})


def test_load_next_hops_names_what_is_wrong_with_the_file(tmp_path) -> None:
    from controllers.routing import load_next_hops

    good = tmp_path / "good.py"
    good.write_text("def next_hops(topology, switch, destination):\n    return set()\n")
    assert load_next_hops(str(good))(None, 1, 2) == set()
    broken = tmp_path / "broken.py"
    broken.write_text("def next_hops(:\n")
    with pytest.raises(ValueError, match="broken.py'.*SyntaxError"):
        load_next_hops(str(broken))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match="defines no function next_hops"):
        load_next_hops(str(empty))


def test_lldp_leaves_on_the_control_queue_so_no_data_class_starves_it() -> None:
    mgr = RoutingManager(RoutingConfig())
    fab = SimFabric(leaf_spine(), mgr)
    fab.start()
    lldp = [
        m
        for _d, m in fab.sent
        if isinstance(m, PARSER.OFPPacketOut) and m.data[12:14] == b"\x88\xcc"
    ]
    assert lldp
    for m in lldp:
        assert isinstance(m.actions[0], PARSER.OFPActionSetQueue)
        assert m.actions[0].queue_id == layout.CONTROL_QUEUE == 7
        assert [type(a) for a in m.actions[1:]] == [PARSER.OFPActionOutput]

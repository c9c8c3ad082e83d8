"""The routing controller's messages, applied to emu's own pipeline, forward packets.

The pure routing manager runs against the simulated fabric of
`test_routing.py`; every message it sends (serialized by os-ken, as on the
wire) is also fed to an emu OpenFlow session per switch, so each switch holds
exactly the flows and groups the controller installed. Frames are then traced
hop by hop through the pipelines: every host reaches every other, different
UDP source ports take different spines (ECMP), and after a link goes down the
dead port is never used.
"""

from __future__ import annotations

import struct

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controllers.routing import PortInfo, RoutingConfig, RoutingManager
from emu.switch.openflow import OpenFlowSession, SwitchModel, reply_bytes
from emu.switch.pipeline import Pipeline
from emu.switch.ports import PortState

from .test_routing import SimFabric, _learn_all_hosts, fat_tree, leaf_spine

OFPT_ERROR = 1


class PipelineFabric(SimFabric):
    """SimFabric whose switches are emu pipelines fed with the controller's bytes."""

    def __init__(self, graph, mgr):
        super().__init__(graph, mgr)
        self.applied = 0
        self.sessions = {}
        self.pipelines = {}
        for name, dpid in self.dpid.items():
            ports = {p: PortState(p, f"{name}-eth{p}", bytes(6), 10**9)
                     for (n, _nb), p in self.port.items() if n == name}
            pipeline = Pipeline(seed=dpid, ports=ports)
            session = OpenFlowSession(SwitchModel(dpid, pipeline))
            session.feed(struct.pack("!BBHI", 4, ofp.OFPT_HELLO, 8, 1), 0.0)
            self.sessions[dpid] = session
            self.pipelines[dpid] = pipeline

    def deliver(self, msgs):
        super().deliver(msgs)
        for dpid, msg in self.sent[self.applied:]:
            for reply in reply_bytes(self.sessions[dpid].feed(bytes(msg.buf), self.now)):
                assert reply[1] != OFPT_ERROR, f"switch {dpid} rejected {msg}: {reply.hex()}"
        self.applied = len(self.sent)

    def set_link(self, a: str, b: str, up: bool) -> None:
        for x, y in ((a, b), (b, a)):
            dpid, port = self.dpid[x], self.port[(x, y)]
            self.pipelines[dpid].ports[port].link_up = up
            self.pipelines[dpid].invalidate()
            self.deliver(self.mgr.port_status(dpid, PortInfo(port, "02:00:00:00:00:00", up),
                                              self.now))

    def trace(self, src: str, dst: str, sport: int = 4791) -> list[str]:
        """The switches a UDP frame src -> dst crosses; asserts it reaches dst's port."""
        s, d = self.graph.nodes[src], self.graph.nodes[dst]
        frame = bytes(Ether(src=s["mac"], dst="02:00:00:00:00:ff") /
                      IP(src=s["ip"], dst=d["ip"]) / UDP(sport=sport, dport=4791) / (b"x" * 32))
        names = {v: k for k, v in self.dpid.items()}
        dpid, port = self.host_loc[src]
        path = []
        for _ in range(8):
            path.append(names[dpid])
            outs, _pins = self.pipelines[dpid].process(port, frame, self.now)
            assert len(outs) == 1, f"{src}->{dst} at {names[dpid]}: outputs {outs}"
            out_port, frame, _q = outs[0]
            live = self.pipelines[dpid].ports[out_port].live
            assert live, f"{src}->{dst}: {names[dpid]} sent out of dead port {out_port}"
            if (dpid, out_port) in self.host_at:
                assert (dpid, out_port) == self.host_loc[dst], f"{src}->{dst} misdelivered"
                assert Ether(frame).dst == d["mac"]  # the last hop rewrote eth_dst
                return path
            dpid, port = self.peer[(dpid, out_port)]
        raise AssertionError(f"{src}->{dst}: loop along {path}")


def build(graph, switches, cables, hosts) -> PipelineFabric:
    mgr = RoutingManager(RoutingConfig(expect_switches=switches, expect_links=cables,
                                       expect_hosts=hosts))
    fab = PipelineFabric(graph, mgr)
    fab.start()
    fab.settle()
    _learn_all_hosts(fab)
    assert mgr.converged()
    return fab


def hosts_of(fab):
    return sorted((n for n, d in fab.graph.nodes(data=True) if d["kind"] == "host"),
                  key=lambda h: int(h[1:]))


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

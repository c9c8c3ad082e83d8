"""Shared fakes for the unit tests: helpers that more than one test module uses.

Each test module keeps the helpers only it needs; whatever another module
reuses lives here (as Faucet keeps its in `valve_test_lib`), so no test
module imports another (tests/unit/test_imports.py checks that). Nothing here
opens a socket or reads the clock. It provides, by owner:

- OpenFlow codec: `HELLO`, `mkmodel`/`session` (a switch model and its agent
  past the handshake), `decode`/`encode` (os-ken parse and serialize),
  `errors` (the OFPT_ERRORs among replies), `frame` (a small UDP frame).
  Used by test_openflow, test_openflow_fuzz, test_flowlet, test_channel,
  test_adaptive, test_agg_proto and test_aggregation_engine.
- Pipeline builders: `mkports`, `flow`, `out`, `group`, `bucket`, `udp` and
  `select_pipeline` (a pipeline spreading over ports 2-5 with a select group).
  Used by test_pipeline and test_flowlet.
- Simulated routing fabrics: `SimFabric` (delivers what the pure routing
  manager sends, answers ARP and barriers), `PipelineFabric` (the same, with
  emu pipelines fed the controller's bytes), the graphs `leaf_spine` and
  `fat_tree`, `learn_all_hosts` and `hosts_of`. Used by test_routing,
  test_routing_on_pipeline, test_adaptive and test_aggregation_manager.
- A two-level aggregation tree: `Tree` (leaf1, leaf2 and root engines), its
  `HOSTS`, `JOB*`, `UP` and `LEAF_AT`, `switch_ports`, `leaf_job`,
  `root_job`, and `lite_datapath` (a Datapath without sockets). Used by
  test_aggregation_engine, test_sharp_host, test_channel and test_live_model.
- A NIC pair back to back: `RATE`, `A`, `B`, `pair` and `run`. Used by
  test_rnic, test_collectives and test_sharp_host.
- The two datapaths side by side: `PythonSwitch` and `CSwitch` (ports that
  capture what they send, no AF_PACKET; `make_switch` builds one, with its
  management and OpenFlow listeners), `DIFF_PORTS`, `DIFF_HOSTS`, `DIFF_MACS`, and flows of
  frames (`random_flow`, `flow_frame`). Used by test_fastpath and
  test_fastpath_differential.
- `numpy_sum`, the reference sum of the ring all-reduce. Used by test_ring
  and test_collectives.
- Adaptive routing's fabric: `StatsFabric` (a `PipelineFabric` whose ports
  have a speed and whose statistics replies reach the adaptive manager),
  `NIC_BPS`, `POLL_S`, `stride`, `send`, `run_polls`, `links_used`; and
  Tagger's four-switch ring with a host each, `ring_graph`, and `roce_walk` (a RoCE
  frame's DSCP and queue at every hop). Used by
  test_adaptive, test_tagger and test_routing_extensions.
- `fidelity_record`, one process's fidelity record as a fabric writes it.
  Used by test_fidelity and test_labs.
- Adaptive routing and UGAL in one switch: `ROCE` (DSCP 26's TOS), `Queues` (an
  egress view the test sets), `experimenter` (emu's SET_SELECT_MODE by os-ken's
  encoder), `pause_frame`, `roce_frame`, `ports_taken` (the port each frame was
  queued on). Used by test_adaptive_routing and test_ugal_switch.
- `CounterFabric`, a running fabric as the measurements in emu/traffic see it,
  without one: a builder's graph, typed port statistics from counters the
  test moves, and the calls it scripts (ping, trace, start, set_link, the
  controller's status). Used by test_ping, test_ecmp_spread and test_outage.
"""

from __future__ import annotations

import collections
import random
import struct
from typing import Any, Dict, List, Optional, Tuple

import networkx as nx
import numpy as np
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controllers import ofmsg
from controllers.routing import PortInfo, RoutingManager
from emu import answers, config, fidelity
from emu.host.rnic import NicConfig, Rnic
from emu.proto import agg, headers, ofext, roce
from emu.switch import datapath, fastpath
from emu.switch.aggregation import AggEngine
from emu.switch.buffer import SharedBuffer
from emu.switch.datapath import DEFAULT_DSCP_TO_PRIO, Datapath
from emu.switch.loop import SwitchLoop
from emu.switch.openflow import OpenFlowSession, Reply, SwitchModel, reply_bytes
from emu.switch.pipeline import Pipeline
from emu.switch.ports import PortState
from emu.switch.rewrite import set_ip_ecn
from emu.switch.scheduler import PortScheduler

# ----- OpenFlow codec -------------------------------------------------------------


HELLO = bytes.fromhex("0400000800000001")


def mkmodel(**kw) -> SwitchModel:
    ports = {i: PortState(i, f"s1-eth{i}", bytes([2, 0, 0, 0, 0, i]), 10**8) for i in range(1, 7)}
    return SwitchModel(0x1234, Pipeline(ports=ports), **kw)


def session(model: SwitchModel | None = None) -> OpenFlowSession:
    s = OpenFlowSession(model or mkmodel(), is_controller_channel=True)
    assert s.feed(HELLO, 0.0) == []
    return s


def decode(msg: bytes):
    return ofproto_parser.msg(None, *ofproto_parser.header(msg), msg)


def encode(msg) -> bytes:
    class _DP:
        ofproto = ofp
        ofproto_parser = p

    msg.datapath = _DP()
    msg.serialize()
    return bytes(msg.buf)


def errors(replies: list) -> list[tuple[int, int]]:
    """(type, code) of every OFPT_ERROR among replies (bytes) or a session's effects."""
    msgs = [r.data if isinstance(r, Reply) else r for r in replies if isinstance(r, (Reply, bytes))]
    return [(m.type, m.code) for m in map(decode, msgs) if isinstance(m, p.OFPErrorMsg)]


def frame() -> bytes:
    return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2) / b"abc")


# ----- pipeline builders ----------------------------------------------------------


def mkports(n: int = 5) -> dict[int, PortState]:
    return {
        i: PortState(i, f"s1-eth{i}", bytes([2, 0, 0, 0, 0, i]), 10**8) for i in range(1, n + 1)
    }


def flow(
    pl: Pipeline,
    match: dict,
    actions: list | None = None,
    *,
    table: int = 0,
    prio: int = 10,
    instructions: list | None = None,
    cmd: int = ofp.OFPFC_ADD,
    **kw,
) -> list:
    if instructions is None:
        instructions = [p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions or [])]
    mod = p.OFPFlowMod(
        None,
        table_id=table,
        priority=prio,
        command=cmd,
        match=p.OFPMatch(**match),
        instructions=instructions,
        **kw,
    )
    return pl.flow_mod(mod, kw.pop("now", 0.0))


def out(port: int, max_len: int = ofp.OFPCML_NO_BUFFER) -> p.OFPActionOutput:
    return p.OFPActionOutput(port, max_len)


def group(pl: Pipeline, gid: int, gtype: int, buckets: list, cmd: int = ofp.OFPGC_ADD) -> list:
    return pl.group_mod(p.OFPGroupMod(None, cmd, gtype, gid, buckets))


def bucket(actions: list, weight: int = 1, watch_port: int = ofp.OFPP_ANY) -> p.OFPBucket:
    return p.OFPBucket(weight, watch_port, ofp.OFPG_ANY, actions)


def udp(sport: int = 1000, dst: str = "10.0.0.2", **kw) -> bytes:
    return bytes(
        Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02")
        / IP(src="10.0.0.1", dst=dst, **kw)
        / UDP(sport=sport, dport=4791)
        / (b"x" * 32)
    )


def select_pipeline(seed: int = 0, queue_bytes=None) -> tuple[Pipeline, dict]:
    ports = mkports(5)
    pl = Pipeline(seed=seed, ports=ports, queue_bytes=queue_bytes)
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(i)], watch_port=i) for i in range(2, 6)])
    flow(pl, {}, [p.OFPActionGroup(1)])
    return pl, ports


# ----- simulated routing fabrics --------------------------------------------------


class SimFabric:
    """Switches and hosts from a networkx graph (nodes with ``kind`` = switch|host)."""

    def __init__(self, graph: nx.Graph, mgr: RoutingManager) -> None:
        self.mgr = mgr
        self.now = 1000.0
        self.dpid: Dict[str, int] = {}
        self.port: Dict[Tuple[str, str], int] = {}  # (node, neighbour) -> port on node
        self.peer: Dict[Tuple[int, int], Tuple[int, int]] = {}
        self.host_at: Dict[Tuple[int, int], Tuple[str, str]] = {}  # (dpid, port) -> (ip, mac)
        self.host_loc: Dict[str, Tuple[int, int]] = {}
        self.nvlink_loc: Dict[str, Tuple[int, int]] = {}  # GPU -> its NVSwitch port
        self.dpids: List[int] = []
        self.hold_barriers = False
        self.held: List[Tuple[int, int]] = []
        # Switches whose packet-ins wait (a backed-up channel): (dpid, port, frame), in order.
        self.backed_up: set = set()
        self.waiting_packet_ins: List[Tuple[int, int, bytes]] = []
        self.to_hosts: List[Tuple[int, int, bytes]] = []
        self.sent: List[Tuple[int, Any]] = []
        switches = sorted(n for n, d in graph.nodes(data=True) if d["kind"] == "switch")
        for i, name in enumerate(switches, start=1):
            self.dpid[name] = i
            self.dpids.append(i)
        for name in switches:
            for port_no, nb in enumerate(sorted(graph.neighbors(name)), start=1):
                self.port[(name, nb)] = port_no
        for a, b in graph.edges():
            for x, y in ((a, b), (b, a)):
                if graph.nodes[x]["kind"] == "switch" and graph.nodes[y]["kind"] == "switch":
                    self.peer[(self.dpid[x], self.port[(x, y)])] = (self.dpid[y], self.port[(y, x)])
                elif graph.nodes[x]["kind"] == "switch":
                    loc = (self.dpid[x], self.port[(x, y)])
                    if graph.edges[x, y].get("tier") == "nvlink":  # a GPU's NVLink port
                        ip, mac = graph.nodes[y]["nvlink_ip"], graph.nodes[y]["nvlink_mac"]
                        self.nvlink_loc[y] = loc
                    else:
                        ip, mac = graph.nodes[y]["ip"], graph.nodes[y]["mac"]
                        self.host_loc[y] = loc
                    self.host_at[loc] = (ip, mac)
        self.graph = graph
        self.switch_names = switches

    def ports_of(self, dpid: int) -> List[PortInfo]:
        name = next(n for n, d in self.dpid.items() if d == dpid)
        return [
            PortInfo(p, "02:00:00:%02x:00:%02x" % (dpid, p), True)
            for (n, _nb), p in sorted(self.port.items())
            if n == name
        ]

    def start(self) -> None:
        for dpid in self.dpids:
            self.deliver(self.mgr.switch_enter(dpid, self.ports_of(dpid), self.now))

    def settle(self, ticks: int = 3, step_s: float = 0.1) -> None:
        for _ in range(ticks):
            self.now += step_s
            self.deliver(self.mgr.tick(self.now))

    def drain_packet_ins(self) -> None:
        """The backed-up switches' packet-ins reach the controller, oldest first."""
        waiting, self.waiting_packet_ins, self.backed_up = self.waiting_packet_ins, [], set()
        for dpid, port, frame in waiting:
            self.deliver(self.mgr.packet_in(dpid, port, frame, self.now))

    def release_barriers(self) -> None:
        held, self.held = self.held, []
        for dpid, xid in held:
            self.deliver(self.mgr.barrier_reply(dpid, xid, self.now))

    def host_arp(self, host: str, target_ip: str, nvlink: bool = False) -> None:
        """Host ``host`` sends an ARP request for ``target_ip`` (from its NVLink port)."""
        d = self.graph.nodes[host]
        ip, mac = (d["nvlink_ip"], d["nvlink_mac"]) if nvlink else (d["ip"], d["mac"])
        frame = ofmsg.arp_frame(
            op=ofmsg.ARP_REQUEST,
            src_mac=mac,
            src_ip=ip,
            dst_mac="00:00:00:00:00:00",
            dst_ip=target_ip,
        )
        dpid, port = (self.nvlink_loc if nvlink else self.host_loc)[host]
        self.deliver(self.mgr.packet_in(dpid, port, frame, self.now))
        self.deliver(self.mgr.tick(self.now))  # the app ticks every 50 ms (RoutingApp.TICK_S)

    def deliver(self, msgs: List[Tuple[int, Any]]) -> None:
        queue = collections.deque(msgs)
        while queue:
            dpid, msg = queue.popleft()
            if msg.xid is None:
                msg.set_xid(0)
            msg.serialize()  # every message must encode
            assert msg.buf[0] == ofp.OFP_VERSION
            self.sent.append((dpid, msg))
            if isinstance(msg, p.OFPBarrierRequest):
                if self.hold_barriers:
                    self.held.append((dpid, msg.xid))
                else:
                    queue.extend(self.mgr.barrier_reply(dpid, msg.xid, self.now))
            elif isinstance(msg, p.OFPPacketOut):
                for action in msg.actions:
                    if not isinstance(action, p.OFPActionOutput):
                        continue  # set_queue: which queue, not where
                    out = (dpid, action.port)
                    if out in self.peer:
                        pd, pp = self.peer[out]
                        if pd in self.backed_up:
                            self.waiting_packet_ins.append((pd, pp, msg.data))
                        else:
                            queue.extend(self.mgr.packet_in(pd, pp, msg.data, self.now))
                    elif out in self.host_at:
                        self.to_hosts.append((dpid, action.port, msg.data))
                        queue.extend(self._host_receives(out, msg.data))

    def _host_receives(self, loc: Tuple[int, int], frame: bytes) -> List[Tuple[int, Any]]:
        ip, mac = self.host_at[loc]
        arp = ofmsg.parse_arp(frame)
        if arp is None or arp.op != ofmsg.ARP_REQUEST or arp.dst_ip != ip:
            return []
        # Linux answers an ARP probe (sender IP 0.0.0.0) to the sender's MAC.
        reply = ofmsg.arp_frame(
            op=ofmsg.ARP_REPLY, src_mac=mac, src_ip=ip, dst_mac=arp.src_mac, dst_ip=arp.src_ip
        )
        return self.mgr.packet_in(loc[0], loc[1], reply, self.now)

    def group_ports(self, switch: str, host: str) -> Optional[frozenset]:
        """The ports of the group routing ``host``'s IP at ``switch`` (None if not a group)."""
        dpid = self.dpid[switch]
        acts = self.mgr.installed_flows(dpid)[self.graph.nodes[host]["ip"]]
        if acts[0][0] != ofmsg.ACTION_GROUP:
            return None
        return self.mgr.installed_groups(dpid)[acts[0][1]]


def add_host(g: nx.Graph, name: str, switch: str, n: int) -> None:
    g.add_node(name, kind="host", ip=f"10.0.0.{n}", mac="00:00:00:00:00:%02x" % n)
    g.add_edge(name, switch)


def leaf_spine(spines: int = 2, leaves: int = 4) -> nx.Graph:
    g = nx.Graph()
    for s in range(1, spines + 1):
        g.add_node(f"s{s}", kind="switch")
    for leaf in range(1, leaves + 1):
        g.add_node(f"l{leaf}", kind="switch")
        for s in range(1, spines + 1):
            g.add_edge(f"l{leaf}", f"s{s}")
        add_host(g, f"h{leaf}", f"l{leaf}", leaf)
    return g


def fat_tree(k: int = 4) -> nx.Graph:
    g = nx.Graph()
    half = k // 2
    cores = [f"c{i}" for i in range(half * half)]
    for c in cores:
        g.add_node(c, kind="switch")
    n = 0
    for pod in range(k):
        aggs = [f"a{pod}_{i}" for i in range(half)]
        edges = [f"e{pod}_{i}" for i in range(half)]
        for i, a in enumerate(aggs):
            g.add_node(a, kind="switch")
            for j in range(half):
                g.add_edge(a, cores[i * half + j])
        for e in edges:
            g.add_node(e, kind="switch")
            for a in aggs:
                g.add_edge(e, a)
            for _ in range(half):
                n += 1
                add_host(g, f"h{n}", e, n)
    return g


def learn_all_hosts(fab: SimFabric) -> None:
    hosts = sorted(
        (n for n, d in fab.graph.nodes(data=True) if d["kind"] == "host"), key=lambda h: int(h[1:])
    )
    for h in hosts:  # every host ARPs for the next one: learns requester, and target via probe
        nxt = hosts[(hosts.index(h) + 1) % len(hosts)]
        fab.host_arp(h, fab.graph.nodes[nxt]["ip"])
    for h in fab.nvlink_loc:  # a GPU's NVLink port announces itself (gratuitous ARP)
        fab.host_arp(h, fab.graph.nodes[h]["nvlink_ip"], nvlink=True)


OFPT_ERROR = 1


class PipelineFabric(SimFabric):
    """SimFabric whose switches are emu pipelines fed with the controller's bytes."""

    def __init__(self, graph, mgr):
        super().__init__(graph, mgr)
        self.applied = 0
        self.sessions = {}
        self.pipelines = {}
        for name, dpid in self.dpid.items():
            ports = {
                p: PortState(p, f"{name}-eth{p}", bytes(6), 10**9)
                for (n, _nb), p in self.port.items()
                if n == name
            }
            pipeline = Pipeline(seed=dpid, ports=ports)
            session = OpenFlowSession(SwitchModel(dpid, pipeline))
            session.feed(struct.pack("!BBHI", 4, ofp.OFPT_HELLO, 8, 1), 0.0)
            self.sessions[dpid] = session
            self.pipelines[dpid] = pipeline

    def deliver(self, msgs):
        super().deliver(msgs)
        for dpid, msg in self.sent[self.applied :]:
            for reply in reply_bytes(self.sessions[dpid].feed(bytes(msg.buf), self.now)):
                assert reply[1] != OFPT_ERROR, f"switch {dpid} rejected {msg}: {reply.hex()}"
        self.applied = len(self.sent)

    def set_link(self, a: str, b: str, up: bool) -> None:
        for x, y in ((a, b), (b, a)):
            dpid, port = self.dpid[x], self.port[(x, y)]
            self.pipelines[dpid].ports[port].link_up = up
            self.pipelines[dpid].invalidate()
            self.deliver(
                self.mgr.port_status(dpid, PortInfo(port, "02:00:00:00:00:00", up), self.now)
            )

    def trace(self, src: str, dst: str, sport: int = 4791, nvlink: bool = False) -> list[str]:
        """The switches a UDP frame src -> dst crosses (NIC to NIC, or NVLink port to
        NVLink port); asserts it reaches dst's port."""
        s, d = self.graph.nodes[src], self.graph.nodes[dst]
        ip, mac = ("nvlink_ip", "nvlink_mac") if nvlink else ("ip", "mac")
        frame = bytes(
            Ether(src=s[mac], dst="02:00:00:00:00:ff")
            / IP(src=s[ip], dst=d[ip])
            / UDP(sport=sport, dport=4791)
            / (b"x" * 32)
        )
        names = {v: k for k, v in self.dpid.items()}
        locs = self.nvlink_loc if nvlink else self.host_loc
        dpid, port = locs[src]
        path = []
        for _ in range(8):
            path.append(names[dpid])
            outs, _pins = self.pipelines[dpid].process(port, frame, self.now)
            assert len(outs) == 1, f"{src}->{dst} at {names[dpid]}: outputs {outs}"
            out_port, frame, _q = outs[0]
            live = self.pipelines[dpid].ports[out_port].live
            assert live, f"{src}->{dst}: {names[dpid]} sent out of dead port {out_port}"
            if (dpid, out_port) in self.host_at:
                assert (dpid, out_port) == locs[dst], f"{src}->{dst} misdelivered"
                assert Ether(frame).dst == d[mac]  # the last hop rewrote eth_dst
                return path
            dpid, port = self.peer[(dpid, out_port)]
        raise AssertionError(f"{src}->{dst}: loop along {path}")


def hosts_of(fab):
    return sorted(
        (n for n, d in fab.graph.nodes(data=True) if d["kind"] == "host"), key=lambda h: int(h[1:])
    )


# ----- a two-level aggregation tree -----------------------------------------------


JOB, JOB_IP, JOB_MAC = 1, "10.255.0.1", "02:00:00:00:aa:01"


HOSTS = {  # name: (leaf, port, mac, ip, rank)
    "h1": ("leaf1", 1, "02:00:00:00:00:01", "10.0.0.1", 0),
    "h2": ("leaf1", 2, "02:00:00:00:00:02", "10.0.0.2", 1),
    "h3": ("leaf2", 1, "02:00:00:00:00:03", "10.0.0.3", 2),
    "h4": ("leaf2", 2, "02:00:00:00:00:04", "10.0.0.4", 3),
}


UP = 3  # a leaf's port towards the root


LEAF_AT = {"leaf1": 1, "leaf2": 2}  # the root's port to each leaf


def switch_ports(sw: int, n: int = 4) -> dict[int, PortState]:
    return {
        i: PortState(i, f"s{sw}-eth{i}", bytes([2, 0, 0, 0, sw, i]), 10**8) for i in range(1, n + 1)
    }


def leaf_job(leaf: str, nslots: int) -> ofext.AggJobSet:
    kids = tuple(
        ofext.AggChild(port, mac, ip) for lf, port, mac, ip, _r in HOSTS.values() if lf == leaf
    )
    return ofext.AggJobSet(JOB, nslots, False, UP, JOB_IP, JOB_MAC, kids)


def root_job(nslots: int) -> ofext.AggJobSet:
    kids = tuple(ofext.AggChild(port, JOB_MAC, JOB_IP) for port in LEAF_AT.values())
    return ofext.AggJobSet(JOB, nslots, True, 0, JOB_IP, JOB_MAC, kids)


class Tree:
    """leaf1, leaf2 and root engines; frames in flight in a pool; hosts' inboxes."""

    def __init__(self, nslots: int = 4, rng: random.Random | None = None) -> None:
        self.nslots = nslots
        self.rng = rng
        self.engines = {
            "leaf1": AggEngine(switch_ports(1)),
            "leaf2": AggEngine(switch_ports(2)),
            "root": AggEngine(switch_ports(3)),
        }
        self.engines["leaf1"].job_set(leaf_job("leaf1", nslots))
        self.engines["leaf2"].job_set(leaf_job("leaf2", nslots))
        self.engines["root"].job_set(root_job(nslots))
        self.links: dict[tuple[str, int], tuple[str, int]] = {}
        for h, (leaf, port, *_rest) in HOSTS.items():
            self.links[(leaf, port)] = (h, 0)
            self.links[(h, 0)] = (leaf, port)
        for leaf, rport in LEAF_AT.items():
            self.links[(leaf, UP)] = ("root", rport)
            self.links[("root", rport)] = (leaf, UP)
        self.pool: list[tuple[str, int, bytes, str, int]] = []  # dst, in_port, frame, src, port
        self.inbox: dict[str, list[agg.AggPacket]] = {h: [] for h in HOSTS}
        self.lose = lambda src, port, pkt: False  # set by tests: drop a frame in flight
        self.sent: list[tuple[str, int, bytes]] = []

    def send(self, host: str, frame: bytes) -> None:
        self.pool.append((*self.links[(host, 0)], frame, host, 0))

    def step(self) -> None:
        i = self.rng.randrange(len(self.pool)) if self.rng else 0
        dst, in_port, frame, _src, _port = self.pool.pop(i)
        if dst in self.inbox:
            self.inbox[dst].append(agg.parse(frame))
            return
        for port, out, queue in self.engines[dst].receive(in_port, frame, 0.0):
            assert queue is None
            self.sent.append((dst, port, out))
            if self.lose(dst, port, agg.parse(out)):
                continue
            self.pool.append((*self.links[(dst, port)], out, dst, port))

    def run(self, on_result=None) -> None:
        while self.pool:
            before = {h: len(v) for h, v in self.inbox.items()}
            self.step()
            if on_result is not None:
                for h, box in self.inbox.items():
                    for pkt in box[before[h] :]:
                        on_result(h, pkt)

    def counters(self, sw: str) -> dict:
        return self.engines[sw].report()["jobs"][str(JOB)]


def lite_datapath(ports: dict[int, PortState], pipeline: Pipeline, engine: AggEngine) -> Datapath:
    """A Datapath with its queues, buffer and engine but no sockets (for `_enqueue`)."""
    dp = Datapath.__new__(Datapath)
    qos = config.parse_qos({})
    dp.name, dp.ports, dp.pipeline, dp.agg, dp.agg_errors = "s1", ports, pipeline, engine, 0
    dp.schedulers = {n: PortScheduler(rate_bps=pt.rate_bps) for n, pt in ports.items()}
    dp.buffer = SharedBuffer(
        qos["buffer"], qos["pfc"], qos["ecn"], {n: pt.rate_bps for n, pt in ports.items()}
    )
    dp.wd_drop, dp.busy, dp.watchdog_drops, dp.tx_due = set(), set(), 0, float("inf")
    dp.pause_rx = {}
    dp.dscp_to_prio = [0] * 64
    for dscp, prio in DEFAULT_DSCP_TO_PRIO.items():
        dp.dscp_to_prio[dscp] = prio
    return dp


# ----- a NIC pair back to back ----------------------------------------------------


RATE = 20_000_000


A = dict(mac="02:00:00:00:00:01", ip="10.0.0.1")


B = dict(mac="02:00:00:00:00:02", ip="10.0.0.2")


def pair(**kw):
    a, b = Rnic(NicConfig(rate_bps=RATE, **A, **kw)), Rnic(NicConfig(rate_bps=RATE, **B, **kw))
    a.connect(1, 7, B["mac"], B["ip"], 49152, 0.0)
    b.connect(7, 1, A["mac"], A["ip"], 49153, 0.0)
    return a, b


def run(
    a,
    b,
    until,
    drop=lambda i, f: False,
    mark=lambda i, f: False,
    repeat=lambda i, f: False,
    step=1e-4,
):
    """Move frames a->b (and replies b->a) until `until`; returns frames a sent.

    The i-th frame a sends is lost (`drop`), CE-marked (`mark`) or delivered twice (`repeat`).
    """
    now, sent = 0.0, 0
    while now < until:
        for f in b.tick(now):
            a.receive(f, now)
        frame = a.next_frame(now)
        while frame is not None:
            sent += 1
            if not drop(sent, frame):
                if mark(sent, frame):
                    frame = set_ip_ecn(frame, roce.ECN_CE)
                for _ in range(2 if repeat(sent, frame) else 1):
                    for reply in b.receive(frame, now):
                        a.receive(reply, now)
            frame = a.next_frame(now)
        now += step
    return sent


# ----- the ring's reference sum ---------------------------------------------------


def numpy_sum(arrays):
    stack = np.stack(arrays)
    if stack.dtype == np.int32:
        return stack.sum(axis=0, dtype=np.int32)  # wraps modulo 2**32, like the ring
    return stack.astype(np.float64).sum(axis=0)


# ----- the two datapaths side by side, without sockets -----------------------------

RATE_BPS = 10_000_000
DIFF_PORTS = (1, 2, 3, 4, 5, 6)
DIFF_HOSTS = [f"10.0.0.{i}" for i in range(1, 9)]
DIFF_MACS = [f"02:00:00:00:00:{i:02x}" for i in range(1, 9)]


class CaptureSocket:
    """A port's socket that keeps what is sent (fileno -1: the C switch captures itself)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> int:
        self.sent.append(bytes(frame))
        return len(frame)

    def fileno(self) -> int:
        return -1

    def getsockopt(self, *args) -> bytes:
        return bytes(8)

    def close(self) -> None:
        pass


class CapturePorts:
    """Ports without AF_PACKET: a capture socket each, carrier always up."""

    def _open_port(self, spec: datapath.PortSpec) -> None:
        sock = CaptureSocket()
        self.filter_outgoing = False
        self.ports[spec.port_no] = PortState(
            spec.port_no, spec.name, bytes([2, 0, 0, 0, 0xAA, spec.port_no]), spec.rate_bps
        )
        self.schedulers[spec.port_no] = PortScheduler(rate_bps=spec.rate_bps)
        self.port_socks[spec.port_no] = sock
        self.kernel_drops[spec.port_no] = 0
        self._attach_reader(spec.port_no, sock, spec.name, 1522, 1024)

    @staticmethod
    def _carrier(ifname: str) -> bool:
        return True


class PythonSwitch(CapturePorts, Datapath):
    def _attach_reader(self, port_no, sock, ifname, max_frame, frames) -> None:
        pass  # the test feeds frames itself

    def feed(self, in_port: int, frame: bytes, now: float) -> None:
        if self.tx_due <= now:
            self._transmit(now)
        self._receive_frame(
            in_port, self.ports[in_port], self.credit_links.get(in_port), frame, now
        )

    def step(self, now: float) -> None:
        self._send_pfc(now)
        if self.busy:
            self._transmit(now)

    def sent(self, port_no: int) -> list[bytes]:
        return self.port_socks[port_no].sent


class CSwitch(CapturePorts, fastpath.FastDatapath):
    def feed(self, in_port: int, frame: bytes, now: float) -> None:
        self.csw.feed(in_port, frame, now)

    def step(self, now: float) -> None:
        self.csw.send_pfc(now)
        self.csw.transmit(now)

    def sent(self, port_no: int) -> list[bytes]:
        got = self.__dict__.setdefault("_sent", {}).setdefault(port_no, [])
        got.extend(frame for _prio, frame in self.csw.captured(port_no))
        return got


def make_switch(cls, tmp_path, qos: str = "{}"):
    """A switch of `cls` (PythonSwitch or CSwitch) with DIFF_PORTS at RATE_BPS, no sockets."""
    argv = ["--name", "s1", "--dpid", "1", "--mgmt", str(tmp_path / f"{cls.__name__}.sock")]
    for n in DIFF_PORTS:
        argv += ["--port", f"s1-eth{n}:{n}:{RATE_BPS}"]
    argv += ["--qos", qos]
    return cls(datapath.build_parser().parse_args(argv), SwitchLoop())


def _ipv4(rng: random.Random, proto: int, l4: bytes, flow: dict) -> bytes:
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        flow["tos"],
        20 + len(l4),
        rng.randrange(65536),
        flow["frag"],
        flow["ttl"],
        proto,
        0,
        bytes(map(int, flow["src"].split("."))),
        bytes(map(int, flow["dst"].split("."))),
    )
    hdr = hdr[:10] + struct.pack("!H", headers.ipv4_checksum(hdr)) + hdr[12:]
    return hdr + l4


def random_flow(rng: random.Random, incast: bool) -> dict:
    """What stays the same for every frame of a flow (its key), drawn at random."""
    tos = rng.choice([0, 26 << 2, 34 << 2, 48 << 2, rng.randrange(256)]) | rng.randrange(4)
    if incast:  # mostly RoCE (DSCP 26, ECN-capable): the lossless class PAUSEs
        tos = rng.choice([26 << 2 | 2, 26 << 2 | 2, 26 << 2 | 1, tos])
    return {
        "kind": rng.random(),
        "macs": (rng.choice(DIFF_MACS), rng.choice(DIFF_MACS)),
        "tos": tos,
        "ttl": rng.choice([64, 64, 64, 2, 1, 0]),
        "frag": rng.choice([0, 0, 0, 0x4000, 0x2000, 0x0001]),
        "src": rng.choice(DIFF_HOSTS),
        "dst": DIFF_HOSTS[7] if incast else rng.choice(DIFF_HOSTS),
        "sport": rng.choice([1000, 2000, 49152 + rng.randrange(64), rng.randrange(1024, 65536)]),
        "dport": rng.choice([4791, 4791, 53, 5201]),
        "csum": rng.choice([0, 0x1234]),
        "vid": rng.choice([1, 5]) | rng.randrange(8) << 13,
    }


def flow_frame(rng: random.Random, flow: dict) -> bytes:
    """One frame of `flow`: its headers, a new IP id, payload and length."""
    kind = flow["kind"]
    size = rng.choice([0, 16, 64, 512, 1000, 1400, rng.randrange(1430)])
    eth = headers.ethernet(*flow["macs"], 0x0800)
    if kind < 0.5:
        udp = struct.pack("!HHHH", flow["sport"], flow["dport"], 8 + size, flow["csum"])
        return eth + _ipv4(rng, 17, udp + rng.randbytes(size), flow)
    if kind < 0.85:
        tcp = struct.pack("!HHIIBBHHH", flow["sport"], 5201, 1, 0, 0x50, 0x10, 8, 0x55AA, 0)
        return eth + _ipv4(rng, 6, tcp + rng.randbytes(size), flow)
    if kind < 0.9:
        return eth + _ipv4(rng, 1, bytes([8, 0, 0, 0]) + rng.randbytes(size), flow)
    inner = _ipv4(rng, 17, struct.pack("!HHHH", 1, 4791, 8, 0), flow)
    tagged = headers.ethernet(*flow["macs"], 0x8100)
    return tagged + struct.pack("!HH", flow["vid"], 0x0800) + inner


# ----- adaptive routing's fabric, Tagger's ring ------------------------------------

NIC_BPS = 16_000  # small, so that a few traced frames make an elephant
POLL_S = 1.0


class StatsFabric(PipelineFabric):
    """PipelineFabric whose ports report a speed and whose stats replies reach adaptive."""

    adaptive = None  # the AdaptiveManager attached to self.mgr, if any

    def ports_of(self, dpid):
        return [PortInfo(p.port_no, p.hw_addr, p.live, NIC_BPS) for p in super().ports_of(dpid)]

    def deliver(self, msgs):
        sent_before = len(self.sent)
        super().deliver(msgs)
        for dpid, msg in self.sent[sent_before:]:
            if isinstance(msg, (p.OFPFlowStatsRequest, p.OFPPortStatsRequest)):
                self._answer(dpid, msg)

    def _answer(self, dpid, msg):
        for raw in reply_bytes(self.sessions[dpid].feed(bytes(msg.buf), self.now)):
            reply = decode(raw)
            if isinstance(reply, p.OFPFlowStatsReply):
                stats = [(s.priority, dict(s.match.items()), s.byte_count) for s in reply.body]
                super().deliver(self.adaptive.flow_stats(dpid, stats, self.now))
            elif isinstance(reply, p.OFPPortStatsReply):
                stats = [(s.port_no, s.tx_bytes) for s in reply.body]
                super().deliver(self.adaptive.port_stats(dpid, stats, self.now))


def stride(fab, n: int) -> list[tuple[str, str]]:
    hosts = hosts_of(fab)
    return [(h, hosts[(i + n) % len(hosts)]) for i, h in enumerate(hosts)]


def send(fab, pairs, frames: int = 10) -> None:
    for src, dst in pairs:
        for _ in range(frames):
            fab.trace(src, dst, sport=40000)


def run_polls(fab, pairs, polls: int) -> None:
    """Traffic for `polls` poll intervals, routing (and adaptive with it) ticking through them."""
    for _ in range(polls):
        send(fab, pairs)
        fab.now += POLL_S
        fab.deliver(fab.mgr.tick(fab.now))


def links_used(fab, pairs) -> collections.Counter:
    used: collections.Counter = collections.Counter()
    for src, dst in pairs:
        path = fab.trace(src, dst, sport=40000)
        used.update(zip(path, path[1:]))
    return used


def ring_graph() -> nx.Graph:
    g = nx.Graph()
    for i in range(1, 5):
        g.add_node(f"r{i}", kind="switch")
    for i in range(1, 5):
        g.add_edge(f"r{i}", f"r{i % 4 + 1}")
        add_host(g, f"h{i}", f"r{i}", i)
    return g


def roce_walk(fab, src: str, dst: str) -> list[tuple[str, int, int | None]]:
    """(switch, DSCP out, queue) at every hop of a RoCE frame src -> dst through the pipelines."""
    s, d = fab.graph.nodes[src], fab.graph.nodes[dst]
    frame = bytes(
        Ether(src=s["mac"], dst="02:00:00:00:00:ff")
        / IP(src=s["ip"], dst=d["ip"], tos=26 << 2)
        / UDP(sport=49153, dport=4791)
        / (b"x" * 32)
    )
    names = {v: k for k, v in fab.dpid.items()}
    dpid, port = fab.host_loc[src]
    hops = []
    while True:
        (out_port, frame, queue), *_ = fab.pipelines[dpid].process(port, frame, fab.now)[0]
        hops.append((names[dpid], IP(bytes(frame)[14:]).tos >> 2, queue))
        if (dpid, out_port) in fab.host_at:
            return hops
        dpid, port = fab.peer[(dpid, out_port)]


# ----- fidelity records ----------------------------------------------------------

FIDELITY_RATE = 20_000_000  # test_fidelity's RATE
FIDELITY_FRAME_S = fidelity.frame_time_s(FIDELITY_RATE)


def fidelity_record(
    name="leaf1", hist=None, stall_frames=2.0, drops=0, deficit_s=0.0, kind="switch"
):
    hist = hist or [1000, 0, 0, 0, 0, 0, 0, 0]
    return {
        "name": name,
        "kind": kind,
        "pid": 1,
        "window_s": 10.0,
        "cpu": {"cpu_s": 1.0, "cpu_share": 0.1, "wait_s": 0.1, "wait_share": 0.01},
        "loop": {
            "frame_s": FIDELITY_FRAME_S,
            "passes": 100,
            "longest_stall_s": stall_frames * FIDELITY_FRAME_S,
            "stalls_over_1": 1,
            "stalls_over_10": 0,
            "stalled_s": 0.0,
        },
        "ports": {
            "3": {
                "name": f"{name}-eth3",
                "rate_bps": FIDELITY_RATE,
                "frame_s": FIDELITY_FRAME_S,
                "frames": sum(hist),
                "hist": hist,
                "max_late_s": 0.001,
                "deficit_s": deficit_s,
                "kernel_drops": drops,
            }
        },
    }


# ----- a running fabric as measurements see it ------------------------------------


class CounterFabric:
    """What emu/traffic's measurements call on a Fabric, over a builder's `graph`, without one.

    `port_stats` answers typed (emu/answers.py) from `tx_bytes` and `rx_packets`,
    keyed (switch, port number); `send` moves them as traffic would, and
    `on_read(switch)`, if set, runs before every read (traffic between reads).
    `ping`, `trace_path` and `start` call the test's `pinger`, `tracer` and
    `starter`; `set_link` records the cut in `links_set`; `controller_status`
    gives `status`.
    """

    def __init__(self, graph: nx.Graph) -> None:
        self.graph = graph
        self.tx_bytes: collections.Counter = collections.Counter()
        self.rx_packets: collections.Counter = collections.Counter()
        self.on_read = None
        self.pinger = None
        self.tracer = None
        self.starter = None
        self.links_set: List[Tuple[str, str, bool]] = []
        self.status: dict = {}
        self.pings: List[Tuple[str, str, str]] = []

    def port_no(self, switch: str, neighbour: str) -> int:
        return self.graph.edges[switch, neighbour]["ports"][switch]

    def send(self, switch: str, neighbour: str, nbytes: int, frames: int = 0) -> None:
        """`switch` sends `nbytes` towards `neighbour`, which receives `frames` frames."""
        self.tx_bytes[(switch, self.port_no(switch, neighbour))] += nbytes
        if self.graph.nodes[neighbour]["kind"] == "switch":
            self.rx_packets[(neighbour, self.port_no(neighbour, switch))] += frames

    def port_stats(self, switch: str) -> Dict[int, answers.PortStats]:
        if self.on_read is not None:
            self.on_read(switch)
        ports = sorted(d["ports"][switch] for _, _, d in self.graph.edges(switch, data=True))
        return {
            n: answers.PortStats(
                port_no=n,
                name=f"{switch}-eth{n}",
                hw_addr="02:00:00:00:00:01",
                rate_bps=10**7,
                link_up=True,
                config=0,
                rx_packets=self.rx_packets[(switch, n)],
                tx_packets=0,
                rx_bytes=0,
                tx_bytes=self.tx_bytes[(switch, n)],
                rx_dropped=0,
                tx_dropped=0,
                rx_errors=0,
                tx_errors=0,
                queue_bytes=[0] * 8,
            )
            for n in ports
        }

    def ping(self, src, dst, count=1, timeout_s=1.0, interval_s=0.2, port="nic"):
        self.pings.append((src, dst, port))
        return self.pinger(src, dst, count, port)

    def trace_path(self, src, dst, proto="tcp", sport=49152, dport=5201):
        return self.tracer(src, dst, proto, sport, dport)

    def start(self, workload: str, **options):
        return self.starter(workload, **options)

    def set_link(self, u: str, v: str, up: bool) -> None:
        self.links_set.append((u, v, up))

    def controller_status(self) -> dict:
        return self.status


# ----- adaptive routing and UGAL in one switch --------------------------------------

ROCE = 26 << 2  # DSCP 26: priority 3


class Queues:
    """An egress view the test sets: bytes per (port, prio), paused (port, prio)s."""

    def __init__(self) -> None:
        self.depth: dict[tuple[int, int], int] = collections.Counter()
        self.paused: set[tuple[int, int]] = set()

    def __call__(self, port_no: int, prio: int, now: float):
        if port_no not in (2, 3, 4, 5):
            return None
        ahead = sum(self.depth[(port_no, q)] for q in range(prio, 8))
        return ahead, (port_no, prio) in self.paused


def experimenter(data: bytes) -> bytes:
    """Built by os-ken's own encoder: an independent check of our wire format."""
    return encode(
        p.OFPExperimenter(
            None,
            experimenter=ofext.EMU_EXPERIMENTER_ID,
            exp_type=ofext.EXP_SET_SELECT_MODE,
            data=data,
        )
    )


PFC_DST = "01:80:c2:00:00:01"


def pause_frame(prios: int, quanta: int = 0xFFFF) -> bytes:
    """An 802.1Qbb PAUSE for the priorities of the mask `prios` (their queues stop)."""
    body = struct.pack("!HH8H", 0x0101, prios, *[quanta if prios >> i & 1 else 0 for i in range(8)])
    return headers.ethernet(PFC_DST, "02:00:00:00:00:77", 0x8808) + body + bytes(26)


def roce_frame(sport: int, tos: int = ROCE, size: int = 1000, dst: str = "10.0.0.9") -> bytes:
    """A RoCEv2-port UDP frame of `size` payload bytes."""
    return bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst=dst, tos=tos)
        / UDP(sport=sport, dport=4791)
        / bytes(size)
    )


def enqueued(dp) -> dict[int, int]:
    return {n: sum(c.enqueued_packets for c in dp.schedulers[n].counters) for n in (2, 3, 4, 5)}


def ports_taken(dp, frames: list[bytes], now: float) -> list[int]:
    """The port each frame was queued on, fed one after another at `now` (faster than any
    port sends, so queues build)."""
    taken = []
    for frame in frames:
        before = enqueued(dp)
        dp.feed(1, frame, now)
        after = enqueued(dp)
        [port] = [n for n in after if after[n] != before[n]]
        taken.append(port)
    return taken

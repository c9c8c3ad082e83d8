"""Aggregation manager: SHARP-like reduction trees for all-reduce jobs.

Two layers, as in ``controllers/routing.py``:

* ``AggregationManager`` is pure: jobs, their reduction trees, which switches
  are connected and each switch's slot budget.  Its methods take the
  topology and ``now`` and return ``(dpid, message)`` lists; it holds no
  datapath and reads no clock, and the unit tests drive it without os-ken.
* ``AggregationApp`` is the os-ken shim.  It runs beside ``controllers.routing``
  (or ``controllers.adaptive``) in the same controller and consumes what the
  routing service publishes (``controllers/routing_api.py``): every
  ``EventRoutingChanged`` carries routing's new view, on which the manager
  checks and rebuilds trees, and a registration asks routing for its current
  view (``get_view``).  Jobs register on a Unix socket (JSON lines, the
  protocol of ``emu/mgmt.py``)::

      {"cmd": "register", "hosts": ["10.0.0.1", ...], "nslots": 64}
          -> {"job_id", "job_ip", "job_mac", "nslots", "root", "tree"}
          or an error starting "refused:" when slots ran out (the client
          falls back to the ring) or naming the bad host
      {"cmd": "unregister", "job_id": N}
      {"cmd": "jobs"}   -> every job with its tree, state, rebuilds and epoch

The tree of a job is built with networkx on the current topology.  Its root is
the switch that reaches all of the job's edge switches (the switches its hosts
hang off) in the fewest hops: the leaf itself when every host is on one leaf,
a spine on a leaf/spine, an aggregation switch within a fat-tree pod, a core
switch across pods.  Ties go to the root with the most free slots, so
concurrent jobs spread over the spines.  The tree is the BFS tree from the root,
pruned to the paths down to the edge switches, so each switch has one parent.

On every switch of the tree the manager configures the reduction engine with
emu's OpenFlow extension (``EXP_AGG_JOB_SET``: children, parent or root, slots;
``emu/proto/ofext.py``) and installs one flow that steers the job's frames
(``ipv4_dst`` = the job's address, UDP 4792) to the engine's logical port.  A
job that would exceed any tree switch's slots is refused.  When a link or
switch of a tree goes away, the tree is rebuilt on what is left (and the job
is marked failed if nothing is left); a switch that reconnects (a restart
empties its engine) gets its part again. Either bumps the job's epoch: an
all-reduce in flight across it starts over (``run_allreduce`` does that).

Messages are built only by ``controllers/ofmsg.py``; barrier xids come from
this app's band in ``controllers/layout.py``; nothing here imports emu's
switch.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

import networkx as nx
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from controllers import layout, ofmsg
from controllers.launch import app_options
from controllers.routing_api import (
    EventRoutingChanged,
    Host,
    Msgs,
    RoutingUnavailable,
    RoutingView,
    get_view,
)
from emu.mgmt import MgmtServer
from emu.proto import ofext

LOG = logging.getLogger(__name__)

Cable = Tuple[int, int, int, int]  # (dpid, port, dpid, port), both directions discovered

JOB_ID_MAX = 0xFFFE
DEFAULT_NSLOTS = 64
REGISTER_TIMEOUT_S = 5.0


class JobError(ValueError):
    """A registration that cannot be served: bad hosts, or (``refused``) no slots/path."""


class JobRefused(JobError):
    """No tree with enough free slots: the client falls back to the ring."""


@dataclass(frozen=True)
class Topology:
    """What routing discovered: live ports, cables (both directions seen), hosts."""

    switches: Mapping[int, Mapping[int, str]]
    cables: FrozenSet[Cable]
    hosts: Mapping[str, Host]

    @classmethod
    def from_view(cls, view: RoutingView) -> "Topology":
        """The cables and hosts of routing's view (a cable: both directions, both ports live)."""
        directed = set(view.links)
        cables = frozenset(
            (s, sp, d, dp)
            for s, sp, d, dp in directed
            if (d, dp, s, sp) in directed
            and sp in view.switches.get(s, {})
            and dp in view.switches.get(d, {})
        )
        return cls(view.switches, cables, dict(view.hosts))

    def graph(self, allowed: Optional[Set[int]] = None) -> nx.Graph:
        """Switches joined by cables; each edge keeps the lowest port at either end."""
        g = nx.Graph()
        g.add_nodes_from(d for d in self.switches if allowed is None or d in allowed)
        for s, sp, d, dp in sorted(self.cables):
            if s not in g or d not in g:
                continue
            ports = g.edges[s, d]["ports"] if g.has_edge(s, d) else {}
            ports.setdefault(s, sp)
            ports.setdefault(d, dp)
            g.add_edge(s, d, ports=ports)
        return g


@dataclass(frozen=True)
class TreeNode:
    """One switch of a job's tree: what its engine is told."""

    dpid: int
    parent: Optional[int]  # parent switch; None at the root
    parent_port: int  # 0 at the root
    children: Tuple[ofext.AggChild, ...]
    links: FrozenSet[Tuple[int, int]]  # (dpid, port) ends this node's tree edges use


@dataclass
class Job:
    job_id: int
    hosts: Tuple[str, ...]
    nslots: int
    job_ip: str
    job_mac: str
    tree: Dict[int, TreeNode]
    state: str = "active"  # active | failed
    reason: str = ""
    rebuilds: int = 0
    # Bumped whenever engines of the tree get fresh slots (a rebuild, or a
    # restarted switch given its part again): an all-reduce in flight across
    # a reset cannot finish (ranks that had a chunk's result will not send it
    # again) and must start over; run_allreduce watches this.
    epoch: int = 0

    @property
    def root(self) -> int:
        return next(d for d, n in self.tree.items() if n.parent is None)

    def describe(self) -> Dict[str, Any]:
        return {
            "job_id": self.job_id,
            "hosts": list(self.hosts),
            "nslots": self.nslots,
            "job_ip": self.job_ip,
            "job_mac": self.job_mac,
            "state": self.state,
            "reason": self.reason,
            "rebuilds": self.rebuilds,
            "epoch": self.epoch,
            "root": f"{self.root:016x}" if self.tree else None,
            "tree": {
                f"{d:016x}": {
                    "parent_port": n.parent_port,
                    "children": [c.port for c in n.children],
                }
                for d, n in sorted(self.tree.items())
            },
        }


def job_address(job_id: int) -> Tuple[str, str]:
    """The job's IPv4 and MAC address: locally administered, outside every host subnet."""
    hi, lo = job_id >> 8, job_id & 0xFF
    return f"10.254.{hi}.{lo}", f"02:e3:00:00:{hi:02x}:{lo:02x}"


def build_tree(
    topo: Topology,
    host_ips: Sequence[str],
    job_ip: str,
    job_mac: str,
    free_slots: Mapping[int, int],
    nslots: int,
) -> Dict[int, TreeNode]:
    """The reduction tree of a job: see the module docstring.

    Raises:
        JobError: a host is unknown or listed twice.
        JobRefused: no root reaches every edge switch through switches with
            ``nslots`` free slots.
    """
    if len(set(host_ips)) != len(host_ips):
        raise JobError(
            f"hosts listed twice: {sorted(h for h in host_ips if host_ips.count(h) > 1)}"
        )
    unknown = [ip for ip in host_ips if ip not in topo.hosts]
    if unknown:
        raise JobError(f"unknown host(s) {unknown}; known: {sorted(topo.hosts)}")
    hosts = [topo.hosts[ip] for ip in host_ips]
    edges = {h.dpid for h in hosts}
    ok = {d for d in topo.switches if free_slots.get(d, 0) >= nslots}
    if not edges <= ok:
        raise JobRefused(
            f"refused: edge switch(es) {sorted(f'{d:016x}' for d in edges - ok)} "
            f"have fewer than {nslots} free slots"
        )
    g = topo.graph(ok)
    best: Optional[Tuple[Tuple[int, int, int, int], Dict[int, int]]] = None
    for root in sorted(g.nodes):
        parent = _bfs_parents(g, root)
        if not edges <= parent.keys():
            continue
        members: Set[int] = set()
        height = 0
        for e in edges:
            depth, node = 0, e
            while node is not None:
                members.add(node)
                node = parent[node]
                depth += 1
            height = max(height, depth)
        score = (height, len(members), -free_slots.get(root, 0), root)
        if best is None or score < best[0]:
            best = (score, {m: parent[m] for m in members})
    if best is None:
        raise JobRefused(
            f"refused: no switch reaches all of {sorted(f'{d:016x}' for d in edges)} "
            f"through switches with {nslots} free slots"
        )
    parents = best[1]
    tree: Dict[int, TreeNode] = {}
    for dpid, up in parents.items():
        children: List[ofext.AggChild] = []
        ends: Set[Tuple[int, int]] = set()
        for child, p in sorted(parents.items()):
            if p == dpid:
                port = g.edges[dpid, child]["ports"][dpid]
                children.append(ofext.AggChild(port, job_mac, job_ip))
                ends |= {(dpid, port), (child, g.edges[dpid, child]["ports"][child])}
        for h in hosts:
            if h.dpid == dpid:
                children.append(ofext.AggChild(h.port, h.mac, h.ip))
        parent_port = 0 if up is None else g.edges[dpid, up]["ports"][dpid]
        tree[dpid] = TreeNode(dpid, up, parent_port, tuple(children), frozenset(ends))
    return tree


def _bfs_parents(g: nx.Graph, root: int) -> Dict[int, Optional[int]]:
    # Sorted neighbours: the same topology always gives the same tree.
    parent: Dict[int, Optional[int]] = {root: None}
    queue: Deque[int] = collections.deque([root])
    while queue:
        node = queue.popleft()
        for nb in sorted(g.neighbors(node)):
            if nb not in parent:
                parent[nb] = node
                queue.append(nb)
    return parent


class AggregationManager:
    """Pure job bookkeeping: register, unregister, topology changes, switch restarts.

    Args:
        slots_per_switch: each switch engine's slot pool (the switch's own
            default is 1024; the switch refuses beyond its pool in any case).
    """

    def __init__(self, slots_per_switch: int = 1024) -> None:
        self.slots_per_switch = slots_per_switch
        self.jobs: Dict[int, Job] = {}
        self._entered_s: Dict[int, float] = {}  # connected switches, in connect order
        self._next_id = 1
        self._next_xid = layout.AGGREGATION_BARRIER_XIDS.first
        self.events: Deque[Dict[str, Any]] = collections.deque(maxlen=200)

    # ------------------------------------------------------------------ switches

    def switch_enter(self, dpid: int, now: float) -> Msgs:
        """A switch (re)connected: its engine is empty; give it its part of every job."""
        self._entered_s[dpid] = now
        msgs: Msgs = []
        for job in self.jobs.values():
            node = job.tree.get(dpid)
            if job.state == "active" and node is not None:
                job.epoch += 1
                self._event(now, "reset", job_id=job.job_id, dpid=f"{dpid:016x}", epoch=job.epoch)
                msgs += self._install_node(job, node)
        return msgs

    def switch_leave(self, dpid: int, now: float) -> Msgs:
        """A switch disconnected: nothing to send; its jobs are checked on the next topology."""
        self._entered_s.pop(dpid, None)
        return []

    def connected(self, dpid: int) -> bool:
        """Whether ``dpid`` is connected (messages to it are sent)."""
        return dpid in self._entered_s

    # ------------------------------------------------------------------ jobs

    def free_slots(self, exclude: Optional[int] = None) -> Dict[int, int]:
        used: Dict[int, int] = collections.Counter()
        for job in self.jobs.values():
            if job.job_id != exclude and job.state == "active":
                for dpid in job.tree:
                    used[dpid] += job.nslots
        return {d: self.slots_per_switch - used[d] for d in self._entered_s}

    def register(
        self, topo: Topology, host_ips: Sequence[str], now: float, nslots: int = DEFAULT_NSLOTS
    ) -> Tuple[Job, Msgs]:
        """A new job over `host_ips` (rank order); raises JobError / JobRefused."""
        if len(host_ips) < 2:
            raise JobError(f"a job needs at least 2 hosts, got {list(host_ips)}")
        if nslots < 1:
            raise JobError(f"nslots={nslots}: must be >= 1")
        if nslots > self.slots_per_switch:
            raise JobRefused(
                f"refused: nslots={nslots} exceeds a switch's pool of {self.slots_per_switch} slots"
            )
        job_id = self._allocate_id()
        job_ip, job_mac = job_address(job_id)
        tree = build_tree(topo, list(host_ips), job_ip, job_mac, self.free_slots(), nslots)
        job = Job(job_id, tuple(host_ips), nslots, job_ip, job_mac, tree)
        self.jobs[job_id] = job
        self._event(now, "register", job_id=job_id, root=job.root, switches=len(tree))
        msgs: Msgs = []
        for node in tree.values():
            msgs += self._install_node(job, node)
        return job, msgs

    def unregister(self, job_id: int, now: float) -> Msgs:
        job = self.jobs.pop(job_id, None)
        if job is None:
            raise JobError(f"unknown job {job_id}; known: {sorted(self.jobs)}")
        self._event(now, "unregister", job_id=job_id)
        msgs: Msgs = []
        for dpid in job.tree:
            msgs += self._uninstall_node(job, dpid)
        return msgs

    def fail(self, job_id: int, reason: str, now: float) -> Msgs:
        """A switch refused the job (e.g. its slots ran out): take it down everywhere."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "active":
            return []
        job.state, job.reason = "failed", reason
        self._event(now, "failed", job_id=job_id, reason=reason)
        msgs: Msgs = []
        for dpid in job.tree:
            msgs += self._uninstall_node(job, dpid)
        return msgs

    def topology_changed(self, topo: Topology, now: float) -> Msgs:
        """Rebuild every tree that lost a switch, a cable or a host attachment."""
        msgs: Msgs = []
        for job in sorted(self.jobs.values(), key=lambda j: j.job_id):
            if job.state != "active" or self._tree_intact(job, topo):
                continue
            old = job.tree
            try:
                new = build_tree(
                    topo,
                    list(job.hosts),
                    job.job_ip,
                    job.job_mac,
                    self.free_slots(exclude=job.job_id),
                    job.nslots,
                )
            except JobError as exc:
                msgs += self.fail(job.job_id, f"tree lost and not rebuilt: {exc}", now)
                continue
            job.tree = new
            job.rebuilds += 1
            job.epoch += 1
            self._event(
                now, "rebuild", job_id=job.job_id, root=job.root, switches=len(new), epoch=job.epoch
            )
            LOG.info("job %d: tree rebuilt, root %016x", job.job_id, job.root)
            for dpid in old.keys() - new.keys():
                msgs += self._uninstall_node(job, dpid)
            for node in new.values():
                # JOB_SET replaces the job on switches that keep it: fresh slots everywhere.
                msgs += self._install_node(job, node)
        return msgs

    def _tree_intact(self, job: Job, topo: Topology) -> bool:
        live_ends = {(s, sp) for s, sp, _d, _dp in topo.cables}
        for dpid, node in job.tree.items():
            if dpid not in topo.switches or dpid not in self._entered_s:
                return False
            if not node.links <= live_ends:
                return False
        for ip in job.hosts:
            host = topo.hosts.get(ip)
            node = job.tree.get(host.dpid) if host else None
            if node is None or all(c.port != host.port for c in node.children):
                return False
            if host.port not in topo.switches.get(host.dpid, {}):
                return False
        return True

    # ------------------------------------------------------------------ messages

    def barrier(self, dpid: int) -> Tuple[int, Any]:
        """A barrier to `dpid` from this app's xid range: (xid, message)."""
        xid = self._next_xid
        self._next_xid = layout.AGGREGATION_BARRIER_XIDS.next(xid)
        return xid, ofmsg.barrier(xid=xid)

    def _install_node(self, job: Job, node: TreeNode) -> Msgs:
        if node.dpid not in self._entered_s:
            return []
        config = ofext.AggJobSet(
            job.job_id,
            job.nslots,
            node.parent is None,
            node.parent_port,
            job.job_ip,
            job.job_mac,
            node.children,
        )
        steer = ofmsg.flow_add(
            cookie=layout.AGGREGATION_COOKIE | job.job_id,
            table_id=layout.ROUTING_TABLE,
            priority=layout.PRIO_AGGREGATION,
            match={
                "eth_type": 0x0800,
                "ip_proto": 17,
                "ipv4_dst": job.job_ip,
                "udp_dst": ofext.AGG_UDP_PORT,
            },
            action_specs=[(ofmsg.ACTION_OUTPUT, ofext.AGG_PORT)],
        )
        # The engine first: a frame the flow steers must find its job.
        return [(node.dpid, ofmsg.agg_job_set(config)), (node.dpid, steer)]

    def _uninstall_node(self, job: Job, dpid: int) -> Msgs:
        if dpid not in self._entered_s:
            return []
        return [
            (
                dpid,
                ofmsg.flow_delete_by_cookie(
                    cookie=layout.AGGREGATION_COOKIE | job.job_id,
                    cookie_mask=0xFFFF_FFFF_FFFF_FFFF,
                    table_id=layout.ROUTING_TABLE,
                ),
            ),
            (dpid, ofmsg.agg_job_delete(job_id=job.job_id)),
        ]

    def _allocate_id(self) -> int:
        for _ in range(JOB_ID_MAX):
            job_id = self._next_id
            self._next_id = self._next_id % JOB_ID_MAX + 1
            if job_id not in self.jobs:
                return job_id
        raise JobRefused(f"refused: all {JOB_ID_MAX} job ids in use")

    def _event(self, now: float, kind: str, **fields: Any) -> None:
        self.events.append(dict(fields, kind=kind, time=now))


# ---------------------------------------------------------------------------- os-ken shim


def _refused_job(data: bytes) -> Optional[int]:
    """The job id in the request an experimenter error quotes (EXP_AGG_JOB_SET), if any."""
    # ofp_header(8) + experimenter(4) + exp_type(4) + job_id(2)
    if (
        len(data) >= 18
        and int.from_bytes(data[8:12], "big") == ofext.EMU_EXPERIMENTER_ID
        and int.from_bytes(data[12:16], "big") == ofext.EXP_AGG_JOB_SET
    ):
        return int.from_bytes(data[16:18], "big")
    return None


class AggregationApp(app_manager.OSKenApp):
    """os-ken shim around ``AggregationManager``: job socket, routing's events, barriers."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        opts = app_options()
        self._mgr = AggregationManager(opts.agg_slots_per_switch)
        self._socket_path = opts.agg_socket or os.path.join(
            os.path.dirname(os.path.abspath(opts.status_file or "./x")), "aggregation.sock"
        )
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._dps: Dict[int, Any] = {}  # this app's own record of the connected switches
        self._pending: Dict[Tuple[int, int], Optional[str]] = {}  # barrier -> error seen
        # The newest routing version this app worked on (from an event or a request):
        # an event queued before a registration asked for a newer view is stale.
        self._seen_version = -1
        self._running = True

    def start(self) -> Any:
        thread = super().start()
        self.threads.append(hub.spawn(self._serve))
        return thread

    def stop(self) -> None:
        self._running = False
        super().stop()

    # -- plumbing

    def _topology(self) -> Topology:
        try:
            view = get_view(self)
        except RoutingUnavailable as exc:
            raise JobError("no routing app runs beside controllers.aggregation") from exc
        with self._lock:
            self._seen_version = max(self._seen_version, view.version)
        return Topology.from_view(view)

    def _send(self, msgs: Msgs) -> None:
        for dpid, msg in msgs:
            dp = self._dps.get(dpid)
            if dp is not None:
                dp.send_msg(ofmsg.bound(msg, dp))

    # -- the job socket

    def _serve(self) -> None:
        server = MgmtServer(
            self._socket_path,
            {
                "register": self._register,
                "unregister": self._unregister,
                "jobs": self._jobs,
            },
        )
        LOG.info("aggregation jobs register on %s", self._socket_path)
        server.serve(lambda: self._running)
        server.close()

    def _register(self, hosts: List[str], nslots: int = DEFAULT_NSLOTS) -> Dict[str, Any]:
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise JobError(f"hosts must be a list of IPv4 addresses, got {hosts!r}")
        topo = self._topology()
        with self._lock:
            job, msgs = self._mgr.register(topo, hosts, time.time(), int(nslots))
            done = self._send_confirmed(msgs, job.tree, lambda: job.state == "active")
            if job.state != "active":
                self._send(self._mgr.unregister(job.job_id, time.time()))
                raise JobRefused(f"refused: {job.reason}")
            if any(d is None for d in done):
                self._send(self._mgr.unregister(job.job_id, time.time()))
                raise JobError(
                    f"the switches did not confirm job {job.job_id} within {REGISTER_TIMEOUT_S} s"
                )
            return job.describe()

    def _send_confirmed(self, msgs: Msgs, dpids: Any, still_ok: Any) -> List[Optional[str]]:
        """Send `msgs` and a barrier to each of `dpids`; wait (lock held) for the replies.

        The switches answer in order: once every barrier is back, everything
        before it is applied, or an error came first (`still_ok` turns False).
        Returns, per switch, "ok" or None when it did not answer in time.
        """
        waits = []
        for dpid in dpids:
            if not self._mgr.connected(dpid):
                continue
            xid, barrier = self._mgr.barrier(dpid)
            msgs.append((dpid, barrier))
            waits.append((dpid, xid))
            self._pending[(dpid, xid)] = None
        self._send(msgs)
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while any(self._pending.get(w) is None for w in waits) and still_ok():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        return [self._pending.pop(w, None) for w in waits]

    def _unregister(self, job_id: int) -> Dict[str, Any]:
        """Remove a job; returns once every switch of its tree confirmed (slots free)."""
        with self._lock:
            job = self._mgr.jobs.get(int(job_id))
            tree = list(job.tree) if job else []
            self._send_confirmed(self._mgr.unregister(int(job_id), time.time()), tree, lambda: True)
        return {"job_id": job_id}

    def _jobs(self) -> Dict[str, Any]:
        with self._lock:
            return {
                "jobs": [j.describe() for j in self._mgr.jobs.values()],
                "free_slots": {f"{d:016x}": n for d, n in self._mgr.free_slots().items()},
                "events": list(self._mgr.events),
            }

    # -- handlers

    @set_ev_cls(EventRoutingChanged)
    def routing_changed_handler(self, ev: EventRoutingChanged) -> None:
        """Routing's topology or host table changed: check every tree on its new view."""
        with self._lock:
            if ev.view.version < self._seen_version:
                return
            self._seen_version = ev.view.version
            self._send(self._mgr.topology_changed(Topology.from_view(ev.view), time.time()))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change_handler(self, ev: Any) -> None:
        dp = ev.datapath
        with self._lock:
            if ev.state == MAIN_DISPATCHER:
                self._dps[dp.id] = dp
                self._send(self._mgr.switch_enter(dp.id, time.time()))
            elif ev.state == DEAD_DISPATCHER and dp.id is not None and self._dps.get(dp.id) is dp:
                del self._dps[dp.id]
                self._send(self._mgr.switch_leave(dp.id, time.time()))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply_handler(self, ev: Any) -> None:
        key = (ev.msg.datapath.id, ev.msg.xid)
        with self._lock:
            if key in self._pending:
                self._pending[key] = self._pending[key] or "ok"
                self._cond.notify_all()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error_handler(self, ev: Any) -> None:
        msg = ev.msg
        job_id = _refused_job(bytes(msg.data))
        if job_id is None:
            return
        if msg.type == ofext.OFPET_EXPERIMENTER:
            reason = f"switch {msg.datapath.id:016x} has no free slots"
        else:
            reason = (
                f"switch {msg.datapath.id:016x} refused the job (type {msg.type}, code {msg.code})"
            )
        LOG.warning("job %d: %s", job_id, reason)
        with self._lock:
            self._send(self._mgr.fail(job_id, reason, time.time()))
            self._cond.notify_all()

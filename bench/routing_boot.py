"""Routing convergence at scale: the routing controller's CPU while a fat-tree boots.

Owns one measurement: the pure routing controller (controllers/routing.py's
``RoutingManager``) and the work its os-ken shim (``RoutingApp``) does around
it, driven in-process through the boot of fat_tree(k) on a virtual clock. The
wiring is the same in-process fabric the unit tests drive (tests/unit/fakes.py:
``fat_tree``'s graph, ``SimFabric``'s ports and peers). Nothing is booted: no
switch process, namespace or socket, so no root is needed, and every k is
measured in one go on one machine.

The boot, in virtual seconds, as emu's Fabric and RoutingApp make it:

  * switches connect --enter-gap-s apart (default 50 ms): ``switch_enter``,
    then the PortDesc reply to the request it sends;
  * RoutingApp's tick runs every ``TICK_S`` (50 ms): LLDP out of every port
    (every 0.1 s for 2 s after a switch connects, then every 1 s);
  * every message reaches its switch at once: a barrier is answered at once,
    an LLDP packet-out comes back at once as a packet-in from the peer switch;
    frames to hosts are dropped (hosts ignore LLDP, and a gratuitous-ARP
    boot floods no ARP request they would answer);
  * emu polls the status file every 0.2 s (emu/net.py ``wait_converged``):
    once it lists every switch and both directions of every cable, every host
    it does not list sends one gratuitous ARP (``arping -U``), 1 ms apart, and
    again after 2 s if still unknown;
  * converged means the status file says so (what emu waits on); then ticks run
    until the last switch's LLDP burst is over, and --idle-s seconds of ticks
    measure what the converged controller costs idle.

CPU (``time.process_time`` of this process) is split three ways:

  mgr   inside RoutingManager's methods (routes, per-switch diffs, building the
        os-ken messages);
  shim  what RoutingApp does around them: ``status()`` + ``json.dumps`` and,
        when the text changed, ``write_status`` (to a temporary directory);
        ``view()`` when the topology version moved (``_publish``);
  ser   os-ken's ``serialize`` of every message sent (``Datapath.send_msg``).

``--status per-tick`` (the default) is RoutingApp as it is: ``_tick_loop``
writes the status after every tick and ``_apply`` never does.
``--status per-call`` is the shim before commit 6bf14ec, for comparison: the
status written after every handler call (every barrier reply, every LLDP
packet-in). The manager is today's in both. Not counted: os-ken's parsing of
what switches send, its event dispatch and eventlet. ``--switch`` also feeds
every message's bytes to one emu ``OpenFlowSession`` per switch
(emu/switch/openflow.py) and reports the switches' CPU on its own; a switch
that answers with an OpenFlow error stops the bench.

Per k: switches/cables/hosts, handler calls (every manager entry, ticks
included), topology versions, barriers sent, flow and group mods, messages per
switch (mean/max), CPU to converge (mgr/shim/ser/total, seconds) and the idle
CPU in seconds per second; all of it counted up to convergence except the
last. ``--json PATH`` keeps every count (calls per handler, messages per kind,
status dumps and writes, the virtual time to converge).

    .venv/bin/python bench/routing_boot.py [--k 4 6 8] [--status per-tick|per-call]
        [--profile PATH] [--markdown] [--switch] [--idle-s 5] [--enter-gap-s 0.05]
        [--json PATH]

A boot of fat_tree(2) runs first and is not reported: the first boot in a
process pays for lazy imports and caches. ``--profile PATH`` runs each boot
under cProfile and leaves its stats in PATH (with ``-k8`` and so on before its
suffix when several k are given; read with ``python -m pstats PATH``); the
profiler inflates the CPU figures, so a profiled run's are not quoted.

Results: docs/performance.md, "Routing convergence at scale".
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import heapq
import json
import struct
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from os_ken.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from os_ken.ofproto import ofproto_v1_3_parser as parser  # noqa: E402

from controllers import ofmsg  # noqa: E402
from controllers.routing import (  # noqa: E402
    RoutingApp,
    RoutingConfig,
    RoutingManager,
    write_status,
)
from tests.unit.fakes import SimFabric, fat_tree  # noqa: E402

STATUS_MODES = ("per-tick", "per-call")
TICK_S = RoutingApp.TICK_S
POLL_S = 0.2  # emu/net.py wait_converged: wait_for(..., interval_s=0.2)
REANNOUNCE_S = 2.0  # wait_converged: a host still unknown announces again after 2 s
ANNOUNCE_GAP_S = 0.001  # one arping per host, started one after the other
START_S = 1000.0  # the virtual clock's origin (SimFabric's)
TIMEOUT_S = 600.0  # virtual seconds without convergence: the bench fails

FLOW_KINDS = {
    ofp.OFPFC_ADD: "flow_add",
    ofp.OFPFC_MODIFY: "flow_modify",
    ofp.OFPFC_MODIFY_STRICT: "flow_modify_strict",
    ofp.OFPFC_DELETE: "flow_delete",
    ofp.OFPFC_DELETE_STRICT: "flow_delete_strict",
}
GROUP_KINDS = {
    ofp.OFPGC_ADD: "group_add",
    ofp.OFPGC_MODIFY: "group_modify",
    ofp.OFPGC_DELETE: "group_delete",
}
OFPT_ERROR = ofp.OFPT_ERROR

pt = time.process_time


class BenchError(RuntimeError):
    """The simulated boot went wrong: no convergence, or a switch rejected a message."""


@dataclass
class BootResult:
    """What one boot of fat_tree(k) cost the controller; counts are up to convergence."""

    k: int
    status_mode: str
    switches: int
    cables: int
    hosts: int
    seen_switches: int = 0  # what the manager knew at convergence
    seen_cables: int = 0
    seen_hosts: int = 0
    converged_s: float = 0.0  # virtual seconds from the first switch to "converged" in the status
    ticks: int = 0
    versions: int = 0
    barriers: int = 0
    calls: Dict[str, int] = field(default_factory=dict)  # per manager entry point
    msgs: Dict[str, int] = field(default_factory=dict)  # per kind (flow_add, barrier, ...)
    msgs_per_switch: List[int] = field(default_factory=list)
    status_dumps: int = 0  # status() + json.dumps
    status_writes: int = 0  # the file written (its text changed)
    # mgr, shim, ser (, switch), and bench: the rest of this process's CPU (event queue, counting)
    cpu_s: Dict[str, float] = field(default_factory=dict)
    idle_cpu_s_per_s: Dict[str, float] = field(default_factory=dict)

    @property
    def calls_total(self) -> int:
        return sum(self.calls.values())

    @property
    def flow_group_mods(self) -> int:
        return sum(n for kind, n in self.msgs.items() if kind.startswith(("flow_", "group_")))

    @property
    def controller_cpu_s(self) -> float:
        return sum(self.cpu_s.get(part, 0.0) for part in ("mgr", "shim", "ser"))

    @property
    def controller_idle_cpu_s_per_s(self) -> float:
        return sum(self.idle_cpu_s_per_s.get(part, 0.0) for part in ("mgr", "shim", "ser"))


class Shim:
    """RoutingApp's work around the manager besides sending: the status file and the view.

    Mirrors ``RoutingApp._apply``, ``_write_status``, ``_publish`` and
    ``_tick_loop`` (controllers/routing.py); ``status`` is what emu reads.
    """

    def __init__(self, mgr: RoutingManager, mode: str, status_path: str) -> None:
        if mode not in STATUS_MODES:
            raise ValueError(f"status mode {mode!r}: expected one of {', '.join(STATUS_MODES)}")
        self.mgr = mgr
        self.mode = mode
        self.status_path = status_path
        self.status: Dict[str, Any] = {}  # as last written
        self.dumps = 0
        self.writes = 0
        self._last_text: Optional[str] = None
        self._published_version: Optional[int] = None

    def applied(self, now: float) -> None:
        """``_apply`` after it sent the messages: the status (per call only), publish."""
        if self.mode == "per-call":
            self.write_status()
        self.publish(now)

    def ticked(self) -> None:
        """``_tick_loop`` after the tick's ``_apply``: the status."""
        if self.mode == "per-tick":
            self.write_status()

    def write_status(self) -> None:
        status = self.mgr.status()
        text = json.dumps(status, sort_keys=True)
        self.dumps += 1
        if text == self._last_text:
            return
        self._last_text = text
        write_status(self.status_path, status)
        self.status = status
        self.writes += 1

    def publish(self, now: float) -> None:
        version = self.mgr.topology_version
        if version == self._published_version:
            return
        self._published_version = version
        self.mgr.view(now)  # EventRoutingChanged carries it; routing alone has no observer


class Boot:
    """One simulated boot of fat_tree(k): the manager, the shim, the wiring, the clock.

    Args:
        k: the fat-tree's arity (even, >= 2).
        status_mode: "per-tick" (RoutingApp now) or "per-call" (before 6bf14ec).
        enter_gap_s: virtual seconds between two switches connecting.
        idle_s: virtual seconds of ticks over which the idle CPU is measured.
        switch_model: also feed every message to an emu OpenFlowSession per switch.

    Raises:
        ValueError: on a bad k, mode, gap or idle window (the message names it).

    Examples:
        >>> result = Boot(4, idle_s=0.5).run()
        >>> (result.seen_switches, result.seen_cables, result.seen_hosts)
        (20, 32, 16)
    """

    def __init__(
        self,
        k: int,
        status_mode: str = "per-tick",
        enter_gap_s: float = 0.05,
        idle_s: float = 5.0,
        switch_model: bool = False,
    ) -> None:
        if k < 2 or k % 2:
            raise ValueError(f"k={k!r}: a fat-tree needs an even k >= 2")
        if status_mode not in STATUS_MODES:
            raise ValueError(
                f"status mode {status_mode!r}: expected one of {', '.join(STATUS_MODES)}"
            )
        if enter_gap_s < 0:
            raise ValueError(f"enter_gap_s={enter_gap_s!r}: must be >= 0")
        if idle_s < TICK_S:
            raise ValueError(f"idle_s={idle_s!r}: must be >= one tick ({TICK_S} s)")
        graph = fat_tree(k)
        kinds = {n: d["kind"] for n, d in graph.nodes(data=True)}
        self.result = BootResult(
            k=k,
            status_mode=status_mode,
            switches=sum(1 for kind in kinds.values() if kind == "switch"),
            cables=sum(1 for a, b in graph.edges() if kinds[a] == kinds[b] == "switch"),
            hosts=sum(1 for kind in kinds.values() if kind == "host"),
        )
        r = self.result
        self.mgr = RoutingManager(
            RoutingConfig(expect_switches=r.switches, expect_links=r.cables, expect_hosts=r.hosts)
        )
        self.fab = SimFabric(graph, self.mgr)  # for its wiring only: ports, peers, host ports
        self.ports = {dpid: self.fab.ports_of(dpid) for dpid in self.fab.dpids}
        self.hosts = sorted((n for n, kind in kinds.items() if kind == "host"), key=_host_number)
        self.status_mode = status_mode
        self.enter_gap_s = enter_gap_s
        self.idle_s = idle_s
        self.now = START_S
        self.cpu: Dict[str, float] = collections.defaultdict(float)
        self.calls: Dict[str, int] = collections.Counter()
        self.msgs: Dict[str, int] = collections.Counter()
        self.per_switch: Dict[int, int] = collections.Counter({d: 0 for d in self.fab.dpids})
        self.ticks = 0
        self.xids: Dict[int, int] = (
            collections.Counter()
        )  # per switch, as os-ken's Datapath.set_xid
        self.inbox: collections.deque = collections.deque()  # (handler, args): what switches send
        self.sessions: Optional[Dict[int, Any]] = None
        if switch_model:
            from emu.switch.openflow import reply_bytes

            self.sessions = _switch_sessions(self.fab)
            self._reply_bytes = reply_bytes
        self.shim: Optional[Shim] = None

    # -- one handler call, as RoutingApp makes it

    def handle(self, name: str, *args: Any) -> None:
        """Call the manager's ``name``, send what it returns, then the shim's part."""
        t0 = pt()
        out = getattr(self.mgr, name)(*args)
        self.cpu["mgr"] += pt() - t0
        self.calls[name] += 1
        self._send(out)
        t0 = pt()
        self.shim.applied(self.now)
        self.cpu["shim"] += pt() - t0

    def drain(self) -> None:
        """Handle what the switches sent back, in order, and what that makes them send."""
        while self.inbox:
            name, args = self.inbox.popleft()
            self.handle(name, *args)

    def _send(self, msgs: List[Tuple[int, Any]]) -> None:
        for dpid, msg in msgs:
            t0 = pt()
            if msg.xid is None:
                self.xids[dpid] = (self.xids[dpid] + 1) & ofp.MAX_XID
                msg.set_xid(self.xids[dpid])
            msg.serialize()
            self.cpu["ser"] += pt() - t0
            self.msgs[_kind(msg)] += 1
            self.per_switch[dpid] += 1
            if self.sessions is not None:
                self._feed_switch(dpid, msg)
            if isinstance(msg, parser.OFPBarrierRequest):
                self.inbox.append(("barrier_reply", (dpid, msg.xid, self.now)))
            elif isinstance(msg, parser.OFPPortDescStatsRequest):
                self.inbox.append(("port_desc", (dpid, self.ports[dpid], self.now)))
            elif isinstance(msg, parser.OFPPacketOut):
                for action in msg.actions:
                    if not isinstance(action, parser.OFPActionOutput):
                        continue  # set_queue (LLDP's control queue): not a port
                    peer = self.fab.peer.get((dpid, action.port))
                    if peer is not None:
                        self.inbox.append(("packet_in", (peer[0], peer[1], msg.data, self.now)))

    def _feed_switch(self, dpid: int, msg: Any) -> None:
        t0 = pt()
        effects = self.sessions[dpid].feed(bytes(msg.buf), self.now)
        self.cpu["switch"] += pt() - t0
        for data in self._reply_bytes(effects):
            if data[1] == OFPT_ERROR:
                raise BenchError(f"switch {dpid} answered {msg} with an error: {data.hex()}")

    # -- the boot's events

    def _enter(self, dpid: int) -> None:
        self.handle("switch_enter", dpid, self.ports[dpid], self.now)
        self.drain()

    def _tick(self) -> None:
        self.ticks += 1
        self.handle("tick", self.now)
        t0 = pt()
        self.shim.ticked()
        self.cpu["shim"] += pt() - t0
        self.drain()

    def _poll(self, announced_at: Dict[str, float], push: Callable[..., None]) -> None:
        """emu's wait_converged: once every switch and link is listed, unknown hosts announce."""
        st = self.shim.status
        r = self.result
        if len(st.get("links", [])) < 2 * r.cables or len(st.get("switches", [])) < r.switches:
            return
        known = {h["ip"] for h in st.get("hosts", [])}
        due = [
            h
            for h in self.hosts
            if self.fab.graph.nodes[h]["ip"] not in known
            and self.now - announced_at.get(h, -REANNOUNCE_S - 1) > REANNOUNCE_S
        ]
        for i, host in enumerate(due):
            announced_at[host] = self.now
            push(self.now + i * ANNOUNCE_GAP_S, "announce", host)

    def _announce(self, host: str) -> None:
        """The host's ``arping -U``: a gratuitous ARP request, punted by its switch."""
        node = self.fab.graph.nodes[host]
        frame = ofmsg.arp_frame(
            op=ofmsg.ARP_REQUEST,
            src_mac=node["mac"],
            src_ip=node["ip"],
            dst_mac="00:00:00:00:00:00",
            dst_ip=node["ip"],
        )
        dpid, port = self.fab.host_loc[host]
        self.handle("packet_in", dpid, port, frame, self.now)
        self.drain()

    def run(self) -> BootResult:
        """Boot, converge, settle, idle; returns the result (also kept as ``self.result``).

        Raises:
            BenchError: no convergence within TIMEOUT_S virtual seconds, or (with
                the switch model) a switch rejected a message.
        """
        with tempfile.TemporaryDirectory(prefix="emu-routing-boot-") as tmp:
            self.shim = Shim(self.mgr, self.status_mode, str(Path(tmp) / "routing-status.json"))
            self._run()
        return self.result

    def _run(self) -> None:
        events: List[Tuple[float, int, str, Any]] = []
        seq = iter(range(1 << 62))

        def push(t: float, kind: str, arg: Any = None) -> None:
            heapq.heappush(events, (t, next(seq), kind, arg))

        for i, dpid in enumerate(self.fab.dpids):
            push(START_S + i * self.enter_gap_s, "enter", dpid)
        last_enter_s = START_S + (len(self.fab.dpids) - 1) * self.enter_gap_s
        push(START_S, "tick")
        push(START_S, "poll")
        announced_at: Dict[str, float] = {}

        def step(polling: bool) -> None:
            self.now, _, kind, arg = heapq.heappop(events)
            if kind == "enter":
                self._enter(arg)
            elif kind == "tick":
                self._tick()
                push(self.now + TICK_S, "tick")
            elif kind == "announce":
                self._announce(arg)
            elif kind == "poll" and polling:
                self._poll(announced_at, push)
                push(self.now + POLL_S, "poll")

        cpu0 = pt()
        while not self.shim.status.get("converged"):
            if self.now - START_S > TIMEOUT_S:
                st = self.shim.status
                raise BenchError(
                    f"fat_tree(k={self.result.k}) did not converge in {TIMEOUT_S:.0f} virtual s: "
                    f"status lists {len(st.get('switches', []))} switches, "
                    f"{len(st.get('links', []))} directed links, {len(st.get('hosts', []))} hosts"
                )
            step(polling=True)
        self._record_convergence(pt() - cpu0)
        # Let the last switch's LLDP burst run out, then measure the idle controller.
        while self.now < last_enter_s + self.mgr.config.lldp_burst_duration_s + TICK_S:
            step(polling=False)
        before, start_s = dict(self.cpu), self.now
        while self.now < start_s + self.idle_s:
            step(polling=False)
        span_s = self.now - start_s
        self.result.idle_cpu_s_per_s = {
            part: (self.cpu[part] - before.get(part, 0.0)) / span_s for part in self.cpu
        }

    def _record_convergence(self, wall_cpu_s: float) -> None:
        r, mgr = self.result, self.mgr
        r.seen_switches = len(mgr.switches)
        r.seen_cables = mgr.cable_count()
        r.seen_hosts = len(mgr.hosts)
        r.converged_s = round(self.now - START_S, 3)
        r.ticks = self.ticks
        r.versions = mgr.topology_version
        r.barriers = self.msgs["barrier"]
        r.calls = dict(self.calls)
        r.msgs = dict(self.msgs)
        r.msgs_per_switch = [self.per_switch[d] for d in self.fab.dpids]
        r.status_dumps = self.shim.dumps
        r.status_writes = self.shim.writes
        r.cpu_s = dict(self.cpu)
        r.cpu_s["bench"] = max(0.0, wall_cpu_s - sum(self.cpu.values()))


def _host_number(name: str) -> int:
    return int(name[1:])


def _kind(msg: Any) -> str:
    if isinstance(msg, parser.OFPFlowMod):
        return FLOW_KINDS.get(msg.command, f"flow_command_{msg.command}")
    if isinstance(msg, parser.OFPGroupMod):
        return GROUP_KINDS.get(msg.command, f"group_command_{msg.command}")
    if isinstance(msg, parser.OFPBarrierRequest):
        return "barrier"
    if isinstance(msg, parser.OFPPacketOut):
        return "packet_out"
    if isinstance(msg, parser.OFPPortDescStatsRequest):
        return "port_desc_request"
    return type(msg).__name__


def _switch_sessions(fab: SimFabric) -> Dict[int, Any]:
    """One emu OpenFlow session per switch, past the hello (as fakes.PipelineFabric makes them)."""
    from emu.switch.openflow import OpenFlowSession, SwitchModel
    from emu.switch.pipeline import Pipeline
    from emu.switch.ports import PortState

    sessions = {}
    for name, dpid in fab.dpid.items():
        ports = {
            pn: PortState(pn, f"{name}-eth{pn}", bytes(6), 10**9)
            for (node, _nb), pn in fab.port.items()
            if node == name
        }
        session = OpenFlowSession(SwitchModel(dpid, Pipeline(seed=dpid, ports=ports)))
        session.feed(struct.pack("!BBHI", ofp.OFP_VERSION, ofp.OFPT_HELLO, 8, 1), 0.0)
        sessions[dpid] = session
    return sessions


# -- output -------------------------------------------------------------------------


def _cells(r: BootResult, switch_model: bool) -> List[str]:
    per_sw = r.msgs_per_switch
    cpu = r.cpu_s
    cells = [
        str(r.k),
        f"{r.switches}/{r.cables}/{r.hosts}",
        str(r.calls_total),
        str(r.versions),
        str(r.barriers),
        str(r.flow_group_mods),
        f"{sum(per_sw) / len(per_sw):.0f}/{max(per_sw)}",
        f"{cpu['mgr']:.3f}/{cpu['shim']:.3f}/{cpu['ser']:.3f}/{r.controller_cpu_s:.3f}",
        f"{r.controller_idle_cpu_s_per_s:.4f}",
    ]
    if switch_model:
        cells += [f"{cpu.get('switch', 0.0):.3f}", f"{r.idle_cpu_s_per_s.get('switch', 0.0):.4f}"]
    return cells


HEAD = [
    "k",
    "switches/cables/hosts",
    "handler calls",
    "topology versions",
    "barriers",
    "flow+group mods",
    "msgs per switch mean/max",
    "CPU to converge s mgr/shim/ser/total",
    "idle CPU s/s",
]
SWITCH_HEAD = ["switches' CPU to converge s", "switches' idle CPU s/s"]


def table(results: List[BootResult], markdown: bool, switch_model: bool = False) -> str:
    """The results as a plain, aligned table or a Markdown one."""
    head = HEAD + (SWITCH_HEAD if switch_model else [])
    body = [_cells(r, switch_model) for r in results]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [head] + body
    )


# -- main ---------------------------------------------------------------------------


def _arity(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k={text!r}: expected an even integer >= 2") from None
    if k < 2 or k % 2:
        raise argparse.ArgumentTypeError(f"k={k}: a fat-tree needs an even k >= 2")
    return k


def _seconds_at_least(minimum_s: float) -> Callable[[str], float]:
    """An argparse type: seconds, at least ``minimum_s``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected seconds") from None
        if not value >= minimum_s:
            raise argparse.ArgumentTypeError(f"{text!r}: must be >= {minimum_s:g} s")
        return value

    return parse


def _profile_path(base: str, k: int, several: bool) -> Path:
    path = Path(base)
    return path.with_name(f"{path.stem}-k{k}{path.suffix or '.prof'}") if several else path


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=_arity, nargs="+", default=[4, 6, 8], metavar="K")
    ap.add_argument("--status", choices=STATUS_MODES, default="per-tick")
    ap.add_argument("--enter-gap-s", type=_seconds_at_least(0.0), default=0.05)
    ap.add_argument("--idle-s", type=_seconds_at_least(TICK_S), default=5.0)
    ap.add_argument("--switch", action="store_true", help="also feed emu switch models")
    ap.add_argument("--profile", metavar="PATH", help="cProfile each boot, stats to PATH")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    # Warm-up, not reported: the first boot in a process pays for lazy imports and caches.
    Boot(2, args.status, idle_s=TICK_S, switch_model=args.switch).run()
    results = []
    for k in args.k:
        print(f"# fat_tree(k={k}), status {args.status} ...", file=sys.stderr, flush=True)
        boot = Boot(k, args.status, args.enter_gap_s, args.idle_s, args.switch)
        if args.profile:
            path = _profile_path(args.profile, k, len(args.k) > 1)
            prof = cProfile.Profile()
            prof.runcall(boot.run)
            prof.dump_stats(str(path))
            print(f"#   profile: {path} (python -m pstats {path})", file=sys.stderr)
        else:
            boot.run()
        r = boot.result
        print(f"#   converged after {r.converged_s:.2f} virtual s", file=sys.stderr, flush=True)
        results.append(r)
    print(
        f"status written {args.status}; switches {args.enter_gap_s:g} s apart; "
        f"idle over {args.idle_s:g} s; CPU of this process (time.process_time)"
    )
    print(table(results, markdown=False, switch_model=args.switch))
    if args.markdown:
        print()
        print(table(results, markdown=True, switch_model=args.switch))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The OpenFlow 1.3 pipeline of one emu switch: flow tables, groups, actions.

Owns flow entries and groups, their counters and timeouts, and the per-packet
decision: `process(in_port, frame, now) -> (outputs, packet_ins)`. Pure logic:
no sockets, threads or clocks; time comes in as `now` (float seconds).

Flow and group mods come in as os-ken objects (`OFPFlowMod`, `OFPGroupMod`,
or anything with the same attributes), so the agent (`openflow.py`) and the
controllers' unit tests drive the same code. Errors are raised as `OFError`
carrying the spec's OFPET_*/code; the agent turns them into OFPT_ERROR.

Speed: every packet is looked up by its extracted header tuple in a
microflow cache that maps to a compiled "program" (frame rewrites and
outputs) plus the counters to bump. The slow path interprets the tables once
per new key. The cache is dropped whenever flows, groups or port liveness
change; SELECT buckets are a pure function of the key, so caching the choice
is exact while liveness is unchanged.

An output to `ofext.AGG_PORT` (a logical port below OFPP_MAX) is an ordinary
output whose port number is AGG_PORT: the datapath hands it to the reduction
engine (`aggregation.py`) rather than to a queue.

Does not own ports (the datapath does; the `ports` dict is shared), queues
or pacing.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofpp

from emu.proto.ofext import AGG_PORT
from emu.switch import parse, rewrite
from emu.switch.adaptive import (
    AdaptiveRouter,
    EgressView,
    SelectModes,
    packet_prio,
    ugal_minimal,
)
from emu.switch.flowlet import FlowletTable
from emu.switch.l2 import MacTable
from emu.switch.match import (  # noqa: F401 - OFError/convert_match are re-exported
    _FIELD_BITS,
    OFError,
    _compile_match,
    _covers,
    _overlap,
    _to_int,
    convert_match,
)
from emu.switch.meter import Meter, MeterTable, remark_dscp
from emu.switch.parse import cache_key, extract_key
from emu.switch.ports import OFPPC_NO_FWD, OFPPC_NO_RECV, PortState
from emu.switch.scheduler import dscp_table

LOG = logging.getLogger(__name__)

OFP_NO_BUFFER = ofp.OFP_NO_BUFFER
_CACHE_MAX = 65536


class Counter:
    """Packet/byte counter with last-use time (idle timeouts read `used`)."""

    __slots__ = ("packets", "bytes", "used")

    def __init__(self, now: float = 0.0) -> None:
        self.packets = 0
        self.bytes = 0
        self.used = now


@dataclass
class PacketIn:
    """A packet for the controller, as the agent needs it to build OFPT_PACKET_IN."""

    reason: int
    table_id: int
    cookie: int
    in_port: int
    frame: bytes
    max_len: int
    metadata: int = 0
    buffer_id: int = OFP_NO_BUFFER


# Compiled action opcodes (A_TUNNEL: set_field tunnel_id, pipeline state).
A_OUT, A_GROUP, A_XF, A_DECTTL, A_QUEUE, A_TUNNEL = range(6)
_RESERVED_OUT = {
    ofp.OFPP_NORMAL,
    ofp.OFPP_IN_PORT,
    ofp.OFPP_TABLE,
    ofp.OFPP_FLOOD,
    ofp.OFPP_ALL,
    ofp.OFPP_CONTROLLER,
}
# OF1.3 4.5: LOCAL is optional and an emu switch has no local port, so an
# output to it is answered with OFPBAC_BAD_OUT_PORT. NORMAL is l2.py's.


# Action class -> (rewrite(frame, arg), category in the action set). The
# argument is the action's ethertype, or None.
_ENCAP = {
    ofpp.OFPActionPushVlan: (rewrite.push_vlan, "push_vlan", parse.VLAN_TYPES),
    ofpp.OFPActionPushMpls: (rewrite.push_mpls, "push_mpls", parse.MPLS_TYPES),
    ofpp.OFPActionPushPbb: (rewrite.push_pbb, "push_pbb", (parse.ETH_TYPE_PBB,)),
    ofpp.OFPActionPopMpls: (rewrite.pop_mpls, "pop_mpls", None),
}
_NO_ARG = {
    ofpp.OFPActionPopVlan: (rewrite.pop_vlan, "pop_vlan"),
    ofpp.OFPActionPopPbb: (rewrite.pop_pbb, "pop_pbb"),
    ofpp.OFPActionCopyTtlOut: (rewrite.copy_ttl_out, "copy_ttl_out"),
    ofpp.OFPActionCopyTtlIn: (rewrite.copy_ttl_in, "copy_ttl_in"),
}
_DEC_TTL = {
    ofpp.OFPActionDecNwTtl: (rewrite.dec_nw_ttl, "dec_nw_ttl"),
    ofpp.OFPActionDecMplsTtl: (rewrite.dec_mpls_ttl, "dec_mpls_ttl"),
}


# Every OF1.3 action type this pipeline carries out (group features, table features).
SUPPORTED_ACTIONS = (
    ofp.OFPAT_OUTPUT,
    ofp.OFPAT_COPY_TTL_OUT,
    ofp.OFPAT_COPY_TTL_IN,
    ofp.OFPAT_SET_MPLS_TTL,
    ofp.OFPAT_DEC_MPLS_TTL,
    ofp.OFPAT_PUSH_VLAN,
    ofp.OFPAT_POP_VLAN,
    ofp.OFPAT_PUSH_MPLS,
    ofp.OFPAT_POP_MPLS,
    ofp.OFPAT_SET_QUEUE,
    ofp.OFPAT_GROUP,
    ofp.OFPAT_SET_NW_TTL,
    ofp.OFPAT_DEC_NW_TTL,
    ofp.OFPAT_SET_FIELD,
    ofp.OFPAT_PUSH_PBB,
    ofp.OFPAT_POP_PBB,
)


class Actions:
    """A compiled action list plus what delete filters need (ports, groups)."""

    __slots__ = ("ops", "ports", "groups")

    def __init__(self, ops: list, ports: set, groups: set) -> None:
        self.ops = ops
        self.ports = ports
        self.groups = groups


def _set_field_op(key: str, value: Any) -> tuple:
    """The compiled op of one set_field (OFPBAC_BAD_SET_TYPE / _ARGUMENT when it cannot be)."""
    if key == "tunnel_id":
        try:
            return (A_TUNNEL, _to_int(key, value) & 0xFFFFFFFFFFFFFFFF, "set:tunnel_id")
        except (ValueError, TypeError) as e:
            raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_SET_ARGUMENT, key) from e
    setter = rewrite.SET_FIELD.get(key)
    if setter is None:
        raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_SET_TYPE, str(key))
    fn, convert = setter
    try:
        v = _to_int(key, value)
        if key == "vlan_vid":
            v &= ~parse.OFPVID_PRESENT  # the value carries OFPVID_PRESENT (OF1.3 7.2.3.7)
        if v < 0 or v >> _FIELD_BITS[key]:
            raise ValueError(f"{key}={value!r} does not fit")
        arg = convert(v)
    except (ValueError, TypeError, OverflowError) as e:
        raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_SET_ARGUMENT, key) from e
    return (A_XF, fn, arg, "set:" + key)


def compile_actions(actions: list, groups: dict, allow_table: bool = False) -> Actions:
    """Validate os-ken action objects and compile them to opcode tuples.

    Raises:
        OFError: OFPET_BAD_ACTION with the spec code.
    """
    ops: list = []
    ports: set = set()
    gids: set = set()
    for a in actions:
        kind = type(a)
        if kind is ofpp.OFPActionOutput:
            port = a.port
            if (
                port == 0
                or port == ofp.OFPP_ANY
                or (port > ofp.OFPP_MAX and port not in _RESERVED_OUT)
                or (port == ofp.OFPP_TABLE and not allow_table)
            ):
                raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_PORT, str(port))
            ops.append((A_OUT, port, a.max_len))
            ports.add(port)
        elif kind is ofpp.OFPActionGroup:
            if a.group_id not in groups:
                raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_GROUP, str(a.group_id))
            ops.append((A_GROUP, a.group_id))
            gids.add(a.group_id)
        elif kind is ofpp.OFPActionSetField:
            ops.append(_set_field_op(a.key, a.value))
        elif kind in _DEC_TTL:
            fn, category = _DEC_TTL[kind]
            ops.append((A_DECTTL, fn, category))
        elif kind in _ENCAP:
            fn, category, allowed = _ENCAP[kind]
            if allowed is not None and a.ethertype not in allowed:
                raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_ARGUMENT, category)
            ops.append((A_XF, fn, a.ethertype, category))
        elif kind in _NO_ARG:
            fn, category = _NO_ARG[kind]
            ops.append((A_XF, fn, None, category))
        elif kind is ofpp.OFPActionSetNwTtl:
            ops.append((A_XF, rewrite.set_nw_ttl, a.nw_ttl & 0xFF, "set_nw_ttl"))
        elif kind is ofpp.OFPActionSetMplsTtl:
            ops.append((A_XF, rewrite.set_mpls_ttl, a.mpls_ttl & 0xFF, "set_mpls_ttl"))
        elif kind is ofpp.OFPActionSetQueue:
            ops.append((A_QUEUE, a.queue_id))
        else:
            raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_TYPE, type(a).__name__)
    return Actions(ops, ports, gids)


def _set_category(op: tuple) -> str:
    code = op[0]
    if code == A_XF:
        return op[3]
    if code in (A_DECTTL, A_TUNNEL):
        return op[2]
    return {A_OUT: "output", A_GROUP: "group", A_QUEUE: "queue"}[code]


# OF1.3 5.10: the order in which an action set runs, whatever order it was written in.
_ACTION_SET_ORDER = (
    "copy_ttl_in",
    "pop_vlan",
    "pop_mpls",
    "pop_pbb",
    "push_mpls",
    "push_pbb",
    "push_vlan",
    "copy_ttl_out",
    "dec_mpls_ttl",
    "dec_nw_ttl",
    "set_mpls_ttl",
    "set_nw_ttl",
)


def _action_set_order(aset: dict) -> list:
    """The action set's actions in the spec's order (OF1.3 5.10)."""
    ops = [aset[cat] for cat in _ACTION_SET_ORDER if cat in aset]
    ops.extend(v for k, v in aset.items() if k.startswith("set:"))
    if "queue" in aset:
        ops.append(aset["queue"])
    if "group" in aset:
        ops.append(aset["group"])  # OF1.3 5.10: a group action makes output ignored
    elif "output" in aset:
        ops.append(aset["output"])
    return ops


def _watch_is_valid(group_type: int, bucket: Any, known_groups: dict) -> bool:
    """Whether a bucket's watch port and group are ones a group of `group_type` can watch."""
    if (
        group_type == ofp.OFPGT_FF
        and bucket.watch_port == ofp.OFPP_ANY
        and bucket.watch_group == ofp.OFPG_ANY
    ):
        return False  # a fast-failover bucket needs something to watch for liveness
    if bucket.watch_port != ofp.OFPP_ANY and bucket.watch_port > ofp.OFPP_MAX:
        return False
    return bucket.watch_group == ofp.OFPG_ANY or bucket.watch_group in known_groups


class FlowEntry:
    """One flow entry; keeps the os-ken match/instructions for flow stats."""

    def __init__(self, table_id: int, mod: Any, match: dict, now: float) -> None:
        self.table_id = table_id
        self.priority = mod.priority
        self.match = match
        self.cmatch = _compile_match(match)
        self.ofmatch = mod.match
        self.cookie = mod.cookie
        self.idle_timeout = mod.idle_timeout
        self.hard_timeout = mod.hard_timeout
        self.flags = mod.flags
        self.created = now
        self.ctr = Counter(now)
        self.removed_reason: Optional[int] = None
        self.set_instructions(mod.instructions, {})

    def set_instructions(self, instructions: list, compiled: dict) -> None:
        self.ofinstructions = list(instructions)
        self.apply: Optional[Actions] = compiled.get(ofp.OFPIT_APPLY_ACTIONS)
        self.write: Optional[Actions] = compiled.get(ofp.OFPIT_WRITE_ACTIONS)
        self.clear = ofp.OFPIT_CLEAR_ACTIONS in compiled
        self.write_md: Optional[tuple] = compiled.get(ofp.OFPIT_WRITE_METADATA)
        self.goto: Optional[int] = compiled.get(ofp.OFPIT_GOTO_TABLE)
        self.meter_id: Optional[int] = compiled.get(ofp.OFPIT_METER)

    @property
    def is_table_miss(self) -> bool:
        return self.priority == 0 and not self.match

    def outputs_to(self, port: int) -> bool:
        return any(a is not None and port in a.ports for a in (self.apply, self.write))

    def uses_group(self, gid: int) -> bool:
        return any(a is not None and gid in a.groups for a in (self.apply, self.write))


class Group:
    """One group: type, buckets (os-ken OFPBucket kept for group desc), counters."""

    def __init__(self, gid: int, type_: int, buckets: list, compiled: list, now: float) -> None:
        self.group_id = gid
        self.type = type_
        self.buckets = list(buckets)
        self.compiled: list[Actions] = compiled
        self.bucket_ctrs = [Counter(now) for _ in buckets]
        self.ctr = Counter(now)
        self.created = now

    @property
    def groups(self) -> set:
        out: set = set()
        for a in self.compiled:
            out |= a.groups
        return out


class Table:
    __slots__ = ("table_id", "entries", "lookup", "matched")

    def __init__(self, table_id: int) -> None:
        self.table_id = table_id
        self.entries: list[FlowEntry] = []
        self.lookup = Counter()
        self.matched = Counter()


# Replay program opcodes (P_FLOWLET: a per-packet bucket choice of a flowlet-mode group;
# P_METER: a meter measures the packet and may drop or remark it; P_NORMAL: the
# MAC table decides per packet, and learns; P_ADAPTIVE: the per-packet choice of
# an adaptive-mode group, adaptive.py; P_UGAL: a UGAL-mode group's, the same op with
# each option's path length and the group's bias).
(
    P_OUT,
    P_XF,
    P_DECTTL,
    P_SUB,
    P_CTRL,
    P_DEAD,
    P_FLOWLET,
    P_METER,
    P_NORMAL,
    P_ADAPTIVE,
    P_UGAL,
) = range(11)


class Pipeline:
    """Flow tables and groups of one switch; see the module docstring.

    Args:
        n_tables: number of flow tables (table ids 0..n_tables-1).
        seed: per-switch seed mixed into the SELECT group hash.
        ports: the datapath's port dict (shared; read for liveness and flood).
        queue_bytes: bytes queued on an egress port, for flowlet SELECT groups
            (`flowlet.FlowletTable`); None: queues read empty.
        egress: the queues as adaptive SELECT groups see them
            (`adaptive.EgressView`); None: empty and never paused.
        dscp_to_prio: the switch's DSCP -> priority map (64 entries), which
            decides a packet's class for adaptive groups; None: emu's default.
    """

    def __init__(
        self,
        n_tables: int = 8,
        seed: int = 0,
        ports: Optional[dict[int, PortState]] = None,
        queue_bytes: Optional[Callable[[int], int]] = None,
        egress: Optional[EgressView] = None,
        dscp_to_prio: Optional[list[int]] = None,
    ) -> None:
        self.n_tables = n_tables
        # Called whenever the microflow cache is dropped: the compiled data plane
        # (emu/switch/fastpath.py) drops its copy of the cache then.
        self.on_invalidate: Optional[Callable[[], None]] = None
        self.set_seed(seed)
        self.ports: dict[int, PortState] = ports if ports is not None else {}
        self.tables = [Table(i) for i in range(n_tables)]
        self.groups: dict[int, Group] = {}
        self._cache: dict[tuple, tuple] = {}
        self._nports = -1
        self.dropped_port_down = 0
        self.dropped_ttl = 0
        self.dropped_meter = 0
        self.cache_misses = 0
        self.meters = MeterTable()
        self.mac_table = MacTable()
        self.modes = SelectModes()
        self.flowlets = FlowletTable(self.modes, queue_bytes)
        self.adaptive = AdaptiveRouter(egress)
        self.dscp_to_prio = dscp_to_prio if dscp_to_prio is not None else dscp_table()

    def set_seed(self, seed: int) -> None:
        """Change the SELECT hash seed (another run of the same fabric hashes anew)."""
        self.seed = seed
        self._seed_key = struct.pack("!Q", seed & 0xFFFFFFFFFFFFFFFF)
        self._cache = {}
        if self.on_invalidate is not None:
            self.on_invalidate()

    # ----- cache -------------------------------------------------------------

    def invalidate(self) -> None:
        """Drop the microflow cache (flows, groups or port liveness changed)."""
        self._cache.clear()
        self._nports = len(self.ports)
        if self.on_invalidate is not None:
            self.on_invalidate()

    def set_select_mode(self, req: Any) -> None:
        """Apply emu's SET_SELECT_MODE (`ofext.SetSelectMode`): validated, then the
        cache and every flowlet dropped (OFError with the codes ofext documents)."""
        self.modes.apply(req, self.groups)
        self.flowlets.reset()
        self.invalidate()

    def compiled(self, in_port: int, frame: bytes) -> Optional[tuple]:
        """(program, counters) the cache holds for `frame`'s key, or None (not cached)."""
        hit = self._cache.get(cache_key(frame, in_port))
        return None if hit is None else hit[:2]

    # ----- per packet --------------------------------------------------------

    def process(self, in_port: int, frame: bytes, now: float) -> tuple[list, list]:
        """Run one received frame through the pipeline.

        Returns:
            (outputs, packet_ins): outputs is a list of (port_no, frame, queue_id
            or None); packet_ins a list of PacketIn.
        """
        if len(self.ports) != self._nports:
            self.invalidate()
        key = cache_key(frame, in_port)
        hit = self._cache.get(key)
        if hit is None:
            self.cache_misses += 1
            hit = self._resolve(extract_key(frame, in_port), frame, 0, in_port)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = hit
        prog, ctrs, fast = hit
        n = len(frame)
        for c in ctrs:
            c.packets += 1
            c.bytes += n
            c.used = now
        if fast is not None:
            return [(p, frame, q) for p, q in fast], []
        outs: list = []
        pins: list = []
        self._run(prog, frame, in_port, outs, pins, now)
        return outs, pins

    def _run(
        self, prog: list, frame: bytes, in_port: int, outs: list, pins: list, now: float
    ) -> bool:
        for op in prog:
            code = op[0]
            if code == P_OUT:
                outs.append((op[1], frame, op[2]))
            elif code == P_XF:
                frame = op[1](frame, op[2])
            elif code == P_DECTTL:
                frame, ok = op[1](frame)
                if not ok:
                    self.dropped_ttl += 1
                    return False
            elif code == P_SUB:
                self._run(op[1], frame, in_port, outs, pins, now)
            elif code == P_FLOWLET or code == P_ADAPTIVE or code == P_UGAL:
                self._run_chosen(op, frame, in_port, outs, pins, now)
            elif code == P_METER:
                frame = self._metered(op[1], frame, now)
                if frame is None:
                    return False
            elif code == P_CTRL:
                pins.append(PacketIn(op[1], op[2], op[3], in_port, frame, op[4], op[5]))
            elif code == P_NORMAL:
                for port_no in self.mac_table.outputs(frame, in_port, self.ports, now):
                    outs.append((port_no, frame, op[1]))
            elif code == P_DEAD:
                self.dropped_port_down += 1
                if op[1] is not None:
                    op[1].counters.tx_dropped += 1
        return True

    def _run_chosen(
        self, op: tuple, frame: bytes, in_port: int, outs: list, pins: list, now: float
    ) -> None:
        """A group that picks its bucket per packet (flowlet, adaptive, UGAL): pick, count, run."""
        if op[0] == P_FLOWLET:
            _idx, _port, sub, ctr = self.flowlets.choose(op[1], op[2], op[3], op[4], now)
        elif op[0] == P_ADAPTIVE:
            _idx, _port, sub, ctr = self.adaptive.choose(op[2], op[3], op[4], now)
        else:
            _idx, _port, sub, ctr, _hops = self.adaptive.choose_ugal(
                op[2], op[3], op[4], op[5], now
            )
        ctr.packets += 1
        ctr.bytes += len(frame)
        ctr.used = now
        self._run(sub, frame, in_port, outs, pins, now)

    def _metered(self, meter: Meter, frame: bytes, now: float) -> Optional[bytes]:
        """The frame as `meter` lets it pass (DSCP remarked), or None if a DROP band drops it."""
        band = meter.apply(len(frame), now)
        if band is None:
            return frame
        if band.type == ofp.OFPMBT_DROP:
            self.dropped_meter += 1
            return None
        dscp = rewrite.ip_dscp(frame)
        if dscp is not None:
            frame = rewrite.set_ip_dscp(frame, remark_dscp(dscp, band.prec_level))
        return frame

    def trace(self, in_port: int, frame: bytes, now: float = 0.0) -> dict:
        """What the pipeline would do with `frame` arriving on `in_port`, touching nothing.

        The question `ovs-appctl ofproto/trace` answers: no counter, cache or
        flowlet state changes, so a trace on a switch carrying traffic shows
        the decision its packets get without disturbing them. `now` is the
        time against which PFC pauses count (adaptive groups).

        Returns:
            {"entries": [(table_id, priority, cookie), ...] in match order,
             "outputs": [(port_no, queue_id or None, frame as it leaves, hex), ...],
             "controller": packet-ins it would send (count),
             "flowlet": [[port_no, ...] per flowlet group: chosen per packet],
             "adaptive": [per adaptive group this packet's class takes: {"group",
                 "prio", "ports" (its live buckets' ports), "paused" (those PFC
                 pauses for prio now), "every_port_paused", "takes" (the port a
                 packet would take now)}; a UGAL group's adds "mode": "ugal",
                 "hops" (each port's path length) and "bias_bytes": chosen per packet],
             "adaptive_counts": the switch's adaptive counters (AdaptiveRouter.counts),
             "dropped": "port down" / "no recv" / "ttl" / "no match" or None}
        """
        entries: list = []
        prog, _ctrs, _fast = self._resolve(extract_key(frame, in_port), frame, 0, in_port, entries)
        port = self.ports.get(in_port)
        out: dict = {
            "entries": entries,
            "outputs": [],
            "controller": 0,
            "flowlet": [],
            "adaptive": [],
            "adaptive_counts": self.adaptive.counts(),
            "dropped": None,
        }
        if port is not None and port.config & OFPPC_NO_RECV:
            out["dropped"] = "no recv"
        elif not entries:
            out["dropped"] = "no match"
        self._trace_prog(prog, frame, out, in_port, now)
        return out

    def _trace_prog(
        self, prog: list, frame: bytes, out: dict, in_port: int = 0, now: float = 0.0
    ) -> None:
        for op in prog:
            code = op[0]
            if code == P_OUT:
                out["outputs"].append((op[1], op[2], frame.hex()))
            elif code == P_XF:
                frame = op[1](frame, op[2])
            elif code == P_DECTTL:
                frame, ok = op[1](frame)
                if not ok:
                    out["dropped"] = "ttl"
                    return
            elif code == P_SUB:
                self._trace_prog(op[1], frame, out, in_port, now)
            elif code == P_ADAPTIVE or code == P_UGAL:
                bias = op[5] if code == P_UGAL else None
                out["adaptive"].append(
                    {"group": op[1], **self.adaptive.peek(op[2], op[3], op[4], now, bias)}
                )
            elif code == P_FLOWLET:
                out["flowlet"].append(
                    sorted(port for _i, port, _s, _c in op[4] if port is not None)
                )
            elif code == P_CTRL:
                out["controller"] += 1
            elif code == P_NORMAL:
                for port_no in self.mac_table.outputs(frame, in_port, self.ports, 0.0, learn=False):
                    out["outputs"].append((port_no, op[1], frame.hex()))
            elif code == P_DEAD:
                out["dropped"] = "port down"

    def _resolve(
        self, key: tuple, frame: bytes, table_id: int, in_port: int, matched: Optional[list] = None
    ) -> tuple:
        """Interpret the tables for one key: the slow path behind the cache.

        `matched`, if given, collects (table_id, priority, cookie) of each entry hit.
        """
        prog: list = []
        ctrs: list = []
        st = {"frame": frame, "key": key, "queue": None, "md": 0}
        port = self.ports.get(in_port)
        if port is not None and port.config & OFPPC_NO_RECV:
            return prog, ctrs, []
        aset: dict = {}
        while True:
            table = self.tables[table_id]
            ctrs.append(table.lookup)
            entry = self._lookup(table, st["key"], st["md"])
            if entry is None:
                aset = {}
                break
            ctrs.append(table.matched)
            ctrs.append(entry.ctr)
            if matched is not None:
                matched.append((table_id, entry.priority, entry.cookie))
            if entry.meter_id is not None:
                # OF1.3 5.9: the meter instruction runs first, before any action.
                meter = self.meters.meters.get(entry.meter_id)
                if meter is not None:
                    prog.append((P_METER, meter))
            if entry.apply is not None:
                self._emit(entry.apply.ops, st, prog, ctrs, in_port, entry)
            if entry.clear:
                aset = {}
            if entry.write is not None:
                for op in entry.write.ops:
                    aset[_set_category(op)] = op
            if entry.write_md is not None:
                v, m = entry.write_md
                st["md"] = (st["md"] & ~m) | (v & m)
            if entry.goto is None:
                self._emit(_action_set_order(aset), st, prog, ctrs, in_port, entry)
                break
            table_id = entry.goto
        fast = None
        if all(op[0] == P_OUT for op in prog):
            fast = [(op[1], op[2]) for op in prog]
        return prog, ctrs, fast

    @staticmethod
    def _lookup(table: Table, key: tuple, md: int) -> Optional[FlowEntry]:
        for e in table.entries:
            for idx, val, mask in e.cmatch:
                v = md if idx < 0 else key[idx]
                if v is None or (v != val if mask is None else (v & mask) != val):
                    break
            else:
                return e
        return None

    def _emit(
        self,
        ops: list,
        st: dict,
        prog: list,
        ctrs: list,
        in_port: int,
        entry: Optional[FlowEntry],
        depth: int = 0,
    ) -> None:
        """Append the replay ops of compiled actions, tracking header changes."""
        for op in ops:
            code = op[0]
            if code == A_XF:
                prog.append((P_XF, op[1], op[2]))
                st["frame"] = op[1](st["frame"], op[2])
                st["key"] = self._key(st, in_port)
            elif code == A_DECTTL:
                prog.append((P_DECTTL, op[1]))
            elif code == A_TUNNEL:
                # tunnel_id is the pipeline's, not the frame's: later tables match on it.
                st["tunnel"] = op[1]
                st["key"] = self._key(st, in_port)
            elif code == A_QUEUE:
                st["queue"] = op[1]
            elif code == A_OUT:
                self._emit_output(op[1], op[2], st, prog, in_port, entry)
            elif code == A_GROUP:
                group = self.groups.get(op[1])
                if group is None or depth > 16:
                    continue
                ctrs.append(group.ctr)
                if group.type == ofp.OFPGT_SELECT and self._emit_per_packet(
                    group, st, prog, in_port, entry, depth
                ):
                    continue
                for idx in self._buckets(group, st["key"]):
                    ctrs.append(group.bucket_ctrs[idx])
                    sub: list = []
                    sst = dict(st)
                    self._emit(group.compiled[idx].ops, sst, sub, ctrs, in_port, entry, depth + 1)
                    prog.append((P_SUB, sub))

    @staticmethod
    def _key(st: dict, in_port: int) -> tuple:
        """The match key of the frame as rewritten so far, with the pipeline's tunnel_id."""
        key = extract_key(st["frame"], in_port)
        tunnel = st.get("tunnel")
        if tunnel is not None:
            key = key[: parse.K_TUNNEL_ID] + (tunnel,) + key[parse.K_TUNNEL_ID + 1 :]
        return key

    def _emit_per_packet(
        self,
        group: Group,
        st: dict,
        prog: list,
        in_port: int,
        entry: Optional[FlowEntry],
        depth: int,
    ) -> bool:
        """A SELECT group whose bucket is chosen per packet: its op appended, True;
        False when it hashes (its mode, or this packet's class, says so; `_buckets`
        then hashes a UGAL group over its minimal buckets only)."""
        mode = self.modes.of(group.group_id)
        if mode.gap_s is not None:
            options = self._options(group, st, in_port, entry, depth)
            if options:
                prog.append(
                    (P_FLOWLET, group.group_id, mode.gap_s, self.select_hash(st["key"]), options)
                )
            return True
        if mode.classes:
            prio = packet_prio(st["frame"], st["queue"], self.dscp_to_prio)
            if mode.adaptive_for(prio):
                options = self._options(group, st, in_port, entry, depth)
                if options:
                    hashed = self.select_hash(st["key"])
                    prog.append((P_ADAPTIVE, group.group_id, prio, hashed, options))
                return True
            if mode.ugal_for(prio):  # each option's fifth field: its bucket's weight
                options = [
                    o + (group.buckets[o[0]].weight,)
                    for o in self._options(group, st, in_port, entry, depth)
                ]
                if options:
                    hashed = self.select_hash(st["key"])
                    prog.append((P_UGAL, group.group_id, prio, hashed, options, mode.bias_bytes))
                return True
        return False

    def _options(
        self,
        group: Group,
        st: dict,
        in_port: int,
        entry: Optional[FlowEntry],
        depth: int,
    ) -> list:
        """(bucket index, egress port or None, compiled bucket, bucket counter) of
        every live bucket: the choices of a group that picks per packet."""
        options = []
        for idx in self._live_select(group):
            sub: list = []
            # Counters inside a bucket (chained groups) are not bumped per packet here:
            # the bucket's own counter is, when it is chosen.
            self._emit(group.compiled[idx].ops, dict(st), sub, [], in_port, entry, depth + 1)
            port = min((p for p in group.compiled[idx].ports if p <= ofp.OFPP_MAX), default=None)
            options.append((idx, port, sub, group.bucket_ctrs[idx]))
        return options

    def _emit_output(
        self,
        port_no: int,
        max_len: int,
        st: dict,
        prog: list,
        in_port: int,
        entry: Optional[FlowEntry],
    ) -> None:
        q = st["queue"]
        if port_no == ofp.OFPP_CONTROLLER:
            reason = (
                ofp.OFPR_NO_MATCH if entry is not None and entry.is_table_miss else ofp.OFPR_ACTION
            )
            tid = entry.table_id if entry is not None else 0
            cookie = entry.cookie if entry is not None else 0xFFFFFFFFFFFFFFFF
            prog.append((P_CTRL, reason, tid, cookie, max_len, st["md"]))
        elif port_no == ofp.OFPP_IN_PORT:
            self._emit_physical(in_port, q, prog, None)
        elif port_no == ofp.OFPP_NORMAL:
            prog.append((P_NORMAL, q))
        elif port_no in (ofp.OFPP_FLOOD, ofp.OFPP_ALL):
            for p in sorted(self.ports):
                ps = self.ports[p]
                if p == in_port or not ps.live:
                    continue
                if port_no == ofp.OFPP_FLOOD and ps.config & OFPPC_NO_FWD:
                    continue
                prog.append((P_OUT, p, q))
        elif port_no == ofp.OFPP_TABLE:
            # Only reachable from packet-out: handled by packet_out itself.
            prog.append((P_OUT, ofp.OFPP_TABLE, q))
        elif port_no == AGG_PORT:
            # The reduction engine's logical port: the datapath hands such outputs to
            # emu/switch/aggregation.py instead of a queue.
            prog.append((P_OUT, AGG_PORT, q))
        elif port_no <= ofp.OFPP_MAX:
            if port_no == in_port:
                return  # OF1.3: sending back out of in_port needs OFPP_IN_PORT
            self._emit_physical(port_no, q, prog, in_port)

    def _emit_physical(
        self, port_no: int, q: Optional[int], prog: list, _in_port: Optional[int]
    ) -> None:
        ps = self.ports.get(port_no)
        if ps is None or not ps.live or ps.config & OFPPC_NO_FWD:
            prog.append((P_DEAD, ps))
        else:
            prog.append((P_OUT, port_no, q))

    # ----- groups ------------------------------------------------------------

    def _bucket_live(self, group: Group, idx: int, depth: int = 0) -> bool:
        b = group.buckets[idx]
        wp = getattr(b, "watch_port", ofp.OFPP_ANY)
        wg = getattr(b, "watch_group", ofp.OFPG_ANY)
        if wp not in (ofp.OFPP_ANY, None):
            ps = self.ports.get(wp)
            if ps is None or not ps.live:
                return False
        if wg not in (ofp.OFPG_ANY, None) and depth < 16:
            g = self.groups.get(wg)
            if g is None or not any(
                self._bucket_live(g, i, depth + 1) for i in range(len(g.buckets))
            ):
                return False
        return True

    def select_hash(self, key: tuple) -> int:
        """Deterministic, seeded: the IP 5-tuple; eth src/dst/type (+ ARP spa/tpa) for non-IP."""
        l4s = key[parse.K_UDP_SRC] or key[parse.K_TCP_SRC] or key[parse.K_SCTP_SRC] or 0
        l4d = key[parse.K_UDP_DST] or key[parse.K_TCP_DST] or key[parse.K_SCTP_DST] or 0
        if key[parse.K_IPV4_SRC] is not None:
            data = struct.pack(
                "!IIBHH",
                key[parse.K_IPV4_SRC],
                key[parse.K_IPV4_DST],
                key[parse.K_IP_PROTO] or 0,
                l4s,
                l4d,
            )
        elif key[parse.K_IPV6_SRC] is not None:
            data = (
                key[parse.K_IPV6_SRC].to_bytes(16, "big")
                + key[parse.K_IPV6_DST].to_bytes(16, "big")
                + struct.pack("!BHH", key[parse.K_IP_PROTO] or 0, l4s, l4d)
            )
        else:
            data = struct.pack(
                "!QQH",
                key[parse.K_ETH_SRC] or 0,
                key[parse.K_ETH_DST] or 0,
                key[parse.K_ETH_TYPE] or 0,
            )
            if key[parse.K_ARP_SPA] is not None:
                # ARP between two routers' MACs still spreads by the addresses it resolves.
                data += struct.pack("!II", key[parse.K_ARP_SPA], key[parse.K_ARP_TPA] or 0)
        d = hashlib.blake2b(data, digest_size=8, key=self._seed_key).digest()
        return int.from_bytes(d, "big")

    def _live_select(self, group: Group) -> list[int]:
        return [
            i
            for i in range(len(group.buckets))
            if group.buckets[i].weight > 0 and self._bucket_live(group, i)
        ]

    def _buckets(self, group: Group, key: tuple) -> list[int]:
        """Indices of the buckets that a packet with `key` goes through."""
        n = len(group.buckets)
        if group.type == ofp.OFPGT_ALL:
            return list(range(n))
        if group.type == ofp.OFPGT_INDIRECT:
            return [0] if n else []
        if group.type == ofp.OFPGT_FF:
            for i in range(n):
                if self._bucket_live(group, i):
                    return [i]
            return []
        live = [(i, group.buckets[i].weight) for i in self._live_select(group)]
        if not live:
            return []
        if self.modes.of(group.group_id).ugal:
            # A UGAL group's weights say paths, not shares: a packet that does not take
            # UGAL's choice hashes, evenly, over the minimal buckets (adaptive.py).
            minimal = ugal_minimal([w for _, w in live])
            live = [(i, 1) for (i, _w), m in zip(live, minimal) if m]
        total = sum(w for _, w in live)
        h = self.select_hash(key) % total
        for i, w in live:
            if h < w:
                return [i]
            h -= w
        return [live[-1][0]]

    def group_mod(self, mod: Any, now: float = 0.0) -> list[FlowEntry]:
        """Apply an OFPGroupMod (command, type, group_id, buckets).

        Returns:
            Flow entries removed because their group was deleted (reason
            OFPRR_GROUP_DELETE).

        Raises:
            OFError: OFPET_GROUP_MOD_FAILED / BAD_ACTION with the spec code.
        """
        cmd, gid, gtype = mod.command, mod.group_id, mod.type
        if cmd == ofp.OFPGC_DELETE:
            return self._group_delete(gid)
        error_code = self._group_mod_error(cmd, gid, gtype, mod.buckets)
        if error_code is not None:
            raise OFError(ofp.OFPET_GROUP_MOD_FAILED, error_code)
        compiled = self._compile_buckets(gid, gtype, mod.buckets)
        g = Group(gid, gtype, mod.buckets, compiled, now)
        if self._reaches(g.groups, gid):
            raise OFError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_LOOP)
        old = self.groups.get(gid)
        if old is not None and old.type == gtype and len(old.buckets) == len(mod.buckets):
            g.bucket_ctrs = old.bucket_ctrs
        if old is not None:
            g.ctr, g.created = old.ctr, old.created
        self.groups[gid] = g
        self.invalidate()
        return []

    def _group_mod_error(self, cmd: int, gid: int, gtype: int, buckets: list) -> Optional[int]:
        """The GROUP_MOD_FAILED code a non-DELETE group mod's header earns, or None if valid."""
        if cmd not in (ofp.OFPGC_ADD, ofp.OFPGC_MODIFY):
            return ofp.OFPGMFC_BAD_COMMAND
        if gid > ofp.OFPG_MAX:
            return ofp.OFPGMFC_INVALID_GROUP
        if cmd == ofp.OFPGC_ADD and gid in self.groups:
            return ofp.OFPGMFC_GROUP_EXISTS
        if cmd == ofp.OFPGC_MODIFY and gid not in self.groups:
            return ofp.OFPGMFC_UNKNOWN_GROUP
        if gtype not in (ofp.OFPGT_ALL, ofp.OFPGT_SELECT, ofp.OFPGT_INDIRECT, ofp.OFPGT_FF):
            return ofp.OFPGMFC_BAD_TYPE
        if gtype == ofp.OFPGT_INDIRECT and len(buckets) != 1:
            return ofp.OFPGMFC_INVALID_GROUP
        return None

    def _compile_buckets(self, gid: int, gtype: int, buckets: list) -> list[Actions]:
        """Each bucket's compiled actions, its watch checked first (raises OFError)."""
        compiled = []
        # A group may reference itself only through a chain; register a
        # placeholder so references validate, then check for loops.
        known = dict(self.groups)
        known.setdefault(gid, None)
        for b in buckets:
            if not _watch_is_valid(gtype, b, known):
                raise OFError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_WATCH)
            try:
                compiled.append(compile_actions(b.actions, known))
            except OFError as e:
                if e.code == ofp.OFPBAC_BAD_OUT_GROUP:
                    raise OFError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP) from e
                raise
        return compiled

    def _reaches(self, start: set, target: int) -> bool:
        seen: set = set()
        todo = list(start)
        while todo:
            g = todo.pop()
            if g == target:
                return True
            if g in seen or g not in self.groups:
                continue
            seen.add(g)
            todo.extend(self.groups[g].groups)
        return False

    def _group_delete(self, gid: int) -> list[FlowEntry]:
        victims = list(self.groups) if gid == ofp.OFPG_ALL else [gid]
        victims = [g for g in victims if g in self.groups]
        vset = set(victims)
        for g in self.groups.values():
            if g.group_id not in vset and g.groups & vset:
                raise OFError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_CHAINED_GROUP)
        removed: list[FlowEntry] = []
        for g in victims:
            del self.groups[g]
            self.modes.forget_group(g)
            # OF1.3 6.5: deleting a group removes the flows that forward to it.
            removed += self._remove_where(lambda e, g=g: e.uses_group(g), ofp.OFPRR_GROUP_DELETE)
        self.invalidate()
        return removed

    def group_ref_count(self, gid: int) -> int:
        """Flow entries and groups that forward to group `gid`."""
        n = sum(1 for t in self.tables for e in t.entries if e.uses_group(gid))
        return n + sum(1 for g in self.groups.values() if gid in g.groups)

    # ----- meters ------------------------------------------------------------

    def meter_mod(
        self, command: int, flags: int, meter_id: int, bands: list[tuple], now: float = 0.0
    ) -> list[FlowEntry]:
        """Apply an OFPT_METER_MOD (bands: (type, rate, burst_size, prec_level)).

        Returns:
            Flow entries removed because their meter was deleted (reason
            OFPRR_DELETE: OF1.3 has no reason of its own for it).

        Raises:
            OFError: METER_MOD_FAILED with the spec's code.
        """
        gone = set(self.meters.meter_mod(command, flags, meter_id, bands, now))
        removed = self._remove_where(lambda e: e.meter_id in gone, ofp.OFPRR_DELETE) if gone else []
        # Cached programs hold the Meter objects: a modified meter is a new object.
        self.invalidate()
        return removed

    def meter_flow_count(self, meter: Meter) -> int:
        """Flow entries whose meter instruction names `meter`."""
        return sum(1 for t in self.tables for e in t.entries if e.meter_id == meter.meter_id)

    # ----- flows -------------------------------------------------------------

    def _compile_instructions(self, table_id: int, instructions: list) -> dict:
        out: dict = {}
        for ins in instructions:
            t = getattr(ins, "type", None)
            if t in out:
                raise OFError(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_DUP_INST)
            if isinstance(ins, ofpp.OFPInstructionGotoTable):
                if ins.table_id <= table_id or ins.table_id >= self.n_tables:
                    raise OFError(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_TABLE_ID)
                out[t] = ins.table_id
            elif isinstance(ins, ofpp.OFPInstructionWriteMetadata):
                out[t] = (ins.metadata, ins.metadata_mask)
            elif isinstance(ins, ofpp.OFPInstructionMeter):
                self.meters.get(ins.meter_id)  # METER_MOD_FAILED/UNKNOWN_METER if absent
                out[t] = ins.meter_id
            elif isinstance(ins, ofpp.OFPInstructionActions) and t in (
                ofp.OFPIT_APPLY_ACTIONS,
                ofp.OFPIT_WRITE_ACTIONS,
                ofp.OFPIT_CLEAR_ACTIONS,
            ):
                if t == ofp.OFPIT_CLEAR_ACTIONS:
                    out[t] = True
                    continue
                acts = compile_actions(ins.actions, self.groups)
                if t == ofp.OFPIT_WRITE_ACTIONS:
                    cats = [_set_category(op) for op in acts.ops]
                    if len(cats) != len(set(cats)):
                        raise OFError(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_TOO_MANY)
                out[t] = acts
            else:
                raise OFError(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_UNSUP_INST)
        return out

    def flow_mod(self, mod: Any, now: float = 0.0) -> list[FlowEntry]:
        """Apply an OFPFlowMod.

        Returns:
            Entries removed by a DELETE (removed_reason OFPRR_DELETE).

        Raises:
            OFError: FLOW_MOD_FAILED, BAD_MATCH, BAD_INSTRUCTION or BAD_ACTION.
        """
        cmd, tid = mod.command, mod.table_id
        match = convert_match(mod.match)
        if cmd in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
            return self._flow_delete(mod, match)
        if tid >= self.n_tables:
            raise OFError(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_TABLE_ID)
        compiled = self._compile_instructions(tid, mod.instructions)
        if cmd == ofp.OFPFC_ADD:
            self._flow_add(mod, match, compiled, now)
        elif cmd in (ofp.OFPFC_MODIFY, ofp.OFPFC_MODIFY_STRICT):
            self._flow_modify(mod, match, compiled, now)
        else:
            raise OFError(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_COMMAND)
        self.invalidate()
        return []

    def _flow_delete(self, mod: Any, match: dict) -> list[FlowEntry]:
        """Remove the entries a DELETE or DELETE_STRICT selects; the entries removed."""
        tid = mod.table_id
        if tid != ofp.OFPTT_ALL and tid >= self.n_tables:
            raise OFError(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_TABLE_ID)
        strict = mod.command == ofp.OFPFC_DELETE_STRICT
        sel = self._selector(mod, match, strict, filters=True)
        removed = self._remove_where(sel, ofp.OFPRR_DELETE, None if tid == ofp.OFPTT_ALL else tid)
        self.invalidate()
        return removed

    def _flow_add(self, mod: Any, match: dict, compiled: dict, now: float) -> None:
        """Add an entry, replacing an identical one, else in priority order (FLOW_MOD_FAILED)."""
        table = self.tables[mod.table_id]
        if mod.flags & ofp.OFPFF_CHECK_OVERLAP and self._overlaps(table, mod.priority, match):
            raise OFError(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_OVERLAP)
        entry = FlowEntry(mod.table_id, mod, match, now)
        entry.set_instructions(mod.instructions, compiled)
        for i, e in enumerate(table.entries):
            if e.priority == mod.priority and e.match == match:
                # OF1.3 6.4: an identical entry is replaced; counters kept
                # unless OFPFF_RESET_COUNTS.
                if not mod.flags & ofp.OFPFF_RESET_COUNTS:
                    entry.ctr = e.ctr
                table.entries[i] = entry
                return
        pos = len(table.entries)
        for i, e in enumerate(table.entries):
            if e.priority < mod.priority:
                pos = i
                break
        table.entries.insert(pos, entry)

    @staticmethod
    def _overlaps(table: Table, priority: int, match: dict) -> bool:
        """Whether an entry of `priority` with another match overlaps `match`."""
        return any(
            e.priority == priority and e.match != match and _overlap(match, e.match)
            for e in table.entries
        )

    def _flow_modify(self, mod: Any, match: dict, compiled: dict, now: float) -> None:
        """Give the entries a MODIFY or MODIFY_STRICT selects the mod's instructions."""
        strict = mod.command == ofp.OFPFC_MODIFY_STRICT
        sel = self._selector(mod, match, strict, filters=False)
        for e in self.tables[mod.table_id].entries:
            if sel(e):
                e.set_instructions(mod.instructions, compiled)
                if mod.flags & ofp.OFPFF_RESET_COUNTS:
                    e.ctr = Counter(now)

    @staticmethod
    def _selector(mod: Any, match: dict, strict: bool, filters: bool) -> Callable:
        cookie_mask = getattr(mod, "cookie_mask", 0)
        cookie = mod.cookie & cookie_mask
        out_port = getattr(mod, "out_port", ofp.OFPP_ANY) if filters else ofp.OFPP_ANY
        out_group = getattr(mod, "out_group", ofp.OFPG_ANY) if filters else ofp.OFPG_ANY
        prio = mod.priority

        def sel(e: FlowEntry) -> bool:
            if cookie_mask and e.cookie & cookie_mask != cookie:
                return False
            if strict:
                if e.priority != prio or e.match != match:
                    return False
            elif not _covers(match, e.match):
                return False
            if out_port != ofp.OFPP_ANY and not e.outputs_to(out_port):
                return False
            if out_group != ofp.OFPG_ANY and not e.uses_group(out_group):
                return False
            return True

        return sel

    def _remove_where(
        self, pred: Callable[[FlowEntry], bool], reason: int, table_id: Optional[int] = None
    ) -> list[FlowEntry]:
        removed: list[FlowEntry] = []
        for t in self.tables:
            if table_id is not None and t.table_id != table_id:
                continue
            keep = []
            for e in t.entries:
                if pred(e):
                    e.removed_reason = reason
                    removed.append(e)
                else:
                    keep.append(e)
            t.entries = keep
        return removed

    def expire(self, now: float) -> list[FlowEntry]:
        """Remove flows whose idle or hard timeout passed.

        Returns:
            All removed entries (removed_reason OFPRR_IDLE_TIMEOUT or
            OFPRR_HARD_TIMEOUT); the agent sends OFPT_FLOW_REMOVED only for
            those with OFPFF_SEND_FLOW_REM.
        """
        removed: list[FlowEntry] = []
        for t in self.tables:
            keep = []
            for e in t.entries:
                if e.hard_timeout and now - e.created >= e.hard_timeout:
                    e.removed_reason = ofp.OFPRR_HARD_TIMEOUT
                elif e.idle_timeout and now - e.ctr.used >= e.idle_timeout:
                    e.removed_reason = ofp.OFPRR_IDLE_TIMEOUT
                else:
                    keep.append(e)
                    continue
                removed.append(e)
            t.entries = keep
        if removed:
            self.invalidate()
        return removed

    # ----- packet out --------------------------------------------------------

    def packet_out(
        self, in_port: int, actions: list, frame: bytes, now: float
    ) -> tuple[list, list]:
        """Execute a PacketOut's action list (OFPP_TABLE runs table 0).

        Raises:
            OFError: BAD_ACTION for invalid actions.
        """
        acts = compile_actions(actions, self.groups, allow_table=True)
        key = extract_key(frame, in_port)
        st = {"frame": frame, "key": key, "queue": None, "md": 0}
        prog: list = []
        ctrs: list = []
        self._emit(acts.ops, st, prog, ctrs, in_port, None)
        for c in ctrs:
            c.packets += 1
            c.bytes += len(frame)
            c.used = now
        outs: list = []
        pins: list = []
        self._run(prog, frame, in_port, outs, pins, now)
        final: list = []
        for port_no, f, q in outs:
            if port_no == ofp.OFPP_TABLE:
                o2, p2 = self.process(in_port, f, now)
                final += o2
                pins += p2
            else:
                final.append((port_no, f, q))
        return final, pins

    # ----- stats -------------------------------------------------------------

    def flow_stats(
        self,
        table_id: int = ofp.OFPTT_ALL,
        out_port: int = ofp.OFPP_ANY,
        out_group: int = ofp.OFPG_ANY,
        cookie: int = 0,
        cookie_mask: int = 0,
        match: Any = None,
    ) -> list[FlowEntry]:
        """Entries selected like a non-strict delete (OF1.3 7.3.5.2)."""
        req = convert_match(match) if match is not None else {}
        out = []
        for t in self.tables:
            if table_id != ofp.OFPTT_ALL and t.table_id != table_id:
                continue
            for e in t.entries:
                if cookie_mask and e.cookie & cookie_mask != cookie & cookie_mask:
                    continue
                if out_port != ofp.OFPP_ANY and not e.outputs_to(out_port):
                    continue
                if out_group != ofp.OFPG_ANY and not e.uses_group(out_group):
                    continue
                if req and not _covers(req, e.match):
                    continue
                out.append(e)
        return out

    def aggregate_stats(self, **kw: Any) -> tuple[int, int, int]:
        """(packet_count, byte_count, flow_count) over flow_stats(**kw)."""
        es = self.flow_stats(**kw)
        return sum(e.ctr.packets for e in es), sum(e.ctr.bytes for e in es), len(es)

    def table_stats(self) -> list[tuple[int, int, int, int]]:
        """(table_id, active_count, lookup_count, matched_count) per table."""
        return [
            (t.table_id, len(t.entries), t.lookup.packets, t.matched.packets) for t in self.tables
        ]

    def group_features(self) -> dict:
        """ofp_group_features_stats contents."""
        types = (
            (1 << ofp.OFPGT_ALL)
            | (1 << ofp.OFPGT_SELECT)
            | (1 << ofp.OFPGT_INDIRECT)
            | (1 << ofp.OFPGT_FF)
        )
        caps = ofp.OFPGFC_SELECT_WEIGHT | ofp.OFPGFC_SELECT_LIVENESS | ofp.OFPGFC_CHAINING
        acts = 0
        for a in SUPPORTED_ACTIONS:
            acts |= 1 << a
        return {
            "types": types,
            "capabilities": caps,
            "max_groups": [ofp.OFPG_MAX] * 4,
            "actions": [acts] * 4,
        }

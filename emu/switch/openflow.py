"""The OpenFlow 1.3 agent of one emu switch, sans I/O.

Owns the switch's side of OpenFlow channels: version negotiation, framing,
roles and async config, and the dispatch of every controller message to the
pipeline or the port records. `OpenFlowSession.feed(bytes, now)` returns, in
the order the messages asked for them, the effects the datapath must carry
out, as plain records (the way `Pipeline.process` returns outputs and
packet-ins): `Reply` (bytes to send back on this channel), `Transmit` (a
PacketOut's frames), `PortChanged` (a PortMod changed a port's config) and
`FlowsRemoved` (a FlowMod or GroupMod removed entries). The session calls
nobody back and holds no socket or clock; the channels (`channel.py`) own the
TCP side and call `packet_in`, `port_status` and `flow_removed` to build
asynchronous messages.

The switch must survive any input: `feed` never raises. Malformed messages get
an OFPT_ERROR with the spec's type/code, the offending message's first 64
bytes and its xid, and are counted in `MALFORMED` (telemetry); an unframeable
stream (length < 8) gets an error and the session is marked `closed`.

Bytes are read and built in `ofcodec.py`; semantics live in `pipeline.py`
(flows, groups, SELECT modes) and `aggregation.py` (aggregation jobs, set by
emu's experimenter messages; a full slot pool is answered with emu's
OFPET_EXPERIMENTER error).
"""

from __future__ import annotations

import collections
import logging
import struct
from dataclasses import dataclass
from typing import Callable, Optional, Union

from os_ken.ofproto import ofproto_v1_3 as ofp

from emu.proto import ofext
from emu.switch import ofcodec as codec
from emu.switch.aggregation import AggEngine
from emu.switch.pipeline import FlowEntry, OFError, PacketIn, Pipeline
from emu.switch.ports import (
    OFPPC_NO_FWD,
    OFPPC_NO_PACKET_IN,
    OFPPC_NO_RECV,
    OFPPC_PORT_DOWN,
    PortState,
)
from emu.switch.scheduler import N_PRIORITIES as N_QUEUES

LOG = logging.getLogger(__name__)

# Malformed or rejected messages per OFPT type name, for telemetry.
MALFORMED: collections.Counter = collections.Counter()

_TYPE_NAMES = {v: k for k, v in vars(ofp).items() if k.startswith("OFPT_") and isinstance(v, int)}
_MODIFYING = {
    ofp.OFPT_FLOW_MOD,
    ofp.OFPT_GROUP_MOD,
    ofp.OFPT_PORT_MOD,
    ofp.OFPT_PACKET_OUT,
    ofp.OFPT_TABLE_MOD,
    ofp.OFPT_METER_MOD,
    ofp.OFPT_EXPERIMENTER,
}
_PORT_CONFIG_BITS = OFPPC_PORT_DOWN | OFPPC_NO_RECV | OFPPC_NO_FWD | OFPPC_NO_PACKET_IN
_CAPS = ofp.OFPC_FLOW_STATS | ofp.OFPC_TABLE_STATS | ofp.OFPC_PORT_STATS | ofp.OFPC_GROUP_STATS


_EXP_UNPACK: dict[int, Callable] = {
    ofext.EXP_SET_SELECT_MODE: ofext.unpack_set_select_mode,
    ofext.EXP_AGG_JOB_SET: ofext.unpack_agg_job_set,
    ofext.EXP_AGG_JOB_DEL: ofext.unpack_agg_job_del,
}


@dataclass(frozen=True)
class Reply:
    """Send `data` (one or more OpenFlow messages) back on the channel that was fed."""

    data: bytes


@dataclass(frozen=True)
class Transmit:
    """A PacketOut's frames to queue: (port_no, frame, queue_id or None) each.

    They enter the shared buffer as if received on port 0 (the CPU port).
    """

    outputs: list


@dataclass(frozen=True)
class PortChanged:
    """A PortMod changed port `port_no`'s config (already applied to its record).

    The datapath flushes a port that is no longer live and sends
    OFPT_PORT_STATUS (OFPPR_MODIFY) on every channel.
    """

    port_no: int


@dataclass(frozen=True)
class FlowsRemoved:
    """Entries a controller's FlowMod/GroupMod removed: OFPT_FLOW_REMOVED on every
    channel that asked for it (idle/hard timeouts come from `Pipeline.expire`)."""

    entries: list


Effect = Union[Reply, Transmit, PortChanged, FlowsRemoved]


def reply_bytes(effects: list[Effect]) -> list[bytes]:
    """The messages among `effects` to send back on the channel, in order."""
    return [e.data for e in effects if type(e) is Reply]


def _experimenter_error(exp_type: int, offending: bytes, xid: int) -> bytes:
    """ofp_error_experimenter_msg (spec A.4.4): type 0xFFFF, exp_type, experimenter, data."""
    body = struct.pack("!HHI", ofext.OFPET_EXPERIMENTER, exp_type, ofext.EMU_EXPERIMENTER_ID)
    return codec.header(ofp.OFPT_ERROR, body + bytes(offending[:64]), xid)


class SwitchModel:
    """State shared by all OpenFlow sessions of one switch.

    Args:
        dpid: datapath id.
        pipeline: the switch's Pipeline (its `ports` dict is the switch's ports).
        queue_counters: what OFPMP_QUEUE reports, {port_no: [(tx_bytes,
            tx_packets, tx_errors) per queue id]}; queue ids are emu's 8
            priorities, the ones set_queue names.
        dp_desc: the OFPMP_DESC datapath description (default: from the dpid).
        agg: the switch's reduction engine, configured by emu's experimenter
            messages (default: a new one on the pipeline's ports).
    """

    def __init__(
        self,
        dpid: int,
        pipeline: Pipeline,
        dp_desc: str = "",
        agg: Optional[AggEngine] = None,
        queue_counters: Optional[Callable[[], dict]] = None,
    ) -> None:
        self.dpid = dpid
        self.pipeline = pipeline
        self.ports: dict[int, PortState] = pipeline.ports
        self.n_buffers = 0
        self.n_tables = pipeline.n_tables
        self.capabilities = _CAPS
        self.config_flags = 0
        self.miss_send_len = ofp.OFPCML_NO_BUFFER
        self.dp_desc = dp_desc or "dpid %016x" % dpid
        self.generation_id: Optional[int] = None
        self.sessions: list[OpenFlowSession] = []
        self.agg = agg if agg is not None else AggEngine(pipeline.ports)
        # {port_no: [(tx_bytes, tx_packets, tx_errors) per queue]}, asked at each
        # OFPMP_QUEUE: the datapath owns the queues (a request, not its fields).
        self.queue_counters = queue_counters or (lambda: {})
        self.queues_since = 0.0


class OpenFlowSession:
    """One OpenFlow channel (a controller, or a tool like ovs-ofctl)."""

    def __init__(self, model: SwitchModel, is_controller_channel: bool = True) -> None:
        self.model = model
        self.is_controller_channel = is_controller_channel
        self.closed = False
        self.negotiated = False
        self.role = ofp.OFPCR_ROLE_EQUAL
        # ofp_async_config defaults (spec A.3.10): [master/equal, slave].
        self.packet_in_mask = [(1 << ofp.OFPR_NO_MATCH) | (1 << ofp.OFPR_ACTION), 0]
        self.port_status_mask = [0x7, 0x7]
        self.flow_removed_mask = [0xF, 0]
        self._buf = bytearray()
        self._now = 0.0
        model.sessions.append(self)

    # ----- channel -----------------------------------------------------------

    def hello(self) -> bytes:
        """Our OFPT_HELLO, to send first on a new connection."""
        return codec.hello()

    def close(self) -> None:
        self.closed = True
        if self in self.model.sessions:
            self.model.sessions.remove(self)

    def feed(self, data: bytes, now: float) -> list[Effect]:
        """Consume bytes from the channel; return what should happen, in order.

        Every complete message is applied to the switch model at `now`; the
        effects it asks of the datapath (replies on this channel, frames to
        send, port changes, removed flows) are returned in message order.
        Partial messages are kept until the rest arrives. Never raises: a
        malformed message yields a `Reply` with OFPT_ERROR and the session
        goes on (an unframeable stream also sets `closed`).
        """
        out: list[Effect] = []
        if self.closed:
            return out
        self._now = now
        self._buf += data
        while len(self._buf) >= 8 and not self.closed:
            version, mtype, length, xid = codec.OFP_HEADER.unpack_from(self._buf, 0)
            if length < 8:
                MALFORMED["unframeable"] += 1
                out.append(
                    Reply(
                        codec.error(
                            ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN, bytes(self._buf[:64]), xid
                        )
                    )
                )
                self._buf.clear()
                self.close()
                break
            if len(self._buf) < length and (
                (version != codec.OFP_VERSION and (mtype != ofp.OFPT_HELLO or self.negotiated))
                or mtype > ofp.OFPT_METER_MOD
            ):
                # A header we could never act on (the rest of a message whose
                # length lied, or noise) means the stream lost its framing;
                # waiting for `length` bytes would stall the channel. Say so and close.
                MALFORMED["unframeable"] += 1
                code = (
                    ofp.OFPBRC_BAD_VERSION if version != codec.OFP_VERSION else ofp.OFPBRC_BAD_TYPE
                )
                out.append(
                    Reply(codec.error(ofp.OFPET_BAD_REQUEST, code, bytes(self._buf[:64]), xid))
                )
                self._buf.clear()
                self.close()
                break
            if len(self._buf) < length:
                break
            msg = bytes(self._buf[:length])
            del self._buf[:length]
            try:
                out.extend(self._handle(version, mtype, xid, msg))
            except OFError as e:
                MALFORMED[_TYPE_NAMES.get(mtype, str(mtype))] += 1
                LOG.debug("OF error %s for type %d xid %d", e, mtype, xid)
                if e.type == ofext.OFPET_EXPERIMENTER:
                    out.append(Reply(_experimenter_error(e.code, msg, xid)))
                else:
                    out.append(Reply(codec.error(e.type, e.code, msg, xid)))
                if e.type == ofp.OFPET_HELLO_FAILED:
                    self.close()
            except (struct.error, IndexError, ValueError, TypeError, AssertionError, KeyError):
                # Raised by os-ken's piece parsers on bytes our checks let through.
                MALFORMED[_TYPE_NAMES.get(mtype, str(mtype))] += 1
                LOG.debug("malformed type %d xid %d", mtype, xid, exc_info=True)
                out.append(Reply(codec.error(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN, msg, xid)))
            except Exception:  # noqa: BLE001 - the switch must answer, not crash
                MALFORMED["internal"] += 1
                LOG.warning("internal error on type %d xid %d", mtype, xid, exc_info=True)
                out.append(Reply(codec.error(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, msg, xid)))
        return out

    # ----- dispatch ----------------------------------------------------------

    def _handle(self, version: int, mtype: int, xid: int, msg: bytes) -> list[Effect]:
        if mtype == ofp.OFPT_HELLO:
            return self._hello(version, msg, xid)
        if version != codec.OFP_VERSION:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_VERSION)
        if mtype in _MODIFYING and self.role == ofp.OFPCR_ROLE_SLAVE:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE)
        h = self._HANDLERS.get(mtype)
        if h is None:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE)
        return h(self, msg, xid)

    def _hello(self, version: int, msg: bytes, xid: int) -> list[Effect]:
        versions = codec.read_hello_versions(msg)
        ok = codec.OFP_VERSION in versions if versions is not None else version >= codec.OFP_VERSION
        if not ok:
            self.close()
            text = b"emu speaks OpenFlow 1.3 (0x04) only"
            return [
                Reply(
                    codec.error(
                        ofp.OFPET_HELLO_FAILED,
                        ofp.OFPHFC_INCOMPATIBLE,
                        text,
                        xid,
                        version=min(version, codec.OFP_VERSION) or 1,
                    )
                )
            ]
        self.negotiated = True
        return []

    def _echo_request(self, msg: bytes, xid: int) -> list[Effect]:
        return [Reply(codec.header(ofp.OFPT_ECHO_REPLY, msg[8:], xid))]

    def _ignore(self, msg: bytes, xid: int) -> list[Effect]:
        return []

    def _error_in(self, msg: bytes, xid: int) -> list[Effect]:
        if len(msg) >= 12:
            LOG.info("controller sent error type %d code %d", *struct.unpack_from("!HH", msg, 8))
        return []

    def _features(self, msg: bytes, xid: int) -> list[Effect]:
        m = self.model
        return [Reply(codec.features_reply(xid, m.dpid, m.n_buffers, m.n_tables, m.capabilities))]

    def _get_config(self, msg: bytes, xid: int) -> list[Effect]:
        m = self.model
        return [
            Reply(
                codec.header(
                    ofp.OFPT_GET_CONFIG_REPLY,
                    struct.pack("!HH", m.config_flags, m.miss_send_len),
                    xid,
                )
            )
        ]

    def _set_config(self, msg: bytes, xid: int) -> list[Effect]:
        if len(msg) != ofp.OFP_SWITCH_CONFIG_SIZE:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        flags, miss = struct.unpack_from("!HH", msg, 8)
        if flags & ~ofp.OFPC_FRAG_MASK:
            raise OFError(ofp.OFPET_SWITCH_CONFIG_FAILED, ofp.OFPSCFC_BAD_FLAGS)
        self.model.config_flags, self.model.miss_send_len = flags, miss
        return []

    def _barrier(self, msg: bytes, xid: int) -> list[Effect]:
        # Every message is applied before feed returns, so a barrier is immediate.
        return [Reply(codec.header(ofp.OFPT_BARRIER_REPLY, b"", xid))]

    @staticmethod
    def _removed(removed: list[FlowEntry]) -> list[Effect]:
        return [FlowsRemoved(removed)] if removed else []

    def _flow_mod(self, msg: bytes, xid: int) -> list[Effect]:
        mod = codec.read_flow_mod(msg)
        if mod.buffer_id != ofp.OFP_NO_BUFFER and mod.command in (
            ofp.OFPFC_ADD,
            ofp.OFPFC_MODIFY,
            ofp.OFPFC_MODIFY_STRICT,
        ):
            # n_buffers is 0: no packet was ever buffered (spec A.3.4.1).
            self.model.pipeline.flow_mod(mod, self._now)
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BUFFER_UNKNOWN)
        return self._removed(self.model.pipeline.flow_mod(mod, self._now))

    def _group_mod(self, msg: bytes, xid: int) -> list[Effect]:
        mod = codec.read_group_mod(msg)
        return self._removed(self.model.pipeline.group_mod(mod, self._now))

    def _port_mod(self, msg: bytes, xid: int) -> list[Effect]:
        port_no, hw, config, mask, _adv = codec.read_port_mod(msg)
        p = self.model.ports.get(port_no)
        if p is None:
            raise OFError(ofp.OFPET_PORT_MOD_FAILED, ofp.OFPPMFC_BAD_PORT)
        if bytes(p.hw_addr) != hw:
            raise OFError(ofp.OFPET_PORT_MOD_FAILED, ofp.OFPPMFC_BAD_HW_ADDR)
        if mask & ~_PORT_CONFIG_BITS:
            raise OFError(ofp.OFPET_PORT_MOD_FAILED, ofp.OFPPMFC_BAD_CONFIG)
        p.config = (p.config & ~mask) | (config & mask)
        self.model.pipeline.invalidate()
        return [PortChanged(port_no)]

    def _packet_out(self, msg: bytes, xid: int) -> list[Effect]:
        buffer_id, in_port, actions, data = codec.read_packet_out(msg)
        if buffer_id != ofp.OFP_NO_BUFFER:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BUFFER_UNKNOWN)
        if (
            in_port > ofp.OFPP_MAX
            and in_port not in (ofp.OFPP_CONTROLLER, ofp.OFPP_LOCAL, ofp.OFPP_ANY)
            or in_port == 0
        ):
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT)
        outs, pins = self.model.pipeline.packet_out(in_port, actions, data, self._now)
        out: list[Effect] = [Transmit(outs)] if outs else []
        # A PacketOut whose actions send to the controller answers only this channel.
        out.extend(Reply(m) for m in (self.packet_in(p) for p in pins) if m is not None)
        return out

    def _role(self, msg: bytes, xid: int) -> list[Effect]:
        if len(msg) != 24:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        role, gen = struct.unpack_from("!I4xQ", msg, 8)
        if role > ofp.OFPCR_ROLE_SLAVE:
            raise OFError(ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_BAD_ROLE)
        m = self.model
        if role in (ofp.OFPCR_ROLE_MASTER, ofp.OFPCR_ROLE_SLAVE):
            # Spec 6.3.5: reject a generation_id older than the last one seen,
            # comparing as a signed 64-bit distance.
            if m.generation_id is not None:
                dist = (gen - m.generation_id) & 0xFFFFFFFFFFFFFFFF
                if dist >= 1 << 63:
                    raise OFError(ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_STALE)
            m.generation_id = gen
        if role == ofp.OFPCR_ROLE_MASTER:
            for s in m.sessions:
                if s is not self and s.role == ofp.OFPCR_ROLE_MASTER:
                    s.role = ofp.OFPCR_ROLE_SLAVE
        if role != ofp.OFPCR_ROLE_NOCHANGE:
            self.role = role
        gen_out = m.generation_id if m.generation_id is not None else 0
        return [
            Reply(codec.header(ofp.OFPT_ROLE_REPLY, struct.pack("!I4xQ", self.role, gen_out), xid))
        ]

    def _get_async(self, msg: bytes, xid: int) -> list[Effect]:
        body = struct.pack(
            "!6I", *self.packet_in_mask, *self.port_status_mask, *self.flow_removed_mask
        )
        return [Reply(codec.header(ofp.OFPT_GET_ASYNC_REPLY, body, xid))]

    def _set_async(self, msg: bytes, xid: int) -> list[Effect]:
        if len(msg) != 32:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        v = struct.unpack_from("!6I", msg, 8)
        self.packet_in_mask, self.port_status_mask = list(v[0:2]), list(v[2:4])
        self.flow_removed_mask = list(v[4:6])
        return []

    def _table_mod(self, msg: bytes, xid: int) -> list[Effect]:
        if len(msg) != ofp.OFP_TABLE_MOD_SIZE:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        tid = msg[8]
        if tid >= self.model.n_tables and tid != ofp.OFPTT_ALL:
            raise OFError(ofp.OFPET_TABLE_MOD_FAILED, ofp.OFPTMFC_BAD_TABLE)
        return []  # OF1.3 table config bits are deprecated; nothing to apply

    def _meter_mod(self, msg: bytes, xid: int) -> list[Effect]:
        command, flags, meter_id, bands = codec.read_meter_mod(msg)
        removed = self.model.pipeline.meter_mod(command, flags, meter_id, bands, self._now)
        return self._removed(removed)

    def _queue_get_config(self, msg: bytes, xid: int) -> list[Effect]:
        """Each port's queues: emu's 8 priorities (ids 0-7), no rate properties."""
        if len(msg) != 16:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        (port,) = struct.unpack_from("!I", msg, 8)
        if port not in self.model.ports and port != ofp.OFPP_ANY:
            raise OFError(ofp.OFPET_QUEUE_OP_FAILED, ofp.OFPQOFC_BAD_PORT)
        ports = sorted(self.model.ports) if port == ofp.OFPP_ANY else [port]
        queues = b"".join(struct.pack("!IIH6x", q, p, 16) for p in ports for q in range(N_QUEUES))
        body = struct.pack("!I4x", port) + queues
        return [Reply(codec.header(ofp.OFPT_QUEUE_GET_CONFIG_REPLY, body, xid))]

    def _experimenter(self, msg: bytes, xid: int) -> list[Effect]:
        """emu's extension (emu/proto/ofext.py): SELECT group mode, aggregation jobs."""
        if len(msg) < 16:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        exp_id, exp_type = struct.unpack_from("!II", msg, 8)
        if exp_id != ofext.EMU_EXPERIMENTER_ID:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_EXPERIMENTER)
        unpack = _EXP_UNPACK.get(exp_type)
        if unpack is None:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_EXP_TYPE)
        try:
            req = unpack(msg[16:])
        except ofext.ExtensionError as exc:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN, str(exc)) from exc
        if exp_type == ofext.EXP_AGG_JOB_SET:
            self.model.agg.job_set(req)
        elif exp_type == ofext.EXP_AGG_JOB_DEL:
            self.model.agg.job_del(req)
        else:
            self.model.pipeline.set_select_mode(req)
        return []

    # ----- multipart ---------------------------------------------------------

    def _multipart(self, msg: bytes, xid: int) -> list[Effect]:
        """A multipart request, answered by the body handler of its type in `_MULTIPART`."""
        if len(msg) < 16:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        mp_type, _flags = struct.unpack_from("!HH", msg, 8)
        entries_for = self._MULTIPART.get(mp_type)
        if entries_for is None:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_MULTIPART)
        entries = entries_for(self, msg[16:], self._now)
        return [Reply(m) for m in codec.multipart_replies(mp_type, entries, xid)]

    # Each `_mp_*` takes a request's body and `now` and returns the reply's entries.

    def _mp_desc(self, body: bytes, now: float) -> list[bytes]:
        """The switch description."""
        return [codec.desc(self.model.dp_desc)]

    def _mp_port_desc(self, body: bytes, now: float) -> list[bytes]:
        """Every port's description, by port number."""
        return [codec.ofp_port(self.model.ports[p]) for p in sorted(self.model.ports)]

    def _mp_port_stats(self, body: bytes, now: float) -> list[bytes]:
        """One port's counters, or every port's for OFPP_ANY."""
        if len(body) != 8:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        (port,) = struct.unpack_from("!I", body, 0)
        if port == ofp.OFPP_ANY:
            ports = [self.model.ports[p] for p in sorted(self.model.ports)]
        elif port in self.model.ports:
            ports = [self.model.ports[port]]
        else:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT)
        return [codec.port_stats_entry(p, now) for p in ports]

    def _flow_stats_filter(self, body: bytes) -> dict:
        """The table/out_port/out_group/cookie/match filter of a flow or aggregate request."""
        if len(body) < 32:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        tid, out_port, out_group, cookie, cmask = struct.unpack_from("!B3xII4xQQ", body, 0)
        if tid != ofp.OFPTT_ALL and tid >= self.model.n_tables:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TABLE_ID)
        match, end = codec.read_match(body, 32, len(body))
        if end != len(body):
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        return dict(
            table_id=tid,
            out_port=out_port,
            out_group=out_group,
            cookie=cookie,
            cookie_mask=cmask,
            match=match,
        )

    def _mp_flow(self, body: bytes, now: float) -> list[bytes]:
        """The counters of each flow entry the filter selects."""
        entries = self.model.pipeline.flow_stats(**self._flow_stats_filter(body))
        return [codec.flow_stats_entry(e, now) for e in entries]

    def _mp_aggregate(self, body: bytes, now: float) -> list[bytes]:
        """The summed counters of the flow entries the filter selects."""
        pl = self.model.pipeline
        return [struct.pack("!QQI4x", *pl.aggregate_stats(**self._flow_stats_filter(body)))]

    def _mp_table(self, body: bytes, now: float) -> list[bytes]:
        """Each table's lookup and match counters."""
        return [struct.pack("!B3xIQQ", *t) for t in self.model.pipeline.table_stats()]

    def _mp_group_desc(self, body: bytes, now: float) -> list[bytes]:
        """Every group's type and buckets, by group id."""
        groups = self.model.pipeline.groups
        return [codec.group_desc_entry(groups[g]) for g in sorted(groups)]

    def _mp_group(self, body: bytes, now: float) -> list[bytes]:
        """One group's counters (none if it does not exist), or every group's for OFPG_ALL."""
        if len(body) != 8:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        (gid,) = struct.unpack_from("!I", body, 0)
        pl = self.model.pipeline
        gids = sorted(pl.groups) if gid == ofp.OFPG_ALL else [g for g in [gid] if g in pl.groups]
        return [codec.group_stats_entry(pl.groups[g], pl.group_ref_count(g), now) for g in gids]

    def _mp_group_features(self, body: bytes, now: float) -> list[bytes]:
        """The group types and capabilities the pipeline supports."""
        return [codec.group_features(self.model.pipeline.group_features())]

    def _selected_meters(self, body: bytes) -> list:
        """The meters a meter or meter-config request names (OFPM_ALL for all)."""
        if len(body) != 8:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        (meter_id,) = struct.unpack_from("!I", body, 0)
        return self.model.pipeline.meters.select(meter_id)

    def _mp_meter(self, body: bytes, now: float) -> list[bytes]:
        """The counters of the meters the request names."""
        pl = self.model.pipeline
        meters = self._selected_meters(body)
        return [codec.meter_stats_entry(m, pl.meter_flow_count(m), now) for m in meters]

    def _mp_meter_config(self, body: bytes, now: float) -> list[bytes]:
        """The bands of the meters the request names."""
        return [codec.meter_config_entry(m) for m in self._selected_meters(body)]

    def _mp_queue(self, body: bytes, now: float) -> list[bytes]:
        """One queue's or every queue's counters, of one port or every port."""
        if len(body) != 8:
            raise OFError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)
        port, queue = struct.unpack_from("!II", body, 0)
        counters = self.model.queue_counters()
        if port != ofp.OFPP_ANY and port not in counters:
            raise OFError(ofp.OFPET_QUEUE_OP_FAILED, ofp.OFPQOFC_BAD_PORT)
        if queue != ofp.OFPQ_ALL and queue >= N_QUEUES:
            raise OFError(ofp.OFPET_QUEUE_OP_FAILED, ofp.OFPQOFC_BAD_QUEUE)
        sec = int(max(0.0, now - self.model.queues_since))
        nsec = int((max(0.0, now - self.model.queues_since) - sec) * 1e9)
        out = []
        for p in sorted(counters) if port == ofp.OFPP_ANY else [port]:
            for q, (tx_bytes, tx_packets, tx_errors) in enumerate(counters[p]):
                if queue in (ofp.OFPQ_ALL, q):
                    out.append(
                        struct.pack("!IIQQQII", p, q, tx_bytes, tx_packets, tx_errors, sec, nsec)
                    )
        return out

    def _mp_meter_features(self, body: bytes, now: float) -> list[bytes]:
        """The meter band types and limits the pipeline supports."""
        return [codec.meter_features(self.model.pipeline.meters.features())]

    def _mp_table_features(self, body: bytes, now: float) -> list[bytes]:
        """Each table's features; a request with a body would set them, which is refused."""
        if body:
            raise OFError(ofp.OFPET_TABLE_FEATURES_FAILED, ofp.OFPTFFC_EPERM)
        n_tables = self.model.n_tables
        return [codec.table_features(t, n_tables, "table%d" % t) for t in range(n_tables)]

    _MULTIPART: dict[int, Callable] = {
        ofp.OFPMP_DESC: _mp_desc,
        ofp.OFPMP_PORT_DESC: _mp_port_desc,
        ofp.OFPMP_PORT_STATS: _mp_port_stats,
        ofp.OFPMP_FLOW: _mp_flow,
        ofp.OFPMP_AGGREGATE: _mp_aggregate,
        ofp.OFPMP_TABLE: _mp_table,
        ofp.OFPMP_GROUP_DESC: _mp_group_desc,
        ofp.OFPMP_GROUP: _mp_group,
        ofp.OFPMP_GROUP_FEATURES: _mp_group_features,
        ofp.OFPMP_METER: _mp_meter,
        ofp.OFPMP_METER_CONFIG: _mp_meter_config,
        ofp.OFPMP_QUEUE: _mp_queue,
        ofp.OFPMP_METER_FEATURES: _mp_meter_features,
        ofp.OFPMP_TABLE_FEATURES: _mp_table_features,
    }

    _HANDLERS: dict[int, Callable] = {
        ofp.OFPT_ECHO_REQUEST: _echo_request,
        ofp.OFPT_ECHO_REPLY: _ignore,
        ofp.OFPT_ERROR: _error_in,
        ofp.OFPT_EXPERIMENTER: _experimenter,
        ofp.OFPT_FEATURES_REQUEST: _features,
        ofp.OFPT_GET_CONFIG_REQUEST: _get_config,
        ofp.OFPT_SET_CONFIG: _set_config,
        ofp.OFPT_PACKET_OUT: _packet_out,
        ofp.OFPT_FLOW_MOD: _flow_mod,
        ofp.OFPT_GROUP_MOD: _group_mod,
        ofp.OFPT_PORT_MOD: _port_mod,
        ofp.OFPT_TABLE_MOD: _table_mod,
        ofp.OFPT_MULTIPART_REQUEST: _multipart,
        ofp.OFPT_BARRIER_REQUEST: _barrier,
        ofp.OFPT_QUEUE_GET_CONFIG_REQUEST: _queue_get_config,
        ofp.OFPT_ROLE_REQUEST: _role,
        ofp.OFPT_GET_ASYNC_REQUEST: _get_async,
        ofp.OFPT_SET_ASYNC: _set_async,
        ofp.OFPT_METER_MOD: _meter_mod,
    }

    # ----- asynchronous messages ----------------------------------------------

    def _slot(self) -> int:
        return 1 if self.role == ofp.OFPCR_ROLE_SLAVE else 0

    def packet_in(self, record: PacketIn) -> Optional[bytes]:
        """OFPT_PACKET_IN for this channel, or None when role/async config/port
        config (OFPPC_NO_PACKET_IN) says this controller must not get it."""
        if self.closed or not self.is_controller_channel:
            return None
        if not self.packet_in_mask[self._slot()] >> record.reason & 1:
            return None
        p = self.model.ports.get(record.in_port)
        if p is not None and p.config & OFPPC_NO_PACKET_IN:
            return None
        data = record.frame
        if record.max_len != ofp.OFPCML_NO_BUFFER:
            data = data[: record.max_len]
        return codec.packet_in(
            0,
            ofp.OFP_NO_BUFFER,
            len(record.frame),
            record.reason,
            record.table_id,
            record.cookie,
            record.in_port,
            record.metadata,
            data,
        )

    def port_status(self, reason: int, port: PortState) -> Optional[bytes]:
        """OFPT_PORT_STATUS (reason OFPPR_ADD/DELETE/MODIFY), or None if masked."""
        if self.closed or not self.is_controller_channel:
            return None
        if not self.port_status_mask[self._slot()] >> reason & 1:
            return None
        return codec.port_status(reason, port)

    def flow_removed(self, entry: FlowEntry, now: Optional[float] = None) -> Optional[bytes]:
        """OFPT_FLOW_REMOVED for an entry with OFPFF_SEND_FLOW_REM, else None."""
        if self.closed or not self.is_controller_channel:
            return None
        if not entry.flags & ofp.OFPFF_SEND_FLOW_REM:
            return None
        reason = entry.removed_reason or 0
        if not self.flow_removed_mask[self._slot()] >> reason & 1:
            return None
        return codec.flow_removed(entry, now if now is not None else entry.ctr.used)

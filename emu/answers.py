"""Typed management answers: what a switch's or a NIC agent's management socket says,
decoded in one place.

A switch answers `ports` and `counters` (emu/switch/reports.py), a NIC agent
`stats` (emu/host/rnic.py `Rnic.stats`, the C engine's `CRnic.stats` with the
same keys) as JSON: numbers keyed by strings, a (port, priority) queue spelled
"3:2", a queue pair's number as a string. Scenarios, labs and benches read
them through these dataclasses instead (`Fabric.port_stats`, `Fabric.counters`,
`RdmaHosts.nic_stats`): keys become the ints and tuples they stand for, and a
renamed field fails here, by name, not as a KeyError deep in a report.

Each `decode` takes the answer as JSON gave it and keeps only the fields
declared below; what a reader needs next is added here, beside its meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

PortQueue = tuple[int, int]  # (port number, priority)


class AnswerError(ValueError):
    """A management answer without a field its type declares (the two sides disagree)."""


def _flat(cls, doc: dict, **decoded: Any):
    """`cls` from the answer `doc`: each declared field from `decoded`, else `doc`."""
    return cls(
        **{
            f.name: decoded[f.name] if f.name in decoded else _need(cls, doc, f.name)
            for f in fields(cls)
        }
    )


def _need(cls, doc: dict, key: str) -> Any:
    """`doc[key]`, or an AnswerError naming what `cls` missed."""
    if key not in doc:
        raise AnswerError(f"{cls.__name__}: the answer has no {key!r}")
    return doc[key]


def by_queue(counts: dict) -> dict[PortQueue, Any]:
    """{"3:2": n} -> {(3, 2): n}."""
    out = {}
    for key, value in counts.items():
        port, prio = key.split(":")
        out[(int(port), int(prio))] = value
    return out


def queues_of(names) -> frozenset[PortQueue]:
    """["3:2", ...] -> {(3, 2), ...}."""
    return frozenset(by_queue({name: None for name in names}))


def by_port(counts: dict) -> dict[int, Any]:
    """{"3": x} -> {3: x} (JSON keys a dict by port number as a string)."""
    return {int(port): value for port, value in counts.items()}


# ----- a switch ----------------------------------------------------------------------


@dataclass(frozen=True)
class PortStats:
    """One port of `ctl SWITCH ports`: OpenFlow's port statistics and the port's state."""

    port_no: int
    name: str
    hw_addr: str
    rate_bps: int
    link_up: bool
    config: int
    rx_packets: int
    tx_packets: int
    rx_bytes: int
    tx_bytes: int
    rx_dropped: int
    tx_dropped: int
    rx_errors: int
    tx_errors: int
    queue_bytes: list  # bytes queued per priority now

    @classmethod
    def decode(cls, doc: dict) -> PortStats:
        return _flat(cls, doc)


@dataclass(frozen=True)
class QueueCounters:
    """One (port, priority) egress queue since the switch started (emu/switch/scheduler.py)."""

    enqueued_packets: int
    enqueued_bytes: int
    tx_packets: int
    tx_bytes: int
    dropped_packets: int
    dropped_bytes: int
    watermark_bytes: int

    @classmethod
    def decode(cls, doc: dict) -> QueueCounters:
        return _flat(cls, doc)


@dataclass(frozen=True)
class BufferState:
    """The shared buffer (emu/switch/buffer.py): occupancy and its counters, per
    (port, priority) queue where the switch counts them so."""

    size_bytes: int
    shared_used_bytes: int
    shared_watermark_bytes: int
    xoff_threshold_bytes: int
    drops: dict  # cause -> frames
    drops_by_queue: dict[PortQueue, int]
    ecn_marks: dict[PortQueue, int]
    xoff_sent: dict[PortQueue, int]
    xon_sent: dict[PortQueue, int]
    paused_upstream: frozenset[PortQueue]
    ingress_bytes: dict[PortQueue, int]
    headroom_used_bytes: dict[PortQueue, int]
    egress_bytes: dict[PortQueue, int]
    egress_watermark_bytes: dict[PortQueue, int]

    @classmethod
    def decode(cls, doc: dict) -> BufferState:
        queues = (
            "drops_by_queue",
            "ecn_marks",
            "xoff_sent",
            "xon_sent",
            "ingress_bytes",
            "headroom_used_bytes",
            "egress_bytes",
            "egress_watermark_bytes",
        )
        return _flat(
            cls,
            doc,
            paused_upstream=queues_of(_need(cls, doc, "paused_upstream")),
            **{k: by_queue(_need(cls, doc, k)) for k in queues},
        )


@dataclass(frozen=True)
class CreditLane:
    """One virtual lane of a credit link (emu/credit.py `CreditLink.stats`)."""

    credit_blocks: int
    fctbs: int
    fccl_rx: int
    abr: int
    fccl_tx: int
    blocked_s: float
    blocked_count: int
    blocked_now: bool
    tx_frames: int
    rx_frames: int
    overruns: int
    abr_resyncs: int
    fc_tx: int
    fc_rx: int

    @classmethod
    def decode(cls, doc: dict) -> CreditLane:
        return _flat(cls, doc)


def credit_lanes(doc: dict) -> dict[int, CreditLane]:
    """{"3": lane} of a credit link -> {3: CreditLane}."""
    return {int(vl): CreditLane.decode(lane) for vl, lane in doc.items()}


@dataclass(frozen=True)
class CreditState:
    """A switch's credit links (a credit fabric; none otherwise): per port, its lanes;
    flow control frames sent and received per port."""

    links: dict[int, dict[int, CreditLane]]
    fc_tx_frames: dict[int, int]
    fc_rx_frames: dict[int, int]

    @classmethod
    def decode(cls, doc: dict) -> CreditState:
        return cls(
            links={int(p): credit_lanes(lanes) for p, lanes in _need(cls, doc, "links").items()},
            fc_tx_frames=by_port(_need(cls, doc, "fc_tx_frames")),
            fc_rx_frames=by_port(_need(cls, doc, "fc_rx_frames")),
        )


@dataclass(frozen=True)
class WatchdogState:
    """The PFC watchdog (emu/switch/watchdog.py): storms found, queues restored, drops."""

    detected: int
    restored: int
    drops: int
    stormed: frozenset[PortQueue]  # queues it holds as storming now

    @classmethod
    def decode(cls, doc: dict) -> WatchdogState:
        return _flat(cls, doc, stormed=queues_of(_need(cls, doc, "stormed")))


@dataclass(frozen=True)
class PfcState:
    """PFC on the switch's ports: PAUSE received per queue, PFC frames sent per port, and
    how long each port's priorities have been paused."""

    pause_rx: dict[PortQueue, int]
    pfc_tx_frames: dict[int, int]
    paused_s: dict[int, list]  # port -> seconds paused per priority

    @classmethod
    def decode(cls, doc: dict) -> PfcState:
        return _flat(
            cls,
            doc,
            pause_rx=by_queue(_need(cls, doc, "pause_rx")),
            pfc_tx_frames=by_port(_need(cls, doc, "pfc_tx_frames")),
            paused_s=by_port(_need(cls, doc, "paused_s")),
        )


@dataclass(frozen=True)
class GroupMode:
    """A SELECT group's mode (emu/switch/adaptive.py `SelectMode.describe`)."""

    mode: str  # "hash", "flowlet", "adaptive" or "ugal"
    gap_s: float | None = None  # flowlet mode's gap
    classes: tuple[int, ...] = ()  # adaptive and UGAL modes' priorities
    bias_bytes: int = 0  # UGAL mode's bias on the non-minimal side

    @classmethod
    def decode(cls, doc: dict) -> GroupMode:
        return cls(
            _need(cls, doc, "mode"),
            doc.get("gap_s"),
            tuple(doc.get("classes", ())),
            doc.get("bias_bytes", 0),
        )


@dataclass(frozen=True)
class AdaptiveState:
    """Per-packet adaptive routing in one switch: the modes, and the decisions both data
    planes made (emu/switch/reports.py `adaptive`)."""

    default: GroupMode  # every SELECT group not listed in `groups`
    groups: dict[int, GroupMode]  # group id -> its own mode
    decisions: int  # packets placed on the least-queued port
    paused_skips: int  # ports passed over because PFC paused them for the packet's class
    all_paused: int  # decisions that found every port paused (and chose among all)
    picks: dict[int, int]  # egress port -> packets placed there
    ugal_decisions: int  # packets a UGAL group placed (dragonfly, controllers/ugal.py)
    ugal_nonminimal: int  # ... on a path longer than the minimal one (Valiant)

    @classmethod
    def decode(cls, doc: dict) -> AdaptiveState:
        return _flat(
            cls,
            doc,
            default=GroupMode.decode(_need(cls, doc, "default")),
            groups={int(g): GroupMode.decode(m) for g, m in _need(cls, doc, "groups").items()},
            picks=by_port(_need(cls, doc, "picks")),
        )


@dataclass(frozen=True)
class SwitchCounters:
    """`ctl SWITCH counters`: the parts scenarios and labs read, typed."""

    time: float  # unix time of the answer
    queues: dict[int, list]  # port -> [QueueCounters per priority]
    kernel_rx_drops: dict[int, int]
    buffer: BufferState
    watchdog: WatchdogState
    pfc: PfcState
    credit: CreditState
    malformed_frames: int
    lost_frames: dict[int, int]  # per port, by a lossy-link fault
    adaptive: AdaptiveState

    @classmethod
    def decode(cls, doc: dict) -> SwitchCounters:
        return _flat(
            cls,
            doc,
            queues={
                int(port): [QueueCounters.decode(q) for q in prios]
                for port, prios in _need(cls, doc, "queues").items()
            },
            kernel_rx_drops=by_port(_need(cls, doc, "kernel_rx_drops")),
            buffer=BufferState.decode(_need(cls, doc, "buffer")),
            watchdog=WatchdogState.decode(_need(cls, doc, "watchdog")),
            pfc=PfcState.decode(_need(cls, doc, "pfc")),
            credit=CreditState.decode(_need(cls, doc, "credit")),
            lost_frames=by_port(_need(cls, doc, "lost_frames")),
            adaptive=AdaptiveState.decode(_need(cls, doc, "adaptive")),
        )

    def queue_tx_packets(self, prio: int) -> int:
        """Frames every port sent from priority `prio`'s queue."""
        return sum(prios[prio].tx_packets for prios in self.queues.values())


@dataclass(frozen=True)
class WatchdogEvent:
    """A storm the PFC watchdog declared on a queue, or its restoration."""

    t: float  # the switch's monotonic clock
    kind: str  # "storm" or "restored"
    port: int
    prio: int
    wall: float | None  # unix time, when the switch knew it

    @classmethod
    def decode(cls, doc: dict) -> WatchdogEvent:
        return _flat(cls, doc, wall=doc.get("wall"))


@dataclass(frozen=True)
class WatchdogReport:
    """`ctl SWITCH watchdog`: its settings, its last events, what storms now, its counts."""

    spec: dict  # emu.config.WatchdogSpec's fields
    events: list  # [WatchdogEvent], oldest first
    stormed: frozenset[PortQueue]
    detected: int
    restored: int
    drops: int

    @classmethod
    def decode(cls, doc: dict) -> WatchdogReport:
        return _flat(
            cls,
            doc,
            events=[WatchdogEvent.decode(e) for e in _need(cls, doc, "events")],
            stormed=queues_of(_need(cls, doc, "stormed")),
        )


@dataclass(frozen=True)
class FlowStats:
    """One flow entry of `ctl SWITCH flows` (OpenFlow's flow statistics, as text)."""

    table: int
    priority: int
    cookie: str
    match: dict  # field -> value as ovs-ofctl spells it
    instructions: list  # each instruction as text
    packets: int
    bytes: int
    duration_s: float

    @classmethod
    def decode(cls, doc: dict) -> FlowStats:
        return _flat(cls, doc)


@dataclass(frozen=True)
class GroupStats:
    """One group of `ctl SWITCH groups`: its type, its buckets (each a dict of weight,
    watch_port, actions as text and counters) and how a SELECT group picks one."""

    group_id: int
    type: str
    buckets: list
    packets: int
    bytes: int
    mode: dict | None

    @classmethod
    def decode(cls, doc: dict) -> GroupStats:
        return _flat(cls, doc)


@dataclass(frozen=True)
class QueueSnapshot:
    """`ctl SWITCH queues`: depth and PFC state now, per port and priority (cheap to
    sample often)."""

    time: float  # unix time of the answer
    depth_bytes: dict[int, list]  # port -> bytes queued per priority
    paused: dict[int, list]  # port -> whether each priority is paused
    tx_bytes: dict[int, int]
    blocked: dict[int, list]  # credit links: port -> whether each VL waits for credit

    @classmethod
    def decode(cls, doc: dict) -> QueueSnapshot:
        return _flat(
            cls,
            doc,
            **{k: by_port(_need(cls, doc, k)) for k in ("depth_bytes", "paused", "tx_bytes")},
            blocked=by_port(_need(cls, doc, "blocked")),
        )


@dataclass(frozen=True)
class LivePort:
    """One port of `ctl SWITCH live` (what the live view draws): totals since start."""

    port_no: int
    name: str
    link_up: bool
    rate_bps: int
    tx_bytes: int
    rx_bytes: int
    depth_bytes: list
    paused_now: list  # priorities paused now
    paused_s: list  # seconds paused per priority
    pausing: list  # priorities this port's switch holds its peer paused on
    pause_rx_frames: list
    pause_tx_frames: list
    ecn_marks: list
    drops: int

    @classmethod
    def decode(cls, doc: dict) -> LivePort:
        return _flat(cls, doc)


@dataclass(frozen=True)
class TelemetryRow:
    """One port's sample of `ctl SWITCH telemetry` (every 100 ms, emu/switch/datapath.py
    `_sample_telemetry`): per priority its depth, whether paused, ECN marks, bytes sent."""

    t: float  # unix time
    port: int
    tx_bytes: int
    depth_bytes: list
    paused: list
    ecn_marks: list
    queue_tx_bytes: list

    @classmethod
    def decode(cls, row: list) -> TelemetryRow:
        per_prio = row[3:]
        if len(row) < 3 or len(per_prio) % 4:
            raise AnswerError(f"TelemetryRow: {len(row)} fields, not 3 + 4 per priority")
        return cls(
            row[0],
            row[1],
            row[2],
            per_prio[0::4],
            [bool(p) for p in per_prio[1::4]],
            per_prio[2::4],
            per_prio[3::4],
        )


# ----- a NIC -------------------------------------------------------------------------


@dataclass(frozen=True)
class SendQp:
    """A queue pair's sending side (emu/host/rnic.py `QpSend`)."""

    tx_packets: int
    tx_bytes: int
    tx_payload_bytes: int
    rnr_naks: int
    retransmitted: int
    naks: int
    timeouts: int
    cnps: int
    una: int
    next_psn: int
    end_psn: int
    rate_bps: float
    completed: list  # [(msg_id, size_bytes, posted_at, completed_at)]
    pending_messages: int

    @classmethod
    def decode(cls, doc: dict) -> SendQp:
        return _flat(cls, doc, completed=[tuple(m) for m in _need(cls, doc, "completed")])


@dataclass(frozen=True)
class RecvQp:
    """A queue pair's receiving side (emu/host/rnic.py `QpRecv`)."""

    rx_packets: int
    rx_bytes: int
    out_of_order: int
    duplicates: int
    ce_marked: int
    expected_psn: int
    messages_received: int
    inbox_messages: int
    inbox_bytes: int
    rnr_naks_sent: int
    discarded_packets: int
    discarded_bytes: int
    naks_sent: int  # PSN-sequence NAKs: every gap (strict), or a lost PSN (selective)
    reorder_depth_max: int  # the deepest reordering seen, in PSNs past the expected one
    beyond_window: int  # packets dropped past the reorder window (selective)

    @classmethod
    def decode(cls, doc: dict) -> RecvQp:
        return _flat(cls, doc)


@dataclass(frozen=True)
class NicStats:
    """A NIC agent's `stats`: its queue pairs by number, PAUSE and CNPs, its buffer."""

    send: dict[int, SendQp]
    recv: dict[int, RecvQp]
    pause_rx: list  # PAUSE frames received per priority
    paused_s: list  # seconds paused per priority
    pause_tx: int
    cnps_sent: int
    rx_overflow: int
    stuck: bool
    loss_recovery: str
    fc_tx: int
    fc_rx: int
    credit_overruns: int
    credit: dict[int, CreditLane] | None  # per VL on a credit link; None on PFC

    @classmethod
    def decode(cls, doc: dict) -> NicStats:
        credit = _need(cls, doc, "credit")
        return _flat(
            cls,
            doc,
            credit=None if credit is None else credit_lanes(credit),
            send={int(q): SendQp.decode(s) for q, s in _need(cls, doc, "send").items()},
            recv={int(q): RecvQp.decode(r) for q, r in _need(cls, doc, "recv").items()},
        )


@dataclass(frozen=True)
class NicSample:
    """One of a NIC agent's periodic samples (`samples`): per queue pair, the bytes
    sent and received so far and DCQCN's rate (None without DCQCN)."""

    t: float  # the machine's monotonic clock, which every agent shares
    tx_bytes: dict[int, int]
    rx_bytes: dict[int, int]
    rate_bps: dict[int, float | None]

    @classmethod
    def decode(cls, row: list) -> NicSample:
        if len(row) != 4:
            raise AnswerError(f"NicSample: a sample of {len(row)} fields, not 4")
        t, tx, rx, rate = row
        return cls(t, by_port(tx), by_port(rx), by_port(rate))

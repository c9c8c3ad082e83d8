"""The RDMA NIC model: RoCEv2 reliable connections, DCQCN, PFC at the host.

Owns one NIC's transport state: queue pairs (a sender side that segments
messages into RoCEv2 SEND packets, paces them at the link rate and at the
DCQCN rate, and recovers losses on NAK or retransmit timeout; a receiver side
that delivers in PSN order, acknowledges, NAKs the first gap, or holds what
arrives out of order, and answers CE marks with CNPs: emu/host/responder.py),
the NIC's loss recovery (`NicConfig.loss_recovery`, below), the host's PFC
behaviour (honour a received PAUSE per priority; send PAUSE when the receive
buffer fills because the host drains slowly, or continuously when the NIC is
stuck) or, on a credit link
(`NicConfig.credit`), the host's end of the credit loop instead (emu/credit.py:
its frames on a credit VL, data and ACKs alike, go only with credit from the
switch, and it returns credit for its receive buffer as flow control
frames; a stuck NIC returns none), the counters, and
the next sequence number of each in-network aggregation job it sends for
(`agg_next_seq`: emu/host/sharp.py's frames, which live as long as the NIC).

Messages carry either pattern bytes (only their size matters: most
workloads) or real data (`post_send(..., data=...)`: collectives). A QP whose
receive side delivers data (`set_deliver_data`) reassembles each message in
PSN order (go-back-N accepts nothing else; "selective" keeps the payloads
that arrive early at their place until the PSNs below arrive) and queues it
whole on `RecvQP.inbox`, read with `take_messages`; other QPs keep no
payload bytes.

Pure: every method takes `now`; `receive(frame)` returns frames to send back
at once (ACK, NAK, CNP, PAUSE), `next_frame(now)` the next data frame the
pacing allows. The agent (`agent.py`) owns the socket and the clock.
PSNs are unbounded integers inside and 24-bit on the wire.

Loss recovery (`NicConfig.loss_recovery`):
- "go-back-n" (the default; IBA 9.7.5 and today's NICs): a NAK names the
  first missing PSN and the requester resends from there.
- "go-back-0": the NIC firmware that Guo et al., "RDMA over Commodity
  Ethernet at Scale" (SIGCOMM 2016, section 4: transport livelock) found,
  which restarts the whole message from its first packet. The responder
  keeps no partial message across a gap: it discards what it holds of the
  message in progress and NAKs that message's first PSN; the requester
  rewinds there (on a timeout too). The responder's side is modelled on
  HPCC's ns-3 RDMA (rdma-hw.cc, `m_backto0`: the expected sequence falls
  back to the chunk's start with the NAK). A message of M packets then gets
  through only if all M arrive in one attempt: with random loss 1/256 that
  is (255/256)^M, and under a deterministic drop of every 256th packet it
  never happens once M >= 256: a livelock.
- "selective": the NIC that adaptive routing pairs with (IRN, Mittal et al.,
  SIGCOMM 2018; NVIDIA ConnectX's out-of-order data placement). The
  responder holds packets that arrive ahead of the expected PSN in a window
  (`ooo_window_packets`), places each at its offset and NAKs nothing for
  them; the cumulative ACK and the messages' completions follow the PSNs as
  they become contiguous. A gap is a loss when the window overflows or when
  a packet above it has been held for half the RTO; the responder then NAKs
  each missing PSN and the requester resends those alone. Its timeout goes
  back N. emu/host/reorder.py says why and where it departs from IRN.
  Both ends of a connection must run it (as both need OOO support on
  ConnectX): a strict requester would take its NAKs for go-back-N.

Every mode counts, per receiving QP, the packets that arrived ahead of the
expected PSN (`out_of_order`), the largest distance ahead (`reorder_depth_max`)
and the sequence NAKs sent (`naks_sent`); per sending QP the NAKs received
(`naks`), the packets resent (`retransmitted`) and the timeouts.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from emu.config import CreditSpec
from emu.credit import CreditLink
from emu.fidelity import PortClock, early_departure_s
from emu.host.dcqcn import DcqcnSpec, NotificationPoint, ReactionPoint
from emu.host.reorder import ReorderWindow
from emu.host.responder import (  # noqa: F401 (also rnic's names, as before the split)
    INBOX_MESSAGE_OVERHEAD_BYTES,
    MIN_RNR_TIMER,
    RecvQP,
    Responder,
)
from emu.proto import credit as ibfc
from emu.proto import pfc, roce

DEFAULT_MTU_PAYLOAD = 1024  # RoCE path MTU (IB MTU 1024)
ACK_EVERY = 4  # request an ACK every N packets (and on a message's last)
MAX_OUTSTANDING_PACKETS = 512  # go-back-N window
DATA_PRIO = 3  # DESIGN.md: DSCP 26 -> priority 3
# A second lossless class for QPs that ask for it (`connect(dscp=...)`): DSCP 34
# (AF41) -> priority 4, as the switch classifies (emu/switch/datapath.py).
DSCP_SECOND_CLASS = 34
SECOND_CLASS_PRIO = 4
# How far the wire's virtual clock may lag behind a late loop and still catch up.
WIRE_CATCH_UP_S = 0.001
_SEND_OPS = {
    "first": roce.SEND_FIRST,
    "middle": roce.SEND_MIDDLE,
    "last": roce.SEND_LAST,
    "only": roce.SEND_ONLY,
}
_WRITE_OPS = {
    "first": roce.RDMA_WRITE_FIRST,
    "middle": roce.RDMA_WRITE_MIDDLE,
    "last": roce.RDMA_WRITE_LAST,
    "only": roce.RDMA_WRITE_ONLY,
}
CNP_PRIO = 6
# IBA table 45 (RNR NAK timer field): code -> seconds. Code 12 (0.64 ms) is
# what rdma-core's ibv_rc_pingpong asks for as min_rnr_timer.
RNR_TIMER_S = (
    655.36e-3,
    0.01e-3,
    0.02e-3,
    0.03e-3,
    0.04e-3,
    0.06e-3,
    0.08e-3,
    0.12e-3,
    0.16e-3,
    0.24e-3,
    0.32e-3,
    0.48e-3,
    0.64e-3,
    0.96e-3,
    1.28e-3,
    1.92e-3,
    2.56e-3,
    3.84e-3,
    5.12e-3,
    7.68e-3,
    10.24e-3,
    15.36e-3,
    20.48e-3,
    30.72e-3,
    40.96e-3,
    61.44e-3,
    81.92e-3,
    122.88e-3,
    163.84e-3,
    245.76e-3,
    327.68e-3,
    491.52e-3,
)
GO_BACK_N = "go-back-n"
GO_BACK_0 = "go-back-0"
SELECTIVE = "selective"
LOSS_RECOVERY = (GO_BACK_N, GO_BACK_0, SELECTIVE)


@dataclass
class NicConfig:
    """One NIC: its addresses, link rate, and the congestion and PFC behaviour."""

    mac: str
    ip: str
    rate_bps: int
    mtu_payload: int = DEFAULT_MTU_PAYLOAD
    # Retransmit timeout from the send time of the oldest unacknowledged packet,
    # in modelled time (scaled like DCQCN's timers): the IBA local ACK timeout
    # 4.096 us x 2^14 = 67 ms (NCCL_IB_TIMEOUT=14). Lossless queues at emulated
    # rates hold a packet for seconds, which a shorter timeout would take for a loss.
    rto_modelled_s: float = 4.096e-6 * 2**14
    # The longest round trip a packet and its ACK can take through this NIC's
    # fabric without being lost, in emulated seconds: the lossless buffer bound
    # (emu/host/rto.py, from the path's switch buffers and link rates). The RTO
    # is never below it, whatever the time scale (issue 29). 0: no fabric known.
    path_rtt_bound_s: float = 0.0
    dcqcn: bool = True
    dcqcn_spec: DcqcnSpec | None = None
    # The hardware the emulated link stands for: DCQCN's timers and rate steps
    # are scaled by modelled/emulated rate (DESIGN.md, time scale). 25 Gbit/s:
    # the NIC speed of the HPCC/DCQCN ns-3 configurations.
    modelled_rate_bps: float = 25e9
    rx_buffer_bytes: int = 256 * 1024
    rx_xoff_bytes: int = 128 * 1024
    rx_xon_bytes: int = 64 * 1024
    drain_rate_bps: float | None = None  # None: the host consumes at once
    pfc_quanta: int = 0xFFFF
    # Received data messages not yet taken by the host, per QP. Beyond it the
    # responder answers RNR NAK (IBA 9.7.5.2.8: receiver not ready) and the
    # requester retries after the RNR timer, as a verbs QP without posted
    # receive buffers does. The agent takes messages every loop turn, so this
    # is a guard against a consumer that stopped, not a working limit; a
    # single message must fit in it.
    inbox_max_bytes: int = 64 << 20
    # How a loss is recovered (module docstring): "go-back-n", "go-back-0" or "selective".
    loss_recovery: str = GO_BACK_N
    # "selective": how many PSNs from the expected one the responder can hold out
    # of order (its bitmap, emu/host/reorder.py). The requester's window: a NIC
    # whose peer is like it never sees a PSN beyond it.
    ooo_window_packets: int = MAX_OUTSTANDING_PACKETS
    # Credit-based link flow control instead of PFC (emu/credit.py); None: PFC.
    # The NIC's receive buffer is what it advertises (up to 2048 blocks).
    credit: CreditSpec | None = None


def retransmit_timeout_s(cfg: NicConfig) -> float:
    """The NIC's retransmit timeout in emulated seconds (issue 29).

    The IBA local ACK timeout on the modelled clock (`rto_modelled_s` x
    modelled/emulated rate), but never below the fabric's worst round trip
    (`path_rtt_bound_s`, emu/host/rto.py's lossless buffer bound): a timeout
    that expires while the packet is only queued resends a window into the
    queue that delayed it.
    """
    return max(cfg.rto_modelled_s * cfg.modelled_rate_bps / cfg.rate_bps, cfg.path_rtt_bound_s)


def reorder_timeout_s(cfg: NicConfig) -> float:
    """How long a "selective" responder holds a packet above a gap before the gap is a loss.

    Half the retransmit timeout: at least the one-way lossless buffer bound,
    the longest a packet can lag behind a later one (emu/host/reorder.py).
    """
    return retransmit_timeout_s(cfg) / 2


def check_config(cfg: NicConfig) -> None:
    """Raise ValueError, naming the field, for a loss recovery or reorder window out of range."""
    if cfg.loss_recovery not in LOSS_RECOVERY:
        raise ValueError(
            f"loss_recovery={cfg.loss_recovery!r}: must be one of {', '.join(LOSS_RECOVERY)}"
        )
    window = cfg.ooo_window_packets
    if type(window) is not int or not 1 <= window <= MAX_OUTSTANDING_PACKETS:
        raise ValueError(
            f"ooo_window_packets={cfg.ooo_window_packets!r}: allowed 1..{MAX_OUTSTANDING_PACKETS}"
        )


@dataclass
class Message:
    msg_id: int
    size_bytes: int
    first_psn: int
    end_psn: int  # one past the last packet's PSN
    posted_at: float
    completed_at: float | None = None


@dataclass
class SendQP:
    """The requester side of one reliable connection."""

    qpn: int
    peer_qpn: int
    tmpl: roce.DataTemplate
    rp: ReactionPoint | None
    max_rate_bps: float | None = None  # a static cap (an application-paced flow)
    prio: int = DATA_PRIO  # the priority (virtual lane) its frames travel on, by their DSCP
    next_psn: int = 0
    una: int = 0  # oldest unacknowledged PSN
    end_psn: int = 0  # one past the last PSN posted
    next_tx_at: float = 0.0
    # When the QP last got something to send after having nothing (posted to an
    # idle QP, a window reopened, a rewind): the earliest its next frame may go.
    ready_since: float = 0.0
    last_progress: float = 0.0
    messages: deque = field(default_factory=deque)
    completed: list = field(default_factory=list)
    # psn -> (payload_len, opcode, ack_req, reth, data slice or None) of posted packets
    sizes: dict = field(default_factory=dict)
    sent_at: dict = field(default_factory=dict)  # psn -> when it was (last) sent
    freed: int = 0  # PSNs below this have left `sizes` (all acknowledged)
    # "selective": PSNs the responder NAKed, to resend before new ones, lowest first
    # (each in [una, next_psn); at most the window's MAX_OUTSTANDING_PACKETS).
    resend: list = field(default_factory=list)
    tx_packets: int = 0
    tx_bytes: int = 0  # frame bytes, retransmissions included
    tx_payload_bytes: int = 0  # payload bytes, retransmissions included
    rnr_naks: int = 0
    retransmitted: int = 0
    naks: int = 0
    timeouts: int = 0
    cnps: int = 0


class Rnic(Responder):
    """A NIC with its queue pairs; see the module docstring."""

    def __init__(self, cfg: NicConfig, now: float = 0.0) -> None:
        check_config(cfg)
        self.cfg = cfg
        self.go_back_0 = cfg.loss_recovery == GO_BACK_0
        self.selective = cfg.loss_recovery == SELECTIVE
        self.send_qps: dict[int, SendQP] = {}
        self.recv_qps: dict[int, RecvQP] = {}
        self.free_at = now  # the NIC's own wire (link-rate pacing)
        self.clock = PortClock(cfg.rate_bps)  # fidelity: lateness against that wire
        self.paused_until = [0.0] * 8  # PAUSE received, per priority
        self.paused_s = [0.0] * 8
        self.pause_rx = 0
        self.np = NotificationPoint(self._dcqcn_spec()) if cfg.dcqcn else None
        self.pfc_tmpl = pfc.template(cfg.mac)
        self.rx_buffer = 0.0  # bytes delivered but not yet consumed
        self.rx_drained_at = now
        self.rx_overflow = 0
        self.xoff = False
        self.next_pause_refresh = 0.0
        self.stuck = False
        self.pause_tx = 0
        self.cnps_sent = 0
        self._msg_ids = 0
        self.rto_s = retransmit_timeout_s(cfg)
        self.reorder_s = reorder_timeout_s(cfg)
        self._rr: deque[int] = deque()
        self.credit: CreditLink | None = None
        if cfg.credit is not None and cfg.credit.enabled:
            self.credit = CreditLink(
                cfg.credit, cfg.credit.priorities, cfg.rx_buffer_bytes, cfg.rate_bps, now
            )
            self.fc_tmpl = ibfc.template(cfg.mac)
        # Control frames (ACK, NAK) on a credit VL that wait for credit, oldest first.
        self.ctrl_q: deque[bytes] = deque()
        self.fc_tx = 0
        self.fc_rx = 0
        self.credit_overruns = 0
        # In-network aggregation (emu/host/sharp.py): the next sequence number per
        # aggregation job; it keeps growing across the job's all-reduces, since a
        # switch starts a new round on a slot only for a higher seq.
        self.agg_next_seq: dict[int, int] = {}

    def _dcqcn_spec(self) -> DcqcnSpec:
        return self.cfg.dcqcn_spec or DcqcnSpec.from_hardware(
            self.cfg.rate_bps, self.cfg.modelled_rate_bps
        )

    # ----- connections and work -------------------------------------------

    def connect(
        self,
        qpn: int,
        peer_qpn: int,
        peer_mac: str,
        peer_ip: str,
        udp_sport: int,
        now: float,
        max_rate_bps: float | None = None,
        dscp: int = roce.DSCP_DATA,
    ) -> None:
        """Create both sides of a reliable connection to (peer_ip, peer_qpn).

        `dscp` marks its data and ACKs, and so picks their priority (virtual
        lane): 26 the RoCE class 3 (the default), 34 the second lossless class 4.
        """
        if qpn in self.send_qps:
            raise ValueError(f"QP {qpn} exists")
        tmpl = roce.DataTemplate(
            self.cfg.mac, peer_mac, self.cfg.ip, peer_ip, udp_sport, peer_qpn, dscp=dscp
        )
        rp = ReactionPoint(self._dcqcn_spec(), now) if self.cfg.dcqcn else None
        self.send_qps[qpn] = SendQP(
            qpn,
            peer_qpn,
            tmpl,
            rp,
            max_rate_bps=max_rate_bps,
            prio=_DSCP_PRIO.get(dscp, 0),
            last_progress=now,
        )
        self.recv_qps[qpn] = RecvQP(qpn, peer_qpn, tmpl)
        if self.selective:
            self.recv_qps[qpn].ooo = ReorderWindow(self.cfg.ooo_window_packets)
        self._rr.append(qpn)

    @property
    def qpns(self) -> list[int]:
        """The connected queue pairs, in the order they were connected."""
        return list(self.send_qps)

    def take_completions(self, qpn: int, max_entries: int | None = None) -> list[tuple]:
        """(msg_id, size_bytes, posted_at, completed_at) of completed messages not taken before.

        Raises:
            ValueError: `qpn` is not connected.
        """
        qp = self.send_qps.get(qpn)
        if qp is None:
            raise ValueError(f"unknown QP {qpn}; connected: {sorted(self.send_qps)}")
        n = len(qp.completed) if max_entries is None else max_entries
        done, qp.completed[:] = qp.completed[:n], qp.completed[n:]
        return [(m.msg_id, m.size_bytes, m.posted_at, m.completed_at) for m in done]

    def qp_counters(self, qpn: int) -> dict:
        """Both sides' counters of QP `qpn` and its DCQCN rate (what collectives and samples read).

        Raises:
            ValueError: `qpn` is not connected.
        """
        send, recv = self.send_qps.get(qpn), self.recv_qps.get(qpn)
        if send is None:
            raise ValueError(f"unknown QP {qpn}; connected: {sorted(self.send_qps)}")
        return {
            "tx_packets": send.tx_packets,
            "tx_bytes": send.tx_bytes,
            "tx_payload_bytes": send.tx_payload_bytes,
            "retransmitted": send.retransmitted,
            "timeouts": send.timeouts,
            "rate_bps": send.rp.rate_bps if send.rp else self.cfg.rate_bps,
            "rx_bytes": recv.rx_bytes,
            "rx_packets": recv.rx_packets,
        }

    def configure(
        self,
        rate_bps: float | None = None,
        drain_rate_bps: float | None = None,
        unlimited_drain: bool = False,
    ) -> None:
        """The agent's faults: a slower wire (`rate_bps`), a slow or an unlimited drain."""
        if rate_bps is not None:
            self.cfg.rate_bps = int(rate_bps)
        if drain_rate_bps is not None:
            self.cfg.drain_rate_bps = float(drain_rate_bps)
        if unlimited_drain:
            self.cfg.drain_rate_bps = None

    def post_write(
        self,
        qpn: int,
        size_bytes: int,
        now: float,
        remote_va: int = 0,
        rkey: int = 0,
        data: bytes | bytearray | memoryview | None = None,
    ) -> int:
        """Queue an RDMA WRITE of `size_bytes` to (remote_va, rkey); returns the message id."""
        return self.post_send(qpn, size_bytes, now, write=(remote_va, rkey), data=data)

    def post_send(
        self,
        qpn: int,
        size_bytes: int,
        now: float,
        write: tuple[int, int] | None = None,
        data: bytes | bytearray | memoryview | None = None,
    ) -> int:
        """Queue a SEND (or, with `write`=(va, rkey), a WRITE) of `size_bytes` on QP `qpn`.

        Args:
            qpn: a connected QP.
            size_bytes: the message length; > 0 for pattern messages, >= 0
                with `data` (a zero-length SEND is one empty SEND_ONLY).
            now: the time it is posted (completions report latency from it).
            write: (remote_va, rkey) to make it an RDMA WRITE.
            data: the message's bytes, `size_bytes` of them; each packet carries
                its slice. Like a registered buffer in verbs, it must not change
                until the message completes (the NIC reads it again to
                retransmit). None: pattern bytes.

        Returns:
            The message id that its completion carries.

        Raises:
            ValueError: unknown QP, a bad size, or data of another length.
        """
        qp = self.send_qps.get(qpn)
        if qp is None:
            raise ValueError(f"unknown QP {qpn}; connected: {sorted(self.send_qps)}")
        view = None
        if data is not None:
            try:
                view = memoryview(data).cast("B")
            except (TypeError, ValueError) as exc:
                raise ValueError(f"data must be contiguous bytes-like: {exc}") from None
            if view.nbytes != size_bytes:
                raise ValueError(f"data has {view.nbytes} bytes but size_bytes={size_bytes}")
        elif size_bytes <= 0:
            raise ValueError(f"size_bytes={size_bytes}: must be positive")
        mtu = self.cfg.mtu_payload
        n = max(1, -(-size_bytes // mtu))
        first = qp.end_psn
        if qp.next_psn >= qp.end_psn:
            qp.ready_since = now
        ops = _WRITE_OPS if write else _SEND_OPS
        for i in range(n):
            payload = mtu if i < n - 1 else size_bytes - mtu * (n - 1)
            if n == 1:
                op = ops["only"]
            else:
                op = ops["first"] if i == 0 else ops["last"] if i == n - 1 else ops["middle"]
            ack_req = i == n - 1 or (first + i) % ACK_EVERY == ACK_EVERY - 1
            # RETH (va, rkey, length) rides on a WRITE's first packet (IBA 9.4.3).
            reth = (write[0], write[1], size_bytes) if write and i == 0 else None
            chunk = view[i * mtu : i * mtu + payload] if view is not None else None
            qp.sizes[first + i] = (payload, op, ack_req, reth, chunk)
        qp.end_psn = first + n
        self._msg_ids += 1
        qp.messages.append(Message(self._msg_ids, size_bytes, first, first + n, now))
        return self._msg_ids

    # ----- transmit ---------------------------------------------------------

    def next_frame(self, now: float) -> bytes | None:
        """The next data frame if the wire, PFC and the QPs' rates allow it now.

        A frame due within a quarter frame time goes now (emu.fidelity.EARLY_FRAMES): the
        wire's and the QP's clocks advance from their own times, not from `now`.
        """
        soon = now + early_departure_s(self.cfg.rate_bps)
        if self.free_at > soon or self.ctrl_q:
            return None  # the wire is busy, or ACKs wait for credit ahead of data
        credit = self.credit
        for _ in range(len(self._rr)):
            qpn = self._rr[0]
            self._rr.rotate(-1)
            qp = self.send_qps[qpn]
            prio = qp.prio
            if self.paused_until[prio] > now or (credit is not None and credit.blocked(prio)):
                continue  # its lane is paused, or waits for a flow control frame
            self._check_timeout(qp, now)
            # "selective": a PSN the responder NAKed goes first, alone, asking for an ACK.
            resend = bool(qp.resend)
            if qp.next_tx_at > soon or not (resend or _has_new(qp)):
                continue
            psn = qp.resend[0] if resend else qp.next_psn
            slot = max(self.free_at, qp.next_tx_at, qp.ready_since, self.paused_until[prio])
            payload, op, ack_req, reth, data = qp.sizes[psn]
            frame = qp.tmpl.frame(
                op, psn & roce.PSN_MASK, payload, ack_req=ack_req or resend, reth=reth, payload=data
            )
            if credit is not None and credit.by_prio[prio] is not None:
                if not credit.may_send(prio, len(frame), now):
                    continue  # the lane waits for credit; a flow control frame wakes it
                credit.sent(prio, len(frame))
                slot = max(slot, credit.unblocked_at(prio))
            self._on_clock(now, slot, len(frame), slot in (self.free_at, qp.next_tx_at))
            qp.sent_at[psn] = now
            if resend:
                del qp.resend[0]
                qp.retransmitted += 1
            else:
                qp.next_psn += 1
            qp.tx_packets += 1
            qp.tx_bytes += len(frame)
            qp.tx_payload_bytes += payload
            self._wire(len(frame), now)
            rate = min(self.cfg.rate_bps, qp.max_rate_bps or self.cfg.rate_bps)
            if qp.rp is not None:
                qp.rp.on_bytes_sent(len(frame), now)
                qp.rp.advance(now)
                rate = min(rate, qp.rp.rate_bps)
            qp.next_tx_at = max(qp.next_tx_at, now - 0.001) + len(frame) * 8 / rate
            return frame
        return None

    def may_send(self, now: float) -> bool:
        """The wire is free for a data frame at `now` (within a quarter frame) and not paused.

        On a credit link: also no control frame waits, and the data lane is
        not blocked (the frame itself still needs `credit.may_send`).
        """
        if self.credit is not None and (self.ctrl_q or self.credit.blocked(DATA_PRIO)):
            return False
        return (
            self.free_at <= now + early_departure_s(self.cfg.rate_bps)
            and self.paused_until[DATA_PRIO] <= now
        )

    def _wire(self, size: int, now: float) -> None:
        # The link-rate virtual clock may lag one millisecond behind (a late loop).
        self.free_at = max(self.free_at, now - WIRE_CATCH_UP_S) + size * 8 / self.cfg.rate_bps

    def use_wire(self, size_bytes: int, now: float, ready_at: float | None = None) -> None:
        """Account a frame of `size_bytes` sent at `now` outside the QPs on the NIC's wire.

        For collectives that build their own frames (non-RoCE aggregation):
        send only when `may_send(now)`, then call this so that QP traffic and
        theirs share the link rate. `ready_at`, when the frame could first have
        gone (its window opened, its timeout fired), puts it on the fidelity
        clock like a QP's frame: how late it left, and link time lost when the
        wire's clock was the limit. None: `now` (the frame is never late).
        """
        slot = max(
            self.free_at, now if ready_at is None else ready_at, self.paused_until[DATA_PRIO]
        )
        self._on_clock(now, slot, size_bytes, slot == self.free_at)
        self._wire(size_bytes, now)

    def _on_clock(self, now: float, slot: float, size_bytes: int, clocked: bool) -> None:
        """A frame leaves at `now` against its `slot` (emu/fidelity.py's PortClock)."""
        if clocked and slot < now - WIRE_CATCH_UP_S:
            # Sent on the wire's (or a QP's rate) clock and beyond the catch-up:
            # link time lost. (A frame that just became ready is only late.)
            self.clock.lost(now - WIRE_CATCH_UP_S - slot)
        self.clock.departed(now, slot, size_bytes * 8 / self.cfg.rate_bps)

    def next_wakeup(self, now: float) -> float | None:
        """When `next_frame` may next have something (None: nothing to send)."""
        times = []
        credit = self.credit
        for qp in self.send_qps.values():
            if credit is not None and credit.blocked(qp.prio):
                continue  # waits for a flow control frame, which wakes the agent
            if qp.resend or _has_new(qp):
                times.append(max(qp.next_tx_at, self.paused_until[qp.prio]))
            elif qp.una < qp.next_psn:
                rto_at = qp.sent_at.get(qp.una, qp.last_progress) + self.rto_s
                times.append(max(rto_at, self.paused_until[qp.prio]))
        if not times:
            return None
        return max(min(times), self.free_at)

    def _check_timeout(self, qp: SendQP, now: float) -> None:
        if qp.una < qp.next_psn and now - qp.sent_at.get(qp.una, qp.last_progress) >= self.rto_s:
            qp.timeouts += 1
            # Go-back-0 restarts the message that `una` is in (the responder may
            # have discarded its start on a gap whose NAK was lost).
            # "selective" goes back N too: a lost tail or a burst (emu/host/reorder.py).
            start = self._message_start(qp, qp.una) if self.go_back_0 else qp.una
            qp.retransmitted += qp.next_psn - start
            qp.resend.clear()
            qp.una = qp.next_psn = start
            qp.last_progress = now
            qp.ready_since = now

    @staticmethod
    def _message_start(qp: SendQP, psn: int) -> int:
        """The first PSN of the unfinished message holding `psn` (`psn` itself if none does)."""
        for msg in qp.messages:
            if msg.first_psn <= psn < msg.end_psn:
                return msg.first_psn
            if msg.first_psn > psn:
                break
        return psn

    # ----- receive ----------------------------------------------------------

    def receive(self, frame: bytes, now: float) -> list[bytes]:
        """Handle one frame from the wire; returns frames to send back at once."""
        if pfc.is_mac_control(frame):
            self._on_pause(frame, now)
            return []
        if self.credit is not None:
            if ibfc.is_flow_control(frame):
                fc = ibfc.parse(frame)
                if fc is not None and self.credit.on_fc(fc, now):
                    self.fc_rx += 1
                return self._flush_ctrl(now)
            if not self.credit_rx(frame):
                return []
        info = roce.parse(frame)
        if info is None:
            return []
        if info.opcode == roce.ACKNOWLEDGE:
            self._on_ack(info, now)
            return []
        if info.opcode == roce.CNP:
            qp = self.send_qps.get(info.dest_qp)
            if qp is not None and qp.rp is not None:
                qp.cnps += 1
                qp.rp.on_cnp(now)
            return []
        return self._replies(self._on_data(info, frame, now), now)

    def _replies(self, out: list[bytes], now: float) -> list[bytes]:
        """The control frames a receive (or a timer) produced, as they leave now."""
        if self.credit is not None and out:
            # ACKs and NAKs ride the data lane: they too need credit, in order.
            self.ctrl_q.extend(f for f in out if _prio_of(f) in self.credit.state)
            out = [f for f in out if _prio_of(f) not in self.credit.state]
            out += self._flush_ctrl(now, charge_wire=False)
        # ACKs, NAKs, CNPs and PAUSEs leave on the same wire as data: they take
        # its time, so that data plus control never exceed the link rate (else
        # the switch port towards the peer, which carries both, builds a
        # standing queue: 62-byte ACKs every 4 packets are 1.4% of the link).
        for f in out:
            self._wire(len(f), now)
        return out

    # ----- the credit link ---------------------------------------------------

    def credit_rx(self, frame: bytes) -> bool:
        """Count a received frame's blocks on its VL; False: beyond the credit given (dropped).

        The agent calls this for frames it hands to collectives instead of `receive`.
        """
        if self.credit is None:
            return True
        vl = _prio_of(frame)
        if vl not in self.credit.state or self.credit.received(vl, len(frame)):
            return True
        self.credit_overruns += 1
        return False

    def _flush_ctrl(self, now: float, charge_wire: bool = True) -> list[bytes]:
        """The waiting control frames that credit now lets go, oldest first."""
        out = []
        while self.ctrl_q and self.credit.may_send(
            _prio_of(self.ctrl_q[0]), len(self.ctrl_q[0]), now
        ):
            frame = self.ctrl_q.popleft()
            self.credit.sent(_prio_of(frame), len(frame))
            if charge_wire:
                self._wire(len(frame), now)
            out.append(frame)
        return out

    def _credit_due(self, now: float) -> list[bytes]:
        """Credit updates and refreshes due: the receive buffer left free is the credit."""
        self._drain(now)
        # A stuck NIC consumes nothing: it returns no credit (the PFC world's PAUSE storm).
        held = self.credit.capacity_bytes if self.stuck else self.rx_buffer
        out = []
        for fc in self.credit.due(now, {vl: held for vl in self.credit.vls}):
            out.append(ibfc.build(self.fc_tmpl, fc))
            self._wire(len(out[-1]), now)
            self.fc_tx += 1
        return out

    def _on_pause(self, frame: bytes, now: float) -> None:
        decoded = pfc.parse(frame)
        if decoded is None:
            return
        self.pause_rx += 1
        for prio in decoded.enabled():
            until = now + pfc.quanta_to_s(decoded.quanta[prio], self.cfg.rate_bps)
            old = self.paused_until[prio]
            self.paused_s[prio] += (until - old) if old > now else max(0.0, until - now)
            self.paused_until[prio] = until

    def _on_ack(self, info: roce.RoceInfo, now: float) -> None:
        qp = self.send_qps.get(info.dest_qp)
        if qp is None:
            return
        kind = info.syndrome & roce.AETH_KIND_MASK
        psn = self._unwrap(info.psn, qp.una)
        if kind == roce.AETH_NAK:
            self._on_nak(qp, psn, now)
        elif kind == roce.AETH_RNR_NAK:
            # The responder had no room: resend from `psn` after the RNR timer (IBA 9.7.5.2.8).
            qp.rnr_naks += 1
            if qp.una <= psn <= qp.next_psn:
                qp.retransmitted += qp.next_psn - psn
                qp.una = max(qp.una, psn)
                qp.next_psn = psn
                qp.resend.clear()
                qp.last_progress = now
                qp.next_tx_at = max(qp.next_tx_at, now + self._rnr_s(info.syndrome & 0x1F))
        elif kind == roce.AETH_ACK and qp.una <= psn < qp.next_psn:
            if qp.next_psn - qp.una >= MAX_OUTSTANDING_PACKETS:
                qp.ready_since = now  # the window reopens now
            qp.una = psn + 1
            qp.last_progress = now
        while qp.resend and qp.resend[0] < qp.una:
            del qp.resend[0]  # acknowledged before it was resent
        while qp.messages and qp.messages[0].end_psn <= qp.una:
            msg = qp.messages.popleft()
            msg.completed_at = now
            qp.completed.append(msg)
        # PSNs are posted contiguously, so what was acknowledged is freed from the
        # bottom up: the cost is per acknowledged packet, whatever is outstanding.
        # Go-back-0 keeps the unfinished message whole: a NAK may rewind to its start.
        keep = qp.una
        if self.go_back_0 and qp.messages:
            keep = min(keep, qp.messages[0].first_psn)
        while qp.freed < keep:
            qp.sizes.pop(qp.freed, None)
            qp.sent_at.pop(qp.freed, None)
            qp.freed += 1

    def _on_nak(self, qp: SendQP, psn: int, now: float) -> None:
        """A sequence NAK naming `psn`: go back N, go back to the message's start, or resend it."""
        qp.naks += 1
        if self.go_back_0:
            # The NAK names the message's first PSN, which may lie below `una`:
            # the responder threw away the packets it had acknowledged.
            start = self._message_start(qp, psn)
            oldest = qp.messages[0].first_psn if qp.messages else qp.una
            if oldest <= start <= qp.next_psn:
                qp.retransmitted += qp.next_psn - start
                qp.una = qp.next_psn = start
                qp.last_progress = now
                qp.ready_since = now
        elif self.selective:
            # The responder found `psn` lost and holds what came after it: resend
            # `psn` alone (emu/host/reorder.py), lowest PSN first.
            if qp.una <= psn < qp.next_psn and psn not in qp.resend:
                if not qp.resend and not _has_new(qp):
                    qp.ready_since = now
                bisect.insort(qp.resend, psn)
        elif qp.una <= psn <= qp.next_psn:
            qp.retransmitted += qp.next_psn - psn
            qp.una = max(qp.una, psn)
            qp.next_psn = psn  # go-back-N from the first missing packet
            qp.last_progress = now
            qp.ready_since = now

    def _rnr_s(self, code: int) -> float:
        """The RNR timer `code` in emulated seconds (scaled like the RTO)."""
        return RNR_TIMER_S[code] * self.cfg.modelled_rate_bps / self.cfg.rate_bps

    @staticmethod
    def _unwrap(psn24: int, near: int) -> int:
        return near + roce.psn_diff(psn24, near & roce.PSN_MASK)

    # ----- host receive buffer and PFC generation -------------------------

    def _drain(self, now: float) -> None:
        rate = 0.0 if self.stuck else self.cfg.drain_rate_bps
        if rate is None:
            self.rx_buffer = 0.0
        else:
            self.rx_buffer = max(0.0, self.rx_buffer - (now - self.rx_drained_at) * rate / 8)
        self.rx_drained_at = now

    def _rx_pfc(self, now: float) -> list[bytes]:
        """PAUSE out of this NIC when the host cannot keep up (XOFF/refresh/XON)."""
        self._drain(now)
        refresh = pfc.quanta_to_s(self.cfg.pfc_quanta, self.cfg.rate_bps) / 2
        if self.stuck or self.rx_buffer >= self.cfg.rx_xoff_bytes:
            if not self.xoff or now >= self.next_pause_refresh:
                self.xoff = True
                self.next_pause_refresh = now + refresh
                self.pause_tx += 1
                return [pfc.build(self.pfc_tmpl, {DATA_PRIO: self.cfg.pfc_quanta})]
        elif self.xoff and self.rx_buffer <= self.cfg.rx_xon_bytes:
            self.xoff = False
            self.pause_tx += 1
            return [pfc.build(self.pfc_tmpl, {DATA_PRIO: 0})]
        return []

    def tick(self, now: float) -> list[bytes]:
        """Timer work: PAUSE refresh/XON as the buffer drains; DCQCN rate increase;
        "selective": the NAKs of gaps that persisted (emu/host/reorder.py)."""
        for qp in self.send_qps.values():
            if qp.rp is not None:
                qp.rp.advance(now)
        out = []
        if self.selective:
            for qp in self.recv_qps.values():
                out += self._lost_naks(qp, now)
            out = self._replies(out, now)
        if self.credit is not None:
            return out + self._flush_ctrl(now) + self._credit_due(now)
        if self.xoff or self.stuck:
            pause = self._rx_pfc(now)
            for f in pause:
                self._wire(len(f), now)
            return out + pause
        return out

    def next_tick(self) -> float | None:
        times = [qp.rp.next_event_at() for qp in self.send_qps.values() if qp.rp is not None]
        if self.selective:
            times += [qp.ooo.due(self.reorder_s) for qp in self.recv_qps.values()]
        times = [t for t in times if t is not None]
        if self.credit is not None:
            times.append(self.credit.next_due())
            if self.cfg.drain_rate_bps and self.rx_buffer > 0 and not self.stuck:
                # When the drain has freed one update's worth of buffer.
                freed = min(self.rx_buffer, self.credit.update_blocks * ibfc.BLOCK_BYTES)
                times.append(self.rx_drained_at + freed * 8 / self.cfg.drain_rate_bps)
            return min(times)
        if self.xoff or self.stuck:
            times.append(self.next_pause_refresh)
            if self.cfg.drain_rate_bps and not self.stuck:
                excess = self.rx_buffer - self.cfg.rx_xon_bytes
                times.append(self.rx_drained_at + max(0.0, excess) * 8 / self.cfg.drain_rate_bps)
        return min(times) if times else None

    # ----- reporting --------------------------------------------------------

    def stats(self, now: float) -> dict:
        send = {}
        for qpn, qp in self.send_qps.items():
            send[qpn] = {
                "tx_packets": qp.tx_packets,
                "tx_bytes": qp.tx_bytes,
                "tx_payload_bytes": qp.tx_payload_bytes,
                "rnr_naks": qp.rnr_naks,
                "retransmitted": qp.retransmitted,
                "naks": qp.naks,
                "timeouts": qp.timeouts,
                "cnps": qp.cnps,
                "una": qp.una,
                "next_psn": qp.next_psn,
                "end_psn": qp.end_psn,
                "rate_bps": qp.rp.rate_bps if qp.rp else self.cfg.rate_bps,
                "completed": [
                    (m.msg_id, m.size_bytes, m.posted_at, m.completed_at) for m in qp.completed
                ],
                "pending_messages": len(qp.messages),
            }
        recv = {
            qpn: {
                "rx_packets": qp.rx_packets,
                "rx_bytes": qp.rx_bytes,
                "out_of_order": qp.out_of_order,
                "duplicates": qp.duplicates,
                "ce_marked": qp.ce_marked,
                "expected_psn": qp.expected,
                "messages_received": qp.messages_received,
                "inbox_messages": len(qp.inbox),
                "inbox_bytes": qp.inbox_bytes,
                "rnr_naks_sent": qp.rnr_naks_sent,
                "discarded_packets": qp.discarded_packets,
                "discarded_bytes": qp.discarded_bytes,
                "naks_sent": qp.naks_sent,
                "reorder_depth_max": qp.reorder_depth_max,
                "beyond_window": qp.beyond_window,
            }
            for qpn, qp in self.recv_qps.items()
        }
        paused = [
            total - max(0.0, until - now) for total, until in zip(self.paused_s, self.paused_until)
        ]
        return {
            "send": send,
            "recv": recv,
            "pause_rx": self.pause_rx,
            "paused_s": paused,
            "pause_tx": self.pause_tx,
            "cnps_sent": self.cnps_sent,
            "rx_overflow": self.rx_overflow,
            "rx_buffer_bytes": self.rx_buffer,
            "stuck": self.stuck,
            "loss_recovery": self.cfg.loss_recovery,
            "credit": self.credit.stats(now) if self.credit is not None else None,
            "fc_tx": self.fc_tx,
            "fc_rx": self.fc_rx,
            "credit_overruns": self.credit_overruns,
            "ctrl_waiting": len(self.ctrl_q),
        }


# DESIGN.md conventions, as the switch classifies (emu/switch/datapath.py).
_DSCP_PRIO = {
    roce.DSCP_DATA: DATA_PRIO,
    DSCP_SECOND_CLASS: SECOND_CLASS_PRIO,
    roce.DSCP_CNP: CNP_PRIO,
}


def _has_new(qp: SendQP) -> bool:
    """Whether QP `qp` has a PSN never sent that its window lets go."""
    return qp.next_psn < qp.end_psn and qp.next_psn - qp.una < MAX_OUTSTANDING_PACKETS


def _prio_of(frame: bytes) -> int:
    """A frame's priority (its virtual lane on a credit link) by its IPv4 DSCP."""
    if frame[12:14] == b"\x08\x00" and len(frame) > 15:
        return _DSCP_PRIO.get(frame[15] >> 2, 0)
    return 0

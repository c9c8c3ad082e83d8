"""The responder side of the NIC model's queue pairs (IBA 9.7.5's responder).

Owns what a queue pair does with the data packets it receives: the expected
PSN, the ACK an AckReq asks for, the sequence NAK on a gap (go-back-N; go-back-0
also throws the partial message away), the RNR NAK when the host's inbox is
full, duplicates, and the reassembly of whole messages into the inbox
(`set_deliver_data`, `take_messages`); with "selective" loss recovery, the
packets held out of order in the QP's reorder window (emu/host/reorder.py),
the cumulative ACK over what became contiguous and the NAKs of holes found
lost. Does not own the requester's side, timers, the wire, PFC or credit
(emu/host/rnic.py).

`Responder` is a base class of `rnic.Rnic` and works on its state: `cfg`,
`recv_qps`, the notification point `np` and `cnps_sent`, the host receive
buffer (`rx_buffer`, `rx_overflow`, `_drain`, `_rx_pfc`), `credit`, the
loss recovery (`go_back_0`, `selective`, `reorder_s`) and `_unwrap`. Pure, as
rnic.py: every method takes `now`. emu/host/csrc/nic_engine.c (`on_data` and
the functions it calls) is its C twin.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from emu.host.reorder import ReorderWindow
from emu.proto import roce

_MESSAGE_ENDS = (roce.SEND_LAST, roce.SEND_ONLY, roce.RDMA_WRITE_LAST, roce.RDMA_WRITE_ONLY)
# IBA table 45: code 12 (0.64 ms) is what rdma-core's ibv_rc_pingpong asks for as
# min_rnr_timer; the RNR NAK carries it (rnic.RNR_TIMER_S has the codes).
MIN_RNR_TIMER = 12
# Bookkeeping charged per queued message, so that a flood of empty messages
# is bounded by `inbox_max_bytes` too.
INBOX_MESSAGE_OVERHEAD_BYTES = 64


@dataclass
class RecvQP:
    """The responder side of one reliable connection."""

    qpn: int
    peer_qpn: int
    tmpl: roce.DataTemplate
    expected: int = 0
    msn: int = 0
    nak_sent: bool = False
    rx_packets: int = 0
    rx_bytes: int = 0
    out_of_order: int = 0
    duplicates: int = 0
    ce_marked: int = 0
    messages_received: int = 0
    deliver_data: bool = False  # reassemble payloads into `inbox`
    inbox: deque = field(default_factory=deque)  # (msn, bytes) of whole messages, oldest first
    inbox_bytes: int = 0  # charged for `inbox` (see INBOX_MESSAGE_OVERHEAD_BYTES)
    parts: list = field(default_factory=list)  # payloads of the message being received
    parts_bytes: int = 0
    rnr_naks_sent: int = 0
    msg_first: int = 0  # PSN of the first packet of the message being received
    msg_bytes: int = 0  # payload bytes received of that message so far
    # Go-back-0: packets and payload bytes of partial messages thrown away on a
    # gap (they stay in rx_packets/rx_bytes, which count what arrived in order).
    discarded_packets: int = 0
    discarded_bytes: int = 0
    naks_sent: int = 0  # sequence NAKs (RNR NAKs are rnr_naks_sent)
    # The largest distance by which a packet's PSN was ahead of the expected one.
    reorder_depth_max: int = 0
    # "selective": the packets held beyond the expected PSN (emu/host/reorder.py),
    # and those that arrived beyond its window (dropped).
    ooo: ReorderWindow | None = None
    beyond_window: int = 0


class Responder:
    """The receiving side of `rnic.Rnic`'s queue pairs (the module docstring)."""

    def set_deliver_data(self, qpn: int, on: bool = True) -> None:
        """Make QP `qpn`'s receive side queue whole messages' bytes on its `inbox`.

        Off (the default), received payloads are counted and dropped. Turning
        it off also discards what was queued.

        Raises:
            ValueError: `qpn` is not connected.
        """
        qp = self.recv_qps.get(qpn)
        if qp is None:
            raise ValueError(f"unknown QP {qpn}; connected: {sorted(self.recv_qps)}")
        qp.deliver_data = bool(on)
        if not on:
            qp.inbox.clear()
            qp.parts.clear()
            qp.inbox_bytes = qp.parts_bytes = 0
            if qp.ooo is not None:
                qp.ooo.drop_data()

    def take_messages(self, qpn: int, max_messages: int | None = None) -> list[tuple[int, bytes]]:
        """The (msn, bytes) of messages received whole on QP `qpn`, oldest first; removed.

        Raises:
            ValueError: `qpn` is not connected.
        """
        qp = self.recv_qps.get(qpn)
        if qp is None:
            raise ValueError(f"unknown QP {qpn}; connected: {sorted(self.recv_qps)}")
        out = []
        while qp.inbox and (max_messages is None or len(out) < max_messages):
            msn, data = qp.inbox.popleft()
            qp.inbox_bytes -= len(data) + INBOX_MESSAGE_OVERHEAD_BYTES
            out.append((msn, data))
        return out

    def has_messages(self, qpn: int) -> bool:
        """Whether QP `qpn` holds whole received messages not yet taken."""
        qp = self.recv_qps.get(qpn)
        return bool(qp is not None and qp.inbox)

    def _on_data(self, info: roce.RoceInfo, frame: bytes, now: float) -> list[bytes]:
        qp = self.recv_qps.get(info.dest_qp)
        if qp is None:
            return []
        out = []
        if info.ecn == roce.ECN_CE:
            qp.ce_marked += 1
            if self.np is not None and self.np.on_ce(qp.qpn, now):
                out.append(qp.tmpl.cnp_frame())
                self.cnps_sent += 1
        psn = self._unwrap(info.psn, qp.expected)
        if self.selective:
            out += self._on_data_selective(qp, psn, info, frame, now)
        elif psn == qp.expected:
            out += self._accept(qp, info, frame, now)
        elif psn > qp.expected:
            out += self._on_psn_gap(qp, psn)
        else:
            out += self._duplicate(qp, info)
        return out

    def _accept(self, qp: RecvQP, info: roce.RoceInfo, frame: bytes, now: float) -> list[bytes]:
        """The expected PSN arrived: deliver it and what it makes contiguous; ACK if asked."""
        self._drain(now)
        size = len(frame)
        if self.rx_buffer + size > self.cfg.rx_buffer_bytes:
            self.rx_overflow += 1  # the host had no room: as if lost (sender retries)
            return []
        if qp.deliver_data:
            held = qp.ooo.data_bytes if qp.ooo is not None else 0
            if qp.inbox_bytes + qp.parts_bytes + held + info.payload_len > self.cfg.inbox_max_bytes:
                # Each retry of the expected PSN is answered (the requester
                # waits the RNR timer in between); nak_sent keeps the packets
                # already in flight behind it from drawing sequence NAKs.
                qp.nak_sent = True
                qp.rnr_naks_sent += 1
                syndrome = roce.AETH_RNR_NAK | MIN_RNR_TIMER
                return [qp.tmpl.ack_frame(qp.expected & roce.PSN_MASK, qp.msn & 0xFFFFFF, syndrome)]
            qp.parts.append(bytes(roce.payload(frame, info)))
            qp.parts_bytes += info.payload_len
        qp.nak_sent = False
        self.rx_buffer += size
        self._deliver(qp, info.payload_len, info.opcode in _MESSAGE_ENDS)
        # "selective": the packets held beyond it that are now in order follow it,
        # and an ACK one of them asked for is owed now.
        ack = info.ack_req
        if qp.ooo is not None and qp.ooo.held:
            ack = self._advance(qp) or ack
        out = []
        if ack:
            out.append(qp.tmpl.ack_frame((qp.expected - 1) & roce.PSN_MASK, qp.msn & 0xFFFFFF))
        if self.credit is None:
            out += self._rx_pfc(now)
        return out

    def _deliver(self, qp: RecvQP, size: int, end: bool) -> None:
        """The expected PSN's packet (of `size` payload bytes) is in; `end`: its message's last."""
        qp.expected += 1
        qp.rx_packets += 1
        qp.rx_bytes += size
        qp.msg_bytes += size
        if not end:
            return
        qp.msg_first = qp.expected
        qp.msg_bytes = 0
        qp.msn += 1
        qp.messages_received += 1
        if qp.deliver_data:
            data = b"".join(qp.parts) if len(qp.parts) != 1 else qp.parts[0]
            qp.parts.clear()
            qp.parts_bytes = 0
            qp.inbox.append((qp.msn, data))
            qp.inbox_bytes += len(data) + INBOX_MESSAGE_OVERHEAD_BYTES

    def _duplicate(self, qp: RecvQP, info: roce.RoceInfo) -> list[bytes]:
        """A PSN already received: counted, and answered with the cumulative ACK if asked."""
        qp.duplicates += 1
        if not info.ack_req:
            return []
        return [qp.tmpl.ack_frame((qp.expected - 1) & roce.PSN_MASK, qp.msn & 0xFFFFFF)]

    def _ahead(self, qp: RecvQP, psn: int) -> None:
        """Count a packet `psn` that arrived ahead of the expected PSN, and how far ahead."""
        qp.out_of_order += 1
        qp.reorder_depth_max = max(qp.reorder_depth_max, psn - qp.expected)

    def _on_psn_gap(self, qp: RecvQP, psn: int) -> list[bytes]:
        """A packet past the expected PSN: the sequence NAK, sent once until the gap fills."""
        self._ahead(qp, psn)
        if qp.nak_sent:
            return []
        qp.nak_sent = True
        qp.naks_sent += 1
        if self.go_back_0 and qp.expected > qp.msg_first:
            # Go-back-0 keeps no partial message: expect it from its start.
            qp.discarded_packets += qp.expected - qp.msg_first
            qp.discarded_bytes += qp.msg_bytes
            qp.expected, qp.msg_bytes = qp.msg_first, 0
            qp.parts.clear()
            qp.parts_bytes = 0
        return [qp.tmpl.nak_frame(qp.expected & roce.PSN_MASK, qp.msn & 0xFFFFFF)]

    # ----- "selective": out-of-order placement (emu/host/reorder.py) -------

    def _on_data_selective(
        self, qp: RecvQP, psn: int, info: roce.RoceInfo, frame: bytes, now: float
    ) -> list[bytes]:
        """A data packet at a responder that holds what arrives out of order."""
        win = qp.ooo
        if psn == qp.expected:
            out = self._accept(qp, info, frame, now)
        elif psn < qp.expected:
            out = self._duplicate(qp, info)
        elif psn - qp.expected >= win.window:
            # No place for it: the hole at the window's base is a loss, now.
            self._ahead(qp, psn)
            qp.beyond_window += 1
            out = [] if qp.nak_sent else self._nak_base(qp)
        elif psn in win.held:
            out = self._duplicate(qp, info)
        else:
            out = self._place(qp, psn, info, frame, now)
        return out + self._lost_naks(qp, now)

    def _nak_base(self, qp: RecvQP) -> list[bytes]:
        qp.nak_sent = True
        qp.naks_sent += 1
        return [qp.tmpl.nak_frame(qp.expected & roce.PSN_MASK, qp.msn & 0xFFFFFF)]

    def _place(
        self, qp: RecvQP, psn: int, info: roce.RoceInfo, frame: bytes, now: float
    ) -> list[bytes]:
        """Hold `psn` at its place in the window: no NAK (a reordering, until found lost)."""
        if info.payload_len > self.cfg.mtu_payload:
            return []  # longer than a packet's place: malformed, dropped
        self._drain(now)
        size = len(frame)
        if self.rx_buffer + size > self.cfg.rx_buffer_bytes:
            self.rx_overflow += 1
            return []
        self._ahead(qp, psn)
        data = bytes(roce.payload(frame, info)) if qp.deliver_data else None
        end = info.opcode in _MESSAGE_ENDS
        qp.ooo.place(psn, now, info.ack_req, end, info.payload_len, data)
        self.rx_buffer += size
        return self._rx_pfc(now) if self.credit is None else []

    def _advance(self, qp: RecvQP) -> bool:
        """Deliver the held packets that follow the expected PSN; True: one asked for an ACK."""
        owed = False
        while (entry := qp.ooo.pop(qp.expected)) is not None:
            _, ack_req, end, size, data = entry
            if qp.deliver_data and data is not None:
                qp.parts.append(data)
                qp.parts_bytes += size
            self._deliver(qp, size, end)
            owed = owed or ack_req
        qp.ooo.settle()
        return owed

    def _lost_naks(self, qp: RecvQP, now: float) -> list[bytes]:
        """NAKs of the holes a persisting gap shows lost (emu/host/reorder.py), if a round is due."""
        holes = qp.ooo.lost(qp.expected, now, self.reorder_s)
        qp.naks_sent += len(holes)
        return [qp.tmpl.nak_frame(h & roce.PSN_MASK, qp.msn & 0xFFFFFF) for h in holes]

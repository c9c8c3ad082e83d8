"""Out-of-order receive for the NIC's "selective" loss recovery (emu/host/rnic.py).

Owns the responder's reorder window of one queue pair: the packets received
ahead of the expected PSN, held at their place until the PSNs below them
arrive, and the rule that says when a gap below them is a loss. Does not own
the PSNs, ACKs or the message assembly (`rnic.Rnic._on_data_selective`), nor
the requester's selective retransmission (`rnic.SendQP.resend`). Pure: every
method takes `now`.

What it models. A NIC that an adaptive-routing fabric pairs with takes packets
in any order: NVIDIA documents "out-of-order data placement" for RC QPs on
ConnectX-5 and later (MLNX_OFED and DOCA manuals, "Out-of-Order (OOO) Data
Placement"; `MLX5_RELAXED_PACKET_ORDERING_ON`): packets of a QP that took
different paths "are handled instead of being dropped, in order to avoid
retransmission", and "data will be placed into host memory in an
out-of-order manner". The design is IRN's (Mittal et al., "Revisiting Network
Support for RDMA", SIGCOMM 2018, sections 3 and 5): the responder keeps a
bitmap of the PSNs received beyond the expected one, places each packet's
payload at its offset, advances the cumulative ACK over the PSNs that became
contiguous, and completes a message (in order, as RC requires) when its last
PSN is passed; the requester retransmits only what is missing instead of
going back N.

Where emu departs from IRN, and why: IRN's responder NACKs every
out-of-order arrival and its requester takes any PSN selectively
acknowledged above a hole as proof of a loss, which assumes in-order paths;
under per-packet adaptive routing every reordering would then be a
retransmission. Here a reordered PSN within the window draws no NAK at all
(the issue's requirement, and what NVIDIA's OOO placement is for); the
responder decides that a gap is a loss:

- the window is full: a PSN `window` or more beyond the expected one has
  no place; it is dropped and the expected PSN is NAKed at once (once until
  the expected PSN moves, as go-back-N's sequence NAK);
- a gap persists: a hole below a packet that has been held for the reorder
  timeout (`reorder_timeout_s`: half the retransmit timeout) is lost. The
  RTO is never below the fabric's lossless round-trip bound (emu/host/rto.py,
  issue 29), so half of it is at least the one-way bound: the longest a
  packet can lag behind one sent after it on minimal routes in a lossless
  fabric. Holding a later packet longer than that means the earlier one is
  not coming. Every such hole (up to NAKS_PER_ROUND) is NAKed, each by a
  standard NAK (PSN sequence error) naming the missing PSN, which the
  requester answers by resending that PSN alone; a QP sends at most one such
  round per reorder timeout, so a lost NAK or retransmission is asked for
  again one timeout later.

The requester's retransmit timeout still goes back N from the oldest
unacknowledged PSN (packets the responder already holds come back as
duplicates): it covers a lost tail, which no later packet reveals, and a
burst loss larger than a round. Its retransmissions ask for an ACK
(AckReq), so that the responder reports at once how far the hole's fill
moved its cumulative ACK.

Both NIC engines implement it (emu/host/csrc/nic_reorder.c is the C twin);
tests/unit/test_nic_differential.py holds them to the same frames.
"""

from __future__ import annotations

# Holes NAKed in one round at most: a burst loss larger than this is left to the
# next round or to the requester's retransmit timeout (which goes back N).
NAKS_PER_ROUND = 32


class ReorderWindow:
    """The packets one responder QP holds beyond its expected PSN (the module docstring).

    `held` maps a PSN to (arrival time, AckReq, ends a message, payload
    length, payload bytes or None). Every held PSN is above the responder's
    expected PSN and below expected + `window`.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.held: dict[int, tuple] = {}
        self.data_bytes = 0  # payload bytes held (QPs that deliver data)
        self.gap_since: float | None = None  # the earliest arrival among `held`
        self.round_at: float | None = None  # the last round of NAKs

    def place(
        self, psn: int, now: float, ack_req: bool, end: bool, size: int, data: bytes | None
    ) -> None:
        """Hold `psn`'s packet at its place (its payload `data`, None: not kept)."""
        if not self.held:
            self.gap_since = now  # arrivals come in time order: the earliest held
        self.held[psn] = (now, ack_req, end, size, data)
        if data is not None:
            self.data_bytes += size

    def pop(self, psn: int) -> tuple | None:
        """The held packet `psn`, removed; None if it is not held."""
        entry = self.held.pop(psn, None)
        if entry is not None and entry[4] is not None:
            self.data_bytes -= entry[3]
        return entry

    def settle(self) -> None:
        """After the expected PSN moved: the gap's age is the earliest arrival still held."""
        self.gap_since = min(e[0] for e in self.held.values()) if self.held else None

    def drop_data(self) -> None:
        """Keep no payload bytes (the QP stopped delivering data)."""
        for psn, (at, ack_req, end, size, _) in self.held.items():
            self.held[psn] = (at, ack_req, end, size, None)
        self.data_bytes = 0

    def due(self, timeout_s: float) -> float | None:
        """When the next round of NAKs may go (None: no gap)."""
        if self.gap_since is None:
            return None
        t = self.gap_since + timeout_s
        if self.round_at is not None:
            t = max(t, self.round_at + timeout_s)
        return t

    def lost(self, expected: int, now: float, timeout_s: float) -> list[int]:
        """The holes found lost now (the round's NAKs), lowest first; [] when none is due.

        A hole is lost when a packet above it has been held for `timeout_s`.
        """
        due = self.due(timeout_s)
        if due is None or now < due:
            return []
        self.round_at = now
        top = max((p for p, e in self.held.items() if e[0] + timeout_s <= now), default=expected)
        holes = []
        for psn in range(expected, top):
            if psn not in self.held:
                holes.append(psn)
                if len(holes) == NAKS_PER_ROUND:
                    break
        return holes

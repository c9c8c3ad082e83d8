"""Credit-based link-level flow control, InfiniBand style: the state of one end of a link.

Owns, for one port (a switch port or a host NIC) on a link in credit mode
(`CreditSpec`, the fabric's `flow_control="credit"`), both directions of
IBA's link-level flow control (IBA vol 1, 7.9.4), per virtual lane:

- transmit: FCTBS, the blocks sent on the VL, and the credit limit FCCL last
  received from the peer. A frame of B blocks (64 bytes each, rounded up) may
  go only while (FCCL - (FCTBS + B)) mod 4096 <= 2048: the sender never sends
  beyond what the receiver advertised. Time spent with a frame waiting for
  credit is counted per VL (`blocked_s`).
- receive: ABR, the blocks received, and the buffer the VL may hold
  (`capacity_bytes`). The credit limit advertised is ABR + the free blocks;
  an FCTBS received resets ABR to it, so blocks lost on the wire do not leak
  credit. A frame beyond the advertised limit is an overrun (counted; the
  caller drops it).

Updates go out as flow control packets (`emu.proto.credit`), each carrying the
VL's FCTBS and FCCL: as soon as the credit grew by `update_fraction` of the
VL's buffer since the last one, and at least every `refresh_symbols` byte
times on every VL (IBA's bound on the time between flow control packets).
The FCCL is a cumulative limit, not an increment, so the next packet after a
lost one restores the credit: the credit loop cannot deadlock on a lost
update, it waits at most one refresh period.

Pure: every method takes `now` or sizes; `due(now, held)` returns the packets
to send. The switch (`emu/switch/datapath.py`, with the scheduler and the
shared buffer) and the NIC model (`emu/host/rnic.py`) own the sockets and the
clock. Counters are unbounded integers inside and 12-bit on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.config import CreditSpec
from emu.proto.credit import COUNTER_MOD, MAX_CREDIT_BLOCKS, FcPacket, blocks

_NEVER = float("-inf")


@dataclass
class VlCredit:
    """Both directions of one virtual lane on one link end."""

    # transmit side
    fctbs: int = 0  # blocks sent (unbounded)
    limit: int | None = None  # the peer's FCCL (12-bit), None until its first packet
    waiting_blocks: int = 0  # a frame of this many blocks waits for credit (0: none)
    blocked_since: float | None = None
    blocked_s: float = 0.0
    blocked_count: int = 0
    unblocked_at: float = _NEVER  # when credit last arrived for a waiting frame
    tx_frames: int = 0
    # receive side
    abr: int = 0  # blocks received, adjusted by the peer's FCTBS (unbounded)
    advertised: int | None = None  # FCCL last sent (unbounded)
    next_refresh: float = _NEVER
    rx_frames: int = 0
    overruns: int = 0
    abr_resyncs: int = 0  # FCTBS received ahead of ABR: blocks lost on the wire
    # flow control packets
    fc_tx: int = 0
    fc_rx: int = 0


class CreditLink:
    """One link end's credit state for `vls` (see the module docstring).

    Args:
        spec: the credit settings (update threshold, refresh period).
        vls: the flow-controlled virtual lanes (emu: priorities).
        capacity_bytes: the receive buffer of each VL at this end.
        rate_bps: the link rate (the refresh period is in byte times).
        now: when the link came up; the first update is due at once.
    """

    def __init__(
        self,
        spec: CreditSpec,
        vls: tuple[int, ...],
        capacity_bytes: int,
        rate_bps: float,
        now: float = 0.0,
    ) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes={capacity_bytes}: must be >= 0")
        self.spec = spec
        self.vls = tuple(vls)
        self.capacity_blocks = min(capacity_bytes // 64, MAX_CREDIT_BLOCKS)
        self.capacity_bytes = self.capacity_blocks * 64
        self.update_blocks = max(1, int(self.capacity_blocks * spec.update_fraction))
        self.refresh_s = spec.refresh_s(rate_bps)
        self.state = {vl: VlCredit(next_refresh=now) for vl in self.vls}
        # Indexed by priority for the hot path: None where a priority is not a credit VL.
        self.by_prio: list[VlCredit | None] = [self.state.get(p) for p in range(8)]

    # ----- transmit ---------------------------------------------------------

    def credit_blocks(self, vl: int) -> int:
        """Blocks this end may still send on `vl`."""
        st = self.state[vl]
        if st.limit is None:
            return 0
        avail = (st.limit - st.fctbs) % COUNTER_MOD
        return avail if avail <= MAX_CREDIT_BLOCKS else 0

    def may_send(self, vl: int, size_bytes: int, now: float) -> bool:
        """Whether a frame of `size_bytes` may go on `vl` now; a refusal starts blocked time."""
        st = self.by_prio[vl]
        need = blocks(size_bytes)
        if self.credit_blocks(vl) >= need:
            if st.blocked_since is not None:
                self._unblock(st, now)
            return True
        if st.blocked_since is None:
            st.blocked_since = now
            st.blocked_count += 1
        st.waiting_blocks = need
        return False

    def sent(self, vl: int, size_bytes: int) -> None:
        """A frame of `size_bytes` left on `vl` (after `may_send` said yes)."""
        st = self.by_prio[vl]
        st.fctbs += blocks(size_bytes)
        st.tx_frames += 1

    def unsend(self, vl: int, size_bytes: int) -> None:
        """Undo `sent`: the kernel refused the frame, it waits again."""
        st = self.by_prio[vl]
        st.fctbs -= blocks(size_bytes)
        st.tx_frames -= 1

    def blocked(self, vl: int) -> bool:
        """A frame waits on `vl` for credit that has not come."""
        st = self.by_prio[vl]
        return st is not None and st.blocked_since is not None

    def unblocked_at(self, vl: int) -> float:
        """When credit last arrived for a frame that waited on `vl` (-inf: never)."""
        st = self.by_prio[vl]
        return st.unblocked_at if st is not None else _NEVER

    def _unblock(self, st: VlCredit, now: float) -> None:
        st.blocked_s += now - st.blocked_since
        st.blocked_since = None
        st.waiting_blocks = 0
        st.unblocked_at = now

    # ----- receive ----------------------------------------------------------

    def received(self, vl: int, size_bytes: int) -> bool:
        """A data frame arrived on `vl`; False when it exceeds the credit advertised (overrun)."""
        st = self.by_prio[vl]
        st.abr += blocks(size_bytes)
        st.rx_frames += 1
        if st.advertised is None or st.abr > st.advertised:
            st.overruns += 1
            st.abr -= blocks(size_bytes)  # dropped: it holds no buffer
            return False
        return True

    def on_fc(self, fc: FcPacket, now: float) -> bool:
        """A flow control packet from the peer; False if its VL is not one of ours.

        Its FCCL is our new credit limit on the VL; its FCTBS resets our ABR
        (IBA 7.9.4), which returns the credit of blocks lost on the wire.
        """
        st = self.state.get(fc.vl)
        if st is None:
            return False
        st.fc_rx += 1
        st.limit = fc.fccl
        delta = (fc.fctbs - st.abr) % COUNTER_MOD
        if delta >= COUNTER_MOD // 2:
            delta -= COUNTER_MOD  # behind us: cannot happen on a FIFO link, follow IBA anyway
        if delta:
            st.abr += delta
            st.abr_resyncs += 1
        if st.blocked_since is not None and self.credit_blocks(fc.vl) >= st.waiting_blocks:
            self._unblock(st, now)
        return True

    # ----- updates ----------------------------------------------------------

    def fccl(self, vl: int, held_bytes: float) -> int:
        """The credit limit (unbounded) to advertise on `vl` while `held_bytes` of it are buffered."""
        free = max(0, int(self.capacity_bytes - held_bytes)) // 64
        return self.by_prio[vl].abr + free

    def due(self, now: float, held: dict[int, float] | None = None) -> list[FcPacket]:
        """Flow control packets to send now.

        Args:
            held: bytes each VL's receive side holds now (missing: 0).
        """
        out = []
        for vl, st in self.state.items():
            limit = self.fccl(vl, held.get(vl, 0) if held else 0)
            if (
                st.advertised is None
                or now >= st.next_refresh
                or limit - st.advertised >= self.update_blocks
            ):
                st.advertised = limit
                st.next_refresh = now + self.refresh_s
                st.fc_tx += 1
                out.append(FcPacket(vl, st.fctbs % COUNTER_MOD, limit % COUNTER_MOD))
        return out

    def next_due(self) -> float:
        """When `due` next has a refresh to send (an update for freed buffer may come sooner)."""
        return min(st.next_refresh for st in self.state.values())

    # ----- reporting --------------------------------------------------------

    def blocked_so_far(self, now: float) -> dict[int, float]:
        """Seconds each VL has had a frame waiting for credit, up to `now`."""
        return {
            vl: round(
                st.blocked_s + (now - st.blocked_since if st.blocked_since is not None else 0.0), 6
            )
            for vl, st in self.state.items()
        }

    def stats(self, now: float) -> dict:
        blocked = self.blocked_so_far(now)
        return {
            str(vl): {
                "credit_blocks": self.credit_blocks(vl),
                "fctbs": st.fctbs,
                "fccl_rx": st.limit,
                "abr": st.abr,
                "fccl_tx": st.advertised,
                "blocked_s": blocked[vl],
                "blocked_count": st.blocked_count,
                "blocked_now": st.blocked_since is not None,
                "tx_frames": st.tx_frames,
                "rx_frames": st.rx_frames,
                "overruns": st.overruns,
                "abr_resyncs": st.abr_resyncs,
                "fc_tx": st.fc_tx,
                "fc_rx": st.fc_rx,
            }
            for vl, st in self.state.items()
        }

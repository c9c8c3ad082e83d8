"""The switch's shared buffer: admission, PFC XOFF/XON decisions, ECN marking.

Owns the byte accounting of one switch (per ingress (port, priority), per
egress (port, priority), shared and headroom), and decides for each frame
whether it is admitted, whether it is CE-marked, and when a PFC PAUSE must go
out of an ingress port (XOFF on crossing the dynamic threshold, refreshed
every half pause time while above it, XON with quanta 0 below the resume
point). Pure: the datapath passes `now` and a random source and does the
sending; `pfc_due()` returns the frames' contents as (port, {prio: quanta}).

Model (HPCC ns-3 switch, DCQCN paper):
- free = size - reserved headroom - shared bytes in use;
- lossless ingress (port, prio) XOFF when its shared bytes reach alpha_lossless x free;
  while paused, arrivals beyond that go to its headroom; beyond the headroom
  they are dropped (a lossless drop: headroom too small for the loop's lag);
- lossy egress (port, prio) tail-drops above alpha_lossy x free (and so does a
  lossless priority when PFC is off);
- in credit mode (`CreditSpec`, emu/credit.py) a credit priority (virtual
  lane) is admitted without a threshold into a pool reserved per ingress
  (port, VL) of `vl_buffer_bytes` (as an IB switch carves its buffer per VL),
  accounted like headroom: the credits the switch advertised for that pool
  bound what the upstream sends into it; a frame beyond it is the sender's
  overrun, dropped and counted (never, while the sender honours credit).
  No PAUSE is ever due in credit mode;
- ECN at enqueue on ECT frames: never below Kmin, always above Kmax, linear
  probability up to Pmax between them (RED).
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

from emu.config import BufferSpec, CreditSpec, EcnSpec, PfcSpec
from emu.proto.credit import BLOCK_BYTES, MAX_CREDIT_BLOCKS
from emu.proto.pfc import quanta_to_s

SHARED, HEADROOM = 0, 1
DROP_LOSSY = "lossy_threshold"
DROP_HEADROOM = "headroom_overflow"
DROP_LOSSLESS_NO_PFC = "lossless_threshold_pfc_off"
DROP_CREDIT_OVERRUN = "credit_overrun"


@dataclass
class BufferCounters:
    """What the buffer decided, for telemetry."""

    drops: dict = field(default_factory=lambda: defaultdict(int))  # cause -> frames
    drops_by_queue: dict = field(default_factory=lambda: defaultdict(int))  # (port, prio)
    marks: dict = field(default_factory=lambda: defaultdict(int))  # (out_port, prio) -> frames
    xoff_sent: dict = field(default_factory=lambda: defaultdict(int))  # (in_port, prio)
    xon_sent: dict = field(default_factory=lambda: defaultdict(int))
    shared_watermark_bytes: int = 0
    egress_watermark_bytes: dict = field(default_factory=lambda: defaultdict(int))


class SharedBuffer:
    """The shared buffer of one switch.

    Args:
        spec, pfc, ecn: the configuration.
        port_rates: link rate of every port (bps).
        port_delays: one-way link delay of every port (s), for headroom.
        rng: random source for ECN marking (injected so that tests can fix it).
        credit: credit-based flow control (None or disabled: PFC's rules).
    """

    def __init__(
        self,
        spec: BufferSpec,
        pfc: PfcSpec,
        ecn: EcnSpec,
        port_rates: dict[int, int],
        port_delays: dict[int, float] | None = None,
        rng: random.Random | None = None,
        credit: CreditSpec | None = None,
    ) -> None:
        self.spec, self.pfc, self.ecn = spec, pfc, ecn
        self.port_rates = dict(port_rates)
        delays = port_delays or {}
        self.lossless = frozenset(pfc.lossless_priorities) if pfc.enabled else frozenset()
        self.lossless_class = frozenset(pfc.lossless_priorities)
        self.ecn_prios = frozenset(ecn.priorities) if ecn.enabled else frozenset()
        self.headroom = {p: spec.headroom(r, delays.get(p, 0.0)) for p, r in port_rates.items()}
        self.reserved = sum(self.headroom[p] * len(self.lossless) for p in port_rates)
        if self.reserved >= spec.size_bytes:
            raise ValueError(
                f"buffer size_bytes={spec.size_bytes} cannot hold the headroom "
                f"of {len(port_rates)} ports ({self.reserved} bytes)"
            )
        on = credit is not None and credit.enabled
        self.credit_prios = frozenset(credit.priorities) if on else frozenset()
        # What one (port, VL) may hold: the credit advertised covers whole blocks.
        self.credit_capacity = (
            min(credit.vl_buffer_bytes // BLOCK_BYTES, MAX_CREDIT_BLOCKS) * BLOCK_BYTES if on else 0
        )
        credit_total = self.credit_capacity * len(self.credit_prios) * len(port_rates)
        if self.reserved + credit_total >= spec.size_bytes:
            raise ValueError(
                f"buffer size_bytes={spec.size_bytes} cannot hold the credit buffers of "
                f"{len(port_rates)} ports x {len(self.credit_prios)} VLs x "
                f"{self.credit_capacity} bytes ({credit_total} bytes): lower credit "
                "vl_buffer_bytes or raise buffer size_bytes"
            )
        self.reserved += credit_total
        self.kmin_kmax = {p: ecn.thresholds(r) for p, r in port_rates.items()}
        self.rng = rng or random.Random(0)
        self.shared_used = 0
        self.ingress = defaultdict(int)  # (in_port, prio) -> shared bytes
        self.headroom_used = defaultdict(int)  # (in_port, prio) -> headroom bytes
        self.egress = defaultdict(int)  # (out_port, prio) -> bytes queued
        self.paused_upstream: dict[tuple[int, int], float] = {}  # (in_port, prio) -> refresh at
        self._pending: dict[int, dict[int, int]] = defaultdict(dict)
        self.counters = BufferCounters()

    def set_ecn(self, ecn: EcnSpec) -> None:
        """Change the marking thresholds at run time (a misconfiguration, or tuning)."""
        self.ecn = ecn
        self.ecn_prios = frozenset(ecn.priorities) if ecn.enabled else frozenset()
        self.kmin_kmax = {p: ecn.thresholds(r) for p, r in self.port_rates.items()}

    # ----- thresholds -------------------------------------------------------

    def free_bytes(self) -> int:
        return self.spec.size_bytes - self.reserved - self.shared_used

    def xoff_threshold(self) -> float:
        return self.spec.alpha_lossless * self.free_bytes()

    def lossy_threshold(self) -> float:
        return self.spec.alpha_lossy * self.free_bytes()

    # ----- per frame --------------------------------------------------------

    def admit(
        self, in_port: int, prio: int, out_port: int, size: int, ect: bool, now: float
    ) -> tuple[int, bool] | None:
        """Admit a frame; returns (charge, ce_mark) or None when it is dropped.

        `charge` (SHARED or HEADROOM) must be passed back to `release`.
        """
        ekey = (out_port, prio)
        ikey = (in_port, prio)
        egress = self.egress
        queued = egress[ekey]
        if prio in self.credit_prios and in_port:
            # in_port 0 (a controller's PacketOut) holds no credit: the shared pool takes it.
            if self.headroom_used[ikey] + size > self.credit_capacity:
                self._drop(DROP_CREDIT_OVERRUN, ekey)
                return None
            charge = HEADROOM
        elif prio in self.credit_prios:
            charge = SHARED
        elif prio in self.lossless:
            if (
                self.ingress[ikey] + size <= self.xoff_threshold()
                and self.shared_used + size <= self.spec.size_bytes - self.reserved
            ):
                charge = SHARED
            elif self.headroom_used[ikey] + size <= self.headroom.get(in_port, 0):
                charge = HEADROOM
            else:
                self._drop(DROP_HEADROOM, ekey)
                return None
            if ikey not in self.paused_upstream and (
                charge == HEADROOM or self.ingress[ikey] + size > self.xoff_threshold()
            ):
                self.paused_upstream[ikey] = now + self._refresh_s(in_port)
                self._pending[in_port][prio] = self.pfc.pause_quanta
                self.counters.xoff_sent[ikey] += 1
        else:
            spec = self.spec
            # lossy_threshold(), inline: this is every lossy frame's path.
            if queued + size > spec.alpha_lossy * (
                spec.size_bytes - self.reserved - self.shared_used
            ):
                cause = DROP_LOSSLESS_NO_PFC if prio in self.lossless_class else DROP_LOSSY
                self._drop(cause, ekey)
                return None
            charge = SHARED
        mark = ect and prio in self.ecn_prios and self._ecn_mark(out_port, queued)
        if mark:
            self.counters.marks[ekey] += 1
        if charge == SHARED:
            self.ingress[ikey] += size
            self.shared_used += size
            if self.shared_used > self.counters.shared_watermark_bytes:
                self.counters.shared_watermark_bytes = self.shared_used
        else:
            self.headroom_used[ikey] += size
        queued += size
        egress[ekey] = queued
        watermarks = self.counters.egress_watermark_bytes
        if queued > watermarks[ekey]:
            watermarks[ekey] = queued
        return charge, mark

    def release(self, in_port: int, prio: int, out_port: int, size: int, charge: int) -> None:
        """A frame left the switch (sent or flushed): give its bytes back."""
        ikey = (in_port, prio)
        if charge == HEADROOM:
            self.headroom_used[ikey] -= size
        else:
            self.ingress[ikey] -= size
            self.shared_used -= size
        self.egress[(out_port, prio)] -= size

    def credit_held(self, in_port: int, prio: int) -> int:
        """Bytes a credit VL's ingress (port, prio) pool holds (what its credits must leave free)."""
        return self.headroom_used[(in_port, prio)]

    def _drop(self, cause: str, ekey: tuple[int, int]) -> None:
        self.counters.drops[cause] += 1
        self.counters.drops_by_queue[ekey] += 1

    def _ecn_mark(self, out_port: int, queued: int) -> bool:
        kmin, kmax = self.kmin_kmax[out_port]
        if queued <= kmin:
            return False
        if queued >= kmax:
            return True
        return self.rng.random() < self.ecn.pmax * (queued - kmin) / (kmax - kmin)

    # ----- PFC --------------------------------------------------------------

    def _refresh_s(self, in_port: int) -> float:
        return quanta_to_s(self.pfc.pause_quanta, self.port_rates[in_port]) / 2

    def pfc_due(self, now: float) -> list[tuple[int, dict[int, int]]]:
        """PFC frames to send now: XOFF on crossing, refreshes, XON below the resume point."""
        if not self.paused_upstream and not self._pending:
            return []  # nothing paused: every loop pass of every switch asks, twice
        resume = self.xoff_threshold() - self.spec.resume_offset_bytes
        for ikey, refresh_at in list(self.paused_upstream.items()):
            in_port, prio = ikey
            if self.headroom_used[ikey] == 0 and self.ingress[ikey] <= resume:
                del self.paused_upstream[ikey]
                self._pending[in_port][prio] = 0
                self.counters.xon_sent[ikey] += 1
            elif now >= refresh_at:
                self.paused_upstream[ikey] = now + self._refresh_s(in_port)
                self._pending[in_port][prio] = self.pfc.pause_quanta
                self.counters.xoff_sent[ikey] += 1
        out = [(port, quanta) for port, quanta in self._pending.items() if quanta]
        self._pending.clear()
        return out

    def next_pfc_at(self) -> float | None:
        """When `pfc_due` next has a refresh to send (None if nothing is paused)."""
        return min(self.paused_upstream.values()) if self.paused_upstream else None

    def snapshot(self) -> dict:
        """Counters and occupancy for the management socket."""
        c = self.counters

        def keyed(d):
            return {f"{k[0]}:{k[1]}": v for k, v in d.items() if v}

        return {
            "size_bytes": self.spec.size_bytes,
            "credit_vl_bytes": self.credit_capacity,
            "reserved_headroom_bytes": self.reserved,
            "shared_used_bytes": self.shared_used,
            "shared_watermark_bytes": c.shared_watermark_bytes,
            "xoff_threshold_bytes": int(self.xoff_threshold()),
            "drops": dict(c.drops),
            "drops_by_queue": keyed(c.drops_by_queue),
            "ecn_marks": keyed(c.marks),
            "xoff_sent": keyed(c.xoff_sent),
            "xon_sent": keyed(c.xon_sent),
            "paused_upstream": sorted(f"{p}:{q}" for p, q in self.paused_upstream),
            # Per ingress (port, prio): what XOFF is decided on (a deadlock's full buffers).
            "ingress_bytes": keyed(self.ingress),
            "headroom_used_bytes": keyed(self.headroom_used),
            "egress_bytes": keyed(self.egress),
            "egress_watermark_bytes": keyed(c.egress_watermark_bytes),
        }

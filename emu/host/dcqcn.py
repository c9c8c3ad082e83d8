"""DCQCN congestion control as a pure state machine: reaction point and notification point.

Owns the DCQCN algorithm of Zhu et al., "Congestion Control for Large-Scale
RDMA Deployments" (SIGCOMM 2015), section 3 ("the DCQCN algorithm"):

- the reaction point (RP, the sender's NIC): rate decrease on each CNP and
  the EWMA of alpha (eq. 1), alpha decay without CNPs (eq. 2), rate increase
  driven by a timer and a byte counter in three stages, fast recovery
  (eq. 3), additive increase (eq. 4) and hyper increase (section 3.1,
  "Rate increase", after QCN, IEEE 802.1Qau);
- the notification point (NP, the receiver's NIC): at most one CNP per queue
  pair per CNP interval (section 3.1, "NP algorithm"; Mellanox
  ``min_time_between_cnps``).

It does not own clocks, sockets, packets or pacing: every method takes `now`
(seconds of emulated, i.e. wall-clock, time) and returns decisions. The NIC
model in the host agent drives it: it calls `ReactionPoint.advance` at
`next_event_at()`, reports sent bytes and received CNPs, paces at `rate_bps`,
and asks `NotificationPoint.on_ce` whether a CE-marked packet earns a CNP.

Time scale (DESIGN.md, "Conventions"): the emulated link runs at
`line_rate_bps` on a veth (e.g. 100 Mbit/s) and models hardware at
``line_rate_bps * time_scale`` (e.g. 400 Gbit/s at time_scale 4000). Every
parameter of `DcqcnSpec` is given in modelled (hardware) units; the state
machines run on `DcqcnSpec.effective()`, where timers are multiplied by
time_scale (55 us modelled lasts 220 ms at 1:4000) and rates divided by it
(R_AI 40 Mbit/s modelled is 10 kbit/s emulated). Byte counts are not scaled:
rate x time is invariant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Hashable

from emu.config import ConfigError

# Rc = (Rt + Rc) / 2 approaches Rt only asymptotically: within this gap, Rc
# snaps to Rt (gap relative to the line rate), so that a flow reaches line
# rate and its timer goes idle.
_SNAP_FRACTION = 1e-9


def _check(cond: bool, key: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"DcqcnSpec {key}={value!r}: {allowed}")


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class DcqcnEffective:
    """The DCQCN parameters in emulated (wall-clock) units, as the state machines use them.

    Times are seconds of emulated time, rates bit/s at the emulated link rate.
    """

    line_rate_bps: float
    min_rate_bps: float
    rate_ai_bps: float
    rate_hai_bps: float
    alpha_period_s: float
    increase_period_s: float
    cnp_interval_s: float
    byte_counter_bytes: int


@dataclass(frozen=True)
class DcqcnSpec:
    """DCQCN parameters of one NIC, validated on construction.

    `line_rate_bps` is the EMULATED link rate. `time_scale` is the number of
    emulated (wall-clock) seconds that one modelled (hardware) second lasts,
    which equals modelled rate / emulated rate: 100 Mbit/s emulating
    400 Gbit/s is time_scale 4000. All other fields are in modelled units;
    `effective()` converts them. Rates left at None are fractions of the
    modelled line rate, so that the defaults fit any hardware speed.

    Defaults and sources:

    - g = 1/256: DCQCN paper, section 3.1 / section 5 parameter choice;
    - alpha_init = 1: DCQCN paper, section 3.1 (first CNP halves the rate);
    - alpha_period_s = 55 us (K): DCQCN paper, section 3.1;
    - increase_period_s = 55 us (T): DCQCN paper section 5 and ns3-rdma
      (Zhu's simulator); some versions of the paper text give 1.5 ms, we
      follow the evaluated setting;
    - byte_counter_bytes = 10 MB (B): DCQCN paper, section 5;
    - fast_recovery_steps = 5 (F): DCQCN paper, section 3.1 (after QCN);
    - rate_ai_bps = line/1000 (40 Mbit/s at 40 Gbit/s) and rate_hai_bps =
      line/200 (200 Mbit/s at 40 Gbit/s): DCQCN paper / ns3-rdma configs;
    - cnp_interval_s = 50 us (N): DCQCN paper, section 3.1 (NP);
    - min_rate_bps = line/1000 (100 Mbit/s at 100 Gbit/s): HPCC ns-3
      ``RdmaHw::MinRate``.
    """

    line_rate_bps: float
    time_scale: float = 1.0
    g: float = 1 / 256
    alpha_init: float = 1.0
    alpha_period_s: float = 55e-6
    increase_period_s: float = 55e-6
    byte_counter_bytes: int = 10_000_000
    fast_recovery_steps: int = 5
    rate_ai_bps: float | None = None
    rate_hai_bps: float | None = None
    cnp_interval_s: float = 50e-6
    min_rate_bps: float | None = None

    def __post_init__(self) -> None:
        _check(
            _is_num(self.line_rate_bps) and self.line_rate_bps > 0,
            "line_rate_bps",
            self.line_rate_bps,
            "a positive emulated rate in bit/s",
        )
        _check(
            _is_num(self.time_scale) and self.time_scale > 0,
            "time_scale",
            self.time_scale,
            "a positive factor (emulated seconds per modelled second)",
        )
        _check(_is_num(self.g) and 0 < self.g < 1, "g", self.g, "a gain in (0, 1), e.g. 1/256")
        _check(
            _is_num(self.alpha_init) and 0 <= self.alpha_init <= 1,
            "alpha_init",
            self.alpha_init,
            "a value in [0, 1]",
        )
        for key in ("alpha_period_s", "increase_period_s", "cnp_interval_s"):
            value = getattr(self, key)
            _check(
                _is_num(value) and value > 0,
                key,
                value,
                "a positive modelled time in seconds (e.g. 55e-6)",
            )
        _check(
            isinstance(self.byte_counter_bytes, int) and self.byte_counter_bytes > 0,
            "byte_counter_bytes",
            self.byte_counter_bytes,
            "a positive integer byte count",
        )
        _check(
            isinstance(self.fast_recovery_steps, int) and self.fast_recovery_steps >= 0,
            "fast_recovery_steps",
            self.fast_recovery_steps,
            "an integer >= 0",
        )
        for key in ("rate_ai_bps", "rate_hai_bps"):
            value = getattr(self, key)
            if value is not None:
                _check(
                    _is_num(value) and 0 < value <= self.modelled_line_rate_bps,
                    key,
                    value,
                    f"None or a modelled rate in (0, {self.modelled_line_rate_bps:g}] bit/s",
                )
        if self.min_rate_bps is not None:
            _check(
                _is_num(self.min_rate_bps) and 0 < self.min_rate_bps < self.modelled_line_rate_bps,
                "min_rate_bps",
                self.min_rate_bps,
                f"None or a modelled rate in (0, {self.modelled_line_rate_bps:g}) bit/s",
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DcqcnSpec:
        """Build from a mapping; unknown keys raise `ConfigError` naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown DcqcnSpec key(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(known))}"
            )
        return cls(**data)

    @classmethod
    def from_hardware(
        cls, line_rate_bps: float, modelled_rate_bps: float, **overrides: Any
    ) -> DcqcnSpec:
        """A spec for an emulated link of `line_rate_bps` that models `modelled_rate_bps`.

        Args:
            line_rate_bps: the emulated link rate (bit/s).
            modelled_rate_bps: the hardware rate it stands for (bit/s).
            **overrides: other `DcqcnSpec` fields, in modelled units.

        Returns:
            A spec with time_scale = modelled_rate_bps / line_rate_bps.

        Raises:
            ConfigError: a rate is not positive, or an override is unknown or
                is time_scale / line_rate_bps (derived here).

        Examples:
            >>> spec = DcqcnSpec.from_hardware(100e6, 400e9)
            >>> spec.time_scale, round(spec.effective().increase_period_s, 6)
            (4000.0, 0.22)
        """
        _check(
            _is_num(modelled_rate_bps) and modelled_rate_bps > 0,
            "modelled_rate_bps",
            modelled_rate_bps,
            "a positive hardware rate in bit/s",
        )
        _check(
            _is_num(line_rate_bps) and line_rate_bps > 0,
            "line_rate_bps",
            line_rate_bps,
            "a positive emulated rate in bit/s",
        )
        for key in ("time_scale", "line_rate_bps"):
            if key in overrides:
                raise ConfigError(
                    f"DcqcnSpec {key}={overrides[key]!r}: derived by from_hardware, not an override"
                )
        return cls.from_dict(
            {
                "line_rate_bps": line_rate_bps,
                "time_scale": modelled_rate_bps / line_rate_bps,
                **overrides,
            }
        )

    @property
    def modelled_line_rate_bps(self) -> float:
        """The hardware line rate this emulated link stands for."""
        return self.line_rate_bps * self.time_scale

    def effective(self) -> DcqcnEffective:
        """The parameters in emulated units: times x time_scale, rates / time_scale."""
        line = self.modelled_line_rate_bps
        scale = self.time_scale
        ai = self.rate_ai_bps if self.rate_ai_bps is not None else line / 1000
        hai = self.rate_hai_bps if self.rate_hai_bps is not None else line / 200
        min_rate = self.min_rate_bps if self.min_rate_bps is not None else line / 1000
        return DcqcnEffective(
            line_rate_bps=float(self.line_rate_bps),
            min_rate_bps=min_rate / scale,
            rate_ai_bps=ai / scale,
            rate_hai_bps=hai / scale,
            alpha_period_s=self.alpha_period_s * scale,
            increase_period_s=self.increase_period_s * scale,
            cnp_interval_s=self.cnp_interval_s * scale,
            byte_counter_bytes=self.byte_counter_bytes,
        )


class ReactionPoint:
    """The sender side of DCQCN for one flow (queue pair): current rate Rc, target Rt, alpha.

    State starts at Rc = Rt = line rate, alpha = alpha_init. Events:

    - CNP (`on_cnp`), section 3.1 eq. (1): Rt = Rc; Rc = Rc (1 - alpha/2);
      alpha = (1 - g) alpha + g. The increase state restarts: the timer
      from now, the byte counter from zero, both stage counters at zero.
    - alpha timer, eq. (2): every K (alpha period) without a CNP,
      alpha = (1 - g) alpha. A CNP restarts this timer.
    - rate-increase events: the timer expires every T, the byte counter
      every B bytes sent (`on_bytes_sent`). Each event bumps its stage
      counter (t or b) and then, with F fast-recovery steps:
      fast recovery while max(t, b) <= F, eq. (3): Rc = (Rt + Rc) / 2;
      additive increase once one counter passed F, eq. (4): Rt += R_AI,
      Rc = (Rt + Rc) / 2; hyper increase once both passed F:
      Rt += i R_HAI with i = min(t, b) - F, Rc = (Rt + Rc) / 2.
    - Rt and Rc are capped at the line rate, Rc floored at the min rate.

    Args:
        spec: the DCQCN spec; the machine runs on `spec.effective()`.
        now: the emulated time the flow starts (seconds).
    """

    def __init__(self, spec: DcqcnSpec, now: float) -> None:
        self.spec = spec
        self.eff = spec.effective()
        self.rc_bps = self.eff.line_rate_bps
        self.rt_bps = self.eff.line_rate_bps
        self.alpha = spec.alpha_init
        self.timer_stage = 0
        self.byte_stage = 0
        self.bytes_since_event = 0
        self.now = now
        # Timers expire at anchor + n x period (no drift from repeated sums).
        self._increase_anchor, self._increase_n = now, 1
        self._alpha_anchor, self._alpha_n = now, 1
        self.cnps_received = 0
        self.rate_decreases = 0
        self.alpha_decays = 0
        self.timer_events = 0
        self.byte_events = 0
        self.increases = {"fast_recovery": 0, "additive": 0, "hyper": 0}

    @property
    def rate_bps(self) -> float:
        """The current sending rate Rc at the emulated link rate (bit/s)."""
        return self.rc_bps

    @property
    def target_rate_bps(self) -> float:
        """The target rate Rt (bit/s, emulated)."""
        return self.rt_bps

    def next_event_at(self) -> float | None:
        """When the driver should call `advance` next, or None while nothing can change the rate.

        That is the next rate-increase timer expiry while Rc or Rt is below
        the line rate. Alpha decays do not move the rate; `advance`,
        `on_cnp` and `on_bytes_sent` apply the ones due in closed form.
        """
        if self._at_line_rate():
            return None
        return self._next_increase_at()

    def advance(self, now: float) -> None:
        """Process every timer event due at or before `now`, in time order.

        Several periods may have elapsed; the result is the same as calling
        at each expiry. Times going backwards are ignored.
        """
        if now < self.now:
            return
        self.now = now
        self._decay_alpha(now)
        while self._next_increase_at() <= now:
            if self._at_line_rate():
                # Further events cannot change the rates: count them at once.
                missed = self._expiries(
                    now, self._increase_anchor, self._increase_n, self.eff.increase_period_s
                )
                self.timer_stage += missed
                self.timer_events += missed
                self._increase_n += missed
                break
            self._increase_n += 1
            self.timer_stage += 1
            self.timer_events += 1
            self._increase()

    def on_bytes_sent(self, size_bytes: int, now: float) -> None:
        """Count `size_bytes` sent at `now`; every B bytes is one rate-increase event."""
        self.advance(now)
        self.bytes_since_event += size_bytes
        threshold = self.eff.byte_counter_bytes
        while self.bytes_since_event >= threshold:
            self.bytes_since_event -= threshold
            self.byte_stage += 1
            self.byte_events += 1
            self._increase()

    def on_cnp(self, now: float) -> None:
        """A CNP arrived at `now`: eq. (1), then restart the increase state and the alpha timer."""
        self.advance(now)
        self.cnps_received += 1
        self.rate_decreases += 1
        self.rt_bps = self.rc_bps
        self.rc_bps = max(self.rc_bps * (1 - self.alpha / 2), self.eff.min_rate_bps)
        self.alpha = (1 - self.spec.g) * self.alpha + self.spec.g
        self._alpha_anchor, self._alpha_n = now, 1
        self._increase_anchor, self._increase_n = now, 1
        self.timer_stage = 0
        self.byte_stage = 0
        self.bytes_since_event = 0

    def counters(self) -> dict[str, Any]:
        """Telemetry: state and event counts."""
        return {
            "rate_bps": self.rc_bps,
            "target_rate_bps": self.rt_bps,
            "alpha": self.alpha,
            "cnps_received": self.cnps_received,
            "rate_decreases": self.rate_decreases,
            "alpha_decays": self.alpha_decays,
            "timer_events": self.timer_events,
            "byte_events": self.byte_events,
            **{f"increases_{kind}": n for kind, n in self.increases.items()},
        }

    def _at_line_rate(self) -> bool:
        line = self.eff.line_rate_bps
        return self.rc_bps >= line and self.rt_bps >= line

    def _next_increase_at(self) -> float:
        return self._increase_anchor + self._increase_n * self.eff.increase_period_s

    @staticmethod
    def _expiries(now: float, anchor: float, n: int, period: float) -> int:
        """How many of the expiries anchor + k x period, k >= n, fall at or before `now`."""
        last = math.floor((now - anchor) / period)
        while anchor + (last + 1) * period <= now:  # floor of a float quotient may be short
            last += 1
        while last >= n and anchor + last * period > now:
            last -= 1
        return max(0, last - n + 1)

    def _decay_alpha(self, now: float) -> None:
        # eq. (2) applied n times in closed form: alpha (1 - g)^n.
        n = self._expiries(now, self._alpha_anchor, self._alpha_n, self.eff.alpha_period_s)
        if n:
            self.alpha *= (1 - self.spec.g) ** n
            self.alpha_decays += n
            self._alpha_n += n

    def _increase(self) -> None:
        f = self.spec.fast_recovery_steps
        line = self.eff.line_rate_bps
        if max(self.timer_stage, self.byte_stage) <= f:
            kind = "fast_recovery"
        elif min(self.timer_stage, self.byte_stage) <= f:
            kind = "additive"
            self.rt_bps = min(self.rt_bps + self.eff.rate_ai_bps, line)
        else:
            kind = "hyper"
            i = min(self.timer_stage, self.byte_stage) - f
            self.rt_bps = min(self.rt_bps + i * self.eff.rate_hai_bps, line)
        self.increases[kind] += 1
        rc = (self.rt_bps + self.rc_bps) / 2
        if self.rt_bps - rc < line * _SNAP_FRACTION:
            rc = self.rt_bps  # halving converges only asymptotically
        self.rc_bps = min(max(rc, self.eff.min_rate_bps), line)


class NotificationPoint:
    """The receiver side of DCQCN: turns CE-marked packets into CNPs, rate-limited per QP.

    Section 3.1 (NP algorithm): if a CE-marked packet arrives for a flow and
    no CNP was sent for it in the last N (the CNP interval, 50 us modelled),
    send one. Mellanox NICs apply the interval per queue pair.

    Args:
        spec: the DCQCN spec; the interval used is `spec.effective().cnp_interval_s`.
    """

    def __init__(self, spec: DcqcnSpec) -> None:
        self.spec = spec
        self.interval_s = spec.effective().cnp_interval_s
        self._last_cnp_at: dict[Hashable, float] = {}
        self.ce_received = 0
        self.cnps_sent = 0
        self.cnps_suppressed = 0

    def on_ce(self, qp: Hashable, now: float) -> bool:
        """A CE-marked packet of queue pair `qp` arrived at `now`; True if a CNP must go out now."""
        self.ce_received += 1
        last = self._last_cnp_at.get(qp)
        if last is not None and now - last < self.interval_s:
            self.cnps_suppressed += 1
            return False
        self._last_cnp_at[qp] = now
        self.cnps_sent += 1
        return True

    def forget(self, qp: Hashable) -> None:
        """Drop the state of a destroyed queue pair."""
        self._last_cnp_at.pop(qp, None)

    def counters(self) -> dict[str, int]:
        """Telemetry: CE marks seen, CNPs generated and suppressed."""
        return {
            "ce_received": self.ce_received,
            "cnps_sent": self.cnps_sent,
            "cnps_suppressed": self.cnps_suppressed,
        }

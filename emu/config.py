"""Validated, frozen specifications of the switch's lossless-Ethernet behaviour.

Owns the parameters (and their defaults, each with its source) of the shared
buffer, PFC, credit-based flow control and ECN marking. Every spec is a frozen dataclass validated on
construction; `from_dict` rejects unknown keys. An error names the key, the
value and what is allowed. Rates, sizes and ECN thresholds here are at the
emulated link rate; the PFC watchdog's times are modelled times, which the
fabric scales by its time scale (emu/fabric/, "The time scale").

Also owns the fabric's bounds (`Bound`: link rate, modelled NIC rate, link
delay, time scale, hosts per switch) and `ConfigError`, the one error type of
every validator of user input: `--set` (emu/scenario.py's `ScenarioError`),
topology files (emu/topofile.py's `TopoFileError`), the pytest marker and
`emu.scenario.fabric_graph` all hold a value to the same `Bound` and say the
same words when it is out of range (docs/parameters.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

MTU_FRAME_BYTES = 1514


class ConfigError(ValueError):
    """A value emu refuses, out of range or unknown; the one line says what is allowed.

    The one error type of input validation: `emu.scenario.ScenarioError` and
    `emu.topofile.TopoFileError` are kinds of it, and the `emu` command turns
    any of them into one line on stderr and exit status 2.
    """

    def __init__(self, message: str = "", *args: Any) -> None:
        # A key or value from the user may hold a line break; the message stays one line.
        text = str(message).replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(text, *args)


@dataclass(frozen=True)
class Bound:
    """The range one quantity is held to, wherever it is given.

    `allowed` is how every message says the range, so that `--set rate_mbps=0`
    and a topology file's `rate: 1` are refused in the same words.
    """

    lo: float
    hi: float
    allowed: str
    integer: bool = False

    def check(self, key: str, value: Any, shown: Any = None) -> Any:
        """`value` if it is a finite number (an integer if `integer`) in lo..hi.

        Raises:
            ConfigError: ``KEY=VALUE: <allowed>`` (`shown` stands for the value
                in the message, e.g. the file's own spelling ``1T``).
        """
        what = f"{key}={value!r}" if shown is None else f"{key}={shown}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{what}: expected {'an integer' if self.integer else 'a number'}")
        if self.integer and not isinstance(value, int):
            raise ConfigError(f"{what}: expected an integer; {self.allowed}")
        if not self.contains(value):
            raise ConfigError(f"{what}: {self.allowed}")
        return value

    def contains(self, value: float) -> bool:
        """`value` is finite and in lo..hi (NaN is not: it compares false with everything)."""
        try:
            return math.isfinite(value) and self.lo <= value <= self.hi
        except OverflowError:  # an int too large for a float
            return False


# The fabric's bounds. Up to 1 Gbit/s: emu's switches keep time to a few
# hundred Mbit/s on 2 cores (docs/performance.md) and Linux's tc token bucket,
# which paces the hosts, is exact to about 1 Gbit/s; down to 100 kbit/s, where
# one full frame already takes 0.12 s.
LINK_RATE_BPS = Bound(1e5, 1e9, "must be in 0.1..1000 Mbit/s (100K..1G bit/s)")
# The modelled NICs: 100 kbit/s to 800 Gbit/s (ConnectX-8, the fastest NIC shipping).
MODELLED_RATE_BPS = Bound(1e5, 800e9, "must be in 0.0001..800 Gbit/s (100K..800G bit/s)")
# What a modelled rate over an emulated one can make of the time scale.
TIME_SCALE = Bound(
    MODELLED_RATE_BPS.lo / LINK_RATE_BPS.hi,
    MODELLED_RATE_BPS.hi / LINK_RATE_BPS.lo,
    "must be in 0.0001..8e6 (a modelled rate of 100K..800G over a link of 100K..1G)",
)
# One-way propagation delay: a cable is nanoseconds, a WAN link tens of
# milliseconds; a second is already far beyond any fabric.
LINK_DELAY_S = Bound(0.0, 1.0, "must be in 0..1 s (e.g. 0, 100us, 1ms)")
# Hosts on one switch: each is a network namespace, a NIC agent and two
# interfaces; the builders' hosts_per_leaf stops at the same 32.
HOSTS_PER_SWITCH = Bound(1, 32, "must be in 1..32 hosts per switch", integer=True)


def _check(cond: bool, key: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{key}={value!r}: {allowed}")


def _check_prios(key: str, prios: tuple[int, ...]) -> None:
    _check(
        all(isinstance(p, int) and 0 <= p <= 7 for p in prios),
        key,
        prios,
        "priorities are integers 0..7",
    )


class _Spec:
    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown {cls.__name__} key(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(known))}"
            )
        return cls(**data)


@dataclass(frozen=True)
class PfcSpec(_Spec):
    """Priority flow control.

    Defaults: RoCE on priority 3 lossless (DESIGN.md conventions); PAUSE with
    the largest pause time, refreshed every half pause time while above XOFF
    and released with quanta 0 below XON (802.1Qbb; ns3-rdma).
    """

    enabled: bool = True
    lossless_priorities: tuple[int, ...] = (3,)
    pause_quanta: int = 0xFFFF

    def __post_init__(self) -> None:
        _check_prios("lossless_priorities", self.lossless_priorities)
        _check(
            1 <= self.pause_quanta <= 0xFFFF,
            "pause_quanta",
            self.pause_quanta,
            "1..65535 quanta (one quantum is 512 bit times)",
        )


@dataclass(frozen=True)
class EcnSpec(_Spec):
    """RED-style ECN marking at enqueue on ECT packets.

    Defaults: Kmin/Kmax/Pmax of 100 KB/400 KB/0.2 at 25 Gbit/s (DCQCN paper;
    HPCC ns-3 configs), scaled by the emulated rate and floored at a few
    frames, where the scaled value would be smaller than a packet.
    """

    enabled: bool = True
    priorities: tuple[int, ...] = (3,)
    kmin_bytes: int | None = None
    kmax_bytes: int | None = None
    pmax: float = 0.2

    def __post_init__(self) -> None:
        _check_prios("priorities", self.priorities)
        _check(0.0 <= self.pmax <= 1.0, "pmax", self.pmax, "a probability in 0..1")
        if self.kmin_bytes is not None and self.kmax_bytes is not None:
            _check(
                0 <= self.kmin_bytes < self.kmax_bytes,
                "kmin_bytes",
                self.kmin_bytes,
                f"must be below kmax_bytes={self.kmax_bytes}",
            )

    def thresholds(self, rate_bps: int) -> tuple[int, int]:
        """(Kmin, Kmax) in bytes at `rate_bps`."""
        scale = rate_bps / 25e9
        kmin = (
            self.kmin_bytes
            if self.kmin_bytes is not None
            else max(int(100_000 * scale), 4 * MTU_FRAME_BYTES)
        )
        kmax = (
            self.kmax_bytes
            if self.kmax_bytes is not None
            else max(int(400_000 * scale), 16 * MTU_FRAME_BYTES)
        )
        return kmin, max(kmax, kmin + 1)


@dataclass(frozen=True)
class BufferSpec(_Spec):
    """The switch's shared buffer.

    Defaults: dynamic thresholds with alpha 1/8 for lossless ingress and 1/2
    for lossy egress (HPCC ns-3 switch model: (buffer - headroom - used) x
    alpha); headroom per lossless (port, priority) of 3 x rate x link delay
    (HPCC ns-3), floored at 16 full frames because a Python datapath reacts to
    PAUSE about a millisecond late; resume (XON) two frames below XOFF.
    The 1 MiB size is a shallow-buffer switch at emulated rates (at 20 Mbit/s
    it holds 0.4 s of one port's traffic).
    """

    size_bytes: int = 1 << 20
    alpha_lossless: float = 1 / 8
    alpha_lossy: float = 1 / 2
    headroom_bytes: int | None = None
    headroom_floor_frames: int = 16
    resume_offset_bytes: int = 2 * MTU_FRAME_BYTES

    def __post_init__(self) -> None:
        _check(
            self.size_bytes >= 16 * MTU_FRAME_BYTES,
            "size_bytes",
            self.size_bytes,
            f">= {16 * MTU_FRAME_BYTES} (16 full frames)",
        )
        for key in ("alpha_lossless", "alpha_lossy"):
            value = getattr(self, key)
            _check(0 < value <= 64, key, value, "a positive factor (e.g. 1/8)")
        if self.headroom_bytes is not None:
            _check(
                self.headroom_bytes >= MTU_FRAME_BYTES,
                "headroom_bytes",
                self.headroom_bytes,
                f">= one frame ({MTU_FRAME_BYTES})",
            )
        _check(
            self.resume_offset_bytes >= 0, "resume_offset_bytes", self.resume_offset_bytes, ">= 0"
        )

    def headroom(self, rate_bps: int, delay_s: float) -> int:
        """Headroom of one lossless (port, priority) at `rate_bps` over a link of `delay_s`."""
        if self.headroom_bytes is not None:
            return self.headroom_bytes
        return max(int(3 * rate_bps * delay_s / 8), self.headroom_floor_frames * MTU_FRAME_BYTES)


IBA_BLOCK_BYTES = 64
IBA_MAX_CREDIT_BLOCKS = 2048


@dataclass(frozen=True)
class CreditSpec(_Spec):
    """InfiniBand-style credit-based link-level flow control (emu/credit.py), instead of PFC.

    Each priority in `priorities` is a virtual lane (VL = priority) whose
    receiver advertises credits in 64-byte blocks (IBA vol 1, 7.9.4) for a
    buffer of `vl_buffer_bytes` per (port, VL); the other priorities are not
    flow-controlled (as IBA's VL15) and tail-drop like a lossy class.

    Defaults: RoCE's priority 3 (DESIGN.md conventions); 64 KiB per (port,
    VL): 1/16 of the 1 MiB shared buffer, so that 16 ports' lanes fit in it,
    and above the 2048-block ceiling's half that 12-bit counters allow
    (IBA: FCCL - FCTBS <= 2048 blocks = 128 KiB); an update whenever 1/8 of
    the lane's buffer has been freed since the last one (one update per ~7
    full frames: under 1% of the link); and a refresh of every lane at least
    every 65,536 symbol times (our reading of IBA vol 1, 7.9.4, the bound on
    the time between flow control packets, which recovers a lost update; not
    checked against the specification's text, which is not public), a symbol
    being one byte time at the link rate.
    """

    enabled: bool = False
    priorities: tuple[int, ...] = (3,)
    vl_buffer_bytes: int = 64 * 1024
    update_fraction: float = 1 / 8
    refresh_symbols: int = 65536

    def __post_init__(self) -> None:
        _check_prios("priorities", self.priorities)
        _check(
            MTU_FRAME_BYTES <= self.vl_buffer_bytes <= IBA_MAX_CREDIT_BLOCKS * IBA_BLOCK_BYTES,
            "vl_buffer_bytes",
            self.vl_buffer_bytes,
            f"{MTU_FRAME_BYTES}..{IBA_MAX_CREDIT_BLOCKS * IBA_BLOCK_BYTES} "
            "(one full frame .. the 2048 blocks a 12-bit credit counter can grant)",
        )
        _check(0 < self.update_fraction <= 1, "update_fraction", self.update_fraction, "in (0, 1]")
        _check(self.refresh_symbols >= 1, "refresh_symbols", self.refresh_symbols, ">= 1")

    @property
    def vl_buffer_blocks(self) -> int:
        return self.vl_buffer_bytes // IBA_BLOCK_BYTES

    def refresh_s(self, rate_bps: float) -> float:
        """The longest time between two flow control packets of one VL at `rate_bps`."""
        return self.refresh_symbols * 8 / rate_bps


FLOW_CONTROL_MODES = ("pfc", "credit")

# The controller's managers that run beside routing (controllers/routing_api.py,
# `--extensions`), in the order they are attached when several are named: adaptive
# routing (controllers/adaptive.py), Tagger (controllers/tagger.py) and UGAL on a
# dragonfly (controllers/ugal.py).
ROUTING_EXTENSIONS = ("adaptive", "tagger", "ugal")


def routing_extensions(names: Any) -> tuple[str, ...]:
    """`names` (a comma list or a sequence) as distinct ROUTING_EXTENSIONS names, in order.

    Raises:
        ConfigError: an unknown or repeated name, named with what is allowed.
    """
    items = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    items = [n for n in items if n]
    bad = [n for n in items if n not in ROUTING_EXTENSIONS]
    if bad or len(set(items)) != len(items):
        raise ConfigError(
            f"extensions {','.join(map(str, items))!r}: a comma list of "
            f"{', '.join(ROUTING_EXTENSIONS)}, each at most once"
        )
    return tuple(items)


def flow_control_qos(mode: str, qos: dict[str, Any] | None = None) -> dict[str, Any]:
    """`qos` (a fabric's QoS document) with link flow control `mode`: "pfc" or "credit".

    "credit" turns PFC off and credits on (the two are exclusive on a link);
    "pfc" leaves `qos` as it is.

    Raises:
        ConfigError: an unknown mode.
    """
    _check(
        mode in FLOW_CONTROL_MODES, "flow_control", mode, f"one of {', '.join(FLOW_CONTROL_MODES)}"
    )
    qos = dict(qos or {})
    if mode == "credit":
        qos["pfc"] = {**qos.get("pfc", {}), "enabled": False}
        qos["credit"] = {**qos.get("credit", {}), "enabled": True}
    return qos


WATCHDOG_ACTIONS = ("drop", "forward", "alert")


@dataclass(frozen=True)
class WatchdogSpec(_Spec):
    """PFC watchdog, with SONiC's semantics (`pfcwd`).

    Defaults: detection 200 ms, restoration 200 ms, action drop (SONiC pfcwd
    defaults); polled every 100 ms, so a storm is detected within detection
    time plus one poll. Times are modelled times, multiplied by the fabric's
    `time_scale` (1.0 by default: emulated time is modelled time).
    """

    enabled: bool = True
    detection_s: float = 0.2
    restoration_s: float = 0.2
    action: str = "drop"
    poll_s: float = 0.1
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        for key in ("detection_s", "restoration_s", "poll_s", "time_scale"):
            value = getattr(self, key)
            _check(isinstance(value, (int, float)) and value > 0, key, value, "> 0 seconds")
        _check(
            self.action in WATCHDOG_ACTIONS,
            "action",
            self.action,
            f"one of {', '.join(WATCHDOG_ACTIONS)}",
        )


QOS_SECTIONS = ("buffer", "pfc", "ecn", "watchdog", "credit")


def parse_qos(doc: dict[str, Any]) -> dict[str, Any]:
    """A switch's QoS settings {"buffer", "pfc", "ecn", "watchdog": {...}} as validated specs.

    Raises:
        ConfigError: an unknown section or key, or a bad value (named).
    """
    if not isinstance(doc, dict):
        raise ConfigError(f"qos must be a mapping of {', '.join(QOS_SECTIONS)}")
    unknown = sorted(set(doc) - set(QOS_SECTIONS))
    if unknown:
        raise ConfigError(
            f"unknown qos section(s) {', '.join(unknown)}; allowed: {', '.join(QOS_SECTIONS)}"
        )

    def tuples(d: dict) -> dict:
        return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}

    out = {
        "buffer": BufferSpec.from_dict(doc.get("buffer", {})),
        "pfc": PfcSpec.from_dict(tuples(doc.get("pfc", {}))),
        "ecn": EcnSpec.from_dict(tuples(doc.get("ecn", {}))),
        "watchdog": WatchdogSpec.from_dict(doc.get("watchdog", {})),
        "credit": CreditSpec.from_dict(tuples(doc.get("credit", {}))),
    }
    if out["credit"].enabled and out["pfc"].enabled:
        raise ConfigError(
            "credit enabled=True with pfc enabled=True: a link runs one flow control, "
            'set pfc {"enabled": false} (or use flow_control="credit")'
        )
    return out

"""The compiled NIC engine behind emu/host/rnic.py's interface.

Owns the choice of engine and the Python side of the C one: `CRnic` keeps an
`emu.host._nicpath.Engine` (emu/host/csrc/) and answers the calls the agent,
the collectives and the tests make of `Rnic` (connect, post, next_frame,
receive, tick, the wake-ups, completions, whole received messages, counters),
with the same arguments, the same checks and the same results. What is not
per frame stays here: argument checks, the DCQCN spec (the C reaction point
runs on `DcqcnSpec.effective()`), and the headers a connection's frames are
built from, made once per connection with `emu.proto.headers`.

rnic.py stays the specification: tests/unit/test_nic_differential.py drives
both engines with the same scripted losses, reorderings, PAUSEs and CNPs and
requires the same frames and counters. `EMU_NIC=python` selects rnic.py
(`make_nic`). On a credit link the credit loop runs in C as well
(emu/host/csrc/nic_credit.c); its sizes are emu/credit.py's `CreditLink`'s,
built here once.
"""

from __future__ import annotations

import importlib
import math
import os

from emu import fidelity
from emu.credit import CreditLink
from emu.host import rnic
from emu.host.dcqcn import DcqcnSpec
from emu.host.rnic import NicConfig, Rnic
from emu.proto import credit as ibfc
from emu.proto import headers, pfc, roce

# The extension is optional at import time (a tree not built yet still runs
# rnic.py); importlib keeps every import statement of emu/host/ at module level
# (tests/unit/test_host_imports.py).
try:
    _nicpath = importlib.import_module("emu.host._nicpath")
except ImportError as exc:  # not built: `pip install -e .` builds it (scripts/bootstrap)
    _nicpath = None
    IMPORT_ERROR = str(exc)
else:
    IMPORT_ERROR = ""

ENV = "EMU_NIC"
ENGINES = ("c", "python")


def engine_name() -> str:
    """The engine `EMU_NIC` asks for ("c", the default, or "python").

    Raises:
        ValueError: `EMU_NIC` names another engine.
    """
    name = os.environ.get(ENV, "c") or "c"
    if name not in ENGINES:
        raise ValueError(f"{ENV}={name!r}: must be one of {', '.join(ENGINES)}")
    return name


def make_nic(cfg: NicConfig, now: float) -> Rnic | CRnic:
    """The NIC model for `cfg`: the C engine unless `EMU_NIC=python` (or it is not built).

    Raises:
        RuntimeError: `EMU_NIC=c` was asked for explicitly and the extension is not built.
    """
    name = engine_name()
    if name == "python":
        return Rnic(cfg, now)
    if _nicpath is None:
        if os.environ.get(ENV) == "c":
            raise RuntimeError(f"{ENV}=c but emu.host._nicpath is not built: {IMPORT_ERROR}")
        return Rnic(cfg, now)
    return CRnic(cfg, now)


def new_loop():
    """A loop that serves one or several engines from one thread (emu/host/csrc/nic_loop.c)."""
    if _nicpath is None:
        raise RuntimeError(f"emu.host._nicpath is not built: {IMPORT_ERROR}")
    return _nicpath.Loop()


class EngineClock:
    """`fidelity.PortClock`'s reading side over the C engine's clock (ProcessFidelity uses it)."""

    def __init__(self, engine, rate_bps: float) -> None:
        self._engine = engine
        self.rate_bps = rate_bps
        self.frame_s = engine.clock()["frame_s"]

    @property
    def frames(self) -> int:
        return self._engine.clock()["frames"]

    def reset(self) -> None:
        self._engine.clock_reset()

    def snapshot(self) -> dict:
        return fidelity.clock_snapshot(self._engine.clock(), self.rate_bps)


def _dcqcn_tuple(spec: DcqcnSpec) -> tuple:
    eff = spec.effective()
    return (
        eff.line_rate_bps,
        eff.min_rate_bps,
        eff.rate_ai_bps,
        eff.rate_hai_bps,
        eff.alpha_period_s,
        eff.increase_period_s,
        eff.cnp_interval_s,
        int(eff.byte_counter_bytes),
        float(spec.g),
        float(spec.alpha_init),
        int(spec.fast_recovery_steps),
    )


class CRnic:
    """A NIC with its queue pairs, in C; the interface of `rnic.Rnic` (see the module docstring)."""

    def __init__(self, cfg: NicConfig, now: float = 0.0) -> None:
        if _nicpath is None:
            raise RuntimeError(f"emu.host._nicpath is not built: {IMPORT_ERROR}")
        rnic.check_config(cfg)
        self.cfg = cfg
        self.go_back_0 = cfg.loss_recovery == rnic.GO_BACK_0
        self.selective = cfg.loss_recovery == rnic.SELECTIVE
        spec = cfg.dcqcn_spec or DcqcnSpec.from_hardware(cfg.rate_bps, cfg.modelled_rate_bps)
        # rnic.Rnic's timers, computed by the same expressions.
        self.rto_s = rnic.retransmit_timeout_s(cfg)
        self.reorder_s = rnic.reorder_timeout_s(cfg)
        rnr = [t * cfg.modelled_rate_bps / cfg.rate_bps for t in rnic.RNR_TIMER_S]
        self._engine = self.engine = _nicpath.Engine(
            float(cfg.rate_bps),
            int(cfg.mtu_payload),
            float(self.rto_s),
            rnr,
            rnic.LOSS_RECOVERY.index(cfg.loss_recovery),  # the C engine's NIC_GO_BACK_N, ...
            int(cfg.ooo_window_packets),
            float(self.reorder_s),
            _dcqcn_tuple(spec) if cfg.dcqcn else None,
            int(cfg.rx_buffer_bytes),
            int(cfg.rx_xoff_bytes),
            int(cfg.rx_xon_bytes),
            int(cfg.inbox_max_bytes),
            None if cfg.drain_rate_bps is None else float(cfg.drain_rate_bps),
            int(cfg.pfc_quanta),
            pfc.template(cfg.mac),
            float(now),
            self._credit_args(cfg, now),
        )
        self.clock = EngineClock(self._engine, cfg.rate_bps)
        self.qpns: list[int] = []
        self._stuck = False
        # In-network aggregation's sequence numbers (emu/host/sharp.py), as Rnic's.
        self.agg_next_seq: dict[int, int] = {}

    @staticmethod
    def _credit_args(cfg: NicConfig, now: float) -> tuple | None:
        """The C credit link's settings: those `rnic.Rnic` gives its `CreditLink`."""
        if cfg.credit is None or not cfg.credit.enabled:
            return None
        link = CreditLink(cfg.credit, cfg.credit.priorities, cfg.rx_buffer_bytes, cfg.rate_bps, now)
        return (
            link.vls,
            link.capacity_blocks,
            link.update_blocks,
            float(link.refresh_s),
            ibfc.template(cfg.mac),
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
        """`Rnic.connect`: both sides of a reliable connection to (peer_ip, peer_qpn)."""
        if qpn in self.qpns:
            raise ValueError(f"QP {qpn} exists")
        # The same checks as the template Rnic builds (roce.DataTemplate).
        roce.DataTemplate(self.cfg.mac, peer_mac, self.cfg.ip, peer_ip, udp_sport, peer_qpn, dscp)
        data = headers.eth_ipv4_udp(
            self.cfg.mac,
            peer_mac,
            self.cfg.ip,
            peer_ip,
            dscp << 2 | roce.ECN_ECT0,
            udp_sport,
            roce.ROCEV2_UDP_PORT,
        )
        cnp = headers.eth_ipv4_udp(
            self.cfg.mac,
            peer_mac,
            self.cfg.ip,
            peer_ip,
            roce.DSCP_CNP << 2 | roce.ECN_NOT_ECT,
            udp_sport,
            roce.ROCEV2_UDP_PORT,
        )
        prio = rnic._DSCP_PRIO.get(dscp, 0)
        self._engine.connect(qpn, peer_qpn, data, cnp, float(now), float(max_rate_bps or 0), prio)
        self.qpns.append(qpn)

    def _known(self, qpn: int) -> None:
        if qpn not in self.qpns:
            raise ValueError(f"unknown QP {qpn}; connected: {sorted(self.qpns)}")

    def set_deliver_data(self, qpn: int, on: bool = True) -> None:
        """`Rnic.set_deliver_data`."""
        self._known(qpn)
        self._engine.set_deliver_data(qpn, bool(on))

    def take_messages(self, qpn: int, max_messages: int | None = None) -> list[tuple[int, bytes]]:
        """`Rnic.take_messages`: (msn, bytes) of whole received messages, oldest first; removed."""
        self._known(qpn)
        return self._engine.take_messages(qpn, -1 if max_messages is None else max_messages)

    def has_messages(self, qpn: int) -> bool:
        """Whether QP `qpn` holds whole received messages not yet taken."""
        return self._engine.inbox_count(qpn) > 0

    def take_completions(self, qpn: int, max_entries: int | None = None) -> list[tuple]:
        """(msg_id, size_bytes, posted_at, completed_at) of completed messages not taken before."""
        self._known(qpn)
        return self._engine.take_completions(qpn, -1 if max_entries is None else max_entries)

    def post_write(
        self,
        qpn: int,
        size_bytes: int,
        now: float,
        remote_va: int = 0,
        rkey: int = 0,
        data: bytes | bytearray | memoryview | None = None,
    ) -> int:
        """`Rnic.post_write`."""
        return self.post_send(qpn, size_bytes, now, write=(remote_va, rkey), data=data)

    def post_send(
        self,
        qpn: int,
        size_bytes: int,
        now: float,
        write: tuple[int, int] | None = None,
        data: bytes | bytearray | memoryview | None = None,
    ) -> int:
        """`Rnic.post_send`: the same arguments, checks and message ids."""
        self._known(qpn)
        if data is not None:
            try:
                view = memoryview(data).cast("B")
            except (TypeError, ValueError) as exc:
                raise ValueError(f"data must be contiguous bytes-like: {exc}") from None
            if view.nbytes != size_bytes:
                raise ValueError(f"data has {view.nbytes} bytes but size_bytes={size_bytes}")
            data = view
        elif size_bytes <= 0:
            raise ValueError(f"size_bytes={size_bytes}: must be positive")
        va, rkey = write if write else (0, 0)
        return self._engine.post(qpn, int(size_bytes), float(now), bool(write), va, rkey, data)

    # ----- the wire ---------------------------------------------------------

    def next_frame(self, now: float) -> bytes | None:
        return self._engine.next_frame(now)

    def may_send(self, now: float) -> bool:
        return self._engine.may_send(now)

    def use_wire(self, size_bytes: int, now: float, ready_at: float | None = None) -> None:
        self._engine.use_wire(size_bytes, now, ready_at)

    def next_wakeup(self, now: float) -> float | None:
        return self._engine.next_wakeup(now)

    def receive(self, frame: bytes, now: float) -> list[bytes]:
        return self._engine.receive(frame, now)

    def credit_rx(self, frame: bytes) -> bool:
        """`Rnic.credit_rx`: count a frame a collective took; False beyond the credit given."""
        return self._engine.credit_rx(frame)

    def tick(self, now: float) -> list[bytes]:
        return self._engine.tick(now)

    def next_tick(self) -> float | None:
        return self._engine.next_tick()

    @property
    def free_at(self) -> float:
        return self._engine.nic()["free_at"]

    @property
    def paused_until(self) -> list[float]:
        return self._engine.nic()["paused_until"]

    @property
    def stuck(self) -> bool:
        return self._stuck

    @stuck.setter
    def stuck(self, on: bool) -> None:
        self._stuck = bool(on)
        self._engine.configure(0.0, float("nan"), int(self._stuck))

    def configure(
        self,
        rate_bps: float | None = None,
        drain_rate_bps: float | None = None,
        unlimited_drain: bool = False,
    ) -> None:
        """The agent's faults: a slower wire, a slow or unlimited drain."""
        if rate_bps is not None:
            self.cfg.rate_bps = int(rate_bps)
        if drain_rate_bps is not None:
            self.cfg.drain_rate_bps = float(drain_rate_bps)
        if unlimited_drain:
            self.cfg.drain_rate_bps = None
        drain = -1.0 if self.cfg.drain_rate_bps is None else float(self.cfg.drain_rate_bps)
        self._engine.configure(float(self.cfg.rate_bps), drain, -1)

    # ----- reporting --------------------------------------------------------

    def qp_counters(self, qpn: int) -> dict:
        """Both sides' counters and state of QP `qpn`."""
        self._known(qpn)
        return self._engine.qp(qpn)

    def stats(self, now: float) -> dict:
        """`Rnic.stats`: the same keys and values."""
        send, recv = {}, {}
        for qpn in self.qpns:
            q = self._engine.qp(qpn)
            completed = self._engine.take_completions(qpn, -1, True)
            send[qpn] = {
                k: q[k]
                for k in (
                    "tx_packets",
                    "tx_bytes",
                    "tx_payload_bytes",
                    "rnr_naks",
                    "retransmitted",
                    "naks",
                    "timeouts",
                    "cnps",
                    "una",
                    "next_psn",
                    "end_psn",
                    "rate_bps",
                )
            }
            send[qpn]["completed"] = completed
            send[qpn]["pending_messages"] = q["pending_messages"]
            recv[qpn] = {
                k: q[k]
                for k in (
                    "rx_packets",
                    "rx_bytes",
                    "out_of_order",
                    "duplicates",
                    "ce_marked",
                    "expected_psn",
                    "messages_received",
                    "inbox_messages",
                    "inbox_bytes",
                    "rnr_naks_sent",
                    "discarded_packets",
                    "discarded_bytes",
                    "naks_sent",
                    "reorder_depth_max",
                    "beyond_window",
                )
            }
        nic = self._engine.nic()
        paused = [
            total - max(0.0, until - now)
            for total, until in zip(nic["paused_s_total"], nic["paused_until"])
        ]
        return {
            "send": send,
            "recv": recv,
            "pause_rx": nic["pause_rx"],
            "paused_s": paused,
            "pause_tx": nic["pause_tx"],
            "cnps_sent": nic["cnps_sent"],
            "rx_overflow": nic["rx_overflow"],
            "rx_buffer_bytes": nic["rx_buffer_bytes"],
            "stuck": self._stuck,
            "loss_recovery": self.cfg.loss_recovery,
            "credit": self._credit_stats(now),
            "fc_tx": nic["fc_tx"],
            "fc_rx": nic["fc_rx"],
            "credit_overruns": nic["credit_overruns"],
            "ctrl_waiting": nic["ctrl_waiting"],
        }

    def _credit_stats(self, now: float) -> dict | None:
        """`CreditLink.stats` from the C link's fields (None: PFC)."""
        lanes = self._engine.credit()
        if lanes is None:
            return None
        out = {}
        for vl, st in lanes:
            since = st["blocked_since"]
            blocked_now = not math.isnan(since)  # NaN: no frame waits
            out[str(vl)] = {
                "credit_blocks": st["credit_blocks"],
                "fctbs": st["fctbs"],
                "fccl_rx": st.get("fccl_rx"),
                "abr": st["abr"],
                "fccl_tx": st.get("fccl_tx"),
                "blocked_s": round(st["blocked_s"] + (now - since if blocked_now else 0.0), 6),
                "blocked_count": st["blocked_count"],
                "blocked_now": blocked_now,
                **{
                    k: st[k]
                    for k in ("tx_frames", "rx_frames", "overruns", "abr_resyncs", "fc_tx", "fc_rx")
                },
            }
        return out

"""The compiled data plane's Python side: which datapath runs, and the C switch's seams.

Owns the choice between the two datapaths (`EMU_DATAPATH=c|python`, default
`c` when the extension is built), and, for the C one (`emu.switch._fastpath`,
sources in `emu/switch/csrc/`):

- `FastDatapath`: a `Datapath` whose ports, queues, shared buffer, PFC and
  fidelity clocks live in C. It configures the C switch from the same spec
  objects the Python datapath builds (so both compute the same thresholds),
  answers upcalls with the OpenFlow pipeline (OVS's slow path: the pipeline
  decides, its compiled program is handed to C's exact-match cache), takes
  the cache entries' counters back into the flow entries, and reads queues,
  buffer and counters in bulk for reports, OpenFlow statistics, telemetry
  and the PFC watchdog.
- `FastLoop`: the process's loop. The C engine serves every switch's ports
  without the GIL; Python runs for upcalls, OpenFlow and management sockets
  and the switches' timers.
- `program_ops`: the pipeline's compiled programs as C action lists.

What stays Python per frame ("slow-path classes", counted as upcalls):
frames other than untagged IPv4 TCP/UDP without options (ARP, LLDP, ICMP,
IPv6, tagged frames, fragments), programs with a flowlet group, NORMAL, a
packet-in or an output to the aggregation engine, and credit flow-control
frames. A meter a cached program names runs in C (fp_meter.c): its buckets
and counters are pushed there after Python ran and pulled back before
Python reads or applies meters again. A SELECT group in adaptive mode
(adaptive.py) is cached as a per-packet choice among its buckets' programs
(FP_OP_ADAPT, fp_ar.c; a UGAL group FP_OP_UGAL), so adaptive routing decides each packet in C; each
bucket's counter is a slot C counts in and Python takes back (`drain`), as
meters' are, and C's decisions add to the pipeline's in `adaptive_counts`. A credit fabric (`flow_control="credit"`) runs the
Python datapath: the credit loop is not in C.

The Python modules stay the specification: tests/unit/test_fastpath_differential.py
feeds both datapaths the same frames and requires the same outputs, counters
and PAUSE/ECN decisions.
"""

from __future__ import annotations

import logging
import os
import selectors
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from emu import fidelity
from emu.fidelity import frame_time_s
from emu.proto.ofext import AGG_PORT
from emu.switch import rewrite
from emu.switch.buffer import (
    DROP_HEADROOM,
    DROP_LOSSLESS_NO_PFC,
    DROP_LOSSY,
    BufferCounters,
    SharedBuffer,
)
from emu.switch.datapath import ETH_P_ALL, RING_FRAMES, RING_S, Datapath
from emu.switch.loop import SwitchSelector
from emu.switch.meter import Meter
from emu.switch.pipeline import (
    P_ADAPTIVE,
    P_DEAD,
    P_DECTTL,
    P_METER,
    P_OUT,
    P_SUB,
    P_UGAL,
    P_XF,
)
from emu.switch.scheduler import N_PRIORITIES, QueueCounters
from emu.switch.watchdog import QueueView

try:
    from emu.switch import _fastpath
except ImportError as exc:  # not built: `pip install -e .` builds it (scripts/bootstrap)
    _fastpath = None
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = ""

log = logging.getLogger(__name__)

DATAPATH_ENV = "EMU_DATAPATH"
DATAPATHS = ("c", "python")
# A queued frame's slot: the longest frame the switch's ports receive (MTU +
# Ethernet header + a tag) plus room for what pushed tags add; a longer frame
# is dropped and counted (`pool_drops`): the kernel would refuse it anyway.
SLOT_SLACK_BYTES = 64
# A port's receive ring on the C path: RING_S of frames at the port's rate
# (datapath.py), floored at C_RING_FLOOR slots. The Python datapath floors it
# at 1,024 (datapath.RING_FRAMES): its loop took ~10 us a frame, so a burst
# from an unpaced sender waited in the ring. The C loop drains a cached frame
# in well under a microsecond, but a frame on the slow path (a miss, a
# packet-in, a malformed frame) still costs an upcall of tens of
# microseconds: 256 slots lost frames of a 300-frame burst into a metered
# flow (tests/integration/test_of13_switch.py), 512 did not. The ring is
# mapped whole into the process (RSS): 512 slots of 1,600 bytes are 0.8 MiB a
# port, against 2 MiB for the Python datapath's 1,024 slots of 2,048.
C_RING_FLOOR = 512

# rewrite's set-field functions C carries out (fp.h FP_F_*, in order).
_C_FIELDS = {
    rewrite.SET_FIELD[name][0]: code
    for code, name in enumerate(
        [
            "eth_dst",
            "eth_src",
            "ipv4_src",
            "ipv4_dst",
            "ip_dscp",
            "ip_ecn",
            "tcp_src",
            "tcp_dst",
            "udp_src",
            "udp_dst",
        ]
    )
}
_C_FIELDS[rewrite.set_nw_ttl] = 10


class DatapathChoiceError(ValueError):
    """EMU_DATAPATH names no datapath, or asks for C where it cannot run."""


def choice(credit: bool = False) -> str:
    """The datapath this process runs: EMU_DATAPATH, else C when built.

    Raises:
        DatapathChoiceError: EMU_DATAPATH is not one of DATAPATHS, or is "c"
            and the extension is not built.
    """
    wanted = os.environ.get(DATAPATH_ENV, "").strip().lower()
    if wanted and wanted not in DATAPATHS:
        raise DatapathChoiceError(
            f"{DATAPATH_ENV}={wanted!r}: expected one of {', '.join(DATAPATHS)}"
        )
    if wanted == "c" and _fastpath is None:
        raise DatapathChoiceError(
            f"{DATAPATH_ENV}=c but emu.switch._fastpath is not built ({_IMPORT_ERROR}); "
            "run scripts/bootstrap (it builds it with the distribution's gcc)"
        )
    if wanted == "python" or _fastpath is None:
        return "python"
    if credit:
        # The credit loop (emu/credit.py) is Python's; a credit fabric runs Python's datapath.
        return "python"
    return "c"


def _adaptive_ops(op: tuple, ports: dict, meter_slot, arm_slot) -> Optional[list]:
    """A P_ADAPTIVE op as C's FP_OP_ADAPT, its options' FP_OP_ARMs and their programs;
    a P_UGAL op as FP_OP_UGAL (its bias in `port`), each ARM's bucket weight in `queue`."""
    ugal = op[0] == P_UGAL
    prio, flow_hash, options = op[2], op[3], op[4]
    if arm_slot is None or len(options) > _fastpath.AR_MAX_OPTIONS:
        return None
    body: list = []
    for option in options:
        _idx, port, sub, ctr = option[:4]
        compiled = program_ops(sub, ports, meter_slot, arm_slot)
        if compiled is None:
            return None
        weight = option[4] if ugal else -1
        body.append((_fastpath.OP_ARM, port or 0, arm_slot(ctr), weight, 0, len(compiled)))
        body.extend(compiled)
    if ugal:
        head = (_fastpath.OP_UGAL, op[5], flow_hash, prio, len(options), len(body))
    else:
        head = (_fastpath.OP_ADAPT, 0, flow_hash, prio, len(options), len(body))
    return [head, *body]


def program_ops(prog: list, ports: dict, meter_slot=None, arm_slot=None) -> Optional[list]:
    """A pipeline program as the C path's action list; None when C cannot run it.

    Each op is (code, port, value, queue, field, sub_len) as fp_module.c reads
    it. `meter_slot(meter)` gives the C slot of a meter the program applies
    (None: a metered program stays on the slow path); `arm_slot(counter)` the
    C slot of an adaptive group's bucket counter (None: an adaptive program
    stays on the slow path).
    """
    out: list = []
    for op in prog:
        ops = _c_ops(op, ports, meter_slot, arm_slot)
        if ops is None:
            return None  # flowlets, NORMAL, packet-ins, ...: the slow path's
        out.extend(ops)
    return out if len(out) <= 256 else None


def _c_ops(op: tuple, ports: dict, meter_slot, arm_slot) -> Optional[list]:
    """One program op as C ops, or None when C cannot run it."""
    code = op[0]
    if code == P_OUT:
        port, queue = op[1], op[2]
        if port not in ports:
            return None  # AGG_PORT, OFPP_TABLE: Python's
        q = queue if queue is not None and 0 <= queue < N_PRIORITIES else -1
        return [(_fastpath.OP_OUT, port, 0, q, 0, 0)]
    if code == P_XF:
        field = _C_FIELDS.get(op[1])
        if field is None:
            return None
        value = op[2]
        if isinstance(value, (bytes, bytearray)):
            value = int.from_bytes(value, "big")
        return [(_fastpath.OP_SET, 0, int(value), -1, field, 0)]
    if code == P_DECTTL:
        return [(_fastpath.OP_DECTTL, 0, 0, -1, 0, 0)] if op[1] is rewrite.dec_nw_ttl else None
    if code == P_DEAD:
        return [(_fastpath.OP_DEAD, op[1].port_no if op[1] is not None else 0, 0, -1, 0, 0)]
    if code == P_METER:
        if meter_slot is None:
            return None
        return [(_fastpath.OP_METER, 0, meter_slot(op[1]), -1, 0, 0)]
    if code == P_SUB:
        sub = program_ops(op[1], ports, meter_slot, arm_slot)
        return None if sub is None else [(_fastpath.OP_SUB, 0, 0, -1, 0, len(sub)), *sub]
    if code == P_ADAPTIVE or code == P_UGAL:
        return _adaptive_ops(op, ports, meter_slot, arm_slot)
    return None


def _mask(prios) -> int:
    m = 0
    for p in prios:
        m |= 1 << p
    return m


# ----- views of C state with the Python objects' shapes ----------------------------------

_PORT_FIELDS = (
    "rx_packets",
    "tx_packets",
    "rx_bytes",
    "tx_bytes",
    "rx_dropped",
    "tx_dropped",
    "rx_errors",
    "tx_errors",
)


def _counter_property(idx: int, name: str) -> property:
    def get(self) -> int:
        return self._csw.port_counters(self._port)[idx]

    def put(self, value: int) -> None:
        self._csw.set_port_counter(self._port, idx, value)

    return property(get, put, doc=f"ofp_port_stats {name}, kept in C")


class CPortCounters:
    """`ports.PortCounters` whose values live in the C switch (read and written there)."""

    __slots__ = ("_csw", "_port")

    def __init__(self, csw, port_no: int) -> None:
        self._csw = csw
        self._port = port_no


for _i, _name in enumerate(_PORT_FIELDS):
    setattr(CPortCounters, _name, _counter_property(_i, _name))


class CPortClock:
    """`fidelity.PortClock`'s snapshot and reset, of a C port's clock."""

    def __init__(self, csw, port_no: int) -> None:
        self._csw = csw
        self._port = port_no

    def reset(self) -> None:
        self._csw.clock_reset(self._port)

    def snapshot(self) -> dict:
        c = self._csw.clock(self._port)
        return fidelity.clock_snapshot(c, c["rate_bps"])


class CScheduler:
    """`scheduler.PortScheduler` as reports, the watchdog and faults see it, kept in C."""

    credit = None

    def __init__(self, csw, port_no: int) -> None:
        self._csw = csw
        self._port = port_no
        self.clock = CPortClock(csw, port_no)

    def state(self) -> dict:
        return self._csw.port_state(self._port)

    @property
    def rate_bps(self) -> float:
        return self.state()["rate_bps"]

    @property
    def early_s(self) -> float:
        return self.state()["early_s"]

    @property
    def depth_bytes(self) -> list:
        return self.state()["depth"]

    @property
    def pending(self) -> int:
        return self.state()["pending"]

    @property
    def counters(self) -> list:
        return [QueueCounters(*q) for q in self.state()["queues"]]

    def is_paused(self, prio: int, now: float) -> bool:
        return self.state()["paused_until"][prio] > now

    def paused_so_far(self, now: float) -> list:
        st = self.state()
        return [
            round(total - max(0.0, until - now), 6)
            for total, until in zip(st["paused_s"], st["paused_until"])
        ]

    def pause(self, prio: int, until: float, now: float) -> None:
        self._csw.pause(self._port, prio, until, now)

    def set_rate(self, rate_bps: float) -> None:
        if rate_bps <= 0:
            raise ValueError(f"rate_bps must be positive, got {rate_bps}")
        self._csw.set_rate(self._port, float(rate_bps))


class CBuffer:
    """`buffer.SharedBuffer` as reports and faults see it; the accounting lives in C.

    The Python `model` keeps the configuration it computed (headroom,
    reserved bytes, ECN thresholds) and is what C was configured from.
    """

    def __init__(self, csw, model: SharedBuffer, ports: dict) -> None:
        self._csw = csw
        self.model = model
        self._ports = ports

    def __getattr__(self, name: str):
        return getattr(self.model, name)  # spec, pfc, ecn, headroom, reserved, ...

    def _states(self) -> dict:
        return {n: self._csw.port_state(n) for n in sorted(self._ports)}

    @property
    def shared_used(self) -> int:
        return self._csw.buffer_state()["shared_used"]

    def free_bytes(self) -> int:
        return self.model.spec.size_bytes - self.model.reserved - self.shared_used

    def xoff_threshold(self) -> float:
        return self.model.spec.alpha_lossless * self.free_bytes()

    def lossy_threshold(self) -> float:
        return self.model.spec.alpha_lossy * self.free_bytes()

    @property
    def paused_upstream(self) -> dict:
        out = {}
        for n, st in self._states().items():
            for prio in range(N_PRIORITIES):
                if st["paused_upstream"] >> prio & 1:
                    out[(n, prio)] = st["refresh_at"][prio]
        return out

    @property
    def counters(self) -> BufferCounters:
        c = BufferCounters()
        b = self._csw.buffer_state()
        for cause in (DROP_LOSSY, DROP_HEADROOM, DROP_LOSSLESS_NO_PFC):
            if b[cause]:
                c.drops[cause] = b[cause]
        c.shared_watermark_bytes = b["shared_watermark"]
        for n, st in self._states().items():
            for prio in range(N_PRIORITIES):
                for name, d in (
                    ("marks", c.marks),
                    ("xoff_sent", c.xoff_sent),
                    ("xon_sent", c.xon_sent),
                    ("drops_by_queue", c.drops_by_queue),
                    ("egress_watermark", c.egress_watermark_bytes),
                ):
                    if st[name][prio]:
                        d[(n, prio)] = st[name][prio]
        return c

    def set_ecn(self, ecn) -> None:
        self.model.set_ecn(ecn)
        self._csw.set_ecn(
            _mask(self.model.ecn_prios), ecn.pmax, {n: tuple(t) for n, t in self.kmin_kmax.items()}
        )

    def _per_queue(self, field: str) -> dict:
        return {
            (n, prio): v
            for n, st in self._states().items()
            for prio, v in enumerate(st[field])
            if v
        }

    @property
    def ingress(self) -> dict:
        return self._per_queue("ingress")

    @property
    def headroom_used(self) -> dict:
        return self._per_queue("headroom_used")

    @property
    def egress(self) -> dict:
        return self._per_queue("egress")

    def snapshot(self) -> dict:
        """SharedBuffer.snapshot's answer, from C's accounting (the same code reads it)."""
        return SharedBuffer.snapshot(self)


def switch_config(dp: Datapath, model: SharedBuffer, max_frame: int) -> dict:
    """The C switch's configuration, from the specs the Python datapath built.

    `max_frame`: the longest frame its ports receive (a queued frame's slot).
    """
    return {
        "dscp_to_prio": list(dp.dscp_to_prio),
        "size_bytes": model.spec.size_bytes,
        "reserved": model.reserved,
        "resume_offset": model.spec.resume_offset_bytes,
        "alpha_lossless": float(model.spec.alpha_lossless),
        "alpha_lossy": float(model.spec.alpha_lossy),
        "lossless": _mask(model.lossless),
        "lossless_class": _mask(model.lossless_class),
        "ecn_prios": _mask(model.ecn_prios),
        "ecn_pmax": float(model.ecn.pmax),
        "pause_quanta": model.pfc.pause_quanta,
        "ecn_rng": model.rng.getstate()[1],
        "loss_rng": dp.loss_rng.getstate()[1],
        "slot_bytes": max_frame + SLOT_SLACK_BYTES,
    }


def _kept_in_c(read) -> property:
    """A Datapath attribute whose values the C switch keeps: read from C, and the
    initial empty value Datapath.__init__ assigns ignored."""
    return property(read, lambda self, _value: None)


class FastDatapath(Datapath):
    """A switch whose per-frame path is C (`emu.switch._fastpath.Switch`)."""

    def __init__(self, args, loop) -> None:
        self._readers: dict = {}
        self._entry_ctrs: dict[int, list] = {}
        self._meter_slots: dict[int, tuple[int, Meter]] = {}  # id(meter) -> (slot, meter)
        self._arm_slots: dict[int, int] = {}  # id(counter) -> slot
        self._arm_ctrs: list = []  # by slot (the list keeps each counter, so its id)
        self._next_entry = 1
        self._py_malformed = 0
        self.csw = None
        super().__init__(args, loop)
        model = self.buffer
        max_frame = max((r[1] for r in self._readers.values()), default=1522)
        self.csw = _fastpath.Switch(self.name, self._upcall, switch_config(self, model, max_frame))
        # Upcalls' adaptive decisions rotate ties on C's counter, as C's own do.
        self.pipeline.adaptive.rotation = self.csw.ar_rotation

        def add(port_no: int) -> None:
            sock, max_frame, frames, _ifname = self._readers[port_no]
            kmin, kmax = model.kmin_kmax[port_no]
            self.csw.add_port(
                port_no,
                sock.fileno(),
                self.ports[port_no].hw_addr,
                float(self.ports[port_no].rate_bps),
                model.headroom.get(port_no, 0),
                kmin,
                kmax,
                self.pfc_templates[port_no],
                frames,
                max_frame,
                self.filter_outgoing,
            )

        # Each ring waits for an RCU grace period (fp_module.c, add_port); from
        # a thread per port those waits overlap: a switch starts in one of them.
        with ThreadPoolExecutor(max_workers=max(1, len(self.ports))) as pool:
            list(pool.map(add, list(self.ports)))
        self._adopt(model)
        for sock, _max_frame, _frames, ifname in self._readers.values():
            if sock.fileno() >= 0:
                sock.bind((ifname, ETH_P_ALL))

    def _adopt(self, model: SharedBuffer) -> None:
        """Point every reader of queues, buffer, counters and clocks at the C switch."""
        csw = self.csw
        self.buffer = CBuffer(csw, model, self.ports)
        self.schedulers = {n: CScheduler(csw, n) for n in self.ports}
        for n, port in self.ports.items():
            port.counters = CPortCounters(csw, n)
        self._sync_recv()
        self.fidelity.clocks = {n: s.clock for n, s in self.schedulers.items()}
        fastest = max((p.rate_bps for p in self.ports.values()), default=1e9)
        self.fidelity.loop = fidelity.CompiledLoopMonitor(csw, frame_time_s(fastest))
        self.pipeline.on_invalidate = self._invalidated

    # ----- ports -----------------------------------------------------------------

    def _attach_reader(self, port_no: int, sock, ifname: str, max_frame: int, frames: int) -> None:
        # The C switch maps the ring and its loop polls the socket; bound after that.
        rate = self.ports[port_no].rate_bps
        frames = min(RING_FRAMES[1], max(C_RING_FLOOR, int(rate * RING_S / (1500 * 8))))
        self._readers[port_no] = (sock, max_frame, frames, ifname)

    def _sync_recv(self) -> None:
        """Tell C which ports receive (live, not OFPPC_NO_RECV)."""
        for n, port in self.ports.items():
            self.csw.set_recv(n, port.live and not port.config & 0x4)

    def _poll_carrier(self) -> None:
        super()._poll_carrier()
        self._sync_recv()

    def _port_changed(self, port_no: int) -> None:
        super()._port_changed(port_no)
        self._sync_recv()

    def _flush_port(self, port_no: int, prios=range(N_PRIORITIES)) -> None:
        self.csw.flush(port_no, _mask(prios))

    # ----- the slow path ----------------------------------------------------------

    def _upcall(self, in_port: int, frame: bytes, now: float, cacheable: int):
        """A frame C did not forward by itself; returns (entry id, ops) to cache, or None."""
        if frame[12:14] == b"\x88\xb5":
            self._receive_credit(in_port, frame, now)
            return None
        self._meters_from_c()
        try:
            return self._slow_path(in_port, frame, now, cacheable)
        finally:
            self._meters_to_c()  # also the slots this program was given

    def _slow_path(self, in_port: int, frame: bytes, now: float, cacheable: int):
        try:
            outputs, packet_ins = self.pipeline.process(in_port, frame, now)
        except Exception:  # noqa: BLE001 - a bad frame must never stop the switch
            self.ports[in_port].counters.rx_errors += 1
            self._py_malformed += 1
            log.debug("%s: frame on port %d not processed", self.name, in_port, exc_info=True)
            return None
        if outputs:
            self._enqueue(outputs, in_port, now)
        if packet_ins:
            self.of.packet_ins(packet_ins)
        if not cacheable:
            return None
        compiled = self.pipeline.compiled(in_port, frame)
        if compiled is None:
            return None
        ops = program_ops(compiled[0], self.ports, self._meter_slot, self._arm_slot)
        if ops is None:
            return None
        entry = self._next_entry
        self._next_entry = entry + 1 if entry < 0xFFFFFFFF else 1
        self._entry_ctrs[entry] = compiled[1]
        return entry, ops

    def _enqueue(self, outputs, in_port: int, now: float) -> None:
        enqueue = self.csw.enqueue
        for port_no, frame, queue_id in outputs:
            if port_no not in self.ports:
                if port_no == AGG_PORT:
                    self._aggregate(in_port, frame, now)
                continue
            q = queue_id if queue_id is not None and 0 <= queue_id < N_PRIORITIES else -1
            enqueue(in_port, port_no, frame, q, now)
        # Sent now, not when the C loop is back: a PacketOut or an upcall's
        # frame would otherwise wait for the rest of this Python call (what
        # the fidelity monitor counted late on lightly used ports). PAUSE first,
        # as after every receive batch.
        self.csw.send_pfc(now)
        self.csw.transmit(now)

    def _invalidated(self) -> None:
        if self.csw is None:
            return
        self.drain()
        self.csw.clear_cache()
        self._entry_ctrs.clear()
        self.csw.meters_clear()
        self._meter_slots.clear()
        self.csw.arms_clear()
        self._arm_slots.clear()
        self._arm_ctrs.clear()

    # ----- adaptive routing: C decides cached packets, Python the upcalls -------------

    def _arm_slot(self, counter) -> int:
        """The C slot counting an adaptive group's bucket `counter` (taken back by drain)."""
        slot = self._arm_slots.get(id(counter))
        if slot is None:
            slot = self._arm_slots[id(counter)] = len(self._arm_ctrs)
            self._arm_ctrs.append(counter)
        return slot

    def _egress(self, port_no: int, prio: int, now: float) -> tuple[int, bool] | None:
        if self.csw is None or port_no not in self.ports:
            return None
        _tx, depth, paused_until, *_ = self.csw.port_brief(port_no)
        return sum(depth[prio:]), paused_until[prio] > now

    def adaptive_counts(self) -> dict:
        """The pipeline's decisions (upcalls) and C's (cached packets), added."""
        counts = super().adaptive_counts()
        if self.csw is None:
            return counts
        stats = self.csw.stats()
        for name in (
            "decisions",
            "paused_skips",
            "all_paused",
            "ugal_decisions",
            "ugal_nonminimal",
        ):
            counts[name] += stats["ar_" + name]
        picks = counts["picks"]
        for n in self.ports:
            if c := self.csw.port_state(n)["ar_picks"]:
                picks[n] = picks.get(n, 0) + c
        counts["picks"] = dict(sorted(picks.items()))
        return counts

    # ----- meters: C's copy counts while a cached program names the meter ----------

    def _meter_slot(self, meter: Meter) -> int:
        known = self._meter_slots.get(id(meter))
        if known is None:  # the tuple holds the meter, so its id is not reused
            known = self._meter_slots[id(meter)] = (len(self._meter_slots), meter)
        return known[0]

    def _meters_from_c(self) -> None:
        """C's buckets and counters into the Meter objects (before Python reads or applies them)."""
        for slot, meter in self._meter_slots.values():
            got = self.csw.meter_get(slot)
            if got is None:
                continue  # given a slot by a program C did not install
            meter.last, meter.packets_in, meter.bytes_in, bands = got
            for band, (tokens, packets, nbytes) in zip(meter.by_rate, bands):
                band.tokens, band.packets, band.bytes = tokens, packets, nbytes

    def _meters_to_c(self) -> None:
        """The Meter objects' state into C (after Python may have applied them)."""
        for slot, meter in self._meter_slots.values():
            bands = [
                (b.type, float(b.rate), b.capacity, b.tokens, b.prec_level, b.packets, b.bytes)
                for b in meter.by_rate
            ]
            self.csw.meter_set(
                slot, meter.pktps, meter.last, meter.packets_in, meter.bytes_in, bands
            )

    def drain(self) -> None:
        """Take the C cache's per-entry counts into the flow entries' counters, and
        C's meter state into the meters."""
        self._meters_from_c()
        entries, dead, ttl, metered = self.csw.drain()
        for entry, packets, nbytes, used in entries:
            for c in self._entry_ctrs.get(entry, ()):
                c.packets += packets
                c.bytes += nbytes
                if used > c.used:
                    c.used = used
        for slot, packets, nbytes, used in self.csw.arm_drain():
            if slot < len(self._arm_ctrs):
                c = self._arm_ctrs[slot]
                c.packets += packets
                c.bytes += nbytes
                if used > c.used:
                    c.used = used
        self.pipeline.dropped_port_down += dead
        self.pipeline.dropped_ttl += ttl
        self.pipeline.dropped_meter += metered
        if self.csw.stats()["cache_entries"] >= 65536:
            self.pipeline.invalidate()  # full: start again, as the Python cache does

    # ----- C's state where the Python datapath keeps dicts ---------------------------

    def _per_queue(self, field: str) -> dict:
        out = {}
        for n in self.ports:
            for prio, v in enumerate(self.csw.port_state(n)[field]):
                if v:
                    out[(n, prio)] = v
        return out

    def _per_port(self, field: str) -> dict:
        return {n: v for n in self.ports if (v := self.csw.port_state(n)[field])}

    def _stat(self, field: str) -> int:
        return self.csw.stats()[field] if self.csw is not None else 0

    pause_rx = _kept_in_c(lambda self: self._per_queue("pause_rx"))
    last_pause_rx = _kept_in_c(lambda self: self._per_queue("last_pause_rx"))
    pfc_tx_frames = _kept_in_c(lambda self: self._per_port("pfc_tx_frames"))
    lost_frames = _kept_in_c(lambda self: self._per_port("lost_frames"))
    watchdog_drops = _kept_in_c(lambda self: self._stat("watchdog_drops"))

    @property
    def malformed_frames(self) -> int:
        return self._py_malformed + self._stat("malformed_frames")

    @malformed_frames.setter
    def malformed_frames(self, value: int) -> None:
        self._py_malformed = value  # the slow path's own count (an exception in the pipeline)

    # ----- what C does per frame, not Python ------------------------------------------

    def _send_pfc(self, now: float) -> None:
        pass  # the C loop sends PAUSE

    def _transmit(self, now: float):
        return None  # the C loop transmits

    def _watchdog_views(self, now: float) -> list[QueueView]:
        views = []
        for port_no in self.schedulers:
            _tx, depth, paused_until, _m, _qb, sent, last_pause, pauses = self.csw.port_brief(
                port_no
            )
            for prio in self.lossless_prios:
                views.append(
                    QueueView(
                        port_no,
                        prio,
                        depth[prio],
                        sent[prio],
                        paused_until[prio] > now,
                        last_pause[prio] if pauses[prio] else float("-inf"),
                    )
                )
        return views

    def _watchdog_act(self, happened: list, now: float) -> None:
        super()._watchdog_act(happened, now)
        for _kind, port_no, _prio in happened:
            drop = _mask(p for (n, p) in self.wd_drop if n == port_no)
            ignore = _mask(p for (n, p) in self.wd_ignore_pause if n == port_no)
            self.csw.set_watchdog(port_no, drop, ignore)
            self.csw.kick(port_no, now)  # a restored queue may have frames to send

    def _port_view(self, port_no: int, now: float) -> tuple:
        tx_bytes, depth, paused_until, marks, queue_tx, *_ = self.csw.port_brief(port_no)
        return tx_bytes, depth, [until > now for until in paused_until], marks, queue_tx

    def _set_port_loss(self, port_no: int, probability: float = 0.0, every=None) -> dict:
        answer = super()._set_port_loss(port_no, probability, every)
        every_n = self.port_loss_every.get(int(port_no))
        self.csw.set_loss(
            int(port_no), self.port_loss.get(int(port_no), 0.0), every_n[0] if every_n else 0
        )
        return answer

    def _queue_counters(self) -> dict:
        return {
            n: [(q[3], q[2], q[4]) for q in self.csw.port_state(n)["queues"]] for n in self.ports
        }

    def _lossless_sent(self) -> int:
        return sum(
            self.csw.port_state(n)["queues"][prio][2]
            for n in self.ports
            for prio in self.lossless_prios
        )

    def fastpath_stats(self) -> dict:
        """The C path's own counters: cache hits and misses, upcalls, slots, drops."""
        return self.csw.stats()

    def _mgmt_handlers(self) -> dict:
        return {
            **super()._mgmt_handlers(),
            "fastpath": lambda: {"datapath": "c", **self.fastpath_stats()},
        }

    # ----- the loop ------------------------------------------------------------------

    def service(self, now: float, work: list) -> None:
        if now >= self.next_expire:
            self.drain()  # idle timeouts read the entries' last use
        super().service(now, work)

    def refresh_due(self) -> None:
        """Python's timers only: C keeps the frames' and PAUSE's deadlines."""
        self.due = min(self.next_carrier, self.next_sample, self.next_watchdog, self.next_expire)

    def on_ready(self, kind: str, ref, events: int, now: float) -> int:
        if kind not in ("of", "mgmt"):
            return super().on_ready(kind, ref, events, now)
        self.drain()  # flow and meter statistics answer with the C path's counts
        try:
            return super().on_ready(kind, ref, events, now)
        finally:
            self._meters_to_c()  # a PacketOut through the tables may have applied one

    def close(self) -> None:
        if self.csw is not None:
            self.drain()
            self.csw.close()  # unmaps the rings before the sockets close
        super().close()


# The switches' own timers (carrier 100 ms, telemetry 100 ms, watchdog poll
# 100 ms, expiry 500 ms) may run this much early, so that one call into
# Python serves every timer of every switch that falls due within it instead
# of one call each: a k=8 fat-tree has 80 switches x 3 timers per 100 ms. The
# watchdog's detection allows two polls of slack (emu/models/deadlock.py).
TIMER_SLACK_S = 0.005


class FastLoop:
    """The process's loop when the C datapath runs: the C engine, with Python called back.

    Offers what `loop.SwitchLoop` offers the datapaths (`view`, `add`,
    `stopping`, `run`); the per-pass accounting is the engine's.
    """

    def __init__(self, shared: bool = False) -> None:
        self.sel = selectors.EpollSelector()  # nested in the engine's epoll set
        self.switches: list = []
        self.stopping = False  # set by a signal (emu.registry.stop_on_signals)
        self.engine = _fastpath.Engine()

    def view(self, owner) -> SwitchSelector:
        return SwitchSelector(self.sel, owner)

    def add(self, switch) -> None:
        self.switches.append(switch)

    def run(self) -> None:
        for sw in self.switches:
            self.engine.add(sw.csw)
        try:
            self.engine.run(self.sel.fileno(), self._pass)
        finally:
            for sw in self.switches:
                sw.close()
            self.switches = []

    def _pass(self, now: float, py_ready: int):
        """One call from the engine: Python's sockets if ready, then the timers that are due."""
        work: list = []
        several = len(self.switches) > 1
        if py_ready:
            for key, events in self.sel.select(0):
                kind, ref, sw = key.data
                if sw.stopping:
                    continue
                sw.on_ready(kind, ref, events, time.monotonic())
                if kind == "mgmt":
                    served = sw.mgmt.take_served()
                    kind = f"mgmt({served})" if served else kind
                work.append(f"{sw.name}:{kind}" if several else kind)
                sw.refresh_due()
        now = time.monotonic()
        for sw in self.switches:
            if sw.due <= now + TIMER_SLACK_S and not sw.stopping:
                # On its timers' clock: a timer served early runs as at its due time.
                sw.service(max(now, sw.due), work)
        for sw in [s for s in self.switches if s.stopping]:
            log.warning("%s: stopped; %d switch(es) left", sw.name, len(self.switches) - 1)
            self.engine.remove(sw.csw)
            sw.close()
            self.switches.remove(sw)
        if self.stopping or not self.switches:
            return None
        return min(sw.due for sw in self.switches), ",".join(work)

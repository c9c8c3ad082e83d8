"""One emu switch: ports, receive, pipeline, queue, paced transmit.

Owns the clock and the timers of one switch, an AF_PACKET socket per veth and
the management socket; the OpenFlow TCP connections are `channel.py`'s. The
event loop that sleeps and dispatches is `loop.py`'s, which may serve several
switches in one process (`worker.py`); this module says what is due when.
It feeds received frames to the pure OpenFlow pipeline (`pipeline.py`), classifies them onto 8 egress priorities
by DSCP, queues them in the per-port schedulers (`scheduler.py`) and transmits
them paced at each port's link rate. It carries out what the OpenFlow
sessions return (`openflow.py`: replies, PacketOut frames, port changes,
removed flows). It watches carrier on every port and reports changes as
OpenFlow PORT_STATUS. On a credit link (the fabric's `flow_control="credit"`)
every port runs InfiniBand-style credits instead of PFC (`emu/credit.py`):
it counts the blocks each frame of a credit VL brings in, sends the credit
limit its buffer leaves free as flow control frames (`emu/proto/credit.py`),
and its scheduler sends a VL's frame only with credit for it. Nothing else in emu holds sockets or reads the clock
for the switch (`channel.py` holds the OpenFlow sockets, on this loop's `now`).

Its arguments (`build_parser`) are what `python -m emu.switch.worker` takes for one
switch (the Mininet node in `node.py` builds this argv); `emu/switch/fastpath.py`
subclasses it with the per-frame path in C.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import selectors
import socket
import struct
import time
from dataclasses import dataclass

from emu import config
from emu.credit import CreditLink
from emu.fidelity import ProcessFidelity, frame_time_s
from emu.mgmt import MgmtServer
from emu.proto import credit as ibfc
from emu.proto import pfc
from emu.proto.ofext import AGG_PORT
from emu.proto.roce import is_rocev2
from emu.switch import reports, rewrite
from emu.switch.aggregation import AggEngine
from emu.switch.buffer import DROP_CREDIT_OVERRUN, SharedBuffer
from emu.switch.channel import Channels, OFChannel
from emu.switch.loop import SwitchLoop
from emu.switch.openflow import Effect, FlowsRemoved, PortChanged, Reply, SwitchModel, Transmit
from emu.switch.pipeline import Pipeline
from emu.switch.ports import PortState
from emu.switch.rxring import RxRing
from emu.switch.scheduler import (  # noqa: F401 - DEFAULT_DSCP_TO_PRIO is re-exported
    DEFAULT_DSCP_TO_PRIO,
    N_PRIORITIES,
    PortScheduler,
    dscp_table,
)
from emu.switch.watchdog import PfcWatchdog, QueueView

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
# Linux 4.20+: do not deliver our own transmitted frames back to us.
PACKET_IGNORE_OUTGOING = 23
OFPPR_ADD, OFPPR_DELETE, OFPPR_MODIFY = 0, 1, 2

RX_BATCH = 64
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
# A port's receive ring holds RING_S of frames at its rate (1500 bytes), within
# RING_FRAMES. The floor is for bursts, not rates: a sender that skips its
# qdisc (an unpaced host, the NIC model, a test) hands the veth hundreds of
# frames in a millisecond, which the 4 MiB socket buffer before the ring
# absorbed (~1,800 frames). 1,024 slots of 2 KiB: 2 MiB a port.
RING_S = 0.03
RING_FRAMES = (1024, 4096)
CARRIER_POLL_S = 0.1
TELEMETRY_SAMPLE_S = 0.1  # queue depth, pause state, marks and bytes per port and priority
TELEMETRY_KEEP = 36000  # samples kept (an hour at 10 per second)
EXPIRE_POLL_S = 0.5


@dataclass(frozen=True)
class PortSpec:
    """One port from the command line: `ifname:port_no:rate_bps`."""

    name: str
    port_no: int
    rate_bps: int

    @classmethod
    def parse(cls, text: str) -> PortSpec:
        try:
            name, port_no, rate = text.rsplit(":", 2)
            spec = cls(name, int(port_no), int(rate))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"port {text!r}: expected IFNAME:PORT_NO:RATE_BPS, e.g. leaf1-eth1:1:20000000"
            ) from None
        if spec.port_no < 1 or spec.rate_bps <= 0:
            raise argparse.ArgumentTypeError(f"port {text!r}: port_no and rate must be positive")
        return spec


def _qos(text: str) -> dict:
    """--qos JSON into validated specs; errors name the key."""
    try:
        return config.parse_qos(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"--qos: {exc}") from None


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"--agg-slots {text!r}: expected an integer >= 0")
    return value


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if text.startswith("tcp:"):
        host = host[4:]
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"address {text!r}: expected [tcp:]HOST:PORT") from None


class Datapath:
    """One switch: its ports, timers and handlers, served by a `SwitchLoop`."""

    def __init__(self, args: argparse.Namespace, loop: SwitchLoop | None = None) -> None:
        self.name: str = args.name
        self.dpid: int = args.dpid
        self.mgmt_path: str = args.mgmt
        self.dscp_to_prio = dscp_table()
        self.started_at = time.time()
        self.ports: dict[int, PortState] = {}
        self.schedulers: dict[int, PortScheduler] = {}
        self.port_socks: dict[int, socket.socket] = {}
        self.port_rings: dict[int, RxRing] = {}
        self.busy: set[int] = set()
        # When a busy port may next send (what the last _transmit found, or now when
        # a port got its first frame): the receive loop sends as soon as it is due
        # instead of after a whole batch (a 64-frame batch is ~2 frame times at 20 Mbit/s).
        self.tx_due = 0.0
        self.stopping = False  # crashed on request (mgmt "crash"): the loop closes it
        # The loop (emu/switch/loop.py) may serve other switches too; it sleeps
        # until the earliest `due` of all of them.
        self.loop = loop if loop is not None else SwitchLoop()
        self.sel = self.loop.view(self)
        self.due = 0.0
        self.next_carrier = self.next_expire = self.next_watchdog = self.next_sample = 0.0
        self.mgmt_conns: dict = {}
        self.kernel_drops: dict[int, int] = {}
        self.malformed_frames = 0

        for spec in args.port:
            self._open_port(spec)
        self.pipeline = self._pipeline(args)
        # Starts empty on every (re)start: the controller configures jobs when we connect.
        self.agg = AggEngine(self.ports, total_slots=args.agg_slots)
        self.agg_errors = 0
        qos = args.qos
        credit = qos["credit"]
        self.buffer = SharedBuffer(
            qos["buffer"],
            qos["pfc"],
            qos["ecn"],
            {n: p.rate_bps for n, p in self.ports.items()},
            credit=credit,
        )
        # Credit mode: every port's both directions of the credit loop (emu/credit.py).
        self.credit_links: dict[int, CreditLink] = {}
        if credit.enabled:
            now = time.monotonic()
            for n, p in self.ports.items():
                link = CreditLink(
                    credit, credit.priorities, self.buffer.credit_capacity, p.rate_bps, now
                )
                self.credit_links[n] = link
                self.schedulers[n].credit = link
        self.fc_templates = {n: ibfc.template(p.hw_addr.hex(":")) for n, p in self.ports.items()}
        self.fc_tx_frames: dict[int, int] = {n: 0 for n in self.credit_links}
        self.fc_rx_frames: dict[int, int] = {n: 0 for n in self.credit_links}
        self.pfc_templates = {n: pfc.template(p.hw_addr.hex(":")) for n, p in self.ports.items()}
        self.pause_rx: dict[tuple[int, int], int] = {}
        self.last_pause_rx: dict[tuple[int, int], float] = {}
        self.lossless_prios = tuple(qos["pfc"].lossless_priorities)
        self.watchdog = PfcWatchdog(qos["watchdog"])
        self.wd_drop: set[tuple[int, int]] = set()  # queues isolated by the watchdog
        self.wd_ignore_pause: set[tuple[int, int]] = set()
        self.watchdog_drops = 0
        self.telemetry: list[list] = []
        # A lossy link (fault): per port, the probability that a frame sent is lost,
        # or [n, count]: every n-th RoCEv2 frame sent is lost (count: those sent so far).
        self.port_loss: dict[int, float] = {}
        self.port_loss_every: dict[int, list[int]] = {}
        self.loss_rng = random.Random(self.dpid)
        self.lost_frames: dict[int, int] = {}
        self.pfc_tx_frames: dict[int, int] = {}
        self.model = SwitchModel(
            dpid=self.dpid,
            pipeline=self.pipeline,
            dp_desc=f"emu switch {self.name}",
            agg=self.agg,
            queue_counters=self._queue_counters,
        )
        self.model.queues_since = time.monotonic()
        # Fidelity (emu/fidelity.py): the ports' clocks live in their schedulers;
        # stalls are counted in frame times of the fastest port.
        self.fidelity = ProcessFidelity(
            self.name,
            "switch",
            {n: s.clock for n, s in self.schedulers.items()},
            frame_time_s(max((p.rate_bps for p in self.ports.values()), default=1e9)),
            time.monotonic(),
        )
        self.fidelity.port_names = {n: p.name for n, p in self.ports.items()}
        self.early_s = min((s.early_s for s in self.schedulers.values()), default=0.0)
        self._lossless_at_reset = 0  # lossless frames sent before the window
        self.of = Channels(self.name, self.model, self.sel, args.of_listen, args.controller or [])
        self.mgmt = MgmtServer(self.mgmt_path, self._mgmt_handlers())
        self.sel.register(self.mgmt.listener, selectors.EVENT_READ, ("mgmt-listen", None))
        self.loop.add(self)

    # ----- ports -------------------------------------------------------------

    def _open_port(self, spec: PortSpec) -> None:
        # Created without a protocol the socket receives nothing until it is bound,
        # so setting up its ring and then binding it wait for no RCU grace period
        # (the kernel's synchronize_net() when a receiving AF_PACKET socket is
        # re-bound or given a ring: ~15 ms each, 0.25 s of an 8-port switch's start).
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            self.filter_outgoing = False
        except OSError:
            self.filter_outgoing = True  # older kernel: filter by pkttype instead
        ifindex = socket.if_nametoindex(spec.name)
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        sock.setblocking(False)
        low, high = RING_FRAMES
        frames = min(high, max(low, int(spec.rate_bps * RING_S / (1500 * 8))))
        port = PortState(
            port_no=spec.port_no,
            name=spec.name,
            hw_addr=self._hw_addr(spec.name),
            rate_bps=spec.rate_bps,
            created_at=time.monotonic(),
            link_up=self._carrier(spec.name),
        )
        self.ports[spec.port_no] = port
        self.schedulers[spec.port_no] = PortScheduler(rate_bps=spec.rate_bps)
        self.port_socks[spec.port_no] = sock
        self.kernel_drops[spec.port_no] = 0
        self._attach_reader(spec.port_no, sock, spec.name, self._mtu(spec.name) + 22, frames)

    def _attach_reader(
        self, port_no: int, sock: socket.socket, ifname: str, max_frame: int, frames: int
    ) -> None:
        """Read the port through a receive ring, served by this process's loop; bind it."""
        self.port_rings[port_no] = RxRing(
            sock, max_frame, frames, skip_outgoing=self.filter_outgoing
        )
        sock.bind((ifname, ETH_P_ALL))
        self.sel.register(sock, selectors.EVENT_READ, ("port", port_no))

    @staticmethod
    def _hw_addr(ifname: str) -> bytes:
        try:
            with open(f"/sys/class/net/{ifname}/address") as f:
                return bytes.fromhex(f.read().strip().replace(":", ""))
        except (OSError, ValueError):
            raise OSError(f"no such interface: {ifname}") from None

    @staticmethod
    def _mtu(ifname: str) -> int:
        try:
            with open(f"/sys/class/net/{ifname}/mtu") as f:
                return int(f.read())
        except (OSError, ValueError):
            return 1500

    @staticmethod
    def _carrier(ifname: str) -> bool:
        """Carrier as the kernel sees it; a veth whose peer is down reads not 'up'."""
        try:
            with open(f"/sys/class/net/{ifname}/operstate") as f:
                return f.read().strip() in ("up", "unknown")
        except OSError:
            return False

    def _poll_carrier(self) -> None:
        for port in self.ports.values():
            up = self._carrier(port.name)
            if up != port.link_up:
                port.link_up = up
                log.info(
                    "%s: port %d %s link %s",
                    self.name,
                    port.port_no,
                    port.name,
                    "up" if up else "down",
                )
                if not up:
                    self._flush_port(port.port_no)
                self.pipeline.invalidate()
                self.of.port_status(OFPPR_MODIFY, port)

    def _flush_port(self, port_no: int, prios=range(N_PRIORITIES)) -> None:
        """Drop what waits on a dead port (or queue) and give its bytes back to the buffer."""
        dropped = self.schedulers[port_no].flush(prios)
        for frame, prio, (in_port, charge) in dropped:
            self.buffer.release(in_port, prio, port_no, len(frame), charge)
        self.ports[port_no].counters.tx_dropped += len(dropped)
        if not self.schedulers[port_no].pending:
            self.busy.discard(port_no)

    def _read_kernel_drops(self) -> None:
        for port_no, sock in self.port_socks.items():
            try:
                raw = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            except OSError:
                continue
            _, drops = struct.unpack("II", raw)  # reading resets the kernel's counters
            if drops:
                self.kernel_drops[port_no] += drops
                self.fidelity.kernel_drops[port_no] += drops
                self.ports[port_no].counters.rx_dropped += drops

    def _pipeline(self, args: argparse.Namespace) -> Pipeline:
        """The OpenFlow pipeline, reading this switch's queues (flowlet and adaptive
        SELECT groups) and priorities (its DSCP map)."""
        return Pipeline(
            n_tables=args.tables,
            seed=args.seed,
            ports=self.ports,
            queue_bytes=self._queued_bytes,
            egress=self._egress,
            dscp_to_prio=self.dscp_to_prio,
        )

    # ----- the per-packet path ----------------------------------------------

    def _queued_bytes(self, port_no: int) -> int:
        """Bytes waiting on every priority of an egress port (flowlet choice)."""
        sched = self.schedulers.get(port_no)
        return sum(sched.depth_bytes) if sched is not None else 0

    def _egress(self, port_no: int, prio: int, now: float) -> tuple[int, bool] | None:
        """An egress port as adaptive routing sees it (adaptive.EgressView): the bytes
        queued at `prio` and above (strict priority sends them first) and whether a
        PFC PAUSE stops `prio` there; None for a port without queues."""
        sched = self.schedulers.get(port_no)
        if sched is None:
            return None
        return sum(sched.depth_bytes[prio:]), sched.paused_until[prio] > now

    def adaptive_counts(self) -> dict:
        """Adaptive routing's counters (adaptive.AdaptiveRouter.counts)."""
        return self.pipeline.adaptive.counts()

    def _receive(self, port_no: int, now: float) -> int:
        """Read up to RX_BATCH frames from a port and forward them; how many it read."""
        read_frame = self.port_rings[port_no].read
        port = self.ports[port_no]
        monotonic = time.monotonic
        link = self.credit_links.get(port_no)
        receive = self._receive_frame
        read = 0
        for read in range(1, RX_BATCH + 1):
            if self.tx_due <= now:
                self._transmit(now)
            frame = read_frame()
            if frame is None:
                if read == 1:
                    # Ready with nothing in the ring: an error (the interface went
                    # down, ENETDOWN) that recv() used to consume. Left pending, it
                    # would keep the socket ready and the loop spinning.
                    self.port_socks[port_no].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                return read - 1
            now = monotonic()
            receive(port_no, port, link, frame, now)
        return read

    def _receive_frame(self, port_no: int, port: PortState, link, frame: bytes, now: float) -> None:
        """One received frame: PAUSE and credit honoured, anything else forwarded."""
        counters = port.counters
        counters.rx_packets += 1
        counters.rx_bytes += len(frame)
        if len(frame) < 14:
            counters.rx_errors += 1
            self.malformed_frames += 1
            return
        if frame[12:14] == b"\x88\x08":
            # 802.3 MAC control (PFC, PAUSE) belongs to the link: honoured here,
            # never forwarded.
            self._receive_pause(port_no, frame, now)
            return
        if frame[12:14] == b"\x88\xb5":
            # A credit update belongs to the link too (emu/proto/credit.py).
            self._receive_credit(port_no, frame, now)
            return
        if link is not None and not self._credit_in(link, port_no, frame):
            return
        if not port.live or port.config & 0x4:  # OFPPC_NO_RECV
            counters.rx_dropped += 1
            return
        try:
            outputs, packet_ins = self.pipeline.process(port_no, frame, now)
        except Exception:  # noqa: BLE001 - a bad frame must never stop the switch
            counters.rx_errors += 1
            self.malformed_frames += 1
            log.debug("%s: frame on port %d not processed", self.name, port_no, exc_info=True)
            return
        if outputs:
            self._enqueue(outputs, port_no, now)
        if packet_ins:
            self.of.packet_ins(packet_ins)

    def _enqueue(self, outputs, in_port: int, now: float) -> None:
        """Admit each output into the shared buffer (drop, CE-mark) and queue it."""
        admit = self.buffer.admit
        for port_no, frame, queue_id in outputs:
            sched = self.schedulers.get(port_no)
            if sched is None:
                if port_no == AGG_PORT:
                    self._aggregate(in_port, frame, now)
                continue
            # The DSCP picks the priority and the ECN field says ECN-capable (RFC 3168):
            # both from one look at the IPv4 header, untagged (nearly every frame) or not.
            if frame[12:14] == b"\x08\x00" and len(frame) > 15:
                tos = frame[15]
            elif frame[12:14] == b"\x81\x00" and frame[16:18] == b"\x08\x00" and len(frame) > 19:
                tos = frame[19]
            else:
                tos = None
            if queue_id is not None and 0 <= queue_id < N_PRIORITIES:
                prio = queue_id
            else:
                prio = self.dscp_to_prio[tos >> 2] if tos is not None else 0
            if self.wd_drop and (port_no, prio) in self.wd_drop:
                self.watchdog_drops += 1
                self.ports[port_no].counters.tx_dropped += 1
                continue
            size = len(frame)
            decision = admit(in_port, prio, port_no, size, tos is not None and tos & 3 != 0, now)
            if decision is None:
                self.ports[port_no].counters.tx_dropped += 1
                continue
            charge, mark = decision
            if mark:
                frame = rewrite.set_ip_ecn(frame, 3)  # CE; RoCE's ICRC masks the ECN bits
            if sched.enqueue(frame, prio, (in_port, charge), now):
                if port_no not in self.busy:
                    self.busy.add(port_no)
                    if now < self.tx_due:
                        self.tx_due = now
            else:
                self.buffer.release(in_port, prio, port_no, size, charge)
                self.ports[port_no].counters.tx_dropped += 1

    def _aggregate(self, in_port: int, frame: bytes, now: float) -> None:
        """A frame output to AGG_PORT: the reduction engine takes it; queue what it sends.

        The engine's frames are charged to the ingress port of the frame that
        triggered them (so a paused parent or child link backs up to PFC) and
        are classified by their DSCP like every other frame.
        """
        try:
            outputs = self.agg.receive(in_port, frame, now)
        except Exception:  # noqa: BLE001 - a bad frame must never stop the switch
            self.agg_errors += 1
            log.debug(
                "%s: aggregation engine failed on a frame from port %d",
                self.name,
                in_port,
                exc_info=True,
            )
            return
        if outputs:
            self._enqueue(outputs, in_port, now)

    # ----- PFC --------------------------------------------------------------

    def _credit_in(self, link: CreditLink, port_no: int, frame: bytes) -> bool:
        """Count a frame's blocks on its VL (its priority by DSCP); False: an overrun, dropped."""
        if frame[12:14] == b"\x08\x00" and len(frame) > 15:
            vl = self.dscp_to_prio[frame[15] >> 2]
        elif frame[12:14] == b"\x81\x00" and frame[16:18] == b"\x08\x00" and len(frame) > 19:
            vl = self.dscp_to_prio[frame[19] >> 2]
        else:
            vl = 0
        if link.by_prio[vl] is None or link.received(vl, len(frame)):
            return True
        # The upstream sent beyond the credit it was given: dropped here, counted.
        self.buffer._drop(DROP_CREDIT_OVERRUN, (port_no, vl))
        self.ports[port_no].counters.rx_dropped += 1
        return False

    def _receive_credit(self, port_no: int, frame: bytes, now: float) -> None:
        """A flow control frame: the peer's credit limit and FCTBS for one VL."""
        link = self.credit_links.get(port_no)
        fc = ibfc.parse(frame)
        if fc is None:
            self.ports[port_no].counters.rx_errors += 1
            return
        if link is None or not link.on_fc(fc, now):
            return  # not a credit link, or a VL that is not ours
        self.fc_rx_frames[port_no] += 1
        if self.schedulers[port_no].pending:
            self.busy.add(port_no)  # a lane that waited for credit may send now
            self.tx_due = now

    def _send_credit(self, now: float) -> None:
        """Send the credit updates and refreshes that are due, ahead of any queued frame."""
        held = self.buffer.credit_held
        for port_no, link in self.credit_links.items():
            for fc in link.due(now, {vl: held(port_no, vl) for vl in link.vls}):
                try:
                    self.port_socks[port_no].send(ibfc.build(self.fc_templates[port_no], fc))
                except OSError:
                    # Lost like a frame on the wire: the next refresh carries the same limit.
                    self.ports[port_no].counters.tx_dropped += 1
                    continue
                self.fc_tx_frames[port_no] += 1

    def _receive_pause(self, port_no: int, frame: bytes, now: float) -> None:
        decoded = pfc.parse(frame)
        if decoded is None:
            self.ports[port_no].counters.rx_errors += 1
            return
        sched = self.schedulers[port_no]
        rate = self.ports[port_no].rate_bps
        for prio in decoded.enabled():
            key = (port_no, prio)
            self.pause_rx[key] = self.pause_rx.get(key, 0) + 1
            self.last_pause_rx[key] = now
            if key in self.wd_ignore_pause:
                continue  # the watchdog isolated this queue: PAUSE is ignored
            sched.pause(prio, now + pfc.quanta_to_s(decoded.quanta[prio], rate), now)
        self.busy.add(port_no)  # a resumed queue may have frames to send
        self.tx_due = now

    def _poll_watchdog(self, now: float) -> None:
        self._watchdog_act(
            self.watchdog.poll(now, self._watchdog_views(now), wall=time.time()), now
        )

    def _watchdog_views(self, now: float) -> list[QueueView]:
        """What the watchdog looks at: every lossless queue of every port."""
        views = []
        for port_no, sched in self.schedulers.items():
            for prio in self.lossless_prios:
                views.append(
                    QueueView(
                        port_no,
                        prio,
                        sched.depth_bytes[prio],
                        sched.counters[prio].tx_packets,
                        sched.is_paused(prio, now),
                        self.last_pause_rx.get((port_no, prio), float("-inf")),
                    )
                )
        return views

    def _watchdog_act(self, happened: list, now: float) -> None:
        """Isolate the queues a storm was detected on; restore those whose storm ended."""
        action = self.watchdog.spec.action
        for kind, port_no, prio in happened:
            key = (port_no, prio)
            if kind == "storm":
                log.warning(
                    "%s: PFC storm on port %d priority %d: action %s",
                    self.name,
                    port_no,
                    prio,
                    action,
                )
                if action in ("drop", "forward"):
                    self.wd_ignore_pause.add(key)
                    self.schedulers[port_no].pause(prio, now, now)  # resume it now
                if action == "drop":
                    self.wd_drop.add(key)
                    self._flush_port(port_no, (prio,))
            else:
                log.warning("%s: PFC storm over on port %d priority %d", self.name, port_no, prio)
                self.wd_drop.discard(key)
                self.wd_ignore_pause.discard(key)
            self.busy.add(port_no)
            self.tx_due = now

    def _set_watchdog(
        self,
        enabled: bool | None = None,
        action: str | None = None,
        detection_s: float | None = None,
    ) -> dict:
        changes = {
            k: v
            for k, v in (("enabled", enabled), ("action", action), ("detection_s", detection_s))
            if v is not None
        }
        spec = dataclasses.replace(self.watchdog.spec, **changes)  # validates
        self.watchdog.spec = spec
        return dataclasses.asdict(spec)

    def _sample_telemetry(self, now: float) -> None:
        """One row per port: time, port, then per priority depth, paused, marks, tx bytes."""
        wall = time.time()
        for port_no in self.schedulers:
            tx_bytes, depth, paused, marks, queue_tx = self._port_view(port_no, now)
            row = [round(wall, 3), port_no, tx_bytes]
            for prio in range(N_PRIORITIES):
                row += [depth[prio], int(paused[prio]), marks[prio], queue_tx[prio]]
            self.telemetry.append(row)
        if len(self.telemetry) > TELEMETRY_KEEP * max(1, len(self.schedulers)):
            del self.telemetry[: len(self.schedulers) * 100]

    def _port_view(self, port_no: int, now: float) -> tuple:
        """(tx bytes, and per priority: depth, paused, ECN marks, tx bytes) of one port."""
        sched = self.schedulers[port_no]
        marks = self.buffer.counters.marks
        return (
            self.ports[port_no].counters.tx_bytes,
            list(sched.depth_bytes),
            [sched.is_paused(prio, now) for prio in range(N_PRIORITIES)],
            [marks.get((port_no, prio), 0) for prio in range(N_PRIORITIES)],
            [c.tx_bytes for c in sched.counters],
        )

    def _set_port_rate(self, port_no: int, rate_bps: float | None = None) -> dict:
        """Pace `port_no`'s egress at `rate_bps` (None: the port's own rate again)."""
        if int(port_no) not in self.ports:
            raise ValueError(f"unknown port {port_no}; ports: {sorted(self.ports)}")
        rate = self.ports[int(port_no)].rate_bps if rate_bps is None else float(rate_bps)
        if not rate > 0:
            raise ValueError(f"rate_bps={rate_bps}: must be > 0")
        self.schedulers[int(port_no)].set_rate(rate)
        return {"port_no": int(port_no), "rate_bps": rate}

    def _trace(self, in_port: int, frame: str) -> dict:
        """The pipeline's decision for one frame (hex) arriving on `in_port`; nothing changes."""
        if not isinstance(in_port, int) or in_port not in self.ports:
            raise ValueError(
                f"in_port={in_port!r}: not a port of {self.name} (ports {sorted(self.ports)})"
            )
        try:
            data = bytes.fromhex(frame)
        except (TypeError, ValueError):
            raise ValueError(
                f"frame={str(frame)[:40]!r}: must be the frame's bytes in hex"
            ) from None
        if len(data) < 14:
            raise ValueError(f"frame of {len(data)} bytes: shorter than an Ethernet header")
        answer = self.pipeline.trace(in_port, data, time.monotonic())
        answer["adaptive_counts"] = self.adaptive_counts()  # the C path's decisions too
        return answer

    def _set_hash_seed(self, seed: int) -> dict:
        """A new SELECT hash seed: the same fabric, hashing as another run would."""
        if not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ValueError(f"seed={seed!r}: must be an integer in 0..2^64-1")
        self.pipeline.set_seed(seed)
        return {"seed": seed}

    def _set_port_loss(
        self, port_no: int, probability: float = 0.0, every: int | None = None
    ) -> dict:
        """Lose each frame sent on `port_no` with `probability` (0 turns it off), or
        deterministically every `every`-th RoCEv2 frame (None or 0 turns it off).

        `every` is the drop of Guo et al. (SIGCOMM 2016, section 4): a switch
        ACL that dropped one packet in 256 of a RoCEv2 sender (its IP ID's last
        byte 0xff); here the port counts the RoCEv2 frames it sends, so other
        traffic does not move the phase. Both may be set at once.
        """
        if int(port_no) not in self.ports:
            raise ValueError(f"unknown port {port_no}; ports: {sorted(self.ports)}")
        if not 0.0 <= float(probability) <= 1.0:
            raise ValueError(f"probability={probability}: must be within 0..1")
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every < 0
        ):
            raise ValueError(f"every={every!r}: must be a whole number >= 1 (0: off)")
        if probability:
            self.port_loss[int(port_no)] = float(probability)
        else:
            self.port_loss.pop(int(port_no), None)
        if every:
            self.port_loss_every[int(port_no)] = [every, 0]
        else:
            self.port_loss_every.pop(int(port_no), None)
        return {
            "port_loss": self.port_loss,
            "port_loss_every": {p: n for p, (n, _) in self.port_loss_every.items()},
            "lost_frames": self.lost_frames,
        }

    def _set_ecn(self, **changes) -> dict:
        """Change ECN marking (enabled, kmin_bytes, kmax_bytes, pmax); validated."""
        spec = dataclasses.replace(self.buffer.ecn, **changes)
        self.buffer.set_ecn(spec)
        return {
            **dataclasses.asdict(spec),
            "thresholds": {n: list(t) for n, t in self.buffer.kmin_kmax.items()},
        }

    def _send_pfc(self, now: float) -> None:
        """Send the PAUSE frames the buffer asks for, ahead of any queued frame."""
        for port_no, quanta in self.buffer.pfc_due(now):
            frame = pfc.build(self.pfc_templates[port_no], quanta)
            try:
                self.port_socks[port_no].send(frame)
            except OSError:
                self.ports[port_no].counters.tx_dropped += 1
                continue
            self.pfc_tx_frames[port_no] = self.pfc_tx_frames.get(port_no, 0) + 1

    def _send_due(self, port_no: int, sched: PortScheduler, now: float, until: float) -> None:
        """Send `port_no`'s frames while its wire is free up to `until`."""
        sock = self.port_socks[port_no]
        counters = self.ports[port_no].counters
        loss = self.port_loss.get(port_no)
        every = self.port_loss_every.get(port_no)
        release = self.buffer.release
        while sched.pending and sched.free_at <= until:
            item = sched.dequeue(now)
            if item is None:
                break
            frame, prio, meta = item
            nth = False
            if every is not None and is_rocev2(frame):
                every[1] += 1
                nth = every[1] % every[0] == 0
            if nth or (loss and self.loss_rng.random() < loss):
                # On the wire and lost: the frame leaves the buffer but never arrives.
                # The transmitter counts it as sent (its queue counter already did), so
                # this port's tx and the peer's rx part by what the link lost: how a
                # gray failure shows in port counters (Huang et al., HotOS 2017).
                self.lost_frames[port_no] = self.lost_frames.get(port_no, 0) + 1
                release(meta[0], prio, port_no, len(frame), meta[1])
                counters.tx_packets += 1
                counters.tx_bytes += len(frame)
                continue
            try:
                sock.send(frame)
            except BlockingIOError:
                sched.requeue_front(frame, prio, meta)
                if every is not None and is_rocev2(frame):
                    every[1] -= 1  # counted again when it goes
                break
            except OSError:
                counters.tx_dropped += 1
                release(meta[0], prio, port_no, len(frame), meta[1])
                continue
            size = len(frame)
            release(meta[0], prio, port_no, size, meta[1])
            counters.tx_packets += 1
            counters.tx_bytes += size

    def _transmit(self, now: float) -> float | None:
        """Send every frame whose time has come; return the earliest next deadline."""
        next_at = None
        done = []
        schedulers = self.schedulers
        for port_no in self.busy:
            sched = schedulers[port_no]
            # The wire's clock says when the next frame may go: ask the queues only
            # then (most calls at scenario rates find the wire still busy).
            sendable_until = now + sched.early_s
            if sched.pending and sched.free_at <= sendable_until:
                self._send_due(port_no, sched, now, sendable_until)
            ready = sched.ready_at()
            if ready is None:
                done.append(port_no)
            elif next_at is None or ready < next_at:
                next_at = ready
        for port_no in done:
            self.busy.discard(port_no)
        self.tx_due = next_at if next_at is not None else float("inf")
        return next_at

    # ----- OpenFlow --------------------------------------------------------

    def _on_channel(self, ch: OFChannel, events: int, now: float) -> None:
        self._execute(ch, self.of.on_ready(ch, events, now))
        self.of.close_if_done(ch, now)

    def _execute(self, ch: OFChannel, effects: list[Effect]) -> None:
        """Carry out what an OpenFlow session asked for, in the order it asked."""
        for effect in effects:
            kind = type(effect)
            if kind is Reply:
                self.of.send(ch, effect.data)
            elif kind is Transmit:
                # A controller's PacketOut enters the buffer as if from port 0 (the
                # CPU port), queued now: after the OpenFlow bytes read with it were
                # handled, not when they were read.
                self._enqueue(effect.outputs, 0, time.monotonic())
            elif kind is PortChanged:
                self._port_changed(effect.port_no)
            elif kind is FlowsRemoved:
                self.of.flow_removed(effect.entries)

    # ----- management -------------------------------------------------------

    def _mgmt_handlers(self) -> dict:
        return {
            "ping": lambda: "pong",
            "info": self._info,
            "ports": lambda: reports.ports(self),
            "flows": lambda: reports.flows(self),
            "groups": lambda: reports.groups(self),
            "agg": lambda: reports.agg(self),
            "counters": lambda: reports.counters(self),
            "watchdog": lambda: {
                "spec": dataclasses.asdict(self.watchdog.spec),
                "events": self.watchdog.events,
                "stormed": sorted(f"{p}:{q}" for p, q in self.watchdog.stormed()),
                "detected": self.watchdog.detected,
                "restored": self.watchdog.restored,
                "drops": self.watchdog_drops,
            },
            "set_watchdog": self._set_watchdog,
            "queues": lambda: reports.queues(self),
            "live": lambda: reports.live(self),
            "telemetry": lambda since=0.0: [r for r in self.telemetry if r[0] >= since],
            "set_ecn": self._set_ecn,
            "set_port_loss": self._set_port_loss,
            "set_hash_seed": self._set_hash_seed,
            "trace": self._trace,
            "set_port_rate": self._set_port_rate,
            "fidelity": self._fidelity,
            "fidelity_reset": self._fidelity_reset,
            "fastpath": lambda: {"datapath": "python"},
            "crash": self._crash,
        }

    def _queue_counters(self) -> dict:
        """OFPMP_QUEUE's view: per port, (tx_bytes, tx_packets, dropped) of each priority."""
        return {
            n: [(c.tx_bytes, c.tx_packets, c.dropped_packets) for c in s.counters]
            for n, s in self.schedulers.items()
        }

    def _lossless_sent(self) -> int:
        return sum(
            sched.counters[prio].tx_packets
            for sched in self.schedulers.values()
            for prio in self.lossless_prios
        )

    def _fidelity_reset(self) -> dict:
        self._lossless_at_reset = self._lossless_sent()
        return self.fidelity.reset(time.monotonic())

    def _fidelity(self) -> dict:
        self._read_kernel_drops()
        return self.fidelity.snapshot(
            time.monotonic(), self._lossless_sent() - self._lossless_at_reset
        )

    def _info(self) -> dict:
        return {
            "name": self.name,
            "dpid": self.dpid,
            "pid": os.getpid(),
            "of_listen": list(self.of.listen_addr),
            "controllers": self.of.info(),
            "uptime_s": time.time() - self.started_at,
        }

    # ----- the loop (emu/switch/loop.py calls these) --------------------------

    def service(self, now: float, work: list) -> None:
        """Run the timers that are due, send the frames that are due; set `due`."""
        self.of.connect_due(now)
        if now >= self.next_carrier:
            self._poll_carrier()
            self.of.keepalive(now)
            self.next_carrier = now + CARRIER_POLL_S
            work.append("carrier")
        if now >= self.next_sample:
            self._sample_telemetry(now)
            self.next_sample = now + TELEMETRY_SAMPLE_S
            work.append("telemetry")
        if now >= self.next_watchdog:
            self._poll_watchdog(now)
            self.next_watchdog = now + self.watchdog.spec.poll_s
            work.append("watchdog")
        if now >= self.next_expire:
            self._expire(now)
            self._read_kernel_drops()
            self.next_expire = now + EXPIRE_POLL_S
            work.append("expiry")
        if self.busy:
            self._transmit(time.monotonic())
        self._send_pfc(now)
        if self.credit_links:
            self._send_credit(now)
        self.refresh_due()

    def refresh_due(self) -> None:
        """`due`: the earliest of the timers, the next frame and the next PAUSE."""
        due = min(self.next_carrier, self.next_sample, self.next_watchdog, self.next_expire)
        if self.busy and self.tx_due < due:
            due = self.tx_due
        next_pfc = self.buffer.next_pfc_at()
        if next_pfc is not None and next_pfc < due:
            due = next_pfc
        for link in self.credit_links.values():
            refresh = link.next_due()
            if refresh < due:
                due = refresh
        self.due = due

    def on_ready(self, kind: str, ref, events: int, now: float) -> int:
        """One of this switch's sockets is ready; returns how many frames it read."""
        if kind == "port":
            read = self._receive(ref, now)
            self._send_pfc(now)  # XOFF as soon as a threshold is crossed
            if self.busy:  # send between receive batches, not once per pass
                self._transmit(time.monotonic())
            if self.credit_links:  # credit freed by what was just sent goes back now
                self._send_credit(time.monotonic())
            return read
        if kind == "of":
            self._on_channel(ref, events, now)
        elif kind == "of-listen":
            self.of.accept(now)
        elif kind == "mgmt-listen":
            conn = self.mgmt.accept()
            if conn:
                self.mgmt_conns[conn.sock.fileno()] = conn
                self.sel.register(conn.sock, selectors.EVENT_READ, ("mgmt", conn))
        elif kind == "mgmt":
            if not self.mgmt.on_readable(ref):
                self.sel.unregister(ref.sock)
                self.mgmt_conns.pop(ref.sock.fileno(), None)
                ref.sock.close()
        return 0

    def _expire(self, now: float) -> None:
        removed = self.pipeline.expire(now)
        if removed:
            self.of.flow_removed(removed)

    def _port_changed(self, port_no: int) -> None:
        """A PortMod changed a port: drop what waits on it if dead, tell every channel."""
        port = self.ports[port_no]
        if not port.live:
            self._flush_port(port_no)
        self.pipeline.invalidate()
        self.of.port_status(OFPPR_MODIFY, port)

    def _crash(self) -> dict:
        """Stop at once as a crashed switch does: tables, queues and sessions are lost.

        The answer goes out before the loop closes this switch's sockets; other
        switches of the same process go on (Fabric.kill_switch takes the links down).
        """
        self.stopping = True
        return {"name": self.name, "crashed": True}

    def close(self) -> None:
        self.sel.unregister_all()
        self.of.close()
        for ring in self.port_rings.values():
            ring.close()
        for sock in self.port_socks.values():
            sock.close()
        for conn in self.mgmt_conns.values():
            conn.sock.close()
        self.mgmt_conns.clear()
        self.mgmt.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emu-switch", description=__doc__.split("\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--dpid", required=True, type=lambda s: int(s, 0))
    p.add_argument(
        "--port",
        action="append",
        type=PortSpec.parse,
        default=[],
        help="IFNAME:PORT_NO:RATE_BPS (repeat)",
    )
    p.add_argument(
        "--controller",
        action="append",
        type=_hostport,
        help="[tcp:]HOST:PORT of a controller to connect to (repeat)",
    )
    p.add_argument(
        "--of-listen",
        type=_hostport,
        default=("127.0.0.1", 0),
        help="passive OpenFlow listener for ovs-ofctl (port 0 = any free)",
    )
    p.add_argument("--mgmt", required=True, help="path of the management Unix socket")
    p.add_argument("--tables", type=int, default=8)
    p.add_argument(
        "--agg-slots",
        type=_slots,
        default=1024,
        help="aggregation slots the reduction engine holds for all jobs",
    )
    p.add_argument(
        "--seed",
        type=lambda s: int(s, 0),
        default=0,
        help="per-switch seed of the SELECT group hash",
    )
    p.add_argument(
        "--qos",
        type=_qos,
        default=_qos("{}"),
        help='JSON {"buffer": {...}, "pfc": {...}, "ecn": {...}} (see emu/config.py)',
    )
    p.add_argument(
        "--rt-priority",
        type=int,
        default=0,
        help="SCHED_RR priority (emu/realtime.py); 0: normal scheduling",
    )
    p.add_argument("--log-level", default="INFO")
    return p

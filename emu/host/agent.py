"""The host agent: one process per host that is the host's RDMA NIC.

Owns the sockets and the clock of the NIC model (`rnic.py`) inside a host's
network namespace: an AF_PACKET socket on the host's interface for RoCEv2 and
PFC frames, a UDP socket bound to 4791 so that the kernel does not answer our
RoCEv2 frames with ICMP port-unreachable, and the management socket (emu/mgmt.py)
through which workloads connect queue pairs, post messages, read counters and
inject faults (stuck NIC, slow receiver). Kernel traffic (ping, iperf3) keeps
flowing beside it on the lossy class.

Run in a host: `python -m emu.host.agent --name h1 --intf h1-eth0 --mac ... --ip ...
--rate-bps 20000000 --mgmt /run/emu/<run>/h1.nic.sock`.
"""

from __future__ import annotations

import argparse
import logging
import selectors
import socket
import sys
import time

from emu.host.rnic import NicConfig, Rnic
from emu.mgmt import MgmtServer
from emu.proto.roce import ROCEV2_UDP_PORT
from emu.registry import die_with_parent, stop_on_signals

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
RX_BATCH = 64
SAMPLE_S = 0.1
MAX_IDLE_S = 0.05


class Agent:
    """The event loop of one host's NIC."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.name = args.name
        cfg = NicConfig(mac=args.mac, ip=args.ip, rate_bps=args.rate_bps,
                        dcqcn=not args.no_dcqcn, modelled_rate_bps=args.modelled_rate_bps)
        self.started = time.monotonic()
        self.rnic = Rnic(cfg, now=self.started)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((args.intf, ETH_P_ALL))
        self.sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setblocking(False)
        # Our RoCEv2 frames also reach the kernel's UDP stack; a bound socket we
        # never read keeps it from answering them with ICMP port-unreachable.
        self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sink.bind(("0.0.0.0", ROCEV2_UDP_PORT))
        self.sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ, "port")
        self.mgmt = MgmtServer(args.mgmt, {
            "info": lambda: {"name": self.name, "ip": cfg.ip, "mac": cfg.mac,
                             "rate_bps": cfg.rate_bps},
            "connect": self._connect,
            "post_send": self._post_send,
            "post_write": self._post_write,
            "poll_completions": self._poll_completions,
            "stats": self._stats,
            "samples": lambda since=0: [s for s in self.samples if s[0] >= since],
            "set": self._set,
        })
        self.sel.register(self.mgmt.listener, selectors.EVENT_READ, "mgmt-listen")
        self.samples: list = []
        self.tx_errors = 0
        self.stopping = False

    # ----- management -------------------------------------------------------

    def _connect(self, qpn: int, peer_qpn: int, peer_mac: str, peer_ip: str,
                 udp_sport: int, max_rate_bps: float | None = None) -> dict:
        self.rnic.connect(int(qpn), int(peer_qpn), peer_mac, peer_ip, int(udp_sport),
                          time.monotonic(), max_rate_bps=max_rate_bps)
        return {"qpn": qpn}

    def _post_send(self, qpn: int, size_bytes: int, count: int = 1) -> list[int]:
        now = time.monotonic()
        return [self.rnic.post_send(int(qpn), int(size_bytes), now) for _ in range(int(count))]

    def _post_write(self, qpn: int, size_bytes: int, count: int = 1, remote_va: int = 0,
                    rkey: int = 0) -> list[int]:
        now = time.monotonic()
        return [self.rnic.post_write(int(qpn), int(size_bytes), now, int(remote_va), int(rkey))
                for _ in range(int(count))]

    def _poll_completions(self, qpn: int, max_entries: int = 1024) -> list[dict]:
        """Completions not polled before, oldest first (like ibv_poll_cq)."""
        qp = self.rnic.send_qps.get(int(qpn))
        if qp is None:
            raise ValueError(f"unknown QP {qpn}")
        done, qp.completed[:] = qp.completed[:max_entries], qp.completed[max_entries:]
        return [{"msg_id": m.msg_id, "size_bytes": m.size_bytes,
                 "latency_s": m.completed_at - m.posted_at} for m in done]

    def _stats(self) -> dict:
        now = time.monotonic()
        st = self.rnic.stats(now)
        st["time"] = now
        st["tx_errors"] = self.tx_errors
        return st

    def _set(self, drain_rate_bps: float | None = None, stuck: bool | None = None,
             unlimited_drain: bool = False) -> dict:
        """Faults: a slow receiver (drain rate) or a stuck NIC (no drain, continuous PAUSE)."""
        if drain_rate_bps is not None:
            if drain_rate_bps < 0:
                raise ValueError(f"drain_rate_bps={drain_rate_bps}: must be >= 0")
            self.rnic.cfg.drain_rate_bps = float(drain_rate_bps)
        if unlimited_drain:
            self.rnic.cfg.drain_rate_bps = None
        if stuck is not None:
            self.rnic.stuck = bool(stuck)
        return {"drain_rate_bps": self.rnic.cfg.drain_rate_bps, "stuck": self.rnic.stuck}

    # ----- the loop ---------------------------------------------------------

    def _send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
        except OSError:
            self.tx_errors += 1  # as if lost on the wire: go-back-N recovers

    def _sample(self, now: float) -> None:
        self.samples.append((now, {q: qp.tx_bytes for q, qp in self.rnic.send_qps.items()},
                             {q: qp.rx_bytes for q, qp in self.rnic.recv_qps.items()},
                             {q: (qp.rp.rate_bps if qp.rp else None)
                              for q, qp in self.rnic.send_qps.items()}))
        del self.samples[:-6000]

    def run(self) -> None:
        rnic = self.rnic
        next_sample = time.monotonic()
        conns = {}
        while not self.stopping:
            now = time.monotonic()
            for frame in rnic.tick(now):
                self._send(frame)
            frame = rnic.next_frame(now)
            while frame is not None:
                self._send(frame)
                frame = rnic.next_frame(now)
            if now >= next_sample:
                self._sample(now)
                next_sample = now + SAMPLE_S
            deadline = min(t for t in (rnic.next_wakeup(now), rnic.next_tick(), next_sample,
                                       now + MAX_IDLE_S) if t is not None)
            for key, _ in self.sel.select(max(0.0, deadline - time.monotonic())):
                if key.data == "port":
                    self._receive(time.monotonic())
                elif key.data == "mgmt-listen":
                    conn = self.mgmt.accept()
                    if conn:
                        conns[conn.sock.fileno()] = conn
                        self.sel.register(conn.sock, selectors.EVENT_READ, conn)
                elif not self.mgmt.on_readable(key.data):
                    self.sel.unregister(key.data.sock)
                    conns.pop(key.data.sock.fileno(), None)
                    key.data.sock.close()
        self.mgmt.close()
        self.sock.close()
        self.sink.close()

    def _receive(self, now: float) -> None:
        for _ in range(RX_BATCH):
            try:
                frame = self.sock.recv(9216)
            except BlockingIOError:
                return
            except OSError:
                return
            try:
                replies = self.rnic.receive(frame, now)
            except Exception:  # noqa: BLE001 - a bad frame must never stop the NIC
                log.debug("frame not processed", exc_info=True)
                continue
            for reply in replies:
                self._send(reply)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="emu-host-agent", description=__doc__.split("\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--intf", required=True)
    p.add_argument("--mac", required=True)
    p.add_argument("--ip", required=True)
    p.add_argument("--rate-bps", type=int, required=True)
    p.add_argument("--modelled-rate-bps", type=float, default=25e9)
    p.add_argument("--no-dcqcn", action="store_true")
    p.add_argument("--mgmt", required=True)
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    die_with_parent()
    agent = Agent(args)
    stop_on_signals(agent)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

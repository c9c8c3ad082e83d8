"""UDP spray: one host's sender and receiver of a traffic pattern, run in its namespace.

::

    python -m emu.traffic.spray --bind IP --port P --dst IP[,IP...] --rate-bps R \\
        --size B --start-at UNIX_TIME --duration S --warmup S --out FILE [--seed N] [--tos T]

From `--start-at` for `--duration` seconds it sends datagrams of `--size`
payload bytes at `--rate-bps` (payload bits), each to one of `--dst` drawn
at random (one destination: a flow; every other host: uniform random
traffic, a destination per datagram as the dragonfly literature sends it),
paced by a schedule: what is due goes out, then it waits for the next
datagram's time or for one to arrive. On the same socket it receives the
others' datagrams. Each datagram carries a magic, the sender's sequence
number and its send time, so the receiver counts, per source, the bytes of
datagrams *sent* inside the measuring window [start + warmup, start +
duration - warmup]: the flows' overlap, not their ragged ends. A sender
that falls more than `LAG_S` behind its schedule skips what it missed (and
counts it) rather than bursting it out.

After the duration and a drain (`DRAIN_S`) it writes JSON to `--out`:
``{"window_s", "sent": {dst: [datagrams, bytes, bytes in window]},
"received": {src: [datagrams, bytes, bytes in window]}, "send_errors",
"skipped"}``. `emu/traffic/dragonfly.py` starts one per host and reads
them. Standard library only: it runs in a host's namespace with nothing of
emu's set up.
"""

from __future__ import annotations

import argparse
import errno
import json
import random
import select
import socket
import struct
import sys
import time
from typing import Optional, Sequence

MAGIC = b"EMUS"
HEADER = struct.Struct("!4sQd")  # magic, sequence, send time (unix seconds)
#: How far behind its schedule a sender may fall before it skips datagrams.
LAG_S = 0.05
#: How long after the last datagram is sent the receiver keeps counting.
DRAIN_S = 1.0
RCVBUF_BYTES = 4 << 20


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m emu.traffic.spray", description=__doc__)
    p.add_argument("--bind", required=True, help="this host's address")
    p.add_argument("--port", type=int, required=True, help="UDP port, the same on every host")
    p.add_argument("--dst", default="", help="comma list of destinations (none: receive only)")
    p.add_argument("--rate-bps", type=float, default=0.0, help="payload bit/s to send")
    p.add_argument("--size", type=int, default=1400, help="payload bytes a datagram")
    p.add_argument("--start-at", type=float, required=True, help="unix time to start sending")
    p.add_argument("--duration", type=float, required=True, help="seconds of sending")
    p.add_argument("--warmup", type=float, default=0.5, help="seconds left out at each end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tos", type=int, default=0, help="IP TOS byte (DSCP << 2)")
    p.add_argument("--out", required=True, help="where the JSON result goes")
    return p


class Spray:
    """The loop: sends on a schedule and counts what arrives (no clock of its own: `now`
    comes from the caller of `send_due` and `receive`)."""

    def __init__(self, args: argparse.Namespace, sock: socket.socket) -> None:
        self.args = args
        self.sock = sock
        self.dsts = [d for d in args.dst.split(",") if d]
        self.rng = random.Random(args.seed)
        self.gap_s = args.size * 8 / args.rate_bps if args.rate_bps > 0 and self.dsts else 0.0
        self.next_s = args.start_at
        self.end_s = args.start_at + args.duration
        self.window = (args.start_at + args.warmup, self.end_s - args.warmup)
        self.seq = 0
        self.sent: dict[str, list[int]] = {d: [0, 0, 0] for d in self.dsts}
        self.received: dict[str, list[int]] = {}
        self.send_errors = 0
        self.skipped = 0
        self.payload = bytearray(max(args.size, HEADER.size))

    def in_window(self, t: float) -> bool:
        return self.window[0] <= t < self.window[1]

    def send_due(self, now: float) -> None:
        """Send every datagram whose time has come (skip those more than LAG_S late)."""
        if not self.gap_s:
            return
        late = min(now, self.end_s) - self.next_s
        if late > LAG_S:
            missed = int(late / self.gap_s)
            self.skipped += missed
            self.next_s += missed * self.gap_s
        while self.next_s <= now and self.next_s < self.end_s:
            dst = self.dsts[0] if len(self.dsts) == 1 else self.rng.choice(self.dsts)
            HEADER.pack_into(self.payload, 0, MAGIC, self.seq, self.next_s)
            try:
                self.sock.sendto(self.payload, (dst, self.args.port))
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    raise
                self.send_errors += 1
            else:
                count = self.sent[dst]
                count[0] += 1
                count[1] += len(self.payload)
                count[2] += len(self.payload) if self.in_window(self.next_s) else 0
            self.seq += 1
            self.next_s += self.gap_s

    def receive(self) -> None:
        """Take every datagram waiting on the socket."""
        while True:
            try:
                data, (src, _port) = self.sock.recvfrom(65536)
            except BlockingIOError:
                return
            if len(data) < HEADER.size or data[:4] != MAGIC:
                continue
            _magic, _seq, sent_at = HEADER.unpack_from(data)
            count = self.received.setdefault(src, [0, 0, 0])
            count[0] += 1
            count[1] += len(data)
            count[2] += len(data) if self.in_window(sent_at) else 0

    def wait_s(self, now: float) -> float:
        """How long the loop may sleep: until the next datagram is due, at most 10 ms."""
        if self.gap_s and self.next_s < self.end_s:
            return min(0.01, max(0.0, self.next_s - now))
        return 0.01

    def result(self) -> dict:
        return {
            "window_s": self.window[1] - self.window[0],
            "sent": self.sent,
            "received": self.received,
            "send_errors": self.send_errors,
            "skipped": self.skipped,
        }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
    if args.tos:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, args.tos)
    sock.bind((args.bind, args.port))
    sock.setblocking(False)
    spray = Spray(args, sock)
    stop_s = spray.end_s + DRAIN_S
    while True:
        now = time.time()
        if now >= stop_s:
            break
        spray.send_due(now)
        readable, _w, _x = select.select([sock], [], [], spray.wait_s(time.time()))
        if readable:
            spray.receive()
    spray.receive()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(spray.result(), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

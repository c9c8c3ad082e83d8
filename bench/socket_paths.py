"""What moving one frame through an AF_PACKET socket costs, by the way it is read and sent.

A saturated emu switch spends about 10 us of CPU per frame-hop, of which the
Python pipeline is 2-2.5 us (docs/performance.md, "Start-up and the
per-frame path"); the rest is the socket calls. Before a datapath is built on
batched rings this bench measures, in one process on a veth pair of its own
(in a network namespace it makes and removes), the CPU per frame of every way
a Python switch can receive and send:

- receive: `recv()` per frame; `recv_into()` a reused buffer; a
  `PACKET_RX_RING` (TPACKET_V2: each frame's status word is handed back one by
  one, so a frame is readable the moment it lands; TPACKET_V3 hands out whole
  blocks and holds a frame up to its block timeout, a millisecond or more,
  which a switch at 10 Mbit/s cannot wait);
- send: `send()` per frame; `sendmmsg()` of a batch through ctypes; a
  `PACKET_TX_RING` (TPACKET_V2) filled with a batch and flushed by one
  `send()`.

Each round sends a batch on one end and reads it on the other; CPU is
`thread_time()`, split into the send side and the receive side. The kernel's
delivery of a frame to the peer's socket happens inside the send call, so it
is counted there.

    sudo .venv/bin/python bench/socket_paths.py [--frames 200000] [--batch 32] [--sizes 64,1514]

Results: docs/performance.md ("Where a frame-hop's time goes, against OVS").
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import platform
import socket
import struct
import subprocess
import sys
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_VERSION = 10
PACKET_TX_RING = 13
PACKET_QDISC_BYPASS = 20
TPACKET_V2 = 1
TP_STATUS_KERNEL = 0
TP_STATUS_USER = 1
TP_STATUS_AVAILABLE = 0
TP_STATUS_SEND_REQUEST = 1
TPACKET2_HDR = struct.Struct("IIIHHIIHH4x")  # status, len, snaplen, mac, net, sec, nsec, vlan
# The TX ring reads a frame from the header's aligned end minus sockaddr_ll
# (linux/if_packet.h: TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)).
TX_DATA_OFFSET = 32
FRAME_SLOT = 2048
RING_FRAMES = 1024
MSG_DONTWAIT = 0x40


def netns(name: str, *cmd: str) -> None:
    subprocess.run(["ip", "netns", "exec", name, *cmd], check=True)


def packet_socket(ifname: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((ifname, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
    sock.setblocking(False)
    return sock


def ring(sock: socket.socket, option: int) -> mmap.mmap:
    sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
    block = FRAME_SLOT * 64
    req = struct.pack("IIII", block, RING_FRAMES // 64, FRAME_SLOT, RING_FRAMES)
    sock.setsockopt(SOL_PACKET, option, req)
    return mmap.mmap(sock.fileno(), FRAME_SLOT * RING_FRAMES)


# ----- receivers: each reads every frame there is and returns how many ---------


class Recv:
    name = "recv()"

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def drain(self) -> int:
        n = 0
        recv = self.sock.recv
        while True:
            try:
                frame = recv(2048)
            except BlockingIOError:
                return n
            n += len(frame) > 0


class RecvInto(Recv):
    name = "recv_into()"

    def __init__(self, sock: socket.socket):
        super().__init__(sock)
        self.buf = bytearray(2048)
        self.view = memoryview(self.buf)

    def drain(self) -> int:
        n = 0
        recv_into = self.sock.recv_into
        view = self.view
        while True:
            try:
                size = recv_into(view)
            except BlockingIOError:
                return n
            frame = bytes(view[:size])
            n += len(frame) > 0


class RxRing(Recv):
    name = "PACKET_RX_RING v2"

    def __init__(self, sock: socket.socket):
        super().__init__(sock)
        self.map = ring(sock, PACKET_RX_RING)
        self.slot = 0

    def drain(self) -> int:
        n = 0
        m = self.map
        unpack = TPACKET2_HDR.unpack_from
        slot = self.slot
        while True:
            base = slot * FRAME_SLOT
            status, length, snaplen, mac, *_ = unpack(m, base)
            if not status & TP_STATUS_USER:
                break
            frame = m[base + mac : base + mac + snaplen]
            m[base : base + 4] = b"\0\0\0\0"  # back to the kernel
            n += len(frame) > 0
            slot = (slot + 1) % RING_FRAMES
        self.slot = slot
        return n


# ----- senders: each sends the batch of frames ---------------------------------


class Send:
    name = "send()"

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, frames: list[bytes]) -> None:
        send = self.sock.send
        for frame in frames:
            send(frame)


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(IoVec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]


class SendMmsg(Send):
    """sendmmsg(2) of the batch; frames copied into one preallocated buffer."""

    name = "sendmmsg() via ctypes"

    def __init__(self, sock: socket.socket, batch: int):
        super().__init__(sock)
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.buf = ctypes.create_string_buffer(FRAME_SLOT * batch)
        self.iov = (IoVec * batch)()
        self.msgs = (MMsgHdr * batch)()
        base = ctypes.addressof(self.buf)
        for i in range(batch):
            self.iov[i].base = base + i * FRAME_SLOT
            self.msgs[i].hdr.iov = ctypes.pointer(self.iov[i])
            self.msgs[i].hdr.iovlen = 1
        self.view = memoryview(self.buf).cast("B")
        self.fd = sock.fileno()

    def send(self, frames: list[bytes]) -> None:
        view, iov = self.view, self.iov
        for i, frame in enumerate(frames):
            off = i * FRAME_SLOT
            view[off : off + len(frame)] = frame
            iov[i].len = len(frame)
        sent = self.libc.sendmmsg(self.fd, self.msgs, len(frames), 0)
        if sent != len(frames):
            raise OSError(ctypes.get_errno(), f"sendmmsg sent {sent} of {len(frames)}")


class TxRing(Send):
    name = "PACKET_TX_RING v2"

    def __init__(self, sock: socket.socket):
        super().__init__(sock)
        self.map = ring(sock, PACKET_TX_RING)
        self.slot = 0

    def send(self, frames: list[bytes]) -> None:
        m = self.map
        slot = self.slot
        pack = struct.pack_into
        for frame in frames:
            base = slot * FRAME_SLOT
            size = len(frame)
            m[base + TX_DATA_OFFSET : base + TX_DATA_OFFSET + size] = frame
            pack("III", m, base, TP_STATUS_SEND_REQUEST, size, size)
            slot = (slot + 1) % RING_FRAMES
        self.slot = slot
        self.sock.send(b"")


def measure(sender, receiver, frames: list[bytes], rounds: int) -> tuple[float, float, int]:
    """CPU per frame (send side, receive side) and frames received."""
    received = 0
    send_cpu = recv_cpu = 0.0
    clock = time.thread_time
    for _ in range(rounds):
        t0 = clock()
        sender.send(frames)
        t1 = clock()
        got = 0
        deadline = time.monotonic() + 1.0
        while got < len(frames) and time.monotonic() < deadline:
            got += receiver.drain()
        t2 = clock()
        received += got
        send_cpu += t1 - t0
        recv_cpu += t2 - t1
    total = rounds * len(frames)
    return send_cpu / total * 1e6, recv_cpu / received * 1e6 if received else 0.0, received


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=200_000, help="frames per case")
    ap.add_argument("--batch", type=int, default=32, help="frames sent per round")
    ap.add_argument("--sizes", default="64,1514", help="frame sizes in bytes")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside:
        return run_cases(args)
    if os.geteuid() != 0:
        sys.exit("socket_paths: needs root (it makes a network namespace and a veth pair)")
    ns = f"emu-bench-sock-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        netns(ns, "ip", "link", "add", "tx0", "type", "veth", "peer", "name", "rx0")
        for dev in ("tx0", "rx0"):
            netns(ns, "ip", "link", "set", dev, "up")
        # The measuring runs inside the namespace (os.setns is Python 3.12+).
        return subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, __file__, "--inside", *sys.argv[1:]],
            check=False,
        ).returncode
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def run_cases(args) -> int:
    """Print one table row per (size, send way, receive way); runs inside the namespace."""
    print(f"# {platform.node()} {platform.release()} Python {platform.python_version()}")
    print(f"# {args.frames} frames per case, batches of {args.batch}")
    print("| frame bytes | send | receive | send CPU us/frame | receive CPU us/frame | sum |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    rounds = args.frames // args.batch
    for size in (int(s) for s in args.sizes.split(",")):
        dst, src = b"\x02\x00\x00\x00\x00\x02", b"\x02\x00\x00\x00\x00\x01"
        frame = dst + src + b"\x08\x00" + bytes(size - 14)
        frames = [frame] * args.batch
        for send_kind in (Send, SendMmsg, TxRing):
            for recv_kind in (Recv, RecvInto, RxRing):
                tx, rx = packet_socket("tx0"), packet_socket("rx0")
                try:
                    sender = send_kind(tx, args.batch) if send_kind is SendMmsg else send_kind(tx)
                    receiver = recv_kind(rx)
                    measure(sender, receiver, frames, max(1, rounds // 20))  # warm up
                    s, r, got = measure(sender, receiver, frames, rounds)
                finally:
                    tx.close()
                    rx.close()
                lost = f" ({rounds * args.batch - got} lost)" if got < rounds * args.batch else ""
                print(
                    f"| {size} | {sender.name} | {receiver.name}{lost} | {s:.2f} | {r:.2f} | {s + r:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

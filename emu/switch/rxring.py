"""A switch port's receive ring: frames read from a PACKET_RX_RING, tags and all.

Owns how the datapath reads a port: a TPACKET_V2 ring mapped into the
process, one slot per frame, each handed back to the kernel as soon as it is
copied out. Two reasons for a ring over recv():

- VLAN tags. The kernel's receive path takes an 802.1Q or 802.1ad tag out of
  every frame into metadata (skb_vlan_untag, whatever the offloads say), so
  recv() returns the frame untagged and a switch could neither match
  vlan_vid nor forward a tagged frame tagged. The ring's frame header carries
  the tag (tp_vlan_tci, tp_vlan_tpid) and `read` puts it back where it was.
  recvmsg() with PACKET_AUXDATA would do the same at +1.4 us per frame.
- Cost. No system call per frame: 0.3 us against 0.85 us for recv()
  (bench/socket_paths.py, docs/performance.md).

TPACKET_V2, not V3: V3 hands frames out a block at a time and keeps a frame
until its block is full or its timer (milliseconds) fires, which a port at
10 Mbit/s (a frame per 1.2 ms) cannot wait.

A frame longer than a slot (a jumbo frame on a port sized for 1500 bytes)
is copied to the socket's queue as well (PACKET_COPY_THRESH, TP_STATUS_COPY)
and read from there whole.
"""

from __future__ import annotations

import mmap
import socket
import struct

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_COPY_THRESH = 7
PACKET_VERSION = 10
TPACKET_V2 = 1
TP_STATUS_USER = 0x1
TP_STATUS_COPY = 0x2
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
PACKET_OUTGOING = 4
ETH_P_8021Q = 0x8100
# struct tpacket2_hdr: status, len, snaplen, mac, net, sec, nsec, vlan_tci, vlan_tpid.
_HDR = struct.Struct("IIIHHIIHH")
# struct sockaddr_ll follows the header (TPACKET_ALIGN(32)); sll_pkttype is its byte 10.
_PKTTYPE_AT = 32 + 10
# Slot overhead: the header and sockaddr_ll, aligned, before the frame (TPACKET2_HDRLEN).
_SLOT_OVERHEAD = 64
_BLOCK_BYTES = 1 << 16
_EMPTY_STATUS = b"\0\0\0\0"


def slot_bytes_for(max_frame: int) -> int:
    """The power-of-two slot that holds a frame of `max_frame` bytes plus its header."""
    size = 2048
    while size < max_frame + _SLOT_OVERHEAD:
        size *= 2
    return size


class RxRing:
    """The receive ring of one AF_PACKET socket (bound, not yet reading).

    Args:
        sock: the port's socket; it keeps serving send() and PACKET_STATISTICS.
        max_frame: the longest frame expected in a slot (the port's MTU plus
            Ethernet header and a tag); longer frames still arrive whole.
        frames: slots in the ring: how many frames wait in the kernel before it
            drops (PACKET_STATISTICS counts those drops).
        skip_outgoing: drop frames this host sent (kernels without
            PACKET_IGNORE_OUTGOING deliver them to the socket too).
    """

    def __init__(
        self, sock: socket.socket, max_frame: int, frames: int, skip_outgoing: bool = False
    ) -> None:
        self.sock = sock
        self.slot_bytes = slot_bytes_for(max_frame)
        per_block = max(1, _BLOCK_BYTES // self.slot_bytes)
        block_bytes = per_block * self.slot_bytes
        blocks = max(1, -(-frames // per_block))
        self.frames = blocks * per_block
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        sock.setsockopt(SOL_PACKET, PACKET_COPY_THRESH, 1)
        req = struct.pack("IIII", block_bytes, blocks, self.slot_bytes, self.frames)
        sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)
        self.map = mmap.mmap(sock.fileno(), block_bytes * blocks)
        self.skip_outgoing = skip_outgoing
        self.slot = 0
        self.truncated = 0

    def read(self) -> bytes | None:
        """The next frame as it was on the wire, or None when the ring is empty."""
        m = self.map
        while True:
            base = self.slot * self.slot_bytes
            status, length, snaplen, mac, _net, _s, _ns, tci, tpid = _HDR.unpack_from(m, base)
            if not status & TP_STATUS_USER:
                return None
            if status & TP_STATUS_COPY:
                frame = self._copied(length, m[base + mac : base + mac + snaplen])
            else:
                frame = m[base + mac : base + mac + snaplen]
            outgoing = self.skip_outgoing and m[base + _PKTTYPE_AT] == PACKET_OUTGOING
            m[base : base + 4] = _EMPTY_STATUS  # the slot is the kernel's again
            self.slot = self.slot + 1 if self.slot + 1 < self.frames else 0
            if outgoing:
                continue
            if status & TP_STATUS_VLAN_VALID:
                if not (status & TP_STATUS_VLAN_TPID_VALID and tpid):
                    tpid = ETH_P_8021Q
                frame = frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]
            return frame

    def _copied(self, length: int, head: bytes) -> bytes:
        """A frame too long for its slot: the whole copy the kernel queued on the socket."""
        try:
            frame = self.sock.recv(length + 64)
        except OSError:
            frame = b""
        if len(frame) < length:
            self.truncated += 1  # the queue was full: keep what the slot holds
            return head
        return frame

    def close(self) -> None:
        self.map.close()

"""The SHARP-like aggregation packet: where an aggregation frame is built and read.

Owns the wire format that hosts and switch reduction engines exchange for
in-network all-reduce (emu/switch/aggregation.py reduces, emu/host/sharp.py
sends and receives, controllers/aggregation.py steers) as a struct-patched
template plus a checked parser for the hot paths. Its Scapy layer, for tests,
reports and Wireshark-style dissection, is `emu.proto.layers.AggHeader`.

Frame::

    Ethernet / IPv4 (DSCP 26: the lossless RoCE class, ECT(0)) / UDP dport 4792 /
    AggHeader (16 bytes, network byte order) / count elements (4 bytes each,
    network byte order)

    uint8  version   1
    uint8  kind      0 CONTRIB: a host's contribution, or a switch's partial
                     sum on its way up the tree; 1 RESULT: the reduced chunk on
                     its way down from the root
    uint8  dtype     0 int32, 1 float32 (the sum's element type)
    uint8  flags     0 (reserved)
    uint16 job_id    the job the aggregation manager registered
    uint16 slot      seq mod the job's slot count (checked by the switch)
    uint32 seq       the chunk's index in the job's stream of chunks
    uint16 count     elements in the payload, 1..256
    uint16 rank      the sending host's rank (0xFFFF from a switch)

A job has a bounded number of slots (SwitchML): a host keeps at most that many
chunks outstanding and sends chunk seq + slots only after the result of seq
came back, so a switch may recycle a slot as soon as a higher seq arrives for
it and keeps the last result there for retransmissions. Chunks of 256
elements (1 KiB) fill one RoCE MTU, as SwitchML's packets do.

UDP checksum is 0 (allowed over IPv4): the engine rewrites payloads in place,
and the Ethernet FCS covers the frame on a real wire.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

import numpy as np

from emu.proto import headers
from emu.proto.ofext import AGG_UDP_PORT

AGG_VERSION = 1
KIND_CONTRIB = 0
KIND_RESULT = 1
KIND_NAMES = {KIND_CONTRIB: "contrib", KIND_RESULT: "result"}
DTYPE_INT32 = 0
DTYPE_FLOAT32 = 1
#: Element types on the wire (network byte order) by header code.
WIRE_DTYPES = {DTYPE_INT32: np.dtype(">i4"), DTYPE_FLOAT32: np.dtype(">f4")}
DTYPE_CODES = {"int32": DTYPE_INT32, "float32": DTYPE_FLOAT32}
MAX_ELEMENTS = 256  # SwitchML: about 256 elements per packet (DESIGN.md defaults)
ELEMENT_BYTES = 4
RANK_SWITCH = 0xFFFF
AGG_DSCP = 26  # the lossless class (DESIGN.md: DSCP 26 -> priority 3)

HEADER = struct.Struct("!BBBBHHIHH")
HEADER_BYTES = HEADER.size  # 16
_ETH_BYTES = 14
_IP_BYTES = 20
_UDP_BYTES = 8
PAYLOAD_OFFSET = _ETH_BYTES + _IP_BYTES + _UDP_BYTES + HEADER_BYTES
_UDP = struct.Struct("!HHHH")


class MalformedAgg(ValueError):
    """A frame addressed to the aggregation port whose header or payload is wrong."""


class AggPacket(NamedTuple):
    """A parsed aggregation frame; `payload` is the elements' bytes (network order)."""

    kind: int
    dtype: int
    job_id: int
    slot: int
    seq: int
    count: int
    rank: int
    src_mac: str
    src_ip: str
    dst_ip: str
    payload: bytes

    def array(self) -> np.ndarray:
        """The elements as a numpy array (read-only view, network byte order)."""
        return np.frombuffer(self.payload, dtype=WIRE_DTYPES[self.dtype])


def is_agg(frame: bytes) -> bool:
    """True for an IPv4/UDP frame to the aggregation port (a cheap test before `parse`)."""
    return (
        len(frame) >= _ETH_BYTES + _IP_BYTES + _UDP_BYTES
        and frame[12:14] == b"\x08\x00"
        and frame[23] == 17
        and frame[14] == 0x45
        and frame[36:38] == b"\x12\xb8"
    )  # 4792


def parse(frame: bytes) -> AggPacket | None:
    """Decode an aggregation frame; None if the frame is not for the aggregation port.

    Raises MalformedAgg, naming the field, for a frame that is for the port but
    whose header or payload is wrong. Never raises anything else.
    """
    if not is_agg(frame):
        return None
    ip_len = struct.unpack_from("!H", frame, 16)[0]
    if _ETH_BYTES + ip_len > len(frame):
        raise MalformedAgg(f"IPv4 total length {ip_len} exceeds the frame ({len(frame)} bytes)")
    udp_len = _UDP.unpack_from(frame, _ETH_BYTES + _IP_BYTES)[2]
    if udp_len != ip_len - _IP_BYTES:
        raise MalformedAgg(f"UDP length {udp_len} does not match IPv4 length {ip_len}")
    end = _ETH_BYTES + ip_len
    if end < PAYLOAD_OFFSET:
        raise MalformedAgg(
            f"{end - PAYLOAD_OFFSET + HEADER_BYTES} header bytes, need {HEADER_BYTES}"
        )
    version, kind, dtype, _flags, job_id, slot, seq, count, rank = HEADER.unpack_from(
        frame, PAYLOAD_OFFSET - HEADER_BYTES
    )
    if version != AGG_VERSION:
        raise MalformedAgg(f"version {version}, expected {AGG_VERSION}")
    if kind not in KIND_NAMES:
        raise MalformedAgg(f"kind {kind} unknown")
    if dtype not in WIRE_DTYPES:
        raise MalformedAgg(f"dtype {dtype} unknown")
    if not 1 <= count <= MAX_ELEMENTS:
        raise MalformedAgg(f"count {count} outside 1..{MAX_ELEMENTS}")
    if end - PAYLOAD_OFFSET != count * ELEMENT_BYTES:
        raise MalformedAgg(
            f"payload is {end - PAYLOAD_OFFSET} bytes, count {count} needs {count * ELEMENT_BYTES}"
        )
    return AggPacket(
        kind,
        dtype,
        job_id,
        slot,
        seq,
        count,
        rank,
        frame[6:12].hex(":"),
        socket.inet_ntoa(frame[26:30]),
        socket.inet_ntoa(frame[30:34]),
        bytes(frame[PAYLOAD_OFFSET:end]),
    )


class AggTemplate:
    """Aggregation frames from one sender to one destination, built once.

    `frame()` patches the IPv4 length and checksum, the UDP length and the
    header; it costs a few microseconds.
    """

    def __init__(
        self,
        src_mac: str,
        dst_mac: str,
        src_ip: str,
        dst_ip: str,
        udp_sport: int = AGG_UDP_PORT,
        dscp: int = AGG_DSCP,
    ) -> None:
        head = headers.eth_ipv4_udp(
            src_mac, dst_mac, src_ip, dst_ip, dscp << 2 | 0b10, udp_sport, AGG_UDP_PORT
        )
        self._eth = head[:_ETH_BYTES]
        self._ip = bytearray(head[_ETH_BYTES : _ETH_BYTES + _IP_BYTES])
        self._udp_ports = head[_ETH_BYTES + _IP_BYTES : _ETH_BYTES + _IP_BYTES + 4]

    def frame(
        self,
        kind: int,
        dtype: int,
        job_id: int,
        seq: int,
        slot: int,
        payload: bytes,
        rank: int = RANK_SWITCH,
    ) -> bytes:
        """One frame carrying `payload` (count x 4 bytes, network byte order)."""
        count, rest = divmod(len(payload), ELEMENT_BYTES)
        if rest or not 1 <= count <= MAX_ELEMENTS:
            raise ValueError(
                f"payload of {len(payload)} bytes: need 4..{MAX_ELEMENTS * 4} "
                "bytes in whole elements"
            )
        udp_len = _UDP_BYTES + HEADER_BYTES + len(payload)
        ip = self._ip
        struct.pack_into("!H", ip, 2, _IP_BYTES + udp_len)
        struct.pack_into("!H", ip, 10, 0)
        struct.pack_into("!H", ip, 10, headers.ipv4_checksum(bytes(ip)))
        return b"".join(
            (
                self._eth,
                ip,
                self._udp_ports,
                struct.pack("!HH", udp_len, 0),
                HEADER.pack(AGG_VERSION, kind, dtype, 0, job_id, slot, seq, count, rank),
                payload,
            )
        )


def retarget(
    frame: bytes,
    dst_mac: str | None = None,
    dst_ip: str | None = None,
    src_mac: str | None = None,
    kind: int | None = None,
    rank: int | None = None,
    payload: bytes | None = None,
) -> bytes:
    """A copy of an aggregation frame with addresses, kind, rank or payload replaced.

    The payload must keep its length (a partial sum has the same count); the IPv4
    checksum is recomputed when the destination changes.
    """
    out = bytearray(frame)
    if dst_mac is not None:
        out[0:6] = bytes.fromhex(dst_mac.replace(":", ""))
    if src_mac is not None:
        out[6:12] = bytes.fromhex(src_mac.replace(":", ""))
    if dst_ip is not None:
        out[30:34] = socket.inet_aton(dst_ip)
        struct.pack_into("!H", out, 24, 0)
        struct.pack_into("!H", out, 24, headers.ipv4_checksum(bytes(out[14:34])))
    if kind is not None:
        out[PAYLOAD_OFFSET - HEADER_BYTES + 1] = kind
    if rank is not None:
        struct.pack_into("!H", out, PAYLOAD_OFFSET - 2, rank)
    if payload is not None:
        end = PAYLOAD_OFFSET + len(payload)
        if end > len(out):
            raise ValueError("retarget: the new payload is longer than the old one")
        out[PAYLOAD_OFFSET:end] = payload
    return bytes(out)


def chunk_count(nbytes: int) -> int:
    """Chunks (packets) of at most MAX_ELEMENTS elements that `nbytes` of data take."""
    elements = -(-nbytes // ELEMENT_BYTES)
    return -(-elements // MAX_ELEMENTS)

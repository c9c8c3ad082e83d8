"""RoCEv2 frames: where an RDMA data packet, ACK/NAK or CNP is built and read.

Owns the wire format of the RoCEv2 subset that emu's NIC model speaks
(Ethernet / IPv4 / UDP 4791 / InfiniBand BTH [/ RETH | AETH | CNP padding] /
payload / ICRC), the ICRC, and 24-bit PSN arithmetic. Does not own the
transport (PSN windows, go-back-N, timers: `emu/host/rnic.py`), congestion
control (DCQCN) or the switch's header rewrites (`emu/switch/parse.py`).

Callers: the host NIC model builds frames with a `DataTemplate` per queue
pair and reads them with `parse`; tests and reports dissect with Scapy
(`emu.proto.layers`: `scapy.contrib.roce` plus a `RETH` layer) or tshark.

Headers are built once with `emu.proto.headers`; per packet only the IPv4 total length and
checksum, the UDP length, the BTH and the ICRC are packed with `struct` and
`zlib.crc32`. The ICRC (IBA Annex A17.3.3) is a CRC-32 over 8 bytes of 0xFF
(the masked LRH/GRH stand-in), the IPv4 header with tos, ttl and checksum set
to all ones, the UDP header with checksum set to all ones, the BTH with its
FECN/BECN/reserved byte set to all ones, the payload and pad bytes. It is
stored least significant byte first, as Linux rxe and Scapy do. Because tos
and ttl are masked, a switch that marks ECN CE or decrements the TTL only
fixes the IPv4 checksum (`emu.switch.rewrite.set_ip_ecn`).

The UDP checksum is 0 (allowed for RoCEv2 over IPv4). A frame carries either
the caller's bytes (`DataTemplate.frame(..., payload=...)`: collectives move
real data) or, when only a length is given, a fixed pattern (0, 1, ..., 255,
0, ...): most workloads model how many bytes cross, not their content.
`parse` says where the payload starts (`RoceInfo.payload_offset`) and
`payload(frame, info)` cuts it out. Payloads are padded to a multiple of 4
bytes and the BTH pad count says how many pad bytes follow (IBA 9.2.4).
"""

from __future__ import annotations

import socket
import struct
import zlib
from typing import NamedTuple

from emu.proto import headers

ROCEV2_UDP_PORT = 4791

# BTH opcodes, reliable connection (IBA table 38); the CNP opcode (RoCEv2 Annex A17.9.2).
SEND_FIRST = 0x00
SEND_MIDDLE = 0x01
SEND_LAST = 0x02
SEND_ONLY = 0x04
RDMA_WRITE_FIRST = 0x06
RDMA_WRITE_MIDDLE = 0x07
RDMA_WRITE_LAST = 0x08
RDMA_WRITE_ONLY = 0x0A
ACKNOWLEDGE = 0x11
CNP = 0x81

# AETH syndrome (IBA 9.3.5): bits 6-5 are the kind, bits 4-0 the credit count,
# the RNR timer or the NAK code.
AETH_ACK = 0x00  # | credit count
AETH_RNR_NAK = 0x20  # | RNR timer
AETH_NAK = 0x60  # | NAK code
AETH_NAK_PSN_SEQ_ERROR = 0x60
AETH_NAK_INVALID_REQUEST = 0x61
AETH_NAK_REMOTE_ACCESS_ERROR = 0x62
AETH_NAK_REMOTE_OP_ERROR = 0x63
AETH_CREDIT_INVALID = 0x1F  # "no credit information": end-to-end flow control off
AETH_KIND_MASK = 0x60

# DESIGN.md conventions: data on DSCP 26 (priority 3, lossless), CNPs on DSCP 48.
DSCP_DATA = 26
DSCP_CNP = 48
# RFC 3168 ECN codepoints.
ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3

PSN_MASK = 0xFFFFFF
PSN_HALF = 1 << 23
DEFAULT_PKEY = 0xFFFF

BTH_BYTES = 12
RETH_BYTES = 16
AETH_BYTES = 4
CNP_PAD_BYTES = 16
ICRC_BYTES = 4
_ETH_BYTES = 14
_IP_BYTES = 20
_UDP_BYTES = 8
_HDR_BYTES = _ETH_BYTES + _IP_BYTES + _UDP_BYTES  # up to the BTH
MAX_PAYLOAD_BYTES = 9216  # largest payload a template builds (jumbo MTU)
# A CNP on the wire: Ethernet, IPv4, UDP, BTH, 16 pad bytes, ICRC.
CNP_FRAME_BYTES = _HDR_BYTES + BTH_BYTES + CNP_PAD_BYTES + ICRC_BYTES


def data_frame_bytes(payload: int) -> int:
    """A SEND (or middle/last WRITE) frame's length on the wire: Ethernet, IPv4, UDP, BTH,
    `payload` padded to 4 bytes, ICRC; the one place the models and workloads take a RoCEv2
    frame's size from (a full 1024-byte MTU: 1082 bytes)."""
    return _HDR_BYTES + BTH_BYTES + payload + (-payload % 4) + ICRC_BYTES


_EXT_BYTES = {
    RDMA_WRITE_FIRST: RETH_BYTES,
    RDMA_WRITE_ONLY: RETH_BYTES,
    ACKNOWLEDGE: AETH_BYTES,
    CNP: CNP_PAD_BYTES,
}
_RETH_OPCODES = frozenset((RDMA_WRITE_FIRST, RDMA_WRITE_ONLY))

_H = struct.Struct("!H")
_BTH = struct.Struct("!BBHII")  # opcode, se/m/padcnt/tver, pkey, fecn/becn/dqpn, a/psn
_RETH = struct.Struct("!QII")
_AETH = struct.Struct("!I")
_ICRC = struct.Struct("<I")
_PAYLOAD = bytes(range(256)) * (MAX_PAYLOAD_BYTES // 256)
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_BECN = 1 << 30


def psn_add(psn: int, n: int) -> int:
    """`psn` advanced by `n` (which may be negative), modulo 2**24.

    Examples:
        >>> psn_add(0xFFFFFF, 2)
        1
    """
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b between two PSNs, in [-2**23, 2**23).

    PSNs wrap at 2**24; as in IBA 9.7.5, `a` is after `b` when it lies less
    than half the PSN space ahead, so `psn_diff(a, b) > 0` means "a is newer".

    Examples:
        >>> psn_diff(1, 0xFFFFFF)
        2
        >>> psn_diff(0xFFFFFF, 1)
        -2
    """
    return ((a - b + PSN_HALF) & PSN_MASK) - PSN_HALF


def _ones_sum(data: bytes) -> int:
    return sum(struct.unpack("!%dH" % (len(data) // 2), data))


def _fold(s: int) -> int:
    s = (s & 0xFFFF) + (s >> 16)
    return (s & 0xFFFF) + (s >> 16)


class _Header:
    """One Ether/IPv4/UDP header (and the BTH after it), cut into constant pieces.

    Per frame, `pack` fills in the IPv4 total length and checksum, the UDP
    length and the BTH; `crc` starts the ICRC over the masked headers.
    """

    def __init__(
        self,
        src_mac: str,
        dst_mac: str,
        src_ip: str,
        dst_ip: str,
        udp_sport: int,
        dscp: int,
        ecn: int,
        becn: bool = False,
    ) -> None:
        raw = headers.eth_ipv4_udp(
            src_mac, dst_mac, src_ip, dst_ip, dscp << 2 | ecn, udp_sport, ROCEV2_UDP_PORT
        )
        ip = bytearray(raw[_ETH_BYTES : _ETH_BYTES + _IP_BYTES])
        ip[2:4] = b"\0\0"
        ip[10:12] = b"\0\0"
        self._ip_sum = _ones_sum(bytes(ip))  # checksum of the header, total length 0
        self._head = raw[:16]  # Ethernet, IPv4 version/ihl/tos
        self._mid = raw[18:24]  # IPv4 id, flags, ttl, proto
        self._tail = raw[26:38]  # IPv4 addresses, UDP ports
        masked = bytearray(raw[_ETH_BYTES:])
        masked[1] = 0xFF  # tos
        masked[8] = 0xFF  # ttl
        masked[10:12] = b"\xff\xff"  # IPv4 checksum
        masked[26:28] = b"\xff\xff"  # UDP checksum
        self._m_head = b"\xff" * 8 + bytes(masked[:2])
        self._m_mid = bytes(masked[4:24])
        self._becn = _BECN if becn else 0

    def pack(
        self, udp_len: int, opcode: int, flags: int, dqpn: int, apsn: int
    ) -> tuple[bytes, int]:
        """(frame header up to and including the BTH, ICRC over its masked form)."""
        ip_len = udp_len + _IP_BYTES
        tot = _H.pack(ip_len)
        ulen = _H.pack(udp_len)
        csum = _H.pack(~_fold(self._ip_sum + ip_len) & 0xFFFF)
        hdr = (
            self._head
            + tot
            + self._mid
            + csum
            + self._tail
            + ulen
            + b"\0\0"
            + _BTH.pack(opcode, flags, DEFAULT_PKEY, self._becn | dqpn, apsn)
        )
        crc = zlib.crc32(
            self._m_head
            + tot
            + self._m_mid
            + ulen
            + b"\xff\xff"
            + _BTH.pack(opcode, flags, DEFAULT_PKEY, 0xFF000000 | dqpn, apsn)
        )
        return hdr, crc


class DataTemplate:
    """Frames from one queue pair to its peer: data, ACK/NAK and CNP.

    Built once per connection end; each frame costs a few `struct`
    packs and one `zlib.crc32`. Data and ACKs carry `dscp`/`ecn`; CNPs carry
    `cnp_dscp` and ECN not-ECT (RoCEv2 Annex A17.9.2, DESIGN.md conventions).
    All three go to `dest_qp` at `dst_ip`: the peer's QP, which is also the
    flow a CNP notifies.

    Args:
        src_mac, dst_mac: Ethernet addresses ("02:00:00:00:00:01").
        src_ip, dst_ip: IPv4 addresses in dotted form.
        udp_sport: UDP source port (RoCEv2 varies it per QP for ECMP entropy).
        dest_qp: the peer's queue pair number (24 bits).
        dscp, ecn: the IPv4 DSCP and ECN codepoint of data and ACK frames.
        cnp_dscp: the DSCP of CNPs.

    Raises:
        ValueError: a field out of range.

    Examples:
        >>> t = DataTemplate("02:00:00:00:00:01", "02:00:00:00:00:02",
        ...                  "10.0.0.1", "10.0.0.2", 49152, dest_qp=0x11)
        >>> f = t.frame(SEND_ONLY, psn=7, payload_len=1024, ack_req=True)
        >>> info = parse(f, verify_icrc=True)
        >>> (info.opcode, info.psn, info.payload_len, info.ok)
        (4, 7, 1024, True)
    """

    def __init__(
        self,
        src_mac: str,
        dst_mac: str,
        src_ip: str,
        dst_ip: str,
        udp_sport: int,
        dest_qp: int,
        dscp: int = DSCP_DATA,
        ecn: int = ECN_ECT0,
        cnp_dscp: int = DSCP_CNP,
    ) -> None:
        for name, value, top in (
            ("udp_sport", udp_sport, 0xFFFF),
            ("dest_qp", dest_qp, PSN_MASK),
            ("dscp", dscp, 63),
            ("ecn", ecn, 3),
            ("cnp_dscp", cnp_dscp, 63),
        ):
            if not 0 <= value <= top:
                raise ValueError(f"{name}={value!r}: allowed 0..{top}")
        self.dest_qp = dest_qp
        self._data = _Header(src_mac, dst_mac, src_ip, dst_ip, udp_sport, dscp, ecn)
        self._cnp = _Header(
            src_mac, dst_mac, src_ip, dst_ip, udp_sport, cnp_dscp, ECN_NOT_ECT, becn=True
        )

    def frame(
        self,
        opcode: int,
        psn: int,
        payload_len: int | None = None,
        ack_req: bool = False,
        reth: tuple[int, int, int] | None = None,
        payload: bytes | bytearray | memoryview | None = None,
    ) -> bytes:
        """A data frame (SEND/RDMA WRITE) carrying `payload`, or `payload_len` pattern bytes.

        Args:
            opcode: a BTH opcode (SEND_* or RDMA_WRITE_*).
            psn: packet sequence number (taken modulo 2**24).
            payload_len: payload bytes, 0..MAX_PAYLOAD_BYTES, of the fixed
                pattern; padded to a multiple of 4 on the wire, with the BTH
                pad count set. May be omitted when `payload` is given (if
                given too, it must equal `len(payload)`).
            ack_req: the BTH AckReq bit (ask the responder for an ACK now).
            reth: (va, rkey, dma_len) for RDMA_WRITE_FIRST/ONLY; required
                exactly for those opcodes.
            payload: the payload's bytes (a bytes-like object of at most
                MAX_PAYLOAD_BYTES bytes; a memoryview must be contiguous).

        Returns:
            The Ethernet frame, ICRC included (no FCS).

        Raises:
            ValueError: a payload too long, lengths that disagree, neither a
                length nor a payload, or a RETH missing or unexpected.

        Examples:
            >>> t = DataTemplate("02:00:00:00:00:01", "02:00:00:00:00:02",
            ...                  "10.0.0.1", "10.0.0.2", 49152, dest_qp=0x11)
            >>> f = t.frame(SEND_MIDDLE, psn=8, payload=b"hello")
            >>> info = parse(f, verify_icrc=True)
            >>> bytes(payload(f, info)), info.payload_len, info.ok
            (b'hello', 5, True)
        """
        if payload is not None:
            n = payload.nbytes if isinstance(payload, memoryview) else len(payload)
            if payload_len is not None and payload_len != n:
                raise ValueError(f"payload_len={payload_len!r} but the payload has {n} bytes")
            payload_len = n
        elif payload_len is None:
            raise ValueError("give payload_len (pattern bytes) or payload (the bytes)")
        if not 0 <= payload_len <= MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload_len={payload_len!r}: allowed 0..{MAX_PAYLOAD_BYTES}")
        if (reth is not None) != (opcode in _RETH_OPCODES):
            raise ValueError(
                f"opcode={opcode:#x} with reth={reth!r}: a RETH goes exactly "
                "with RDMA_WRITE_FIRST and RDMA_WRITE_ONLY"
            )
        pad = -payload_len & 3
        if payload is None:
            body = _PAYLOAD[:payload_len] + _PADS[pad]
        else:
            body = bytes(payload) + _PADS[pad]
        if reth is not None:
            body = _RETH.pack(*reth) + body
        hdr, crc = self._data.pack(
            _UDP_BYTES + BTH_BYTES + ICRC_BYTES + len(body),
            opcode,
            pad << 4,
            self.dest_qp,
            (psn & PSN_MASK) | (0x80000000 if ack_req else 0),
        )
        return hdr + body + _ICRC.pack(zlib.crc32(body, crc))

    def ack_frame(
        self, psn: int, msn: int, syndrome: int = AETH_ACK | AETH_CREDIT_INVALID
    ) -> bytes:
        """An ACKNOWLEDGE with AETH: ACK (default), NAK or RNR NAK.

        Args:
            psn: for an ACK, the PSN acknowledged (all up to it received); for
                a NAK PSN sequence error, the PSN expected next.
            msn: message sequence number: messages completed at the responder.
            syndrome: AETH syndrome, e.g. AETH_ACK | credit, AETH_NAK_PSN_SEQ_ERROR.
        """
        aeth = _AETH.pack((syndrome & 0xFF) << 24 | (msn & PSN_MASK))
        hdr, crc = self._data.pack(
            _UDP_BYTES + BTH_BYTES + AETH_BYTES + ICRC_BYTES,
            ACKNOWLEDGE,
            0,
            self.dest_qp,
            psn & PSN_MASK,
        )
        return hdr + aeth + _ICRC.pack(zlib.crc32(aeth, crc))

    def nak_frame(self, expected_psn: int, msn: int) -> bytes:
        """A NAK PSN sequence error: the responder expected `expected_psn`."""
        return self.ack_frame(expected_psn, msn, AETH_NAK_PSN_SEQ_ERROR)

    def cnp_frame(self) -> bytes:
        """A RoCEv2 CNP to `dest_qp`: BECN set, 16 zero bytes, DSCP `cnp_dscp`, not-ECT."""
        pad = bytes(CNP_PAD_BYTES)
        hdr, crc = self._cnp.pack(
            _UDP_BYTES + BTH_BYTES + CNP_PAD_BYTES + ICRC_BYTES, CNP, 0, self.dest_qp, 0
        )
        return hdr + pad + _ICRC.pack(zlib.crc32(pad, crc))


def ack_frame(
    tmpl: DataTemplate, psn: int, msn: int, syndrome: int = AETH_ACK | AETH_CREDIT_INVALID
) -> bytes:
    """`tmpl.ack_frame(psn, msn, syndrome)`."""
    return tmpl.ack_frame(psn, msn, syndrome)


def cnp_frame(tmpl: DataTemplate) -> bytes:
    """`tmpl.cnp_frame()`."""
    return tmpl.cnp_frame()


class RoceInfo(NamedTuple):
    """A decoded RoCEv2 frame.

    Addresses are strings as the template takes them ("02:00:00:00:00:01",
    "10.0.0.1"). `syndrome`/`msn` are set for ACKNOWLEDGE only, `reth` as
    (va, rkey, dma_len) for RDMA_WRITE_FIRST/ONLY only. `payload_len` excludes
    extension headers, pad bytes and ICRC; the payload is
    `frame[payload_offset:payload_offset + payload_len]` (see `payload`). `ok`
    is the ICRC check, None when not verified.
    """

    src_mac: str
    dst_mac: str
    src_ip: str
    dst_ip: str
    udp_sport: int
    dscp: int
    ecn: int
    opcode: int
    dest_qp: int
    psn: int
    ack_req: bool
    becn: bool
    syndrome: int | None
    msn: int | None
    reth: tuple[int, int, int] | None
    payload_len: int
    ok: bool | None
    payload_offset: int = 0


_IPV4_HEAD = struct.Struct("!BBHHHBB")  # ver/ihl, tos, len, id, flags/frag, ttl, proto
_UDP = struct.Struct("!HHHH")
_MIN_FRAME = _HDR_BYTES + BTH_BYTES + ICRC_BYTES


def parse(frame: bytes, verify_icrc: bool = False) -> RoceInfo | None:
    """Decode an Ethernet/IPv4/UDP 4791 RoCEv2 frame; None for anything else.

    Never raises on malformed input: every length is checked first. Trailing
    bytes after the IPv4 datagram (Ethernet padding) are ignored.

    Args:
        frame: the Ethernet frame, no FCS.
        verify_icrc: compute the ICRC and report it in `ok` (costs one CRC).
    """
    n = len(frame)
    if n < _MIN_FRAME or frame[12] != 0x08 or frame[13] != 0x00:
        return None
    vihl, tos, ip_len, _, frag, _, proto = _IPV4_HEAD.unpack_from(frame, _ETH_BYTES)
    ihl = (vihl & 0x0F) * 4
    if vihl >> 4 != 4 or ihl < _IP_BYTES or proto != 17 or frag & 0x3FFF:
        return None
    u = _ETH_BYTES + ihl
    if _ETH_BYTES + ip_len > n or ip_len < ihl + _UDP_BYTES + BTH_BYTES + ICRC_BYTES:
        return None
    sport, dport, udp_len, _ = _UDP.unpack_from(frame, u)
    if dport != ROCEV2_UDP_PORT or udp_len != ip_len - ihl:
        return None
    b = u + _UDP_BYTES
    opcode, flags, _, dqpn, apsn = _BTH.unpack_from(frame, b)
    ext = _EXT_BYTES.get(opcode, 0)
    end = _ETH_BYTES + ip_len - ICRC_BYTES  # first ICRC byte
    x = b + BTH_BYTES
    payload_len = end - x - ext - (flags >> 4 & 3)
    if payload_len < 0:
        return None
    syndrome = msn = reth = None
    if opcode == ACKNOWLEDGE:
        aeth = _AETH.unpack_from(frame, x)[0]
        syndrome, msn = aeth >> 24, aeth & PSN_MASK
    elif opcode in _RETH_OPCODES:
        reth = _RETH.unpack_from(frame, x)
    ok = None
    if verify_icrc:
        masked = bytearray(frame[_ETH_BYTES:x])
        masked[1] = masked[8] = 0xFF
        masked[10:12] = masked[ihl + 6 : ihl + 8] = b"\xff\xff"
        masked[ihl + _UDP_BYTES + 4] = 0xFF
        crc = zlib.crc32(frame[x:end], zlib.crc32(b"\xff" * 8 + masked))
        ok = crc == _ICRC.unpack_from(frame, end)[0]
    return RoceInfo(
        frame[6:12].hex(":"),
        frame[0:6].hex(":"),
        socket.inet_ntoa(frame[26:30]),
        socket.inet_ntoa(frame[30:34]),
        sport,
        tos >> 2,
        tos & 3,
        opcode,
        dqpn & PSN_MASK,
        apsn & PSN_MASK,
        apsn >> 31 == 1,
        dqpn & _BECN != 0,
        syndrome,
        msn,
        reth,
        payload_len,
        ok,
        x + ext,
    )


def payload(frame: bytes, info: RoceInfo) -> memoryview:
    """The payload bytes of `frame` as `parse` decoded it into `info` (no copy).

    Examples:
        >>> t = DataTemplate("02:00:00:00:00:01", "02:00:00:00:00:02",
        ...                  "10.0.0.1", "10.0.0.2", 49152, dest_qp=0x11)
        >>> f = t.frame(RDMA_WRITE_ONLY, psn=1, payload=b"abc", reth=(0, 0, 3))
        >>> bytes(payload(f, parse(f)))
        b'abc'
    """
    return memoryview(frame)[info.payload_offset : info.payload_offset + info.payload_len]


def is_rocev2(frame: bytes) -> bool:
    """Whether `frame` is IPv4/UDP to port 4791 (a cheap test before `parse`).

    Examples:
        >>> t = DataTemplate("02:00:00:00:00:01", "02:00:00:00:00:02",
        ...                  "10.0.0.1", "10.0.0.2", 49152, dest_qp=0x11)
        >>> is_rocev2(t.cnp_frame()), is_rocev2(b"\\xff" * 64)
        (True, False)
    """
    if len(frame) < _HDR_BYTES or frame[12] != 0x08 or frame[13] != 0x00 or frame[23] != 17:
        return False
    u = _ETH_BYTES + (frame[14] & 0x0F) * 4
    return len(frame) >= u + _UDP_BYTES and frame[u + 2] << 8 | frame[u + 3] == ROCEV2_UDP_PORT

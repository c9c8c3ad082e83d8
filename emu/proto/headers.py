"""Ethernet, IPv4 and UDP headers packed with `struct`: the constant part of every frame.

Owns the bytes that the switch and the NIC model put in front of what they
send (PFC frames, RoCEv2, aggregation packets). They are built once per
template and patched per frame by the protocol modules (`pfc`, `roce`,
`agg`). Building them needs no Scapy: a switch or NIC process imports Scapy
for nothing else, and Scapy alone was 48 MiB and a second of CPU in each of
them (`bench/scale.py`). Scapy stays the reference: tests compare these
bytes with Scapy's, and dissect frames with the layers in `emu.proto.layers`.
"""

from __future__ import annotations

import socket
import struct

ETH_BYTES = 14
IPV4_BYTES = 20
UDP_BYTES = 8
IPPROTO_UDP = 17
IPV4_DF = 0x4000
DEFAULT_TTL = 64

_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


def mac_bytes(mac: str) -> bytes:
    """'02:00:00:00:00:01' -> 6 bytes; a clear error for anything else."""
    parts = mac.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"MAC address {mac!r}: expected six hex bytes like 02:00:00:00:00:01")
    return bytes.fromhex("".join(parts))


def ethernet(dst_mac: str, src_mac: str, ethertype: int) -> bytes:
    return _ETH.pack(mac_bytes(dst_mac), mac_bytes(src_mac), ethertype)


def ipv4_checksum(header: bytes) -> int:
    """RFC 791's header checksum over `header` (its checksum field counts as is)."""
    total = sum(struct.unpack("!%dH" % (len(header) // 2), header))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(src_ip: str, dst_ip: str, tos: int, payload_bytes: int, proto: int = IPPROTO_UDP) -> bytes:
    """An IPv4 header without options: DF set, id 0, TTL 64, checksum filled in."""
    fields = [
        0x45,
        tos,
        IPV4_BYTES + payload_bytes,
        0,
        IPV4_DF,
        DEFAULT_TTL,
        proto,
        0,
        socket.inet_aton(src_ip),
        socket.inet_aton(dst_ip),
    ]
    fields[7] = ipv4_checksum(_IPV4.pack(*fields))
    return _IPV4.pack(*fields)


def eth_ipv4_udp(
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    tos: int,
    sport: int,
    dport: int,
    payload_bytes: int = 0,
) -> bytes:
    """Ethernet / IPv4 / UDP (checksum 0) for a UDP payload of `payload_bytes`: 42 bytes."""
    udp_len = UDP_BYTES + payload_bytes
    return (
        ethernet(dst_mac, src_mac, 0x0800)
        + ipv4(src_ip, dst_ip, tos, udp_len)
        + _UDP.pack(sport, dport, udp_len, 0)
    )

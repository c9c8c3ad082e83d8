"""InfiniBand-style link-level flow control packets on Ethernet: where one is built and read.

Owns the wire format of emu's credit updates (the credit link mode,
`emu/credit.py`). Each Ethernet frame carries exactly one IBA flow control
packet (IBA vol 1, 7.9.4 "Flow control packet"), as an IB link sends one per
virtual lane:

    Ethernet  dst 01:80:c2:00:00:01, src = the sending port, type 0x88B5
    bits 0-3    Op      0 = normal flow control, 1 = flow control init
    bits 4-15   FCTBS   flow control total blocks sent on this VL, mod 4096
    bits 16-19  VL      the virtual lane (emu: the priority, 0..7)
    bits 20-31  FCCL    flow control credit limit for the peer, mod 4096
    bits 32-47  LPCRC   carried as 0 (see below)
    padding to the 60-byte minimum frame

One block is 64 bytes; FCTBS and FCCL are 12-bit counters of blocks. The
field layout is IBA's, as Wireshark's InfiniBand link dissector reads it
(`epan/dissectors/packet-infiniband.c`, `dissect_infiniband_link`: a 16-bit
word of Op(4)|FCTBS(12), a 16-bit word of VL(4)|FCCL(12), then the 16-bit
LPCRC). On a raw IB link the LPCRC protects the six bytes; here the Ethernet
FCS does, so emu sends 0 and ignores it on receipt.

Ethertype 0x88B5 is IEEE 802's "Local Experimental Ethertype 1" (IEEE Std
802a-2003, 3.2 "Local Experimental Ethertypes", since merged into IEEE Std
802): a protocol that is not standardised on Ethernet uses it, and
tshark shows it as such; `emu.proto.layers.IBFlowControl` is the Scapy layer
that decodes it in captures. The destination is the IEEE 802.1 reserved
group address that bridges never forward (the one PFC uses), since a flow
control packet belongs to one link, never to the fabric.

Built with `struct` for the hot path (the switch and the NIC agent import
this module, never Scapy).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from emu.proto import headers

ETH_TYPE_IB_FC = 0x88B5  # IEEE 802 Local Experimental Ethertype 1
FC_DST_MAC = "01:80:c2:00:00:01"
FC_OP_NORMAL = 0
FC_OP_INIT = 1
BLOCK_BYTES = 64  # IBA 7.9.4: credits and FCTBS count 64-byte blocks
COUNTER_MOD = 1 << 12  # FCTBS, FCCL and ABR are 12-bit counters
# IBA 7.9.4: a credit limit more than half the counter space ahead of FCTBS is
# stale (or negative): the transmitter may send only while
# (FCCL - (FCTBS + blocks)) mod 4096 <= 2048.
MAX_CREDIT_BLOCKS = COUNTER_MOD // 2
FC_FRAME_BYTES = 60  # minimum Ethernet frame without FCS
_BODY = struct.Struct("!HHH")
_ETHERTYPE = ETH_TYPE_IB_FC.to_bytes(2, "big")


def blocks(size_bytes: int) -> int:
    """The 64-byte blocks a frame of `size_bytes` takes (rounded up, as IBA counts)."""
    return -(-size_bytes // BLOCK_BYTES)


def template(src_mac: str) -> bytes:
    """A flow control frame from `src_mac` with every field 0, padded to the minimum frame."""
    head = headers.ethernet(FC_DST_MAC, src_mac, ETH_TYPE_IB_FC)
    frame = head + _BODY.pack(0, 0, 0)
    return frame + bytes(FC_FRAME_BYTES - len(frame))


@dataclass(frozen=True)
class FcPacket:
    """One IBA flow control packet: for `vl`, the sender's FCTBS and its FCCL for the peer.

    `fctbs` and `fccl` are the 12-bit wire values (mod 4096).
    """

    vl: int
    fctbs: int
    fccl: int
    op: int = FC_OP_NORMAL


def build(tmpl: bytes, fc: FcPacket) -> bytes:
    """Patch `tmpl` (from `template`) with `fc`'s fields."""
    word0 = (fc.op & 0xF) << 12 | fc.fctbs % COUNTER_MOD
    word1 = (fc.vl & 0xF) << 12 | fc.fccl % COUNTER_MOD
    return tmpl[:14] + _BODY.pack(word0, word1, 0) + tmpl[20:]


def is_flow_control(frame: bytes) -> bool:
    """A credit update: consumed by the port that receives it, never forwarded."""
    return frame[12:14] == _ETHERTYPE


def parse(frame: bytes) -> FcPacket | None:
    """Decode a flow control frame; None if it is not one, is truncated or has a reserved Op."""
    if len(frame) < 20 or not is_flow_control(frame):
        return None
    word0, word1, _ = _BODY.unpack_from(frame, 14)
    op = word0 >> 12
    if op > FC_OP_INIT:
        return None  # IBA: Op values above 1 are reserved
    return FcPacket(vl=word1 >> 12, fctbs=word0 & 0xFFF, fccl=word1 & 0xFFF, op=op)

"""Scapy layers for dissecting emu's frames: RoCEv2's RETH, the aggregation header and
the credit link's flow control packets.

Owns the Scapy view of the wire formats that `emu.proto.roce` and
`emu.proto.agg` and `emu.proto.credit` build with `struct`: tests, `emu trace` and reports dissect
frames with these (and with `scapy.contrib.roce`'s BTH, AETH and CNP
padding, re-exported here), as Wireshark would. The switch and the NIC model
never import this module: Scapy costs each of them 48 MiB and a second of
start-up for nothing they do at run time.
"""

from __future__ import annotations

from scapy.contrib.roce import AETH as AETH
from scapy.contrib.roce import BTH as BTH
from scapy.contrib.roce import CNPPadding as CNPPadding
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    IntField,
    ShortField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

from emu.proto import agg, credit, roce
from emu.proto.ofext import AGG_UDP_PORT


class RETH(Packet):
    """RDMA Extended Transport Header (IBA 9.3.3): target of an RDMA WRITE/READ."""

    name = "RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        IntField("dma_len", 0),
    ]


# scapy.contrib.roce binds AETH by opcode; RETH follows the first (or only)
# packet of an RDMA WRITE, RC and UC alike (IBA table 38).
for _op in (
    roce.RDMA_WRITE_FIRST,
    roce.RDMA_WRITE_ONLY,
    0x20 | roce.RDMA_WRITE_FIRST,
    0x20 | roce.RDMA_WRITE_ONLY,
):
    bind_layers(BTH, RETH, opcode=_op)


class AggHeader(Packet):
    """The aggregation header (`emu.proto.agg`); the elements follow as Raw."""

    name = "EmuAgg"
    fields_desc = [
        ByteField("version", agg.AGG_VERSION),
        ByteEnumField("kind", agg.KIND_CONTRIB, agg.KIND_NAMES),
        ByteEnumField(
            "dtype",
            agg.DTYPE_INT32,
            {agg.DTYPE_INT32: "int32", agg.DTYPE_FLOAT32: "float32"},
        ),
        ByteField("flags", 0),
        ShortField("job_id", 0),
        ShortField("slot", 0),
        IntField("seq", 0),
        ShortField("count", 0),
        ShortField("rank", 0),
    ]


bind_layers(UDP, AggHeader, dport=AGG_UDP_PORT)


class IBFlowControl(Packet):
    """An IBA flow control packet (IBA vol 1, 7.9.4) in an Ethernet frame (`emu.proto.credit`)."""

    name = "IBFlowControl"
    fields_desc = [
        BitEnumField("op", 0, 4, {credit.FC_OP_NORMAL: "normal", credit.FC_OP_INIT: "init"}),
        BitField("fctbs", 0, 12),
        BitField("vl", 0, 4),
        BitField("fccl", 0, 12),
        XShortField("lpcrc", 0),
    ]


bind_layers(Ether, IBFlowControl, type=credit.ETH_TYPE_IB_FC)

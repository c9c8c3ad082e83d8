"""Audit a capture of a credit link: did the sender ever exceed the credit it was given?

Owns the check, on the wire, of the credit loop's one promise (emu/credit.py):
read a pcap taken on one link (both directions, in the order the link carried
them), follow the sender's blocks sent on a VL (re-synchronised to the FCTBS
of each of its own flow control frames) and the credit limit (FCCL) of the
receiver's latest flow control frame, and count every data frame that went
beyond it. The capture sees the receiver's FCCL no later than the sender
does, so a frame within the captured limit may still have been sent on an
older one: a violation here is a violation at the sender.

Scenarios and integration tests call it; it uses Scapy (`emu.proto.layers`),
so neither the switch nor the NIC agent imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.utils import PcapReader

from emu.proto.credit import COUNTER_MOD, MAX_CREDIT_BLOCKS, blocks
from emu.proto.layers import IBFlowControl


@dataclass
class CreditAudit:
    """What one direction of a credit link carried on one VL."""

    data_frames: int = 0  # the sender's frames on the VL
    checked: int = 0  # of them, sent after both a limit and an FCTBS were seen
    violations: int = 0  # beyond the credit limit captured before them
    fc_from_sender: int = 0
    fc_from_receiver: int = 0
    limits: list = field(default_factory=list)  # FCCL values seen (for plots)


def audit(
    pcap: str | Path,
    sender_mac: str,
    receiver_mac: str,
    vl: int,
    dscp_to_vl: dict[int, int],
    data_from: set[str] | None = None,
    data_to: set[str] | None = None,
) -> CreditAudit:
    """Replay `pcap` and check the sender's data frames on `vl` against the receiver's FCCL.

    Flow control frames are told apart by their source: the port that sent
    them (`sender_mac`, `receiver_mac`). Data frames keep their hosts'
    addresses across switches, so their direction is told by those:
    `data_from` (source MACs) and/or `data_to` (destination MACs); by default,
    frames from `sender_mac` (a host's own link, host to switch).

    Args:
        dscp_to_vl: how frames are classified onto VLs (DESIGN.md: DSCP 26 -> 3).
    """
    out = CreditAudit()
    sent = limit = None
    sender_mac, receiver_mac = sender_mac.lower(), receiver_mac.lower()
    if data_from is None and data_to is None:
        data_from = {sender_mac}
    data_from = {m.lower() for m in data_from} if data_from is not None else None
    data_to = {m.lower() for m in data_to} if data_to is not None else None
    with PcapReader(str(pcap)) as reader:
        for pkt in reader:
            if Ether not in pkt:
                continue
            src = pkt[Ether].src.lower()
            if IBFlowControl in pkt:
                fc = pkt[IBFlowControl]
                if fc.vl != vl:
                    continue
                if src == receiver_mac:
                    out.fc_from_receiver += 1
                    limit = fc.fccl
                    out.limits.append(limit)
                elif src == sender_mac:
                    out.fc_from_sender += 1
                    sent = fc.fctbs
                continue
            if data_from is not None and src not in data_from:
                continue
            if data_to is not None and pkt[Ether].dst.lower() not in data_to:
                continue
            if IP not in pkt or dscp_to_vl.get(pkt[IP].tos >> 2, 0) != vl:
                continue
            out.data_frames += 1
            if sent is None:
                continue
            sent = (sent + blocks(pkt.wirelen)) % COUNTER_MOD
            if limit is None:
                continue
            out.checked += 1
            # IBA 7.9.4: within credit while (FCCL - FCTBS) mod 4096 <= 2048.
            ahead = (limit - sent) % COUNTER_MOD
            if ahead > MAX_CREDIT_BLOCKS:
                out.violations += 1
    return out

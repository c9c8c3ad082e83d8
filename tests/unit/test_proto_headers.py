"""emu.proto.headers against Scapy: the same bytes for every template, no Scapy at run time.

The switch and the NIC agent build their frames' headers with `struct`
(emu/proto/headers.py); Scapy, which used to build them, stays the reference
here and for dissection (emu.proto.layers).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emu.proto import agg, headers, roce

SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:aa:02"
SRC_IP, DST_IP = "10.0.1.1", "10.255.0.2"


@pytest.mark.parametrize("tos,payload", [(0, 0), (26 << 2 | 2, 0), (48 << 2, 1000)])
def test_eth_ipv4_udp_is_what_scapy_builds(tos, payload):
    scapy = bytes(
        Ether(src=SRC_MAC, dst=DST_MAC)
        / IP(src=SRC_IP, dst=DST_IP, tos=tos, flags="DF", id=0, ttl=64)
        / UDP(sport=49152, dport=4791, chksum=0)
        / bytes(payload)
    )
    ours = headers.eth_ipv4_udp(SRC_MAC, DST_MAC, SRC_IP, DST_IP, tos, 49152, 4791, payload)
    assert ours == scapy[: headers.ETH_BYTES + headers.IPV4_BYTES + headers.UDP_BYTES]


def test_templates_patch_scapy_identical_headers():
    """A RoCE data frame and an aggregation frame, each against Scapy's build of it."""
    tmpl = roce.DataTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP, 49152, dest_qp=0x123)
    frame = tmpl.frame(roce.SEND_ONLY, 7, 256)
    pkt = Ether(frame)
    pkt[IP].chksum = None
    pkt[BTH].icrc = None
    assert bytes(pkt) == frame
    payload = bytes(range(8))
    frame = agg.AggTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP).frame(
        agg.KIND_CONTRIB, agg.DTYPE_INT32, 3, 4, 0, payload, rank=1
    )
    pkt = Ether(frame)
    pkt[IP].chksum = None
    assert bytes(pkt) == frame


def test_a_bad_mac_is_named():
    with pytest.raises(ValueError, match="'02:00:00:00:01'"):
        headers.mac_bytes("02:00:00:00:01")


@pytest.mark.parametrize("module", ["emu.switch.datapath", "emu.host.agent"])
def test_the_switch_and_the_nic_agent_load_no_scapy(module):
    """Scapy built a few headers once and cost each process 48 MiB and a second."""
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('scapy')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout

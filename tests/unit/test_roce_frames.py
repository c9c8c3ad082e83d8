"""RoCEv2 frames: built as IBA/RoCEv2 say, read back by Scapy and tshark, parsed fast."""

import random
import shutil
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from emu.proto import roce
from emu.proto.layers import AETH, BTH, RETH, CNPPadding
from emu.switch.rewrite import set_ip_ecn

SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"


@pytest.fixture
def tmpl():
    return roce.DataTemplate(SRC_MAC, DST_MAC, "10.0.0.1", "10.0.0.2", 49152, dest_qp=0x123)


def scapy_icrc_ok(frame: bytes) -> bool:
    """Scapy recomputes the ICRC of the dissected frame: it must be the same bytes."""
    pkt = Ether(frame)
    pkt[BTH].icrc = None
    return bytes(pkt) == frame


def scapy_ip_checksum_ok(frame: bytes) -> bool:
    pkt = Ether(frame)
    del pkt[IP].chksum
    return bytes(pkt) == frame


def data_frames(tmpl):
    return [
        tmpl.frame(roce.SEND_FIRST, 10, 1024),
        tmpl.frame(roce.SEND_MIDDLE, 11, 1024),
        tmpl.frame(roce.SEND_LAST, 12, 13, ack_req=True),
        tmpl.frame(roce.SEND_ONLY, 13, 0),
        tmpl.frame(roce.RDMA_WRITE_FIRST, 14, 1024, reth=(0xDEAD0000, 0x77, 2050)),
        tmpl.frame(roce.RDMA_WRITE_MIDDLE, 15, 1024),
        tmpl.frame(roce.RDMA_WRITE_LAST, 16, 2, ack_req=True),
        tmpl.frame(roce.RDMA_WRITE_ONLY, 17, 1500, reth=(1, 2, 1500)),
    ]


def test_data_frame_dissects_with_scapy(tmpl):
    frame = tmpl.frame(roce.SEND_ONLY, 0xABCDE, 1000, ack_req=True)
    pkt = Ether(frame)
    assert pkt.src == SRC_MAC and pkt.dst == DST_MAC
    ip, udp, bth = pkt[IP], pkt[UDP], pkt[BTH]
    assert (ip.src, ip.dst, ip.tos >> 2, ip.tos & 3) == ("10.0.0.1", "10.0.0.2", 26, roce.ECN_ECT0)
    assert ip.len == len(frame) - 14 and udp.len == ip.len - 20
    assert (udp.sport, udp.dport, udp.chksum) == (49152, 4791, 0)
    assert (bth.opcode, bth.psn, bth.dqpn, bth.ackreq, bth.pkey) == (4, 0xABCDE, 0x123, 1, 0xFFFF)
    assert bth.fecn == bth.becn == 0 and bth.padcount == 0
    assert len(pkt[Raw].load) == 1000
    assert scapy_icrc_ok(frame) and scapy_ip_checksum_ok(frame)


@pytest.mark.parametrize("index", range(8))
def test_every_data_opcode_has_scapys_icrc_and_checksum(tmpl, index):
    frame = data_frames(tmpl)[index]
    assert scapy_icrc_ok(frame) and scapy_ip_checksum_ok(frame)
    assert len(frame) == 14 + Ether(frame)[IP].len


def test_reth_layer_on_write_first_and_only(tmpl):
    pkt = Ether(tmpl.frame(roce.RDMA_WRITE_FIRST, 1, 512, reth=(0x1122334455667788, 0xAB, 4096)))
    reth = pkt[RETH]
    assert (reth.va, reth.rkey, reth.dma_len) == (0x1122334455667788, 0xAB, 4096)
    assert len(reth.payload.load) == 512
    assert RETH not in Ether(tmpl.frame(roce.RDMA_WRITE_MIDDLE, 2, 512))


def test_payload_padded_to_four_bytes(tmpl):
    frame = tmpl.frame(roce.SEND_LAST, 3, 13)
    assert Ether(frame)[BTH].padcount == 3
    assert (len(frame) - 14 - 20 - 8 - 12 - 4) == 16
    assert roce.parse(frame).payload_len == 13


def test_ack_and_nak_dissect_with_scapy(tmpl):
    ack = tmpl.ack_frame(psn=41, msn=7)
    nak = tmpl.nak_frame(expected_psn=42, msn=7)
    for frame, syndrome, psn in ((ack, 0x1F, 41), (nak, 0x60, 42)):
        pkt = Ether(frame)
        assert pkt[BTH].opcode == roce.ACKNOWLEDGE and pkt[BTH].psn == psn
        assert pkt[BTH].dqpn == 0x123
        assert (pkt[AETH].syndrome, pkt[AETH].msn) == (syndrome, 7)
        assert scapy_icrc_ok(frame) and scapy_ip_checksum_ok(frame)
    rnr = roce.parse(roce.ack_frame(tmpl, 5, 1, roce.AETH_RNR_NAK | 0x0E))
    assert rnr.syndrome & roce.AETH_KIND_MASK == roce.AETH_RNR_NAK


def test_cnp_is_rocev2_cnp(tmpl):
    frame = roce.cnp_frame(tmpl)
    pkt = Ether(frame)
    assert (pkt[IP].tos >> 2, pkt[IP].tos & 3) == (roce.DSCP_CNP, roce.ECN_NOT_ECT)
    bth = pkt[BTH]
    assert (bth.opcode, bth.dqpn, bth.becn) == (0x81, 0x123, 1)
    assert bytes(pkt[CNPPadding]) == bytes(16)
    assert len(frame) == 14 + 20 + 8 + 12 + 16 + 4
    assert scapy_icrc_ok(frame) and scapy_ip_checksum_ok(frame)


def test_same_bytes_as_scapy_builds(tmpl):
    """A whole frame from Scapy's layers (ICRC by Scapy) equals the template's."""
    frame = tmpl.frame(roce.RDMA_WRITE_ONLY, 99, 64, ack_req=True, reth=(5, 6, 64))
    pkt = (
        Ether(src=SRC_MAC, dst=DST_MAC)
        / IP(src="10.0.0.1", dst="10.0.0.2", tos=26 << 2 | 2, flags="DF", id=0)
        / UDP(sport=49152, dport=4791, chksum=0)
        / BTH(opcode=roce.RDMA_WRITE_ONLY, dqpn=0x123, psn=99, ackreq=1)
        / RETH(va=5, rkey=6, dma_len=64)
        / Raw(bytes(range(64)))
    )
    assert bytes(pkt) == frame


def test_parse_round_trip(tmpl):
    for frame in data_frames(tmpl):
        info = roce.parse(frame, verify_icrc=True)
        pkt = Ether(frame)
        assert info.ok is True
        assert (info.opcode, info.psn, info.dest_qp, info.ack_req) == (
            pkt[BTH].opcode,
            pkt[BTH].psn,
            0x123,
            bool(pkt[BTH].ackreq),
        )
        assert (info.src_mac, info.dst_mac, info.src_ip, info.dst_ip, info.udp_sport) == (
            SRC_MAC,
            DST_MAC,
            "10.0.0.1",
            "10.0.0.2",
            49152,
        )
        assert (info.dscp, info.ecn, info.syndrome, info.becn) == (26, 2, None, False)
    info = roce.parse(tmpl.frame(roce.RDMA_WRITE_FIRST, 1, 100, reth=(7, 8, 300)))
    assert info.reth == (7, 8, 300) and info.payload_len == 100 and info.ok is None
    ack = roce.parse(tmpl.ack_frame(0xFFFFFF, 0x10203, roce.AETH_NAK_PSN_SEQ_ERROR), True)
    assert (ack.opcode, ack.psn, ack.syndrome, ack.msn, ack.payload_len, ack.ok) == (
        0x11,
        0xFFFFFF,
        0x60,
        0x10203,
        0,
        True,
    )
    cnp = roce.parse(tmpl.cnp_frame(), True)
    assert (cnp.opcode, cnp.dest_qp, cnp.becn, cnp.dscp, cnp.ecn, cnp.reth, cnp.ok) == (
        0x81,
        0x123,
        True,
        48,
        0,
        None,
        True,
    )


def test_ce_mark_and_ttl_keep_icrc_valid(tmpl):
    """The ICRC masks tos and ttl: a switch fixes only the IPv4 checksum."""
    frame = set_ip_ecn(tmpl.frame(roce.SEND_ONLY, 1, 256), roce.ECN_CE)
    info = roce.parse(frame, verify_icrc=True)
    assert info.ecn == roce.ECN_CE and info.dscp == 26 and info.ok is True
    assert scapy_icrc_ok(frame) and scapy_ip_checksum_ok(frame)


def test_corruption_fails_icrc_and_padding_is_ignored(tmpl):
    frame = bytearray(tmpl.frame(roce.SEND_ONLY, 1, 256))
    frame[100] ^= 1
    assert roce.parse(bytes(frame), verify_icrc=True).ok is False
    short = tmpl.frame(roce.SEND_ONLY, 2, 0) + bytes(2)  # padded to 60 bytes on the wire
    info = roce.parse(short, verify_icrc=True)
    assert info.ok is True and info.payload_len == 0


def test_template_rejects_bad_values(tmpl):
    with pytest.raises(ValueError, match="dest_qp"):
        roce.DataTemplate(SRC_MAC, DST_MAC, "10.0.0.1", "10.0.0.2", 1, dest_qp=1 << 24)
    with pytest.raises(ValueError, match="payload_len"):
        tmpl.frame(roce.SEND_ONLY, 0, roce.MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(ValueError, match="reth"):
        tmpl.frame(roce.RDMA_WRITE_ONLY, 0, 10)
    with pytest.raises(ValueError, match="reth"):
        tmpl.frame(roce.SEND_ONLY, 0, 10, reth=(1, 2, 3))


def test_psn_arithmetic_wraps_at_24_bits():
    assert roce.psn_add(0xFFFFFE, 3) == 1
    assert roce.psn_add(0, -1) == 0xFFFFFF
    assert roce.psn_diff(1, 0xFFFFFE) == 3
    assert roce.psn_diff(0xFFFFFE, 1) == -3
    assert roce.psn_diff(5, 5) == 0
    assert roce.psn_diff(1 << 23, 0) == -(1 << 23)  # half-space: the boundary is "behind"
    assert roce.psn_diff((1 << 23) - 1, 0) == (1 << 23) - 1
    rng = random.Random(1)
    for _ in range(1000):
        a, n = rng.randrange(1 << 24), rng.randrange(-(1 << 23), 1 << 23)
        assert roce.psn_diff(roce.psn_add(a, n), a) == n


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        bytes(57),
        bytes(12) + b"\x86\xdd" + bytes(80),  # empty, short, IPv6
        bytes.fromhex("0180c2000001020000000001880801010008") + bytes(42),  # PFC
    ],
)
def test_not_roce_is_none(frame):
    assert roce.parse(frame) is None


def test_other_udp_port_is_none(tmpl):
    frame = bytearray(tmpl.frame(roce.SEND_ONLY, 1, 16))
    frame[36:38] = (4792).to_bytes(2, "big")
    assert roce.parse(bytes(frame)) is None


def test_parser_never_raises_on_garbage(tmpl):
    rng = random.Random(7)
    seeds = data_frames(tmpl) + [tmpl.ack_frame(1, 1), tmpl.cnp_frame()]
    for i in range(5000):
        if i % 3 == 0:
            frame = rng.randbytes(rng.randrange(0, 200))
        else:
            frame = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 6)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            frame = bytes(frame[: rng.randrange(len(frame) + 1)])
        info = roce.parse(frame, verify_icrc=bool(i & 1))
        assert info is None or isinstance(info, roce.RoceInfo)
    for seed in seeds:  # every truncation of a real frame is refused, never half-read
        for cut in range(len(seed) - 1):
            assert roce.parse(seed[:cut], verify_icrc=True) is None


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_tshark_decodes_rocev2(tmpl, tmp_path):
    psns = [0xFFFFFE, 0xFFFFFF, 0, 1]
    frames = [
        tmpl.frame(roce.RDMA_WRITE_FIRST, psns[0], 1024, reth=(0x1000, 0x55, 4096)),
        tmpl.frame(roce.RDMA_WRITE_MIDDLE, psns[1], 1024),
        set_ip_ecn(tmpl.frame(roce.RDMA_WRITE_MIDDLE, psns[2], 1024), roce.ECN_CE),
        tmpl.frame(roce.RDMA_WRITE_LAST, psns[3], 1024, ack_req=True),
        tmpl.ack_frame(psns[3], 1),
        tmpl.cnp_frame(),
    ]
    pcap = tmp_path / "roce.pcap"
    wrpcap(str(pcap), [Ether(f) for f in frames])
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "ip.dsfield.ecn",
            "-e",
            "ip.dsfield.dscp",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    rows = [line.split(",") for line in out]
    assert [int(r[0]) for r in rows] == [6, 7, 7, 8, 17, 129]
    got_psns = [int(r[1]) for r in rows[:4]]
    assert got_psns == psns
    assert all(roce.psn_diff(b, a) == 1 for a, b in zip(got_psns, got_psns[1:]))
    assert {int(r[2], 16) for r in rows} == {0x123}
    assert [int(r[3]) for r in rows] == [2, 2, 3, 2, 2, 0]
    assert [int(r[4]) for r in rows] == [26] * 5 + [48]


def test_the_sizes_models_quote_are_the_frames_the_templates_build(tmpl):
    """emu/models and emu/traffic size RoCEv2 frames by `data_frame_bytes` and
    `CNP_FRAME_BYTES`: they must be what goes on the wire (a full MTU: 1082 bytes)."""
    for payload in (0, 4, 13, 1024, 4096):
        assert roce.data_frame_bytes(payload) == len(tmpl.frame(roce.SEND_MIDDLE, 1, payload))
    assert roce.data_frame_bytes(1024) == 1082
    assert roce.CNP_FRAME_BYTES == len(tmpl.cnp_frame())

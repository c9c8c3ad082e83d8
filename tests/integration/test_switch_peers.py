"""The emu switch against independent peers and hostile input, on a live fabric.

- ovs-ofctl (Open vSwitch's OpenFlow implementation) lists, adds and deletes
  flows, reads port stats and groups on our switch;
- mutated and truncated OpenFlow messages over TCP, including the inputs that
  hang os-ken's own parsers, get OFPT_ERROR and never stop or hang the switch;
- malformed frames on a port never stop the switch or the controller.
Afterwards the switch still answers echo and forwards.
"""

from __future__ import annotations

import os
import random
import re
import socket
import struct
import subprocess
import sys

import pytest

from emu import fabric
from emu.net import Fabric, wait_for

OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY = 1, 2, 3
OFPT_FLOW_MOD, OFPT_GROUP_MOD = 14, 15
HEADER = struct.Struct("!BBHI")


def of_addr(fab, switch="leaf1") -> tuple[str, int]:
    host, port = fab.switch_call(switch, "info")["of_listen"]
    return host, port


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    with Fabric(
        fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1),
        out_dir=str(tmp_path_factory.mktemp("peers")),
    ) as f:
        yield f


def test_ovs_ofctl_lists_adds_deletes_flows_and_reads_ports(fab):
    flows = fab.ofctl("leaf1", "dump-flows")
    # What the routing controller installed: LLDP/ARP punts and a route per host.
    assert "dl_type=0x88cc actions=CONTROLLER" in flows
    assert "nw_dst=10.0.2.1 actions=group:" in flows
    fab.ofctl("leaf1", "add-flow", "cookie=0x42,priority=100,ip,nw_dst=10.9.9.9,actions=drop")
    assert "nw_dst=10.9.9.9" in fab.ofctl("leaf1", "dump-flows", "cookie=0x42/-1")
    fab.ofctl("leaf1", "del-flows", "cookie=0x42/-1")
    assert "nw_dst=10.9.9.9" not in fab.ofctl("leaf1", "dump-flows")
    assert "type=select" in fab.ofctl("leaf1", "dump-groups")

    before = {p["port_no"]: p for p in fab.switch_call("leaf1", "ports")}
    assert fab.ping("h1", "h2", count=5, interval_s=0.05) == (5, 5)
    stats = fab.ofctl("leaf1", "dump-ports")
    after = {p["port_no"]: p for p in fab.switch_call("leaf1", "ports")}
    rx = {int(port): int(pkts) for port, pkts in re.findall(r"port\s+(\d+): rx pkts=(\d+)", stats)}
    # Port 1 faces h1: the 5 echo requests came in there; OpenFlow and mgmt agree.
    assert before[1]["rx_packets"] + 5 <= rx[1] <= after[1]["rx_packets"]


def recv_msg(sock: socket.socket) -> tuple[int, int, bytes]:
    head = b""
    while len(head) < 8:
        chunk = sock.recv(8 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    _, mtype, length, xid = HEADER.unpack(head)
    body = b""
    while len(body) < length - 8:
        chunk = sock.recv(length - 8 - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return mtype, xid, body


class Channel:
    """A raw OpenFlow 1.3 connection to the switch's passive listener."""

    def __init__(self, addr):
        self.sock = socket.create_connection(addr, timeout=5)
        self.sock.sendall(HEADER.pack(4, 0, 8, 1))
        assert recv_msg(self.sock)[0] == 0  # the switch's HELLO

    def exchange(self, msg: bytes, marker: int) -> list[tuple[int, int]]:
        """Send `msg` then an echo with xid `marker`; return what came back before the echo.

        If the switch closes the channel (a broken stream), what it sent before
        closing is returned with a final ("closed", None).
        """
        self.sock.sendall(msg + HEADER.pack(4, OFPT_ECHO_REQUEST, 8, marker))
        got = []
        while True:
            try:
                mtype, xid, _ = recv_msg(self.sock)
            except socket.timeout:
                return got + [("timeout", None)]
            except (ConnectionError, OSError):
                return got + [("closed", None)]
            if mtype == OFPT_ECHO_REPLY and xid == marker:
                return got
            got.append((mtype, xid))

    def close(self):
        self.sock.close()


def valid_messages() -> list[bytes]:
    from os_ken.ofproto import ofproto_v1_3 as ofp
    from os_ken.ofproto import ofproto_v1_3_parser as p

    class DP:
        ofproto, ofproto_parser, id = ofp, p, 1

    dp = DP()
    msgs = [
        p.OFPFlowMod(
            dp,
            cookie=0x77,
            table_id=1,
            priority=10,
            match=p.OFPMatch(eth_type=0x0800, ipv4_dst="10.1.2.3", ip_proto=17, udp_dst=4791),
            instructions=[
                p.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS,
                    [p.OFPActionSetField(ip_dscp=26), p.OFPActionDecNwTtl(), p.OFPActionOutput(2)],
                ),
                p.OFPInstructionGotoTable(2),
            ],
        ),
        p.OFPGroupMod(
            dp,
            ofp.OFPGC_ADD,
            ofp.OFPGT_SELECT,
            77,
            [
                p.OFPBucket(weight=1, watch_port=1, actions=[p.OFPActionOutput(1)]),
                p.OFPBucket(weight=1, watch_port=2, actions=[p.OFPActionOutput(2)]),
            ],
        ),
        p.OFPPacketOut(
            dp,
            buffer_id=ofp.OFP_NO_BUFFER,
            in_port=ofp.OFPP_CONTROLLER,
            actions=[p.OFPActionOutput(ofp.OFPP_TABLE)],
            data=bytes(60),
        ),
        p.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY),
        p.OFPFlowStatsRequest(dp),
        p.OFPRoleRequest(dp, ofp.OFPCR_ROLE_EQUAL, 0),
        p.OFPSetConfig(dp, 0, 128),
        p.OFPPortMod(dp, 99, "00:00:00:00:00:00", 0, 0, 0),
    ]
    out = []
    for m in msgs:
        m.serialize()
        out.append(bytes(m.buf))
    return out


# The inputs that hang os-ken's own parsers (DESIGN.md), each as a whole message.
def os_ken_hangers() -> list[bytes]:
    def msg(mtype, body):
        return HEADER.pack(4, mtype, 8 + len(body), 0x5EED) + body

    match = struct.pack("!HH", 1, 4) + b"\x00" * 4  # empty OXM match, padded
    flow_head = (
        struct.pack(
            "!QQBBHHHIIIH2x", 0, 0, 0, 0, 0, 0, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0
        )
        + match
    )
    return [
        msg(OFPT_FLOW_MOD, flow_head + struct.pack("!HH4x", 4, 0)),  # instruction len 0
        msg(OFPT_FLOW_MOD, flow_head + struct.pack("!HH4x", 99, 8)),  # unknown instruction
        msg(
            OFPT_FLOW_MOD,
            flow_head
            + struct.pack("!HH4x", 4, 16)  # action len 0
            + struct.pack("!HH4x", 0, 0),
        ),
        msg(
            OFPT_GROUP_MOD,
            struct.pack("!HBxI", 0, 1, 5)  # bucket len 0
            + struct.pack("!HHII4x", 0, 1, 0xFFFFFFFF, 0xFFFFFFFF),
        ),
        HEADER.pack(4, 0, 16, 0x5EED) + struct.pack("!HH", 1, 0) + b"\x00" * 4,  # hello elt 0
    ]


def mutate(rng: random.Random, msg: bytes) -> bytes:
    b = bytearray(msg)
    kind = rng.randrange(5)
    if kind == 0:  # flip bits
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # corrupt a 16-bit length-like field inside the body
        i = rng.randrange(8, max(9, len(b) - 1))
        b[i : i + 2] = struct.pack("!H", rng.choice([0, 1, 4, 7, 8, 0xFFFF, rng.randrange(64)]))
    elif kind == 2:  # truncate the body but keep the header's length honest
        b = b[: rng.randrange(8, len(b))]
        b[2:4] = struct.pack("!H", len(b))
    elif kind == 3:  # header length lies (shorter than the body)
        b[2:4] = struct.pack("!H", rng.randrange(8, len(b)))
    else:  # splice random bytes in
        i = rng.randrange(8, len(b))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        b[2:4] = struct.pack("!H", len(b))
    if struct.unpack_from("!H", b, 2)[0] > len(b):
        # A header that promises more bytes than follow is not malformed yet: TCP
        # framing rightly waits for the rest. Keep the promise within what is sent.
        b[2:4] = struct.pack("!H", len(b))
    return bytes(b[:0xFFFF])


def test_os_ken_hangers_get_errors_and_switch_survives(fab):
    for i, msg in enumerate(os_ken_hangers()):
        ch = Channel(of_addr(fab))
        try:
            got = ch.exchange(msg, 0xA000 + i)
        finally:
            ch.close()
        assert (OFPT_ERROR, 0x5EED) in got, f"hanger {i} got {got}, expected an OFPT_ERROR"
    fresh = Channel(of_addr(fab))
    assert fresh.exchange(b"", 0xBEEF) == []
    fresh.close()


def test_mutated_openflow_never_stops_or_hangs_the_switch(fab):
    rng = random.Random(1234)
    seeds = valid_messages()
    addr = of_addr(fab)
    ch = Channel(addr)
    errors = reconnects = 0
    try:
        for i in range(2000):
            msg = mutate(rng, rng.choice(seeds))
            got = ch.exchange(msg, 0x10000 + i)
            errors += any(t == OFPT_ERROR for t, _ in got)
            assert not got or got[-1][0] != "timeout", f"switch hung on {msg.hex()}"
            if got and got[-1][0] == "closed":
                # An unframeable stream is answered with an error and closed; reconnect.
                reconnects += 1
                ch.close()
                ch = Channel(addr)
    finally:
        ch.close()
    assert errors > 500, f"only {errors} error replies to 2000 mutated messages"
    # Still alive: echo on a fresh channel, management, and forwarding.
    fresh = Channel(addr)
    assert fresh.exchange(b"", 0xBEEF) == []
    fresh.close()
    assert fab.switch_call("leaf1", "ping") == "pong"
    assert fab.ping("h1", "h2", count=3, interval_s=0.05) == (3, 3)


MALFORMED_FRAMES = r"""
import random, socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
s.setsockopt(263, 20, 1)  # PACKET_QDISC_BYPASS: all at once, past the host NIC's 16-frame tbf
src = bytes.fromhex("020000000001"); bcast = b"\xff" * 6; dst = bytes.fromhex("0200000000ff")
eth = lambda t: dst + src + struct.pack("!H", t)
frames = [
    b"\x01", bcast + src,                                   # runts
    eth(0x0800),                                             # IPv4 type, no header
    eth(0x0800) + bytes([0x4f]) + bytes(10),                 # IHL 15, truncated
    eth(0x0800) + bytes([0x45, 0, 0xff, 0xff]) + bytes(16),  # total length lies
    eth(0x0800) + bytes([0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0]) + bytes(8)
        + bytes(12) + bytes([0xf0]) + bytes(7) + bytes([2, 0]),  # TCP offset 15, option len 0
    bcast + src + struct.pack("!H", 0x0806) + bytes(10),    # ARP truncated
    bcast + src + struct.pack("!H", 0x0806) + struct.pack("!HHBBH", 1, 0x800, 6, 4, 1) + bytes(20),
    bytes.fromhex("0180c200000e") + src + struct.pack("!H", 0x88cc) + bytes(4),  # LLDP, TLV len 0
    bytes.fromhex("0180c200000e") + src + struct.pack("!H", 0x88cc) + b"\x02\xff" + bytes(40),
    eth(0x8100),                                             # VLAN tag without the tag
    eth(0x8100) + b"\x00\x01" + struct.pack("!H", 0x8100) + b"\x00\x02" + struct.pack("!H", 0x0800),
    bytes.fromhex("0180c2000001") + src + struct.pack("!H", 0x8808) + b"\x01\x01" + bytes(4),
]
rng = random.Random(7)
for _ in range(500):
    frames.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))))
for _ in range(500):
    frames.append(eth(rng.choice([0x0800, 0x0806, 0x88cc, 0x8100, 0x86dd]))
                  + bytes(rng.randrange(256) for _ in range(rng.randint(0, 80))))
start, count = int(sys.argv[2]), int(sys.argv[3])
sent = 0
for f in frames[start:start + count]:
    try:
        s.send(f); sent += 1
    except OSError:
        pass
print(len(frames), sent)
"""
# Frames per burst: well inside a switch port's receive ring (512 slots at least,
# emu/switch/fastpath.py C_RING_FLOOR), so that a switch descheduled for the
# burst's duration still finds every frame in its ring, not dropped by the kernel.
MALFORMED_BURST = 200


def test_malformed_frames_never_stop_switch_or_controller(fab):
    before = fab.switch_call("leaf1", "counters")
    rx0 = {p["port_no"]: p for p in before["ports"]}[1]["rx_packets"]
    sent = start = 0
    total = None
    while total is None or start < total:
        argv = [sys.executable, "-c", MALFORMED_FRAMES, "h1-eth0", str(start), str(MALFORMED_BURST)]
        res = fab.host_run("h1", argv, check=True)
        total, burst = (int(x) for x in res.stdout.split())
        sent += burst
        start += MALFORMED_BURST

        def received_all(expected=sent):
            c = fab.switch_call("leaf1", "counters")
            port = {p["port_no"]: p for p in c["ports"]}[1]
            return c if port["rx_packets"] - rx0 >= 0.95 * expected else None

        # The switch received and processed the burst (the kernel's veth path may
        # refuse a few of the random ones before they reach the switch).
        after = wait_for(received_all, 10, f"leaf1 to receive the {sent} frames")
    assert sent > 900  # the kernel refuses some runts itself
    assert after["malformed_frames"] == before["malformed_frames"], "a frame broke the pipeline"
    assert fab.controller.poll() is None, "the controller died on punted garbage"
    assert fab.ping("h1", "h2", count=3, interval_s=0.05) == (3, 3)
    assert fab.ping("h2", "h1", count=3, interval_s=0.05) == (3, 3)


def test_emu_ctl_asks_a_running_switch(fab):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "ports"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    assert "leaf1-eth1" in res.stdout and "up" in res.stdout
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "flows"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert '"ipv4_dst": "10.0.2.1"' in res.stdout
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "ecn", "3000", "9000"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert res.returncode == 0 and '"kmin_bytes": 3000' in res.stdout
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "ecn", "9000", "3000"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert res.returncode == 2 and "kmin_bytes=9000" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "loss", "1", "0.5"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert res.returncode == 0 and '"1": 0.5' in res.stdout
    subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "loss", "1", "0"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
        check=True,
    )
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "loss", "9", "0.5"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert res.returncode == 2 and "unknown port 9" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "leaf1", "reboot"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert res.returncode == 2 and "'reboot' is not one of" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "emu.cli", "ctl", "nosuch", "flows"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=30,
    )
    assert res.returncode == 2 and "unknown switch or host 'nosuch'" in res.stderr
    assert "leaf1" in res.stderr and "Traceback" not in res.stderr


def test_carrier_loss_is_a_port_down_within_a_second_and_heals(fab):
    port = fab.graph.edges["leaf1", "spine1"]["ports"]["leaf1"]

    def link_up():
        return {p["port_no"]: p for p in fab.switch_call("leaf1", "ports")}[port]["link_up"]

    fab.set_link("leaf1", "spine1", up=False)
    try:
        wait_for(lambda: not link_up(), 1.0, "leaf1 to see the carrier go", interval_s=0.02)
        wait_for(
            lambda: any(
                e["kind"] == "link_down" for e in fab.controller_status().get("events", [])
            ),
            5,
            "the controller to hear of it (OFPT_PORT_STATUS)",
        )
        # Single spine: leaf1 is cut off; the switch must drop, not misroute.
        assert fab.ping("h1", "h2", count=1)[1] == 0
    finally:
        fab.set_link("leaf1", "spine1", up=True)
    wait_for(link_up, 1.0, "leaf1 to see the carrier return", interval_s=0.02)
    fab.wait_converged(30)
    assert fab.ping("h1", "h2", count=3, interval_s=0.05) == (3, 3)


def test_switches_keep_forwarding_without_controller_and_reconnect(fab):
    flows_before = fab.ofctl("leaf1", "dump-flows")
    fab.controller.kill()
    fab.controller.wait()
    # The controller is gone: installed flows still forward.
    assert fab.ping("h1", "h2", count=3, interval_s=0.05) == (3, 3)
    fab.restart_controller()
    fab.wait_converged(60)
    for sw in ("leaf1", "leaf2", "spine1"):
        wait_for(lambda sw=sw: fab.switch(sw).connected(), 10, f"{sw} to reconnect")
    assert fab.ping("h1", "h2", count=3, interval_s=0.05) == (3, 3)
    # The fresh controller reinstalled every route (the flows the fuzz tests above
    # added in its cookie band are gone: see test_failures_with_plugin for the
    # table comparison on a clean fabric).
    after = fab.ofctl("leaf1", "dump-flows")
    for ip in ("10.0.1.1", "10.0.2.1"):
        assert f"nw_dst={ip} actions=" in after and f"nw_dst={ip} actions=" in flows_before

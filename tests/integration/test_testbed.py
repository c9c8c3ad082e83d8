"""The single-switch testbed (emu/testbed.py) against a live emu switch.

Each test goes through the harness end to end: OpenFlow from os-ken objects
or ovs-ofctl, real frames built by Scapy into one port and out of another,
OFPT_ERRORs back from a barrier, PACKET_INs on the switch's own controller
connection, and nothing of the testbed left once it is closed.
"""

from __future__ import annotations

import contextlib
import os

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.all import IP, UDP, Dot1Q, Ether, raw

from emu import ovs, registry
from emu.testbed import SwitchTestbed, TestbedError


def udp_frame(payload: bytes = b"conformance") -> bytes:
    return raw(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / UDP(sport=4000, dport=5000)
        / payload
    )


def apply(*actions) -> list:
    return [p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, list(actions))]


def only(port_no: int, frames: list[bytes], ports) -> dict[int, list[bytes]]:
    """What receive() returns when `frames` left by `port_no` and nothing by any other port."""
    return {n: (frames if n == port_no else []) for n in ports}


def test_a_flow_mod_from_the_controller_forwards_a_frame_to_its_port_only(testbed):
    with testbed.controller() as c:
        xid = c.send(
            p.OFPFlowMod(
                c.datapath, match=p.OFPMatch(in_port=1), instructions=apply(p.OFPActionOutput(2))
            )
        )
        assert xid > 0
        assert c.barrier() == []
        frame = udp_frame()
        testbed.send(1, frame)
        # Port 1 stays empty too: the test's own frame is not read back.
        assert testbed.receive() == only(2, [frame], testbed.ports)

        (reply,) = c.request(p.OFPFlowStatsRequest(c.datapath))
        (stats,) = reply.body
        assert stats.match["in_port"] == 1
        assert (stats.packet_count, stats.byte_count) == (1, len(frame))


def test_a_flow_from_ovs_ofctl_forwards_a_frame_to_its_port_only(testbed):
    testbed.ofctl("add-flow", "in_port=3,actions=output:4")
    frame = udp_frame(b"from ovs-ofctl")
    testbed.send(3, frame)
    assert testbed.receive() == only(4, [frame], testbed.ports)
    assert "n_packets=1," in testbed.ofctl("dump-flows")
    ports = {port["port_no"]: port for port in testbed.switch_call("ports")}
    assert (ports[3]["rx_packets"], ports[4]["tx_packets"]) == (1, 1)


def test_a_refused_action_comes_back_from_the_barrier_as_an_error(testbed):
    with testbed.controller() as c:
        xid = c.send(
            p.OFPFlowMod(
                c.datapath, match=p.OFPMatch(in_port=1), instructions=apply(p.OFPActionOutput(0))
            )
        )
        (error,) = c.barrier()
        assert isinstance(error, p.OFPErrorMsg)
        assert (error.type, error.code, error.xid) == (
            ofp.OFPET_BAD_ACTION,
            ofp.OFPBAC_BAD_OUT_PORT,
            xid,
        )
        assert c.barrier() == []  # each error is reported once
        (reply,) = c.request(p.OFPFlowStatsRequest(c.datapath))
        assert reply.body == []
    result = testbed.ofctl("add-flow", "in_port=1,actions=group:7", check=False)
    assert result.returncode != 0 and "OFPBAC_BAD_OUT_GROUP" in result.stderr
    with pytest.raises(TestbedError, match="OFPBAC_BAD_OUT_GROUP"):
        testbed.ofctl("add-flow", "in_port=1,actions=group:7")


@pytest.mark.parametrize("testbed", [{"n_ports": 1}], indirect=True)
def test_a_wait_for_a_reply_that_never_comes_names_what_it_waited_for(testbed):
    with testbed.controller() as c:
        flow_mod = p.OFPFlowMod(c.datapath, match=p.OFPMatch(), instructions=[])
        with pytest.raises(TestbedError, match=r"0.2 s waiting for the reply to OFPFlowMod \(xid "):
            c.request(flow_mod, timeout_s=0.2)
        assert c.barrier() == []  # the connection is still in step


@pytest.mark.parametrize("testbed", [{"n_ports": 2, "active_controller": True}], indirect=True)
def test_the_switchs_own_controller_connection_gets_packet_ins(testbed):
    with testbed.controller(active=True) as c:
        to_controller = p.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
        c.send(
            p.OFPFlowMod(
                c.datapath, priority=0, match=p.OFPMatch(), instructions=apply(to_controller)
            )
        )
        assert c.barrier() == []
        frame = udp_frame(b"to the controller")
        testbed.send(2, frame)
        packet_in = c.expect(p.OFPPacketIn)
        assert (packet_in.match["in_port"], packet_in.data) == (2, frame)
        assert testbed.receive(timeout_s=0.3) == {1: [], 2: []}


@pytest.mark.parametrize("testbed", [{"n_ports": 2}], indirect=True)
def test_a_tag_the_switch_pushes_is_received_as_on_the_wire(testbed):
    # The kernel moves a received VLAN tag into metadata; the harness puts it back.
    testbed.ofctl(
        "add-flow", "in_port=1,actions=push_vlan:0x8100,set_field:4101->vlan_vid,output:2"
    )
    frame = udp_frame()
    testbed.send(1, frame)
    (tagged,) = testbed.receive(ports=[2])[2]
    # 802.1Q: TPID 0x8100, then PCP 0, DEI 0, VID 5, after the two MAC addresses.
    assert tagged == frame[:12] + bytes.fromhex("81000005") + frame[12:]
    assert Ether(tagged)[Dot1Q].vlan == 5


@pytest.mark.parametrize("body_raises", [False, True], ids=["closed", "test-body-raised"])
def test_closing_leaves_no_interface_process_or_run(tmp_path, body_raises):
    with (
        pytest.raises(RuntimeError, match="test body") if body_raises else contextlib.nullcontext()
    ):
        with SwitchTestbed(n_ports=2, out_dir=tmp_path) as tb:
            names, pid, run = tb.interfaces, tb.pid, tb.run
            assert all(os.path.exists(f"/sys/class/net/{name}") for name in names)
            assert sorted(run.interfaces) == sorted(names) and len(names) == 4
            assert all(len(name) <= 15 for name in names)
            if body_raises:
                raise RuntimeError("test body")
    assert [n for n in names if os.path.exists(f"/sys/class/net/{n}")] == []
    assert registry.proc_start_time(pid) is None
    assert not run.manifest_path.exists()
    assert os.path.exists(tb.log_path)  # the switch's log outlives it
    tb.close()  # a second close is harmless


class BadArgvTestbed(SwitchTestbed):
    def extra_args(self) -> list[str]:
        return super().extra_args() + ["--qos", "{not json"]


def test_a_switch_that_exits_at_start_up_fails_open_with_its_log_and_leaves_nothing(tmp_path):
    tb = BadArgvTestbed(n_ports=1, out_dir=tmp_path)
    with pytest.raises(TestbedError, match="exited .* during start-up") as failed:
        tb.open()
    assert tb.log_path in str(failed.value) and "argument --qos" in str(failed.value)
    assert not any(os.path.exists(f"/sys/class/net/{name}") for name in tb.interfaces)
    assert registry.proc_start_time(tb.pid) is None and not tb.run.manifest_path.exists()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n_ports": 0}, "n_ports"),
        ({"n_ports": 65}, "n_ports"),
        ({"rate_bps": 0}, "rate_bps"),
        ({"tables": 256}, "tables"),
        ({"controllers": ("127.0.0.1",)}, "controllers"),
        ({"controllers": "127.0.0.1:6653"}, "controllers"),
        ({"log_level": "LOUD"}, "log_level"),
        ({"switch": "bmv2"}, "switch"),
    ],
)
def test_a_bad_argument_is_refused_naming_it(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SwitchTestbed(**kwargs)


@pytest.mark.skipif(bool(ovs.missing()), reason=ovs.missing() or "ok")
def test_an_ovs_testbed_forwards_and_leaves_nothing_behind():
    """The reference switch on the same ports: flows by ovs-ofctl, frames through, all gone after."""
    tb = SwitchTestbed(n_ports=2, switch="ovs")
    with tb:
        tb.ofctl("add-flow", "in_port=1,actions=output:2")
        frame = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / UDP())
        tb.send(1, frame)
        assert tb.receive() == {1: [], 2: [frame]}
        with pytest.raises(TestbedError, match="management socket"):
            tb.switch_call("flows")
        pids = [entry["pid"] for entry in tb.run.pids]
        assert len(pids) == 2  # ovsdb-server and ovs-vswitchd
    assert not any(os.path.exists(f"/sys/class/net/{n}") for n in tb.interfaces + [ovs.NETDEV_TAP])
    assert all(registry.proc_start_time(pid) is None for pid in pids)


def test_a_live_switch_s_ports_and_counters_decode_into_their_types(testbed):
    """emu/answers.py against the switch's real answers: what a frame did shows typed."""
    from emu import answers

    testbed.ofctl("add-flow", "in_port=1,actions=output:2")
    testbed.send(1, udp_frame())
    assert testbed.receive()[2] == [udp_frame()]
    ports = {p.port_no: p for p in map(answers.PortStats.decode, testbed.switch_call("ports"))}
    assert sorted(ports) == list(testbed.ports)
    assert ports[1].rx_packets >= 1 and ports[2].tx_packets >= 1
    counters = answers.SwitchCounters.decode(testbed.switch_call("counters"))
    assert counters.queue_tx_packets(0) >= 1 and counters.buffer.size_bytes > 0
    assert counters.watchdog.stormed == frozenset() and counters.lost_frames == {}
    queues = answers.QueueSnapshot.decode(testbed.switch_call("queues"))
    assert sorted(queues.depth_bytes) == list(testbed.ports) and queues.tx_bytes[2] > 0
    live = [answers.LivePort.decode(p) for p in testbed.switch_call("live")["ports"]]
    assert {p.port_no: p.tx_bytes for p in live}[2] == ports[2].tx_bytes
    rows = [answers.TelemetryRow.decode(r) for r in testbed.switch_call("telemetry")]
    assert {r.port for r in rows} == set(testbed.ports) and len(rows[0].depth_bytes) == 8

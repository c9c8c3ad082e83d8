"""Credit-based link flow control on real packets: two NIC agents, one switch, a slow receiver.

h1 sends RoCEv2 to h2, whose host drains its receive buffer at half the link
rate: the overload is at the receiver. With credits, h2 stops returning
credit when its buffer is full, the switch's queue towards h2 waits for
credit, the switch's ingress pool from h1 fills, and the switch stops
returning credit to h1, whose NIC then waits: the whole path backs up to the
sender without a drop and without one PAUSE frame. The captures on both
links show the flow control frames (decoded with Scapy) and, replayed, that
no sender ever went beyond the credit limit captured before its frame.
"""

from __future__ import annotations

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from emu import fabric
from emu.credit_audit import audit
from emu.net import Fabric, wait_for
from emu.proto.layers import IBFlowControl
from emu.pytest_plugin import xfail_if_judged_unfaithful
from emu.telemetry import judge_fidelity, start_capture
from emu.traffic.rdma import RdmaHosts

RATE_BPS = 10_000_000
MESSAGE_BYTES = 600_000
DRAIN_BPS = RATE_BPS / 2
DSCP_TO_VL = {26: 3, 48: 6}


@pytest.fixture(scope="module")
def slow_receiver(tmp_path_factory):
    out = tmp_path_factory.mktemp("credit")
    # Modelled at 1 Gbit/s (time scale 100), as the incast scenario: the NIC's
    # retransmit timeout (67 ms modelled) then outlasts the ~0.3 s that the
    # credit buffers on the path (64 KiB at the switch, 128 KiB at h2) hold
    # at the drain rate, as lossless queues need (emu/host/rnic.py, NicConfig).
    g = fabric.single_switch(hosts=2, rate_bps=RATE_BPS, modelled_rate_bps=1e9)
    with Fabric(g, out_dir=str(out / "emu"), flow_control="credit") as fab:
        caps = {
            h: start_capture(fab, f"s1-eth{i}", out / f"s1-eth{i}.pcap")
            for i, h in ((1, "h1"), (2, "h2"))
        }
        nics = RdmaHosts(fab, ["h1", "h2"], dcqcn=False)
        nics.set("h2", drain_rate_bps=DRAIN_BPS)
        qp = nics.connect("h1", "h2")
        [msg] = nics.post("h1", qp, MESSAGE_BYTES)
        done = []

        def completed():
            done.extend(nics.poll_completions("h1", qp))
            return done

        # 600 kB at the 5 Mbit/s drain: about 1 s; the bound is generous, not a speed check.
        wait_for(completed, 30, "the message to complete through a slow receiver")
        counters = fab.switch_call("s1", "counters")
        stats = {h: nics.stats(h) for h in ("h1", "h2")}
        macs = {p["name"]: p["hw_addr"] for p in fab.switch_call("s1", "ports")}
        for proc in caps.values():
            fab.stop_proc(proc)
        judged = judge_fidelity(fab, out / "judged")
        yield {
            "judged": judged,
            "graph": g,
            "done": done,
            "msg": msg,
            "qp": qp,
            "counters": counters,
            "stats": stats,
            "macs": macs,
            "pcaps": {h: out / f"s1-eth{i}.pcap" for i, h in ((1, "h1"), (2, "h2"))},
        }


def test_message_arrives_whole_without_a_drop_or_a_pause(slow_receiver):
    r = slow_receiver
    assert [c["msg_id"] for c in r["done"]] == [r["msg"]]
    recv = r["stats"]["h2"]["recv"][str(r["qp"])]
    assert recv["rx_bytes"] == MESSAGE_BYTES and recv["out_of_order"] == 0
    send = r["stats"]["h1"]["send"][str(r["qp"])]
    assert send["retransmitted"] == 0 and send["timeouts"] == 0
    c = r["counters"]
    assert c["buffer"]["drops"] == {}, c["buffer"]["drops"]
    assert sum(p["tx_dropped"] + p["rx_dropped"] for p in c["ports"]) == 0
    assert r["stats"]["h2"]["rx_overflow"] == 0
    # No PAUSE anywhere: the switch sent none, the NICs sent none and got none.
    assert sum(c["pfc"]["pfc_tx_frames"].values()) == 0 and c["pfc"]["pause_rx"] == {}
    for h in ("h1", "h2"):
        assert r["stats"][h]["pause_tx"] == 0 and r["stats"][h]["pause_rx"] == 0


def test_the_slow_receiver_backs_up_to_the_sender_through_credits(slow_receiver):
    r = slow_receiver
    links = r["counters"]["credit"]["links"]
    # The switch's port to h2 waited for h2's credit; h1's NIC waited for the switch's.
    # How long depends on h1's NIC sending at the link rate (about 0.17 s: it sends
    # 600 kB at 10 Mbit/s while the last 192 KiB of buffer on the path fill at the
    # 5 Mbit/s drain), so a NIC agent that fell behind is no evidence here.
    with xfail_if_judged_unfaithful(r["judged"]):
        assert links["2"]["3"]["blocked_s"] > 0.1, links["2"]
        assert r["stats"]["h1"]["credit"]["3"]["blocked_s"] > 0.1, r["stats"]["h1"]["credit"]
    for port in ("1", "2"):
        assert links[port]["3"]["overruns"] == 0
    assert r["stats"]["h2"]["credit"]["3"]["overruns"] == 0
    assert r["stats"]["h2"]["credit_overruns"] == 0
    # Both ends of both links sent and received flow control frames.
    for port in ("1", "2"):
        assert r["counters"]["credit"]["fc_tx_frames"][port] > 0
        assert r["counters"]["credit"]["fc_rx_frames"][port] > 0
    for h in ("h1", "h2"):
        assert r["stats"][h]["fc_tx"] > 0 and r["stats"][h]["fc_rx"] > 0


def test_flow_control_frames_decode_in_the_capture(slow_receiver):
    r = slow_receiver
    pkts = rdpcap(str(r["pcaps"]["h2"]))
    fcs = [p for p in pkts if IBFlowControl in p]
    assert fcs, "no flow control frame on the h2 link"
    h2_mac = r["graph"].nodes["h2"]["mac"]
    switch_mac = r["macs"]["s1-eth2"]
    assert {p[Ether].src for p in fcs} == {h2_mac, switch_mac}
    assert {p[IBFlowControl].vl for p in fcs} == {3}
    assert {p[IBFlowControl].op for p in fcs} == {0}
    assert all(p[Ether].type == 0x88B5 and len(p) == 60 for p in fcs)


@pytest.mark.parametrize(
    "link,sender,receiver",
    [("h1", "host", "switch"), ("h2", "switch", "host")],
)
def test_no_sender_exceeds_the_credit_on_the_wire(slow_receiver, link, sender, receiver):
    r = slow_receiver
    host_mac = r["graph"].nodes[link]["mac"]
    switch_mac = r["macs"][f"s1-eth{1 if link == 'h1' else 2}"]
    macs = {"host": host_mac, "switch": switch_mac}
    # Data frames keep the hosts' MACs: towards the host, they are the ones addressed to it.
    to_host = {host_mac} if receiver == "host" else None
    result = audit(r["pcaps"][link], macs[sender], macs[receiver], 3, DSCP_TO_VL, data_to=to_host)
    # Nearly every data frame is checked (those before the first FCTBS/FCCL are not).
    assert result.data_frames > 400 and result.checked > 0.9 * result.data_frames, result
    assert result.violations == 0, result

"""Host NICs for kernel traffic (`Fabric(host_nic_pacing=True)`): a host sends at its link rate.

Without it a host's veth has no rate: a host that sends to two hosts at once
gets twice its link, because each destination's switch port paces on its own.
"""

from __future__ import annotations

import pytest

from emu.net import wait_for
from emu.pytest_plugin import xfail_if_unfaithful
from emu.traffic import iperf

FAN_OUT = [("h1", "h2"), ("h1", "h3")]  # h2 on h1's leaf, h3 behind the spine


def fan_out_mbps(fabric) -> float:
    """h1 sends UDP at its full link rate to two hosts at once; Mbit/s received in all."""
    link_bps = fabric.graph.edges["h1", "leaf1"]["rate_bps"]
    clients = iperf.start_many(
        fabric, FAN_OUT, 4, first_port=5700, udp=True, bitrate=str(link_bps), omit_s=1
    )
    docs = [iperf.finish(fabric, c, timeout_s=40) for c in clients]
    assert not [d["error"] for d in docs if "error" in d]
    return sum(d["end"]["sum_received"]["bits_per_second"] for d in docs) / 1e6


def link_mbps(fabric) -> float:
    return fabric.graph.edges["h1", "leaf1"]["rate_bps"] / 1e6


@pytest.mark.emu_fabric(leaves=2, spines=1, hosts_per_leaf=2, host_nic_pacing=True)
def test_a_paced_host_never_sends_more_than_its_link(fabric):
    got = fan_out_mbps(fabric)
    assert got <= 1.02 * link_mbps(fabric)  # an emulator that fell behind is slower, never faster
    # The fabric's fidelity window began when it converged: it holds the fan-out.
    with xfail_if_unfaithful(fabric, hosts_tolerance=0.2):
        assert 0.8 * link_mbps(fabric) < got
    qdisc = fabric.host_run("h1", ["tc", "qdisc", "show", "dev", "h1-eth0"]).stdout
    assert "tbf" in qdisc and "rate 20Mbit" in qdisc
    # A slow host is slower still; healed, it is back to its paced link, not unpaced.
    fabric.faults.slow_host("h1", factor=4)
    assert "rate 5Mbit" in fabric.host_run("h1", ["tc", "qdisc", "show", "dev", "h1-eth0"]).stdout
    fabric.faults.slow_host("h1", factor=1)
    assert "rate 20Mbit" in fabric.host_run("h1", ["tc", "qdisc", "show", "dev", "h1-eth0"]).stdout


@pytest.mark.emu_fabric(leaves=2, spines=1, hosts_per_leaf=2, host_nic_pacing=False)
def test_an_unpaced_host_gets_a_link_per_destination(fabric):
    # What host_nic_pacing is for: without it the fan-out gets nearly two links.
    got = fan_out_mbps(fabric)
    with xfail_if_unfaithful(fabric, hosts_tolerance=0.25):  # 1.5 of the 2 links it would get
        assert got > 1.5 * link_mbps(fabric)
    assert "tbf" not in fabric.host_run("h1", ["tc", "qdisc", "show", "dev", "h1-eth0"]).stdout


def tcp_congestion(fabric, host: str) -> str:
    argv = ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]
    return fabric.host_run(host, argv, check=True).stdout.strip()


@pytest.mark.emu_fabric(leaves=2, spines=1, hosts_per_leaf=1)
def test_hosts_run_cubic_whatever_the_machine_default(fabric):
    # A namespace inherits the machine's default (BBR on some machines, which
    # against the 16-frame bucket resent 13,000-21,000 segments of a 3 s flow):
    # the fabric pins Linux's default instead, so its TCP is the same anywhere.
    assert [tcp_congestion(fabric, h) for h in ("h1", "h2")] == ["cubic", "cubic"]


@pytest.mark.emu_fabric(leaves=2, spines=1, hosts_per_leaf=1, host_tcp_congestion="reno")
def test_hosts_run_the_congestion_control_asked_for(fabric):
    assert [tcp_congestion(fabric, h) for h in ("h1", "h2")] == ["reno", "reno"]
    # A flow's own socket says which it used (ss -i names it).
    client = iperf.start_many(fabric, [("h1", "h2")], 3, first_port=5710)[0]

    def flow_socket() -> str:
        out = fabric.host_run("h1", ["ss", "-tin", "dport", "=", ":5710"]).stdout
        return out if any(cc in out for cc in ("reno", "cubic", "bbr")) else ""

    seen = wait_for(flow_socket, 10, "h1's iperf3 socket in ss", interval_s=0.05)
    doc = iperf.finish(fabric, client, timeout_s=30)
    assert "error" not in doc
    assert " reno " in f" {seen} " and "cubic" not in seen

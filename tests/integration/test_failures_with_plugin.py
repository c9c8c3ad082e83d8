"""emu's own failure tests, written with its pytest plugin (the `fabric` fixture).

The first test is docs/pytest-plugin.md's first example (the page's examples
run as they are written: test_pytest_plugin_docs.py).
"""

from __future__ import annotations

import time

import pytest

from emu.faults import FaultError
from emu.pytest_plugin import xfail_if_unfaithful
from emu.registry import wait_for


def test_my_job_survives_a_spine_failure(fabric):
    job = fabric.start("ping", src="h1", dst="h4", interval_s=0.02, duration_s=4)
    fabric.faults.link_down("spine1", "leaf2", at=1.0)
    result = job.wait()
    assert result.received > 0.9 * result.sent
    assert result.longest_outage_s < 1.0


def test_flapping_link_never_stops_reachability_for_long(fabric):
    job = fabric.start("ping", src="h1", dst="h4", interval_s=0.02, duration_s=5)
    fabric.faults.flap("spine1", "leaf1", period_s=0.6, count=5, at=0.5)
    result = job.wait()
    assert result.received > 0.8 * result.sent
    assert result.longest_outage_s < 1.0
    downs = [e for e in fabric.faults.events if e["kind"] == "link_down"]
    assert len(downs) == 5
    # The controller took the flapping link out of rotation (damping).
    events = fabric.controller_status()["events"]
    assert any(e["kind"] == "link_damped" for e in events), [e["kind"] for e in events]


def test_lossy_link_loses_about_what_it_was_told(fabric):
    # One spine only carries the traffic, so every packet crosses the lossy link.
    fabric.faults.link_down("spine2", "leaf1")
    fabric.wait_converged(30)
    fabric.faults.lossy_link("spine1", "leaf2", probability=0.3)
    result = fabric.start("ping", src="h1", dst="h4", interval_s=0.01, duration_s=4).wait()
    # Request and reply each cross the link: 1 - 0.7^2 = 51% of pings lost, give or take.
    assert 0.35 < result.lost / result.sent < 0.67


@pytest.mark.emu_fabric(leaves=2, spines=1, hosts_per_leaf=1)
def test_switch_crash_and_restart_is_survived(fabric):
    fabric.faults.kill_switch("spine1")
    assert fabric.ping("h1", "h2", count=2, timeout_s=0.5)[1] == 0  # the only path is gone
    fabric.faults.restart_switch("spine1")
    fabric.wait_converged(30)
    assert fabric.ping("h1", "h2", count=3, interval_s=0.05) == (3, 3)
    kinds = [e["kind"] for e in fabric.faults.events]
    assert kinds == ["switch_killed", "switch_restarted"]


def test_controller_killed_for_ten_seconds_then_back(fabric):
    routes_before = routing_flows(fabric)
    job = fabric.start("ping", src="h1", dst="h4", interval_s=0.05, duration_s=13)
    fabric.faults.kill_controller(at=0.5)
    fabric.faults.restart_controller(at=10.5)
    result = job.wait()
    events = {e["kind"]: e["wall"] for e in fabric.faults.events}
    # Switches keep forwarding with their last flows while the controller is away
    # (from its kill until its successor listens). Which pings those are comes from
    # their replies' times: ping's timer runs late (asked for 50 ms, 56 ms here).
    away = result.lost_between(events["controller_killed"], events["controller_restarted"])
    assert not away, f"pings lost while the controller was away: {away}"
    # ...and the stream's replies bracket the whole absence, so every ping of it was placed.
    assert (
        result.reply_wall[0]
        < events["controller_killed"]
        < events["controller_restarted"]
        < result.reply_wall[-1]
    )
    # ...and the returning controller's resync (delete, then reinstall as hosts are
    # relearned from their traffic) costs at most a short gap.
    assert result.longest_outage_s <= 0.5
    fabric.wait_converged(30)
    # After the restart the tables hold what a fresh controller installs.
    assert routing_flows(fabric) == routes_before
    kinds = [e["kind"] for e in fabric.faults.events]
    assert kinds == ["controller_killed", "controller_restarted"]
    assert fabric.faults.events[1]["t"] - fabric.faults.events[0]["t"] >= 9.9


def routing_flows(fab) -> list[str]:
    """The routing app's flows on every switch, without counters, durations or group ids."""
    import re

    strip = re.compile(r"duration=[^,]*, |n_packets=\d+, n_bytes=\d+, |group:\d+")
    flows = []
    for sw in ("leaf1", "leaf2", "spine1", "spine2"):
        out = fab.ofctl(sw, "dump-flows", "cookie=0x1000000000000000/-1")
        flows += sorted(f"{sw} {strip.sub('', line)}" for line in out.splitlines()[1:])
    return flows


def test_faults_name_what_is_wrong(fabric):
    with pytest.raises(FaultError, match="unknown node 'spine9'"):
        fabric.faults.link_down("spine9", "leaf1")
    with pytest.raises(FaultError, match="no link between 'leaf1' and 'leaf2'"):
        fabric.faults.link_down("leaf1", "leaf2")
    with pytest.raises(FaultError, match="probability=1.5"):
        fabric.faults.lossy_link("spine1", "leaf1", probability=1.5)
    with pytest.raises(FaultError, match="unknown switch 'h1'"):
        fabric.faults.kill_switch("h1")


@pytest.mark.emu_fabric(leaves=2, spines=1, hosts_per_leaf=1)
def test_slow_host_sends_and_receives_at_a_fraction_of_its_link(fabric):
    def mbps(src, dst):
        result = fabric.start("iperf", src=src, dst=dst, duration_s=3, omit_s=1).wait()
        assert result.ok, result.error
        return result.received_mbps

    with pytest.raises(FaultError, match="unknown host 'h9'"):
        fabric.faults.slow_host("h9", factor=2)
    with pytest.raises(FaultError, match="factor=0.5"):
        fabric.faults.slow_host("h1", factor=0.5)
    healthy = mbps("h1", "h2")
    fabric.faults.slow_host("h2", factor=4)
    into_slow, out_of_slow = mbps("h1", "h2"), mbps("h2", "h1")
    fabric.faults.slow_host("h2", factor=1)
    again = mbps("h1", "h2")
    assert [e["factor"] for e in fabric.faults.events if e["kind"] == "slow_host"] == [4, 1]
    link = fabric.graph.edges["h2", "leaf2"]["rate_bps"] / 1e6
    # A busy machine only ever slows a host: the slow host's ceiling holds regardless.
    assert into_slow < 0.3 * link and out_of_slow < 0.3 * link, (into_slow, out_of_slow)
    with xfail_if_unfaithful(fabric, hosts_tolerance=0.2):
        assert healthy > 0.8 * link and again > 0.8 * link, (healthy, again)
        assert into_slow > 0.15 * link and out_of_slow > 0.15 * link, (into_slow, out_of_slow)


def test_nic_faults_start_the_agents_they_need_and_take_at(fabric):
    assert fabric.faults.nics is None  # nothing started any NIC agent
    called = time.time()
    fabric.faults.slow_receiver("h3", drain_rate_bps=1e6, at=0.5)
    returned = time.time()  # h3's agent is up: the call started it
    nics = fabric.faults.nics
    assert sorted(nics.nics) == ["h3"]  # only the agent the fault needs
    wait_for(
        lambda: nics.nics["h3"].call("set")["drain_rate_bps"] == 1e6,
        5,
        "h3's NIC to drain at 1 Mbit/s",
    )
    fabric.faults.stuck_nic("h4")  # another host: its agent joins the same set
    assert fabric.faults.nics is nics and sorted(nics.nics) == ["h3", "h4"]
    assert nics.nics["h4"].call("set")["stuck"] is True
    fabric.faults.stuck_nic("h4", stuck=False)
    slow, stuck, healed = fabric.faults.events
    assert (slow["kind"], stuck["kind"], healed["kind"]) == (
        "slow_receiver",
        "stuck_nic",
        "nic_recovered",
    )
    # Injected half a second after the call (or, had the agent taken longer to
    # start, as soon as it answered), and stamped then.
    due = max(called + 0.5, returned)
    assert called + 0.5 <= slow["wall"] < due + 0.3, (slow["wall"] - called, returned - called)
    with pytest.raises(FaultError, match="unknown host 'spine1'"):
        fabric.faults.stuck_nic("spine1")
    with pytest.raises(FaultError, match="at=-1"):
        fabric.faults.stuck_nic("h1", at=-1)
    assert sorted(nics.nics) == ["h3", "h4"]  # a refused fault started nothing

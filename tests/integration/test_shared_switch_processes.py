"""Switches that share a process (`Fabric(switch_processes=N)`, emu/switch/loop.py).

The fabric must behave as with a process per switch: every switch answers on
its own management socket, forwards, reports its own fidelity record, and
crashes and restarts alone.
"""

from __future__ import annotations

import itertools

import pytest

from emu import fabric as fabric_mod
from emu.net import Fabric, wait_for
from emu.pytest_plugin import xfail_if_unfaithful
from emu.traffic import iperf

SWITCHES = ("leaf1", "leaf2", "spine1", "spine2")


def pids(fab) -> dict[str, int]:
    return {sw: fab.switch_call(sw, "info")["pid"] for sw in SWITCHES}


@pytest.mark.emu_fabric(leaves=2, spines=2, hosts_per_leaf=2, switch_processes=2)
def test_four_switches_in_two_processes_forward_between_every_pair(fabric):
    by_pid = pids(fabric)
    assert len(set(by_pid.values())) == 2, by_pid
    hosts = fabric_mod.hosts(fabric.graph)
    for src, dst in itertools.permutations(hosts, 2):
        assert fabric.ping(src, dst) == (1, 1), (src, dst)
    for sw in SWITCHES:
        record = fabric.switch_call(sw, "fidelity")
        assert record["name"] == sw
        assert record["pid"] == by_pid[sw]
        mates = [s for s in SWITCHES if by_pid[s] == by_pid[sw]]
        assert sorted(record["process_switches"]) == sorted(mates)
        assert record["loop"]["passes"] > 0


@pytest.mark.emu_fabric(leaves=2, spines=2, hosts_per_leaf=1, switch_processes=1)
def test_a_tcp_flow_through_switches_of_one_process_reaches_the_link_rate(fabric):
    """h1 -> h2 crosses leaf1, a spine and leaf2, all served by one loop."""
    rate_bps = fabric.graph.edges["h1", "leaf1"]["rate_bps"]
    doc = iperf.run(fabric, "h1", "h2", 4.0, port=5601)
    assert "error" not in doc, doc.get("error")
    goodput = doc["end"]["sum_received"]["bits_per_second"]
    mss = doc["start"].get("tcp_mss_default", 1448) or 1448
    wire = goodput * (mss + 66) / mss  # frame bits on the wire per goodput bit
    # The smoke scenario's check: TCP reaches >= 0.9 of the link rate (DESIGN.md). It
    # lets 10% go: as much CPU taken from the hosts' TCP could explain a miss.
    with xfail_if_unfaithful(fabric, hosts_tolerance=0.1):
        assert wire >= 0.9 * rate_bps, (wire, rate_bps)


@pytest.mark.emu_fabric(leaves=2, spines=2, hosts_per_leaf=1, switch_processes=2)
def test_a_switch_crashes_and_restarts_alone(fabric):
    before = pids(fabric)
    mate = next(s for s in SWITCHES if s != "spine1" and before[s] == before["spine1"])
    fabric.kill_switch("spine1")
    # Its process goes on serving the other switch, which still answers and forwards.
    assert fabric.switch_call(mate, "info")["pid"] == before["spine1"]
    assert not fabric.switch("spine1").running()
    # The leaves see carrier loss on their next poll (0.1 s) and fail over to spine2.
    wait_for(
        lambda: fabric.ping("h1", "h2", timeout_s=0.5) == (1, 1), 10.0, "h1 to reach h2 via spine2"
    )
    fabric.restart_switch("spine1")
    after = fabric.switch_call("spine1", "info")["pid"]
    assert after not in before.values()  # a process of its own now
    wait_for(
        lambda: fabric.switch("spine1").connected(), 10.0, "spine1 to reconnect to the controller"
    )
    assert fabric.ping("h1", "h2") == (1, 1)
    # Crashed again, now alone in its process, it restarts alone again.
    fabric.kill_switch("spine1")
    assert not fabric.switch("spine1").running()
    fabric.restart_switch("spine1")
    assert fabric.switch_call("spine1", "info")["pid"] not in (*before.values(), after)


def test_a_negative_process_count_is_refused_by_name():
    from emu.registry import FabricError

    with pytest.raises(FabricError, match="switch_processes=-1"):
        Fabric(fabric_mod.leaf_spine(leaves=1, spines=1, hosts_per_leaf=1), switch_processes=-1)

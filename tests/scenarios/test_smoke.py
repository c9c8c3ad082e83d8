"""The smoke scenario's expected outcome on every fabric shape, via `emu run`.

Each check of the scenario (LLDP found every link, 0% loss on all-pairs ping,
TCP >= 90% of the link rate, pacing within rate + burst, ECMP over more than
one first hop and, with tiers, more than one top-tier switch, the cut link
on the pings' path, reachability after the cut) is asserted by name, so that
a broken point fails here with its value. The GPU-cluster shapes run at the
smallest size that still has two disjoint first hops between the chosen pair.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from . import FLAT_SMOKE_CHECKS, LEAF_SPINE_CHECKS, ROOT, assert_checks, emu_run


def test_smoke_leaf_spine_2_spines_4_leaves(tmp_path, no_leaks):
    # Unpaced hosts: the sender's kernel sends as fast as it can, so "pacing:
    # never above link rate + burst" checks the switches' pacing alone (with
    # host NIC pacing, the default, the sender's token bucket would pace it).
    res, metrics = emu_run(
        tmp_path / "out", "smoke", "hosts_per_leaf=1", "iperf_s=4", "host_nic_pacing=false"
    )
    assert_checks(res, metrics, LEAF_SPINE_CHECKS)
    assert (
        metrics["metrics"]["fabric"]["switches"] == 6
        and metrics["metrics"]["fabric"]["switch_links"] == 8
    )
    # Every flow's first hop is the switches' traced answer, and together they hold all 16.
    ecmp = metrics["metrics"]["ecmp"]
    assert ecmp["traced_flows"] == 16 and sum(ecmp["flows_per_first_hop"].values()) == 16
    assert sum(ecmp["flows_per_top_switch"].values()) == 16
    # The report is what the user reads: the tables and the when of the failure.
    assert "link leaf1-spine" in res.stdout and "longest outage ms" in res.stdout


@pytest.mark.slow
def test_smoke_fat_tree_k4(tmp_path, no_leaks):
    res, metrics = emu_run(
        tmp_path / "out", "smoke", "topology=fat_tree", "k=4", "iperf_s=3", "ping_count=1"
    )
    assert_checks(res, metrics, LEAF_SPINE_CHECKS)
    assert (
        metrics["metrics"]["fabric"]["switches"] == 20
        and metrics["metrics"]["fabric"]["hosts"] == 16
    )
    assert metrics["metrics"]["ping"]["all-pairs ping"]["pairs"] == 16 * 15


def test_smoke_torus_3x3(tmp_path, no_leaks):
    res, metrics = emu_run(
        tmp_path / "out",
        "smoke",
        "topology=torus",
        "dims=3x3",
        "hosts_per_leaf=1",
        "iperf_s=3",
        "ping_count=1",
    )
    assert_checks(res, metrics, FLAT_SMOKE_CHECKS)
    m = metrics["metrics"]
    assert m["fabric"]["switches"] == 9 and m["fabric"]["switch_links"] == 18
    # h1 (t0_0) to h9 (t2_2): across both dimensions, wraparound links first.
    assert sorted(m["ecmp"]["bytes_per_first_hop"]) == ["t0_2", "t2_0"]
    assert m["link_failure"]["link"][0] == "t0_0"


def test_smoke_dragonfly_3_groups_of_2(tmp_path, no_leaks):
    res, metrics = emu_run(
        tmp_path / "out",
        "smoke",
        "topology=dragonfly",
        "groups=3",
        "routers_per_group=2",
        "hosts_per_leaf=1",
        "iperf_s=3",
        "ping_count=1",
    )
    assert_checks(res, metrics, FLAT_SMOKE_CHECKS)
    m = metrics["metrics"]
    assert m["fabric"]["switches"] == 6 and m["fabric"]["switch_links"] == 6
    # h1 (g1r1) to h6 (g3r2): local-global-local or global-local-global, 3 hops each.
    assert sorted(m["ecmp"]["bytes_per_first_hop"]) == ["g1r2", "g2r2"]


def test_smoke_rail_optimized_2_nodes_2_gpus_2_spines(tmp_path, no_leaks):
    res, metrics = emu_run(
        tmp_path / "out",
        "smoke",
        "topology=rail_optimized",
        "nodes=2",
        "gpus_per_node=2",
        "spines=2",
        "iperf_s=3",
        "ping_count=1",
    )
    assert_checks(
        res,
        metrics,
        LEAF_SPINE_CHECKS
        + ["NVLink ping: 0% loss inside every node", "NVLink ping: through the NVSwitches"],
    )
    m = metrics["metrics"]
    # 2 rail leaves, 2 spines and an NVSwitch per node; each GPU learned at two addresses
    assert m["fabric"]["switches"] == 6 and m["fabric"]["hosts"] == 4
    assert m["fabric"]["host_addresses"] == 8
    assert m["ping"]["NVLink ping"]["pairs"] == 2 * 2
    # h1 (node 1, rail 1) to h4 (node 2, rail 2): between rails, over the spines.
    assert sorted(m["ecmp"]["bytes_per_top_switch"]) == ["spine1", "spine2"]


def test_bad_parameter_is_a_clear_error_without_root_work(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "emu.cli",
            "run",
            "smoke",
            "--set",
            "k=3",
            "--set",
            "topology=fat_tree",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 2
    assert "k=3" in res.stderr and "Traceback" not in res.stderr

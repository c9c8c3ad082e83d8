"""The smoke scenario's expected outcome on both fabric shapes, via `emu run`.

Each check of the scenario (LLDP found every link, 0% loss on all-pairs ping,
TCP >= 90% of the link rate, pacing within rate + burst, ECMP over more than
one spine, reachability after a link failure) is asserted by name, so that a
broken point fails here with its value.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from . import LEAF_SPINE_CHECKS, ROOT, assert_checks, emu_run


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

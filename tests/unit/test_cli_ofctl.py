"""`emu ofctl`: the errors a user meets before ovs-ofctl runs (no root, no fabric)."""

from __future__ import annotations

import argparse

import pytest

from emu import cli, ofctl, registry
from emu.scenario import ScenarioError


def args(switch: str = "leaf1") -> argparse.Namespace:
    return argparse.Namespace(switch=switch, command="dump-flows", args=[], run=None)


def test_no_running_fabric_is_named(monkeypatch):
    monkeypatch.setattr(registry, "live_runs", lambda: [])
    with pytest.raises(ScenarioError, match="no running fabric"):
        cli.cmd_ofctl(args())


def test_an_unknown_switch_is_named_with_the_running_ones(monkeypatch, tmp_path):
    for name in ("leaf1.sock", "spine1.sock", "h1.nic.sock"):
        (tmp_path / name).touch()
    run = registry.Run("r1", 1, None, 0.0, str(tmp_path), str(tmp_path))
    monkeypatch.setattr(registry, "live_runs", lambda: [run])
    with pytest.raises(ScenarioError, match=r"unknown switch 'leaf9'; running: leaf1, spine1$"):
        cli.cmd_ofctl(args("leaf9"))


def test_ofctl_names_a_missing_ovs_ofctl_and_an_empty_command(monkeypatch):
    with pytest.raises(ValueError, match="name the ovs-ofctl command"):
        ofctl.run(("127.0.0.1", 6653), [])
    monkeypatch.setattr(ofctl.shutil, "which", lambda _name: None)
    with pytest.raises(ofctl.OfctlError, match="ovs-ofctl not found"):
        ofctl.run(("127.0.0.1", 6653), ["dump-flows"])


def test_ofctl_takes_a_switch_address_or_a_target_as_it_is(monkeypatch):
    """A (host, port) listener becomes tcp:HOST:PORT; an OVS bridge's management socket
    (the forwarding bench's) goes as it is, with the environment of its daemons."""
    ran = []

    def fake_run(argv, **kw):
        ran.append((argv, kw.get("env")))
        return ofctl.subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(ofctl.shutil, "which", lambda _name: "/usr/bin/ovs-ofctl")
    monkeypatch.setattr(ofctl.subprocess, "run", fake_run)
    ofctl.run(("127.0.0.1", 6653), ["add-flow", "actions=drop"])
    ofctl.run("/run/x/br1.mgmt", ["del-flows"], env={"OVS_RUNDIR": "/run/x"})
    assert ran == [
        (["ovs-ofctl", "-O", "OpenFlow13", "add-flow", "tcp:127.0.0.1:6653", "actions=drop"], None),
        (
            ["ovs-ofctl", "-O", "OpenFlow13", "del-flows", "/run/x/br1.mgmt"],
            {"OVS_RUNDIR": "/run/x"},
        ),
    ]

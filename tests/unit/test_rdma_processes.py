"""How many processes serve a set of NICs: checked before anything starts."""

from __future__ import annotations

import pytest

from emu.host import agent
from emu.traffic import rdma


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_a_bad_emu_nic_processes_is_named(monkeypatch, bad):
    monkeypatch.setenv(rdma.NIC_PROCESSES_ENV, bad)
    with pytest.raises(ValueError, match="EMU_NIC_PROCESSES|nic_processes"):
        rdma.RdmaHosts(None, [])


def test_a_negative_nic_processes_is_refused_before_the_fabric_is_touched():
    with pytest.raises(ValueError, match="nic_processes=-2"):
        rdma.RdmaHosts(None, [], nic_processes=-2)


def test_an_unknown_loss_recovery_is_refused_before_the_fabric_is_touched():
    with pytest.raises(ValueError, match="loss_recovery='ooo'.*go-back-n, go-back-0, selective"):
        rdma.RdmaHosts(None, [], loss_recovery="ooo")


def test_the_agent_takes_the_reordering_nic_and_its_window():
    # RdmaHosts(loss_recovery=...) hands its choice to each agent as --loss-recovery.
    base = ["--name", "h1", "--intf", "h1-eth0", "--mac", "02:00:00:00:00:01"]
    base += ["--ip", "10.0.0.1", "--rate-bps", "20000000", "--mgmt", "/tmp/x.sock"]
    args = agent._parser().parse_args(base)
    assert (args.loss_recovery, args.ooo_window_packets) == ("go-back-n", 512)
    args = agent._parser().parse_args(
        base + ["--loss-recovery", "selective", "--ooo-window-packets", "64"]
    )
    assert (args.loss_recovery, args.ooo_window_packets) == ("selective", 64)

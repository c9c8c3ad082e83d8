"""How many processes serve a set of NICs: checked before anything starts."""

from __future__ import annotations

import pytest

from emu.traffic import rdma


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_a_bad_emu_nic_processes_is_named(monkeypatch, bad):
    monkeypatch.setenv(rdma.NIC_PROCESSES_ENV, bad)
    with pytest.raises(ValueError, match="EMU_NIC_PROCESSES|nic_processes"):
        rdma.RdmaHosts(None, [])


def test_a_negative_nic_processes_is_refused_before_the_fabric_is_touched():
    with pytest.raises(ValueError, match="nic_processes=-2"):
        rdma.RdmaHosts(None, [], nic_processes=-2)

"""Integration tests: real fabrics, real frames. Shared here: the RDMA tests' fabric."""

from __future__ import annotations

import pytest

RDMA_RATE_BPS = 10_000_000
RDMA_NIC_BPS = 25e9  # the NIC model stands for the HPCC/DCQCN ns-3 25 Gbit/s NIC


def rdma_fabric(leaves: int, hosts_per_leaf: int, **extra):
    """The `emu_fabric` marker of the RDMA tests: 2 spines, 10 Mbit/s links standing
    for 25 Gbit/s NICs (the fabric's time scale), plus `extra` (e.g. apps=...)."""
    return pytest.mark.emu_fabric(
        leaves=leaves,
        spines=2,
        hosts_per_leaf=hosts_per_leaf,
        host_rate_bps=RDMA_RATE_BPS,
        modelled_rate_bps=RDMA_NIC_BPS,
        **extra,
    )


def hosts_of(n: int) -> list[str]:
    return [f"h{i}" for i in range(1, n + 1)]

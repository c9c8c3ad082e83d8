"""The verbs-like API end to end: SEND and RDMA WRITE between NIC agents over a real fabric."""

from __future__ import annotations

import pytest

from emu import fabric
from emu.net import Fabric, wait_for
from emu.traffic.rdma import RdmaHosts


@pytest.fixture(scope="module")
def rdma(tmp_path_factory):
    g = fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1)
    with Fabric(g, out_dir=str(tmp_path_factory.mktemp("rdma"))) as fab:
        yield fab, RdmaHosts(fab, ["h1", "h2"])


def test_send_and_write_complete_at_line_rate_beside_kernel_traffic(rdma):
    fab, nics = rdma
    qp = nics.connect("h1", "h2")
    sends = nics.post("h1", qp, 500_000)
    writes = nics.post_write("h1", qp, 250_000, remote_va=0x7F000000, rkey=7)
    done = []

    def all_done():
        done.extend(nics.poll_completions("h1", qp))
        return len(done) == 2

    wait_for(all_done, 20, "both work requests to complete")
    assert [c["msg_id"] for c in done] == sends + writes
    recv = nics.stats("h2")["recv"][str(qp)]
    assert recv["rx_bytes"] == 750_000 and recv["messages_received"] == 2
    assert recv["out_of_order"] == 0
    # 750 kB of payload (plus headers) at 20 Mbit/s takes at least 0.3 s.
    assert done[-1]["latency_s"] >= 0.3
    assert nics.poll_completions("h1", qp) == []  # each completion is polled once
    # Kernel traffic shares the hosts and the links on the lossy class.
    assert fab.ping("h1", "h2", count=3, interval_s=0.05) == (3, 3)


def test_unknown_queue_pair_is_a_named_error(rdma):
    _, nics = rdma
    from emu.mgmt import MgmtError

    with pytest.raises(MgmtError, match="unknown QP 999"):
        nics.post("h1", 999, 1000)

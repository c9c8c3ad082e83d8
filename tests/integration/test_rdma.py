"""The verbs-like API end to end: SEND and RDMA WRITE between NIC agents over a real fabric."""

from __future__ import annotations

import pytest

from emu import fabric
from emu.net import Fabric, wait_for
from emu.pytest_plugin import xfail_if_unfaithful
from emu.traffic.rdma import RdmaHosts


@pytest.fixture(scope="module")
def rdma(tmp_path_factory):
    g = fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1, modelled_rate_bps=25e9)
    with Fabric(g, out_dir=str(tmp_path_factory.mktemp("rdma")), host_nic_pacing=True) as fab:
        yield fab, RdmaHosts(fab, ["h1", "h2"])


def test_send_and_write_complete_at_line_rate_beside_kernel_traffic(rdma):
    fab, nics = rdma
    # The NIC agents run the compiled engine by default (emu/host/nicpath.py),
    # a process each (RdmaHosts' nic_processes, DEFAULT_NIC_PROCESSES).
    assert {nics.nics[h].call("info")["engine"] for h in ("h1", "h2")} == {"c"}
    assert nics.nics["h1"].proc.pid != nics.nics["h2"].proc.pid
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


def tbf_sent_bytes(fab, host: str) -> int:
    out = fab.host_run(host, ["tc", "-s", "qdisc", "show", "dev", f"{host}-eth0"]).stdout
    assert "tbf" in out, out
    return int(out.split("Sent ", 1)[1].split(" bytes", 1)[0])


def test_the_nic_model_bypasses_the_hosts_qdisc(rdma):
    # The kernel's traffic is paced by a tbf on the host's interface; the NIC
    # model paces itself and must stop at once on PAUSE, so its frames skip it
    # (PACKET_QDISC_BYPASS). Throttle the tbf to 1/20 of the link: a write
    # through it would take 20 times longer, and the tbf would count its bytes.
    fab, nics = rdma
    link_bps = fab.graph.edges["h1", "leaf1"]["rate_bps"]
    fab.set_host_tx_rate("h1", link_bps / 20)
    try:
        before = tbf_sent_bytes(fab, "h1")
        qp = nics.connect("h1", "h2")
        done = []

        def completed():
            done.extend(nics.poll_completions("h1", qp))
            return done

        fab.reset_fidelity()  # the write's own stretch, judged below
        [write] = nics.post_write("h1", qp, 500_000, remote_va=0x7F000000, rkey=7)
        wait_for(completed, 20, "the write to complete")
        assert done[0]["msg_id"] == write
        assert tbf_sent_bytes(fab, "h1") - before < 50_000  # ARP and the like, not 500 kB
        # The write's time is the NIC agents' to keep: an agent that fell behind
        # its link (a busy machine) is no evidence either way.
        with xfail_if_unfaithful(fab):
            at_link_s = 500_000 * 8 / link_bps
            assert done[0]["latency_s"] < 2 * at_link_s  # through the tbf: 20 x at_link_s
    finally:
        fab.set_host_tx_rate("h1", None)


def test_unknown_queue_pair_is_a_named_error(rdma):
    _, nics = rdma
    from emu.mgmt import MgmtError

    with pytest.raises(MgmtError, match="unknown QP 999"):
        nics.post("h1", 999, 1000)

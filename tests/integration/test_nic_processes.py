"""Several hosts' NICs in one process: one C loop serves them, each keeps its own namespace.

`RdmaHosts(nic_processes=1)` starts one agent process for four hosts
(emu/host/agent.py `group_main`): each NIC's socket lives in its own host's
network namespace, each answers on its own management socket, and RDMA
between them crosses the fabric as from separate processes.
"""

from __future__ import annotations

import pytest

from emu import fabric, fidelity
from emu.host import nicpath
from emu.net import Fabric, wait_for
from emu.traffic.rdma import RdmaHosts

pytestmark = pytest.mark.skipif(nicpath._nicpath is None, reason="emu.host._nicpath not built")


def thp_enabled(pid: int) -> str:
    """The THP_enabled line of /proc/PID/status: "0" once PR_SET_THP_DISABLE is set."""
    with open(f"/proc/{pid}/status") as f:
        return next(line.split()[1] for line in f if line.startswith("THP_enabled:"))


def test_four_nics_in_one_process_carry_rdma_across_the_fabric(tmp_path, monkeypatch):
    monkeypatch.delenv("EMU_NIC", raising=False)
    g = fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=2, modelled_rate_bps=25e9)
    with Fabric(g, out_dir=str(tmp_path)) as fab:
        hosts = ["h1", "h2", "h3", "h4"]
        nics = RdmaHosts(fab, hosts, nic_processes=1)
        assert len({nics.nics[h].proc.pid for h in hosts}) == 1
        # No 2 MB page zeroed on a collective's first touch (agent.keep_page_faults_small).
        assert thp_enabled(nics.nics["h1"].proc.pid) == "0"
        infos = {h: nics.nics[h].call("info") for h in hosts}
        assert {i["engine"] for i in infos.values()} == {"c"}
        assert [infos[h]["ip"] for h in hosts] == [fab.graph.nodes[h]["ip"] for h in hosts]
        qps = [nics.connect("h1", "h3"), nics.connect("h4", "h2")]
        sends = [nics.post("h1", qps[0], 300_000), nics.post("h4", qps[1], 200_000)]
        done = {0: [], 1: []}

        def complete():
            done[0] += nics.poll_completions("h1", qps[0])
            done[1] += nics.poll_completions("h4", qps[1])
            return len(done[0]) == 1 and len(done[1]) == 1

        wait_for(complete, 30, "both messages to complete")
        assert [c["msg_id"] for c in done[0]] == sends[0]
        assert nics.stats("h3")["recv"][str(qps[0])]["rx_bytes"] == 300_000
        assert nics.stats("h2")["recv"][str(qps[1])]["rx_bytes"] == 200_000
        # The frames crossed the switches: h1 and h3 sit on different leaves.
        leaf1_tx = sum(p["tx_packets"] for p in fab.switch_call("leaf1", "ports"))
        assert leaf1_tx >= 300_000 // 1024
    records = fidelity.records_of([("", fab.fidelity_document)])
    nic_records = [r for _, r in records if r["kind"] == "nic"]
    assert sorted(r["name"] for r in nic_records) == hosts
    assert len({r["pid"] for r in nic_records}) == 1

"""The reordering NIC ("selective") against the strict one on a fabric that reorders.

No per-packet adaptive routing is needed to reorder a QP's packets: emu's
switch-local adaptive routing (flowlet SELECT groups, emu/switch/flowlet.py)
with a flowlet gap of 1 us, shorter than any frame time, starts a flowlet on
every packet, each on the uplink with the fewest bytes queued. The two paths
from leaf1 to leaf2 run at 1/2 and 1/4 of the host link, so a single RDMA
flow from h1 to h2 fills both and its packets take paths of different delay:
the later ones overtake the earlier ones, tens of PSNs deep, with nothing lost
(the lossless class, PFC).

      spine1 (10 Mbit/s links)   spine2 (5 Mbit/s links)
           \\    /                    \\    /
           leaf1  ----------------   leaf2
             |                          |
            h1 (20 Mbit/s) --- QP --->  h2

The same 1 MB SEND, each mode on a fresh fabric: the strict NIC (go-back-n)
NAKs the reorderings and the requester goes back N, resending what was only
overtaken; the reordering NIC places every packet and NAKs nothing.
"""

from __future__ import annotations

import time

import pytest

from emu import fabric
from emu.net import Fabric, wait_for
from emu.traffic.rdma import RdmaHosts

SIZE_BYTES = 1_000_000


def run_one(tmp_path, mode: str) -> dict:
    """One fabric, one 1 MB SEND h1 -> h2 on NICs of `mode`; the counters it left."""
    g = fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1)
    rate = g.edges["h1", "leaf1"]["rate_bps"]
    for leaf in ("leaf1", "leaf2"):
        g.edges[leaf, "spine1"]["rate_bps"] = rate // 2
        g.edges[leaf, "spine2"]["rate_bps"] = rate // 4
    # A flowlet gap shorter than a frame: every packet picks the least-queued uplink.
    args = ("--flowlet-gap-us", "1")
    with Fabric(g, out_dir=str(tmp_path / mode), controller_args=args) as fab:
        nics = RdmaHosts(fab, ["h1", "h2"], loss_recovery=mode)
        assert nics.nics["h2"].call("info")["loss_recovery"] == mode
        qp = nics.connect("h1", "h2")
        started = time.monotonic()
        nics.post("h1", qp, SIZE_BYTES)
        done: list = []
        wait_for(
            lambda: done.extend(nics.poll_completions("h1", qp)) or done,
            120,
            f"the 1 MB SEND to complete ({mode})",
        )
        return {
            "seconds": time.monotonic() - started,
            "send": nics.stats("h1")["send"][str(qp)],
            "recv": nics.stats("h2")["recv"][str(qp)],
            "bucket_changes": fab.switch_call("leaf1", "counters")["flowlets"]["bucket_changes"],
        }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("reordering")
    return {mode: run_one(out, mode) for mode in ("selective", "go-back-n")}


def test_the_fabric_reorders_a_single_queue_pair(runs):
    for mode, run in runs.items():
        assert run["bucket_changes"] > 100, mode  # packets alternated between the paths
        assert run["recv"]["rx_bytes"] == SIZE_BYTES and run["recv"]["messages_received"] == 1


def test_the_reordering_nic_places_everything_and_naks_nothing(runs):
    send, recv = runs["selective"]["send"], runs["selective"]["recv"]
    assert recv["out_of_order"] > 100 and recv["reorder_depth_max"] >= 4
    assert recv["naks_sent"] == send["naks"] == 0
    assert send["retransmitted"] == send["timeouts"] == 0
    assert send["tx_packets"] == recv["rx_packets"] == -(-SIZE_BYTES // 1024)


def test_the_strict_nic_naks_the_reorderings_and_goes_back_n(runs):
    send, recv = runs["go-back-n"]["send"], runs["go-back-n"]["recv"]
    ok = runs["selective"]["send"]
    # Nothing was lost (a lossless class): every NAK and every resend is a reordering's.
    assert send["naks"] == recv["naks_sent"] > 10
    assert send["retransmitted"] > send["naks"] and recv["duplicates"] > 0
    assert send["tx_packets"] > 2 * ok["tx_packets"]  # the go-back-N storm

"""The reordering NIC ("selective") against the strict one on fabrics that reorder.

One RDMA flow h1 -> h2 whose packets the fabric spreads over both spines, so
that later packets overtake earlier ones, with nothing lost (the lossless
class, PFC). Two ways to spread it:

- "adaptive": the switches' per-packet adaptive routing (`Fabric(graph,
  adaptive_routing="3")`, emu/switch/adaptive.py): each RoCE packet takes the
  uplink with the fewest bytes queued; the paths run at 1/2 and 1/4 of the
  host link, so the flow needs both and they differ in delay. (Over two
  equal paths AR sprays evenly, ties rotating per packet, and a packet seldom
  overtakes another: 4 out of order in 977.)
- "flowlet": no per-packet AR at all: flowlet SELECT groups
  (emu/switch/flowlet.py) with a 1 us gap, shorter than any frame time, start
  a flowlet on every packet, on the least-queued uplink; the two paths run at
  1/2 and 1/4 of the host link, so they differ in delay and the reordering is
  deep.

      spine1            spine2
         |   \\        /   |
         |     leaf1 ... leaf2
         |       |         |
                h1 --QP--> h2   (20 Mbit/s host links)

The same 1 MB SEND, each NIC mode on a fresh fabric: the strict NIC
(go-back-n, the default) NAKs the reorderings and its requester goes back N,
resending what was only overtaken; the reordering NIC places every packet
and NAKs nothing.
"""

from __future__ import annotations

import time

import pytest

from emu import fabric
from emu.net import Fabric, wait_for
from emu.traffic.rdma import RdmaHosts

SIZE_BYTES = 1_000_000
HOST_BPS = 20_000_000
MODES = ("selective", "go-back-n")


def spray(how: str) -> tuple:
    """(graph, Fabric's options) of a fabric that spreads one flow per packet, `how`."""
    g = fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1, host_rate_bps=HOST_BPS)
    for leaf in ("leaf1", "leaf2"):
        g.edges[leaf, "spine1"]["rate_bps"] = HOST_BPS // 2
        g.edges[leaf, "spine2"]["rate_bps"] = HOST_BPS // 4
    if how == "adaptive":
        return g, {"adaptive_routing": "3"}
    # A flowlet gap shorter than a frame: every packet picks the least-queued uplink.
    return g, {"controller_args": ("--flowlet-gap-us", "1")}


def run_one(out_dir: str, how: str, mode: str) -> dict:
    """One fabric, one 1 MB SEND h1 -> h2 on NICs of `mode`; the counters it left."""
    g, options = spray(how)
    with Fabric(g, out_dir=out_dir, **options) as fab:
        nics = RdmaHosts(fab, ["h1", "h2"], loss_recovery=mode)
        assert nics.nics["h2"].call("info")["loss_recovery"] == mode
        qp = nics.connect("h1", "h2")
        started = time.monotonic()
        nics.post("h1", qp, SIZE_BYTES)
        done: list = []
        wait_for(
            lambda: done.extend(nics.poll_completions("h1", qp)) or done,
            120,
            f"the 1 MB SEND to complete ({how}, {mode})",
        )
        seconds = time.monotonic() - started
        if how == "flowlet":
            moved = fab.switch_call("leaf1", "counters")["flowlets"]["bucket_changes"]
        else:  # the packets leaf1 placed on its less used uplink
            picks = fab.counters("leaf1").adaptive.picks
            moved = min(picks.values()) if len(picks) == 2 else 0
        run = {
            "seconds": seconds,
            "send": nics.stats("h1")["send"][str(qp)],
            "recv": nics.stats("h2")["recv"][str(qp)],
            "moved": moved,
        }
    s, r = run["send"], run["recv"]
    print(
        f"{how} {mode}: {run['seconds']:.2f} s, sent {s['tx_packets']}, resent "
        f"{s['retransmitted']}, NAKs {s['naks']}, timeouts {s['timeouts']}; received out of "
        f"order {r['out_of_order']}, deepest {r['reorder_depth_max']}, duplicates {r['duplicates']}"
    )
    return run


@pytest.fixture(scope="module", params=["adaptive", "flowlet"])
def runs(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"reordering-{request.param}")
    return {mode: run_one(str(out / mode), request.param, mode) for mode in MODES}


def test_the_fabric_spreads_a_single_queue_pair_and_loses_nothing(runs):
    for mode, run in runs.items():
        assert run["moved"] > 100, mode  # packets went both ways, per packet
        assert run["recv"]["rx_bytes"] == SIZE_BYTES and run["recv"]["messages_received"] == 1


def test_the_reordering_nic_places_everything_and_naks_nothing(runs):
    send, recv = runs["selective"]["send"], runs["selective"]["recv"]
    assert recv["out_of_order"] > 20 and recv["reorder_depth_max"] >= 2
    assert recv["naks_sent"] == send["naks"] == 0
    assert send["retransmitted"] == send["timeouts"] == 0
    assert send["tx_packets"] == recv["rx_packets"] == -(-SIZE_BYTES // 1024)


def test_the_strict_nic_naks_the_reorderings_and_goes_back_n(runs):
    send, recv = runs["go-back-n"]["send"], runs["go-back-n"]["recv"]
    ok = runs["selective"]["send"]
    # Nothing was lost (a lossless class): every NAK and every resend is a reordering's.
    assert send["naks"] == recv["naks_sent"] > 10
    assert send["retransmitted"] > send["naks"] and recv["duplicates"] > 0
    assert send["tx_packets"] > 1.5 * ok["tx_packets"]  # the go-back-N storm

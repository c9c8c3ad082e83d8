"""livelock: 1 RoCEv2 packet in 256 lost on one link; go-back-N keeps going, go-back-0 stops.

      spine1
      /    \\
   leaf1   leaf2
     |       |  x  <- leaf2 loses every 256th RoCEv2 frame it sends to h2
     h1 ---------> h2   RDMA WRITEs of 1 MiB (1024 packets) back to back

Guo et al., "RDMA over Commodity Ethernet at Scale" (SIGCOMM 2016), section
4 ("RDMA transport livelock"): their switches dropped the packets whose IP ID
ended in 0xff, one in every 256 of a sender, and the NICs, whose firmware
restarted a message from its first packet on a NAK (go-back-0), delivered
nothing at all while the link ran at full rate; with go-back-N (resend from
the first missing packet) they kept going. The same fabric runs once per NIC
setting (`emu/host/rnic.py`, `loss_recovery`), each on a fresh fabric, with
emu's lossy-link fault in its deterministic form (`Faults.lossy_link(...,
every=256)`: exactly every 256th RoCEv2 frame the port sends; `drop=random`
loses each with probability 1/256 instead). Goodput is the application's:
bytes of WRITEs completed, from the sender's completions.

The two models behind the checks, with p = 1/drop_every:
- go-back-N efficiency 1 - p*L (Bertsekas & Gallager, "Data Networks",
  2nd ed., section 2.4: each error costs the frames of one NAK loop;
  emu/models/loss_recovery.py): every
  lost frame costs itself and the L - 1 frames sent behind it before the NAK
  rewinds the sender; L is measured (frames resent per NAK), so the check
  says whether losses cost one loop each, at the rate the fault drops;
- go-back-0 delivers a message of M packets only when all M arrive in one
  attempt: probability q = (1 - p)^M for random loss, and q = 0 for M >=
  drop_every under the deterministic drop (every window of drop_every
  frames holds a drop): the livelock. Over A attempts (one per NAK or
  timeout, plus the successes) at most A*q + 3 sigma messages get through
  (binomial), i.e. none under the deterministic drop.

The pcaps (one per mode, of the sender's link: every data frame it sent and
every ACK and NAK it got) show the NAKs: go-back-N's name the lost PSN,
go-back-0's a message's first.

Run:  emu run livelock
      emu run livelock --set drop=random --set message_bytes=4194304
"""

from __future__ import annotations

import math
import threading
import time

from emu import fabric as fabric_mod
from emu.answers import SendQp
from emu.figures import Entry, per_key
from emu.host.rnic import DEFAULT_MTU_PAYLOAD, GO_BACK_0, GO_BACK_N, LOSS_RECOVERY
from emu.models.loss_recovery import go_back_n_floor
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    choices,
    fabric_options,
    fabric_params,
)
from emu.telemetry import Panel, save_panels, start_capture
from emu.traffic.rdma import RdmaHosts

DESCRIPTION = "1 RoCEv2 packet in 256 lost: go-back-N keeps going, go-back-0 livelocks"

DROPS = ("every", "random")
SAMPLE_S = 0.25  # completions and counters sampling period
REMOTE_VA, RKEY = 0x7F000000, 7

PARAMS = {
    # Time scale 1 (modelled_gbps 0): the NICs' retransmit timeout is the IB
    # local ACK timeout of 67 ms or the fabric's lossless buffer bound
    # (emu/host/rto.py), whichever is longer: 0.38 s here, short beside the run.
    **fabric_params(rate_mbps=20.0),
    "leaves": Param(2, "leaf switches (leaf_spine)", min=1, max=32),
    "spines": Param(1, "spine switches (leaf_spine)", min=1, max=16),
    "hosts_per_leaf": Param(1, "hosts per leaf (leaf_spine)", min=1, max=32),
    "message_bytes": Param(
        1 << 20, "size of each RDMA WRITE (Guo et al. sent 4 MB)", min=1024, max=64 << 20
    ),
    "drop_every": Param(
        256, "one RoCEv2 packet in this many is lost on the receiver's link", min=2, max=1 << 20
    ),
    "drop": Param(
        "every",
        "every: exactly every drop_every-th RoCEv2 frame (the paper's IP ID rule); "
        "random: each with probability 1/drop_every",
        choices=DROPS,
    ),
    "duration_s": Param(8.0, "how long each NIC setting runs", min=2.0, max=600.0),
    "modes": Param(",".join(LOSS_RECOVERY), "NIC loss recovery settings to run"),
}


def validate(params: dict) -> None:
    choices(params, "modes", LOSS_RECOVERY)
    packets = packets_per_message(params)
    if params["drop"] == "every" and packets < params["drop_every"]:
        raise ScenarioError(
            f"parameter message_bytes={params['message_bytes']}: {packets} packets, fewer than "
            f"drop_every={params['drop_every']}; the livelock needs messages longer than "
            "the drop interval (or drop=random)"
        )
    graph = build_fabric_graph(params)
    if len(fabric_mod.hosts(graph)) < 2:
        raise ScenarioError("the fabric needs two hosts (leaves * hosts_per_leaf >= 2)")


def packets_per_message(params: dict) -> int:
    return -(-params["message_bytes"] // DEFAULT_MTU_PAYLOAD)


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    hosts = fabric_mod.hosts(graph)
    sender, receiver = hosts[0], hosts[-1]
    leaf = graph.nodes[receiver]["leaf"]
    ctx.metrics.update(sender=sender, receiver=receiver, lossy_link=f"{leaf}->{receiver}")
    results = {}
    for mode in p["modes"].split(","):
        ctx.log(f"livelock: {mode}")
        results[mode] = run_mode(ctx, graph, mode, sender, receiver)
        ctx.event(
            f"{mode} done",
            goodput_mbps=round(results[mode]["goodput_bps"] / 1e6, 3),
            messages=results[mode]["messages_completed"],
        )
    ctx.metrics["modes"] = {
        m: {k: v for k, v in r.items() if k != "series"} for m, r in results.items()
    }
    report(ctx, results)
    plot(ctx, results)


def run_mode(ctx: Context, graph, mode: str, sender: str, receiver: str) -> dict:
    """One fresh fabric, NICs set to `mode`, the drop on the receiver's link, WRITEs for a while."""
    p = ctx.params
    out = ctx.out_dir / mode
    rleaf = graph.nodes[receiver]["leaf"]
    sleaf = graph.nodes[sender]["leaf"]
    rate = graph.edges[sender, sleaf]["rate_bps"]
    with ctx.fabric(graph, mode, **fabric_options(p)) as fab:
        # The sender's link, for Wireshark: all it sent (the lost frames too) and the NAKs.
        intf = graph.edges[sender, sleaf]["intfs"][sleaf]
        capture = start_capture(fab, intf, out / f"{intf}.pcap")
        nics = RdmaHosts(fab, [sender, receiver], dcqcn=False, loss_recovery=mode)
        qp = nics.connect(sender, receiver)
        if p["drop"] == "every":
            fab.faults.lossy_link(rleaf, receiver, every=p["drop_every"], only_from=rleaf)
        else:
            fab.faults.lossy_link(rleaf, receiver, 1.0 / p["drop_every"], only_from=rleaf)
        fault = fab.faults.events[-1]
        ctx.event(
            f"{mode}: lossy link",
            **{k: v for k, v in fault.items() if k not in ("t", "wall", "kind")},
        )
        port = graph.edges[rleaf, receiver]["ports"][rleaf]
        count = int(rate * p["duration_s"] / 8 / p["message_bytes"]) + 2  # a backlog
        series: list = []  # (s since the post, bytes of completed WRITEs, payload bytes sent)
        done: list = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(SAMPLE_S):
                done.extend(nics.poll_completions(sender, qp))
                sent = nics.nic_stats(sender).send[qp].tx_payload_bytes
                series.append((time.time() - t0, len(done) * p["message_bytes"], sent))

        t0 = time.time()
        nics.post_write(sender, qp, p["message_bytes"], count, remote_va=REMOTE_VA, rkey=RKEY)
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            stop.wait(p["duration_s"])
        finally:
            stop.set()
            sampler.join()
        send = nics.nic_stats(sender).send[qp]
        elapsed = time.time() - t0
        recv = nics.nic_stats(receiver).recv[qp]
        lost = fab.counters(rleaf).lost_frames.get(port, 0)
        done.extend(nics.poll_completions(sender, qp))
        fab.stop_proc(capture)
    # Completions carry latency since the post, and every WRITE was posted at t0.
    completed = [c for c in done if c["latency_s"] <= elapsed]
    goodput = len(completed) * p["message_bytes"] * 8 / elapsed
    return {
        "elapsed_s": elapsed,
        "rate_bps": rate,
        "messages_completed": len(completed),
        "goodput_bps": goodput,
        # Of the payload a link full of data frames carries, and of the link's time.
        "line_share": goodput / (rate * DEFAULT_MTU_PAYLOAD / frame_bytes()),
        "link_busy": send.tx_packets * frame_bytes() * 8 / elapsed / rate,
        "resent_per_loss": loop_frames(send),
        "tx_packets": send.tx_packets,
        "tx_payload_bytes": send.tx_payload_bytes,
        "retransmitted": send.retransmitted,
        "naks": send.naks,
        "timeouts": send.timeouts,
        "rx_out_of_order": recv.out_of_order,
        "rx_duplicates": recv.duplicates,
        "rx_discarded_packets": recv.discarded_packets,
        "messages_received": recv.messages_received,
        "lost_frames": lost,
        "qpn": qp,
        "pcap": f"{mode}/{intf}.pcap",
        "series": series,
    }


# ----- the models -------------------------------------------------------------------


def loop_frames(send: SendQp) -> float:
    """L: frames resent per loss event (NAK or timeout), measured at the sender's queue pair;
    a run's result keeps it as `resent_per_loss`."""
    events = send.naks + send.timeouts
    return send.retransmitted / events if events else 0.0


def message_through(params: dict) -> float:
    """q: the probability that all M packets of one attempt arrive."""
    if params["drop"] == "every":
        return 0.0  # validate(): M >= drop_every, so every attempt holds a drop
    return (1 - 1 / params["drop_every"]) ** packets_per_message(params)


def go_back_0_ceiling(r: dict, q: float) -> tuple[float, int]:
    """(A, the most messages go-back-0 gets through in A attempts): A*q + 3 sigma."""
    attempts = r["naks"] + r["timeouts"] + r["messages_completed"]
    return attempts, math.floor(attempts * q + 3 * math.sqrt(attempts * q * (1 - q)))


# ----- report and plots ---------------------------------------------------------------


def report(ctx: Context, results: dict) -> None:
    p = ctx.params
    prob = 1 / p["drop_every"]
    m = packets_per_message(p)
    q = message_through(p)
    rows = []
    for mode, r in results.items():
        rows.append(
            [
                mode,
                round(r["goodput_bps"] / 1e6, 3),
                round(r["line_share"], 3),
                r["messages_completed"],
                r["tx_packets"],
                round(r["link_busy"], 3),
                r["lost_frames"],
                r["naks"],
                r["timeouts"],
                r["retransmitted"],
                round(r["resent_per_loss"], 1),
                r["rx_discarded_packets"],
            ]
        )
    drop = f"every {p['drop_every']}th" if p["drop"] == "every" else f"p = 1/{p['drop_every']}"
    ctx.table(
        f"{p['message_bytes']} B RDMA WRITEs ({m} packets) {ctx.metrics['sender']} -> "
        f"{ctx.metrics['receiver']}, RoCEv2 frames lost on {ctx.metrics['lossy_link']}: "
        f"{drop} ({p['rate_mbps']:g} Mbit/s links, {p['duration_s']:g} s each)",
        [
            "NIC",
            "goodput Mbit/s",
            "of line",
            "messages",
            "frames sent",
            "link busy",
            "lost",
            "NAKs",
            "timeouts",
            "resent",
            "resent/NAK",
            "discarded at rx",
        ],
        rows,
    )
    if GO_BACK_N in results:
        r = results[GO_BACK_N]
        loop = r["resent_per_loss"]
        floor = go_back_n_floor(r["tx_payload_bytes"], prob, loop, p["message_bytes"])
        delivered = r["messages_completed"] * p["message_bytes"]
        ctx.text(
            f"go-back-N: L = {loop:.1f} frames resent per loss, so its efficiency is "
            f"1 - p*L = {1 - prob * loop:.3f} of what it sends (Bertsekas & Gallager)."
        )
        ctx.check(
            "go-back-N: goodput at least its efficiency 1 - p*L of what it sent "
            "(Bertsekas & Gallager, Data Networks, 2.4)",
            r["messages_completed"] > 0 and delivered >= floor,
            f"{delivered} B in whole messages",
            f">= {max(0, floor):.0f} B = (1 - {prob:.5f} x {loop:.1f}) x "
            f"{r['tx_payload_bytes']} B sent, less one message and one loop",
        )
        if p["drop"] == "every":
            # Each frame lost draws one NAK (the loop is shorter than the drop interval).
            ctx.check(
                "go-back-N: one NAK per lost frame",
                abs(r["naks"] + r["timeouts"] - r["lost_frames"]) <= 1,
                f"{r['naks']} NAKs + {r['timeouts']} timeouts for {r['lost_frames']} lost",
                "equal, +-1 in flight",
            )
    if GO_BACK_0 in results:
        r = results[GO_BACK_0]
        attempts, most = go_back_0_ceiling(r, q)
        model = (
            f"q = 0: every {p['drop_every']} frames hold a drop and a message needs {m}"
            if p["drop"] == "every"
            else f"q = (1 - 1/{p['drop_every']})^{m} = {q:.3g}"
        )
        ctx.text(
            f"go-back-0: a message gets through only if all {m} packets arrive in one attempt; "
            f"{model}; {attempts} attempts."
        )
        ctx.check(
            "go-back-0: goodput within what P(message through) = (1 - p)^M allows "
            "(Guo et al., SIGCOMM 2016: livelock)",
            r["messages_completed"] <= most,
            f"{r['messages_completed']} messages ({r['goodput_bps'] / 1e6:.3f} Mbit/s)",
            f"<= {most} = {attempts} attempts x q + 3 sigma",
        )
    if p["drop"] == "every":
        _check_drop_rate(ctx, results)


def _check_drop_rate(ctx: Context, results: dict) -> None:
    """Under the deterministic drop, each run lost exactly one frame in drop_every."""
    p = ctx.params
    ok = [abs(r["lost_frames"] - r["tx_packets"] // p["drop_every"]) <= 1 for r in results.values()]
    ctx.check(
        f"the link lost exactly 1 RoCEv2 frame in {p['drop_every']}",
        all(ok),
        ", ".join(
            f"{mode}: {r['lost_frames']} of {r['tx_packets']}" for mode, r in results.items()
        ),
        f"frames sent // {p['drop_every']}, +-1 in flight",
    )


def frame_bytes() -> int:
    """A full data frame on the wire: Ethernet, IPv4, UDP, BTH, payload, ICRC."""
    return 14 + 20 + 8 + 12 + DEFAULT_MTU_PAYLOAD + 4


def plot(ctx: Context, results: dict) -> None:
    panels = [
        Panel(
            "whole messages delivered",
            "time (s)",
            "MB",
            lines={
                m: ([t for t, _, _ in r["series"]], [b / 1e6 for _, b, _ in r["series"]])
                for m, r in results.items()
            },
        ),
        Panel(
            "payload sent on the wire (retransmissions included)",
            "time (s)",
            "MB",
            lines={
                m: ([t for t, _, _ in r["series"]], [s / 1e6 for _, _, s in r["series"]])
                for m, r in results.items()
            },
        ),
        Panel(
            "frames resent by the sender",
            "",
            "frames",
            bars={m: r["retransmitted"] for m, r in results.items()},
        ),
    ]
    path = save_panels(ctx.out_dir / "livelock.png", panels, title="livelock")
    ctx.plots.append(path.name)


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_MODE = (
    ("goodput (Mbit/s)", ("goodput_bps",), {"scale": 1e-6}),
    ("goodput / payload line rate", ("line_share",)),
    ("messages completed", ("messages_completed",)),
    ("frames sent", ("tx_packets",)),
    ("link busy", ("link_busy",)),
    ("frames lost", ("lost_frames",)),
    ("NAKs", ("naks",)),
    ("timeouts", ("timeouts",)),
    ("frames resent", ("retransmitted",)),
    ("frames resent per loss", ("resent_per_loss",)),
    ("discarded at the receiver", ("rx_discarded_packets",)),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "livelock",
        "livelock",
        "livelock: 1 RoCEv2 packet in 256 lost, go-back-N vs go-back-0",
        quick=("duration_s=5",),
        figures=per_key(("go-back-n", "go-back-0"), ("modes",), _FIGURES_PER_MODE),
        timeout_s=600,
    ),
)

"""The RDMA incast that the incast and ecn-thresholds scenarios run: N senders SEND
to one receiver over a fresh fabric, measured at the receiver's link.

Owns the workload's parameters (`PARAMS`: the fabric's shape and rates, the
senders, how long and how much), its premises on a fabric (`validate`,
`model_misfit`: the receiver's link is the one bottleneck, every sender at its
rate), the run (`run`: the fabric, the NICs, the bottleneck queue sampled every
SAMPLE_S, the counters and NIC statistics read through emu/answers.py) and what
is measured of it (`measure`: utilisation, drops, PFC, CNPs, per-sender
goodput and Jain's fairness, the queue's percentiles and start-up transient).
The scenarios choose the switches' settings (`qos`) and compare with models.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import networkx as nx

from emu import fabric as fabric_mod
from emu import topopick
from emu.answers import NicStats
from emu.config import EcnSpec
from emu.models.dcqcn import empty_share, percentile, transient
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    fabric_options,
    fabric_params,
)
from emu.telemetry import start_capture
from emu.traffic.rdma import RdmaHosts, received_bps

SAMPLE_S = 0.05  # bottleneck queue sampling period

PARAMS = {
    # DCQCN's timers scale with the fabric's time scale, modelled/emulated rate
    # (emu/fabric/). At 1 Gbit/s over 10 Mbit/s (x100) a 10-second run is
    # 100 ms of modelled time, enough for DCQCN to converge; 25 Gbit/s (x2500)
    # needs runs of minutes.
    **fabric_params(rate_mbps=10.0, modelled_gbps=1.0),
    "leaves": Param(3, "leaf switches", min=1, max=32),
    "hosts_per_leaf": Param(3, "hosts per leaf", min=1, max=32),
    "senders": Param(8, "RDMA senders (the last host receives)", min=1, max=63),
    "duration_s": Param(10.0, "how long the senders send", min=2.0, max=600.0),
    "warmup_s": Param(1.5, "start of the measurement window", min=0.0, max=60.0),
    "message_bytes": Param(65536, "size of each SEND", min=1024, max=16 << 20),
}


def validate(params: dict) -> None:
    """The workload's parameters and its premises on the fabric `params` build."""
    if params["warmup_s"] >= params["duration_s"]:
        raise ScenarioError(
            f"parameter warmup_s={params['warmup_s']}: must be below "
            f"duration_s={params['duration_s']}"
        )
    graph = build_fabric_graph(params)
    hosts = len(fabric_mod.hosts(graph))
    if params["senders"] >= hosts:
        raise ScenarioError(
            f"parameter senders={params['senders']}: the fabric has {hosts} "
            f"hosts, so at most {hosts - 1} can send to one"
        )
    receiver, senders = incast_hosts(graph, params["senders"])
    misfit = model_misfit(graph, senders, receiver)
    if misfit:
        raise ScenarioError(f"incast: {params.get('topo') or 'the fabric'}: {misfit}")


def incast_hosts(graph, senders: int) -> tuple[str, list[str]]:
    """The receiver (the fabric's last host) and the senders (its first `senders` hosts)."""
    hosts = fabric_mod.hosts(graph)
    return hosts[-1], hosts[:senders]


def model_misfit(graph, senders: list[str], receiver: str) -> str | None:
    """Why the checks' premises fail on `graph`, or None.

    The receiver's link must be the incast's one bottleneck (every link on a
    sender's shortest paths at least as fast: the utilisation checks), and
    every sender's NIC must run at its rate (DCQCN's fluid model starts every
    sender at the bottleneck's line rate C).
    """
    rate = topopick.host_rate_bps(graph, receiver)
    for s in senders:
        if topopick.host_rate_bps(graph, s) != rate:
            return (
                f"sender {s}'s link runs at {topopick.rate_text(topopick.host_rate_bps(graph, s))}"
                f", receiver {receiver}'s at {topopick.rate_text(rate)}; DCQCN's fluid model "
                "needs every sender at the receiver's rate"
            )
        for path in nx.all_shortest_paths(fabric_mod.network(graph), s, receiver):
            for u, v in zip(path, path[1:]):
                if graph.edges[u, v]["rate_bps"] < rate:
                    return (
                        f"{u}-{v} runs at {topopick.rate_text(graph.edges[u, v]['rate_bps'])}, "
                        f"below receiver {receiver}'s link ({topopick.rate_text(rate)}): the "
                        "incast's bottleneck must be the receiver's link"
                    )
    return None


def jain(xs: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes all."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def run(
    ctx: Context, graph, mode: str, senders: list[str], receiver: str, qos: dict, dcqcn: bool
) -> dict:
    """One fresh fabric (`ctx.fabric`, labelled `mode`) with `qos` on every switch; the
    senders flood the receiver for `duration_s`; what `measure` finds at the bottleneck."""
    p = ctx.params
    leaf = graph.nodes[receiver]["leaf"]
    port = graph.edges[receiver, leaf]["ports"][leaf]
    rate = graph.edges[receiver, leaf]["rate_bps"]
    with ctx.fabric(graph, mode, **fabric_options(p), qos=qos) as fab:
        # pcaps of the bottleneck link and of the first sender's link, for Wireshark.
        caps = []
        for h in (receiver, senders[0]):
            intf = graph.edges[h, graph.nodes[h]["leaf"]]["intfs"][graph.nodes[h]["leaf"]]
            caps.append(start_capture(fab, intf, ctx.out_dir / mode / f"{intf}.pcap"))
        nics = RdmaHosts(fab, senders + [receiver], dcqcn=dcqcn)
        qps = {s: nics.connect(s, receiver) for s in senders}
        backlog = int(2 * rate * p["duration_s"] / 8 / len(senders)) + p["message_bytes"]
        count = backlog // p["message_bytes"] + 1
        samples: list = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(fab.queues(leaf))
                stop.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.time()
        for s in senders:
            nics.post(s, qps[s], p["message_bytes"], count)
        try:
            stop.wait(p["duration_s"])
        finally:
            stop.set()
            sampler.join()
        end = time.time()
        send_stats = {s: nics.nic_stats(s).send[qps[s]] for s in senders}
        recv_stats = nics.nic_stats(receiver)
        rx_samples = nics.nic_samples(receiver)
        counters = {sw: fab.counters(sw) for sw in fabric_mod.switches(graph)}
        nic_stats = {h: nics.nic_stats(h) for h in senders}
        for cap in caps:
            fab.stop_proc(cap)
    return measure(
        p,
        Collected(
            t0,
            end,
            samples,
            rx_samples,
            send_stats,
            recv_stats,
            counters,
            nic_stats,
            qps,
            port,
            rate,
        ),
        qos,
    )


@dataclass(frozen=True)
class Collected:
    """What one run read: its clock, the bottleneck's samples, the NICs' and switches'
    answers (emu/answers.py), and where the bottleneck is."""

    t0: float  # unix time the senders posted
    end: float
    samples: list  # [QueueSnapshot] of the bottleneck's switch, every SAMPLE_S
    rx_samples: list  # [NicSample] of the receiver
    send_stats: dict  # sender -> SendQp
    recv_stats: NicStats  # the receiver's
    counters: dict  # switch -> SwitchCounters
    nic_stats: dict  # sender -> NicStats
    qps: dict  # sender -> its QP number
    port: int  # the bottleneck's port on its switch
    rate: float  # the bottleneck's bit/s


def measure(p: dict, run: Collected, qos: dict) -> dict:
    """The incast's figures at its bottleneck from what `run` read, with `p`'s warm-up."""
    t0, end, samples, rx_samples = run.t0, run.end, run.samples, run.rx_samples
    counters, nic_stats, qps, port, rate = run.counters, run.nic_stats, run.qps, run.port, run.rate
    send_stats, recv_stats = run.send_stats, run.recv_stats
    w0 = t0 + p["warmup_s"]
    window = [s for s in samples if w0 <= s.time <= end]
    util = 0.0
    if len(window) >= 2:
        sent = window[-1].tx_bytes[port] - window[0].tx_bytes[port]
        util = sent * 8 / (rate * (window[-1].time - window[0].time))
    depth = [(s.time - t0, s.depth_bytes[port][3]) for s in samples]
    # Per-sender goodput at the receiver over the window (agent samples use monotonic
    # time: align them by their own first/last in-window index).
    n = len(rx_samples)
    first = int(n * p["warmup_s"] / p["duration_s"]) if n else 0
    t_from, t_to = (rx_samples[first].t, rx_samples[-1].t) if n else (0.0, 0.0)
    goodput = {s: received_bps(rx_samples, q, t_from, t_to) for s, q in qps.items()}
    flows = (
        {
            s: [(x.t - rx_samples[0].t, x.rx_bytes.get(q, 0)) for x in rx_samples]
            for s, q in qps.items()
        }
        if n
        else {}
    )
    switch_drops = sum(sum(c.buffer.drops.values()) + c.watchdog.drops for c in counters.values())
    nic_drops = recv_stats.rx_overflow
    pfc_frames = (
        sum(sum(c.pfc.pfc_tx_frames.values()) for c in counters.values())
        + recv_stats.pause_tx
        + sum(s.pause_tx for s in nic_stats.values())
    )
    paused_s = {}
    for sw, c in counters.items():
        for port_no, per_prio in c.pfc.paused_s.items():
            if per_prio[3] > 0:
                paused_s[f"{sw}:{port_no}"] = per_prio[3]
    for h, st in nic_stats.items():
        if st.paused_s[3] > 0:
            paused_s[h] = st.paused_s[3]
    kmin, kmax = EcnSpec.from_dict(qos.get("ecn", {})).thresholds(rate)
    # Queue statistics over the measurement window: the start-up burst (every
    # sender at line rate before the first CNP) is not the steady state.
    steady = [d for t, d in depth if t >= p["warmup_s"]]
    peak_s, peak, settled_s = transient(depth, kmax)
    return {
        "utilisation": util,
        "switch_drops": switch_drops,
        "nic_drops": nic_drops,
        "retransmitted": sum(s.retransmitted for s in send_stats.values()),
        "cnps": sum(s.cnps for s in send_stats.values()),
        "pfc_frames": pfc_frames,
        "paused_s": paused_s,
        "goodput_bps": goodput,
        "jain": jain(list(goodput.values())),
        "queue_depth": depth,
        "queue_p50_bytes": percentile(steady, 50),
        "queue_p95_bytes": percentile(steady, 95),
        "queue_p99_bytes": percentile(steady, 99),
        "queue_empty_share": empty_share(steady),
        "transient_peak_bytes": peak,
        "transient_peak_s": peak_s,
        "transient_settled_s": settled_s,
        "kmin_kmax": [kmin, kmax],
        "flows": flows,
        "ecn_marks": sum(sum(c.buffer.ecn_marks.values()) for c in counters.values()),
    }

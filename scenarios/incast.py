"""incast: N RDMA senders to one receiver, lossy vs PFC vs PFC + ECN/DCQCN.

      spine1          spine2
       |  \\          /  |
      leaf1   leaf2   leaf3
      h1h2h3  h4h5h6  h7h8 h9   <- h1..h8 send RoCEv2 (DSCP 26) to h9
                              (8:1 on the leaf3 -> h9 link)

The same fabric and workload run three times, each a fresh fabric:
- lossy: PFC and ECN off. The bottleneck queue overflows, frames are dropped,
  and the NICs' go-back-N retransmits whole windows: goodput suffers.
- pfc: PFC on, no ECN. Nothing is dropped anywhere: switches pause their
  upstream (switch and NIC) when an ingress queue crosses XOFF. The link stays
  full, but PAUSE spreads back through the fabric.
- dcqcn: PFC plus ECN marking and DCQCN at the NICs. CE marks become CNPs, the
  senders slow down to their fair share, the bottleneck queue stays between
  Kmin and Kmax, and PAUSE becomes rare.

Run:  emu run incast
      emu run incast --set modes=pfc,dcqcn --set duration_s=10
"""

from __future__ import annotations

import threading
import time

from emu import fabric as fabric_mod
from emu.config import EcnSpec
from emu.net import Fabric
from emu.scenario import Context, Param, ScenarioError, build_fabric_graph, fabric_params
from emu.telemetry import Panel, save_panels, start_capture
from emu.traffic.rdma import RdmaHosts

DESCRIPTION = "N RDMA senders to one receiver: lossy vs PFC vs PFC+ECN/DCQCN"

MODES = ("lossy", "pfc", "dcqcn")
# The PFC watchdog is off here: at emulated rates an incast legitimately keeps
# a queue paused for longer than the watchdog's 200 ms (a PAUSE of 0xFFFF
# quanta lasts 3.4 s at 10 Mbit/s), and it would take the congestion for a
# storm. The pause-storm scenario is where the watchdog is shown.
QOS = {
    "lossy": {"pfc": {"enabled": False}, "ecn": {"enabled": False},
              "watchdog": {"enabled": False}},
    "pfc": {"ecn": {"enabled": False}, "watchdog": {"enabled": False}},
    "dcqcn": {"watchdog": {"enabled": False}},
}

PARAMS = {
    **fabric_params(rate_mbps=10.0),
    "leaves": Param(3, "leaf switches", min=1, max=32),
    "hosts_per_leaf": Param(3, "hosts per leaf", min=1, max=32),
    "senders": Param(8, "RDMA senders (the last host receives)", min=1, max=63),
    "duration_s": Param(10.0, "how long the senders send", min=2.0, max=600.0),
    "warmup_s": Param(1.5, "start of the measurement window", min=0.0, max=60.0),
    "message_bytes": Param(65536, "size of each SEND", min=1024, max=16 << 20),
    "modes": Param(",".join(MODES), "which of lossy,pfc,dcqcn to run"),
    # DCQCN's timers scale with modelled/emulated rate (DESIGN.md time scale). At
    # 1 Gbit/s over 10 Mbit/s (x100) a 10-second run is 100 ms of modelled time,
    # enough for DCQCN to converge; 25 Gbit/s (x2500) needs runs of minutes.
    "modelled_gbps": Param(1.0, "NIC speed the emulated link stands for (scales DCQCN's "
                           "timers and rate steps)", min=0.01, max=800.0),
}


def validate(params: dict) -> None:
    modes = [m for m in params["modes"].split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ScenarioError(f"parameter modes={params['modes']!r}: a comma list of "
                            f"{', '.join(MODES)}")
    if params["warmup_s"] >= params["duration_s"]:
        raise ScenarioError(f"parameter warmup_s={params['warmup_s']}: must be below "
                            f"duration_s={params['duration_s']}")
    hosts = params["leaves"] * params["hosts_per_leaf"] if params["topology"] == "leaf_spine" \
        else params["k"] ** 3 // 4
    if params["senders"] >= hosts:
        raise ScenarioError(f"parameter senders={params['senders']}: the fabric has {hosts} "
                            f"hosts, so at most {hosts - 1} can send to one")


def jain(xs: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes all."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    hosts = fabric_mod.hosts(graph)
    receiver, senders = hosts[-1], hosts[:p["senders"]]
    ctx.metrics["receiver"], ctx.metrics["senders"] = receiver, senders
    results = {}
    for mode in p["modes"].split(","):
        ctx.log(f"incast: mode {mode}")
        results[mode] = run_mode(ctx, graph, mode, senders, receiver, QOS[mode],
                                 dcqcn=(mode == "dcqcn"))
        ctx.event(f"{mode} done", util=round(results[mode]["utilisation"], 3))
    ctx.metrics["modes"] = results
    report(ctx, results)
    plot(ctx, results)


def run_mode(ctx: Context, graph, mode: str, senders: list[str], receiver: str, qos: dict,
             dcqcn: bool) -> dict:
    """One fresh fabric with `qos` on every switch; senders flood the receiver."""
    p = ctx.params
    leaf = graph.nodes[receiver]["leaf"]
    port = graph.edges[receiver, leaf]["ports"][leaf]
    rate = graph.edges[receiver, leaf]["rate_bps"]
    with Fabric(graph, out_dir=str(ctx.out_dir / mode), seed=p["seed"], qos=qos) as fab:
        # pcaps of the bottleneck link and of the first sender's link, for Wireshark.
        caps = []
        for h in (receiver, senders[0]):
            intf = graph.edges[h, graph.nodes[h]["leaf"]]["intfs"][graph.nodes[h]["leaf"]]
            caps.append(start_capture(fab, intf, ctx.out_dir / mode / f"{intf}.pcap"))
        nics = RdmaHosts(fab, senders + [receiver], dcqcn=dcqcn,
                         modelled_rate_bps=p["modelled_gbps"] * 1e9)
        qps = {s: nics.connect(s, receiver) for s in senders}
        backlog = int(2 * rate * p["duration_s"] / 8 / len(senders)) + p["message_bytes"]
        count = backlog // p["message_bytes"] + 1
        samples: list = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(fab.switch_call(leaf, "queues"))
                stop.wait(0.05)

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
        send_stats = {s: nics.stats(s)["send"][str(qps[s])] for s in senders}
        recv_stats = nics.stats(receiver)
        rx_samples = nics.samples(receiver)
        counters = {sw: fab.switch_call(sw, "counters") for sw in fabric_mod.switches(graph)}
        nic_stats = {h: nics.stats(h) for h in senders}
        for cap in caps:
            fab.stop_proc(cap)
    return measure(ctx, mode, t0, end, samples, rx_samples, send_stats, recv_stats, counters,
                   nic_stats, qps, port, rate, qos)


def measure(ctx, mode, t0, end, samples, rx_samples, send_stats, recv_stats, counters,
            nic_stats, qps, port, rate, qos) -> dict:
    p = ctx.params
    w0 = t0 + p["warmup_s"]
    window = [s for s in samples if w0 <= s["time"] <= end]
    util = 0.0
    if len(window) >= 2:
        sent = window[-1]["tx_bytes"][str(port)] - window[0]["tx_bytes"][str(port)]
        util = sent * 8 / (rate * (window[-1]["time"] - window[0]["time"]))
    depth = [(s["time"] - t0, s["depth_bytes"][str(port)][3]) for s in samples]
    # Per-sender goodput at the receiver over the window (agent samples use monotonic
    # time: align them by their own first/last in-window index).
    n = len(rx_samples)
    first = int(n * p["warmup_s"] / p["duration_s"]) if n else 0
    goodput = {}
    for s, q in qps.items():
        a = rx_samples[first][2].get(str(q), 0) if n else 0
        b = rx_samples[-1][2].get(str(q), 0) if n else 0
        dt = (rx_samples[-1][0] - rx_samples[first][0]) if n > first + 1 else 1.0
        goodput[s] = (b - a) * 8 / dt if dt > 0 else 0.0
    flows = {s: [(t - rx_samples[0][0], v.get(str(q), 0)) for t, _, v, _ in rx_samples]
             for s, q in qps.items()} if n else {}
    switch_drops = sum(sum(c["buffer"]["drops"].values()) + c["watchdog"]["drops"]
                       for c in counters.values())
    nic_drops = recv_stats["rx_overflow"]
    pfc_frames = sum(sum(c["pfc"]["pfc_tx_frames"].values()) for c in counters.values()) + \
        recv_stats["pause_tx"] + sum(s["pause_tx"] for s in nic_stats.values())
    paused_s = {}
    for sw, c in counters.items():
        for port_no, per_prio in c["pfc"]["paused_s"].items():
            if per_prio[3] > 0:
                paused_s[f"{sw}:{port_no}"] = per_prio[3]
    for h, st in nic_stats.items():
        if st["paused_s"][3] > 0:
            paused_s[h] = st["paused_s"][3]
    kmin, kmax = EcnSpec.from_dict(qos.get("ecn", {})).thresholds(rate)
    # Queue statistics over the measurement window: the start-up burst (every
    # sender at line rate before the first CNP) is not the steady state.
    steady = [d for t, d in depth if t >= p["warmup_s"]]
    in_band = [d for d in steady if kmin * 0.5 <= d <= kmax * 1.5]
    busy = [d for d in steady if d > 0]
    return {
        "utilisation": util,
        "switch_drops": switch_drops, "nic_drops": nic_drops,
        "retransmitted": sum(s["retransmitted"] for s in send_stats.values()),
        "cnps": sum(s["cnps"] for s in send_stats.values()),
        "pfc_frames": pfc_frames,
        "paused_s": paused_s,
        "goodput_bps": goodput, "jain": jain(list(goodput.values())),
        "queue_depth": depth,
        "queue_p50_bytes": _pct(steady, 50),
        "queue_p99_bytes": _pct(steady, 99),
        "queue_in_kmin_kmax": len(in_band) / len(busy) if busy else 0.0,
        "kmin_kmax": [kmin, kmax],
        "flows": flows,
        "ecn_marks": sum(sum(c["buffer"]["ecn_marks"].values()) for c in counters.values()),
    }


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q / 100))]


def report(ctx: Context, results: dict) -> None:
    rows = []
    for mode, r in results.items():
        rows.append([mode, r["utilisation"], r["switch_drops"] + r["nic_drops"],
                     r["retransmitted"], r["pfc_frames"], round(sum(r["paused_s"].values()), 2),
                     r["cnps"], r["ecn_marks"], r["jain"], r["queue_p50_bytes"],
                     r["queue_p99_bytes"]])
    ctx.table(f"incast {len(ctx.metrics['senders'])} -> 1 into {ctx.metrics['receiver']} "
              f"({ctx.params['rate_mbps']:g} Mbit/s links)",
              ["mode", "util", "drops", "retx pkts", "PFC frames", "paused s", "CNPs",
               "CE marks", "Jain", "queue p50 B", "queue p99 B"], rows)
    if "pfc" in results:
        r = results["pfc"]
        drops = r["switch_drops"] + r["nic_drops"]
        ctx.check("PFC: zero drops anywhere", drops == 0 and r["retransmitted"] == 0,
                  f"{drops} drops, {r['retransmitted']} retransmitted", "0 and 0")
        ctx.check("PFC: bottleneck utilisation >= 90%", r["utilisation"] >= 0.9,
                  round(r["utilisation"], 3), ">= 0.9")
    if "lossy" in results:
        r = results["lossy"]
        drops = r["switch_drops"] + r["nic_drops"]
        ctx.check("PFC off: frames are dropped", drops > 0, drops, "> 0")
        ctx.check("PFC off: go-back-N retransmits", r["retransmitted"] > 0,
                  r["retransmitted"], "> 0 packets")
    if "dcqcn" in results:
        r = results["dcqcn"]
        ctx.check("DCQCN: bottleneck utilisation >= 90%", r["utilisation"] >= 0.9,
                  round(r["utilisation"], 3), ">= 0.9")
        ctx.check("DCQCN: Jain's fairness >= 0.9", r["jain"] >= 0.9, round(r["jain"], 3),
                  ">= 0.9")
        ctx.check("DCQCN: queue mostly between Kmin and Kmax", r["queue_in_kmin_kmax"] >= 0.5,
                  round(r["queue_in_kmin_kmax"], 2), ">= 0.5 of busy samples")
        if "pfc" in results:
            ctx.check("DCQCN: PAUSE rare compared with PFC only",
                      r["pfc_frames"] <= 0.25 * max(1, results["pfc"]["pfc_frames"]),
                      f"{r['pfc_frames']} vs {results['pfc']['pfc_frames']}", "<= 25%")


def plot(ctx: Context, results: dict) -> None:
    panels = [Panel("bottleneck queue (priority 3)", "time (s)", "bytes",
                    lines={m: ([t for t, _ in r["queue_depth"]], [d for _, d in r["queue_depth"]])
                           for m, r in results.items()})]
    if "dcqcn" in results:
        kmin, kmax = results["dcqcn"]["kmin_kmax"]
        panels[0].hline, panels[0].hline_label = kmax, "Kmax"
    for mode in ("dcqcn", "pfc"):
        if mode in results and results[mode]["flows"]:
            lines = {}
            for s, series in results[mode]["flows"].items():
                ts = [t for t, _ in series]
                rates = [0.0] + [(b1 - b0) * 8 / (t1 - t0) / 1e6 if t1 > t0 else 0.0
                                 for (t0, b0), (t1, b1) in zip(series, series[1:])]
                lines[s] = (ts, rates)
            panels.append(Panel(f"{mode}: per-sender goodput at the receiver", "time (s)",
                                "Mbit/s", lines=lines))
            break
    paused = {}
    for mode, r in results.items():
        for where, secs in r["paused_s"].items():
            paused[f"{mode}\n{where}"] = secs
    if paused:
        top = dict(sorted(paused.items(), key=lambda kv: -kv[1])[:10])
        panels.append(Panel("paused time per port (top 10)", "", "seconds", bars=top))
    path = save_panels(ctx.out_dir / "incast.png", panels, title="incast")
    ctx.plots.append(path.name)

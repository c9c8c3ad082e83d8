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
  senders slow down to their fair share and PAUSE becomes rare. Where the
  bottleneck queue sits is checked against DCQCN's fluid model (Zhu et al.,
  "ECN or Delay", CoNEXT 2016), run with this scenario's
  parameters (emu/models/dcqcn.py): its fixed point lies between Kmin and Kmax, but
  the switch marks at enqueue, so a mark reaches the receiver only after the
  queue's own delay; at the defaults that loop delay (about 10 ms, 4 CNP
  intervals) makes the fixed point unstable and the model, like the fabric,
  cycles between an empty queue and a peak just above Kmax. The start of the
  incast (every sender at line rate until its first CNPs) is a transient,
  reported apart from the steady state.

Run:  emu run incast
      emu run incast --set modes=pfc,dcqcn --set duration_s=10
      emu run incast --topo FILE --set senders=5
                    (any topology file: the last host receives from the first
                    `senders`; every sender's link at the receiver's rate and no
                    slower link on their paths, or it says which one is)
"""

from __future__ import annotations

import dataclasses

from emu.figures import Entry, per_key
from emu.models.dcqcn import DATA_FRAME_BYTES, dcqcn_model
from emu.scenario import Context, Param, build_fabric_graph, choices
from emu.telemetry import Panel, save_panels
from emu.traffic import incast as workload
from emu.traffic.incast import SAMPLE_S, incast_hosts

# Receiver, senders and the model's rates, hops and delays come from the
# graph, so a topology file may replace the shape parameters (emu/scenario.py).
TOPOLOGY_FILE = True

DESCRIPTION = "N RDMA senders to one receiver: lossy vs PFC vs PFC+ECN/DCQCN"

MODES = ("lossy", "pfc", "dcqcn")
# The PFC watchdog is off here: an incast legitimately keeps a queue paused
# for long (a PAUSE of 0xFFFF quanta lasts 1.7 s at 20 Mbit/s), and a
# watchdog on a shorter clock would take the congestion for a storm. (At the
# default time scale, x50, its 200 ms last 10 s: the whole run.) The
# pause-storm scenario is where the watchdog is shown.
PARAMS = {
    **workload.PARAMS,  # the fabric and the incast (emu/traffic/incast.py)
    # 1 Gbit/s NICs over 20 Mbit/s (x50), since the NIC runs in C (issue 29; docs/results.md).
    "rate_mbps": dataclasses.replace(workload.PARAMS["rate_mbps"], default=20.0),
    "modes": Param(",".join(MODES), "which of lossy,pfc,dcqcn to run"),
}

QOS = {
    "lossy": {"pfc": {"enabled": False}, "ecn": {"enabled": False}, "watchdog": {"enabled": False}},
    "pfc": {"ecn": {"enabled": False}, "watchdog": {"enabled": False}},
    "dcqcn": {"watchdog": {"enabled": False}},
}


def validate(params: dict) -> None:
    choices(params, "modes", MODES)
    workload.validate(params)


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    receiver, senders = incast_hosts(graph, p["senders"])
    ctx.metrics["receiver"], ctx.metrics["senders"] = receiver, senders
    results = {}
    for mode in p["modes"].split(","):
        ctx.log(f"incast: mode {mode}")
        results[mode] = workload.run(
            ctx, graph, mode, senders, receiver, QOS[mode], dcqcn=(mode == "dcqcn")
        )
        ctx.event(f"{mode} done", util=round(results[mode]["utilisation"], 3))
    ctx.metrics["modes"] = results
    model = None
    if "dcqcn" in results:
        model = dcqcn_model(p, graph, senders, receiver, QOS["dcqcn"], sample_s=SAMPLE_S)
        ctx.metrics["dcqcn_model"] = {k: v for k, v in model.items() if k != "queue_depth"}
    report(ctx, results, model)
    plot(ctx, results, model)


def report(ctx: Context, results: dict, model: dict | None = None) -> None:
    rows = []
    for mode, r in results.items():
        rows.append(
            [
                mode,
                r["utilisation"],
                r["switch_drops"] + r["nic_drops"],
                r["retransmitted"],
                r["pfc_frames"],
                round(sum(r["paused_s"].values()), 2),
                r["cnps"],
                r["ecn_marks"],
                r["jain"],
                r["queue_p50_bytes"],
                r["queue_p99_bytes"],
            ]
        )
    ctx.table(
        f"incast {len(ctx.metrics['senders'])} -> 1 into {ctx.metrics['receiver']} "
        f"({ctx.params['rate_mbps']:g} Mbit/s links)",
        [
            "mode",
            "util",
            "drops",
            "retx pkts",
            "PFC frames",
            "paused s",
            "CNPs",
            "CE marks",
            "Jain",
            "queue p50 B",
            "queue p99 B",
        ],
        rows,
    )
    if "pfc" in results:
        r = results["pfc"]
        drops = r["switch_drops"] + r["nic_drops"]
        ctx.check(
            "PFC: zero drops anywhere",
            drops == 0 and r["retransmitted"] == 0,
            f"{drops} drops, {r['retransmitted']} retransmitted",
            "0 and 0",
        )
        ctx.check(
            "PFC: bottleneck utilisation >= 90%",
            r["utilisation"] >= 0.9,
            round(r["utilisation"], 3),
            ">= 0.9",
        )
    if "lossy" in results:
        r = results["lossy"]
        drops = r["switch_drops"] + r["nic_drops"]
        ctx.check("PFC off: frames are dropped", drops > 0, drops, "> 0")
        ctx.check(
            "PFC off: go-back-N retransmits",
            r["retransmitted"] > 0,
            r["retransmitted"],
            "> 0 packets",
        )
    if "dcqcn" in results:
        r = results["dcqcn"]
        ctx.check(
            "DCQCN: bottleneck utilisation >= 90%",
            r["utilisation"] >= 0.9,
            round(r["utilisation"], 3),
            ">= 0.9",
        )
        ctx.check("DCQCN: Jain's fairness >= 0.9", r["jain"] >= 0.9, round(r["jain"], 3), ">= 0.9")
        report_queue_model(ctx, r, model)
        if "pfc" in results:
            ctx.check(
                "DCQCN: PAUSE rare compared with PFC only",
                r["pfc_frames"] <= 0.25 * max(1, results["pfc"]["pfc_frames"]),
                f"{r['pfc_frames']} vs {results['pfc']['pfc_frames']}",
                "<= 25%",
            )


def report_queue_model(ctx: Context, r: dict, model: dict) -> None:
    """The DCQCN bottleneck queue against the fluid model: a table, a note and one check.

    The model is a fluid: it spreads every sender's frames smoothly, while on
    the wire each of the N senders adds whole frames at its own paced times,
    so the real queue can differ from the fluid one by up to one frame per
    sender at any instant. That is the check's tolerance.
    """
    p = ctx.params
    kmin, kmax = r["kmin_kmax"]
    fixed = model["fixed_point"]
    n = len(ctx.metrics["senders"])
    tol = n * DATA_FRAME_BYTES

    def settled(x: float | None) -> str:
        return "never" if x is None else f"{x:.2f}"

    ctx.table(
        f"dcqcn bottleneck queue against DCQCN's fluid model (Kmin {kmin} B, Kmax {kmax} B)",
        [
            "",
            f"p50 B (from {p['warmup_s']:g} s)",
            "p95 B",
            "empty share",
            "start-up peak B",
            "peak at s",
            "back at or below Kmax at s",
        ],
        [
            [
                "measured",
                r["queue_p50_bytes"],
                r["queue_p95_bytes"],
                round(r["queue_empty_share"], 2),
                r["transient_peak_bytes"],
                round(r["transient_peak_s"], 2),
                settled(r["transient_settled_s"]),
            ],
            [
                "fluid model",
                round(model["queue_p50_bytes"]),
                round(model["queue_p95_bytes"]),
                round(model["queue_empty_share"], 2),
                round(model["transient_peak_bytes"]),
                round(model["transient_peak_s"], 2),
                settled(model["transient_settled_s"]),
            ],
        ],
    )
    delay = model["loop_delay_at_fixed_point_s"]
    behaviour = (
        "it settles near q*"
        if model["queue_empty_share"] == 0
        else f"it does not settle: it cycles between empty ({model['queue_empty_share']:.0%} "
        "of the time) and a peak near Kmax"
    )
    ctx.text(
        f"DCQCN fluid model (Zhu et al., CoNEXT 2016) with this run's timers (CNP interval "
        f"{model['cnp_interval_s'] * 1e3:g} ms at modelled_gbps={p['modelled_gbps']:g}):\n"
        f"  fixed point p* = {fixed['p']:.3f}, alpha* = {fixed['alpha']:.3f}, "
        f"q* = {fixed['queue_bytes']:.0f} B (Kmin {kmin} B .. Kmax {kmax} B);\n"
        f"  marks are made at enqueue, so the loop delay at q* is q*/C + "
        f"{model['loop_base_delay_s'] * 1e3:.1f} ms = {delay * 1e3:.1f} ms "
        f"({delay / model['cnp_interval_s']:.1f} CNP intervals), and {behaviour};\n"
        f"  the start-up peak (every sender at line rate until its first CNPs) is capped "
        f"by PFC on the fabric, not in the model."
    )
    # The window must start after the start-up transient, or it is not the steady state.
    after = r["transient_settled_s"] is not None and r["transient_settled_s"] <= p["warmup_s"]
    ok = (
        after
        and abs(r["queue_p50_bytes"] - model["queue_p50_bytes"]) <= tol
        and abs(r["queue_p95_bytes"] - model["queue_p95_bytes"]) <= tol
    )
    ctx.check(
        "DCQCN: steady-state queue p50 and p95 within one frame per sender of the "
        "fluid model's (Zhu et al., CoNEXT 2016)",
        ok,
        f"p50 {r['queue_p50_bytes']:.0f} B, p95 {r['queue_p95_bytes']:.0f} B from "
        f"{p['warmup_s']:g} s; start-up transient over at "
        f"{settled(r['transient_settled_s'])} s",
        f"p50 {model['queue_p50_bytes']:.0f} B, p95 {model['queue_p95_bytes']:.0f} B, "
        f"each +- {n} x {DATA_FRAME_BYTES} B; transient over by {p['warmup_s']:g} s",
    )


def plot(ctx: Context, results: dict, model: dict | None = None) -> None:
    panels = [
        Panel(
            "bottleneck queue (priority 3)",
            "time (s)",
            "bytes",
            lines={
                m: ([t for t, _ in r["queue_depth"]], [d for _, d in r["queue_depth"]])
                for m, r in results.items()
            },
        )
    ]
    if "dcqcn" in results:
        kmin, kmax = results["dcqcn"]["kmin_kmax"]
        panels[0].hline, panels[0].hline_label = kmax, "Kmax"
    for mode in ("dcqcn", "pfc"):
        if mode in results and results[mode]["flows"]:
            lines = {}
            for s, series in results[mode]["flows"].items():
                ts = [t for t, _ in series]
                rates = [0.0] + [
                    (b1 - b0) * 8 / (t1 - t0) / 1e6 if t1 > t0 else 0.0
                    for (t0, b0), (t1, b1) in zip(series, series[1:])
                ]
                lines[s] = (ts, rates)
            panels.append(
                Panel(
                    f"{mode}: per-sender goodput at the receiver", "time (s)", "Mbit/s", lines=lines
                )
            )
            break
    if model is not None:
        measured = results["dcqcn"]["queue_depth"]
        panels.insert(
            1,
            Panel(
                "dcqcn: bottleneck queue and DCQCN's fluid model",
                "time (s)",
                "bytes",
                hline=results["dcqcn"]["kmin_kmax"][1],
                hline_label="Kmax",
                lines={
                    "measured": ([t for t, _ in measured], [d for _, d in measured]),
                    "fluid model": (
                        [t for t, _ in model["queue_depth"]],
                        [d for _, d in model["queue_depth"]],
                    ),
                },
            ),
        )
    paused = {}
    for mode, r in results.items():
        for where, secs in r["paused_s"].items():
            paused[f"{mode}\n{where}"] = secs
    if paused:
        top = dict(sorted(paused.items(), key=lambda kv: -kv[1])[:10])
        panels.append(Panel("paused time per port (top 10)", "", "seconds", bars=top))
    path = save_panels(ctx.out_dir / "incast.png", panels, title="incast")
    ctx.plots.append(path.name)


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_MODE = (
    ("util", ("utilisation",)),
    ("drops (switch + NIC)", ("switch_drops",), {"op": "add", "other": ("nic_drops",)}),
    ("retransmitted packets", ("retransmitted",)),
    ("PFC frames", ("pfc_frames",)),
    ("paused port-seconds", ("paused_s",), {"op": "sum"}),
    ("CNPs", ("cnps",)),
    ("CE marks", ("ecn_marks",)),
    ("Jain's fairness", ("jain",)),
    ("queue p50 (B)", ("queue_p50_bytes",)),
    ("queue p99 (B)", ("queue_p99_bytes",)),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "incast",
        "incast",
        "incast: lossy vs PFC vs PFC + ECN/DCQCN",
        figures=per_key(MODES, ("modes",), _FIGURES_PER_MODE),
        timeout_s=600,
    ),
)

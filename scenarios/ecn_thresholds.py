"""ecn-thresholds: storage-tuned vs training-tuned ECN marking, same incast, DCQCN on.

      spine1          spine2
       |  \\          /  |
      leaf1   leaf2   leaf3
      h1h2h3  h4h5h6  h7h8 h9   <- h1..h8 send RoCEv2 to h9 with DCQCN

ECN thresholds decide where DCQCN holds the bottleneck queue. Storage
deployments often mark late (high Kmin/Kmax: deep queues, full links, long
tail latency); training fabrics mark early (low Kmin/Kmax: short queues, so
the small, latency-bound messages of collectives are not stuck behind them).
The same incast runs under both settings; the report shows the queue each
keeps, the utilisation, the marks and the PAUSE frames. Thresholds are given
in full frames at the emulated rate (DESIGN.md: floors of a few packets).

Run:  emu run ecn-thresholds
      emu run ecn-thresholds --set training_kmax_frames=8
      emu run ecn-thresholds --topo FILE --set senders=5
                    (any topology file that incast takes: the last host
                    receives from the first `senders`)
"""

from __future__ import annotations

from emu.config import MTU_FRAME_BYTES
from emu.figures import Entry, per_key
from emu.scenario import Context, Param, ScenarioError, build_fabric_graph
from emu.telemetry import Panel, save_panels
from emu.traffic import incast

DESCRIPTION = "storage-tuned vs training-tuned ECN thresholds under a DCQCN incast"

PARAMS = {
    # The incast's fabric and workload (emu/traffic/incast.py) at its 10 Mbit/s.
    **incast.PARAMS,
    "warmup_s": Param(2.0, "start of the measurement window", min=0.0, max=60.0),
    "training_kmin_frames": Param(2, "training-tuned Kmin, in full frames", min=0, max=1000),
    "training_kmax_frames": Param(10, "training-tuned Kmax, in full frames", min=1, max=1000),
    "storage_kmin_frames": Param(60, "storage-tuned Kmin, in full frames", min=0, max=1000),
    "storage_kmax_frames": Param(160, "storage-tuned Kmax, in full frames", min=1, max=1000),
    "pmax": Param(0.2, "marking probability at Kmax (DCQCN paper)", min=0.0, max=1.0),
}
VARIANTS = ("training", "storage")
# The incast's hosts and bottleneck come from the graph (incast.incast_hosts,
# incast.model_misfit), so a topology file may replace the shape parameters.
TOPOLOGY_FILE = True


def validate(params: dict) -> None:
    for v in VARIANTS:
        if params[f"{v}_kmin_frames"] >= params[f"{v}_kmax_frames"]:
            raise ScenarioError(
                f"parameter {v}_kmin_frames={params[f'{v}_kmin_frames']}: "
                f"must be below {v}_kmax_frames={params[f'{v}_kmax_frames']}"
            )
    incast.validate(params)


def qos_for(params: dict, variant: str) -> dict:
    return {
        "ecn": {
            "kmin_bytes": params[f"{variant}_kmin_frames"] * MTU_FRAME_BYTES,
            "kmax_bytes": params[f"{variant}_kmax_frames"] * MTU_FRAME_BYTES,
            "pmax": params["pmax"],
        },
        "watchdog": {"enabled": False},
    }  # see incast.py: congestion is not a storm


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    receiver, senders = incast.incast_hosts(graph, p["senders"])
    ctx.metrics["receiver"], ctx.metrics["senders"] = receiver, senders
    results = {}
    for variant in VARIANTS:
        ctx.log(f"ecn-thresholds: {variant}")
        results[variant] = incast.run(
            ctx, graph, variant, senders, receiver, qos_for(p, variant), dcqcn=True
        )
    ctx.metrics["variants"] = results
    rows = [
        [
            v,
            f"{p[v + '_kmin_frames']}/{p[v + '_kmax_frames']}",
            r["utilisation"],
            r["queue_p50_bytes"],
            r["queue_p99_bytes"],
            r["ecn_marks"],
            r["cnps"],
            r["pfc_frames"],
            r["jain"],
        ]
        for v, r in results.items()
    ]
    ctx.table(
        "DCQCN incast under two ECN settings",
        [
            "variant",
            "Kmin/Kmax frames",
            "util",
            "queue p50 B",
            "queue p99 B",
            "CE marks",
            "CNPs",
            "PFC frames",
            "Jain",
        ],
        rows,
    )
    tr, st = results["training"], results["storage"]
    ctx.check(
        "training-tuned keeps a shorter queue (p99 at most half)",
        tr["queue_p99_bytes"] <= 0.5 * st["queue_p99_bytes"],
        f"{tr['queue_p99_bytes']:.0f} vs {st['queue_p99_bytes']:.0f} B",
        "<= 50%",
    )
    ctx.check(
        "training-tuned marks earlier (more CE marks)",
        tr["ecn_marks"] > st["ecn_marks"],
        f"{tr['ecn_marks']} vs {st['ecn_marks']}",
        "more",
    )
    ctx.check(
        "storage-tuned keeps the link full (>= 90%)",
        st["utilisation"] >= 0.9,
        round(st["utilisation"], 3),
        ">= 0.9",
    )
    ctx.check(
        "training-tuned still uses >= 80% of the link",
        tr["utilisation"] >= 0.8,
        round(tr["utilisation"], 3),
        ">= 0.8",
    )
    panels = [
        Panel(
            "bottleneck queue (priority 3)",
            "time (s)",
            "bytes",
            lines={
                v: ([t for t, _ in r["queue_depth"]], [d for _, d in r["queue_depth"]])
                for v, r in results.items()
            },
        )
    ]
    path = save_panels(ctx.out_dir / "ecn-thresholds.png", panels, title="ECN thresholds")
    ctx.plots.append(path.name)


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_VARIANT = (
    ("util", ("utilisation",)),
    ("queue p50 (B)", ("queue_p50_bytes",)),
    ("queue p99 (B)", ("queue_p99_bytes",)),
    ("CE marks", ("ecn_marks",)),
    ("CNPs", ("cnps",)),
    ("PFC frames", ("pfc_frames",)),
    ("Jain's fairness", ("jain",)),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "ecn-thresholds",
        "ecn-thresholds",
        "ecn-thresholds: training- vs storage-tuned",
        figures=per_key(VARIANTS, ("variants",), _FIGURES_PER_VARIANT),
        timeout_s=600,
    ),
)

"""The adaptive-collectives report: its tables, its metrics' documents and its plot.

Renders what scenarios/adaptive_collectives.py measured (emu/traffic/
cross_pod.py `CollectiveRun`, emu/traffic/dragonfly.py `DragonflyRun`) and
the models' figures it was given; it measures and judges nothing
(tests/unit/test_ar_report.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from emu.telemetry import pyplot
from emu.traffic.cross_pod import TIERS, CollectiveRun, QpCounts

Runs = Mapping[str, list[tuple[CollectiveRun, CollectiveRun]]]  # mode -> (ring, all-to-all)


def _total(runs: list[CollectiveRun]) -> QpCounts:
    """The counts of several runs added up; the depth their deepest."""
    fields = [k for k in QpCounts.__dataclass_fields__ if k != "reorder_depth_max"]
    return QpCounts(
        **{k: sum(getattr(r.counts, k) for r in runs) for k in fields},
        reorder_depth_max=max((r.counts.reorder_depth_max for r in runs), default=0),
    )


def counts_doc(pairs: list[tuple[CollectiveRun, CollectiveRun]]) -> dict:
    """A mode's NIC counters for metrics.json: {"ring": {...}, "alltoall": {...}}."""
    return {
        "ring": asdict(_total([r for r, _a in pairs])),
        "alltoall": asdict(_total([a for _r, a in pairs])),
    }


def queues_doc(pairs: list[tuple[CollectiveRun, CollectiveRun]]) -> dict:
    """A mode's priority-3 queues per tier for metrics.json: mean and deepest bytes."""
    return {
        kind: {
            tier: {
                "mean_bytes": statistics.mean(r.queues[tier].mean_bytes for r in runs),
                "max_bytes": max(r.queues[tier].max_bytes for r in runs),
            }
            for tier in TIERS
        }
        for kind, runs in (("ring", [r for r, _ in pairs]), ("alltoall", [a for _, a in pairs]))
    }


def fat_tree_table(
    runs: Runs, ring: Mapping[str, list[float]], a2a: Mapping[str, list[float]], expect: float
) -> tuple[str, list[str], list[list]]:
    """(title, columns, rows): each mode's collectives over non-blocking and its NICs' counts."""
    rows = []
    for mode, pairs in runs.items():
        counts = _total([run for pair in pairs for run in pair])
        rows.append(
            [
                mode,
                round(statistics.mean(ring[mode]), 3),
                round(min(ring[mode]), 3),
                round(statistics.mean(a2a[mode]), 3),
                round(min(a2a[mode]), 3),
                counts.retransmitted,
                counts.naks,
                counts.timeouts,
                counts.out_of_order,
                counts.reorder_depth_max,
                counts.cnps,
            ]
        )
    title = (
        "cross-pod collectives over the non-blocking switch, by routing (ECMP's expectation "
        f"over every hash draw for the ring: {expect:.3f})"
    )
    columns = [
        "routing",
        "ring mean",
        "ring min",
        "a2a mean",
        "a2a min",
        "resent",
        "NAKs",
        "timeouts",
        "out of order",
        "deepest reorder (PSNs)",
        "CNPs",
    ]
    return title, columns, rows


def queue_table(runs: Runs) -> tuple[str, list[str], list[list]]:
    """(title, columns, rows): priority 3's queue per tier, mean and deepest, per mode."""
    rows = []
    for mode, pairs in runs.items():
        doc = queues_doc(pairs)
        for kind in ("ring", "alltoall"):
            rows.append(
                [mode, kind]
                + [
                    f"{doc[kind][t]['mean_bytes'] / 1e3:.1f} / {doc[kind][t]['max_bytes'] / 1e3:.1f}"
                    for t in TIERS
                ]
            )
    title = "priority-3 queue per tier, mean / deepest KB (switch telemetry, every 100 ms)"
    return title, ["routing", "collective", *TIERS], rows


def dragonfly_table(got: Mapping[str, Mapping], models: Mapping[str, Mapping[str, float]]):
    """(title, columns, rows): each routing's delivered throughput per pattern and the models'."""
    rows = []
    for routing, by_pattern in got.items():
        for pattern, run in by_pattern.items():
            m = models[pattern]
            rows.append(
                [
                    routing,
                    pattern,
                    round(run.delivered_bps / 1e6, 2),
                    round(run.delivered_bps / run.offered_total_bps, 3),
                    round(m["minimal"] / 1e6, 2),
                    round(m["minimal-lossy"] / 1e6, 2),
                    round(m["ugal-local"] / 1e6, 2),
                    round(m["valiant"] / 1e6, 2),
                    run.nonminimal,
                ]
            )
    columns = [
        "routing",
        "pattern",
        "delivered Mbit/s",
        "of offered",
        "model minimal",
        "minimal lossy",
        "UGAL-L",
        "Valiant",
        "off minimal (packets)",
    ]
    return "dragonfly, 5 groups x 2 routers: UDP in the lossy class", columns, rows


def plot(
    path: Path, ring: Mapping[str, list[float]], a2a: Mapping[str, list[float]], expect: float
) -> Path:
    """Bars per mode, ring and all-to-all over non-blocking, each seed a dot; ECMP's line."""
    plt = pyplot()
    modes = list(ring)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, (name, got) in enumerate((("ring all-reduce", ring), ("all-to-all", a2a))):
        xs = [j + (i - 0.5) * width for j in range(len(modes))]
        ax.bar(xs, [statistics.mean(got[m]) for m in modes], width, label=name)
        for x, m in zip(xs, modes):
            ax.plot([x] * len(got[m]), got[m], "k.", markersize=4)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="non-blocking")
    ax.axhline(expect, color="tab:red", linestyle=":", linewidth=1, label="ECMP ring, expected")
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylabel("share of the non-blocking switch")
    ax.set_ylim(0, 1.15)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("cross-pod collectives on a k=4 fat-tree, by routing")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

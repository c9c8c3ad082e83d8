"""The report of collectives measured on a rail-optimized fabric: tables, texts and a plot.

Renders the `Part`s that emu/traffic/rail.py measures (each collective's
spine and NVSwitch bytes against its model, and its times) and the
all-reduces' results: `BYTES_COLUMNS` and `bytes_row` (a table with a row
per part), `allreduce_texts` (each all-reduce, and each phase of a
hierarchical one, as nccl-tests prints it, emu/traffic/collectives.py
`nccl_table`), `alltoall_text` (each all-to-all's completion against its
busiest NIC link's time), `render` (all three into a report, in that
order), `part_metrics` (the parts' bytes and times by name, for
metrics.json) and `plot` (the bytes and times as bars). Pure but for
`render`'s report and `plot`'s file: parts in, rows and strings out; it
neither measures nor judges (the scenario's checks do). Used by
scenarios/rail_optimized.py; tests/unit/test_rail_report.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from emu.telemetry import pyplot
from emu.traffic import collectives
from emu.traffic.collectives import AllReduceResult
from emu.traffic.rail import Part, RailLayout

MS_PER_S = 1000.0


class Report(Protocol):
    """Where `render` writes: a scenario's Context (emu/scenario.py) is one."""

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None: ...

    def text(self, block: str) -> None: ...


#: The bytes table's columns, one row per part (`bytes_row`).
BYTES_COLUMNS = (
    "case",
    "crossing hops/pairs",
    "model data B",
    "model frames B",
    "spine rx B",
    "error",
    "time ms",
    "wire ms",
    "NVLink ms",
    "NVLink model ms",
    "NVSwitch rx B",
    "NVLink model B",
)


def bytes_row(pt: Part) -> list:
    """A part's row of the bytes table (`BYTES_COLUMNS`): bytes, their error, times in ms."""
    return [
        pt.name,
        pt.hops,
        f"{pt.model_payload_bytes:.0f}",
        pt.model_frame_bytes,
        pt.spine_rx_bytes,
        f"{(pt.spine_rx_bytes - pt.model_frame_bytes) / pt.model_frame_bytes * 100:+.1f}%"
        if pt.model_frame_bytes
        else "(model 0)",
        f"{pt.time_s * MS_PER_S:.1f}",
        f"{pt.wire_s * MS_PER_S:.1f}",
        f"{pt.nvlink_s * MS_PER_S:.2f}",
        f"{pt.nvlink_model_s * MS_PER_S:.2f}",
        pt.nvswitch_rx_bytes,
        pt.model_nvlink_frame_bytes,
    ]


def allreduce_texts(
    results: Mapping[str, AllReduceResult],
    hierarchical: Part | None,
    nvlink_rate_bps: float,
) -> list[str]:
    """Each all-reduce as nccl-tests prints it, a block per result, in order.

    Args:
        results: name -> result; "hierarchical" (rail.Hierarchical `named`)
            and "flat ring" get a note on what they are.
        hierarchical: the hierarchical all-reduce's part, for its note (None:
            no such result).
        nvlink_rate_bps: the NVLink ports' rate, named in that note.
    """
    blocks = []
    for name, r in results.items():
        note = ""
        if name == "hierarchical" and hierarchical is not None:
            note = (
                f" (time = reduce-scatter + all-gather over NVLink at "
                f"{nvlink_rate_bps / 1e6:g} Mbit/s: "
                f"{hierarchical.nvlink_s * MS_PER_S:.2f} ms measured "
                f"({hierarchical.nvlink_model_s * MS_PER_S:.2f} ms at the NVLink rate), "
                f"+ the slowest rail's ring: {hierarchical.wire_s * MS_PER_S:.1f} ms; "
                f"busbw over {r.nranks} ranks)"
            )
        elif name == "flat ring":
            note = " (flat ring without NVLink: every hop on the network)"
        blocks.append(f"{name}, {r.nranks} ranks{note}\n" + collectives.nccl_table([r]))
    return blocks


def alltoall_text(
    parts: Mapping[str, Part], floors: Mapping[str, float], nic_bytes: int, rate_mbps: float
) -> str:
    """Each all-to-all's completion against its busiest NIC link's time.

    Args:
        parts: the measured parts by name; those without a floor are left out.
        floors: each all-to-all's busiest NIC link's time (emu/models/collective.py
            `alltoall_link_s`), by part name.
        nic_bytes: the data each NIC sends.
        rate_mbps: the NIC links' rate.
    """
    lines = [
        f"all-to-all: each NIC sends {nic_bytes} B of "
        f"data; the busiest NIC link's time (frames + ACKs at {rate_mbps:g} Mbit/s):"
    ]
    for name, floor in floors.items():
        if name not in parts:
            continue
        pt = parts[name]
        lines.append(
            f"  {name}: completion {pt.time_s * MS_PER_S:.0f} ms = wire "
            f"{pt.wire_s * MS_PER_S:.0f} ms "
            f"(floor {floor * MS_PER_S:.0f} ms, {(pt.wire_s - floor) / floor * 100:+.1f}%)"
            + (
                f" + NVLink hand-over {pt.nvlink_s * MS_PER_S:.1f} ms "
                f"({pt.nvlink_model_s * MS_PER_S:.1f} ms at the NVLink rate)"
                if pt.nvlink_s
                else ""
            )
        )
    if "all-to-all without PXN" in parts:
        lines.append(
            "  without PXN the cross-rail pairs share the leaves' spine uplinks as ECMP hashed "
            "them: above the floor when two land on one uplink (not checked)"
        )
    return "\n".join(lines)


def render(
    report: Report,
    layout: RailLayout,
    parts: Sequence[Part],
    results: Mapping[str, AllReduceResult],
    floors: Mapping[str, float],
    size: int,
    a2a: int,
    rate_mbps: float,
) -> None:
    """The bytes table, each all-reduce's text and, if an all-to-all ran, their text.

    Args:
        report: where the table and texts go, in that order.
        layout: the fabric the parts ran on (its shape and NVLink rate are named).
        parts: the measured parts, a row each.
        results: the all-reduces by name (`allreduce_texts`).
        floors: each all-to-all's busiest NIC link's time (`alltoall_text`).
        size: the all-reduces' bytes per rank, S.
        a2a: the all-to-alls' bytes from each GPU to each GPU of another node, M.
        rate_mbps: the NIC links' rate.
    """
    nodes, gpus = len(layout.nodes), layout.gpus
    report.table(
        f"spine bytes (the spines' port rx counters) against the model, "
        f"{nodes} nodes x {gpus} GPUs x {len(layout.spines)} spines, "
        f"{rate_mbps:g} Mbit/s; all-reduce S = {size} B, all-to-all M = {a2a} B",
        list(BYTES_COLUMNS),
        [bytes_row(pt) for pt in parts],
    )
    by = {pt.name: pt for pt in parts}
    for block in allreduce_texts(results, by.get("hierarchical"), layout.nvlink_rate_bps):
        report.text(block)
    if any(name in by for name in floors):
        report.text(alltoall_text(by, floors, (nodes - 1) * gpus * a2a, rate_mbps))


def part_metrics(parts: Sequence[Part]) -> dict[str, dict[str, Any]]:
    """The parts' bytes against the model and their times, each by part name (metrics.json)."""
    return {
        "nvswitch_bytes": {pt.name: pt.nvswitch_rx_bytes for pt in parts},
        "model_nvswitch_bytes": {pt.name: pt.model_nvlink_frame_bytes for pt in parts},
        "spine_bytes": {pt.name: pt.spine_rx_bytes for pt in parts},
        "model_spine_bytes": {pt.name: pt.model_frame_bytes for pt in parts},
        "time_s": {pt.name: pt.time_s for pt in parts},
    }


def plot(
    path: Path, parts: Sequence[Part], title: str = "rail-optimized: where the bytes go"
) -> Path:
    """Spine and NVSwitch bytes measured against the model per part, and each part's time.

    Returns:
        `path`, the PNG written.
    """
    plt = pyplot()
    fig, (ax1, ax3, ax2) = plt.subplots(1, 3, figsize=(18, 4.5))
    names = [pt.name for pt in parts]
    xs = range(len(parts))
    w = 0.4
    for ax, model_of, measured_of, where in (
        (ax1, lambda pt: pt.model_frame_bytes, lambda pt: pt.spine_rx_bytes, "spines"),
        (
            ax3,
            lambda pt: pt.model_nvlink_frame_bytes,
            lambda pt: pt.nvswitch_rx_bytes,
            "NVSwitches",
        ),
    ):
        ax.bar([x - w / 2 for x in xs], [model_of(pt) / 1e3 for pt in parts], w, label="model")
        ax.bar(
            [x + w / 2 for x in xs], [measured_of(pt) / 1e3 for pt in parts], w, label="measured"
        )
        ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"kB received by the {where}")
        ax.set_title(f"received by the {where}: port counters vs model")
        ax.legend()
    ax2.bar(list(xs), [pt.wire_s * 1000 for pt in parts], label="on the network (measured)")
    ax2.bar(
        list(xs),
        [pt.nvlink_s * 1000 for pt in parts],
        bottom=[pt.wire_s * 1000 for pt in parts],
        label="NVLink (measured)",
    )
    ax2.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
    ax2.set_ylabel("ms")
    ax2.set_title("iteration / completion time")
    ax2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

"""The rail report (emu/traffic/rail_report.py): rows, texts and metrics from parts by hand.

Parts are built here as emu/traffic/rail.py would return them with their
model given, so each figure in a row or a line can be read off its fields.
"""

from __future__ import annotations

import pytest

from emu import fabric as fabric_mod
from emu.traffic import rail, rail_report
from emu.traffic.collectives import AllReduceResult


def part(name, kind="allreduce", **fields):
    base = dict(
        spine_rx_bytes=0,
        model_payload_bytes=0.0,
        model_frame_bytes=0,
        time_s=1.0,
        wire_s=1.0,
        nvlink_s=0.0,
    )
    base.update(fields)
    return rail.Part(name, kind, **base)


def result(nranks, time_s=0.5, size=4096):
    return AllReduceResult(
        size_bytes=size,
        count=size // 4,
        dtype="float32",
        nranks=nranks,
        algo="ring",
        iters=1,
        time_s=time_s,
        algbw_bytes_per_s=size / time_s,
        busbw_bytes_per_s=size / time_s,
        wrong=0,
        tx_payload_bytes={},
        tx_frame_bytes={},
        retransmitted={},
        elapsed_s={},
        digests_agree=True,
    )


CROSSING = part(
    "crossing ring",
    spine_rx_bytes=1050,
    model_payload_bytes=960.0,
    model_frame_bytes=1000,
    hops=4,
    time_s=1.6934,
    wire_s=1.6934,
)
HIER = part(
    "hierarchical",
    spine_rx_bytes=480,
    time_s=0.9606,
    wire_s=0.8377,
    nvlink_s=0.1228,
    nvlink_model_s=0.1249,
    nvswitch_rx_bytes=2247680,
    model_nvlink_frame_bytes=2247680,
)
NO_PXN = part("all-to-all without PXN", "alltoall", time_s=1.1122, wire_s=1.1122, hops=24)
PXN = part(
    "all-to-all with PXN",
    "alltoall",
    time_s=0.8834,
    wire_s=0.8378,
    nvlink_s=0.0456,
    nvlink_model_s=0.05,
)


def test_a_row_has_the_bytes_their_error_and_the_times_in_ms():
    row = rail_report.bytes_row(CROSSING)
    assert len(row) == len(rail_report.BYTES_COLUMNS)
    assert row == [
        "crossing ring",
        4,
        "960",
        1000,
        1050,
        "+5.0%",
        "1693.4",
        "1693.4",
        "0.00",
        "0.00",
        0,
        0,
    ]
    row = dict(zip(rail_report.BYTES_COLUMNS, rail_report.bytes_row(HIER)))
    assert row["error"] == "(model 0)"  # no model on the spines: no error to give
    assert (row["NVLink ms"], row["NVLink model ms"]) == ("122.80", "124.90")
    assert row["NVSwitch rx B"] == row["NVLink model B"] == 2247680


def test_each_all_reduce_is_an_nccl_table_and_the_two_kinds_say_what_they_are():
    results = {
        "hierarchical": result(8),
        "flat ring": result(8),
        "inter-node ring, rail 1": result(4),
    }
    blocks = rail_report.allreduce_texts(results, HIER, 18e6)
    assert len(blocks) == 3
    assert all("# Out of bounds values" in b and "busbw" in b for b in blocks)
    assert blocks[0].startswith(
        "hierarchical, 8 ranks (time = reduce-scatter + all-gather over NVLink at 18 Mbit/s: "
        "122.80 ms measured (124.90 ms at the NVLink rate), + the slowest rail's ring: "
        "837.7 ms; busbw over 8 ranks)\n"
    )
    assert blocks[1].startswith("flat ring, 8 ranks (flat ring without NVLink: every hop")
    assert blocks[2].startswith("inter-node ring, rail 1, 4 ranks\n")


def test_the_all_to_all_text_puts_each_completion_against_its_floor():
    floors = {"all-to-all without PXN": 1.0, "all-to-all with PXN": 0.8}
    text = rail_report.alltoall_text({p.name: p for p in (NO_PXN, PXN)}, floors, 98304, 2.0)
    lines = text.splitlines()
    assert lines[0] == (
        "all-to-all: each NIC sends 98304 B of data; the busiest NIC link's time "
        "(frames + ACKs at 2 Mbit/s):"
    )
    assert (
        lines[1]
        == "  all-to-all without PXN: completion 1112 ms = wire 1112 ms (floor 1000 ms, +11.2%)"
    )
    assert lines[2] == (
        "  all-to-all with PXN: completion 883 ms = wire 838 ms (floor 800 ms, +4.7%)"
        " + NVLink hand-over 45.6 ms (50.0 ms at the NVLink rate)"
    )
    assert "ECMP" in lines[3]
    # PXN alone: its line, no line for the part that did not run, no ECMP note.
    only = rail_report.alltoall_text({PXN.name: PXN}, floors, 98304, 2.0).splitlines()
    assert len(only) == 2 and only[1].startswith("  all-to-all with PXN")


class Report:
    def __init__(self):
        self.blocks = []

    def table(self, title, columns, rows):
        self.blocks.append(("table", title, columns, rows))

    def text(self, block):
        self.blocks.append(("text", block))


@pytest.fixture(scope="module")
def layout():
    return rail.RailLayout.of(fabric_mod.rail_optimized(nodes=4, gpus_per_node=2, spines=2))


def test_render_writes_the_table_then_the_all_reduces_then_the_all_to_alls(layout):
    report = Report()
    floors = {"all-to-all without PXN": 1.0, "all-to-all with PXN": 0.8}
    results = {"crossing ring": result(4)}
    rail_report.render(report, layout, [CROSSING, PXN], results, floors, 4096, 1024, 2.0)
    kinds = [b[0] for b in report.blocks]
    assert kinds == ["table", "text", "text"]
    _, title, columns, rows = report.blocks[0]
    assert title == (
        "spine bytes (the spines' port rx counters) against the model, 4 nodes x 2 GPUs x "
        "2 spines, 2 Mbit/s; all-reduce S = 4096 B, all-to-all M = 1024 B"
    )
    assert columns == list(rail_report.BYTES_COLUMNS) and [r[0] for r in rows] == [
        "crossing ring",
        "all-to-all with PXN",
    ]
    assert report.blocks[1][1].startswith("crossing ring, 4 ranks")
    # Each NIC sends M to each of the other 3 nodes' 2 GPUs.
    assert report.blocks[2][1].startswith("all-to-all: each NIC sends 6144 B")
    # No all-to-all: no all-to-all text.
    report = Report()
    rail_report.render(report, layout, [CROSSING], results, floors, 4096, 1024, 2.0)
    assert [b[0] for b in report.blocks] == ["table", "text"]


def test_part_metrics_give_each_figure_by_part_name():
    m = rail_report.part_metrics([CROSSING, HIER])
    assert m == {
        "nvswitch_bytes": {"crossing ring": 0, "hierarchical": 2247680},
        "model_nvswitch_bytes": {"crossing ring": 0, "hierarchical": 2247680},
        "spine_bytes": {"crossing ring": 1050, "hierarchical": 480},
        "model_spine_bytes": {"crossing ring": 1000, "hierarchical": 0},
        "time_s": {"crossing ring": 1.6934, "hierarchical": 0.9606},
    }


def test_the_plot_is_a_png(tmp_path):
    path = rail_report.plot(tmp_path / "rail.png", [CROSSING, HIER, NO_PXN, PXN])
    assert path == tmp_path / "rail.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000

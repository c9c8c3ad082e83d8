"""`emu reproduce`: figures read from metrics.json, aggregated over faithful runs, rendered.

Pure logic on hand-built metrics.json documents; the shell (`run_once`,
`reproduce`) runs small Python processes that stand in for `emu run`, so no
fabric and no root are needed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emu import cli, registry, reproduce
from emu.figures import Entry, Figure
from emu.reproduce import RunRecord
from emu.scenario import ScenarioError

ROOT = Path(__file__).resolve().parents[2]

TOY = Entry(
    "toy",
    "smoke",
    "toy scenario",
    figures=(
        Figure("value", ("m", "v")),
        Figure("value x 1000", ("m", "v"), scale=1e3),
        Figure("missing", ("m", "nope")),
    ),
)

MACHINE = {"cores": 2, "cpu": "Test CPU 9000", "kernel": "6.1.0-test", "memory": "7.8 GiB"}


def fidelity(faithful: bool) -> dict:
    stall = 13.9 if not faithful else 4.2
    return {
        "faithful": faithful,
        "processes": 6,
        "frames": 48669,
        "worst": {
            "on_time": {
                "where": "leaf4 port 1 (leaf4-eth1)",
                "value": 0.995,
                "limit": 0.99,
                "passed": True,
            },
            "stall": {"where": "leaf1 (switch)", "value": stall, "limit": 10.0, "passed": faithful},
            "deficit": {
                "where": "leaf4 port 1 (leaf4-eth1)",
                "value": 0.0016,
                "limit": 0.01,
                "passed": True,
            },
            "kernel_drops": {
                "where": "spine1 port 1 (spine1-eth1)",
                "value": 0,
                "limit": 0,
                "passed": True,
            },
        },
    }


def doc(value, faithful: bool = True, checks=(("network ok", True),), plots=()) -> dict:
    """A metrics.json as emu.scenario.write_results writes it."""
    cs = [
        {"name": n, "passed": p, "value": 1, "expected": "1", "fidelity": False} for n, p in checks
    ]
    cs.append(
        {
            "name": "fidelity: stall",
            "passed": faithful,
            "value": "x",
            "expected": "y",
            "fidelity": True,
        }
    )
    return {
        "scenario": "smoke",
        "params": {},
        "metrics": {"m": {"v": value}, "fidelity": fidelity(faithful)},
        "checks": cs,
        "events": [],
        "plots": list(plots),
        "passed": all(c["passed"] for c in cs),
        "faithful": faithful,
    }


def record(i: int, d: dict | None, code: int = 0) -> RunRecord:
    return RunRecord(
        i,
        f"/nonexistent/run-{i}",
        code,
        d,
        10.0 * i,
        "" if d is not None else "no metrics.json in /nonexistent",
    )


# ----- reading figures ---------------------------------------------------------------------


def test_lookup_follows_keys_indices_and_wildcards():
    data = {
        "results": {"ring": [{"size": 1, "bw": 2.0}, {"size": 4, "bw": 3.0}]},
        "measured_s": {"ring": {"1.5": 0.25}},
    }
    assert reproduce.lookup(data, ("results", "ring", -1, "bw")) == 3.0
    assert reproduce.lookup(data, ("results", "ring", "*", "size")) == [1, 4]
    assert reproduce.lookup(data, ("results", "*", 0, "bw")) == [2.0]
    # Keys with dots (the straggler's factors) are one key each, not a dotted path.
    assert reproduce.lookup(data, ("measured_s", "ring", "1.5")) == 0.25
    assert reproduce.lookup(data, ("results", "ring", 2, "bw")) is None
    assert reproduce.lookup(data, ("results", "sharp", -1)) is None
    assert reproduce.lookup(data, ("results", "ring", "bw")) is None


@pytest.mark.parametrize(
    "fig, expected",
    [
        (Figure("f", ("a",)), 2.0),
        (Figure("f", ("a",), scale=1e3), 2000.0),
        (Figure("f", ("lst",), "len"), 3.0),
        (Figure("f", ("lst",), "sum"), 6.0),
        (Figure("f", ("lst",), "mean"), 2.0),
        (Figure("f", ("per",), "sum"), 5.0),  # a dict's values
        (Figure("f", ("per",), "max"), 4.0),
        (Figure("f", ("per",), "max_share"), 0.8),
        (Figure("f", ("per",), "min_share"), 0.2),
        (Figure("f", ("a",), "ratio", ("b",)), 0.5),
        (Figure("f", ("a",), "add", ("b",)), 6.0),
        (Figure("f", ("a",), "ratio", ("zero",)), None),  # no division by zero, no number
        (Figure("f", ("none",)), None),  # detected_after_s is None when off
        (Figure("f", ("flag",)), None),  # a bool is not a figure
        (Figure("f", ("text",)), None),
        (Figure("f", ("text",), "sum"), None),  # wrong shape: no number, no error
        (Figure("f", ("a",), "ratio", ("nope",)), None),
    ],
)
def test_extract_applies_the_figures_operation(fig, expected):
    metrics = {
        "a": 2,
        "b": 4,
        "zero": 0,
        "lst": [1, 2, 3],
        "per": {"x": 1, "y": 4},
        "none": None,
        "flag": True,
        "text": "leaf1",
    }
    assert reproduce.extract(metrics, fig) == expected


def test_a_figure_with_an_unknown_op_or_missing_operand_is_refused():
    with pytest.raises(ValueError, match="op 'median'"):
        Figure("f", ("a",), "median")
    with pytest.raises(ValueError, match="'ratio' needs `other`"):
        Figure("f", ("a",), "ratio")
    with pytest.raises(ValueError, match="'sum' takes no `other`"):
        Figure("f", ("a",), "sum", ("b",))


def test_the_table_reads_a_real_smoke_metrics_shape():
    smoke = next(e for e in reproduce.ENTRIES if e.id == "smoke")
    metrics = {
        "converge_s": 3.8,
        "fabric": {"rate_bps": 20_000_000},
        "tcp": {"goodput_bps": 19e6, "wire_bps": 19.9e6, "peak_window_bps": 20e6, "retransmits": 0},
        "ecmp": {"bytes_per_top_switch": {"spine1": 3, "spine2": 1}},
        "link_failure": {"outage_s": {"h1": 0.04, "h2": 0.0}},
        "controller_reaction_s": 0.061,
        "ping": {"all-pairs ping": {"pairs": 12, "loss_pct": 0.0}},
    }
    got = {f.label: reproduce.extract(metrics, f) for f in smoke.figures}
    assert got["TCP on the wire / link rate"] == pytest.approx(0.995)
    assert got["ECMP: largest top-tier switch's share"] == 0.75
    assert got["link down: longest outage of any sender (ms)"] == pytest.approx(40.0)
    assert got["all-pairs ping: pairs"] == 12
    assert got["all-pairs ping after the link failure: loss %"] is None  # not in this run


def _figures(entry_id: str, metrics: dict) -> dict:
    """Every figure of an entry read from `metrics`; each must be a number."""
    entry = next(e for e in reproduce.ENTRIES if e.id == entry_id)
    got = {f.label: reproduce.extract(metrics, f) for f in entry.figures}
    assert [label for label, v in got.items() if v is None] == []
    return got


def test_the_livelock_table_reads_its_metrics_shape():
    # The README's run at dfd3fb2, as scenarios/livelock.py writes it.
    def mode(goodput_bps, share, msgs, sent, lost, resent, per_loss, discarded):
        return {
            "goodput_bps": goodput_bps,
            "line_share": share,
            "messages_completed": msgs,
            "tx_packets": sent,
            "link_busy": 0.999,
            "lost_frames": lost,
            "naks": lost,
            "timeouts": 0,
            "retransmitted": resent,
            "resent_per_loss": per_loss,
            "rx_discarded_packets": discarded,
        }

    got = _figures(
        "livelock",
        {
            "modes": {
                "go-back-n": mode(17.8e6, 0.941, 17, 18491, 72, 217, 3.0, 0),
                "go-back-0": mode(0.0, 0.0, 0, 18486, 72, 18434, 256.0, 18224),
            }
        },
    )
    assert got["go-back-n: goodput (Mbit/s)"] == pytest.approx(17.8)
    assert got["go-back-0: messages completed"] == 0
    assert got["go-back-0: frames resent per loss"] == 256


def test_the_pfc_deadlock_table_reads_its_metrics_shape():
    # The README's run, as scenarios/pfc_deadlock.py writes it.
    flows = ("h1->h3", "h2->h4", "h3->h1", "h4->h2")
    deadlock = {
        "formed_after_s": 0.52,
        "cycle_switches": ["s1", "s2", "s3", "s4"],
        "above_xoff": [f"s{i}-eth2 prio 3" for i in (1, 2, 3, 4)],
        "bytes_formed": dict.fromkeys(flows, 0),
        "bytes_stopped": dict.fromkeys(flows, 0),
        "ring_tx_stopped": 0,
        "pause_refreshed": {f"s{i}-eth2 prio 3": 2 for i in (1, 2, 3, 4)},
        "hosts_paused": ["h1", "h2", "h3", "h4"],
        "storms_on_cycle": [
            {"switch": "s2", "port": 3, "prio": 3, "after_s": 2.08},
            {"switch": "s3", "port": 3, "prio": 3, "after_s": 2.06},
        ],
        "watchdog_drops": 9093,
        "bytes_recovered": dict(zip(flows, (430080, 538624, 159744, 279552))),
    }
    tagger = {
        "cycles_seen": [],
        "storms": 0,
        "goodput_bps": dict(zip(flows, (3.65e6, 4.64e6, 3.4e6, 3.64e6))),
        "done_at_s": dict(zip(flows, (2.73, 2.15, 2.93, 2.74))),
        "timeouts": dict(zip(flows, (1, 0, 1, 0))),
        "tagged_packets": {"s1": 0, "s2": 0, "s3": 812, "s4": 0},
    }
    got = _figures("pfc-deadlock", {"modes": {"deadlock": deadlock, "tagger": tagger}})
    assert got["deadlock: ring ingress queues full to XOFF"] == 4
    assert got["deadlock: watchdog: storm declared after it was on (s)"] == 2.06
    assert got["deadlock: watchdog on: fewest bytes a flow received (B)"] == 159744
    assert got["tagger: slowest flow (Mbit/s)"] == pytest.approx(3.4)
    assert got["tagger: last flow done after (s)"] == 2.93
    assert got["tagger: RTO timeouts (all flows)"] == 2


def test_the_credit_vs_pfc_table_reads_its_metrics_shape():
    # The README's run at eb52db3, as scenarios/credit_vs_pfc.py writes it.
    def mode(mbps, victim_mbps, stalled_s, pause, fc, cnps):
        wire = {"bottleneck": 0, "spine-leaf2": 0, "victim-sender": 0}
        return {
            "goodput_bps": {h: m * 1e6 for h, m in zip(("h1", "h2", "h5", "h6"), mbps)},
            "incast_bps": sum(mbps) * 1e6,
            "victim_bps": victim_mbps * 1e6,
            "queue_p50_bytes": 174202,
            "queue_max_bytes": 209908,
            "switch_drops": 0,
            "nic_drops": 0,
            "cnps": cnps,
            "stalled_s": {"leaf2:5": stalled_s / 2, "h1": stalled_s / 2} if stalled_s else {},
            "wire": {
                name: {"pause": pause if name == "bottleneck" else 0, "flow_control": fc // 3}
                for name in wire
            },
        }

    audit = {
        link: {"checked": n, "violations": 0}
        for link, n in (("h3 -> leaf1", 1664), ("leaf2 -> h8", 9281), ("spine1 -> leaf2", 4748))
    }
    modes = {
        "pfc": mode((1.59, 1.6, 3.17, 3.1), 1.54, 42.3, 136, 0, 0),
        "dcqcn": mode((2.25, 2.41, 2.29, 2.22), 9.46, 0, 0, 0, 654),
        "credit": dict(mode((1.58, 1.57, 3.16, 3.16), 1.58, 44.9, 0, 2097, 0), audit=audit),
        "pfc-2class": mode((1.6, 1.6, 3.13, 3.13), 9.46, 34.7, 62, 0, 0),
        "credit-2vl": dict(mode((1.58, 1.58, 3.15, 3.16), 9.44, 37.3, 0, 5004, 0), audit=audit),
    }
    got = _figures("credit-vs-pfc", {"modes": modes, "line_goodput_bps": 9.4639e6})
    assert got["pfc: victim slowdown (x)"] == pytest.approx(6.1, abs=0.05)
    assert got["dcqcn: victim slowdown (x)"] == pytest.approx(1.0, abs=0.01)
    assert got["pfc: paused / blocked port-seconds"] == pytest.approx(42.3)
    assert got["pfc: PAUSE frames on the captured links"] == 136
    assert got["credit: credit frames on the captured links"] == 2097
    assert got["credit: frames checked against the credit"] == 1664 + 9281 + 4748
    assert "pfc: credit violations" not in got  # PFC's pcaps carry no credit to replay


def test_the_rail_optimized_table_reads_its_metrics_shape():
    # The README's run at 0065ae2, as scenarios/rail_optimized.py writes it: per part
    # hops, spines model / received, NVSwitches model / received, time, network, NVLink.
    rows = {
        "rail-aligned ring": (0, 0, 960, 0, 0, 1.6806, 1.6806, 0.0),
        "crossing ring": (4, 1685760, 1686240, 0, 0, 1.6934, 1.6934, 0.0),
        "flat ring": (8, 3933440, 3934880, 0, 0, 5.9128, 5.9128, 0.0),
        "hierarchical": (0, 0, 480, 2247680, 2247680, 0.9606, 0.8377, 0.1228),
        "all-to-all without PXN": (24, 842880, 843120, 0, 0, 1.1122, 1.1122, 0.0),
        "all-to-all with PXN": (0, 0, 480, 842880, 842880, 0.8834, 0.8378, 0.0456),
    }
    keys = (
        "hops",
        "model_frame_bytes",
        "spine_rx_bytes",
        "model_nvlink_frame_bytes",
        "nvswitch_rx_bytes",
        "time_s",
        "wire_s",
        "nvlink_s",
    )
    parts = {
        name: dict(zip(keys, row), wrong=0, nvlink_model_s=0.1249 if row[7] else 0.0)
        for name, row in rows.items()
    }
    metrics = {
        "parts": parts,
        "alltoall_floor_s": {"all-to-all without PXN": 0.84288, "all-to-all with PXN": 0.84288},
        "allreduce": {
            "flat ring": {"algbw_bytes_per_s": 44335.2, "busbw_bytes_per_s": 77586.5},
            "hierarchical": {"algbw_bytes_per_s": 272905.4, "busbw_bytes_per_s": 477584.4},
        },
    }
    got = _figures("rail-optimized", metrics)
    assert got["crossing ring: spines received (B)"] == 1686240
    assert got["flat ring: spines received / model"] == pytest.approx(1.0004, abs=1e-4)
    assert got["hierarchical: NVSwitches received / model"] == 1.0
    assert got["hierarchical: network part (ms)"] == pytest.approx(837.7)
    assert got["all-to-all with PXN: NIC-link floor (ms)"] == pytest.approx(842.88)
    assert got["hierarchical: busbw (MB/s)"] == pytest.approx(0.48, abs=0.005)
    assert got["wrong elements (all parts)"] == 0


# ----- the table of entries ------------------------------------------------------------------


def test_entries_are_unique_and_cover_every_scenario_the_readme_quotes():
    ids = [e.id for e in reproduce.ENTRIES]
    assert len(ids) == len(set(ids))
    assert {e.scenario for e in reproduce.ENTRIES} == {
        "smoke",
        "incast",
        "pause-storm",
        "mixed-traffic",
        "ecn-thresholds",
        "failover",
        "link-flap",
        "sharp-allreduce",
        "straggler",
        "ecmp-vs-adaptive",
        "adaptive-collectives",
        "credit-vs-pfc",
        "livelock",
        "pfc-deadlock",
        "rail-optimized",
        "training-step",
    }
    for e in reproduce.ENTRIES:
        labels = [f.label for f in e.figures]
        assert labels and len(labels) == len(set(labels)), e.id
    smoke_ft = next(e for e in reproduce.ENTRIES if e.id == "smoke-fat-tree")
    assert smoke_ft.full == ("topology=fat_tree", "k=4")
    eva = next(e for e in reproduce.ENTRIES if e.id == "ecmp-vs-adaptive")
    assert eva.full == ("patterns=stride4,stride8,random", "modes=ecmp,adaptive")


@pytest.mark.parametrize("quick", [False, True])
def test_every_configuration_parses_against_its_scenario(quick):
    reproduce.check_overrides(reproduce.make_plan(None, None, quick))


# ----- aggregation ------------------------------------------------------------------------------


def test_min_median_max_over_faithful_runs_only():
    runs = [
        record(1, doc(3.0)),
        record(2, doc(1000.0, faithful=False), code=3),
        record(3, doc(1.0)),
        record(4, None, code=1),
        record(5, doc(2.0)),
    ]
    s = reproduce.summarise(TOY, (), runs)
    value, scaled, missing = s.figures
    assert value.values == [3.0, 1.0, 2.0]  # 1000 (unfaithful) left out
    assert value.left_out == [(2, 1000.0)]
    assert (value.min, value.median, value.max) == (1.0, 2.0, 3.0)
    assert value.faithful_runs == 3
    assert scaled.max == 3000.0
    assert missing.values == [] and missing.median is None
    assert [r.index for r in s.faithful_runs] == [1, 3, 5]


def test_median_of_an_even_number_of_runs():
    s = reproduce.summarise(TOY, (), [record(i, doc(v)) for i, v in enumerate((4, 1, 2, 8), 1)])
    assert s.figures[0].median == 3.0


def test_check_pass_counts_over_all_runs_and_over_faithful_runs():
    runs = [
        record(1, doc(1, checks=(("a", True), ("b", True)))),
        record(2, doc(1, checks=(("a", True), ("b", False)))),
        record(3, doc(1, faithful=False, checks=(("a", False),))),  # b absent
        record(4, None),
    ]  # not counted
    counts = {c.name: c for c in reproduce.count_checks(runs)}
    a, b, fid = counts["a"], counts["b"], counts["fidelity: stall"]
    assert (a.passed, a.runs, a.passed_faithful, a.runs_faithful) == (2, 3, 2, 2)
    assert (b.passed, b.runs, b.absent, b.passed_faithful) == (1, 3, 1, 1)
    assert (fid.passed, fid.runs, fid.fidelity) == (2, 3, True)
    assert list(counts) == ["a", "b", "fidelity: stall"]  # first-seen order


def test_plots_come_from_the_last_faithful_run_with_plots():
    runs = [
        record(1, doc(1, plots=["smoke.png"])),
        record(2, doc(1, plots=["smoke.png"])),
        record(3, doc(1, faithful=False, plots=["smoke.png"])),
        record(4, doc(1)),
    ]
    assert reproduce.choose_plot_run(runs).index == 2
    only_bad = [record(1, doc(1, faithful=False, plots=["smoke.png"]))]
    assert reproduce.choose_plot_run(only_bad).index == 1
    assert reproduce.choose_plot_run([record(1, None)]) is None


def test_overall_verdict():
    ok = record(1, doc(1))
    unfaithful = record(2, doc(1, faithful=False), code=3)
    failed = record(3, doc(1, checks=(("a", False),)), code=1)
    s = lambda *runs: [reproduce.summarise(TOY, (), list(runs))]  # noqa: E731
    assert reproduce.overall(s(ok)) == "passed"
    assert reproduce.overall(s(ok, unfaithful)) == "unfaithful"
    assert reproduce.overall(s(ok, unfaithful, failed)) == "failed"
    assert reproduce.overall(s(ok, record(4, None, code=1))) == "failed"


# ----- the markdown -------------------------------------------------------------------------------


def render(runs, dirty=True, quick=False) -> str:
    s = reproduce.summarise(TOY, ("hosts_per_leaf=1",), runs)
    s.plots.append("toy.png")
    info = {
        "commit": "1f4841b",
        "dirty": dirty,
        "machine": MACHINE,
        "date": "2025-01-02 03:04 UTC",
        "command": "emu reproduce --runs 3 --out o --doc d",
        "runs": len(runs),
        "quick": quick,
    }
    return reproduce.render_markdown(info, [s], "results")


def test_markdown_names_commit_machine_date_and_command():
    md = render([record(1, doc(1.0))])
    assert "`1f4841b` (dirty" in md
    assert "2 cores, Test CPU 9000, kernel 6.1.0-test, 7.8 GiB memory" in md
    assert "2025-01-02 03:04 UTC" in md
    assert "`emu reproduce --runs 3 --out o --doc d`" in md
    assert "(dirty" not in render([record(1, doc(1.0))], dirty=False)
    assert "`--quick`" in render([record(1, doc(1.0))], quick=True)


def test_markdown_marks_unfaithful_runs_and_leaves_their_figures_out():
    md = render(
        [
            record(1, doc(1.0)),
            record(2, doc(50.0, faithful=False), code=3),
            record(3, doc(3.0, plots=["smoke.png"])),
            record(4, None, code=1),
        ]
    )
    assert "`emu run smoke --set hosts_per_leaf=1`: 4 run(s), 2 faithful." in md
    assert "Left out of the figures (unfaithful, or no metrics.json): run 2, run 4." in md
    assert "| value | 1 | 2 | 3 | 2/2 | run 2: 50 |" in md
    assert "| value x 1000 | 1000 | 2000 | 3000 | 2/2 | run 2: 50000 |" in md
    assert "| missing | — | — | — | 0/2 | — |" in md
    assert "never quoted" in md
    # Fidelity per run: the unfaithful run says where, and that it was over the limit.
    row2 = next(line for line in md.splitlines() if line.startswith("| 2 | 3 |"))
    assert "**no**" in row2 and "13.9 frame times at leaf1 (switch) **over the limit**" in row2
    row1 = next(line for line in md.splitlines() if line.startswith("| 1 | 0 |"))
    assert "| yes |" in row1 and "99.50% at leaf4 port 1 (leaf4-eth1)" in row1
    assert "| 4 | 1 | **no** (no metrics.json) |" in md
    assert "| network ok | 3/3 passed | 2/2 |" in md
    assert "| fidelity: stall | 2/3 passed | 2/2 |" in md
    assert "Plots (run 3):" in md and "![toy: toy.png](results/toy.png)" in md
    assert "- run 4: no metrics.json in /nonexistent" in md


def test_numbers_are_formatted_for_reading():
    assert [reproduce.fmt(v) for v in (None, 3.0, 0.99524, 19.04, 1144.3, 0.0016)] == [
        "—",
        "3",
        "0.995",
        "19",
        "1144",
        "0.0016",
    ]


# ----- the plan and bad input ----------------------------------------------------------------------


def test_only_selects_a_scenarios_configurations_or_one_of_them():
    plan = reproduce.make_plan("smoke", None, False)
    assert [e.id for e in plan.entries] == ["smoke", "smoke-fat-tree"] and plan.runs == 3
    plan = reproduce.make_plan("smoke-fat-tree, incast", 5, False)
    assert [e.id for e in plan.entries] == ["smoke-fat-tree", "incast"] and plan.runs == 5
    quick = reproduce.make_plan("smoke", None, True)
    assert quick.runs == 1 and quick.overrides(quick.entries[0]) == (
        "hosts_per_leaf=1",
        "iperf_s=4",
    )
    assert len(reproduce.make_plan(None, None, False).entries) == len(reproduce.ENTRIES)


@pytest.mark.parametrize(
    "only, runs, message",
    [
        ("nope", None, "--only nope: not a scenario the README quotes; choose from .*smoke"),
        ("smoke,nope,worse", None, "--only nope,worse:"),
        (",", None, "--only ',': expected NAME"),
        (None, 0, "--runs 0: must be at least 1"),
        (None, -2, "--runs -2: must be at least 1"),
    ],
)
def test_bad_plan_is_a_scenario_error_that_names_the_value(only, runs, message):
    with pytest.raises(ScenarioError, match=message):
        reproduce.make_plan(only, runs, False)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--only", "nope"], "emu: --only nope: not a scenario the README quotes"),
        (["--runs", "0"], "emu: --runs 0: must be at least 1"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    # main() installs TERM/HUP handlers for a fabric's teardown: not in pytest's process.
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)
    assert cli.main(["reproduce", *argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_cli_bad_input_as_a_user_runs_it_has_no_traceback(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "emu.cli",
            "reproduce",
            "--only",
            "nope",
            "--doc",
            str(tmp_path / "r.md"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--only nope" in res.stderr and not (tmp_path / "r.md").exists()


def test_command_line_is_explicit(monkeypatch):
    monkeypatch.delenv("EMU_RT_PRIORITY", raising=False)  # the default priority, spelled out
    assert (
        reproduce.command_line("smoke", None, True, "/tmp/rp", "/tmp/r.md")
        == "EMU_RT_PRIORITY=10 emu reproduce --quick --only smoke --out /tmp/rp --doc /tmp/r.md"
    )
    monkeypatch.setenv("EMU_RT_PRIORITY", "0")
    assert (
        reproduce.command_line(None, 5, False, "results/reproduce", "docs/results.md")
        == "EMU_RT_PRIORITY=0 emu reproduce --runs 5 --out results/reproduce --doc docs/results.md"
    )


def test_command_line_and_doc_carry_the_scheduling_asked_for(monkeypatch):
    monkeypatch.setenv("EMU_RT_PRIORITY", "10")
    assert (
        reproduce.command_line(None, 3, False, "o", "d")
        == "EMU_RT_PRIORITY=10 emu reproduce --runs 3 --out o --doc d"
    )
    assert reproduce.scheduling_info().startswith("SCHED_RR 10 asked")
    s = reproduce.summarise(TOY, ("hosts_per_leaf=1",), [record(1, doc(1.0))])
    info = {
        "commit": "1f4841b",
        "dirty": False,
        "machine": MACHINE,
        "date": "d",
        "command": "c",
        "runs": 1,
        "quick": False,
        "scheduling": reproduce.scheduling_info(),
    }
    assert (
        "- scheduling of switches and NIC agents: SCHED_RR 10 asked"
        in reproduce.render_markdown(info, [s], "results")
    )
    monkeypatch.setenv("EMU_RT_PRIORITY", "0")
    assert reproduce.scheduling_info().startswith("normal")


# ----- the shell, with a stand-in for `emu run` -----------------------------------------------------

# Writes a metrics.json whose figure is its run number and a PNG, then exits as told.
FAKE_RUN = textwrap.dedent("""
    import json, pathlib, sys
    out, code, faithful = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    out.mkdir(parents=True, exist_ok=True)
    (out / "smoke.png").write_bytes(b"\\x89PNG fake")
    doc = json.loads(sys.argv[4])
    doc["faithful"] = faithful
    (out / "metrics.json").write_text(json.dumps(doc))
    print("report of", out)
    sys.exit(code)
""")


def fake_argv(out_dir, code=0, faithful=True, value=1.0):
    d = doc(value, faithful=faithful, plots=["smoke.png"])
    return [
        sys.executable,
        "-c",
        FAKE_RUN,
        str(out_dir),
        str(code),
        "1" if faithful else "0",
        json.dumps(d),
    ]


def test_run_once_reads_the_metrics_of_a_run_that_exits_non_zero(tmp_path):
    out = tmp_path / "run-1"
    rec = reproduce.run_once(
        fake_argv(out, code=3, faithful=False), out, tmp_path / "run-1.log", 60, 1
    )
    assert rec.exit_code == 3 and rec.doc is not None and not rec.faithful and rec.note == ""
    assert "report of" in (tmp_path / "run-1.log").read_text()


def test_run_once_never_reads_a_previous_metrics_json(tmp_path):
    out = tmp_path / "run-1"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps(doc(1.0)))
    rec = reproduce.run_once(
        [sys.executable, "-c", "import sys; sys.exit(1)"], out, tmp_path / "run-1.log", 60, 1
    )
    assert rec.exit_code == 1 and rec.doc is None and "no metrics.json" in rec.note


def test_run_once_stops_a_run_past_its_timeout(tmp_path):
    killed = []
    rec = reproduce.run_once(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        tmp_path / "run-1",
        tmp_path / "run-1.log",
        0.5,
        1,
        after_kill=lambda: killed.append(True),
    )
    assert rec.exit_code is None and "timed out after 0.5 s" in rec.note
    assert rec.seconds < 30 and killed == []  # SIGTERM sufficed: nothing to clean


# `emu reproduce` as a user runs it (emu.cli.main and the signal handlers it sets),
# with a stand-in for `emu run` and for `emu clean`, each leaving a mark in STATE.
REPRODUCE_AS_RUN = textwrap.dedent("""
    import sys
    from emu import cli, reproduce
    run, state = sys.argv[1], sys.argv[2]
    cli.need_root = lambda what: None
    reproduce.emu_run_argv = lambda entry, overrides, out_dir: [sys.executable, "-c", run, state]
    reproduce._emu_clean = lambda: open(f"{state}/cleaned", "w").close()
    sys.exit(cli.main(["reproduce", "--only", "smoke", "--runs", "1",
                       "--out", f"{state}/out", "--doc", f"{state}/results.md"]))
""")

# A run that notes every signal it gets, then tears down for a moment (for ever if
# STATE/hang exists) before it exits, as emu run does on SIGTERM.
RUN_THAT_TEARS_DOWN = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    state = pathlib.Path(sys.argv[1])

    def tear_down(signum, frame):
        with open(state / "signals", "a") as f:
            f.write(f"{signum}\\n")
        while (state / "hang").exists():
            time.sleep(1)
        time.sleep(0.5)  # the teardown's length: a parent that does not wait is gone by now
        (state / "torn-down").touch()
        sys.exit(130)

    signal.signal(signal.SIGTERM, tear_down)
    (state / "pid.new").write_text(str(os.getpid()))
    os.replace(state / "pid.new", state / "pid")
    time.sleep(120)
""")


def reproduce_with_a_running_run(state):
    """`emu reproduce` in a subprocess, once its stand-in run is up; (process, run's pid)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", REPRODUCE_AS_RUN, RUN_THAT_TEARS_DOWN, str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        registry.wait_for(
            lambda: (state / "pid").exists() or parent.poll() is not None,
            30,
            "emu reproduce to start its run",
        )
    except BaseException:
        parent.kill()
        raise
    assert parent.poll() is None, parent.communicate()
    return parent, int((state / "pid").read_text())


def gone(pid: int) -> bool:
    return registry.proc_start_time(pid) is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["TERM", "HUP"])
def test_a_signal_to_reproduce_stops_its_run_with_one_sigterm_and_waits_for_it(tmp_path, sig):
    parent, run_pid = reproduce_with_a_running_run(tmp_path)
    try:
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=60)
    finally:
        parent.kill()
        if not gone(run_pid):
            os.kill(run_pid, signal.SIGKILL)
    assert parent.returncode == 130 and "emu: interrupted" in err, err
    assert (tmp_path / "signals").read_text().split() == [str(int(signal.SIGTERM))]
    # Waited for: torn down, and reaped by emu reproduce before it exited.
    assert (tmp_path / "torn-down").exists() and gone(run_pid)
    assert not (tmp_path / "cleaned").exists()  # SIGTERM sufficed: nothing to clean


def test_a_second_signal_while_the_run_tears_down_kills_it_and_cleans_up(tmp_path):
    (tmp_path / "hang").touch()
    parent, run_pid = reproduce_with_a_running_run(tmp_path)
    try:
        parent.send_signal(signal.SIGTERM)
        registry.wait_for(lambda: (tmp_path / "signals").exists(), 30, "the run's SIGTERM")
        parent.send_signal(signal.SIGTERM)
        _, err = parent.communicate(timeout=60)
    finally:
        parent.kill()
        if not gone(run_pid):
            os.kill(run_pid, signal.SIGKILL)
    assert parent.returncode == 130, err
    assert (tmp_path / "signals").read_text().split() == [str(int(signal.SIGTERM))]
    assert gone(run_pid) and not (tmp_path / "torn-down").exists()  # killed, mid-teardown
    assert (tmp_path / "cleaned").exists()  # and emu clean removed what it left


def test_reproduce_writes_the_doc_and_copies_the_plots(tmp_path, monkeypatch):
    codes = iter([0, 3, 0])  # run 2 unfaithful

    def argv(entry, overrides, out_dir):
        code = next(codes)
        return fake_argv(out_dir, code=code, faithful=code == 0, value=float(out_dir.name[-1]))

    monkeypatch.setattr(reproduce, "emu_run_argv", argv)
    plan = reproduce.Plan((TOY,), 3, False)
    said = []
    doc_path = tmp_path / "docs" / "results.md"
    summaries = reproduce.reproduce(
        plan, str(tmp_path / "out"), str(doc_path), "emu reproduce", say=said.append
    )
    (s,) = summaries
    assert [r.exit_code for r in s.runs] == [0, 3, 0]
    assert s.figures[0].values == [1.0, 3.0]  # run 2 left out
    assert s.plot_run.index == 3 and s.plots == ["toy.png"]
    assert (tmp_path / "docs" / "results" / "toy.png").read_bytes() == b"\x89PNG fake"
    md = doc_path.read_text()
    assert (
        "| value | 1 | 2 | 3 | 2/2 | run 2: 2 |" in md and "![toy: toy.png](results/toy.png)" in md
    )
    assert "Plots (run 3):" in md
    assert any("[2/3] toy run 2/3" in line for line in said)
    assert any("NOT faithful" in line for line in said)
    assert reproduce.overall(summaries) == "unfaithful"


# ----- the README's copies of docs/results.md -----------------------------------------------


def toy_results(runs) -> str:
    s = reproduce.summarise(TOY, ("hosts_per_leaf=1",), runs)
    info = {
        "commit": "1f4841b",
        "dirty": False,
        "machine": MACHINE,
        "date": "d",
        "command": "c",
        "runs": len(runs),
        "quick": False,
        "scheduling": "normal",
    }
    return reproduce.render_markdown(info, [s], "results")


def test_results_are_read_back_as_render_markdown_wrote_them():
    text = toy_results([record(1, doc(2.0)), record(2, doc(4.0)), record(3, doc(9.0, False))])
    parsed = reproduce.parse_results(text, entries=(TOY,))
    assert parsed.commit == "1f4841b"
    assert parsed.runs == {"toy": (3, 2, 2)}
    assert parsed.figures["toy"][0] == ["value", "2", "3", "4", "2/2"]
    with pytest.raises(ValueError, match="commit"):
        reproduce.parse_results("# not ours\n")


def test_readme_block_is_rewritten_from_results_and_a_stale_one_is_named(monkeypatch):
    monkeypatch.setattr(reproduce, "ENTRIES", (TOY,))
    text = toy_results([record(1, doc(2.0)), record(2, doc(4.0))])
    readme = (
        "# emu\n\n<!-- reproduced:toy -->\nold numbers\n<!-- /reproduced -->\n\n"
        "<!-- reproduced:nope -->\nx\n<!-- /reproduced -->\n"
    )
    problems = reproduce.readme_problems(readme, text)
    assert (
        "block reproduced:toy differs from docs/results.md (run emu reproduce "
        "--update-readme)" in problems
    )
    assert "block reproduced:nope: no such configuration" in problems
    fresh, unknown = reproduce.update_readme(readme, text)
    assert unknown == ["nope"]
    assert (
        "Reproduced at `1f4841b` by `emu reproduce`: 2 runs, 2 faithful, every check "
        "passed in 2." in fresh
    )
    assert "| value | 3 | 2 .. 4 | 2/2 |" in fresh and "old numbers" not in fresh
    assert reproduce.readme_problems(fresh, text) == [
        "block reproduced:nope: no such configuration"
    ]


TOY2 = Entry("toy2", "smoke", "second toy", figures=(Figure("value", ("m", "v")),))


def two_toys(commit: str, date: str, values: dict, ids=("toy", "toy2")) -> str:
    entries = {"toy": TOY, "toy2": TOY2}
    summaries = [reproduce.summarise(entries[i], (), [record(1, doc(values[i]))]) for i in ids]
    info = {
        "commit": commit,
        "dirty": False,
        "machine": MACHINE,
        "date": date,
        "command": f"emu reproduce --only {','.join(ids)}",
        "runs": 1,
        "quick": False,
    }
    return reproduce.render_markdown(info, summaries, "results")


def test_a_partial_reproduction_replaces_its_sections_and_keeps_the_others(monkeypatch):
    """--only toy2 over a doc of both: toy keeps its figures and says where they came from."""
    monkeypatch.setattr(reproduce, "ENTRIES", (TOY, TOY2))
    old = two_toys("aaaaaaa", "day 1", {"toy": 1.0, "toy2": 2.0})
    # A doc written before sections named their commit: only its header does.
    old = old.replace("Measured at `aaaaaaa` on day 1: `emu reproduce --only toy,toy2`.\n\n", "")
    new = two_toys("bbbbbbb", "day 2", {"toy2": 7.0}, ids=("toy2",))
    merged = reproduce.merge_results(old, new)
    parsed = reproduce.parse_results(merged)
    assert parsed.commit == "bbbbbbb"
    assert parsed.commits == {"toy": "aaaaaaa", "toy2": "bbbbbbb"}
    assert parsed.runs == {"toy": (1, 1, 1), "toy2": (1, 1, 1)}
    assert parsed.figures["toy"][0] == ["value", "1", "1", "1", "1/1"]
    assert parsed.figures["toy2"][0] == ["value", "7", "7", "7", "1/1"]
    assert reproduce.MERGED_NOTE in merged
    assert merged.index("## toy scenario") < merged.index("## second toy")  # ENTRIES' order
    fresh, _ = reproduce.update_readme(
        "<!-- reproduced:toy -->\n<!-- /reproduced -->\n<!-- reproduced:toy2 -->\n"
        "<!-- /reproduced -->",
        merged,
    )
    assert "Reproduced at `aaaaaaa`" in fresh and "Reproduced at `bbbbbbb`" in fresh
    with pytest.raises(ValueError, match="commit"):
        reproduce.merge_results("# not ours\n", new)


def test_a_merged_section_that_ends_in_a_table_keeps_the_next_heading_a_heading(monkeypatch):
    """A new section without plots ends in its fidelity table; the old section after it
    must start after a blank line, or markdown reads its heading as a table row."""
    monkeypatch.setattr(reproduce, "ENTRIES", (TOY, TOY2))
    old = two_toys("aaaaaaa", "day 1", {"toy": 1.0, "toy2": 2.0})
    new = two_toys("bbbbbbb", "day 2", {"toy": 7.0}, ids=("toy",))
    merged = reproduce.merge_results(old, new)
    assert "|\n## " not in merged and "|\n\n## second toy" in merged
    assert merged.endswith("|\n") and not merged.endswith("\n\n")
    # Merging again changes nothing: one note, the same text.
    assert reproduce.merge_results(merged, merged) == merged
    assert merged.count(reproduce.MERGED_NOTE) == 1


def test_readme_block_without_a_faithful_run_quotes_nothing(monkeypatch):
    monkeypatch.setattr(reproduce, "ENTRIES", (TOY,))
    text = toy_results([record(1, doc(2.0, False))])
    fresh, _ = reproduce.update_readme("<!-- reproduced:toy -->\n<!-- /reproduced -->", text)
    assert "No faithful run: no figure to quote." in fresh and "| value |" not in fresh


# Registered after docs/results.md was written: their README tables are still
# single runs. The reproduction that adds them to docs/results.md makes the test
# below fail until their README blocks are added and this set emptied.
NOT_YET_REPRODUCED: set[str] = set()  # every configuration has been reproduced


def test_the_readme_quotes_docs_results_md_for_every_configuration():
    """Every block, in README.md or a docs page, is docs/results.md's; every configuration has one."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    results_path = root / "docs" / "results.md"
    results = results_path.read_text()
    pages = reproduce.quoting_pages(root / "README.md", results_path)
    # Every page of the docs site that holds a block is searched, whatever its name.
    holding = {p for p in (root / "docs").glob("*.md") if "<!-- reproduced:" in p.read_text()}
    assert holding - {results_path} <= set(pages)
    blocks = set()
    for page in pages:
        text = page.read_text()
        link = reproduce.results_link(page, results_path)
        assert reproduce.readme_problems(text, results, link) == [], page.name
        blocks |= {m.group("id") for m in reproduce.README_BLOCK.finditer(text)}
    reproduced = set(reproduce.parse_results(results).runs)
    assert blocks == reproduced
    assert {e.id for e in reproduce.ENTRIES} - reproduced == NOT_YET_REPRODUCED


def test_a_stale_block_in_a_docs_page_is_found_and_rewritten_with_its_own_link(
    tmp_path, monkeypatch
):
    """Blocks that moved from the README into docs/ are checked and rewritten there too."""
    monkeypatch.setattr(reproduce, "ENTRIES", (TOY,))
    (tmp_path / "docs" / "runs").mkdir(parents=True)
    results = tmp_path / "docs" / "results.md"
    results.write_text(toy_results([record(1, doc(2.0)), record(2, doc(4.0))]))
    readme = tmp_path / "README.md"
    readme.write_text("# emu\n\nNo figures here: see docs/scenarios.md.\n")
    page = tmp_path / "docs" / "scenarios.md"
    page.write_text("# Scenarios\n\n<!-- reproduced:toy -->\nold\n<!-- /reproduced -->\n")
    quiet = tmp_path / "docs" / "other.md"
    quiet.write_text("# Other\n")
    evidence = tmp_path / "docs" / "runs" / "day.md"  # docs/runs/ is evidence: never rewritten
    evidence.write_text("<!-- reproduced:toy -->\nold\n<!-- /reproduced -->\n")
    assert reproduce.quoting_pages(readme, results) == [readme, page]
    assert reproduce.results_link(page, results) == "results.md"
    assert reproduce.results_link(readme, results) == "docs/results.md"
    problems = reproduce.readme_problems(page.read_text(), results.read_text(), "results.md")
    assert problems == [
        "block reproduced:toy differs from docs/results.md (run emu reproduce --update-readme)"
    ]
    fresh, unknown = reproduce.update_readme(page.read_text(), results.read_text(), "results.md")
    assert unknown == [] and "[docs/results.md](results.md#toy-scenario)" in fresh
    assert reproduce.readme_problems(fresh, results.read_text(), "results.md") == []


def test_cli_update_readme_rewrites_the_docs_pages_too(tmp_path, monkeypatch, capsys):
    """`emu reproduce --update-readme` reaches every page that quotes, each with its own link."""
    monkeypatch.setattr(reproduce, "ENTRIES", (TOY,))
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)
    (tmp_path / "docs" / "runs").mkdir(parents=True)
    results = tmp_path / "docs" / "results.md"
    results.write_text(toy_results([record(1, doc(2.0)), record(2, doc(4.0))]))
    readme = tmp_path / "README.md"
    readme.write_text("# emu\n\nNo figures here: see docs/scenarios.md.\n")
    page = tmp_path / "docs" / "scenarios.md"
    page.write_text("# Scenarios\n\n<!-- reproduced:toy -->\nold\n<!-- /reproduced -->\n")
    quiet = tmp_path / "docs" / "other.md"
    quiet.write_text("# Other\n")
    evidence = tmp_path / "docs" / "runs" / "day.md"
    evidence.write_text("<!-- reproduced:toy -->\nold\n<!-- /reproduced -->\n")

    argv = ["reproduce", "--update-readme", str(readme), "--doc", str(results)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"{page}: updated from" in out and f"{readme}: already matches" in out
    text = page.read_text()
    assert "| value | 3 | 2 .. 4 | 2/2 |" in text and "old" not in text
    assert "[docs/results.md](results.md#toy-scenario)" in text
    assert reproduce.readme_problems(text, results.read_text(), "results.md") == []
    assert "old" in evidence.read_text() and quiet.read_text() == "# Other\n"

    page.write_text("<!-- reproduced:nope -->\n<!-- /reproduced -->\n")
    assert cli.main(argv) == 2
    assert f"unknown configurations: nope ({page})" in capsys.readouterr().err
    assert "old" not in page.read_text() and "nope" in page.read_text()


def test_cli_update_readme_copies_the_figures_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reproduce, "ENTRIES", (TOY,))
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)
    results = tmp_path / "results.md"
    results.write_text(toy_results([record(1, doc(2.0)), record(2, doc(4.0))]))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- reproduced:toy -->\nold\n<!-- /reproduced -->\n")
    argv = ["reproduce", "--update-readme", str(readme), "--doc", str(results)]
    assert cli.main(argv) == 0
    assert "| value | 3 | 2 .. 4 | 2/2 |" in readme.read_text()
    assert "updated from" in capsys.readouterr().out
    assert cli.main(argv) == 0 and "already matches" in capsys.readouterr().out
    readme.write_text("<!-- reproduced:nope -->\n<!-- /reproduced -->\n")
    assert cli.main(argv) == 2
    assert "unknown configurations: nope" in capsys.readouterr().err
    assert (
        cli.main(["reproduce", "--update-readme", str(tmp_path / "none.md"), "--doc", str(results)])
        == 2
    )
    assert "--update-readme:" in capsys.readouterr().err

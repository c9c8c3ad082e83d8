"""Every host sending at once: how fast a k=4 fat-tree can be emulated, by how many switch processes.

Owns one measurement. For each link rate in `--rates` and each value of
`--switch-processes` (0: a process per switch; N: the 20 switches share N
processes, emu/switch/loop.py), it boots a k=4 fat-tree (20 switches, 16
hosts, the routing controller, hosts paced at the link rate) and runs
Hedera's stride-4 pattern: host i sends one TCP flow to host i+4 (mod 16),
all 16 at once, every flow crossing the core (five switch hops) for
`--seconds`. Per run it reports:

- goodput: iperf3's received rate summed over the 16 flows, as a fraction of
  16 links (ECMP's hash collisions keep it near 0.5-0.6 even on a perfect
  emulator: the flow-level model in `emu/models/ecmp.py`);
- the fidelity verdict of the fabric's own monitor (emu/fidelity.py) and,
  when unfaithful, its worst finding: this, not goodput, says whether the
  machine kept up;
- switch CPU: seconds of CPU of the switch processes (each process counted
  once) and CPU microseconds per frame-hop (frames the switches sent);
- boot: seconds from start until routing converged;
- how much of the machine's CPU was idle while the flows ran (/proc/stat):
  near 0, the hosts' TCP stacks and iperf3, which run below the switches'
  real-time priority, get what the switches leave, and goodput can fall
  short while the switches' own fidelity stays green.

Run as root from the repository root:

    .venv/bin/python bench/fabric_load.py [--rates 10,20] [--switch-processes 0,2]
        [--runs 1] [--seconds 10] [--out /tmp/emu-fabric-load] [--markdown]

Results: docs/performance.md ("Switches sharing a process").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.rate_sweep import render_rows  # noqa: E402
from emu import fabric as fabric_mod  # noqa: E402
from emu import fidelity  # noqa: E402
from emu.net import Fabric  # noqa: E402
from emu.traffic import iperf  # noqa: E402

STRIDE = 4
FIRST_PORT = 5600
OMIT_S = 2.0


@dataclass
class LoadRun:
    rate_mbps: float
    switch_processes: int
    boot_s: float = 0.0
    goodput_of_links: float = 0.0
    failed_flows: int = 0
    faithful: bool = False
    worst: str = ""
    switch_cpu_s: float = 0.0
    frame_hops: int = 0
    window_s: float = 0.0
    idle_share: float = 0.0  # of the machine's CPU while the flows ran
    error: str = ""

    @property
    def us_per_frame_hop(self) -> float:
        return 1e6 * self.switch_cpu_s / self.frame_hops if self.frame_hops else float("nan")


def switch_cpu(records: list[tuple[str, dict]]) -> tuple[float, int, float]:
    """(CPU s of the switch processes, each pid once; frames they sent; longest window s)."""
    cpu: dict[int, float] = {}
    frames = 0
    window = 0.0
    for _, rec in records:
        if rec["kind"] != "switch":
            continue
        cpu.setdefault(rec["pid"], rec["cpu"]["cpu_s"])
        frames += sum(port["frames"] for port in rec["ports"].values())
        window = max(window, rec["window_s"])
    return sum(cpu.values()), frames, window


def cpu_times() -> tuple[float, float]:
    """(idle, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])  # idle + iowait; user..steal


def one_run(rate_mbps: float, processes: int, seconds: float, out: Path) -> LoadRun:
    run = LoadRun(rate_mbps, processes)
    graph = fabric_mod.fat_tree(k=4, rate_bps=int(rate_mbps * 1e6))
    hosts = fabric_mod.hosts(graph)
    flows = [(h, hosts[(i + STRIDE) % len(hosts)]) for i, h in enumerate(hosts)]
    started = time.monotonic()
    try:
        with Fabric(
            graph, out_dir=str(out), switch_processes=processes, host_nic_pacing=True
        ) as fab:
            run.boot_s = time.monotonic() - started
            clients = iperf.start_many(
                fab, flows, seconds, first_port=FIRST_PORT, omit_s=OMIT_S, server_output=True
            )
            idle0, total0 = cpu_times()
            docs = [iperf.finish(fab, c, timeout_s=seconds + 30) for c in clients]
            idle1, total1 = cpu_times()
            run.idle_share = (idle1 - idle0) / max(total1 - total0, 1.0)
    except Exception as exc:  # noqa: BLE001 - a failed run is a row, not the end of the bench
        run.error = f"{type(exc).__name__}: {exc}"[:300]
        return run
    good = [d["end"]["sum_received"]["bits_per_second"] for d in docs if "error" not in d]
    run.failed_flows = len(docs) - len(good)
    run.goodput_of_links = sum(good) / (len(flows) * rate_mbps * 1e6)
    records = fidelity.records_of([("", fab.fidelity_document or {})])
    verdict = fidelity.judge(records)
    run.faithful = verdict.faithful
    failures = verdict.failures()
    run.worst = failures[0].text if failures else ""
    run.switch_cpu_s, run.frame_hops, run.window_s = switch_cpu(records)
    return run


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(mid)} ({fmt.format(lo)}-{fmt.format(hi)})"


def table(runs: list[LoadRun], markdown: bool) -> str:
    head = [
        "link Mbit/s",
        "switch processes",
        "runs",
        "faithful",
        "goodput / 16 links",
        "switch CPU s",
        "CPU us per frame-hop",
        "boot s",
        "machine idle while sending",
        "worst finding (first unfaithful run)",
    ]
    body = []
    keys = sorted({(r.rate_mbps, r.switch_processes) for r in runs})
    for rate, procs in keys:
        rs = [r for r in runs if (r.rate_mbps, r.switch_processes) == (rate, procs)]
        ok = [r for r in rs if not r.error]
        body.append(
            [
                f"{rate:g}",
                str(procs) if procs else "one per switch",
                str(len(rs)),
                str(sum(r.faithful for r in ok)),
                spread([r.goodput_of_links for r in ok]),
                spread([r.switch_cpu_s for r in ok], "{:.1f}"),
                spread([r.us_per_frame_hop for r in ok], "{:.1f}"),
                spread([r.boot_s for r in ok], "{:.1f}"),
                spread([r.idle_share for r in ok], "{:.0%}"),
                next((r.worst for r in ok if not r.faithful), "")[:200]
                or "; ".join(r.error for r in rs if r.error),
            ]
        )
    return render_rows(head, body, markdown)


def _numbers(text: str, kind, what: str, ap: argparse.ArgumentParser) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x]
    except ValueError:
        ap.error(f"{what} {text!r}: expected numbers separated by commas")
    if not values or any(v < 0 for v in values):
        ap.error(f"{what} {text!r}: expected at least one value, none negative")
    return values


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10,20", help="link Mbit/s, comma-separated")
    ap.add_argument("--switch-processes", default="0,2", help="comma-separated; 0: one per switch")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the flows")
    ap.add_argument("--out", default="/tmp/emu-fabric-load")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    rates = _numbers(args.rates, float, "--rates", ap)
    if any(r == 0 for r in rates):
        ap.error(f"--rates {args.rates!r}: every rate must be > 0")
    procs = _numbers(args.switch_processes, int, "--switch-processes", ap)
    if args.runs < 1 or args.seconds <= OMIT_S:
        ap.error(f"--runs >= 1 and --seconds > {OMIT_S} (the first {OMIT_S} s are left out)")
    if os.geteuid() != 0:
        print("fabric load: needs root (each run builds a fabric)", file=sys.stderr)
        return 2
    runs = []
    for i in range(1, args.runs + 1):
        for rate in rates:
            for n in procs:  # interleaved: a slow minute of the host hits every variant
                out = Path(args.out) / f"{rate:g}Mbps-p{n}-run{i}"
                print(f"# {rate:g} Mbit/s, switch_processes={n}, run {i} -> {out}", file=sys.stderr)
                runs.append(one_run(rate, n, args.seconds, out))
    print(table(runs, args.markdown))
    if args.json:
        Path(args.json).write_text(
            json.dumps([dict(r.__dict__, us_per_frame_hop=r.us_per_frame_hop) for r in runs])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

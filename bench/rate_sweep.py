"""Where a scenario stops being faithful: `emu run SCENARIO` swept over the link rate.

Owns one measurement: for every rate in `--rates` (Mbit/s), `--runs` runs of
`emu run SCENARIO --set rate_mbps=R` (default `smoke`: a 2-spine, 4-leaf
fabric whose TCP flow h1 -> h8 crosses leaf1, a spine and leaf4, three
switch hops), each in a subprocess with its own results directory. Per rate
it prints how many runs the fidelity monitor judged faithful
(emu/fidelity.py) and how many passed every check, smoke's TCP flow's bytes
on the wire as a fraction of the link rate (min/median/max over every run
and over the faithful runs only), the CPU time the VM's host took (steal)
during each unfaithful run, and the first unfaithful run's verdict: which
switch, NIC or port fell behind, and by how much. The answer to "up to which
rate does this machine emulate this scenario" is the highest rate whose runs
are all faithful; a figure of an unfaithful run is shown for diagnosis only
and is never the result.

Run as root from the repository root (each run builds a fabric):

    .venv/bin/python bench/rate_sweep.py [--scenario smoke] [--rates 20,50,100]
        [--runs 3] [--out /tmp/rate-sweep] [--markdown]

Set EMU_RT_PRIORITY as for `emu run` (the default scheduling applies).
Results: docs/performance.md ("A single flow against the link rate",
"The all-hosts scenarios at 20 Mbit/s").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 600.0  # one smoke run takes 20-40 s; a hung run must not hang the bench


@dataclass
class RateRow:
    rate_mbps: float
    of_link: list[float] = field(default_factory=list)  # every run that measured TCP
    of_link_faithful: list[float] = field(default_factory=list)
    runs: int = 0
    faithful: int = 0
    passed: int = 0  # runs whose every check passed
    unfaithful_steal_s: list[float] = field(default_factory=list)  # VM steal in each
    verdict: str = ""  # the first unfaithful run's verdict
    errors: list[str] = field(default_factory=list)


def unfaithful_line(report: Path) -> str:
    """The report's `unfaithful run: ...` line ('' when there is none)."""
    try:
        lines = report.read_text().splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in lines if ln.strip().startswith("unfaithful run")), "")


def one_run(emu: list[str], rate_mbps: float, out: Path, scenario: str = "smoke") -> dict:
    """One `emu run SCENARIO` at `rate_mbps`; returns its metrics.json (or {"error": ...})."""
    argv = emu + ["run", scenario, "--set", f"rate_mbps={rate_mbps:g}", "--out", str(out)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {RUN_TIMEOUT_S:.0f} s"}
    metrics = out / "metrics.json"
    if not metrics.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return {"error": f"exit {proc.returncode}: {' '.join(tail)[:200]}"}
    return json.loads(metrics.read_text())


def record(row: RateRow, result: dict, report: Path) -> None:
    row.runs += 1
    if "error" in result:
        row.errors.append(result["error"])
        return
    tcp = result.get("metrics", {}).get("tcp", {})
    rate_bps = row.rate_mbps * 1e6
    share = tcp.get("wire_bps", 0.0) / rate_bps if tcp.get("wire_bps") else None
    faithful = bool(result.get("faithful"))
    row.faithful += faithful
    row.passed += bool(result.get("passed"))
    if share is not None:
        row.of_link.append(share)
        if faithful:
            row.of_link_faithful.append(share)
    if not faithful:
        steal = result.get("metrics", {}).get("fidelity", {}).get("steal_s")
        if steal is not None:
            row.unfaithful_steal_s.append(float(steal))
        if not row.verdict:
            row.verdict = unfaithful_line(report) or "unfaithful (no verdict line in report.txt)"


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def table(rows: list[RateRow], markdown: bool) -> str:
    head = [
        "link Mbit/s",
        "runs",
        "faithful",
        "all checks passed",
        "TCP on wire / link, faithful runs (min / median / max)",
        "every run",
        "VM steal in each unfaithful run (ms)",
        "first unfaithful run's verdict",
    ]
    body = [
        [
            f"{r.rate_mbps:g}",
            str(r.runs),
            str(r.faithful),
            str(r.passed),
            spread(r.of_link_faithful),
            spread(r.of_link),
            ", ".join(f"{s * 1e3:.0f}" for s in r.unfaithful_steal_s) or "-",
            (r.verdict or "; ".join(r.errors))[:400],
        ]
        for r in rows
    ]
    return render_rows(head, body, markdown)


def render_rows(head: list[str], body: list[list[str]], markdown: bool) -> str:
    """A table of strings: Markdown, or columns separated by two spaces."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines)
    return "\n".join("  ".join(cells) for cells in [head] + body)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="smoke", help="the scenario to run (default smoke)")
    ap.add_argument("--rates", default="20,50,100,200,300,500", help="Mbit/s, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default="/tmp/emu-rate-sweep")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        ap.error(f"--rates {args.rates!r}: expected Mbit/s separated by commas, e.g. 20,100")
    if not rates or any(r <= 0 for r in rates):
        ap.error(f"--rates {args.rates!r}: every rate must be > 0")
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: expected at least 1")
    if os.geteuid() != 0:
        print("rate sweep: needs root (each run builds a fabric)", file=sys.stderr)
        return 2
    emu = [sys.executable, "-m", "emu.cli"]
    rows = []
    for rate in rates:
        row = RateRow(rate)
        for i in range(1, args.runs + 1):
            out = Path(args.out) / args.scenario / f"{rate:g}" / f"run-{i}"
            print(
                f"# {args.scenario} {rate:g} Mbit/s run {i}/{args.runs} -> {out}",
                file=sys.stderr,
                flush=True,
            )
            record(row, one_run(emu, rate, out, args.scenario), out / "report.txt")
        rows.append(row)
    print(table(rows, args.markdown))
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

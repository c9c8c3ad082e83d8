"""Telemetry output: figures of what a run measured.

Owns turning measured series into files beside `metrics.json`: PNG plots
(matplotlib, headless Agg backend) from plain lists and dicts that scenarios
hand it; the per-port, per-priority time series that every switch samples
itself every 100 ms (queue depth, paused state, ECN marks, bytes sent),
collected after a run into `telemetry/<switch>.csv` and a queue-depth PNG;
every switch's and NIC agent's fidelity record (emu/fidelity.py), collected
into `fidelity.json` and `telemetry/fidelity.csv`; and pcaps of chosen ports
(tcpdump); and the drawing of a fabric's graph (`draw_fabric`, for `emu topo
show`). Called by emu.net (before teardown) and by scenarios; it drives a
fabric only through the `emu.net.Fabric` it is handed, never by importing emu.net.
"""

from __future__ import annotations

import csv
import json
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from emu import fabric as fabric_mod
from emu import fidelity, mgmt
from emu.registry import wait_for

log = logging.getLogger(__name__)


@dataclass
class Panel:
    """One subplot: named line series over x, or bars; optional horizontal reference."""

    title: str
    xlabel: str
    ylabel: str
    lines: dict[str, tuple[Sequence[float], Sequence[float]]] = field(default_factory=dict)
    bars: dict[str, float] = field(default_factory=dict)
    hline: float | None = None
    hline_label: str = ""
    vline: float | None = None
    vline_label: str = ""
    step: bool = False
    logx: bool = False  # sizes: a log2 x axis


def pyplot():
    """matplotlib's pyplot on the headless Agg backend, imported on first use.

    Importing it takes most of a second: emu.net, the CLI and every scenario
    import this module, and only a run that draws needs it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # the backend must be chosen first

    return plt


def save_panels(path: Path, panels: list[Panel], title: str = "") -> Path:
    """Draw `panels` side by side into one PNG at `path`; returns the path."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for label, (xs, ys) in panel.lines.items():
            if panel.step:
                ax.step(xs, ys, where="post", label=label)
            else:
                ax.plot(xs, ys, label=label)
        if panel.bars:
            names = list(panel.bars)
            ax.bar(names, [panel.bars[n] for n in names], color="tab:blue")
        if panel.hline is not None:
            ax.axhline(panel.hline, color="tab:red", linestyle="--", label=panel.hline_label)
        if panel.vline is not None:
            ax.axvline(panel.vline, color="tab:gray", linestyle=":", label=panel.vline_label)
        ax.set_ylim(bottom=0)  # a rate or a count read from zero is not exaggerated
        if panel.logx:
            ax.set_xscale("log", base=2)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        if panel.lines or panel.hline_label or panel.vline_label:
            ax.legend(fontsize=8, loc="best")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# Drawing a fabric: hosts at the bottom, then switch tiers upward.
_ROLE_COLOUR = {
    "host": "tab:gray",
    "leaf": "tab:blue",
    "edge": "tab:blue",
    "switch": "tab:blue",
    "spine": "tab:orange",
    "agg": "tab:orange",
    "core": "tab:red",
    "router": "tab:blue",
    "torus": "tab:blue",
    "nvswitch": "tab:green",
}


_ARC = {"arrows": True, "arrowstyle": "-", "connectionstyle": "arc3,rad=0.35"}


def draw_fabric(G, path: Path) -> Path:
    """Draw the fabric graph `G` into `path` (PNG or SVG, by its suffix); returns the path.

    Layers from the bottom: hosts, then switches by tier; colour by role; a
    link's width grows with its rate (relative to the fastest) and its label
    is the rate when the fabric mixes rates.
    """
    import networkx as nx

    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"{path}: draw to a .png or an .svg file")
    plt = pyplot()
    # Hosts one layer below the lowest network switches; an NVSwitch (tier -1) below its GPUs.
    layer = {
        n: (-1 if d["kind"] == "host" else d["tier"] - 1 if d["tier"] < 0 else d["tier"])
        for n, d in G.nodes(data=True)
    }
    H = nx.Graph()
    H.add_nodes_from(G.nodes)
    H.add_edges_from(G.edges)
    pos = _layered_positions(G, layer)
    widest = max(sum(1 for v in layer.values() if v == t) for t in set(layer.values()))
    fig, ax = plt.subplots(
        figsize=(max(6.0, 0.55 * widest + 2), 1.6 * len(set(layer.values())) + 1)
    )
    rates = {(u, v): d["rate_bps"] for u, v, d in G.edges(data=True)}
    fastest = max(rates.values())
    # Links within a row (a dragonfly's, a torus's: every switch tier 0) are
    # drawn as arcs, so that one does not run straight through the switches
    # between its ends.
    flat = [e for e in H.edges if layer[e[0]] == layer[e[1]]]
    for edges, style in (([e for e in H.edges if e not in set(flat)], {}), (flat, _ARC)):
        if edges:
            nx.draw_networkx_edges(
                H,
                pos,
                edgelist=edges,
                ax=ax,
                width=[0.6 + 2.4 * rates[e] / fastest for e in edges],
                edge_color="0.5",
                **style,
            )
    if len(set(rates.values())) > 1:
        labels = {e: f"{r / 1e6:g}M" for e, r in rates.items()}
        nx.draw_networkx_edge_labels(H, pos, edge_labels=labels, ax=ax, font_size=6)
    colours = [_ROLE_COLOUR.get(G.nodes[n]["role"], "tab:purple") for n in H.nodes]
    sizes = [220 if G.nodes[n]["kind"] == "host" else 520 for n in H.nodes]
    nx.draw_networkx_nodes(H, pos, ax=ax, node_color=colours, node_size=sizes)
    nx.draw_networkx_labels(H, pos, ax=ax, font_size=7)
    counts = fabric_mod.expected_counts(G)
    ax.set_title(
        f"{G.graph['name']}: {counts['switches']} switches, {counts['hosts']} hosts, "
        f"{counts['switch_links']} switch links",
        fontsize=10,
    )
    ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _layered_positions(G, layer: dict) -> dict:
    """x, y for every node: one row per layer, hosts in the order of their switches.

    A host sits under its switch (ordered by the switch's place in its row),
    so a leaf's hosts are drawn together and their links do not cross.
    """
    order = {n: i for i, n in enumerate(G.nodes)}

    def key(n):
        d = G.nodes[n]
        return (order[d["leaf"]], order[n]) if d["kind"] == "host" else (order[n], 0)

    pos = {}
    for row in sorted(set(layer.values())):
        members = sorted((n for n in G.nodes if layer[n] == row), key=key)
        for i, n in enumerate(members):
            pos[n] = ((i + 0.5) / len(members), float(row))
    return pos


def start_capture(fab, intf: str, path: Path, bpf: str = "", timeout_s: float = 10.0):
    """tcpdump on a switch-side interface (root namespace) into `path`; registered.

    Returns once tcpdump has opened the file (its pcap header is written), so
    nothing sent afterwards is missed. Stop it with `fab.stop_proc(proc)`.
    """
    path = Path(path)
    server = fab.switch_server(intf) if getattr(fab, "cluster", None) is not None else "local"
    # On another server, tcpdump writes to its stdout, which ssh brings to `path` here.
    target = str(path) if server == "local" else "-"
    argv = ["tcpdump", "-i", intf, "-w", target, "-U", "--immediate-mode", "-s", "256"]
    if bpf:
        argv += bpf.split()
    if server == "local":
        proc = fab.popen_root(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        with open(path, "wb") as out:
            proc = fab.popen_root(argv, server=server, stdout=out, stderr=subprocess.DEVNULL)
    wait_for(
        lambda: path.exists() and path.stat().st_size >= 24,
        timeout_s,
        f"tcpdump to open {path} on {intf}",
        interval_s=0.02,
    )
    return proc


TELEMETRY_COLUMNS = ["time", "port", "port_tx_bytes"] + [
    f"p{prio}_{what}"
    for prio in range(8)
    for what in ("depth_bytes", "paused", "ecn_marks", "tx_bytes")
]


def collect_switch_telemetry(fab, out_dir: Path) -> list[Path]:
    """Write every switch's sampled series to out_dir/telemetry/<switch>.csv (+ one PNG).

    Called by the fabric before teardown; a switch that does not answer is skipped
    and named in the log.
    """
    folder = Path(out_dir) / "telemetry"
    folder.mkdir(parents=True, exist_ok=True)
    written, depth_lines = [], {}
    for sw in fabric_mod.switches(fab.graph):
        try:
            rows = fab.switch_call(sw, "telemetry")
        except mgmt.MgmtError as exc:
            log.warning("telemetry of %s not collected: %s", sw, exc)
            continue
        path = folder / f"{sw}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(TELEMETRY_COLUMNS)
            writer.writerows(rows)
        written.append(path)
        if rows:
            t0 = rows[0][0]
            for row in rows:
                # Lossless priority 3 (DESIGN.md), the queue that PFC and ECN act on.
                depth = row[3 + 3 * 4]
                series = depth_lines.setdefault(f"{sw}:{row[1]}", ([], []))
                series[0].append(row[0] - t0)
                series[1].append(depth)
    busiest = dict(sorted(depth_lines.items(), key=lambda kv: -max(kv[1][1]))[:6])
    if busiest and max(max(v[1]) for v in busiest.values()) > 0:
        written.append(
            save_panels(
                folder / "queues.png",
                [
                    Panel(
                        "priority-3 queue depth, busiest ports", "time (s)", "bytes", lines=busiest
                    )
                ],
            )
        )
    return written


FIDELITY_COLUMNS = [
    "process",
    "kind",
    "port",
    "port_name",
    "rate_bps",
    "frames",
    "on_time_share",
    "max_late_ms",
    "deficit_ms",
    "kernel_drops",
    "window_s",
    "longest_stall_ms",
    "stalls_over_1",
    "stalls_over_10",
    "cpu_share",
    "cpu_wait_share",
]


def fidelity_sockets(fab) -> dict[str, str]:
    """Name -> management socket of every switch and NIC agent of a running fabric."""
    socks = {}
    for sw in _switches(fab):
        node = fab.switch(sw)
        if node.running():
            socks[sw] = node.mgmt_path  # a switch the run crashed on purpose has no record
    for path in sorted(Path(fab.run.sock_dir).glob("*.nic.sock")):
        socks[path.name[: -len(".nic.sock")]] = str(path)
    return socks


def _switches(fab) -> list[str]:
    return fabric_mod.switches(fab.graph)


def reset_fidelity(fab) -> None:
    """Start every switch's and NIC agent's fidelity window now (after boot and
    convergence, or where a test's measured stretch begins)."""
    fab.fidelity_machine_start = fidelity.machine_sample()
    for path in fidelity_sockets(fab).values():
        try:
            mgmt.call(path, "fidelity_reset")
        except mgmt.MgmtError:
            pass  # a process that does not answer shows up when fidelity is collected
    if getattr(fab, "cluster", None) is not None:  # over several servers: the tunnels too
        fab.cluster.mark_tunnels()  # an unreadable end is reported as such at the close


@dataclass(frozen=True)
class Judged:
    """A fabric's fidelity over a window, judged, and what the machine did meanwhile."""

    verdict: fidelity.Verdict
    machine: dict  # fidelity.machine_window: steal_s, idle_share, cpu_pressure_share

    @property
    def faithful(self) -> bool:
        return self.verdict.faithful

    @property
    def steal_share(self) -> float:
        """The share of the machine's CPU time over the window that the VM's host took."""
        return self.machine.get("steal_share") or 0.0

    def reasons(self, measures=None) -> str:
        """Where the emulator fell behind and by how much, in one line (the
        failed findings of `measures`, default every measure)."""
        text = "; ".join(
            f.text for f in self.verdict.failures() if measures is None or f.measure in measures
        )
        if self.machine.get("steal_s", 0.0) >= 0.01:
            # A busy VM host takes the CPU from every process now and then: name it.
            text += (
                f"; the hypervisor took {self.machine['steal_s']:.2f} s of CPU "
                f"({self.steal_share:.0%} of the machine's, steal)"
            )
        return text.lstrip("; ")


def judge_fidelity(fab, out_dir: Path) -> Judged:
    """The fabric's fidelity since its window began (`reset_fidelity`), judged
    (emu/fidelity.py `judge`); the records are written to `out_dir`.

    A process that did not answer fails the verdict as the scenarios' check
    does: a run is not faithful on processes nobody could ask.
    """
    document = collect_fidelity(fab, out_dir)
    verdict = fidelity.judge(fidelity.records_of([("", document)]))
    if document["missing"]:
        names = ", ".join(document["missing"])
        verdict.worst["missing"] = fidelity.Finding(
            "missing", names, len(document["missing"]), 0, False, f"no fidelity record from {names}"
        )
    return Judged(verdict, document["machine"])


def collect_fidelity(fab, out_dir: Path) -> dict:
    """Every switch's and NIC agent's fidelity record: the document
    ({"processes", "missing", "machine"}), also written to out_dir/fidelity.json
    and out_dir/telemetry/fidelity.csv (one row per process and port).

    Called by the fabric before teardown, before the bulky telemetry (serving
    that would be a stall of its own). A process that does not answer is recorded
    as such: a run cannot be judged faithful on processes it could not ask.
    """
    records, missing = [], []
    for name, path in fidelity_sockets(fab).items():
        try:
            records.append(mgmt.call(path, "fidelity"))
        except mgmt.MgmtError as exc:
            log.warning("fidelity of %s not collected: %s", name, exc)
            missing.append(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "fidelity.json"
    start = fab.fidelity_machine_start
    end = fidelity.machine_sample()
    machine = (
        fidelity.machine_window(start, end)
        if start is not None
        else {"steal_s": 0.0, "steal_share": None, "idle_share": None, "cpu_pressure_share": None}
    )
    document = {"processes": records, "missing": missing, "machine": machine}
    path.write_text(json.dumps(document, indent=1))
    folder = out / "telemetry"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "fidelity.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIDELITY_COLUMNS)
        for rec in records:
            loop, cpu = rec["loop"], rec["cpu"]
            for key, port in rec["ports"].items():
                writer.writerow(
                    [
                        rec["name"],
                        rec["kind"],
                        key,
                        port["name"],
                        port["rate_bps"],
                        port["frames"],
                        round(fidelity.on_time_share(port, 1.0), 5),
                        round(port["max_late_s"] * 1e3, 3),
                        round(port["deficit_s"] * 1e3, 3),
                        port["kernel_drops"],
                        rec["window_s"],
                        round(loop["longest_stall_s"] * 1e3, 3),
                        loop["stalls_over_1"],
                        loop["stalls_over_10"],
                        cpu["cpu_share"],
                        cpu["wait_share"],
                    ]
                )
    return document

"""Scale benchmark: how long a fabric takes to boot, what it holds in memory, what it costs idle.

Owns one measurement, on one machine in one go, of every fabric in `--fabrics`
booted two ways, one after the other:

    emu          emu.net.Fabric: one emu switch process per switch, the routing
                 controller, Mininet hosts; "up" = routing converged (every
                 switch, link and host known and routes installed).
    mininet-ovs  Mininet with the same topology (emu.fabric.to_mininet) on Open
                 vSwitch's userspace datapath (datapath_type=netdev, our own
                 ovsdb-server and ovs-vswitchd, fail_mode=secure, no
                 controller); "up" = Mininet's build and start returned.

Per fabric and variant: boot seconds (for emu with its phases), the resident
and proportional memory of the switch side (emu: the switch processes and the
controller; OVS: ovs-vswitchd and ovsdb-server; Mininet's host shells are the
same in both and not counted), the switch side's CPU while idle for
`--idle-s` seconds, and the error if it did not come up. Proportional set size
(PSS, /proc/PID/smaps_rollup) splits shared pages among the processes that
map them, so it is what the fabric really costs; RSS counts them in full in
every process.

Fabrics, by name: ls4 / ls8 / ls16 (leaf/spine with 4, 8, 16 leaves, 2, 4, 4
spines, 2 hosts per leaf), ft4 / ft6 / ft8 / ft10 / ft12 (fat-trees k = 4, 6,
8, 10, 12: 20, 45, 80, 125, 180 switches; 16, 54, 128, 250, 432 hosts). A fabric that fails to come up is reported
and the next one is tried; `--stop-at-failure` stops the variant there.

Hygiene: emu's fabric registers and removes its own processes, namespaces and
interfaces (emu/registry.py). For Mininet + OVS, every interface the topology
will create and the OVS daemons are recorded in emu's run registry
(/run/emu/runs/bench-scale-*.json) before they exist, stopped by pid and
deleted by name from that list at the end, on Ctrl-C, or after a kill -9 at
the next start or by `emu clean` (bench/forwarding.py's Resources). The last line says whether anything was left behind.

Run as root from the repository root:

    .venv/bin/python bench/scale.py [--fabrics ls4,ft4,ft6,ft8] [--variants emu,mininet-ovs]
        [--idle-s 5] [--ping-pairs N] [--markdown] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import forwarding as fw  # noqa: E402
from emu import fabric as fabric_mod  # noqa: E402
from emu import rig  # noqa: E402
from emu.registry import FabricError  # noqa: E402

FABRICS = {
    "ls4": lambda: fabric_mod.leaf_spine(leaves=4, spines=2, hosts_per_leaf=2),
    "ls8": lambda: fabric_mod.leaf_spine(leaves=8, spines=4, hosts_per_leaf=2),
    "ls16": lambda: fabric_mod.leaf_spine(leaves=16, spines=4, hosts_per_leaf=2),
    "ft4": lambda: fabric_mod.fat_tree(k=4),
    "ft6": lambda: fabric_mod.fat_tree(k=6),
    "ft8": lambda: fabric_mod.fat_tree(k=8),
    "ft10": lambda: fabric_mod.fat_tree(k=10),
    "ft12": lambda: fabric_mod.fat_tree(k=12),
}
VARIANTS = ("emu", "mininet-ovs")
MIB = 1024 * 1024


@dataclass
class Row:
    fabric: str
    variant: str
    switches: int
    hosts: int
    boot_s: Optional[float] = None
    phases: dict = field(default_factory=dict)
    processes: int = 0
    rss_mib: Optional[float] = None
    pss_mib: Optional[float] = None
    rss_per_switch_mib: Optional[float] = None
    idle_cpu_pct: Optional[float] = None
    ping_pairs: int = 0  # host pairs pinged after convergence (emu only)
    ping_reached: int = 0  # of those, pairs with a reply
    error: str = ""


# -- what a process holds and spends -------------------------------------------


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB from /proc/PID/smaps_rollup; (0, 0) if it is gone."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def measure_side(
    row: Row, pids: list[int], switch_pids: list[int], idle_s: float, switches: int = 0
) -> None:
    """Fill in memory and idle CPU of the switch side (`pids`).

    Switches that share a process (emu's default) list its pid once each: each
    process is counted once, and RSS per switch divides by `switches`.
    """
    pids = list(dict.fromkeys(pids))
    switch_pids = list(dict.fromkeys(switch_pids))
    row.processes = len(pids)
    mem = {pid: memory_kib(pid) for pid in pids}
    row.rss_mib = round(sum(r for r, _ in mem.values()) / 1024, 1)
    row.pss_mib = round(sum(p for _, p in mem.values()) / 1024, 1)
    if switch_pids:
        row.rss_per_switch_mib = round(
            sum(mem[pid][0] for pid in switch_pids) / 1024 / (switches or len(switch_pids)), 1
        )
    before = sum(fw._cpu_s(p) for p in pids)
    t0 = time.monotonic()
    time.sleep(idle_s)  # the measurement window itself, not a wait for a condition
    row.idle_cpu_pct = round(
        100 * (sum(fw._cpu_s(p) for p in pids) - before) / (time.monotonic() - t0), 1
    )


# -- the two variants ------------------------------------------------------------


def ping_sample(fab, graph, pairs: int, seed: int = 0) -> tuple[int, int]:
    """Ping `pairs` host pairs drawn at random (all of them if there are fewer); (pinged, reached).

    A pair counts as reached when one of 3 pings is answered: the first ping of a
    pair whose hosts never talked waits for ARP, which the controller answers.
    """
    hosts = fabric_mod.hosts(graph)
    every = [(a, b) for a in hosts for b in hosts if a != b]
    chosen = every if pairs >= len(every) else random.Random(seed).sample(every, pairs)
    reached = sum(1 for a, b in chosen if fab.ping(a, b, count=3, interval_s=0.2)[1] > 0)
    return len(chosen), reached


def boot_emu(name: str, graph, idle_s: float, run_dir: Path, ping_pairs: int = 0) -> Row:
    from emu.net import Fabric

    row = Row(name, "emu", len(fabric_mod.switches(graph)), len(fabric_mod.hosts(graph)))
    t0 = time.monotonic()
    fab = Fabric(graph, out_dir=str(run_dir / f"emu-{name}"))
    try:
        fab.open()
        row.boot_s = round(time.monotonic() - t0, 2)
        row.phases = dict(fab.boot_phases)
        switch_pids = [fab.switch(s).proc.pid for s in fabric_mod.switches(graph)]
        measure_side(row, switch_pids + [fab.controller.pid], switch_pids, idle_s, len(switch_pids))
        if ping_pairs:
            row.ping_pairs, row.ping_reached = ping_sample(fab, graph, ping_pairs)
    except (FabricError, OSError) as exc:
        row.error = str(exc).splitlines()[0][:200]
        row.phases = dict(fab.boot_phases)
    finally:
        fab.close()
    return row


def boot_mininet_ovs(name: str, graph, idle_s: float, res: fw.Resources) -> Row:
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import Host, OVSSwitch

    row = Row(name, "mininet-ovs", len(fabric_mod.switches(graph)), len(fabric_mod.hosts(graph)))
    bridges = fabric_mod.switches(graph)
    # Every interface the topology makes and each bridge's internal tap, before they exist.
    res.links += [i for _u, _v, d in graph.edges(data=True) for i in d["intfs"].values()]
    res.links += bridges
    res.save()
    # Our own daemons (emu/rig.py, the testbed's and benches' rig); Mininet adds the bridges.
    ovs_dir = res.run_dir / f"ovs-{name}"
    res.dirs.append(ovs_dir)
    res.save()
    ovs = rig.OvsBridges(res.run, [], ovs_dir, flow_cache=True)
    net = None
    saved_env = dict(os.environ)
    try:
        ovs.start()
        os.environ.update(ovs.env)  # Mininet runs ovs-vsctl with this process's environment
        setLogLevel("warning")
        t0 = time.monotonic()
        net = Mininet(
            topo=fabric_mod.to_mininet(graph),
            switch=lambda n, **kw: OVSSwitch(
                n, datapath="user", failMode="secure", protocols="OpenFlow13", **kw
            ),
            host=Host,
            controller=None,
            build=False,
            autoSetMacs=False,
            waitConnected=False,
        )
        net.build()
        row.phases["namespaces and links"] = round(time.monotonic() - t0, 3)
        for node in net.hosts:
            res.started_pids.append(node.shell.pid)
        net.start()
        row.boot_s = round(time.monotonic() - t0, 2)
        row.phases["bridges started"] = row.boot_s
        ovs.check_alive()
        measure_side(row, ovs.pids(), [], idle_s)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - Mininet exits on a bad OVS
        row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    finally:
        if net is not None:
            net.stop()  # Mininet's own stop: its shells, links and bridges, no `mn -c`
        if ovs.procs:
            for br in bridges:  # what Mininet's stop did not delete
                try:
                    ovs.vsctl("--if-exists", "del-br", br)
                except rig.RigError as exc:
                    row.error = row.error or str(exc)
        res.stop_switches(ovs)
        os.environ.clear()
        os.environ.update(saved_env)
    return row


# -- output -------------------------------------------------------------------------


def plain_table(rows: list[Row]) -> str:
    head = (
        f"{'fabric':6} {'variant':12} {'switches':>8} {'hosts':>5} {'boot s':>7} "
        f"{'procs':>5} {'RSS MiB':>8} {'PSS MiB':>8} {'RSS/switch':>10} {'idle CPU %':>10} "
        f"{'ping':>9}  error"
    )
    lines = [head]
    for r in rows:

        def f(x, fmt):
            return format(x, fmt) if x is not None else "-"

        lines.append(
            f"{r.fabric:6} {r.variant:12} {r.switches:>8} {r.hosts:>5} {f(r.boot_s, '>7.1f')} "
            f"{r.processes:>5} {f(r.rss_mib, '>8.0f')} {f(r.pss_mib, '>8.0f')} "
            f"{f(r.rss_per_switch_mib, '>10.1f')} {f(r.idle_cpu_pct, '>10.1f')} "
            f"{_ping_cell(r):>9}  {r.error}"
        )
    return "\n".join(lines)


def _ping_cell(r: Row) -> str:
    return f"{r.ping_reached}/{r.ping_pairs}" if r.ping_pairs else "-"


def markdown_table(rows: list[Row]) -> str:
    out = [
        "| fabric | variant | switches | hosts | boot s | RSS MiB | PSS MiB | RSS per switch MiB "
        "| idle CPU % | pairs reached / pinged | boot phases (s since start) | error |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        phases = "; ".join(f"{k} {v:.1f}" for k, v in r.phases.items())
        cells = [
            r.fabric,
            r.variant,
            r.switches,
            r.hosts,
            r.boot_s,
            r.rss_mib,
            r.pss_mib,
            r.rss_per_switch_mib,
            r.idle_cpu_pct,
            _ping_cell(r),
            phases,
            r.error,
        ]
        out.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
    return "\n".join(out)


# -- main -----------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fabrics", default="ls4,ls8,ls16,ft4,ft6,ft8")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--stop-at-failure", action="store_true")
    ap.add_argument(
        "--ping-pairs",
        type=int,
        default=0,
        metavar="N",
        help="after the idle window, ping N random host pairs of each emu fabric (0: none)",
    )
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    fabrics = [f for f in args.fabrics.split(",") if f]
    variants = [v for v in args.variants.split(",") if v]
    bad = [f for f in fabrics if f not in FABRICS] + [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(
            f"unknown {', '.join(bad)}: fabrics {', '.join(FABRICS)}; variants "
            f"{', '.join(VARIANTS)}"
        )
    if args.ping_pairs < 0:
        ap.error(f"--ping-pairs {args.ping_pairs}: expected a count >= 0")
    if os.geteuid() != 0:
        print("scale bench: needs root (namespaces, veths, OVS)", file=sys.stderr)
        return 2

    rows: list[Row] = []

    def boot_all(res: fw.Resources) -> None:
        for variant in variants:
            for name in fabrics:
                graph = FABRICS[name]()
                print(f"# {name} ({variant}) ...", file=sys.stderr, flush=True)
                if variant == "emu":
                    row = boot_emu(name, graph, args.idle_s, res.run_dir, args.ping_pairs)
                else:
                    row = boot_mininet_ovs(name, graph, args.idle_s, res)
                rows.append(row)
                print(f"#   {row.boot_s} s {row.error}", file=sys.stderr, flush=True)
                if row.error and args.stop_at_failure:
                    break

    res, status, left = fw.guarded("scale bench", "scale", boot_all)
    print(plain_table(rows))
    if args.markdown:
        print()
        print(markdown_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    if left:
        print(f"cleanup: LEFT BEHIND: {', '.join(left)} (see {res.run.manifest_path})")
        return status or 1
    print("cleanup: nothing left")
    return status


if __name__ == "__main__":
    sys.exit(main())

"""OpenFlow 1.3 conformance: os-ken's switch test tool against emu's switch and against OVS.

Owns one measurement, on one machine in one go: how many of the OpenFlow 1.3
test cases of the Ryu/os-ken "OpenFlow Switch Test Tool"
(`os_ken/tests/switch/tester.py`, cases as JSON under
`os_ken/tests/switch/of13/{action,match,group,meter}`) a switch passes, for
two targets side by side:

    emu       one `emu.switch.datapath` process (dpid 0x1) that connects actively
              to the controller (`--controller tcp:127.0.0.1:PORT`)
    ovs-user  an Open vSwitch bridge on the userspace datapath (datapath_type=netdev,
              other-config:datapath-id=0000000000000001)

The tool is independent of emu: it needs two switches and one os-ken
controller running the tester app. The "target" is the switch under test, the
"tester" injects frames into it (packet-out on its port 1) and reports what
comes back (packet-in from its ports 2 and 3). The tester is OVS's userspace
datapath in both runs (dpid 0x2), so the measurement does not depend on emu.
Wired as in `os_ken/tests/switch/run_mininet.py`, with three veth pairs in the
root namespace (IPv6 and offloads off on every end, so that the kernel adds no
frames and the userspace datapaths see whole frames):

                 +-------------------+
        +--------|  target (dpid 1)  |  emu, or an OVS netdev bridge
        |        +-------------------+
    +--------+     (1)   (2)   (3)          emub-tgtN <-> emub-tstN
    | os-ken |      |     |     |
    | tester |     (1)   (2)   (3)
    +--------+   +-------------------+
        +--------|  tester (dpid 2)  |  OVS netdev bridge
                 +-------------------+

Each (target, category) runs on a fresh set-up: the controller first (a free
port on 127.0.0.1), then our own `ovsdb-server` and `ovs-vswitchd` in a
temporary directory (emu/rig.py's `OvsBridges`, the testbed's rig; the
system OVS service is never used), the tester bridge, the target. The controller is this
file run with `--tester-app` (os-ken 4.x has no `osken-manager`): it does what
Ryu's `ryu-manager` did (eventlet hub, `hub.patch(thread=False)`, parse the
`--test-switch-*` options, run `os_ken.tests.switch.tester`). The tester needs
the eventlet hub: under os-ken's native hub its 3-second reply timeout never
fires. The tool logs each case's name and result (OK, or ERROR and the
reason) to `--log-file` and kills itself when done; this bench reads that log.

OVS runs with a datapath flow limit of 0 (`other_config:flow-limit=0`), so
that every frame is looked up in the OpenFlow tables as they are: OVS brings
its datapath flow cache up to date with a flow mod asynchronously (its
barrier reply does not wait), and the tool sends a case's frame right after
the barrier, so with the cache a frame can take the previous case's path.
Measured here: with the cache, OVS as the target failed 44 more of the 226
action cases (no frame left the target), and the OVS tester lost ~20 of the
714 match cases in emu's run (the frame reached it, no packet-in followed).
`--ovs-flow-cache` keeps the cache.

Per row: target, category, cases in the JSON files, cases run, passed,
failed, seconds (set-up included), and the error of a category that could
not finish (the rest still run). Then, per target, the failures grouped by the tool's reason (the
variable part of a reason, such as the values in a packet diff, is dropped),
with counts and two example cases each. An emu switch that exits is
restarted (at most MAX_RESTARTS times a category) and the row says so; a
tester that stops with a traceback ends its category at once.

Hygiene: bench/forwarding.py's `Resources` and `guarded`: every process is
recorded by pid in emu's run registry (/run/emu/runs/bench-ofconf-*.json)
as it starts and is stopped by pid; every interface is recorded before it is
created and deleted after each category, on SIGINT/SIGTERM/SIGHUP, or at the
next start after a kill -9. The last line says whether anything was left
behind. Logs (the tool's results, the controller, the switches, OVS) stay in
/run/emu-bench/ofconf-*/logs/.

Run as root from the repository root:

    .venv/bin/python bench/of_conformance.py [--targets emu,ovs-user]
        [--categories action,match,group,meter] [--interval S] [--timeout-min M]
        [--ovs-flow-cache] [--markdown] [--json PATH]

Results and what each failure means: docs/of13-conformance.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import forwarding as fw  # noqa: E402
from emu import rig  # noqa: E402
from emu.registry import free_tcp_port  # noqa: E402

log = logging.getLogger("bench.of_conformance")

TARGETS = ("emu", "ovs-user")
CATEGORIES = ("action", "match", "group", "meter")
TESTER_APP_FLAG = "--tester-app"
TESTER_APP = "os_ken.tests.switch.tester"
TARGET_DPID, TESTER_DPID = 0x1, 0x2
N_PORTS = 3  # target ports 1..3 <-> tester ports 1..3 (tester.py's defaults)
TGT_IF = fw.PREFIX + "tgt{}"
TST_IF = fw.PREFIX + "tst{}"
TARGET_BR, TESTER_BR = fw.PREFIX + "target", fw.PREFIX + "tester"
CONNECT_TIMEOUT_S = 30.0
POLL_S = 1.0
PROGRESS_EVERY_S = 60.0
MAX_RESTARTS = 3
EXAMPLES = 2

# tester.py's log lines (its logger, written to --log-file without a format).
RESULT_RE = re.compile(r"^    (?P<desc>\S.*?) +(?P<result>OK|ERROR)$")
REASON_RE = re.compile(r"^        (?P<reason>\S.*)$")
JOIN_RE = re.compile(r"^dpid=(?P<dpid>[0-9a-f]{16}) : Join (?P<who>target|tester) SW\.$")
SUMMARY_RE = re.compile(r"^OK\((?P<ok>\d+)\) / ERROR\((?P<error>\d+)\)$")
TEST_END = "---  Test end  ---"
TRACEBACK_MARK = "uncaught exception"  # os_ken.lib.hub's log line when a green thread dies
TESTER_FILE = "tests/switch/tester.py"


def of13_dir() -> Path:
    """Where os-ken keeps the OpenFlow 1.3 test cases."""
    import os_ken

    return Path(os_ken.__file__).resolve().parent / "tests" / "switch" / "of13"


# -- the test cases, as the tool will run them -------------------------------------------


@dataclass(frozen=True)
class Case:
    file_desc: str  # the JSON file's description, e.g. "action: 00_OUTPUT"
    desc: str  # the case's description, e.g. "ethernet/ipv4/tcp-->'actions=output:2'"

    @property
    def name(self) -> str:
        return f"{self.file_desc} / {self.desc}"


def load_cases(category_dir: Path) -> list[Case]:
    """The cases under `category_dir` in the order tester.py runs them.

    tester.py (TestPatterns) reads every *.json below the directory, keys each
    file by its description (a later file with the same description replaces
    an earlier one), runs the files sorted by description and each file's
    cases in file order. A file that is not valid JSON is skipped, as there.
    """
    files: dict[str, list[str]] = {}
    for path in sorted(category_dir.rglob("*.json")):
        try:
            items = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        desc = None
        tests = []
        for item in items:
            if isinstance(item, str):
                desc = item
            elif isinstance(item, dict):
                tests.append(str(item.get("description")))
        files[str(desc)] = tests
    return [Case(fd, d) for fd in sorted(files) for d in files[fd]]


# -- reading the tool's log --------------------------------------------------------------


@dataclass
class Outcome:
    case: str  # Case.name
    ok: bool
    reason: str = ""


@dataclass
class ToolLog:
    """What the tool's results log says so far."""

    outcomes: list[Outcome] = field(default_factory=list)
    joined: set[str] = field(default_factory=set)  # "target", "tester"
    ended: bool = False
    summary: Optional[tuple[int, int]] = None  # the tool's own OK / ERROR counts


def parse_tool_log(text: str, file_descs: set[str]) -> ToolLog:
    """Parse tester.py's log: file headers, `    DESC  OK|ERROR`, `        REASON`.

    Args:
        text: the log's text (possibly of a run still going).
        file_descs: the JSON files' descriptions, which the tool logs before
            the first case of each file.

    Returns:
        The outcomes in order, which switches joined, whether the tool ended.
    """
    out = ToolLog()
    file_desc = ""
    pending: Optional[Outcome] = None
    for raw in text.splitlines():
        line = raw.rstrip("\r\n")
        if out.ended:
            m = SUMMARY_RE.match(line.strip())
            if m:
                out.summary = (int(m["ok"]), int(m["error"]))
            continue
        if line == TEST_END:
            out.ended = True
            continue
        m = JOIN_RE.match(line)
        if m:
            out.joined.add(m["who"])
            continue
        if line in file_descs:
            file_desc = line
            continue
        m = RESULT_RE.match(line)
        if m:
            pending = Outcome(f"{file_desc} / {m['desc']}", m["result"] == "OK")
            out.outcomes.append(pending)
            continue
        m = REASON_RE.match(line)
        if m and pending is not None and not pending.ok and not pending.reason:
            pending.reason = m["reason"]
    return out


_VALUE_RE = re.compile(r"=('[^']*'|\"[^\"]*\"|\[[^\]]*\]|[^,()/]*)")
_RATE_RE = re.compile(r"\} (\d+(?:\.\d*)?)(?:kbps|pktps)")
_STATS_KIND = (
    ("{'OFPMatch'", "match differs"),
    ("[OFPInstruction", "instructions differ"),
    ("[OFPBucket", "buckets differ"),
    ("[OFPMeterBand", "bands differ"),
)


def failure_group(reason: str) -> str:
    """The group of a failure: the tool's reason without the parts that vary per case.

    Kept whole: OpenFlow errors ("Failed to add flows: OFPErrorMsg[type=0x02,
    code=0x00]"), "Receiving timeout: no change in rx_packets on tester.",
    table-miss errors, disconnections. Reduced: a packet diff keeps the
    layers and field names that differ ("ipv4(ttl=63,csum=4660)" ->
    "ipv4(ttl,csum)"); "Added incorrect flows/groups/meters: <stats>" keeps what
    differs (match, instructions, buckets, bands, or a scalar field); a
    throughput reason says whether an output got nothing at all (a SELECT
    group that hashed every frame into one bucket, a meter that dropped
    everything) or a rate was off by more than the tool's 10 %.

    Examples:
        >>> failure_group("Received incorrect packet: ipv4(ttl=63,csum=4660)")
        'Received incorrect packet: ipv4(ttl,csum)'
        >>> failure_group("Received unexpected throughput: {'in_port': 2} 851.23kbps")
        'Received unexpected throughput: rate off by more than 10 %'
        >>> failure_group("Received unexpected throughput: {'in_port': 3} 0.00kbps")
        'Received unexpected throughput: nothing on an output that expected traffic'
    """
    if not reason:
        return "(no reason logged)"
    head, sep, detail = reason.partition(": ")
    if not sep:
        return reason
    if head.startswith("Added incorrect"):
        inner = detail.partition("(")[2]
        kind = next((k for p, k in _STATS_KIND if inner.startswith(p)), "a scalar field differs")
        return f"{head} ({kind})"
    if head == "Received incorrect packet":
        return f"{head}: {_VALUE_RE.sub('', detail)[:160]}"
    if head == "Received unexpected throughput":
        rates = [float(v) for v in _RATE_RE.findall(detail)]
        if any(r == 0 for r in rates):
            return f"{head}: nothing on an output that expected traffic"
        return f"{head}: rate off by more than 10 %"
    return reason[:200]


@dataclass
class Group:
    reason: str
    count: int = 0
    categories: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    example_reason: str = ""


def group_failures(rows: list[Row]) -> dict[str, list[Group]]:
    """Per target, its failures grouped by `failure_group`, most frequent first."""
    by_target: dict[str, dict[str, Group]] = {}
    for row in rows:
        groups = by_target.setdefault(row.target, {})
        for o in row.outcomes:
            if o.ok:
                continue
            key = failure_group(o.reason)
            g = groups.setdefault(key, Group(key, example_reason=o.reason))
            g.count += 1
            if row.category not in g.categories:
                g.categories.append(row.category)
            if len(g.examples) < EXAMPLES:
                g.examples.append(o.case)
    return {
        t: sorted(gs.values(), key=lambda g: (-g.count, g.reason)) for t, gs in by_target.items()
    }


# -- one category on one target -----------------------------------------------------------


@dataclass
class Row:
    target: str
    category: str
    cases: int = 0
    run: int = 0
    passed: int = 0
    failed: int = 0
    seconds: Optional[float] = None
    restarts: int = 0
    error: str = ""
    outcomes: list[Outcome] = field(default_factory=list)


def _disable_ipv6(ifname: str) -> None:
    """No IPv6 on `ifname`: the kernel would send router solicitations and MLD into the test."""
    path = Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6")
    if path.exists():
        path.write_text("1")


def wire(res: fw.Resources) -> None:
    """Three veth pairs target port N <-> tester port N, up, IPv6 and offloads off."""
    from emu.switch.node import disable_offloads  # emu.switch.node imports Mininet

    for n in range(1, N_PORTS + 1):
        res.add_veth(TGT_IF.format(n), TST_IF.format(n))
        for ifname in (TGT_IF.format(n), TST_IF.format(n)):
            _disable_ipv6(ifname)
            disable_offloads(ifname)
            fw._run(["ip", "link", "set", ifname, "up"])


def _listening(port: int) -> bool:
    out = subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True
    ).stdout.strip()
    return out != ""


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def _crash_line(path: Path) -> str:
    """The last line of a traceback through tester.py that os-ken's hub logged in `path`, or ''.

    Such a traceback ends the tool's test thread for good (its process then
    waits forever). Tracebacks elsewhere (a connection that a restarted
    switch dropped) do not stop the tool and are ignored.
    """
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    for block in text.split(TRACEBACK_MARK)[1:]:
        lines = block.splitlines()[1:]
        end = next(
            (i for i, line in enumerate(lines) if line and not line.startswith((" ", "Traceback"))),
            len(lines),
        )
        if any(TESTER_FILE in line for line in lines[:end]):
            return lines[end].strip()[:200] if end < len(lines) else "a traceback"
    return ""


class Setup:
    """Controller, OVS (tester, and the target when it is OVS), the emu target.

    The switches are emu/rig.py's, as the testbed's and the forwarding bench's:
    the OVS bridges on our own daemons, emu's target in a process of its own.
    """

    def __init__(
        self,
        res: fw.Resources,
        target: str,
        category: str,
        interval_s: int,
        ovs_flow_cache: bool = False,
    ) -> None:
        self.res, self.target, self.category = res, target, category
        self.interval_s = interval_s
        self.ovs_flow_cache = ovs_flow_cache
        self.tag = f"{target}-{category}"
        self.results_log = res.run_dir / "logs" / f"{self.tag}-results.log"
        self.ovs: Optional[rig.OvsBridges] = None
        self.emu: Optional[rig.EmuSwitches] = None
        self.controller: Optional[fw.Proc] = None
        self.of_port = 0

    def start(self) -> None:
        wire(self.res)
        self.of_port = free_tcp_port()
        ctl = f"127.0.0.1:{self.of_port}"
        argv = [
            sys.executable, str(Path(__file__).resolve()), TESTER_APP_FLAG,
            "--ofp-listen-host", "127.0.0.1",
            "--ofp-tcp-listen-port", str(self.of_port),
            "--log-file", str(self.results_log),
            "--test-switch-target", f"{TARGET_DPID:016x}",
            "--test-switch-tester", f"{TESTER_DPID:016x}",
            "--test-switch-target_recv_port", "1",
            "--test-switch-target_send_port_1", "2",
            "--test-switch-target_send_port_2", "3",
            "--test-switch-tester_send_port", "1",
            "--test-switch-tester_recv_port_1", "2",
            "--test-switch-tester_recv_port_2", "3",
            "--test-switch-dir", str(of13_dir() / self.category),
            "--test-switch-target-version", "openflow13",
            "--test-switch-tester-version", "openflow13",
            "--test-switch-interval", str(self.interval_s),
        ]  # fmt: skip
        env = dict(
            os.environ, PYTHONPATH=str(REPO), OSKEN_HUB_TYPE="eventlet", PYTHONWARNINGS="ignore"
        )
        # DESIGN.md: the controller listens before switches start.
        self.controller = self.res.start(f"{self.tag}-controller", argv, env=env)
        fw._wait(
            lambda: _listening(self.of_port),
            f"the tester app to listen on {ctl}",
            fw.READY_TIMEOUT_S,
            (self.controller,),
        )
        ports = tuple((TST_IF.format(n), n) for n in range(1, N_PORTS + 1))
        bridges = [rig.SwitchSpec(TESTER_BR, TESTER_DPID, ports, controllers=(ctl,))]
        target_ports = tuple((TGT_IF.format(n), n) for n in range(1, N_PORTS + 1))
        target = rig.SwitchSpec(TARGET_BR, TARGET_DPID, target_ports, controllers=(ctl,))
        if self.target == "ovs-user":
            bridges.append(target)
        ovs_dir = self.res.run_dir / f"{self.tag}-ovs"
        self.res.dirs.append(ovs_dir)
        self.res.save()
        # flow_cache: see the module's docstring (OVS brings its flow cache up to
        # date asynchronously; the tool sends a case's frame right after the barrier).
        self.ovs = rig.OvsBridges(self.res.run, bridges, ovs_dir, flow_cache=self.ovs_flow_cache)
        try:
            self.ovs.start(fw.READY_TIMEOUT_S)
            if self.target != "ovs-user":
                self.emu = rig.EmuSwitches(self.res.run, [target], log_prefix=f"{self.tag}-")
                self.emu.start(fw.READY_TIMEOUT_S)
        except rig.RigError as exc:
            raise fw.BenchError(str(exc)) from None
        files = {c.file_desc for c in load_cases(of13_dir() / self.category)}

        def joined() -> bool:
            self.check_switches()
            return parse_tool_log(self.read_results(), files).joined >= {"target", "tester"}

        fw._wait(
            joined,
            f"target and tester to join the tester app (log {self.results_log})",
            CONNECT_TIMEOUT_S,
            (self.controller,),
        )

    def check_switches(self) -> None:
        """Raise BenchError when OVS's daemons have exited (emu's target is restarted instead)."""
        try:
            if self.ovs is not None:
                self.ovs.check_alive()
        except rig.RigError as exc:
            raise fw.BenchError(str(exc)) from None

    def emu_exit(self) -> Optional[int]:
        """The emu target's exit code if it has exited, else None."""
        if self.emu is None:
            return None
        try:
            self.emu.check_alive()
        except rig.RigError:
            ((proc, _),) = self.emu.procs.values()
            return proc.returncode
        return None

    def restart_emu(self) -> None:
        """Start a new emu target on the same ports (the tool reconnects to it)."""
        assert self.emu is not None
        spec = self.emu.specs[0]
        self.res.stop_switches(self.emu)
        self.emu = rig.EmuSwitches(self.res.run, [spec], log_prefix=f"{self.tag}-")
        try:
            self.emu.start(fw.READY_TIMEOUT_S)
        except rig.RigError as exc:
            raise fw.BenchError(str(exc)) from None

    @property
    def emu_log(self) -> str:
        return "" if self.emu is None else self.emu.log_paths.get(TARGET_BR, "")

    def read_results(self) -> str:
        try:
            return self.results_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.controller is not None:
            self.res.stop(self.controller)
        for switches in (self.emu, self.ovs):
            if switches is not None:
                self.res.stop_switches(switches)


def run_category(
    res: fw.Resources,
    target: str,
    category: str,
    interval_s: int,
    timeout_s: float,
    ovs_flow_cache: bool = False,
) -> Row:
    """Set up, run the tool over one category until it ends, tear down; never raises BenchError."""
    cases = load_cases(of13_dir() / category)
    files = {c.file_desc for c in cases}
    row = Row(target, category, cases=len(cases))
    setup = Setup(res, target, category, interval_s, ovs_flow_cache)
    t0 = time.monotonic()
    crashes: list[str] = []
    tool = ToolLog()
    try:
        setup.start()
        next_progress = t0 + PROGRESS_EVERY_S
        while True:
            tool = parse_tool_log(setup.read_results(), files)
            if tool.ended:
                break
            running = cases[len(tool.outcomes)].name if len(tool.outcomes) < len(cases) else "?"
            ctl = setup.controller
            if ctl is not None and ctl.popen.poll() is not None:
                raise fw.BenchError(
                    f"tester app exited with {ctl.popen.returncode} before the end, "
                    f"at {running!r}; log {ctl.log_path}: {_tail(ctl.log_path)}"
                )
            if ctl is not None:
                crash = _crash_line(ctl.log_path)
                if crash:
                    raise fw.BenchError(
                        f"tester app stopped with {crash!r} at {running!r}; log {ctl.log_path}"
                    )
            setup.check_switches()
            code = setup.emu_exit()
            if code is not None:
                crashes.append(f"exit {code} at {running!r}")
                if len(crashes) > MAX_RESTARTS:
                    raise fw.BenchError(
                        f"emu target exited {len(crashes)} times ({'; '.join(crashes)}); "
                        f"log {setup.emu_log}"
                    )
                log.warning("emu target exited with %s at %r; restarting it", code, running)
                setup.restart_emu()
                row.restarts += 1
            now = time.monotonic()
            if now - t0 > timeout_s:
                raise fw.BenchError(
                    f"timed out after {timeout_s / 60:.0f} min at {running!r} "
                    f"({len(tool.outcomes)} of {len(cases)} cases run)"
                )
            if now >= next_progress:
                failed = sum(1 for o in tool.outcomes if not o.ok)
                print(
                    f"#   {len(tool.outcomes)}/{len(cases)} run, {failed} failed, "
                    f"{now - t0:.0f} s; now {running}",
                    file=sys.stderr,
                    flush=True,
                )
                next_progress = now + PROGRESS_EVERY_S
            time.sleep(POLL_S)  # a poll period: the tool only tells us through its log
        if tool.summary is not None and tool.summary != (
            sum(o.ok for o in tool.outcomes),
            sum(not o.ok for o in tool.outcomes),
        ):
            row.error = f"the tool's own summary OK/ERROR {tool.summary} differs from its lines"
    except fw.BenchError as exc:
        row.error = str(exc)
        tool = parse_tool_log(setup.read_results(), files)
    finally:
        row.seconds = round(time.monotonic() - t0, 1)
        try:
            setup.stop()
        finally:
            res.teardown()
    row.outcomes = tool.outcomes
    row.run = len(tool.outcomes)
    row.passed = sum(1 for o in tool.outcomes if o.ok)
    row.failed = row.run - row.passed
    if crashes and not row.error:
        row.error = f"emu target restarted {len(crashes)}x ({'; '.join(crashes)})"
    return row


# -- output ----------------------------------------------------------------------------------

HEADERS = ("target", "category", "cases", "run", "passed", "failed", "time s", "error")


def _cells(r: Row) -> list[str]:
    return [
        r.target,
        r.category,
        str(r.cases),
        str(r.run),
        str(r.passed),
        str(r.failed),
        "-" if r.seconds is None else f"{r.seconds:.0f}",
        r.error,
    ]


def plain_table(rows: list[Row]) -> str:
    cells = [list(HEADERS)] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS) - 1)]
    lines = []
    for c in cells:
        line = "  ".join(
            v.rjust(w) if i > 1 else v.ljust(w) for i, (v, w) in enumerate(zip(c, widths))
        )
        lines.append((line + "  " + c[-1]).rstrip())
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    lines = [
        "| " + " | ".join(HEADERS) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in HEADERS[2:-1]) + " | --- |",
    ]
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "/") for c in _cells(r)) + " |")
    return "\n".join(lines)


def plain_failures(groups: dict[str, list[Group]]) -> str:
    out = []
    for target, gs in groups.items():
        total = sum(g.count for g in gs)
        out.append(f"failures of {target}: {total} in {len(gs)} group(s)")
        for g in gs:
            out.append(f"  {g.count:4d}  {g.reason}  [{', '.join(g.categories)}]")
            for ex in g.examples:
                out.append(f"          e.g. {ex}")
    return "\n".join(out)


def markdown_failures(groups: dict[str, list[Group]]) -> str:
    out = []
    for target, gs in groups.items():
        out += [
            f"Failures of {target}:",
            "",
            "| count | reason | categories | examples |",
            "| ---: | --- | --- | --- |",
        ]
        for g in gs:
            examples = "<br>".join(f"`{e}`" for e in g.examples)
            reason = g.reason.replace("|", "/")
            out.append(f"| {g.count} | {reason} | {', '.join(g.categories)} | {examples} |")
        out.append("")
    return "\n".join(out).rstrip()


# -- the tester app (a child process) --------------------------------------------------------


def tester_app(os_ken_args: list[str]) -> int:
    """Run os-ken's tester app as Ryu's `ryu-manager` did; returns when the tool kills itself.

    Runs in the child started by `Setup.start` with OSKEN_HUB_TYPE=eventlet in
    its environment (os_ken.lib.hub reads it at import).
    """
    from os_ken.lib import hub

    hub.patch(thread=False)
    from os_ken import cfg, flags, log  # noqa: F401  (register --log-file and --test-switch-*)
    from os_ken.base import app_manager

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    cfg.CONF(args=os_ken_args, project="os_ken", default_config_files=[])
    app_manager.AppManager.run_apps([TESTER_APP])  # tester.py SIGTERMs itself at the end
    return 0


# -- main ------------------------------------------------------------------------------------


def _csv(text: str, allowed: tuple[str, ...], what: str, p: argparse.ArgumentParser) -> list[str]:
    items = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        p.error(f"unknown {what} {bad or text!r}; allowed: {', '.join(allowed)}")
    return items


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--targets", default=",".join(TARGETS), help=f"subset of {','.join(TARGETS)}")
    p.add_argument(
        "--categories", default=",".join(CATEGORIES), help=f"subset of {','.join(CATEGORIES)}"
    )
    p.add_argument(
        "--interval",
        type=int,
        default=0,
        help="seconds between test cases (tester.py's --test-switch-interval; default 0)",
    )
    p.add_argument(
        "--timeout-min",
        type=float,
        default=60.0,
        help="give up on a category after this many minutes (default 60)",
    )
    p.add_argument(
        "--ovs-flow-cache",
        action="store_true",
        help="keep OVS's datapath flow cache (default: flow-limit=0, every frame looked up "
        "in the OpenFlow tables; the cache lags behind flow mods)",
    )
    p.add_argument("--markdown", action="store_true", help="also print Markdown tables")
    p.add_argument("--json", metavar="PATH", help="write every row and outcome to PATH")
    args = p.parse_args(argv)
    args.targets = _csv(args.targets, TARGETS, "target(s)", p)
    args.categories = _csv(args.categories, CATEGORIES, "categor(y/ies)", p)
    if args.interval < 0:
        p.error(f"--interval {args.interval}: expected seconds >= 0")
    if args.timeout_min <= 0:
        p.error(f"--timeout-min {args.timeout_min}: expected minutes > 0")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [TESTER_APP_FLAG]:
        return tester_app(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if os.geteuid() != 0:
        print("of_conformance bench: needs root (veths, OVS, AF_PACKET)", file=sys.stderr)
        return 2
    for tool in ("ip", "ss", "ethtool", "ovs-vsctl", "ovsdb-server", "ovs-vswitchd"):
        if not shutil.which(tool):
            print(f"of_conformance bench: {tool} not found", file=sys.stderr)
            return 2
    rows: list[Row] = []

    def run_all(res: fw.Resources) -> None:
        for target in args.targets:
            for category in args.categories:
                print(f"# {target}, {category} ...", file=sys.stderr, flush=True)
                row = run_category(
                    res, target, category, args.interval, args.timeout_min * 60, args.ovs_flow_cache
                )
                print(
                    f"#   {row.passed}/{row.run} passed in {row.seconds} s {row.error}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(row)

    res, status, left = fw.guarded("of_conformance bench", "ofconf", run_all)
    groups = group_failures(rows)
    print(plain_table(rows))
    print()
    print(plain_failures(groups))
    if args.markdown:
        print()
        print(markdown_table(rows))
        print()
        print(markdown_failures(groups))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print()
    print(f"logs: {res.run_dir / 'logs'}")
    if left:
        print(f"cleanup: LEFT BEHIND: {', '.join(left)} (see {res.run.manifest_path})")
        return status or 1
    print(
        f"cleanup: nothing left ({len(res.started_pids)} processes started and stopped by pid, "
        f"interfaces with prefix {fw.PREFIX!r} all deleted)"
    )
    return status


if __name__ == "__main__":
    sys.exit(main())

"""The `emu` command: run, list, cli, ctl, topo, allreduce, reproduce, clean, report, web.

Owns argument parsing and what the user sees; everything it does goes through
emu.scenario (run, list), emu.net (cli), emu.mgmt (ctl), emu.topofile (topo),
emu.registry (clean) and emu.live (`--web`, web). Errors the user can fix (bad
scenario name or parameter, unknown
switch, no running fabric) print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path

from emu import (
    checklines,
    fabric,
    labs,
    mgmt,
    realtime,
    registry,
    scenario,
    topofile,
    topowrite,
)
from emu.config import ConfigError
from emu.fabric import FabricSpecError
from emu.registry import FabricError
from emu.scenario import ScenarioError
from emu.servers import ServerError

EXIT_CHECKS_FAILED = 1
EXIT_USAGE = 2
# Every check of the emulated network passed, but the emulator fell behind its
# links' clocks (emu/fidelity.py): the results are not to be quoted.
EXIT_UNFAITHFUL = 3
# emu's own code failed (a bug, not the network nor the input): one line naming
# the error and the file that holds its traceback.
EXIT_INTERNAL = 4
# Errors that name bad input (exit status 2, one line).
INPUT_ERRORS = (
    ConfigError,  # ScenarioError, TopoFileError, job and trace files: every refused value
    FabricSpecError,
    mgmt.MgmtError,
    realtime.RealtimeError,
    labs.LabError,
    ServerError,
)


# What the machine refused, not emu (a full disk, a read-only one): one line, exit 1.
MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


class InternalError(Exception):
    """An unexpected exception in emu's own code, its traceback already written to `path`."""

    def __init__(self, exc: BaseException, path: Path | None):
        lines = str(exc).strip().splitlines()
        super().__init__(type(exc).__name__ + (f": {lines[0]}" if lines else ""))
        self.path = path


def write_traceback(exc: BaseException, directory: Path | None = None) -> Path | None:
    """`exc`'s traceback in `directory`/traceback.txt (a new file under the temporary
    directory when None or not writable), so a bug is one line for the user and whole
    for its report; None when no file could be written."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(exc))
    if directory is not None:
        with contextlib.suppress(OSError):
            path = directory / "traceback.txt"
            path.write_text(text)
            return path
    with contextlib.suppress(OSError):
        fd, name = tempfile.mkstemp(prefix="emu-traceback-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return Path(name)
    return None


def _raise_interrupt(signum, frame):
    # Turn TERM/HUP into the same unwinding as Ctrl-C so that every
    # context manager tears its fabric down.
    raise KeyboardInterrupt(f"signal {signum}")


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ScenarioError(f"{what} builds network namespaces and needs root (try sudo)")


def cmd_list(args) -> int:
    for name, module in sorted(scenario.available().items()):
        print(f"{name:18s} {module.DESCRIPTION}")
        if args.verbose_list:
            print(scenario.describe_params(module), end="\n\n")
    return 0


class _RunHelp(argparse.Action):
    """`emu run NAME --help`: the usual help, then NAME's parameters with defaults and ranges."""

    def __init__(
        self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None
    ):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        name = getattr(namespace, "name", None)
        if not name:
            parser.print_help()
            print(
                "\nemu run NAME --help lists NAME's parameters; emu list -v lists every scenario's."
            )
            parser.exit(0)
        try:
            module = scenario.load(name)
        except ScenarioError as exc:
            parser.exit(EXIT_USAGE, f"emu: {exc}\n")
        parser.print_help()
        print(f"\nparameters of {name} (--set KEY=VALUE; default, range, then what it does):")
        print(scenario.describe_params(module))
        parser.exit(0)


SERVERS_HELP = (
    "run the fabric over these servers (local is this machine; a NAME as ssh knows it, "
    "docs/cluster.md); the same as --set servers=..."
)


def _with_topo(args) -> list[str]:
    """`--set` overrides with `--topo FILE`, `--servers`, `--compare` and `--fault` as parameters."""
    given = {key: getattr(args, key, None) for key in ("topo", "servers", "compare", "fault")}
    return args.set + [f"{key}={value}" for key, value in given.items() if value]


def cmd_run(args) -> int:
    args.set = _with_topo(args)
    module = scenario.load(args.name)
    params = scenario.resolve_params(module, args.set)  # fail fast on bad input, before root checks
    need_root(f"emu run {args.name}")
    _check_servers(params)
    if not args.web:
        ctx = _run_scenario(args)
        print(scenario.render_report(ctx))
        return run_status(ctx)
    # The view follows every fabric the scenario opens (this process's runs) and
    # stays up after the run to show its report and plots.
    with _live_view(None, args) as view:
        ctx = _run_scenario(args)
        print(scenario.render_report(ctx))
        view.finished(ctx.out_dir)
        _linger(view, args.web_linger)
    return run_status(ctx)


def _check_servers(params: dict) -> None:
    """A bad server (`--servers`) is one line and exit status 2 before anything starts
    (the fabric checks again as it opens: emu.net serves scripts too)."""
    if params.get("servers"):
        from emu import servers

        servers.preflight(servers.parse_servers(params["servers"]), servers.ssh_config_path())


def _run_scenario(args):
    """`scenario.run`; when the fabric fails it mid-run (a condition that never came,
    a process that died), the report written so far is printed before the error
    propagates: what did happen, and whether the emulator kept up meanwhile (a
    timeout in a run where it fell behind may be the machine's, not the network's).
    Any other exception is a bug: the same report, then InternalError with the
    traceback in the results directory."""
    out = scenario.results_dir(args.name, args.out)
    for stale in ("report.txt", "traceback.txt"):  # an earlier run's, in the same place
        with contextlib.suppress(OSError):
            (out / stale).unlink()
    try:
        return scenario.run(args.name, args.set, args.out)
    except FabricError:  # the fabric's failure (a ServerError mid-run too): report, line
        _print_report_so_far(out)
        raise
    except INPUT_ERRORS:
        raise  # bad input: the one line main() prints is the whole answer
    except Exception as exc:  # a full disk, or a bug in the scenario or emu: report, line
        _print_report_so_far(out)
        if isinstance(exc, OSError) and exc.errno in MACHINE_ERRNOS:
            raise
        raise InternalError(exc, write_traceback(exc, out)) from exc


def _print_report_so_far(out: Path) -> None:
    """The report this run wrote, if it got that far."""
    with contextlib.suppress(OSError):
        print((out / "report.txt").read_text(), end="", flush=True)


def _live_view(fab, args):
    """Start the live view (emu/live/) of `fab` (None: this process's fabrics); says where."""
    from emu import live

    try:
        view = live.serve(fab, port=args.web_port, host=args.web_host)
    except live.LiveViewError as exc:
        raise ScenarioError(str(exc)) from None
    print(f"live view: {view.url}", flush=True)
    return view


def _linger(view, linger_s: float | None) -> None:
    """Keep serving the finished run's page for `linger_s` (None: until Ctrl-C)."""
    if linger_s is not None and linger_s <= 0:
        return
    print(
        f"live view: the run's report and plots at {view.url}; "
        + ("Ctrl-C to stop" if linger_s is None else f"closing in {linger_s:g} s"),
        flush=True,
    )
    _serve_until_interrupted(linger_s)


def _serve_until_interrupted(timeout_s: float | None = None) -> None:
    """Block for `timeout_s` (None: for ever) or until Ctrl-C, TERM or HUP (main() turns
    those into KeyboardInterrupt): the user is done looking, which is how a view ends."""
    try:
        threading.Event().wait(timeout_s)
    except KeyboardInterrupt:
        pass


def run_status(ctx) -> int:
    """0: every check passed; 1: a check of the network failed; 3: only fidelity failed."""
    if all(c.passed for c in ctx.checks):
        return 0
    if all(c.passed for c in ctx.checks if not c.fidelity):
        return EXIT_UNFAITHFUL
    return EXIT_CHECKS_FAILED


def cmd_allreduce(args) -> int:
    """nccl-tests' all_reduce_perf on an emulated leaf/spine: one table, #wrong counted."""
    import tempfile

    from emu.net import Fabric
    from emu.traffic import collectives

    try:
        sizes = collectives.parse_sizes(args.sizes, args.factor, args.dtype)
    except ValueError as exc:
        raise ScenarioError(f"--sizes {args.sizes!r} --factor {args.factor}: {exc}") from None
    if not 2 <= args.hosts <= 64:
        raise ScenarioError(f"--hosts {args.hosts}: allowed 2..64")
    if not 0.1 <= args.rate_mbps <= 1000:
        raise ScenarioError(f"--rate-mbps {args.rate_mbps}: allowed 0.1..1000")
    if not 1e-4 <= args.modelled_gbps <= 800:
        raise ScenarioError(f"--modelled-gbps {args.modelled_gbps}: allowed 0.0001..800")
    need_root("emu allreduce")
    per_leaf = 2 if args.hosts <= 8 else 4
    leaves = -(-args.hosts // per_leaf)
    graph = fabric.leaf_spine(
        leaves=leaves,
        spines=2,
        hosts_per_leaf=per_leaf,
        host_rate_bps=int(args.rate_mbps * 1e6),
        modelled_rate_bps=args.modelled_gbps * 1e9,
    )
    hosts = fabric.hosts(graph)[: args.hosts]
    apps = ("controllers.routing", "controllers.aggregation")
    out = args.out or tempfile.mkdtemp(prefix="emu-allreduce-")
    algos = ("ring", "sharp") if args.algo == "both" else (args.algo,)
    tables = {}
    with Fabric(graph, out_dir=out, apps=apps) as fab:
        for algo in algos:
            tables[algo] = collectives.run_allreduce(
                fab, hosts, sizes, dtype=args.dtype, algo=algo, iters=args.iters, seed=args.seed
            )
    print(
        f"# emu all_reduce: {len(hosts)} ranks on a leaf/spine of {leaves} leaves x "
        f"{per_leaf} hosts, 2 spines, {args.rate_mbps:g} Mbit/s links; "
        f"{args.iters} iteration(s); logs in {out}"
    )
    for algo, results in tables.items():
        used = {r.algo for r in results}
        print(f"#\n# algo {algo}{'' if used == {algo} else ' (refused: ran the ring)'}")
        print(collectives.nccl_table(results, bw_unit=args.bw_unit))
    if len(tables) == 2 and tables["ring"] and tables["sharp"]:
        ring, sharp = tables["ring"][-1], tables["sharp"][-1]
        if ring.algbw_bytes_per_s > 0:
            print(
                f"# sharp/ring algbw at {sharp.size_bytes} bytes: "
                f"{sharp.algbw_bytes_per_s / ring.algbw_bytes_per_s:.2f} "
                f"(a switch reduction gains at most 2(n-1)/n = "
                f"{2 * (len(hosts) - 1) / len(hosts):.2f})"
            )
    wrong = any(r.wrong for results in tables.values() for r in results)
    return EXIT_CHECKS_FAILED if wrong else 0


def cmd_reproduce(args) -> int:
    """Every figure the README quotes, run --runs times, summarised into --doc (emu/reproduce.py)."""
    from emu import reproduce

    if args.update_readme:
        return _update_readme(reproduce, args.update_readme, args.doc)
    if args.check_lines:
        return _write_check_lines(reproduce, args.check_lines, args.out, args.doc)
    if args.compare:
        return _compare_results(args.compare, args.doc)
    plan = reproduce.make_plan(args.only, args.runs, args.quick)  # bad input: before root
    reproduce.check_overrides(plan)
    need_root("emu reproduce")
    command = reproduce.command_line(args.only, args.runs, args.quick, args.out, args.doc)
    summaries = reproduce.reproduce(plan, args.out, args.doc, command)
    verdict = reproduce.overall(summaries)
    print(f"wrote {args.doc} ({verdict}); runs in {args.out}")
    return {"passed": 0, "unfaithful": EXIT_UNFAITHFUL}.get(verdict, EXIT_CHECKS_FAILED)


def _write_check_lines(reproduce, path: str, out_dir: str, doc_path: str) -> int:
    intro = (
        f"Every check line of every run under `{out_dir}`, copied from each run's report.txt "
        f"by `emu reproduce --check-lines {path} --out {out_dir}`; the figures over these "
        f"runs are in [{os.path.basename(doc_path)}]"
        f"({os.path.relpath(doc_path, os.path.dirname(os.path.abspath(path)))}), whose header "
        "names the commit, the machine and the command that made them."
    )
    try:
        text = checklines.render(
            Path(out_dir), "Check lines of a reproduction", intro, [e.id for e in reproduce.ENTRIES]
        )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"--check-lines: {exc}") from None
    print(f"wrote {path} from the runs in {out_dir}")
    return 0


def _compare_results(before_path: str, after_path: str) -> int:
    """Print each figure of two reproductions side by side (emu/resultsdiff.py)."""
    from emu import resultsdiff

    texts = []
    for path in (before_path, after_path):
        try:
            texts.append(Path(path).read_text())
        except OSError as exc:
            raise ScenarioError(f"--compare: cannot read {path}: {exc.strerror}") from None
    try:
        changes = resultsdiff.compare(*texts)
    except ValueError as exc:
        raise ScenarioError(f"--compare {before_path} --doc {after_path}: {exc}") from None
    print(f"figures of {before_path} (before) against {after_path} (after)\n")
    print(resultsdiff.render(changes), end="")
    return 0


def _update_readme(reproduce, readme_path: str, doc_path: str) -> int:
    """Rewrite the blocks of README and of every docs page beside it that quotes --doc."""
    try:
        with open(doc_path) as f:
            results = f.read()
        pages = reproduce.quoting_pages(readme_path, doc_path)
        old = {page: page.read_text() for page in pages}
        fresh, unknown = {}, []
        for page, text in old.items():
            link = reproduce.results_link(page, doc_path)
            fresh[page], bad = reproduce.update_readme(text, results, link)
            unknown += [f"{i} ({page})" for i in bad]
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"--update-readme: {exc}") from None
    if unknown:
        raise ScenarioError(
            f"--update-readme: blocks for unknown configurations: {', '.join(unknown)}"
        )
    for page in pages:  # nothing is written until every page has been read and parsed
        changed = fresh[page] != old[page]
        if changed:
            page.write_text(fresh[page])
        print(f"{page}: {'updated from' if changed else 'already matches'} {doc_path}")
    return 0


def cmd_cli(args) -> int:
    from emu.net import Fabric

    class Module:
        PARAMS = scenario.fabric_params()
        TOPOLOGY_FILE = True  # the CLI runs no checks: any fabric will do

    params = scenario.resolve_params(Module, _with_topo(args))
    need_root("emu cli")
    _check_servers(params)
    graph = scenario.build_fabric_graph(params)
    fab = Fabric(graph, **scenario.fabric_options(params))
    with contextlib.ExitStack() as stack:
        if args.web:
            # Before the fabric: a taken port fails in a second, not after the boot.
            # The page says "waiting" until the fabric is up, and again once it is gone.
            stack.enter_context(_live_view(fab, args))
        stack.enter_context(fab)
        interactive(fab)
    return 0


def interactive(fab) -> None:
    """Mininet's CLI with emu's commands on a running fabric, until the user quits."""
    print(
        f"fabric {fab.graph.graph['name']} up; converged after {fab.converged_after_s:.1f} s; "
        f"logs in {fab.log_dir()}"
    )
    print(
        "emu commands: ctl SWITCH|HOST WHAT [ARG...] (as emu ctl), path SRC DST "
        "[tcp|udp SPORT DPORT], status"
    )
    from mininet.log import setLogLevel

    setLogLevel("output")  # the CLI prints command output at Mininet's 'output' level
    logging.getLogger("mininet").propagate = False  # Mininet has its own handler
    EmuCLI(fab.net, fab=fab)


def _lab_package(name: str) -> str:
    """The lab package (labs/pause_storm) a typed name means; the package's own
    underscores still work, with a deprecation line (scenario.canonical_name)."""
    by_spelling = {labs.spelled(n): n for n in labs.available()}
    return by_spelling[scenario.canonical_name(name, by_spelling, "lab")]


def cmd_lab(args) -> int:
    """emu lab list | start NAME | check NAME | test NAME | reset NAME (see emu/labs.py)."""
    if args.lab_command == "list":
        rows = [
            (labs.spelled(name), m.TITLE, f"{m.MINUTES} min", m.GRADES)
            for name, m in labs.available().items()
        ]
        width = max(len(r[0]) for r in rows)
        for name, title, minutes, grades in rows:
            print(f"{name:{width}}  {title} ({minutes})\n{'':{width}}  graded on: {grades}")
        return 0
    args.name = _lab_package(args.name)
    module = labs.load(args.name)
    if args.lab_command == "reset":
        done = labs.reset(args.name, args.student, args.seed)
        if done.backup is not None:
            print(f"lab {args.name}: your copy is kept as {done.backup}/")
        else:
            print(f"lab {args.name}: there was no copy at {done.work}/; nothing to back up")
        reference = labs.reference_seed(args.name)
        print(
            f"  {done.work}/ holds the starting point again: {', '.join(done.files)} "
            f"({done.instance.describe(reference)})"
        )
        return 0
    if args.lab_command == "test":
        run = labs.offline(args.name, args.solution, args.work)
        print(labs.render(run))
        return 0 if run.passed else EXIT_CHECKS_FAILED
    if args.lab_command == "start":
        labs.requested_instance(args.name, args.student, args.seed)  # a bad seed before root
        need_root(f"emu lab start {args.name}")
        work = labs.copy_starting_point(args.name, args.student, args.seed)
        instance = labs.read_instance(work)
        reference = labs.reference_seed(args.name)
        print(f"lab {args.name}: {module.TITLE}. Your copy: {work}/ (edit it there);")
        print(f"  your instance: {instance.describe(reference)} (recorded in {work}/)")
        print(f"  the handout: {labs.lab_dir(args.name) / 'README.md'}")
        print(f"  grade it with: emu lab check {labs.spelled(args.name)}")
        run = labs.new_run(args.name, work, args.out, solution=False, instance=instance)
        if not args.web:
            module.start(run)
            return 0
        # The view follows whatever fabric the lab builds in this process.
        with _live_view(None, args):
            module.start(run)
        return 0
    # A missing file or a seed that does not fit the copy is named before root.
    chosen = labs.work_dir(args.name, args.solution, args.work)
    labs.instance_for(args.name, chosen, args.solution, args.student, args.seed)
    need_root(f"emu lab check {args.name}")
    run = labs.check(
        args.name, args.solution, args.work, args.out, student=args.student, seed=args.seed
    )
    print(labs.render(run))
    return 0 if run.passed else EXIT_CHECKS_FAILED


# `emu topo export BUILDER k=v ...`: the builders a file can be exported from.
EXPORT_BUILDERS = {
    "leaf_spine": fabric.leaf_spine,
    "fat_tree": fabric.fat_tree,
    "single_switch": fabric.single_switch,
    "dragonfly": fabric.dragonfly,
    "torus": fabric.torus,
    "rail_optimized": fabric.rail_optimized,
}


def cmd_topo_validate(args) -> int:
    """Check each file without starting anything: ok lines on stdout, one line per bad
    file on stderr, exit status 2 if any was bad (as `emu topo show` and `emu run --topo`)."""
    failed = 0
    for path in args.files:
        try:
            graph = topofile.load(path)
        except topofile.TopoFileError as exc:
            print(f"emu: {exc}", file=sys.stderr)
            failed += 1
            continue
        counts = fabric.expected_counts(graph)
        print(
            f"{path}: ok ({counts['switches']} switches, {counts['hosts']} hosts, "
            f"{counts['switch_links']} switch links)"
        )
    return EXIT_USAGE if failed else 0


def _load_job(path: str):
    """A job (YAML, or an example's name) for `emu job show|trace`; a trace is refused."""
    if path.endswith(".json"):
        raise ScenarioError(f"{path} is a trace, not a job: `emu job validate` reads it")
    return _load_job_or_trace(path)


def _load_job_or_trace(path: str):
    """A job (YAML, or an example's name) or a trace (.json); ScenarioError in one line."""
    from emu import job as job_mod
    from emu import schedule as sched

    try:
        if path.endswith(".json"):
            return sched.load_trace(path)
        return job_mod.load(path)
    except (job_mod.JobFileError, sched.TraceError) as exc:
        raise ScenarioError(str(exc)) from None


def cmd_job_validate(args) -> int:
    """Each file checked: ok lines on stdout, one line per bad file on stderr, exit 2 if any was."""
    failed = 0
    for path in args.files:
        try:
            got = _load_job_or_trace(path)
        except ScenarioError as exc:
            print(f"emu: {exc}", file=sys.stderr)
            failed += 1
            continue
        if hasattr(got, "ops"):
            print(f"{path}: ok (a trace of {len(got.ops)} operations on {got.ranks} ranks)")
        else:
            print(
                f"{path}: ok ({got.gpus} GPUs: dp={got.dp} x tp={got.tp} x pp={got.pp}, "
                f"ep={got.ep}; {got.layers} layers, {got.micro_batches} micro-batches)"
            )
    return EXIT_USAGE if failed else 0


def cmd_job_show(args) -> int:
    from emu import job as job_mod
    from emu import schedule as sched
    from emu.models import step

    job = _load_job(args.file)
    module = scenario.load("training-step")
    params = scenario.resolve_params(module, [*args.set, f"job={args.file}"])
    graph = scenario.build_fabric_graph(params)
    s = sched.from_job(job)
    s.hosts = job_mod.place(job, graph)
    model = step.comm_model_s(s, graph)
    tl = sched.timeline(s, model)
    print(f"{job.name}: {job.description or ''}".rstrip(": "))
    print(f"GPUs: dp={job.dp} x tp={job.tp} x pp={job.pp} (ep={job.ep}), placement {job.placement}")
    for stage in range(job.pp):
        for d in range(job.dp):
            ranks = [job.rank(stage, d, t) for t in range(job.tp)]
            print(
                f"  stage {stage}, replica {d}: "
                + ", ".join(f"rank {r} {s.hosts[r]}" for r in ranks)
            )
    per = {}
    for op in s.ops:
        if op.step == 0:
            per[op.phase, op.kind] = per.get((op.phase, op.kind), 0) + 1
    print(
        "operations per step: " + ", ".join(f"{n} {ph} {k}" for (ph, k), n in sorted(per.items()))
    )
    steps = ", ".join(f"{x * 1000:.0f}" for x in tl.step_s(s))
    print(
        f"alpha-beta model (emu/models/step.py) on {graph.graph['name']}: steps {steps} ms, "
        f"exposed communication {sched.exposed_s(s, model) * 1000:.0f} ms in {s.steps} steps"
    )
    return 0


def cmd_job_trace(args) -> int:
    from emu import schedule as sched

    job = _load_job(args.file)
    s = sched.from_job(job)
    try:
        sched.dump_trace(s, args.out)
    except OSError as exc:
        raise ScenarioError(f"--out {args.out}: {exc.strerror}") from None
    print(f"wrote {args.out}: {len(s.ops)} operations on {s.ranks} ranks")
    return 0


def cmd_job_schema(args) -> int:
    from emu import job as job_mod

    print(json.dumps(job_mod.schema(), indent=2))
    return 0


def cmd_topo_show(args) -> int:
    graph = topofile.load(args.file)
    print(topology_summary(graph))
    if args.out:
        from emu.telemetry import draw_fabric

        try:
            print(f"drew {draw_fabric(graph, Path(args.out))}")
        except (ValueError, OSError) as exc:
            raise ScenarioError(f"--out: {exc}") from None
    return 0


def cmd_topo_place(args) -> int:
    """Where each node would run over `--servers`, and which links become tunnels."""
    from emu import placement

    graph = topofile.load(args.file)
    names = [s.strip() for s in args.servers.split(",")] if args.servers else []
    try:
        placed = placement.place(graph, names)
    except placement.PlacementError as exc:
        raise ScenarioError(str(exc)) from None
    print(placement_summary(graph, placed))
    return 0


def placement_summary(graph, placed) -> str:
    """`emu topo place`'s report: per server its units and counts, then the tunnels."""
    from emu.fabric import natural_key
    from emu.topopick import rate_text

    links = graph.number_of_edges()
    head = (
        f"fabric {graph.graph.get('name', '')} over {len(placed.servers)} servers: "
        f"{len(placed.cut)} of {links} links cross between servers (tunnels), "
        f"{rate_text(placed.cut_bps)}bit/s at their line rates"
    )
    rows = []
    for server in placed.servers:
        nodes = placed.nodes_on(server)
        units = sorted({placed.unit_of[n] for n in nodes}, key=natural_key)
        rows.append(
            [
                server,
                sum(1 for n in nodes if graph.nodes[n]["kind"] == "switch"),
                sum(1 for n in nodes if graph.nodes[n]["kind"] == "host"),
                " ".join(units),
            ]
        )
    tunnels = [
        [
            u,
            placed.server_of[u],
            v,
            placed.server_of[v],
            rate_text(graph.edges[u, v].get("rate_bps", 0)),
        ]
        for u, v in placed.cut
    ]
    tables = [
        scenario.Table("servers", ["server", "switches", "hosts", "kept together"], rows),
        scenario.Table("tunnels", ["a", "on", "b", "on", "bit/s"], tunnels),
    ]
    return "\n\n".join([head] + [t.render() for t in tables if t.rows])


def topology_summary(graph) -> str:
    """The fabric as `emu topo show` prints it: a headline, switches, hosts, switch links."""
    counts = fabric.expected_counts(graph)
    head = (
        f"fabric {graph.graph['name']} ({graph.graph['kind']}): {counts['switches']} switches, "
        f"{counts['hosts']} hosts, {counts['switch_links']} switch links, "
        f"time scale {graph.graph['time_scale']:g}"
    )
    switches = [
        [
            n,
            d["role"],
            d["tier"],
            f"{d['dpid']:#x}",
            graph.degree(n),
            sum(1 for p in graph[n] if graph.nodes[p]["kind"] == "host"),
        ]
        for n in fabric.switches(graph)
        for d in [graph.nodes[n]]
    ]
    hosts = [
        [h, d["ip"], d["mac"], d["leaf"], f"{graph.edges[h, d['leaf']]['rate_bps'] / 1e6:g}"]
        for h in fabric.hosts(graph)
        for d in [graph.nodes[h]]
    ]
    # Each link lower tier first: a leaf's row, then the spine it goes up to.
    ordered = [sorted(e, key=lambda n: graph.nodes[n]["tier"]) for e in fabric.switch_links(graph)]
    links = [
        [
            u,
            graph.edges[u, v]["ports"][u],
            v,
            graph.edges[u, v]["ports"][v],
            f"{graph.edges[u, v]['rate_bps'] / 1e6:g}",
            f"{graph.edges[u, v]['delay_s'] * 1e6:g}",
            graph.edges[u, v]["tier"],
        ]
        for u, v in ordered
    ]
    # GPUs' NVLink ports, where the fabric has NVLink domains.
    nvlink = [
        [p.host, p.ip, p.mac, p.switch, f"{p.rate_bps / 1e6:g}"]
        for h in fabric.hosts(graph)
        for p in fabric.host_ports(graph, h)
        if p.kind == "nvlink"
    ]
    tables = [
        scenario.Table("switches", ["name", "role", "tier", "dpid", "ports", "hosts"], switches),
        scenario.Table("hosts", ["name", "ip", "mac", "switch", "Mbit/s"], hosts),
        scenario.Table("NVLink ports", ["name", "ip", "mac", "nvswitch", "Mbit/s"], nvlink),
        scenario.Table(
            "switch links", ["a", "port", "b", "port", "Mbit/s", "delay us", "tier"], links
        ),
    ]
    return "\n\n".join([head] + [t.render() for t in tables if t.rows])


def parse_builder_args(builder: str, items: list[str]) -> dict:
    """`k=4`, `host_rate_bps=10M`, `name=lab1` -> builder keyword arguments, checked by name."""
    import inspect

    allowed = [p for p in inspect.signature(EXPORT_BUILDERS[builder]).parameters if p != "rates"]
    kwargs = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep:
            raise ScenarioError(f"{item!r}: expected KEY=VALUE")
        if key not in allowed:
            raise ScenarioError(
                f"{builder}: unknown parameter {key!r}; allowed: {', '.join(allowed)}"
            )
        kwargs[key] = _builder_value(text)
    return kwargs


def _builder_value(text: str):
    if text.lower() in ("true", "false"):  # rail_optimized's nvlink_domain
        return text.lower() == "true"
    if re.fullmatch(r"[0-9]+(x[0-9]+)+", text):  # a torus's dims: 3x3, 2x2x2
        return tuple(int(d) for d in text.split("x"))
    for parse in (int, float, topofile.parse_rate):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def cmd_topo_export(args) -> int:
    if args.builder not in EXPORT_BUILDERS:
        raise ScenarioError(
            f"unknown builder {args.builder!r}; available: {', '.join(EXPORT_BUILDERS)}"
        )
    graph = EXPORT_BUILDERS[args.builder](**parse_builder_args(args.builder, args.params))
    # The editor's `$schema=` line: relative to the file written, or the installed schema.
    schema = topofile.schema_path()
    ref = os.path.relpath(schema, Path(args.out).resolve().parent) if args.out else str(schema)
    text = topowrite.dump(graph, schema_ref=ref)
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            raise ScenarioError(f"--out: {exc}") from None
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_topo_schema(args) -> int:
    print(json.dumps(topofile.schema(), indent=2))
    return 0


def _make_emu_cli():
    from mininet.cli import CLI

    class _EmuCLI(CLI):
        """Mininet's CLI with emu's commands added."""

        prompt = "emu> "

        def __init__(self, mininet, fab, **kwargs):
            self.fab = fab
            super().__init__(mininet, **kwargs)

        def do_ctl(self, line):
            """ctl SWITCH|HOST WHAT [ARG...]: as `emu ctl` (e.g. ctl leaf1 ecn 3000 12000)."""
            parts = line.split()
            if len(parts) < 2:
                print("usage: ctl SWITCH|HOST WHAT [ARG...] (as emu ctl; `help ctl`)")
                return
            target, what, extra = parts[0], parts[1], parts[2:]
            try:
                graph = self.fab.graph
                if target not in graph:
                    raise ScenarioError(f"unknown switch or host {target!r}")
                kind = graph.nodes[target]["kind"]
                cmd, req = ctl_request(kind, what, extra)
                if kind == "switch":
                    result = self.fab.switch_call(target, cmd, **req)
                else:  # the host's NIC agent, where `emu ctl` finds it
                    path = os.path.join(self.fab.run.sock_dir, f"{target}.nic.sock")
                    result = mgmt.call(path, cmd, **req)
                print(format_ctl(what, result))
            except Exception as exc:  # noqa: BLE001 - the CLI must survive a typo
                print(f"ctl: {exc}")

        def do_path(self, line):
            """path SRC DST [tcp|udp SPORT DPORT]: the switches a flow crosses now."""
            parts = line.split()
            if len(parts) not in (2, 5) or (
                len(parts) == 5 and not (parts[3].isdigit() and parts[4].isdigit())
            ):
                print("usage: path SRC DST [tcp|udp SPORT DPORT]")
                return
            proto, sport, dport = (
                (parts[2], int(parts[3]), int(parts[4]))
                if len(parts) == 5
                else ("tcp", 49152, 5201)
            )
            try:
                print(" ".join(self.fab.trace_path(parts[0], parts[1], proto, sport, dport)))
            except Exception as exc:  # noqa: BLE001 - the CLI must survive a typo
                print(f"path: {exc}")

        def do_status(self, line):
            """status: the controller's view (switches, links, hosts, convergence)."""
            st = self.fab.controller_status()
            print(
                f"switches {len(st.get('switches', []))}, links {len(st.get('links', []))}, "
                f"hosts {len(st.get('hosts', []))}, converged {st.get('converged')}"
            )

    return _EmuCLI


def EmuCLI(net, fab):  # noqa: N802 - reads like the class it builds
    return _make_emu_cli()(net, fab=fab)


def format_ctl(what: str, result) -> str:
    """Human-readable rendering of a switch's answer."""
    if what == "ports":
        head = (
            f"{'port':>4} {'name':14} {'link':4} {'rate':>8} {'rx_pkts':>9} {'tx_pkts':>9} "
            f"{'rx_bytes':>11} {'tx_bytes':>11} {'rx_drop':>7} {'tx_drop':>7}"
        )
        rows = [head]
        for p in result:
            rows.append(
                f"{p['port_no']:>4} {p['name']:14} {'up' if p['link_up'] else 'down':4} "
                f"{p['rate_bps'] / 1e6:>7.1f}M {p['rx_packets']:>9} {p['tx_packets']:>9} "
                f"{p['rx_bytes']:>11} {p['tx_bytes']:>11} {p['rx_dropped']:>7} "
                f"{p['tx_dropped']:>7}"
            )
        return "\n".join(rows)
    if what == "fidelity" and isinstance(result, dict) and "loop" in result:
        from emu.fidelity import render_record

        return render_record(result)
    if what in ("flows", "groups") and isinstance(result, list):
        return "\n".join(json.dumps(r, default=str) for r in result)
    return json.dumps(result, indent=2, default=str)


# `emu ctl TARGET WHAT [ARG...]`: what each word asks of a switch or a host's NIC.
SWITCH_CTL = {
    "flows": ("flows", {}),
    "ports": ("ports", {}),
    "groups": ("groups", {}),
    "counters": ("counters", {}),
    "info": ("info", {}),
    "queues": ("queues", {}),
    "watchdog": ("watchdog", {}),
    "agg": ("agg", {}),
    "fidelity": ("fidelity", {}),
    "fastpath": ("fastpath", {}),
    "watchdog-on": ("set_watchdog", {"enabled": True}),
    "watchdog-off": ("set_watchdog", {"enabled": False}),
}
NIC_CTL = {
    "stats": ("stats", {}),
    "info": ("info", {}),
    "fidelity": ("fidelity", {}),
    "stuck": ("set", {"stuck": True}),
    "unstuck": ("set", {"stuck": False}),
    "drain-unlimited": ("set", {"unlimited_drain": True}),
}


def ctl_request(target_kind: str, what: str, extra: list[str]) -> tuple[str, dict]:
    """The management request for `emu ctl`; ValueError names a bad word or value."""
    table = SWITCH_CTL if target_kind == "switch" else NIC_CTL
    if what == "ecn" and target_kind == "switch":
        if len(extra) not in (2, 3):
            raise ScenarioError("usage: emu ctl SWITCH ecn KMIN_BYTES KMAX_BYTES [PMAX]")
        args = {"kmin_bytes": int(extra[0]), "kmax_bytes": int(extra[1])}
        if len(extra) == 3:
            args["pmax"] = float(extra[2])
        return "set_ecn", args
    if what == "loss" and target_kind == "switch":
        if len(extra) == 3 and extra[1] == "every":
            # Every N-th RoCEv2 frame the port sends (Guo et al., SIGCOMM 2016: 256).
            return "set_port_loss", {"port_no": int(extra[0]), "every": int(extra[2])}
        if len(extra) != 2:
            raise ScenarioError("usage: emu ctl SWITCH loss PORT_NO PROBABILITY|every N")
        return "set_port_loss", {"port_no": int(extra[0]), "probability": float(extra[1])}
    if what == "rate" and target_kind == "switch":
        if len(extra) != 2:
            raise ScenarioError("usage: emu ctl SWITCH rate PORT_NO RATE_BPS|default")
        rate = None if extra[1] == "default" else float(extra[1])
        return "set_port_rate", {"port_no": int(extra[0]), "rate_bps": rate}
    if what == "drain" and target_kind == "host":
        if len(extra) != 1:
            raise ScenarioError("usage: emu ctl HOST drain RATE_BPS")
        return "set", {"drain_rate_bps": float(extra[0])}
    if what not in table or extra:
        words = sorted(table) + (["ecn", "loss", "rate"] if target_kind == "switch" else ["drain"])
        raise ScenarioError(
            f"emu ctl on a {target_kind}: {what!r} is not one of {', '.join(words)}"
        )
    return table[what]


def cmd_ctl(args) -> int:
    runs = registry.live_runs()
    if args.run:
        runs = [r for r in runs if r.run_id == args.run]
    if not runs:
        raise ScenarioError("no running fabric found (start one with `emu run` or `emu cli`)")
    for run in runs:
        for kind, sock in (("switch", f"{args.target}.sock"), ("host", f"{args.target}.nic.sock")):
            path = os.path.join(run.sock_dir, sock)
            if os.path.exists(path):
                cmd, req = ctl_request(kind, args.what, args.args)
                print(format_ctl(args.what, mgmt.call(path, cmd, **req)))
                return 0
    names = sorted(p.name.split(".")[0] for r in runs for p in Path(r.sock_dir).glob("*.sock"))
    raise ScenarioError(f"unknown switch or host {args.target!r}; running: {', '.join(names)}")


def cmd_ofctl(args) -> int:
    from emu import ofctl

    runs = [r for r in registry.live_runs() if not args.run or r.run_id == args.run]
    if not runs:
        raise ScenarioError("no running fabric found (start one with `emu run` or `emu cli`)")
    for run in runs:
        path = os.path.join(run.sock_dir, f"{args.switch}.sock")
        if os.path.exists(path):
            host, port = mgmt.call(path, "info")["of_listen"]
            try:
                res = ofctl.run((host, port), [args.command, *args.args], check=False)
            except (ofctl.OfctlError, ValueError) as exc:
                raise ScenarioError(str(exc)) from None
            sys.stdout.write(res.stdout)
            sys.stderr.write(res.stderr)
            return res.returncode
    names = sorted(
        p.name[: -len(".sock")]
        for r in runs
        for p in Path(r.sock_dir).glob("*.sock")
        if not p.name.endswith(".nic.sock")
    )
    raise ScenarioError(f"unknown switch {args.switch!r}; running: {', '.join(names)}")


def cmd_path(args) -> int:
    import networkx as nx

    from emu import trace
    from emu.net import GRAPH_FILE

    runs = [r for r in registry.live_runs() if not args.run or r.run_id == args.run]
    runs = [r for r in runs if os.path.exists(os.path.join(r.sock_dir, GRAPH_FILE))]
    if not runs:
        raise ScenarioError("no running fabric found (start one with `emu run` or `emu cli`)")
    try:
        graphs = [
            (r, nx.node_link_graph(json.loads(Path(r.sock_dir, GRAPH_FILE).read_text())))
            for r in runs
        ]
    except (OSError, ValueError, KeyError) as exc:  # a fabric starting or stopping meanwhile
        raise ScenarioError(
            f"a running fabric's graph could not be read ({exc}); try again"
        ) from None
    # Of several fabrics, the one with both hosts; otherwise the first names the error.
    run, graph = next(((r, g) for r, g in graphs if args.src in g and args.dst in g), graphs[0])

    def ask(switch: str, in_port: int, frame_hex: str):
        return mgmt.call(
            os.path.join(run.sock_dir, f"{switch}.sock"), "trace", in_port=in_port, frame=frame_hex
        )

    try:
        path = trace.trace_path(graph, ask, args.src, args.dst, args.proto, args.sport, args.dport)
    except trace.TraceError as exc:
        raise ScenarioError(str(exc)) from None
    print(f"{args.proto} {args.src}:{args.sport} -> {args.dst}:{args.dport}: " + " ".join(path))
    return 0


def package_version() -> str:
    """The installed package's version (setup.cfg), or "unknown" from a bare source tree."""
    from importlib import metadata

    try:
        return metadata.version("emu")
    except metadata.PackageNotFoundError:
        return "unknown (not installed; run scripts/bootstrap)"


def running_fabrics(run_id: str | None = None) -> list[dict]:
    """Every live run of the registry as `emu ps` shows it: id, owner, fabric, nodes.

    A run's nodes come from the graph its fabric wrote (emu.net's GRAPH_FILE);
    `up` says whether the node's management socket is there (a switch's
    process, a host's NIC agent).
    """
    import time

    import networkx as nx

    from emu.net import GRAPH_FILE

    out = []
    for run in registry.live_runs():
        if run_id and run.run_id != run_id:
            continue
        graph_path = Path(run.sock_dir, GRAPH_FILE)
        nodes = []
        name = run.info.get("graph")
        try:
            graph = nx.node_link_graph(json.loads(graph_path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            graph = None  # still booting, or a run without a fabric (a testbed)
        # A fabric over several servers recorded where each node runs (emu.net).
        placed = run.info.get("server_of") or {}
        if graph is not None:
            name = graph.graph.get("name", name)
            for node, d in graph.nodes(data=True):
                sock = f"{node}.sock" if d.get("kind") == "switch" else f"{node}.nic.sock"
                nodes.append(
                    {
                        "name": node,
                        "kind": d.get("kind"),
                        "role": d.get("role"),
                        "address": d.get("ip") or f"dpid {d.get('dpid', 0):#x}",
                        "server": placed.get(node, "local"),
                        "up": os.path.exists(os.path.join(run.sock_dir, sock)),
                    }
                )
        out.append(
            {
                "run": run.run_id,
                "owner_pid": run.owner_pid,
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.created)),
                "fabric": name,
                "switches": sum(1 for n in nodes if n["kind"] == "switch"),
                "hosts": sum(1 for n in nodes if n["kind"] == "host"),
                "logs": run.log_dir,
                "nodes": nodes,
            }
        )
    return out


def cmd_ps(args) -> int:
    """`emu ps [--json] [--run ID]`: the running fabrics and their nodes."""
    fabrics = running_fabrics(args.run)
    if args.json:
        print(json.dumps(fabrics, indent=2))
        return 0
    if not fabrics:
        which = f" with run id {args.run!r}" if args.run else ""
        print(f"no running fabric{which} (start one with `emu run` or `emu cli`)")
        return 0
    for f in fabrics:
        print(
            f"{f['run']}: fabric {f['fabric'] or '?'}, {f['switches']} switches, "
            f"{f['hosts']} hosts; owner pid {f['owner_pid']}, started {f['started']}; "
            f"logs in {f['logs']}"
        )
        split = any(n["server"] != "local" for n in f["nodes"])
        rows = [["name", "kind", "role", "address", "mgmt"] + (["server"] if split else [])]
        rows += [
            [n["name"], n["kind"], n["role"], n["address"], "up" if n["up"] else "-"]
            + ([n["server"]] if split else [])
            for n in f["nodes"]
        ]
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        for row in rows if f["nodes"] else []:
            print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        print()
    return 0


def cmd_clean(args) -> int:
    need_root("emu clean")
    from emu import servers

    # The servers of the dead runs (a run over several servers recorded them): each
    # is asked to clean too, after this machine (a server's agent normally removed
    # its part when the run's connection went; this is for one that could not).
    remote = []
    for run in registry.load_runs():
        if not registry.same_process(run.owner_pid, run.owner_start):
            remote += [(s, info, run.run_id) for s, info in (run.info.get("servers") or {}).items()]
    removed = registry.clean_dead_runs()
    if not removed:
        print("nothing to clean: no dead runs recorded")
    for r in removed:
        print(
            f"{r['run']}: stopped {len(r['stopped_pids'])} processes, "
            f"deleted {len(r['deleted_interfaces'])} interfaces"
        )
    for name, info, origin in remote:
        print(servers.clean_server(name, info, origin))
    live = registry.live_runs()
    if live:
        print(
            "left alone (still running): "
            + ", ".join(f"{r.run_id} (pid {r.owner_pid})" for r in live)
        )
    return 0


def cmd_web(args) -> int:
    """The live view of a fabric that another process runs (`emu cli`, a test, a lab)."""
    from emu import live
    from emu.live.sampler import RegisteredRuns

    runs = registry.live_runs()
    if args.run and not any(r.run_id == args.run for r in runs):
        known = ", ".join(r.run_id for r in runs) or "none"
        raise ScenarioError(f"no running fabric {args.run!r}; running: {known}")
    try:
        view = live.serve(
            port=args.web_port, host=args.web_host, source=RegisteredRuns(run_id=args.run)
        )
    except live.LiveViewError as exc:
        raise ScenarioError(str(exc)) from None
    with view:
        print(
            f"live view: {view.url} (the newest running fabric"
            f"{'' if not args.run else ' ' + args.run}); Ctrl-C to stop",
            flush=True,
        )
        _serve_until_interrupted()
    return 0


def _add_web_options(s: argparse.ArgumentParser, linger: bool) -> None:
    from emu.live import DEFAULT_PORT

    s.add_argument(
        "--web",
        action="store_true",
        help="serve the live view of the fabric (links by utilisation, PAUSE, queues) "
        f"on http://127.0.0.1:{DEFAULT_PORT}/",
    )
    _add_web_address(s)
    if linger:
        s.add_argument(
            "--web-linger",
            type=float,
            metavar="SECONDS",
            help="with --web: keep showing the report and plots this long after the "
            "run (default: until Ctrl-C; 0: stop with the run)",
        )


def _add_web_address(s: argparse.ArgumentParser) -> None:
    from emu.live import DEFAULT_PORT

    s.add_argument(
        "--web-port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free"
    )
    s.add_argument(
        "--web-host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 to view from outside a VM)",
    )


def cmd_report(args) -> int:
    path = Path(args.dir) / "report.txt"
    if not path.exists():
        raise ScenarioError(f"no report at {path}")
    print(path.read_text(), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The `emu` command line: its global options, then one `_add_*_parser` per command."""
    p = argparse.ArgumentParser(
        prog="emu",
        description="Packet-level emulator of GPU-cluster "
        "fabrics: lossless Ethernet, ECMP and failures on real packets.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress")
    p.add_argument("--version", action="version", version=f"emu {package_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for add_parser in (
        _add_list_parser,
        _add_run_parser,
        _add_cli_parser,
        _add_web_parser,
        _add_topo_parser,
        _add_job_parser,
        _add_ctl_parser,
        _add_ofctl_parser,
        _add_path_parser,
        _add_allreduce_parser,
        _add_reproduce_parser,
        _add_lab_parser,
        _add_ps_parser,
        _add_clean_parser,
        _add_report_parser,
    ):
        add_parser(sub)
    return p


def _add_list_parser(sub: argparse._SubParsersAction) -> None:
    """`emu list`: the scenarios, and with -v their parameters."""
    s = sub.add_parser("list", help="scenarios with one-line descriptions")
    s.add_argument(
        "-v",
        "--verbose",
        dest="verbose_list",
        action="store_true",
        help="also every parameter: default, range and what it does",
    )
    s.set_defaults(func=cmd_list)


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    """`emu run NAME`: its --help lists NAME's parameters too (`_RunHelp`)."""
    s = sub.add_parser(
        "run",
        help="run a scenario and print its report",
        add_help=False,
        epilog="emu run NAME --help lists NAME's parameters (docs/parameters.md).",
    )
    s.add_argument("-h", "--help", action=_RunHelp, help="this help, and NAME's parameters")
    s.add_argument("name")
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter (repeatable); rates also as rate=20M",
    )
    s.add_argument("--out", help="results directory (default results/NAME)")
    s.add_argument("--topo", metavar="FILE", help="the fabric from a topology file (YAML)")
    s.add_argument("--servers", metavar="local,NAME,...", help=SERVERS_HELP)
    s.add_argument(
        "--compare",
        metavar="KEY=A,B",
        help="variants side by side, for a scenario that has the compare parameter "
        "(training-step: placement=rail,crossing, sharp=off,on, overlap=off,on, "
        "routing=ecmp,adaptive, straggler=off,gpu5:1.3, fault=off,on); the same as "
        "--set compare=...",
    )
    s.add_argument(
        "--fault",
        metavar="SPEC",
        help="a fault from each variant's start, for a scenario that has the fault parameter "
        "(training-step: 'link spine1-rail1 flap at 2s'); the same as --set fault=...",
    )
    _add_web_options(s, linger=True)
    s.set_defaults(func=cmd_run)


def _add_cli_parser(sub: argparse._SubParsersAction) -> None:
    """`emu cli`: the Mininet CLI on a fabric of its own."""
    s = sub.add_parser("cli", help="Mininet CLI on a running fabric")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--topo", metavar="FILE", help="the fabric from a topology file (YAML)")
    s.add_argument("--servers", metavar="local,NAME,...", help=SERVERS_HELP)
    _add_web_options(s, linger=False)
    s.set_defaults(func=cmd_cli)


def _add_web_parser(sub: argparse._SubParsersAction) -> None:
    """`emu web`: the live view of a fabric that something else runs."""
    s = sub.add_parser(
        "web",
        help="live view of a running fabric in the browser",
        description="Serves the live view (links by utilisation, PAUSE per port, queues, "
        "ECN marks, drops) of the newest fabric that `emu run`, `emu cli` or a test runs.",
    )
    s.add_argument("--run", help="run id (default: the newest running fabric)")
    _add_web_address(s)
    s.set_defaults(func=cmd_web)


def _add_topo_parser(sub: argparse._SubParsersAction) -> None:
    """`emu topo validate|show|export|place|schema`."""
    s = sub.add_parser(
        "topo",
        help="topology files: validate, show, export, place, schema",
        description="Fabrics from a file (emu/topofile.py; schema: `emu topo schema`).",
    )
    topo = s.add_subparsers(dest="topo_command", required=True)
    t = topo.add_parser(
        "validate", help="check files without starting anything (exit 2 if one is bad)"
    )
    t.add_argument("files", nargs="+", metavar="FILE")
    t.set_defaults(func=cmd_topo_validate)
    t = topo.add_parser("show", help="print a file's fabric; draw it with --out")
    t.add_argument("file", metavar="FILE")
    t.add_argument("--out", metavar="PNG|SVG", help="draw the fabric into this file")
    t.set_defaults(func=cmd_topo_show)
    t = topo.add_parser(
        "export",
        help="write a builder's fabric as a topology file",
        description="e.g. `emu topo export fat_tree k=4`, `emu topo export leaf_spine "
        "leaves=2 spines=2 hosts_per_leaf=2 host_rate_bps=10M`. Builders: "
        + ", ".join(EXPORT_BUILDERS),
    )
    t.add_argument("builder", metavar="BUILDER")
    t.add_argument("params", nargs="*", metavar="KEY=VALUE")
    t.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    t.set_defaults(func=cmd_topo_export)
    t = topo.add_parser(
        "place",
        help="spread a file's fabric over servers: what runs where, which links cross",
        description="Pods, dragonfly groups, rails and leaves with their hosts stay on one "
        "server; the links between servers (tunnels) are as few and as slow as the "
        "balance allows (emu/placement.py).",
    )
    t.add_argument("file", metavar="FILE")
    t.add_argument(
        "--servers", required=True, metavar="A,B[,C...]", help="server names, comma-separated"
    )
    t.set_defaults(func=cmd_topo_place)
    t = topo.add_parser("schema", help="print the JSON schema of topology files")
    t.set_defaults(func=cmd_topo_schema)


def _add_job_parser(sub: argparse._SubParsersAction) -> None:
    """`emu job validate|show|trace|schema`."""
    s = sub.add_parser(
        "job",
        help="training jobs and traces: validate, show, write as a trace, schema",
        description="Training jobs (emu/job.py; schema: `emu job schema`; examples in jobs/) "
        "and JSON traces (emu/schedule.py) for `emu run training-step`.",
    )
    job = s.add_subparsers(dest="job_command", required=True)
    t = job.add_parser(
        "validate",
        help="check job files (.yaml) and traces (.json) without starting anything "
        "(exit 2 if one is bad)",
    )
    t.add_argument("files", nargs="+", metavar="FILE")
    t.set_defaults(func=cmd_job_validate)
    t = job.add_parser(
        "show",
        help="a job's placement on training-step's fabric, its operations and the "
        "alpha-beta model's step time",
    )
    t.add_argument("file", metavar="FILE|EXAMPLE")
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="training-step's fabric parameters (nodes, gpus_per_node, rate_mbps...)",
    )
    t.set_defaults(func=cmd_job_show)
    t = job.add_parser("trace", help="write a job's schedule as a JSON trace")
    t.add_argument("file", metavar="FILE|EXAMPLE")
    t.add_argument("--out", required=True, metavar="FILE.json")
    t.set_defaults(func=cmd_job_trace)
    t = job.add_parser("schema", help="print the JSON schema of job files")
    t.set_defaults(func=cmd_job_schema)


def _add_ctl_parser(sub: argparse._SubParsersAction) -> None:
    """`emu ctl TARGET WHAT [ARGS]`: the description lists what a switch and a NIC answer."""
    s = sub.add_parser(
        "ctl",
        help="ask a running switch or host NIC, or inject a fault",
        description="switch: " + ", ".join(sorted(SWITCH_CTL)) + ", ecn KMIN "
        "KMAX [PMAX], loss PORT PROB, rate PORT BPS|default; host NIC: "
        + ", ".join(sorted(NIC_CTL))
        + ", drain RATE",
    )
    s.add_argument("target", help="switch or host name")
    s.add_argument("what")
    s.add_argument("args", nargs="*")
    s.add_argument("--run", help="run id (default: any running fabric)")
    s.set_defaults(func=cmd_ctl)


def _add_ofctl_parser(sub: argparse._SubParsersAction) -> None:
    """`emu ofctl SWITCH COMMAND [ARGS]`: everything after COMMAND goes to ovs-ofctl."""
    s = sub.add_parser(
        "ofctl",
        help="ovs-ofctl -O OpenFlow13 against a running switch (flows, groups, meters)",
        description="Runs `ovs-ofctl -O OpenFlow13 COMMAND tcp:<switch> ARGS` against "
        "a switch of the running fabric, e.g. `emu ofctl leaf1 dump-flows`, "
        "`emu ofctl leaf1 add-meter meter=1,kbps,bands=type=drop,rate=2000`.",
    )
    s.add_argument("switch", help="switch name")
    s.add_argument("command", help="ovs-ofctl command: dump-flows, add-flow, add-meter ...")
    s.add_argument("args", nargs=argparse.REMAINDER)
    s.add_argument("--run", help="run id (default: any running fabric)")
    s.set_defaults(func=cmd_ofctl)


def _add_path_parser(sub: argparse._SubParsersAction) -> None:
    """`emu path SRC DST`."""
    s = sub.add_parser(
        "path",
        help="the switches a flow crosses now, asked of each switch",
        description="Each switch traces the flow's 5-tuple through its own "
        "tables (ECMP hash included) without touching counters; the walk "
        "follows the one port it names.",
    )
    s.add_argument("src", help="source host")
    s.add_argument("dst", help="destination host")
    s.add_argument("--proto", choices=("tcp", "udp"), default="tcp")
    s.add_argument("--sport", type=int, default=49152, help="source port (default 49152)")
    s.add_argument("--dport", type=int, default=5201, help="destination port (default 5201)")
    s.add_argument("--run", help="run id (default: the running fabric)")
    s.set_defaults(func=cmd_path)


def _add_allreduce_parser(sub: argparse._SubParsersAction) -> None:
    """`emu allreduce`: nccl-tests' all_reduce_perf options, as its flags name them."""
    s = sub.add_parser(
        "allreduce",
        help="nccl-tests-style all-reduce (ring or in-network)",
        description="Builds a leaf/spine, runs all-reduce (sum) on real data "
        "for every size and prints nccl-tests' all_reduce_perf table.",
    )
    s.add_argument("--hosts", type=int, default=8, help="ranks (2..64; default 8)")
    s.add_argument(
        "--algo",
        choices=("ring", "sharp", "both"),
        default="ring",
        help="both: the ring, then SHARP, on the same fabric",
    )
    s.add_argument("--sizes", default="1K:16M", help="MIN:MAX bytes per rank (nccl -b/-e)")
    s.add_argument("--factor", type=int, default=2, help="size step factor (nccl -f)")
    s.add_argument("--dtype", choices=("float32", "int32", "float", "int"), default="float32")
    s.add_argument("--iters", type=int, default=1, help="timed iterations per size")
    s.add_argument("--seed", type=int, default=0, help="data seed")
    s.add_argument("--rate-mbps", type=float, default=10.0, help="link rate (default 10)")
    s.add_argument(
        "--modelled-gbps",
        type=float,
        default=25.0,
        help="NIC speed the links stand for; sets the time scale of DCQCN and the RTO "
        "(default 25, the HPCC/DCQCN ns-3 NIC)",
    )
    s.add_argument("--bw-unit", choices=("MB/s", "GB/s"), default="MB/s")
    s.add_argument("--out", help="directory for the fabric's logs")
    s.set_defaults(func=cmd_allreduce)


def _add_reproduce_parser(sub: argparse._SubParsersAction) -> None:
    """`emu reproduce`."""
    s = sub.add_parser(
        "reproduce",
        help="run what the README quotes; write docs/results.md",
        description="Runs every scenario the README quotes --runs times (emu run "
        "in a subprocess) and writes min/median/max of each figure over the "
        "faithful runs, check pass counts and fidelity per run to --doc.",
    )
    s.add_argument("--runs", type=int, help="runs per configuration (default 3; 1 with --quick)")
    s.add_argument("--quick", action="store_true", help="small parameters (the scenario tests')")
    s.add_argument(
        "--only",
        metavar="NAME[,NAME]",
        help="scenarios or configurations to run; an existing --doc keeps the others' "
        "sections, each naming the commit it was measured at",
    )
    s.add_argument("--out", default="results/reproduce", help="run directories")
    s.add_argument("--doc", default="docs/results.md", help="the markdown to write")
    s.add_argument(
        "--update-readme",
        metavar="README",
        nargs="?",
        const="README.md",
        help="run nothing: copy --doc's figures into README's "
        "<!-- reproduced:ID --> blocks (default README.md)",
    )
    s.add_argument(
        "--check-lines",
        metavar="PATH",
        help="run nothing: write every check line of the runs in --out to PATH "
        "(e.g. docs/runs/DATE-reproduction.md)",
    )
    s.add_argument(
        "--compare",
        metavar="BEFORE",
        help="run nothing: print each figure of BEFORE (an earlier --doc) beside --doc's, "
        "with whether it stayed within BEFORE's run-to-run spread",
    )
    s.set_defaults(func=cmd_reproduce)


def _add_lab_parser(sub: argparse._SubParsersAction) -> None:
    """`emu lab list|start|check|test|reset`."""
    s = sub.add_parser("lab", help="teaching labs: list, start one, grade your work")
    lab = s.add_subparsers(dest="lab_command", required=True)
    lab.add_parser("list", help="the labs, their time and what each is graded on")
    t = lab.add_parser(
        "start", help="copy the lab's starting point, build its fabric, open the CLI"
    )
    t.add_argument("name")
    _add_lab_instance_options(t)
    t.add_argument("--out", help="results directory (default results/labs/NAME)")
    _add_web_options(t, linger=False)
    t = lab.add_parser("check", help="grade the lab on real packets; a hint per failed check")
    t.add_argument("name")
    which = t.add_mutually_exclusive_group()
    which.add_argument("--solution", action="store_true", help="grade the lab's solution/")
    which.add_argument(
        "--work", help="grade this directory (default labs-work/NAME, else the start)"
    )
    _add_lab_instance_options(t)
    t.add_argument("--out", help="results directory (default results/labs/NAME)")
    t = lab.add_parser("test", help="the lab's offline tests of your work: no root, no fabric")
    t.add_argument("name")
    which = t.add_mutually_exclusive_group()
    which.add_argument("--solution", action="store_true", help="test the lab's solution/")
    which.add_argument(
        "--work", help="test this directory (default labs-work/NAME, else the start)"
    )
    t = lab.add_parser(
        "reset", help="put labs-work/NAME back to the starting point (the old copy kept)"
    )
    t.add_argument("name")
    _add_lab_instance_options(t)
    s.set_defaults(func=cmd_lab)


def _add_lab_instance_options(t: argparse.ArgumentParser) -> None:
    """--student or --seed: which instance of the lab (emu/labs.py derives one from either)."""
    who = t.add_mutually_exclusive_group()
    who.add_argument(
        "--student",
        metavar="NAME",
        help=f"your own instance of the lab, from your name (or ${labs.ENV_STUDENT})",
    )
    who.add_argument("--seed", metavar="N", help=f"the instance by number (or ${labs.ENV_SEED})")


def _add_ps_parser(sub: argparse._SubParsersAction) -> None:
    """`emu ps`."""
    s = sub.add_parser(
        "ps",
        help="the running fabrics: run ids, switches and hosts",
        description="Lists every running fabric from the run registry (emu/registry.py): "
        "its run id (what --run takes), owner process, switches and hosts "
        "(as containerlab's inspect).",
    )
    s.add_argument("--json", action="store_true", help="as JSON, one object per fabric")
    s.add_argument("--run", help="only this run id")
    s.set_defaults(func=cmd_ps)


def _add_clean_parser(sub: argparse._SubParsersAction) -> None:
    """`emu clean`."""
    s = sub.add_parser("clean", help="remove what crashed runs left behind")
    s.set_defaults(func=cmd_clean)


def _add_report_parser(sub: argparse._SubParsersAction) -> None:
    """`emu report DIR`."""
    s = sub.add_parser("report", help="print the report of a results directory")
    s.add_argument("dir")
    s.set_defaults(func=cmd_report)


def main(argv: list[str] | None = None) -> int:
    verbose = False
    try:
        args = build_parser().parse_args(argv)  # `run NAME --help` imports the scenario
        verbose = args.verbose
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(asctime)s %(name)s %(levelname)s %(message)s",
        )
        signal.signal(signal.SIGTERM, _raise_interrupt)
        signal.signal(signal.SIGHUP, _raise_interrupt)
        realtime.configured_priority()  # a bad EMU_RT_PRIORITY is named before anything starts
        return args.func(args)
    except INPUT_ERRORS as exc:
        print(f"emu: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("emu: interrupted; fabric torn down", file=sys.stderr)
        return 130
    except FabricError as exc:  # named errors from the fabric (emu.net.FabricError)
        print(f"emu: {exc}", file=sys.stderr)
        return EXIT_CHECKS_FAILED
    except BrokenPipeError:  # `emu ... | head`: the reader has gone, so has the output
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:
        if exc.errno not in MACHINE_ERRNOS:
            return _internal_error(exc, verbose)
        print(f"emu: {exc.strerror}: {exc.filename}", file=sys.stderr)
        return EXIT_CHECKS_FAILED
    except Exception as exc:  # noqa: BLE001 - a bug is one line here, whole in its file
        return _internal_error(exc, verbose)


def _internal_error(exc: Exception, verbose: bool) -> int:
    """A bug: one line naming it and the file that holds its traceback; exit status 4."""
    error = exc if isinstance(exc, InternalError) else InternalError(exc, write_traceback(exc))
    if verbose or error.path is None:
        import traceback

        traceback.print_exception(exc.__cause__ if isinstance(exc, InternalError) else exc)
    where = f"its traceback is in {error.path}" if error.path else "its traceback is above"
    print(
        f"emu: internal error: {error} (a bug in emu, not in your input or network; "
        f"{where}, please report it)",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

"""A switch process: one or several emu switches in one event loop, C or Python per frame.

Owns the process: its command line, which datapath runs its switches
(`emu.switch.fastpath.choice`: the compiled one unless `EMU_DATAPATH=python`
or a credit fabric), the loop they share, signals and the profiler. Each
`--switch` is the JSON list of one switch's `emu.switch.datapath` arguments,
checked by the same parser; without `--switch` the arguments are one
switch's. The switches share the loop (`emu/switch/loop.py` or the C
engine's, `emu/switch/fastpath.py`; why: see there). The Mininet side
(`node.py`, `EmuSwitch.batchStartup`) decides which switches share a process.

Run as `python -m emu.switch.worker --name switches-1 --switch '["--name", "leaf1", ...]' ...`
or `python -m emu.switch.worker --name leaf1 --dpid 1 --port leaf1-eth1:1:20000000 ...`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from emu import profiling, realtime
from emu.fidelity import GcMonitor
from emu.registry import die_with_parent, stop_on_signals
from emu.switch import datapath, fastpath
from emu.switch.loop import SwitchLoop

log = logging.getLogger(__name__)


def _switch_argv(text: str) -> list[str]:
    try:
        argv = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--switch {text[:60]!r}: not JSON ({exc})") from None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise argparse.ArgumentTypeError(f"--switch {text[:60]!r}: expected a JSON list of strings")
    return argv


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emu-switch-worker", description=__doc__.split("\n")[0])
    p.add_argument("--name", required=True, help="the process's name in logs and profiles")
    p.add_argument(
        "--switch",
        action="append",
        type=_switch_argv,
        required=True,
        help="JSON list of one switch's emu.switch.datapath arguments (repeat)",
    )
    p.add_argument("--rt-priority", type=int, default=0, help="SCHED_RR priority; 0: normal")
    p.add_argument("--log-level", default="INFO")
    return p


def serve(
    switch_args: list[argparse.Namespace], name: str, rt_priority: int, log_level: str
) -> int:
    """Run switches in this process, all in one loop, until a signal stops them."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    die_with_parent()
    sched = realtime.apply(rt_priority)
    kind = fastpath.choice(credit=any(a.qos["credit"].enabled for a in switch_args))
    several = len(switch_args) > 1
    if kind == "c":
        loop, switch_class = fastpath.FastLoop(shared=several), fastpath.FastDatapath
    else:
        loop, switch_class = SwitchLoop(shared=several), datapath.Datapath
    names = [a.name for a in switch_args]
    for args in switch_args:
        dp = switch_class(args, loop)
        dp.fidelity.sched = sched
        if several:
            dp.fidelity.process_switches = names
        log.info(
            "%s: dpid %016x, %d ports, OpenFlow listener %s",
            dp.name,
            dp.dpid,
            len(dp.ports),
            dp.of.listen_addr,
        )
    stop_on_signals(loop)
    frozen = GcMonitor.freeze()  # set up: keep it out of every later collection (fidelity.py)
    log.info(
        "%s: %d switch(es) in one loop, %s datapath, %d objects frozen",
        name,
        len(names),
        kind,
        frozen,
    )
    profiling.run(name, loop.run)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = datapath.build_parser()
    if "--switch" not in argv:
        one = parser.parse_args(argv)
        return serve([one], one.name, one.rt_priority, one.log_level)
    args = build_parser().parse_args(argv)
    switches = []
    for switch_argv in args.switch:
        try:
            switches.append(parser.parse_args(switch_argv))
        except SystemExit:
            print(f"{args.name}: bad --switch {switch_argv}", file=sys.stderr)
            raise
    names = [s.name for s in switches]
    if len(set(names)) != len(names):
        parser.error(f"a switch is named twice: {names}")
    return serve(switches, args.name, args.rt_priority, args.log_level)


if __name__ == "__main__":
    sys.exit(main())

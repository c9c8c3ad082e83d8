"""A process that runs several emu switches in one event loop.

Owns nothing but the command line: each `--switch` is the JSON list of one
switch's `emu.switch.datapath` arguments, checked by the same parser; the
switches share the loop of `emu/switch/loop.py` (why: see there). The Mininet
side (`node.py`, `EmuSwitch.batchStartup`) decides which switches share a
process.

Run as `python -m emu.switch.worker --name switches-1 --switch '["--name", "leaf1", ...]' ...`
"""

from __future__ import annotations

import argparse
import json
import sys

from emu.switch import datapath


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parser = datapath.build_parser()
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
    return datapath.serve(switches, args.name, args.rt_priority, args.log_level)


if __name__ == "__main__":
    sys.exit(main())

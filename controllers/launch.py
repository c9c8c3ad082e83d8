"""Launcher of emu's os-ken controller apps (os-ken 4.x has no ``osken-manager``).

Usage::

    python -m controllers.launch --ofp-listen-host 127.0.0.1 --ofp-tcp-listen-port PORT \\
        --status-file FILE [--log-file FILE] [--expect-switches N --expect-links N --expect-hosts N] \\
        [--lldp-interval S] [--flowlet-gap-us US] [--adaptive-routing SPEC] \\
        [--poll-interval S] [--elephant-fraction F] \\
        [--agg-socket PATH] [--agg-slots-per-switch N] \\
        [--extensions adaptive,tagger,ugal] [--dragonfly-routing ugal[:CLASSES[:BIAS]]|valiant] \\
        [--dragonfly-groups DPID=GROUP,...] [--verbose] \\
        controllers.routing|controllers.adaptive|controllers.tagger|controllers.ugal \\
        [controllers.aggregation]

It owns the process around the apps: argument checking (bad arguments give a
one-line message and exit status 2, never a traceback), logging, dying with
its parent (``PR_SET_PDEATHSIG``, by ``emu.registry.die_with_parent``, emu's
one home of process hygiene, a module that imports nothing else of emu; the
launcher never imports ``emu.switch`` or ``emu.net``), exiting promptly on
SIGTERM/SIGINT/SIGHUP, and handing options to the apps.  It does what
os-ken's old ``cmd/manager.py`` did: register options,
``os_ken.cfg.CONF(args=..., project='os_ken')``, then ``AppManager.run_apps(apps)``.

emu's own options are registered as os-ken CLI options on ``os_ken.cfg.CONF``
(``status_file``, ``expect_switches``, ``expect_links``, ``expect_hosts``,
``lldp_interval``); apps read them through ``app_options()``, which falls back
to defaults when the app runs under another launcher.

os-ken 4.2 runs on native threads (``os_ken.lib.hub`` with
``OSKEN_HUB_TYPE=native``, the default; eventlet is only imported when that
variable says ``eventlet``), so no monkey patching is needed; the launcher pins
``native``.  Its threads are not daemons and cannot be killed
(``hub.kill`` is a no-op), so the launcher leaves with ``os._exit`` after
flushing the logs: the apps keep no state that needs a graceful close (the
status file is always replaced atomically).

Stop signals are blocked in every thread and taken by ``sigwait`` in the main
thread, while the apps run in a worker thread.  A Python signal handler would
not do: the kernel may deliver a process-wide signal to any thread that does
not block it, and if that is one of os-ken's threads, the handler waits for the
main thread to run bytecode, which it never does while it sits in
``Thread.join``.  Under CPU load that lost the death-with-parent signal.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

# Pin the hub before anything imports os_ken.lib.hub (it reads the variable at import).
os.environ["OSKEN_HUB_TYPE"] = "native"

import oslo_config.cfg as oslo_cfg  # noqa: E402
from os_ken import cfg  # noqa: E402  (must follow the hub pin)

from controllers.routing_api import ROUTING_EXTENSIONS  # noqa: E402
from emu import config  # noqa: E402
from emu.proto import ofext  # noqa: E402
from emu.registry import die_with_parent  # noqa: E402

LOG = logging.getLogger(__name__)

EXIT_BAD_ARGS = 2
EXIT_FAILED = 1
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


@dataclass(frozen=True)
class AppOptions:
    """emu's options as seen by an app."""

    status_file: Optional[str] = None
    expect_switches: Optional[int] = None
    expect_links: Optional[int] = None
    expect_hosts: Optional[int] = None
    lldp_interval_s: float = 1.0
    flowlet_gap_us: Optional[int] = None
    adaptive_routing: Optional[str] = None
    poll_interval_s: float = 1.0
    elephant_fraction: float = 0.1
    agg_socket: Optional[str] = None
    agg_slots_per_switch: int = 1024
    next_hops: Optional[str] = None
    extensions: Tuple[str, ...] = ()
    dragonfly_routing: Optional[str] = None
    dragonfly_groups: Optional[str] = None


def _emu_opts() -> list:
    return [
        cfg.StrOpt("status-file", default=None, help="JSON convergence status written atomically"),
        cfg.IntOpt("expect-switches", default=None, help="switches emu expects"),
        cfg.IntOpt("expect-links", default=None, help="inter-switch cables emu expects"),
        cfg.IntOpt("expect-hosts", default=None, help="hosts emu expects"),
        cfg.FloatOpt("lldp-interval", default=1.0, help="LLDP period in seconds"),
        cfg.IntOpt(
            "flowlet-gap-us",
            default=None,
            help="SELECT groups in flowlet mode with this gap (emu extension)",
        ),
        cfg.StrOpt(
            "adaptive-routing",
            default=None,
            help="per-packet adaptive routing: [DPID=]CLASSES;... (emu extension)",
        ),
        cfg.FloatOpt("poll-interval", default=1.0, help="adaptive: statistics period (s)"),
        cfg.FloatOpt(
            "elephant-fraction",
            default=0.1,
            help="adaptive: elephant above this fraction of the NIC rate (Hedera)",
        ),
        cfg.StrOpt("agg-socket", default=None, help="aggregation: Unix socket where jobs register"),
        cfg.IntOpt(
            "agg-slots-per-switch",
            default=1024,
            help="aggregation: slots of each switch's reduction engine",
        ),
        cfg.ListOpt(
            "extensions",
            default=[],
            help="routing: extensions beside it (adaptive, tagger), attached in this order",
        ),
        cfg.StrOpt(
            "next-hops",
            default=None,
            help="routing: a Python file whose next_hops(topology, switch, destination) "
            "chooses the ports (default: every shortest-path next hop)",
        ),
        cfg.StrOpt(
            "dragonfly-routing",
            default=None,
            help="ugal: ugal[:CLASSES[:BIAS_BYTES]] or valiant (emu/proto/ofext.py)",
        ),
        cfg.StrOpt("dragonfly-groups", default=None, help="ugal: DPID=GROUP,... of the routers"),
    ]


def register_opts() -> None:
    """Register emu's options on os-ken's CONF (idempotent; must precede ``CONF(...)``)."""
    cfg.CONF.register_cli_opts(_emu_opts())


def app_options() -> AppOptions:
    """emu's options from os-ken's CONF, or defaults when they were not registered or parsed."""
    conf = cfg.CONF
    try:
        return AppOptions(
            status_file=conf.status_file,
            expect_switches=conf.expect_switches,
            expect_links=conf.expect_links,
            expect_hosts=conf.expect_hosts,
            lldp_interval_s=conf.lldp_interval,
            flowlet_gap_us=conf.flowlet_gap_us,
            adaptive_routing=conf.adaptive_routing,
            poll_interval_s=conf.poll_interval,
            elephant_fraction=conf.elephant_fraction,
            agg_socket=conf.agg_socket,
            agg_slots_per_switch=conf.agg_slots_per_switch,
            next_hops=conf.next_hops,
            extensions=tuple(conf.extensions or ()),
            dragonfly_routing=conf.dragonfly_routing,
            dragonfly_groups=conf.dragonfly_groups,
        )
    except (oslo_cfg.Error, AttributeError):
        return AppOptions()


# ---------------------------------------------------------------------------- argument checking


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit status is 2 as well
        self.exit(EXIT_BAD_ARGS, f"{self.prog}: error: {message}\n")


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"port {text!r} not in 1..65535")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"count {text!r} must be >= 0")
    return value


def _interval(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"interval {text!r} must be > 0")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"fraction {text!r} must be between 0 and 1")
    return value


def _gap_us(text: str) -> int:
    value = int(text)
    if not 0 < value < 2**32:
        raise argparse.ArgumentTypeError(f"gap {text!r} must be 1..4294967295 microseconds")
    return value


def _adaptive_spec(text: str) -> str:
    try:
        ofext.parse_adaptive_spec(text)
    except ofext.ExtensionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _dragonfly_routing(text: str) -> str:
    try:
        ofext.parse_dragonfly_routing(text)
    except ofext.ExtensionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _dragonfly_groups(text: str) -> str:
    try:
        ofext.parse_dragonfly_groups(text)
    except ofext.ExtensionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _slots(text: str) -> int:
    value = int(text)
    if not 0 < value <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"slots {text!r} must be 1..65535")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m controllers.launch", description="Run emu's os-ken controller apps."
    )
    p.add_argument("--ofp-listen-host", default="127.0.0.1")
    p.add_argument("--ofp-tcp-listen-port", type=_port, required=True)
    p.add_argument("--status-file", required=True)
    p.add_argument("--log-file")
    p.add_argument("--expect-switches", type=_count)
    p.add_argument("--expect-links", type=_count)
    p.add_argument("--expect-hosts", type=_count)
    p.add_argument("--lldp-interval", type=_interval, default=1.0)
    p.add_argument(
        "--flowlet-gap-us",
        type=_gap_us,
        help="switch-local adaptive routing: SELECT groups in flowlet mode",
    )
    p.add_argument(
        "--adaptive-routing",
        type=_adaptive_spec,
        metavar="SPEC",
        help="controllers.routing: per-packet adaptive routing in the switches (emu "
        "extension, emu/proto/ofext.py) for these priorities: 3, 0,3 or all on every "
        "switch; entries [DPID=]CLASSES separated by ';' per switch (CLASSES none: off "
        "there), e.g. '3;0x10001=none'. Switches it enables run no flowlets",
    )
    p.add_argument(
        "--poll-interval",
        type=_interval,
        default=1.0,
        help="controllers.adaptive: port and flow statistics period (s)",
    )
    p.add_argument(
        "--elephant-fraction",
        type=_fraction,
        default=0.1,
        help="controllers.adaptive: elephant threshold, fraction of the NIC rate",
    )
    p.add_argument(
        "--agg-socket",
        help="controllers.aggregation: Unix socket where jobs register "
        "(default: aggregation.sock beside the status file)",
    )
    p.add_argument(
        "--agg-slots-per-switch",
        type=_slots,
        default=1024,
        help="controllers.aggregation: slots of each switch's reduction engine",
    )
    p.add_argument(
        "--next-hops",
        metavar="FILE",
        help="controllers.routing: a Python file whose next_hops(topology, switch, "
        "destination) returns the output ports (a lab's ECMP policy)",
    )
    p.add_argument(
        "--extensions",
        type=_extensions,
        default=(),
        metavar="NAME,...",
        help="controllers.routing: managers beside routing, in this order "
        f"({', '.join(ROUTING_EXTENSIONS)}; e.g. adaptive,tagger)",
    )
    p.add_argument(
        "--dragonfly-routing",
        type=_dragonfly_routing,
        metavar="SPEC",
        help="controllers.routing on a dragonfly: minimal (one global hop a path, "
        "controllers/dragonfly_next_hops.py), ugal[:CLASSES[:BIAS_BYTES]] (each source "
        "router chooses per packet between minimal and Valiant next hops, "
        "controllers/ugal.py) or valiant (always through a third group); ugal or "
        "valiant attach the ugal extension",
    )
    p.add_argument(
        "--dragonfly-groups",
        type=_dragonfly_groups,
        metavar="DPID=GROUP,...",
        help="ugal: each router's dragonfly group (default: from the dragonfly builder's "
        "dpids, 0x1GGRR)",
    )
    p.add_argument("--verbose", action="store_true")
    p.add_argument("apps", nargs="+", metavar="APP", help="app module, e.g. controllers.routing")
    return p


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("status_file", "log_file"):
        path = getattr(args, name)
        if path is not None:
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(directory):
                parser.error(
                    f"--{name.replace('_', '-')} {path!r}: directory {directory!r} does not exist"
                )
    try:
        family = socket.AF_INET6 if ":" in args.ofp_listen_host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((args.ofp_listen_host, args.ofp_tcp_listen_port))
    except OSError as e:
        parser.error(
            f"cannot listen on {args.ofp_listen_host}:{args.ofp_tcp_listen_port}: {e.strerror}"
        )
    if args.next_hops is not None and args.dragonfly_routing is not None:
        parser.error(
            "--next-hops and --dragonfly-routing both choose routing's next hops: give one"
        )
    if args.next_hops is not None:
        from controllers.routing import load_next_hops

        try:
            load_next_hops(args.next_hops)
        except ValueError as exc:
            parser.error(str(exc))
    routing_apps = []
    for app in args.apps:
        try:
            module = importlib.import_module(app)
        except ImportError as e:
            parser.error(f"app {app!r} cannot be imported: {e}")
        if _runs_routing(module):
            routing_apps.append(app)
    if len(routing_apps) > 1:
        # Each is the routing service; two would both route. Extensions compose instead.
        names = [a.rsplit(".", 1)[-1] for a in routing_apps if a != "controllers.routing"]
        parser.error(
            f"{' and '.join(routing_apps)} each run routing; run one: controllers.routing "
            f"--extensions {','.join(names)}"
        )


def _extensions(text: str) -> Tuple[str, ...]:
    try:
        names = config.routing_extensions(text)
    except config.ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name at least one of {', '.join(ROUTING_EXTENSIONS)}"
        )
    return names


def _runs_routing(module: Any) -> bool:
    """Whether ``module`` defines an app that is the routing service (a ``RoutingApp``)."""
    from controllers.routing import RoutingApp

    return any(
        isinstance(v, type) and issubclass(v, RoutingApp) and v.__module__ == module.__name__
        for v in vars(module).values()
    )


# ---------------------------------------------------------------------------- process plumbing


def _exit_now(status: int) -> None:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _run_apps(apps: List[str], log_file: Optional[str]) -> None:
    """The worker thread: os-ken's apps; if they ever return, the controller has failed."""
    from os_ken.base import app_manager  # noqa: F401

    try:
        app_manager.AppManager.run_apps(apps)
    except Exception:  # the apps failed to start: say where the details are, then leave
        LOG.exception("controller apps failed")
        print(f"controller apps failed; see {log_file or 'stderr'}", file=sys.stderr)
        _exit_now(EXIT_FAILED)
    LOG.error("controller stopped (OpenFlow listener ended)")
    _exit_now(EXIT_FAILED)


def _setup_logging(log_file: Optional[str], verbose: bool) -> None:
    handler: logging.Handler = (
        logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def _os_ken_args(args: argparse.Namespace) -> List[str]:
    out = [
        "--ofp-listen-host", args.ofp_listen_host,
        "--ofp-tcp-listen-port", str(args.ofp_tcp_listen_port),
        "--status-file", os.path.abspath(args.status_file),
        "--lldp-interval", repr(args.lldp_interval),
        "--poll-interval", repr(args.poll_interval),
        "--elephant-fraction", repr(args.elephant_fraction),
    ]  # fmt: skip
    if args.flowlet_gap_us is not None:
        out += ["--flowlet-gap-us", str(args.flowlet_gap_us)]
    if args.adaptive_routing is not None:
        out += ["--adaptive-routing", args.adaptive_routing]
    if args.next_hops is not None:
        out += ["--next-hops", os.path.abspath(args.next_hops)]
    extensions = list(args.extensions)
    if args.dragonfly_routing is not None:
        out += ["--dragonfly-routing", args.dragonfly_routing]
        if ofext.parse_dragonfly_routing(args.dragonfly_routing).mode != "minimal":
            extensions += [] if "ugal" in extensions else ["ugal"]
    if args.dragonfly_groups is not None:
        out += ["--dragonfly-groups", args.dragonfly_groups]
    if extensions:
        out += ["--extensions", ",".join(extensions)]
    agg_socket = args.agg_socket or os.path.join(
        os.path.dirname(os.path.abspath(args.status_file)), "aggregation.sock"
    )
    out += [
        "--agg-socket",
        os.path.abspath(agg_socket),
        "--agg-slots-per-switch",
        str(args.agg_slots_per_switch),
    ]
    for name in ("expect_switches", "expect_links", "expect_hosts"):
        value = getattr(args, name)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the apps named on the command line until a stop signal; never returns."""
    # Blocked before any thread exists, so every thread os-ken starts inherits the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    die_with_parent()  # the controller must not outlive emu (DESIGN.md)
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.log_file, args.verbose)
    # os-ken registers its own CLI options when these modules are imported; all
    # options must be known before CONF() parses.
    from os_ken import flags, log  # noqa: F401
    from os_ken.base import app_manager  # noqa: F401

    register_opts()
    _check(parser, args)
    try:
        cfg.CONF(args=_os_ken_args(args), project="os_ken", default_config_files=[])
    except oslo_cfg.Error as e:
        parser.error(str(e))
    LOG.info(
        "controller on %s:%d, apps %s, status %s",
        args.ofp_listen_host, args.ofp_tcp_listen_port, args.apps, args.status_file,
    )  # fmt: skip
    worker = threading.Thread(
        target=_run_apps, args=(list(args.apps), args.log_file), name="os-ken", daemon=True
    )
    worker.start()
    signum = signal.sigwait(STOP_SIGNALS)
    LOG.info("signal %d: exiting", signum)
    _exit_now(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

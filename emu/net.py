"""Fabric lifecycle: Mininet with emu switches, the controller, convergence, teardown.

Owns one running fabric: `with Fabric(graph) as fab:` records the run in the
registry (emu/registry.py) before creating anything, starts the controller on a
free loopback port, builds Mininet from the graph (emu/fabric/) with
`EmuSwitch` nodes, starts the switches, waits until the controller reports
that it discovered every switch, link and host and installed routes, and on
exit (success, error, Ctrl-C, SIGTERM) stops exactly the processes and deletes
exactly the interfaces it recorded. Scenarios, tests and the CLI drive a fabric
only through this object, the management sockets and OpenFlow.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import networkx as nx

from emu import answers, mgmt, ofctl, telemetry, trace
from emu import fabric as fabric_mod
from emu.config import flow_control_qos, parse_qos, routing_extensions
from emu.faults import Faults
from emu.proto import ofext
from emu.registry import (  # noqa: F401 - FabricError and wait_for are emu.net's API too
    FabricError,
    Run,
    clean_dead_runs,
    free_tcp_port,
    live_runs,
    signals_held,
    stop_child,
    stop_pids,
    wait_for,
)
from emu.servers import parse_servers, remote_servers
from emu.traffic import iperf
from emu.traffic.ping import PingJob

log = logging.getLogger(__name__)

CONTROLLER_LISTEN_TIMEOUT_S = 30.0


GRAPH_FILE = "graph.json"  # in the run's socket directory


# The largest frame a host's kernel sends (offloads are off): 1500 + Ethernet header.
HOST_NIC_FRAME_BYTES = 1514
# The hosts' TCP congestion control: Linux's default since 2.6.19 (and Debian's
# and Ubuntu's), so that a fabric's TCP is the same on any machine.
DEFAULT_HOST_TCP_CONGESTION = "cubic"
TCP_AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"


def default_switch_processes() -> int:
    """One switch process per CPU: each loop can have a core, and no more loops
    than cores compete for them (docs/performance.md, "Switches sharing a process")."""
    return max(1, os.cpu_count() or 1)


def _with_time_scale(qos: dict, time_scale: float) -> dict:
    """`qos` with the fabric's time scale in its watchdog section (emu/fabric/, "The time scale").

    The scale belongs to the fabric, not to one setting: a watchdog with a
    scale of its own would run on another clock than the NICs beside it.
    """
    watchdog = qos.get("watchdog", {})
    if not isinstance(watchdog, dict):
        return qos  # parse_qos names the error
    if "time_scale" in watchdog:
        raise FabricError(
            f"qos watchdog time_scale={watchdog['time_scale']!r}: the time scale is the "
            "fabric's; give the builder time_scale= or modelled_rate_bps= instead"
        )
    return {**qos, "watchdog": {**watchdog, "time_scale": time_scale}}


def adaptive_routing_spec(graph: nx.Graph, classes: str | dict[str, str]) -> str:
    """`Fabric(adaptive_routing=...)` as controllers.launch's ``--adaptive-routing`` spec.

    Switch names become their dpids (the controller knows switches by dpid).

    Examples:
        >>> from emu.fabric import leaf_spine
        >>> adaptive_routing_spec(leaf_spine(2, 2), {"*": "3", "spine1": "none"})
        '3;0x20001=none'

    Raises:
        FabricError: a switch the graph does not have, or classes that are not
            priorities 0..7, "all" or "none".
    """
    items = classes.items() if isinstance(classes, dict) else [("*", classes)]
    entries = []
    for name, text in items:
        if name == "*":
            entries.append(str(text))
            continue
        node = graph.nodes.get(name)
        if node is None or node.get("kind") != "switch":
            raise FabricError(f"adaptive_routing: {name!r} is not a switch of this fabric")
        entries.append(f"{node['dpid']:#x}={text}")
    spec = ";".join(entries)
    try:
        ofext.parse_adaptive_spec(spec)
    except ofext.ExtensionError as exc:
        raise FabricError(f"adaptive_routing={classes!r}: {exc}") from None
    return spec


def dragonfly_routing_args(graph: nx.Graph, spec: str) -> tuple[str, ...]:
    """`Fabric(dragonfly_routing=...)` as controllers.launch's options: the spec and
    every router's group from the graph (``--dragonfly-groups``).

    Examples:
        >>> from emu.fabric import dragonfly
        >>> dragonfly_routing_args(dragonfly(groups=2, routers_per_group=1), "ugal:3")
        ('--dragonfly-routing', 'ugal:3', '--dragonfly-groups', '0x10101=1,0x10201=2')

    Raises:
        FabricError: a spec `emu.proto.ofext.parse_dragonfly_routing` refuses, or
            a graph whose switches carry no dragonfly group.
    """
    try:
        ofext.parse_dragonfly_routing(spec)
    except ofext.ExtensionError as exc:
        raise FabricError(str(exc)) from None
    routers = {
        d["dpid"]: d["group"]
        for _n, d in graph.nodes(data=True)
        if d.get("kind") == "switch" and "group" in d
    }
    if not routers:
        raise FabricError(
            f"dragonfly_routing={spec!r}: {graph.graph.get('name', 'this fabric')} is not a "
            "dragonfly (no switch carries a group; emu.fabric.dragonfly builds one)"
        )
    groups = ",".join(f"{dpid:#x}={group}" for dpid, group in sorted(routers.items()))
    return ("--dragonfly-routing", spec, "--dragonfly-groups", groups)


class Fabric:
    """A running emulated fabric (context manager).

    Args:
        graph: the topology from `emu.fabric` (single source of truth).
        out_dir: where logs go (default: a fresh /tmp directory named in errors).
        apps: controller applications (module names) to run.
        controller_args: extra options of ``controllers.launch`` (e.g.
            ``("--flowlet-gap-us", "10000")``, ``("--poll-interval", "0.5")``).
        seed: base of the per-switch SELECT hash seeds.
        converge_timeout_s: how long to wait for the controller's convergence.
        qos: buffer/PFC/ECN/watchdog settings of every switch, e.g.
            {"pfc": {"enabled": False}} (see emu/config.py; validated by the switch).
            The watchdog's times are modelled times, scaled by the graph's
            ``time_scale`` (emu/fabric/, "The time scale").
        host_nic_pacing: give every host's kernel a NIC that sends at its link
            rate (a tc token bucket with a 16-frame ring; on by default). Off,
            a host's veth sends as fast as the CPU allows and its backlog
            waits in the switch's egress queue, where the host's ACKs queue
            behind its own data, and a host that sends to two hosts gets two
            links; on, TCP Small Queues keep that backlog in the host, as on
            a real NIC. The RDMA NIC model (emu/host/agent.py) paces itself
            and skips this qdisc (PACKET_QDISC_BYPASS), so PAUSE stops it at
            once either way.
        host_tcp_congestion: the TCP congestion control of every host's
            kernel ("cubic", Linux's default, by default; "bbr", "dctcp",
            "reno", any this kernel has or can load). A network namespace
            inherits the machine's own default otherwise, and the machine's
            default is not a property of the fabric: BBR against the host
            NIC's 16-frame bucket resends tens of thousands of segments a run
            where CUBIC resends tens (docs/architecture.md). None: the
            machine's default. iperf3's -C still picks one flow's.
        flow_control: the lossless class's link-level flow control on every
            link: "pfc" (802.1Qbb, as `qos` says) or "credit" (InfiniBand-style
            credits per virtual lane, emu/credit.py; PFC off): switches and the
            NIC agents (emu/traffic/rdma.py) then run the credit loop.
        adaptive_routing: per-packet adaptive routing in the switches (emu's
            OpenFlow extension, emu/proto/ofext.py): each packet of the named
            priorities takes the least-queued live port of its ECMP group,
            PFC-paused ports passed over. A string of classes for every
            switch ("3", "0,3", "all"), or a mapping switch name -> classes
            ("none": off there; the key "*": every switch not named), e.g.
            {"*": "3", "spine1": "none"}. Sent by controllers.routing
            (``--adaptive-routing``); None: hashing (or flowlets, as
            controller_args say).
        extensions: managers to run beside routing in the controller, in this
            order (emu.config.ROUTING_EXTENSIONS: "adaptive", "tagger", "ugal";
            controllers/routing_api.py), added to whichever routing app `apps`
            names (``controllers.launch --extensions``).
        dragonfly_routing: how a dragonfly routes between groups: "minimal"
            (one global hop a path, the literature's minimal routing:
            controllers/dragonfly_next_hops.py), "ugal" (each source router
            places each packet from its hosts on the minimal or a Valiant next
            hop, whichever has the least queue x path length: emu's UGAL
            groups, controllers/ugal.py), "ugal:CLASSES" or
            "ugal:CLASSES:BIAS_BYTES" (those priorities only; the bias on the
            long side), or "valiant" (always through a third group). The
            routers' groups come from the graph (`emu.fabric.dragonfly`).
            None: routing's plain shortest paths in hops, which on the
            builder's dragonflies often cross a third group.
        switch_processes: N > 0 runs the switches in N processes, one event
            loop each (emu/switch/loop.py): switches that share a loop share
            its wake-ups, which is most of what a switch at tens of Mbit/s
            costs. 0 runs each switch in a process of its own. None (the
            default): one process per CPU (`default_switch_processes`).
            With `servers`, each server's switches share that many processes.
        servers: run the fabric over these servers ("local,b" or a list; "local"
            is this machine, any other name is what `ssh` connects to, e.g. a
            Host of ~/.ssh/config or of the file `EMU_SSH_CONFIG` names).
            emu.placement decides which node runs where; links between servers
            become tunnels (emu/cluster.py; docs/cluster.md). Every server is
            checked before anything starts (emu.servers.preflight): a bad one
            is a ServerError naming it. None or only "local": this machine.

    Example:
        >>> with Fabric(leaf_spine(leaves=2, spines=2)) as fab:   # doctest: +SKIP
        ...     fab.ping("h1", "h3")
    """

    def __init__(
        self,
        graph: nx.Graph,
        out_dir: str | None = None,
        apps: tuple[str, ...] = ("controllers.routing",),
        seed: int = 0,
        converge_timeout_s: float | None = None,
        log_level: str = "INFO",
        qos: dict | None = None,
        controller_args: tuple[str, ...] = (),
        host_nic_pacing: bool = True,
        host_tcp_congestion: str | None = DEFAULT_HOST_TCP_CONGESTION,
        switch_processes: int | None = None,
        flow_control: str = "pfc",
        extensions: tuple[str, ...] | str = (),
        adaptive_routing: str | dict[str, str] | None = None,
        dragonfly_routing: str | None = None,
        servers: str | list[str] | None = None,
    ) -> None:
        fabric_mod.validate(graph)
        self.servers = parse_servers(servers)
        if not remote_servers(self.servers):
            self.servers = []  # "local" alone is the one-machine fabric
        # With servers: which node runs where (emu.placement), the servers' SSH
        # connections and agents (emu.cluster.ClusterRun), and what was read of
        # the servers and tunnels as the fabric closed (`servers_report`).
        self.placement = None
        self.cluster = None
        self.servers_document: dict | None = None
        self.graph = graph
        self.apps = tuple(apps)
        self.extensions = routing_extensions(extensions)
        self.controller_args = tuple(controller_args)
        self.adaptive_routing = adaptive_routing
        if adaptive_routing is not None:
            spec = adaptive_routing_spec(graph, adaptive_routing)
            self.controller_args += ("--adaptive-routing", spec)
        if self.extensions:
            self.controller_args += ("--extensions", ",".join(self.extensions))
        self.dragonfly_routing = dragonfly_routing
        if dragonfly_routing is not None:
            self.controller_args += dragonfly_routing_args(graph, dragonfly_routing)
        self.seed = seed
        self.log_level = log_level
        self.time_scale = float(graph.graph["time_scale"])
        try:
            qos = flow_control_qos(flow_control, qos)
        except ValueError as exc:
            raise FabricError(str(exc)) from None
        self.flow_control = flow_control
        self.qos = _with_time_scale(qos, self.time_scale)
        self.host_nic_pacing = host_nic_pacing
        if host_tcp_congestion is not None:
            try:
                check_tcp_congestion(host_tcp_congestion)
            except ValueError as exc:
                raise FabricError(f"host_tcp_congestion: {exc}") from None
        self.host_tcp_congestion = host_tcp_congestion
        if switch_processes is None:
            switch_processes = default_switch_processes()
        if not isinstance(switch_processes, int) or switch_processes < 0:
            raise FabricError(
                f"switch_processes={switch_processes!r}: expected 0 (a process per switch) "
                "or the number of processes to share the switches"
            )
        self.switch_processes = switch_processes
        parse_qos(self.qos)  # a bad key fails here, naming it, not in 20 switch logs
        n = graph.number_of_nodes()
        self.converge_timeout_s = converge_timeout_s or 30.0 + 1.5 * n
        self.out_dir = out_dir
        self.run: Run | None = None
        self.net = None
        self.controller: subprocess.Popen | None = None
        self.controller_port = 0
        self.status_path = ""
        self.started_at = 0.0
        self.converged_after_s = None
        # Seconds since start at the end of each boot phase (bench/scale.py prints them).
        self.boot_phases: dict[str, float] = {}
        # The machine's CPU counters when the fidelity window began (emu/telemetry.py).
        self.fidelity_machine_start = None
        # What `close` collected: every process's fidelity record (emu/telemetry.py
        # collect_fidelity), for the run that opened this fabric (emu/runs.py).
        self.fidelity_document: dict | None = None
        # Each host NIC's drops when a test last began a fidelity window (`reset_fidelity`).
        self.host_nic_drops_at_reset: dict[str, int] = {}
        # The NIC agents of the hosts' NIC ports (an emu.traffic.rdma.RdmaHosts) that
        # workloads and NIC faults share: the first set started on this fabric's NIC
        # ports, or the one the first collective or NIC fault starts. Their processes
        # are this fabric's (its run registry) and go when it closes.
        self.nics = None
        self._faults = None

    # ----- lifecycle --------------------------------------------------------

    def __enter__(self) -> Fabric:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Bring the fabric up (what `with Fabric(...)` does on entry)."""
        # Mininet (and emu.switch.node, which subclasses its Switch) only here, where
        # a fabric is built: emu.net imports without Mininet. This hides no import
        # circle (tests/unit/test_imports.py).
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Host

        from emu.switch.node import EmuSwitch, disable_offloads

        self.started_at = time.monotonic()
        preflight = self._place_and_check_servers() if self.servers else None
        clean_dead_runs()
        self._refuse_taken_interfaces()
        log_dir = os.path.join(self.out_dir, "logs") if self.out_dir else None
        self.run = Run.create(log_dir=log_dir, label=self.graph.graph.get("name", "fabric"))
        self.run.info["graph"] = self.graph.graph.get("name")
        # The topology for tools outside this process (`emu path` follows its links).
        Path(self.run.sock_dir, GRAPH_FILE).write_text(json.dumps(nx.node_link_data(self.graph)))
        self.run.add_interfaces(self._interface_names(local_only=True))
        self._start_controller()
        self._boot_phase("controller listening")
        if self.servers:
            from emu.cluster import ClusterRun

            self.run.info["server_of"] = dict(self.placement.server_of)  # for `emu ps`
            self.cluster = ClusterRun(self.servers, self.run, preflight)
            self.cluster.connect(self.controller_port)
            self._refuse_taken_remote_interfaces()
            for server, agent in self.cluster.agents.items():  # recorded there before made
                agent.call("interfaces", names=self._interface_names(server=server))
            self._boot_phase("servers connected")
        setLogLevel("warning")
        rates = {}
        for u, v, data in self.graph.edges(data=True):
            for node in (u, v):
                rates[data["intfs"][node]] = data["rate_bps"]
        # What every switch gets, wherever it runs.
        switch_args = dict(
            run=self.run,
            port_rates=rates,
            fabric_seed=self.seed,
            log_level=self.log_level,
            qos=self.qos,
            switch_processes=self.switch_processes,
        )
        switch_cls = functools.partial(
            _SeededSwitch,
            EmuSwitch,
            controller_addrs=(f"127.0.0.1:{self.controller_port}",),
            **switch_args,
        )
        options = dict(
            topo=fabric_mod.to_mininet(self.graph),
            switch=switch_cls,
            host=Host,
            controller=None,
            build=False,
            autoSetMacs=False,
            waitConnected=False,
        )
        if self.cluster is None:
            self.net = Mininet(**options)
        else:
            self.net = self._cluster_mininet(options, switch_args)
        self.net.build()
        self._boot_phase("namespaces and links")
        for node in self.net.hosts + self.net.switches:
            # Interactive bash ignores SIGTERM: Mininet ends its shells with SIGHUP too.
            self.run.add_pid(node.shell.pid, f"shell {node.name}", group=True, sig=signal.SIGHUP)
        for host in self.net.hosts:
            self.host_run(host.name, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
            if self.host_tcp_congestion:
                self._set_tcp_congestion(host.name)
            for intf in host.intfList():
                disable_offloads(
                    intf.name, run_in=lambda argv, h=host.name: self.host_run(h, argv).returncode
                )
            if self.host_nic_pacing:
                self.set_host_tx_rate(host.name)
        self._boot_phase("hosts configured")
        self.net.start()
        self._boot_phase("switches started")
        for sw in self.net.switches:
            sw.wait_ready()
        self._boot_phase("switches answering")
        self.wait_converged()
        self._boot_phase("routing converged")
        telemetry.reset_fidelity(self)  # judge the experiment, not the boot

    def _place_and_check_servers(self) -> dict:
        """Which node runs where (emu.placement), then every server checked before
        anything is made (emu.servers.preflight); its answer."""
        from emu import placement, servers

        try:
            self.placement = placement.place(self.graph, self.servers)
        except placement.PlacementError as exc:
            raise servers.ServerError(f"servers {','.join(self.servers)}: {exc}") from None
        need = {}
        for s in self.servers:
            on = self.placement.nodes_on(s)
            hosts = [n for n in on if self.graph.nodes[n]["kind"] != "switch"]
            need[s] = servers.sessions_needed(len(on), len(hosts))
        answer = servers.preflight(self.servers, servers.ssh_config_path(), sessions=need)
        self._boot_phase("servers checked")
        return answer

    def _cluster_mininet(self, options: dict, switch_args: dict):
        """Mininet's cluster edition with emu's classes (emu/cluster.py) and placement;
        each switch reaches the controller through its server's forward."""
        from emu import cluster, placement

        c = self.cluster
        switch_cls = functools.partial(
            _SeededSwitch, cluster.RemoteEmuSwitch, cluster=c, **switch_args
        )
        names = [cluster.mininet_name(s) for s in self.servers]
        return cluster.EmuCluster(
            **dict(
                options,
                switch=switch_cls,
                host=functools.partial(cluster.RemoteEmuHost, cluster=c),
                link=functools.partial(cluster.EmuTunnelLink, cluster=c),
            ),
            servers=names,
            serverIP={cluster.mininet_name(s): c.addresses[s] for s in self.servers},
            placement=placement.placer_class(self._mininet_placement()),
        )

    def _mininet_placement(self):
        """The placement with the cluster edition's server names ("localhost" for local)."""
        from dataclasses import replace

        from emu.cluster import mininet_name

        p = self.placement
        return replace(
            p,
            servers=tuple(mininet_name(s) for s in p.servers),
            server_of={n: mininet_name(s) for n, s in p.server_of.items()},
        )

    def server_of(self, node: str) -> str:
        """The server `node` runs on ("local": this machine)."""
        if self.placement is None:
            return "local"
        return self.placement.server_of[node]

    # Where a node's processes find emu, their sockets and their files: this
    # machine's for a local node; its server's for one on another server (the
    # socket then forwarded here, so that every caller keeps the local path).
    def python_on(self, node: str) -> str:
        """The python that runs emu where `node` runs."""
        return (
            sys.executable
            if self.cluster is None
            else self.cluster.python_on(self._mn_server(node))
        )

    def path_on(self, node: str, local_path: str) -> str:
        """Where the file this fabric names `local_path` (in its socket or log
        directory) lives on `node`'s server."""
        if self.cluster is None:
            return local_path
        return self.cluster.path_on(self._mn_server(node), local_path)

    def serve_here(self, node: str, local_path: str) -> None:
        """Make the Unix socket a process of `node` serves at `path_on(node, local_path)`
        reachable here at `local_path` (ssh forwards it for a node on another server)."""
        if self.cluster is not None:
            self.cluster.forward_here(self._mn_server(node), local_path)

    def write_on(self, node: str, local_path: str, text: str) -> str:
        """Write `text` to `local_path` here and, for a node on another server, to
        `path_on(node, local_path)` there; returns the path on `node`'s server."""
        Path(local_path).write_text(text)
        if self.cluster is None:
            return local_path
        return self.cluster.write_there(self._mn_server(node), local_path, text)

    def _mn_server(self, node: str) -> str:
        from emu.cluster import mininet_name

        return mininet_name(self.server_of(node))

    def _refuse_taken_remote_interfaces(self) -> None:
        """As `_refuse_taken_interfaces`, on every other server (through its agent)."""
        for server, agent in self.cluster.agents.items():
            there = set(agent.run(["ls", "/sys/class/net"])["stdout"].split())
            taken = sorted(there & set(self._interface_names(server=server)))
            if taken:
                raise FabricError(
                    f"server {server}: {len(taken)} of this fabric's interfaces already exist "
                    f"there ({', '.join(taken[:3])}{', ...' if len(taken) > 3 else ''}): one "
                    "fabric of these names runs at a time on a server (`emu clean` there)"
                )

    def _refuse_taken_interfaces(self) -> None:
        """A fabric whose interface names already exist (another fabric of the same
        names is running: interfaces live in the root namespace) is refused before
        anything is built. Built, Mininet would fail on the first one ("RTNETLINK
        answers: File exists"), and this fabric's teardown would delete the other's
        interfaces, which its manifest would list as its own."""
        names = self._interface_names(local_only=True)
        taken = [n for n in names if os.path.exists(f"/sys/class/net/{n}")]
        if not taken:
            return
        owners = [r.run_id for r in live_runs() if set(taken) & set(r.interfaces)]
        held = f"by running fabric {', '.join(owners)}" if owners else "by something else"
        raise FabricError(
            f"{len(taken)} of this fabric's interfaces already exist ({', '.join(taken[:3])}"
            f"{', ...' if len(taken) > 3 else ''}), held {held}: one fabric of these names "
            "runs at a time on a machine (`emu ps` lists them; stop it, or `emu clean` "
            "what a dead one left)"
        )

    def _boot_phase(self, name: str) -> None:
        self.boot_phases[name] = round(time.monotonic() - self.started_at, 3)

    def close(self) -> dict:
        """Tear everything down; idempotent. Returns what the registry removed.

        A stop signal (TERM, INT, HUP) may cut short the collection of what the
        fabric measured, never the teardown: one that comes during the teardown
        is acted on when it is done (`registry.signals_held`). Cut short, it would
        leave the fabric's interfaces to `emu clean`.
        """
        removed: dict = {}
        if self.run is None:
            if self._faults is not None:
                self._faults.cancel()
            return removed
        try:
            self._collect_before_teardown()
        finally:
            with signals_held():
                removed = self._tear_down()
        return removed

    def _collect_before_teardown(self) -> None:
        # Read every process's records before the fault thread ends: a switch that
        # thread restarted dies with it (PR_SET_PDEATHSIG follows the parent thread).
        if self.out_dir and self.net is not None:
            try:
                self.fidelity_document = telemetry.collect_fidelity(self, self.out_dir)
            except Exception as exc:  # noqa: BLE001 - teardown must go on
                log.warning("fidelity not collected: %s", exc)
            try:
                telemetry.collect_switch_telemetry(self, self.out_dir)
            except Exception as exc:  # noqa: BLE001 - teardown must go on
                log.warning("telemetry not collected: %s", exc)
        if self.cluster is not None and self.net is not None:
            try:
                self.servers_document = self.servers_report()
            except Exception as exc:  # noqa: BLE001 - teardown must go on
                log.warning("servers not reported: %s", exc)
                self.servers_document = {"servers": self.servers, "error": str(exc)}
            if self.out_dir:
                path = os.path.join(self.out_dir, "servers.json")
                Path(path).write_text(json.dumps(self.servers_document, indent=1))
            try:
                self.cluster.fetch_logs(self.run.log_dir)
            except Exception as exc:  # noqa: BLE001 - teardown must go on
                log.warning("servers' logs not fetched: %s", exc)

    def _tear_down(self) -> dict:
        if self._faults is not None:
            self._faults.cancel()  # no scheduled fault may fire into a dying fabric
        workloads = [p for p in self.run.pids if p["role"].startswith("proc ")]
        stop_pids(list(reversed(workloads)))
        if self.net is not None:
            try:
                self.net.stop()
            except Exception as exc:  # noqa: BLE001 - teardown must go on
                log.warning("Mininet stop failed (%s); falling back to the registry", exc)
            self.net = None
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception as exc:  # noqa: BLE001 - teardown must go on
                log.warning("servers not closed (emu clean will): %s", exc)
            self.cluster = None
        if self.controller is not None:
            stop_child(self.controller, grace_s=5)
            self.controller = None
        removed = self.run.teardown()
        self.run = None
        return removed

    def _interface_names(self, local_only: bool = False, server: str | None = None) -> list[str]:
        """The fabric's interface names; those of one server's nodes with `server`
        ("local" with `local_only`: the ones in this machine's root namespace)."""
        if local_only:
            server = "local"
        names = []
        for _, _, data in self.graph.edges(data=True):
            for node, intf in data["intfs"].items():
                if server is None or self.server_of(node) == server:
                    names.append(intf)
        return names

    # ----- controller -------------------------------------------------------

    def _start_controller(self, port: int = 0) -> None:
        counts = fabric_mod.expected_counts(self.graph)
        self.controller_port = port or free_tcp_port()
        self.status_path = os.path.join(self.run.sock_dir, "controller-status.json")
        # Where controllers.aggregation (when it runs) takes job registrations.
        self.agg_socket_path = os.path.join(self.run.sock_dir, "aggregation.sock")
        log_path = os.path.join(self.run.log_dir, "controller.log")
        argv = [
            sys.executable,
            "-m",
            "controllers.launch",
            "--ofp-listen-host",
            "127.0.0.1",
            "--ofp-tcp-listen-port",
            str(self.controller_port),
            "--status-file",
            self.status_path,
            "--log-file",
            log_path,
            "--agg-socket",
            self.agg_socket_path,
            "--expect-switches",
            str(counts["switches"]),
            "--expect-links",
            str(counts["switch_links"]),
            "--expect-hosts",
            str(counts["host_addresses"]),
            "--lldp-interval",  # before controller_args: an explicit one there wins
            f"{fabric_mod.lldp_interval_s(self.graph):g}",
            *self.controller_args,
            *self.apps,
        ]
        self.controller = self.run.spawn(argv, log_path + ".out", "controller")

        def listening() -> bool:
            if self.controller.poll() is not None:
                raise FabricError(
                    f"controller exited with {self.controller.returncode}; "
                    f"see {log_path} and {log_path}.out"
                )
            with socket.socket() as s:
                s.settimeout(0.2)
                return s.connect_ex(("127.0.0.1", self.controller_port)) == 0

        wait_for(
            listening,
            CONTROLLER_LISTEN_TIMEOUT_S,
            f"the controller to listen on 127.0.0.1:{self.controller_port}",
            logs=self.run.log_dir,
        )

    def kill_switch(self, name: str) -> None:
        """Crash a switch: it stops at once (SIGKILL, or a crash command when it
        shares a process with other switches) and its ports go dark.

        A crashed hardware switch takes its links down with it, so its
        neighbours see carrier loss and fail over at once.
        """
        self.switch(name).crash()
        self._mark_faulted(name)
        for node, intf in self._switch_ends(name):
            self._switch_link_state(node, intf, "down")

    def restart_switch(self, name: str) -> None:
        """Start a crashed switch again: empty tables until the controller resynchronises it."""
        sw = self.switch(name)
        if sw.running():
            raise FabricError(f"switch {name} is still running")
        for node, intf in self._switch_ends(name):
            self._switch_link_state(node, intf, "up")
        sw.start([])
        sw.wait_ready()

    def _switch_intfs(self, name: str) -> list[str]:
        return [data["intfs"][name] for _, _, data in self.graph.edges(name, data=True)]

    def _switch_ends(self, name: str) -> list[tuple[str, str]]:
        """(node, interface) of switch `name`'s ports, and of the far end of each
        link to another server: a tunnel has no carrier to lose when its peer dies."""
        ends = []
        for u, v, data in self.graph.edges(name, data=True):
            peer = v if u == name else u
            ends.append((name, data["intfs"][name]))
            if self.server_of(peer) != self.server_of(name):
                ends.append((peer, data["intfs"][peer]))
        return ends

    def _mark_faulted(self, u: str, v: str | None = None) -> None:
        """Links between servers that a fault takes down (u-v, or every link of switch
        u): the frames they lose then are the fault's, and the tunnels' check of the
        report leaves them out (emu.scenario add_servers)."""
        if self.cluster is None:
            return
        links = [(u, v)] if v is not None else list(self.graph.edges(u))
        for a, b in links:
            if self.server_of(a) != self.server_of(b):
                self.cluster.faulted.update({f"{a}-{b}", f"{b}-{a}"})

    def _switch_link_state(self, node: str, intf: str, state: str) -> None:
        """`ip link set INTF STATE` of a switch port, on the server the switch runs on."""
        argv = ["ip", "link", "set", "dev", intf, state]
        if self.cluster is None:
            subprocess.run(argv, check=True)
        else:
            from emu.cluster import mininet_name

            self.cluster.run_on(mininet_name(self.server_of(node)), argv)

    def servers_report(self) -> dict:
        """Which node runs where, and what crossed each tunnel (device counters at both
        ends); {} for a fabric on one machine."""
        if self.cluster is None:
            return {}
        kind = self.graph.nodes
        on = {s: self.placement.nodes_on(s) for s in self.servers}
        return {
            "servers": self.servers,
            "tunnel_kind": self.cluster.tunnel_kind,
            "switches": {s: [n for n in on[s] if kind[n]["kind"] == "switch"] for s in on},
            "hosts": {s: [n for n in on[s] if kind[n]["kind"] != "switch"] for s in on},
            "tunnels": self.cluster.tunnel_counters(),
            "underlay_rtt": self.cluster.underlay_rtt(),
            # The slowest link a tunnel carries: its frame time bounds the delay a
            # tunnel may add unnoticed (emu.scenario add_servers).
            "tunnel_link_rates_bps": {
                f"{u}-{v}": d["rate_bps"]
                for u, v in self.placement.cut
                for d in [self.graph.edges[u, v]]
            },
        }

    def kill_controller(self) -> None:
        """Crash the controller (SIGKILL); switches keep forwarding with their flows."""
        if self.controller is None or self.controller.poll() is not None:
            raise FabricError("the controller is not running")
        self.controller.kill()
        self.controller.wait()
        self.run.forget_pid(self.controller.pid)

    def start(self, workload: str, **options: Any):
        """Start a workload in the background; returns a job with `wait()`.

        Workloads: "ping" (src, dst, interval_s, duration_s) -> emu.traffic.ping.PingJob,
        whose `wait()` gives a PingResult; "iperf" (src, dst, duration_s, port, udp,
        bitrate, tos, ...) -> emu.traffic.iperf.Job, whose `wait()` gives an IperfResult
        (iperf3's JSON in its `raw`).
        """
        if workload == "ping":
            return PingJob(self, **options)
        if workload == "iperf":
            return iperf.Job(self, **options)
        raise FabricError(f"unknown workload {workload!r}; known: ping, iperf")

    @property
    def faults(self):
        """The fault API on this fabric (emu.faults.Faults); NIC faults act on `nics`."""
        if self._faults is None:
            self._faults = Faults(self)
        return self._faults

    def restart_controller(self) -> None:
        """Stop the controller and start a fresh one on the same port.

        Switches keep forwarding with their flows while it is away, reconnect
        on their own, and the new controller resynchronises their tables.
        """
        if self.controller.poll() is None:
            stop_child(self.controller, grace_s=5)
            self.run.forget_pid(self.controller.pid)
        try:
            os.unlink(self.status_path)
        except FileNotFoundError:
            pass
        self._start_controller(port=self.controller_port)

    def controller_status(self) -> dict:
        """The controller's last published view (see controllers/routing.py)."""
        try:
            with open(self.status_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def wait_converged(self, timeout_s: float | None = None) -> float:
        """Wait until the controller knows every switch, link and host and installed routes.

        Hosts are found from their ARP: each host announces itself once (an
        unsolicited ARP), and again while it is still unknown.
        Returns the seconds from start to convergence.
        """
        timeout_s = timeout_s or self.converge_timeout_s
        counts = fabric_mod.expected_counts(self.graph)
        announced_at: dict[str, float] = {}

        def converged() -> bool:
            st = self.controller_status()
            if (
                len(st.get("links", [])) >= 2 * counts["switch_links"]
                and len(st.get("switches", [])) >= counts["switches"]
            ):
                known = {h["ip"] for h in st.get("hosts", [])}
                now = time.monotonic()
                for h in fabric_mod.hosts(self.graph):
                    for port in fabric_mod.host_ports(self.graph, h):
                        if port.ip not in known and now - announced_at.get(port.intf, 0) > 2.0:
                            announced_at[port.intf] = now
                            self.announce(h, port.kind)
            return bool(st.get("converged"))

        def describe() -> str:
            st = self.controller_status()
            return (
                f"routing to converge (controller sees {len(st.get('switches', []))}/"
                f"{counts['switches']} switches, {len(st.get('links', []))}/"
                f"{2 * counts['switch_links']} directed links, "
                f"{len(st.get('hosts', []))}/{counts['host_addresses']} host addresses)"
            )

        try:
            wait_for(converged, timeout_s, "routing", interval_s=0.2)
        except FabricError:
            raise FabricError(
                f"timed out after {timeout_s:.0f} s waiting for {describe()}; "
                f"logs in {self.run.log_dir}"
            ) from None
        self.converged_after_s = time.monotonic() - self.started_at
        return self.converged_after_s

    def wait_routes_installed(self, timeout_s: float = 30.0) -> None:
        """Wait until the controller's routes for the topology it sees now are acknowledged.

        Unlike `wait_converged`, this does not expect every link of the graph: after
        a failure that is not repaired, the fabric is settled when routing is.
        """

        def settled() -> bool:
            st = self.controller_status()
            return bool(st) and st.get("installed_version") == st.get("topology_version")

        wait_for(
            settled,
            timeout_s,
            "the controller to install routes for the current topology",
            logs=self.run.log_dir,
        )

    def announce(self, host: str, port: str = "nic") -> None:
        """Make `host` send an unsolicited ARP so that the controller learns where it is.

        `port` "nvlink": from a GPU's NVLink port, which its NVSwitch learns.
        """
        where = fabric_mod.host_port(self.graph, host, port)
        self.popen(
            host,
            ["arping", "-q", "-U", "-c", "1", "-I", where.intf, where.ip],
            register=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    # ----- driving hosts and switches ---------------------------------------

    def host(self, name: str):
        try:
            return self.net[name]
        except KeyError:
            raise FabricError(
                f"unknown node {name!r}; hosts are {', '.join(fabric_mod.hosts(self.graph))}"
            ) from None

    def switch(self, name: str):
        node = self.host(name)
        if name not in self.graph or self.graph.nodes[name]["kind"] != "switch":
            raise FabricError(f"{name!r} is not a switch")
        return node

    def popen(self, host: str, argv: list[str], register: bool = True, **kwargs: Any):
        """Start `argv` in `host`'s namespace; registered so teardown stops it."""
        node = self.host(host)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = node.popen(argv, **kwargs)
        if register:
            self.run.add_pid(proc.pid, f"proc {host} {argv[0]}")
        return proc

    def stop_proc(self, proc: subprocess.Popen, timeout_s: float = 3.0) -> None:
        """Stop a process started with `popen` or `popen_root` (TERM, then KILL) and
        forget it. One on another server is ended by its guard first (its input
        ends), so that it finishes its output (a capture's last packets) before
        its ssh goes."""
        if self.cluster is not None and self.cluster.end_input(proc):
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        stop_child(proc, grace_s=timeout_s)
        self.run.forget_pid(proc.pid)

    def popen_root(self, argv: list[str], server: str = "local", **kwargs: Any) -> subprocess.Popen:
        """Start `argv` in the root namespace of `server` (e.g. tcpdump on a switch
        port: `switch_server` says where its switch runs); registered."""
        if server == "local" or self.cluster is None:
            kwargs.setdefault("stdin", subprocess.DEVNULL)
            proc = subprocess.Popen(argv, **kwargs)
        else:
            kwargs.pop("stdin", None)
            proc = self.cluster.guarded_popen(server, argv, **kwargs)
        self.run.add_pid(proc.pid, f"proc root {argv[0]}")
        return proc

    def switch_server(self, intf: str) -> str:
        """The server of the switch whose port `intf` is ("local": this machine)."""
        for _, _, data in self.graph.edges(data=True):
            for node, name in data["intfs"].items():
                if name == intf:
                    return self.server_of(node)
        raise FabricError(f"no interface {intf!r} in the fabric")

    def host_run(
        self, host: str, argv: list[str], timeout_s: float = 30.0, check: bool = False
    ) -> subprocess.CompletedProcess:
        """Run `argv` in `host` and wait for it (bounded by `timeout_s`)."""
        proc = self.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise FabricError(
                f"{host}: {' '.join(argv)} did not finish within {timeout_s} s"
            ) from None
        self.run.forget_pid(proc.pid)
        result = subprocess.CompletedProcess(
            argv, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        )
        if check and result.returncode != 0:
            raise FabricError(f"{host}: {' '.join(argv)} failed: {result.stderr.strip()}")
        return result

    def _set_tcp_congestion(self, host: str) -> None:
        """`host`'s kernel uses `host_tcp_congestion` (a per-namespace sysctl)."""
        name = self.host_tcp_congestion
        res = self.host_run(host, ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={name}"])
        if res.returncode != 0:
            raise FabricError(
                f"host_tcp_congestion={name!r}: {host}'s kernel refused it "
                f"({res.stderr.strip()}); it has: {', '.join(tcp_congestion_controls())}"
            )

    def set_host_tx_rate(self, host: str, rate_bps: float | None = None) -> None:
        """Pace what `host`'s kernel sends at `rate_bps` (None: as the fabric was built).

        A token bucket (tc tbf) with a burst of two frames and a 16-frame
        queue: a NIC, not a deep buffer. None restores the fabric's own
        setting: the link rate with `host_nic_pacing`, no qdisc without.
        """
        link = self.graph.edges[host, self.graph.nodes[host]["leaf"]]  # the NIC's
        intf = link["intfs"][host]
        if rate_bps is None and not self.host_nic_pacing:
            res = self.host_run(host, ["tc", "qdisc", "del", "dev", intf, "root"])
            if (
                res.returncode != 0
                and "No such file" not in res.stderr
                and "Cannot delete qdisc with handle of zero" not in res.stderr
            ):
                raise FabricError(
                    f"{host}: removing the qdisc of {intf} failed: {res.stderr.strip()}"
                )
            return
        rate = int(rate_bps if rate_bps is not None else link["rate_bps"])
        self.host_run(
            host,
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                intf,
                "root",
                "tbf",
                "rate",
                f"{rate}bit",
                "burst",
                str(2 * HOST_NIC_FRAME_BYTES),
                "limit",
                str(16 * HOST_NIC_FRAME_BYTES),
            ],
            check=True,
        )

    def ping(
        self,
        src: str,
        dst: str,
        count: int = 1,
        timeout_s: float = 1.0,
        interval_s: float = 0.2,
        port: str = "nic",
    ) -> tuple[int, int]:
        """Ping from `src` to `dst`'s `port` address ("nvlink": its NVLink port,
        which `src`'s kernel reaches out of its own); returns (sent, received)."""
        ip = fabric_mod.host_port(self.graph, dst, port).ip
        argv = [
            "ping",
            "-n",
            "-q",
            "-c",
            str(count),
            "-W",
            str(timeout_s),
            "-i",
            str(interval_s),
            ip,
        ]
        res = self.host_run(src, argv, timeout_s=count * (interval_s + timeout_s) + 5)
        for line in res.stdout.splitlines():
            if "packets transmitted" in line:
                parts = line.split(",")
                return int(parts[0].split()[0]), int(parts[1].split()[0])
        return count, 0

    def unreachable(self, pairs) -> int:
        """How many (src, dst) pairs get no reply to two quick pings (after a failure)."""
        return sum(
            1 for s, d in pairs if self.ping(s, d, count=2, interval_s=0.05, timeout_s=1.0)[1] == 0
        )

    def agg_call(self, cmd: str, **args: Any) -> Any:
        """A request to the aggregation manager (controllers.aggregation must be among the apps)."""
        if "controllers.aggregation" not in self.apps:
            raise FabricError(
                "the aggregation manager is not running: start the fabric with "
                "apps=(..., 'controllers.aggregation')"
            )
        return mgmt.call(self.agg_socket_path, cmd, **args)

    def switch_call(self, name: str, cmd: str, **args: Any) -> Any:
        sw = self.switch(name)
        return mgmt.call(sw.mgmt_path, cmd, **args)

    def port_stats(self, switch: str) -> dict[int, answers.PortStats]:
        """`switch`'s ports by number, typed (emu/answers.py)."""
        return {
            p.port_no: p for p in map(answers.PortStats.decode, self.switch_call(switch, "ports"))
        }

    def counters(self, switch: str) -> answers.SwitchCounters:
        """`switch`'s buffer, queue, PFC and watchdog counters, typed (emu/answers.py)."""
        return answers.SwitchCounters.decode(self.switch_call(switch, "counters"))

    def queues(self, switch: str) -> answers.QueueSnapshot:
        """`switch`'s queue depths and PFC state now, typed (emu/answers.py)."""
        return answers.QueueSnapshot.decode(self.switch_call(switch, "queues"))

    def live_ports(self, switch: str) -> dict[int, answers.LivePort]:
        """`switch`'s ports as the live view reads them, by number (emu/answers.py)."""
        decoded = map(answers.LivePort.decode, self.switch_call(switch, "live")["ports"])
        return {p.port_no: p for p in decoded}

    def telemetry(self, switch: str, since: float = 0.0) -> list[answers.TelemetryRow]:
        """`switch`'s per-port samples from unix time `since`, typed (emu/answers.py)."""
        rows = self.switch_call(switch, "telemetry", since=since)
        return [answers.TelemetryRow.decode(r) for r in rows]

    def watchdog(self, switch: str) -> answers.WatchdogReport:
        """`switch`'s PFC watchdog: settings, events, storms now (emu/answers.py)."""
        return answers.WatchdogReport.decode(self.switch_call(switch, "watchdog"))

    def flows(self, switch: str) -> list[answers.FlowStats]:
        """`switch`'s flow entries (emu/answers.py)."""
        return [answers.FlowStats.decode(f) for f in self.switch_call(switch, "flows")]

    def groups(self, switch: str) -> dict[int, answers.GroupStats]:
        """`switch`'s groups by id (emu/answers.py)."""
        decoded = map(answers.GroupStats.decode, self.switch_call(switch, "groups"))
        return {g.group_id: g for g in decoded}

    def ofctl(self, switch: str, *args: str) -> str:
        """Run `ovs-ofctl -O OpenFlow13 ARGS[0] <switch> ARGS[1:]`; its output.

        What a lab or a failure test uses to program one switch by hand beside
        the controller: `fab.ofctl("leaf1", "add-meter", "meter=1,kbps,bands=type=drop,rate=2000")`.

        Raises:
            FabricError: unknown switch, ovs-ofctl missing, or it failed (its stderr).
        """
        host, port = self.switch_call(switch, "info")["of_listen"]
        try:
            return ofctl.run((host, port), args).stdout
        except ofctl.OfctlError as exc:
            raise FabricError(f"{switch}: {exc}") from exc

    def trace_path(
        self, src: str, dst: str, proto: str = "tcp", sport: int = 49152, dport: int = 5201
    ) -> list[str]:
        """The nodes a packet src -> dst (5-tuple) crosses now, ECMP hash and all.

        Each switch traces the frame through its own tables without touching
        counters or caches (emu/trace.py). FabricError names a bad endpoint,
        or the switch where the packet would not go on along one path.
        """

        def ask(switch: str, in_port: int, frame_hex: str) -> Any:
            return self.switch_call(switch, "trace", in_port=in_port, frame=frame_hex)

        try:
            return trace.trace_path(self.graph, ask, src, dst, proto, sport, dport)
        except trace.TraceError as exc:
            raise FabricError(str(exc)) from None

    def reseed(self, fabric_seed: int) -> None:
        """Give every switch the SELECT hash seed it would have had with `seed=fabric_seed`.

        Lets one running fabric repeat an experiment over several ECMP hash
        seeds without being rebuilt.
        """
        for name in fabric_mod.switches(self.graph):
            self.switch_call(name, "set_hash_seed", seed=switch_seed(fabric_seed, name))
        self.seed = fabric_seed

    def set_link(self, u: str, v: str, up: bool) -> None:
        """Take the link u-v down or up at both ends, as a pulled cable would."""
        if not self.graph.has_edge(u, v):
            raise FabricError(f"no link between {u!r} and {v!r}")
        state = "up" if up else "down"
        if not up:
            self._mark_faulted(u, v)
        for node, intf in self.graph.edges[u, v]["intfs"].items():
            if self.graph.nodes[node]["kind"] == "switch":
                self._switch_link_state(node, intf, state)
            else:
                self.host_run(node, ["ip", "link", "set", "dev", intf, state], check=True)

    def log_dir(self) -> str:
        return self.run.log_dir if self.run else ""

    def reset_fidelity(self) -> None:
        """Start every switch's and NIC agent's fidelity window now (emu/fidelity.py):
        what a test measures next is judged alone (emu.pytest_plugin.xfail_if_unfaithful).
        The record this fabric collects as it closes then covers the same window."""
        self.host_nic_drops_at_reset = self.host_nic_drops()
        telemetry.reset_fidelity(self)

    def host_nic_drops(self) -> dict[str, int]:
        """Frames of its own traffic each host's NIC token bucket has dropped
        (`host_nic_pacing`; `set_host_tx_rate`), by host; {} without pacing.

        A real NIC holds what its host sends (the kernel's qdisc queues 1000
        frames, `txqueuelen`); emu's bucket queues 16 and drops the rest
        (docs/performance.md, "The host NIC's queue"): a drop there is the
        emulator's, not the network's.
        """
        if not self.host_nic_pacing:
            return {}
        drops = {}
        for host in fabric_mod.hosts(self.graph):
            intf = self.graph.edges[host, self.graph.nodes[host]["leaf"]]["intfs"][host]
            out = self.host_run(host, ["tc", "-s", "qdisc", "show", "dev", intf]).stdout
            found = re.search(r"qdisc tbf .*?dropped (\d+)", out, re.S)
            drops[host] = int(found.group(1)) if found else 0
        return drops


def tcp_congestion_controls() -> list[str]:
    """The TCP congestion controls this kernel has, or can load as a module."""
    have = set(Path(TCP_AVAILABLE).read_text().split()) if Path(TCP_AVAILABLE).exists() else set()
    modules = Path("/lib/modules", os.uname().release, "kernel/net/ipv4")
    if modules.is_dir():
        have |= {f.name.split(".")[0][len("tcp_") :] for f in modules.glob("tcp_*.ko*")}
    return sorted(have - {"diag"})


def check_tcp_congestion(name: str) -> None:
    """Raise ValueError naming `name` unless this kernel has or can load it."""
    have = tcp_congestion_controls()
    if name not in have:
        raise ValueError(
            f"this kernel has no TCP congestion control named {name!r} "
            f"(it has: {', '.join(have) or 'none listed'})"
        )


def switch_seed(fabric_seed: int, name: str) -> int:
    """The SELECT hash seed of switch `name` in a fabric seeded with `fabric_seed`."""
    return zlib.crc32(f"{fabric_seed}:{name}".encode())


class _SeededSwitch:
    """Mininet calls `switch(name, **params)`; this adds a per-switch hash seed."""

    def __new__(cls, switch_cls, name, fabric_seed=0, **params):
        seed = switch_seed(fabric_seed, name)
        return switch_cls(name, seed=seed, **params)


def out_path(path: str | None) -> Path | None:
    return Path(path) if path else None

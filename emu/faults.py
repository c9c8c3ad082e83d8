"""Failure injection: one API for scenarios, tests and `emu ctl`.

Owns the vocabulary of faults and how each reaches the fabric: through a
switch's or a NIC agent's management socket, or through the fabric's link
control. Every injected fault is an event (`Faults.events`) that scenarios
put in their report, stamped with the moment the fault was injected (its
action began: the scheduled moment for a fault given `at=`), not the moment
it was logged: ``wall`` is that moment's unix time and ``t`` its seconds since
this `Faults` was made. Unknown nodes and bad values are errors that name
them, raised by the call, before anything is scheduled.

Faults here: link down/up/flap, lossy link, switch kill/restart, controller
kill/restart, stuck NIC (stops draining, sends PAUSE continuously), slow
receiver (drains at a given rate, so its NIC sends PAUSE), PFC watchdog on/off
or its action, ECN thresholds changed. A flow put on the wrong class is a
workload property (e.g. iperf3 with `tos=0x68`, see emu/traffic/iperf.py).
Every fault takes `at=` (seconds from the call; None or 0: now) to happen
later, on a timer that the fabric cancels when it stops.

NIC faults (stuck NIC, slow receiver, straggler) act on a host's NIC agent
(emu/host/agent.py), one of the fabric's (`fab.nics`, which the fabric owns):
a host without one gets it on the call, as `emu.traffic.rdma.fabric_nics`
starts them for workloads, so that a later workload or fault finds the same
agents.
"""

from __future__ import annotations

import heapq
import math
import re
import threading
import time
from typing import Any, Callable

from emu import fabric as fabric_mod
from emu import mgmt


class FaultError(ValueError):
    """A fault names something that is not in the fabric, or a bad value."""


def _set_nic(nic, **change: Any) -> None:
    """Change a NIC agent's settings; its answer (its whole state) is not the event's."""
    nic.call("set", **change)


#: A link fault written as text (`emu run training-step --fault ...`), parsed by
#: `parse_link_fault` and run by `scripted_link_fault`.
LINK_FAULT_SYNTAX = "link A-B down|flap at Ts [every Ps] [count N]"
_LINK_FAULT_RE = re.compile(
    r"^link (\S+)-(\S+) (down|flap) at ([0-9.]+)s?(?: every ([0-9.]+)s?)?(?: count ([0-9]+))?$"
)


def parse_link_fault(text: str, graph) -> tuple[str, str, str, float, float, int]:
    """(u, v, "down" or "flap", at_s, period_s, count) of LINK_FAULT_SYNTAX on `graph`.

    A flap's period is 0.6 s and its count 3 unless the text says.

    Raises:
        FaultError: not the syntax, an unknown node, no such link, a bad number.
    """
    m = _LINK_FAULT_RE.match(text.strip())
    if not m:
        raise FaultError(f"expected {LINK_FAULT_SYNTAX}")
    u, v, kind, at, period, count = m.groups()
    for node in (u, v):
        if node not in graph:
            raise FaultError(f"unknown node {node!r}")
    if not graph.has_edge(u, v):
        raise FaultError(f"no link {u}-{v} in the fabric")
    try:
        numbers = float(at), float(period or 0.6), int(count or 3)
    except ValueError:
        raise FaultError(f"expected {LINK_FAULT_SYNTAX}") from None
    if not (numbers[1] > 0 and numbers[2] >= 1):
        raise FaultError("a period > 0 and a count >= 1")
    return u, v, kind, *numbers


class Faults:
    """Faults on one running fabric (and, for NIC faults, its RDMA hosts).

    Args:
        fab: the running `emu.net.Fabric`.
        nics: the `emu.traffic.rdma.RdmaHosts` whose agents NIC faults go to;
            None (usual): the fabric's own (`fab.nics`: the first set a
            scenario started on the hosts' NIC ports, or the one a NIC fault
            or a collective run on the fabric as a whole starts on first use,
            `emu.traffic.rdma.fabric_nics`); later runs and NIC faults find
            the same agents (adding any host not yet among them).
    """

    def __init__(self, fab, nics=None) -> None:
        self.fab = fab
        self._nics = nics
        self._nic_stragglers: set[str] = set()
        self.t0 = time.time()
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._cond = threading.Condition()
        self._queue: list = []
        self._seq = 0
        self._worker: threading.Thread | None = None
        self._stopping = False

    def _later(
        self, at: float | None, action: Callable[[], None], since: float | None = None
    ) -> None:
        """Run `action` now, or `at` seconds from now (errors are kept in .errors).

        `since`: the `time.monotonic()` that `at` counts from, when it is not now
        (a NIC fault counts from its call, not from its agent's start).

        Scheduled faults run on one worker thread that lives until `cancel()`:
        processes it restarts (a switch, the controller) die with the thread that
        spawned them (PR_SET_PDEATHSIG), so that thread must outlive them.
        """
        check_at(at)
        if not at:
            action()
            return
        with self._cond:
            self._seq += 1
            start = time.monotonic() if since is None else since
            heapq.heappush(self._queue, (start + at, self._seq, action))
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="emu-faults", daemon=True)
                self._worker.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (
                    not self._queue or self._queue[0][0] > time.monotonic()
                ):
                    wait = self._queue[0][0] - time.monotonic() if self._queue else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                _, _, action = heapq.heappop(self._queue)
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - reported, not lost in a thread
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def cancel(self) -> None:
        """Drop faults not yet fired and wait for one that is firing."""
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._cond.notify()
        if self._worker is not None:
            self._worker.join(timeout=30)

    def _event(self, kind: str, wall: float | None = None, **info: Any) -> None:
        """Record a fault that happened at `wall` (unix time; None: now)."""
        wall = time.time() if wall is None else wall
        self.events.append({"t": round(wall - self.t0, 3), "wall": wall, "kind": kind, **info})

    def _inject(
        self,
        at: float | None,
        kind: str,
        do: Callable[[], Any],
        /,
        since: float | None = None,
        **info: Any,
    ) -> None:
        """Run `do` now or `at` seconds from now, as the event `kind` stamped when it began.

        `do` may return a dict of what it found out (added to the event); `info`
        is the event's (positional-only before it, so that it may hold any key).
        """

        def fire() -> None:
            began = time.time()
            found = do()
            self._event(kind, began, **info, **(found or {}))

        self._later(at, fire, since)

    def _switches(self, switch: str | None) -> list[str]:
        all_switches = fabric_mod.switches(self.fab.graph)
        if switch is None:
            return all_switches
        if switch not in all_switches:
            raise FaultError(f"unknown switch {switch!r}; switches: {', '.join(all_switches)}")
        return [switch]

    def _host(self, host: str) -> None:
        g = self.fab.graph
        if host not in g or g.nodes[host]["kind"] != "host":
            raise FaultError(f"unknown host {host!r}; hosts: {', '.join(fabric_mod.hosts(g))}")

    @property
    def nics(self):
        """The NIC agents NIC faults go to: the ones given, else the fabric's (None: none yet)."""
        return self._nics if self._nics is not None else getattr(self.fab, "nics", None)

    def _nic(self, host: str):
        """The NIC agent of `host`, started now if it is not running yet."""
        self._host(host)
        if self._nics is not None:
            self._nics.add([host])  # a no-op for a host it serves already
        elif self.nics is None or host not in self.nics.nics:
            # Imported here: emu.traffic.rdma imports emu.net, which imports this module.
            from emu.traffic import rdma

            rdma.fabric_nics(self.fab, [host])
        return self.nics.nics[host]

    # ----- links ------------------------------------------------------------

    def link_down(self, u: str, v: str, at: float | None = None) -> None:
        """Take the link u-v down at both ends (a pulled cable)."""
        self._check_link(u, v)
        self._later(at, lambda: self._link(u, v, up=False))

    def link_up(self, u: str, v: str, at: float | None = None) -> None:
        """Bring the link u-v back up."""
        self._check_link(u, v)
        self._later(at, lambda: self._link(u, v, up=True))

    def flap(self, u: str, v: str, period_s: float, count: int, at: float | None = None) -> None:
        """Take u-v down and up `count` times, half a period each, from `at` on."""
        self._check_link(u, v)
        check_at(at)
        if not period_s > 0 or not math.isfinite(period_s) or count < 1:
            raise FaultError(
                f"flap period_s={period_s}, count={count}: need period > 0, count >= 1"
            )
        start = at or 0.0
        for i in range(count):
            self._later(start + i * period_s + 1e-6, lambda: self._link(u, v, up=False))
            self._later(start + (i + 0.5) * period_s, lambda: self._link(u, v, up=True))
        self._event("flap_scheduled", link=f"{u}-{v}", period_s=period_s, count=count)

    def lossy_link(
        self,
        u: str,
        v: str,
        probability: float = 0.0,
        at: float | None = None,
        only_from: str | None = None,
        every: int | None = None,
    ) -> None:
        """Each frame crossing u-v (either way) is lost with `probability` (0: healthy).

        `only_from`: lose only the frames that this end (a switch, u or v) sends,
        as a failing transmitter or a one-way bad fibre does; None: both ways.
        `every`: instead, lose exactly every `every`-th RoCEv2 frame a switch end
        sends (other frames pass and do not count): the deterministic drop of
        Guo et al., SIGCOMM 2016 (one RoCEv2 packet in 256); None or 0: off.
        """
        self._check_link(u, v)
        if not 0.0 <= probability <= 1.0:
            raise FaultError(f"probability={probability}: must be within 0..1")
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every < 0
        ):
            raise FaultError(f"every={every!r}: must be a whole number >= 1 (0: off)")
        if every and probability:
            raise FaultError(f"probability={probability} and every={every}: give one of them")
        if only_from is not None and (
            only_from not in (u, v) or self.fab.graph.nodes[only_from]["kind"] != "switch"
        ):
            raise FaultError(f"only_from={only_from!r}: must be a switch end of the link {u}-{v}")

        def apply() -> dict:
            g = self.fab.graph
            for node in (u, v) if only_from is None else (only_from,):
                if g.nodes[node]["kind"] == "switch":
                    self.fab.switch_call(
                        node,
                        "set_port_loss",
                        port_no=g.edges[u, v]["ports"][node],
                        probability=probability,
                        every=every,
                    )
            extra = {} if only_from is None else {"only_from": only_from}
            if every:
                extra["every"] = every
            return extra

        self._inject(at, "lossy_link", apply, link=f"{u}-{v}", probability=probability)

    def _check_link(self, u: str, v: str) -> None:
        for node in (u, v):
            if node not in self.fab.graph:
                raise FaultError(f"unknown node {node!r} in link {u}-{v}")
        if not self.fab.graph.has_edge(u, v):
            raise FaultError(f"no link between {u!r} and {v!r}")

    def _link(self, u: str, v: str, up: bool) -> None:
        began = time.time()
        self.fab.set_link(u, v, up=up)
        self._event("link_up" if up else "link_down", began, link=f"{u}-{v}")

    # ----- processes --------------------------------------------------------

    def kill_switch(self, switch: str, at: float | None = None) -> None:
        """Kill a switch's process (a crash): its ports stop forwarding."""
        self._switches(switch)
        self._inject(at, "switch_killed", lambda: self.fab.kill_switch(switch), switch=switch)

    def restart_switch(self, switch: str, at: float | None = None) -> None:
        """Start a killed switch again; it reconnects to the controller."""
        self._switches(switch)
        self._inject(at, "switch_restarted", lambda: self.fab.restart_switch(switch), switch=switch)

    def kill_controller(self, at: float | None = None) -> None:
        """Kill the controller; switches keep forwarding with the flows they have."""
        self._inject(at, "controller_killed", self.fab.kill_controller)

    def restart_controller(self, at: float | None = None) -> None:
        """Start a fresh controller on the same port (after `kill_controller`, or instead of it)."""
        self._inject(at, "controller_restarted", self.fab.restart_controller)

    # ----- hosts ------------------------------------------------------------

    def slow_host(self, host: str, factor: float, at: float | None = None) -> None:
        """Host `host` sends and receives `factor` times slower than its link (1: healthy).

        A straggler for kernel traffic: its switch port paces towards it at
        rate / factor, and a token bucket on its own interface paces what it
        sends (`Fabric.set_host_tx_rate`; factor 1 restores the fabric's own).
        """
        self._slow_host(host, factor, at)

    def _slow_host(
        self, host: str, factor: float, at: float | None, since: float | None = None
    ) -> None:
        self._host(host)
        g = self.fab.graph
        check_at(at)
        if not 1.0 <= factor < float("inf"):
            raise FaultError(f"factor={factor}: must be >= 1 (1 = healthy, 4 = four times slower)")
        switch = g.nodes[host]["leaf"]  # the NIC's link (a GPU's NVLink port is another)
        link = g.edges[host, switch]
        rate_bps = link["rate_bps"] / factor

        def apply() -> None:
            self.fab.switch_call(
                switch,
                "set_port_rate",
                port_no=link["ports"][switch],
                rate_bps=None if factor == 1.0 else rate_bps,
            )
            self.fab.set_host_tx_rate(host, None if factor == 1.0 else rate_bps)

        self._inject(
            at, "slow_host", apply, since=since, host=host, factor=factor, rate_bps=rate_bps
        )

    def straggler(
        self,
        host: str,
        compute_factor: float = 1.0,
        nic_factor: float = 1.0,
        at: float | None = None,
    ) -> None:
        """Host `host` becomes a straggler rank (1 and 1: healthy again).

        `compute_factor`: the compute step of every collective it runs takes
        that many times longer (emu/host/collective.py). `nic_factor`: its
        NIC model paces at link rate / factor, and its link is slowed like
        `slow_host` for everything else. Starts the host's NIC agent if it
        is not running yet.
        """
        called = time.monotonic()
        self._host(host)
        check_at(at)
        for name, value in (("compute_factor", compute_factor), ("nic_factor", nic_factor)):
            if not 1.0 <= value < float("inf"):
                raise FaultError(f"{name}={value}: must be >= 1 (1 = healthy)")
        nic = self._nic(host)
        g = self.fab.graph
        rate_bps = g.edges[host, g.nodes[host]["leaf"]]["rate_bps"] / nic_factor

        self._inject(
            at,
            "straggler",
            lambda: _set_nic(nic, compute_factor=compute_factor, rate_bps=rate_bps),
            since=called,
            host=host,
            compute_factor=compute_factor,
            nic_factor=nic_factor,
        )
        # The link too (tc on the host, pacing at its switch port), and back when healed.
        if nic_factor != 1.0:
            self._nic_stragglers.add(host)
            self._slow_host(host, nic_factor, at, since=called)
        elif host in self._nic_stragglers:
            self._nic_stragglers.discard(host)
            self._slow_host(host, 1.0, at, since=called)

    # ----- NICs -------------------------------------------------------------

    def stuck_nic(self, host: str, stuck: bool = True, at: float | None = None) -> None:
        """The NIC stops draining and sends PAUSE at the refresh rate (a pause storm).

        `stuck=False` heals it. Starts the host's NIC agent if it is not running yet.
        """
        called = time.monotonic()
        check_at(at)
        nic = self._nic(host)
        self._inject(
            at,
            "stuck_nic" if stuck else "nic_recovered",
            lambda: _set_nic(nic, stuck=stuck),
            since=called,
            host=host,
        )

    def slow_receiver(
        self, host: str, drain_rate_bps: float | None, at: float | None = None
    ) -> None:
        """The host consumes at `drain_rate_bps` (None: at once), so its NIC pauses senders.

        Starts the host's NIC agent if it is not running yet.
        """
        called = time.monotonic()
        if drain_rate_bps is not None and not 0 <= drain_rate_bps < float("inf"):
            raise FaultError(f"drain_rate_bps={drain_rate_bps}: must be >= 0")
        check_at(at)
        nic = self._nic(host)
        change = (
            {"unlimited_drain": True}
            if drain_rate_bps is None
            else {"drain_rate_bps": drain_rate_bps}
        )
        self._inject(
            at,
            "slow_receiver",
            lambda: _set_nic(nic, **change),
            since=called,
            host=host,
            drain_rate_bps=drain_rate_bps,
        )

    # ----- switches ---------------------------------------------------------

    def watchdog(
        self,
        enabled: bool = True,
        switch: str | None = None,
        action: str | None = None,
        detection_s: float | None = None,
        at: float | None = None,
    ) -> None:
        """Turn the PFC watchdog on or off (or change its action) on one or every switch.

        `detection_s` is modelled time: the switch multiplies it by the
        fabric's time scale (emu/fabric/, "The time scale").
        """
        targets = self._switches(switch)
        self._inject(
            at,
            "watchdog",
            lambda: self._call_switches(
                targets, "set_watchdog", enabled=enabled, action=action, detection_s=detection_s
            ),
            enabled=enabled,
            switch=switch or "all",
            action=action,
        )

    def ecn_thresholds(
        self,
        kmin_bytes: int,
        kmax_bytes: int,
        pmax: float | None = None,
        switch: str | None = None,
        at: float | None = None,
    ) -> None:
        """Change ECN marking thresholds on one or every switch."""
        changes: dict[str, Any] = {"kmin_bytes": kmin_bytes, "kmax_bytes": kmax_bytes}
        if pmax is not None:
            changes["pmax"] = pmax
        targets = self._switches(switch)
        self._inject(
            at,
            "ecn_thresholds",
            lambda: self._call_switches(targets, "set_ecn", **changes),
            switch=switch or "all",
            **changes,
        )

    def _call_switches(self, switches: list[str], cmd: str, **args: Any) -> None:
        # The switch validates the values; its refusal is the fault's error.
        for sw in switches:
            try:
                self.fab.switch_call(sw, cmd, **args)
            except mgmt.MgmtError as exc:
                raise FaultError(str(exc)) from None


def check_at(at: Any) -> None:
    """`at=` is None or a finite number of seconds >= 0; else a FaultError naming it."""
    if at is None:
        return
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0:
        raise FaultError(f"at={at!r}: must be a number of seconds >= 0 from now (None: now)")


def scripted_link_fault(faults: Faults, text: str) -> Callable[[], None]:
    """Schedule the link fault `text` (LINK_FAULT_SYNTAX) on `faults` from now; returns
    what ends it.

    That waits until the fault has played out (the link taken down, a flap's
    last period over) and brings a downed link back, so that what runs next
    starts on the whole fabric.
    """
    from emu.registry import wait_for

    u, v, kind, at, period, count = parse_link_fault(text, faults.fab.graph)
    seen = len(faults.events)
    now = time.monotonic()
    if kind == "flap":
        faults.flap(u, v, period, count, at=at)
        over_at = now + at + period * count
    else:
        faults.link_down(u, v, at=at)
        over_at = now + at
    # Played out: its own events logged (each is logged once its action is done), the
    # link's down for a down fault, every up of a flap.
    last, times = ("link_down", 1) if kind == "down" else ("link_up", count)

    def played() -> bool:
        done = [e for e in faults.events[seen:] if e.get("link") == f"{u}-{v}"]
        return sum(e.get("kind") == last for e in done) >= times

    def end() -> None:
        limit = max(0.0, over_at - time.monotonic()) + 5
        wait_for(played, limit, f"the fault {text!r} to play out", interval_s=0.02)
        if kind == "down":
            faults.link_up(u, v)

    return end

"""Failure injection: one API for scenarios, tests and `emu ctl`.

Owns the vocabulary of faults and how each reaches the fabric: through a
switch's or a NIC agent's management socket, or through the fabric's link
control. Every injected fault is a timestamped event (`Faults.events`) that
scenarios put in their report. Unknown nodes and bad values are errors that
name them.

Faults here: link down/up, stuck NIC (stops draining, sends PAUSE
continuously), slow receiver (drains at a given rate, so its NIC sends PAUSE),
PFC watchdog on/off or its action, ECN thresholds changed. A flow put on the
wrong class is a workload property (e.g. iperf3 with `tos=0x68`, see
emu/traffic/iperf.py).
"""

from __future__ import annotations

import time
from typing import Any

from emu import fabric as fabric_mod
from emu import mgmt


class FaultError(ValueError):
    """A fault names something that is not in the fabric, or a bad value."""


class Faults:
    """Faults on one running fabric (and, for NIC faults, its RDMA hosts).

    Args:
        fab: the running `emu.net.Fabric`.
        nics: the `emu.traffic.rdma.RdmaHosts` whose agents NIC faults go to.
    """

    def __init__(self, fab, nics=None) -> None:
        self.fab = fab
        self.nics = nics
        self.t0 = time.time()
        self.events: list[dict[str, Any]] = []

    def _event(self, kind: str, **info: Any) -> None:
        self.events.append({"t": round(time.time() - self.t0, 3), "wall": time.time(),
                            "kind": kind, **info})

    def _switches(self, switch: str | None) -> list[str]:
        all_switches = fabric_mod.switches(self.fab.graph)
        if switch is None:
            return all_switches
        if switch not in all_switches:
            raise FaultError(f"unknown switch {switch!r}; switches: {', '.join(all_switches)}")
        return [switch]

    def _nic(self, host: str):
        if self.nics is None:
            raise FaultError("NIC faults need the RDMA host agents (emu.traffic.rdma)")
        if host not in self.nics.nics:
            raise FaultError(f"unknown host {host!r} (or no NIC agent on it); hosts with "
                             f"agents: {', '.join(sorted(self.nics.nics))}")
        return self.nics.nics[host]

    # ----- links ------------------------------------------------------------

    def link_down(self, u: str, v: str) -> None:
        self._link(u, v, up=False)

    def link_up(self, u: str, v: str) -> None:
        self._link(u, v, up=True)

    def _link(self, u: str, v: str, up: bool) -> None:
        for node in (u, v):
            if node not in self.fab.graph:
                raise FaultError(f"unknown node {node!r} in link {u}-{v}")
        if not self.fab.graph.has_edge(u, v):
            raise FaultError(f"no link between {u!r} and {v!r}")
        self.fab.set_link(u, v, up=up)
        self._event("link_up" if up else "link_down", link=f"{u}-{v}")

    # ----- NICs -------------------------------------------------------------

    def stuck_nic(self, host: str, stuck: bool = True) -> None:
        """The NIC stops draining and sends PAUSE at the refresh rate (a pause storm)."""
        self._nic(host).call("set", stuck=stuck)
        self._event("stuck_nic" if stuck else "nic_recovered", host=host)

    def slow_receiver(self, host: str, drain_rate_bps: float | None) -> None:
        """The host consumes at `drain_rate_bps` (None: at once), so its NIC pauses senders."""
        if drain_rate_bps is not None and drain_rate_bps < 0:
            raise FaultError(f"drain_rate_bps={drain_rate_bps}: must be >= 0")
        nic = self._nic(host)
        if drain_rate_bps is None:
            nic.call("set", unlimited_drain=True)
        else:
            nic.call("set", drain_rate_bps=drain_rate_bps)
        self._event("slow_receiver", host=host, drain_rate_bps=drain_rate_bps)

    # ----- switches ---------------------------------------------------------

    def watchdog(self, enabled: bool = True, switch: str | None = None,
                 action: str | None = None, detection_s: float | None = None) -> None:
        """Turn the PFC watchdog on or off (or change its action) on one or every switch."""
        for sw in self._switches(switch):
            try:
                self.fab.switch_call(sw, "set_watchdog", enabled=enabled, action=action,
                                     detection_s=detection_s)
            except mgmt.MgmtError as exc:
                raise FaultError(str(exc)) from None
        self._event("watchdog", enabled=enabled, switch=switch or "all", action=action)

    def ecn_thresholds(self, kmin_bytes: int, kmax_bytes: int, pmax: float | None = None,
                       switch: str | None = None) -> None:
        """Change ECN marking thresholds on one or every switch."""
        changes: dict[str, Any] = {"kmin_bytes": kmin_bytes, "kmax_bytes": kmax_bytes}
        if pmax is not None:
            changes["pmax"] = pmax
        for sw in self._switches(switch):
            try:
                self.fab.switch_call(sw, "set_ecn", **changes)
            except mgmt.MgmtError as exc:
                raise FaultError(str(exc)) from None
        self._event("ecn_thresholds", switch=switch or "all", **changes)

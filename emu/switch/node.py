"""The emu switch as a Mininet node.

Owns the life of one switch process: `EmuSwitch` is a Mininet `Switch`
subclass whose `start()` turns off the veth offloads that would hand us
oversized or checksum-less frames, builds the datapath argv (in overridable
methods, like p4-utils' P4Switch), spawns `python -m emu.switch.datapath`,
records its pid in the run registry and waits until its management socket
answers; `stop()` ends exactly that pid. The only emu module that imports Mininet.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from mininet.node import Switch

from emu import mgmt, realtime
from emu.registry import FabricError, Run, stop_child, wait_for

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 20.0
# Frames handed to AF_PACKET must be real Ethernet frames: no TSO/GSO/GRO
# super-frames, no partial checksums, VLAN tags in the frame rather than in
# metadata. Not every driver has every feature (disable_offloads copes).
OFFLOADS_OFF = ("rx", "tx", "sg", "tso", "gso", "gro", "lro", "rxvlan", "txvlan")


def disable_offloads(ifname: str, run_in=None) -> None:
    """Turn off the offloads that break a userspace datapath on `ifname`.

    One ethtool call for all of them (a fabric has hundreds of interfaces:
    nine calls each cost a k=4 fat-tree a second of its boot); if ethtool
    refuses that (an older ethtool stops at a feature the driver has fixed),
    one call per feature. `run_in(argv)` runs a command where the interface
    lives (a host's namespace) and returns its exit code; by default, in ours.
    """

    def run(argv: list[str]) -> int:
        if run_in is None:
            return subprocess.run(argv, capture_output=True, check=False).returncode
        return run_in(argv)

    every = [word for feature in OFFLOADS_OFF for word in (feature, "off")]
    if run(["ethtool", "-K", ifname, *every]) != 0:
        for feature in OFFLOADS_OFF:
            run(["ethtool", "-K", ifname, feature, "off"])


class EmuSwitch(Switch):
    """A Mininet switch backed by one emu datapath process.

    Args:
        name: switch name (also used for its interfaces).
        dpid: 16-hex-digit datapath id (always explicit; see DESIGN.md).
        run: the run registry that records the pid.
        controller_addrs: `host:port` of the controllers to connect to.
        port_rates: link rate per interface name, from the fabric graph.
        seed: SELECT hash seed for this switch.
    """

    def __init__(
        self,
        name: str,
        run: Run,
        port_rates: dict[str, int],
        controller_addrs: tuple[str, ...] = (),
        seed: int = 0,
        log_level: str = "INFO",
        qos: dict | None = None,
        **params,
    ) -> None:
        super().__init__(name, **params)
        self.run = run
        self.port_rates = port_rates
        self.controller_addrs = tuple(controller_addrs)
        self.seed = seed
        self.log_level = log_level
        self.qos = qos or {}
        self.proc: subprocess.Popen | None = None
        self.mgmt_path = os.path.join(run.sock_dir, f"{name}.sock")
        self.log_path = os.path.join(run.log_dir, f"{name}.log")

    # argv, in pieces a subclass can override
    def datapath_command(self) -> list[str]:
        return [sys.executable, "-m", "emu.switch.datapath"]

    def port_args(self) -> list[str]:
        args = []
        for intf in self.intfList():
            port_no = self.ports[intf]
            if intf.name == "lo" or port_no == 0:
                continue
            rate = self.port_rates.get(intf.name)
            if rate is None:
                raise ValueError(f"{self.name}: no link rate for interface {intf.name}")
            args += ["--port", f"{intf.name}:{port_no}:{rate}"]
        return args

    def build_argv(self) -> list[str]:
        argv = self.datapath_command() + [
            "--name",
            self.name,
            "--dpid",
            f"0x{self.dpid}",
            "--mgmt",
            self.mgmt_path,
            "--seed",
            str(self.seed),
            "--log-level",
            self.log_level,
            "--rt-priority",
            str(realtime.configured_priority()),
        ]
        for addr in self.controller_addrs:
            argv += ["--controller", addr]
        if self.qos:
            argv += ["--qos", json.dumps(self.qos)]
        if self.listenPort:
            argv += ["--of-listen", f"127.0.0.1:{self.listenPort}"]
        return argv + self.port_args()

    def start(self, controllers) -> None:  # noqa: N802 (Mininet's API)
        for intf in self.intfList():
            if intf.name != "lo":
                disable_offloads(intf.name)
        argv = self.build_argv()
        log.debug("%s: %s", self.name, " ".join(argv))
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                argv,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        self.run.add_pid(self.proc.pid, f"switch {self.name}")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict:
        """Wait until the process answers on its management socket; returns its `info`.

        Raises:
            FabricError: the process exited, or did not answer within `timeout_s`
                (the message names the socket and the log file).
        """

        def answered() -> dict | None:
            if self.proc is None or self.proc.poll() is not None:
                raise FabricError(f"switch {self.name} exited during start-up; see {self.log_path}")
            try:
                return mgmt.call(self.mgmt_path, "info", timeout_s=1.0)
            except mgmt.MgmtError:
                return None

        return wait_for(
            answered,
            timeout_s,
            f"switch {self.name} to answer on {self.mgmt_path}",
            interval_s=0.05,
            logs=self.log_path,
        )

    def call(self, cmd: str, **args):
        """Ask the running switch process (see emu/mgmt.py)."""
        return mgmt.call(self.mgmt_path, cmd, **args)

    def connected(self) -> bool:
        try:
            info = self.call("info", timeout_s=1.0)
        except mgmt.MgmtError:
            return False
        return any(c["connected"] for c in info["controllers"])

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's API)
        if self.proc is not None:
            stop_child(self.proc)
        super().stop(deleteIntfs)

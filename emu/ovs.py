"""Open vSwitch's userspace datapath as the reference switch: the commands that run our own.

Owns what it takes to run a private Open vSwitch beside emu, for the places
that hold emu's switch to account against OVS (`SwitchTestbed(switch="ovs")`,
bench/forwarding.py, bench/of_conformance.py, bench/scale.py): the daemons'
environment, their command lines and the `ovs-vsctl` arguments of a bridge.
The system's OVS service is never used: `ovsdb-server` and `ovs-vswitchd`
run from a directory of ours, and every bridge is a `netdev` (userspace)
datapath, because this kernel has no openvswitch module.

Pure: builds argument lists; whoever runs the processes records and stops
them (an `emu.registry.Run`, or the benches' manifest).

Two facts about that datapath shape these commands:
- `dpif-netdev` keeps a tap named `NETDEV_TAP` for as long as ovs-vswitchd
  runs, so only one userspace OVS can run on a machine; one that exists
  already belongs to somebody else and must not be touched.
- OVS applies a flow mod to its datapath flow cache asynchronously (its
  revalidators; the barrier reply does not wait for them), so a frame sent
  right after a barrier can take the previous flows' path. `FLOW_LIMIT_OFF`
  (ovs-vswitchd.conf.db(5), flow-limit) makes every frame meet the OpenFlow
  tables as they are, which is what a test of flows needs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

OVS_SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
NETDEV_TAP = "ovs-netdev"
FLOW_LIMIT_OFF = ("set", "Open_vSwitch", ".", "other_config:flow-limit=0")
PROGRAMS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl")


def missing() -> str:
    """What of Open vSwitch is not installed, as a sentence; "" if everything is."""
    absent = [p for p in PROGRAMS if shutil.which(p) is None]
    if not OVS_SCHEMA.exists():
        absent.append(str(OVS_SCHEMA))
    if absent:
        return (
            f"Open vSwitch is not installed ({', '.join(absent)} missing): "
            "scripts/bootstrap installs openvswitch-switch"
        )
    return ""


def env(directory: str | os.PathLike) -> dict[str, str]:
    """The environment under which OVS's programs find our daemons, not the system's."""
    d = os.fspath(directory)
    return dict(
        os.environ,
        OVS_RUNDIR=d,
        OVS_DBDIR=d,
        OVS_LOGDIR=d,
        OVS_SYSCONFDIR=d,
        OVS_PKGDATADIR=str(OVS_SCHEMA.parent),
    )


def db_socket(directory: str | os.PathLike) -> str:
    return f"unix:{os.fspath(directory)}/db.sock"


def create_db_argv(directory: str | os.PathLike) -> list[str]:
    return ["ovsdb-tool", "create", f"{os.fspath(directory)}/conf.db", str(OVS_SCHEMA)]


def ovsdb_server_argv(directory: str | os.PathLike) -> list[str]:
    d = os.fspath(directory)
    return [
        "ovsdb-server",
        f"{d}/conf.db",
        f"--remote=p{db_socket(d)}",
        f"--unixctl={d}/ovsdb-server.ctl",
        f"--pidfile={d}/ovsdb-server.pid",
        "-vconsole:off",
        "-vfile:info",
        f"--log-file={d}/ovsdb-server.log",
    ]


def vswitchd_argv(directory: str | os.PathLike) -> list[str]:
    d = os.fspath(directory)
    return [
        "ovs-vswitchd",
        db_socket(d),
        f"--unixctl={d}/ovs-vswitchd.ctl",
        f"--pidfile={d}/ovs-vswitchd.pid",
        "-vconsole:off",
        "-vfile:info",
        f"--log-file={d}/ovs-vswitchd.log",
    ]


def vsctl_argv(directory: str | os.PathLike, *args: str) -> list[str]:
    return ["ovs-vsctl", f"--db={db_socket(directory)}", "--timeout=10", *args]


def add_bridge_args(br: str, ports: list[tuple[str, int]], *settings: str) -> list[str]:
    """`ovs-vsctl` arguments of netdev bridge `br`: OpenFlow 1.3 only, fail_mode=secure.

    Args:
        br: bridge name (its internal port is a tap of that name).
        ports: (interface, OpenFlow port number) of every port.
        settings: more `column=value` settings of the bridge row, e.g.
            `other-config:datapath-id=0000000000000002`.
    """
    args = ["add-br", br, "--", "set", "bridge", br, "datapath_type=netdev"]
    args += ["fail_mode=secure", "protocols=OpenFlow13", *settings]
    for ifname, port_no in ports:
        args += ["--", "add-port", br, ifname]
        args += ["--", "set", "interface", ifname, f"ofport_request={port_no}"]
    return args


def bridge_mgmt(directory: str | os.PathLike, br: str) -> str:
    """The bridge's management target for ovs-ofctl (a Unix socket of ovs-vswitchd)."""
    return f"unix:{os.fspath(directory)}/{br}.mgmt"


def vswitchd_ready(directory: str | os.PathLike) -> bool:
    return Path(os.fspath(directory), "ovs-vswitchd.ctl").exists()


def db_ready(directory: str | os.PathLike) -> bool:
    return Path(os.fspath(directory), "db.sock").exists()

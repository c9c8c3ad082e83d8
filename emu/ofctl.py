"""ovs-ofctl against an emu switch: the one place that runs Open vSwitch's OpenFlow client.

Owns the command line `ovs-ofctl -O OpenFlow13 COMMAND tcp:HOST:PORT ARGS` for
a switch's passive OpenFlow listener (every emu switch has one, for tools),
its timeout, and the error that says what failed. Used by `emu ofctl`
(emu/cli.py), `Fabric.ofctl` (emu/net.py), `SwitchTestbed.ofctl`
(emu/testbed.py) and the forwarding bench (an emu switch's listener or an
OVS bridge's management socket), so a lab's command line, a failure test,
a conformance test and a benchmark program a switch the same way.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Mapping, Sequence

TIMEOUT_S = 20.0


class OfctlError(RuntimeError):
    """ovs-ofctl is missing, did not answer in time, or (when checked) failed."""


def run(
    addr: tuple[str, int] | str,
    args: Sequence[str],
    check: bool = True,
    timeout_s: float = TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ovs-ofctl's `args[0]` against the switch listening at `addr`.

    Args:
        addr: the switch's passive OpenFlow listener (host, port), or an
            ovs-ofctl target as it is ("unix:PATH", an OVS bridge's
            management socket).
        args: the ovs-ofctl command ("add-flow", "dump-flows", "add-meter" ...)
            and its arguments.
        check: raise when ovs-ofctl exits non-zero (its stderr in the message).
        env: the environment (our own OVS daemons' `emu.ovs.env`); None: ours.

    Raises:
        OfctlError: see the class; ValueError when no command is named.
    """
    if not args:
        raise ValueError("name the ovs-ofctl command, e.g. dump-flows")
    if shutil.which("ovs-ofctl") is None:
        raise OfctlError(
            "ovs-ofctl not found: install the Debian package openvswitch-common "
            "(scripts/bootstrap does)"
        )
    target = addr if isinstance(addr, str) else f"tcp:{addr[0]}:{addr[1]}"
    argv = ["ovs-ofctl", "-O", "OpenFlow13", args[0], target, *args[1:]]
    try:
        res = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=None if env is None else dict(env),
        )
    except subprocess.TimeoutExpired as exc:
        raise OfctlError(f"{' '.join(argv)}: no answer within {timeout_s:g} s") from exc
    if check and res.returncode != 0:
        raise OfctlError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
    return res

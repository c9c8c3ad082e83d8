"""ovs-ofctl against an emu switch: the one place that runs Open vSwitch's OpenFlow client.

Owns the command line `ovs-ofctl -O OpenFlow13 COMMAND tcp:HOST:PORT ARGS` for
a switch's passive OpenFlow listener (every emu switch has one, for tools),
its timeout, and the error that says what failed. Used by `emu ofctl`
(emu/cli.py), `Fabric.ofctl` (emu/net.py) and `SwitchTestbed.ofctl`
(emu/testbed.py), so a lab's command line, a failure test and a conformance
test program a switch the same way.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Sequence

TIMEOUT_S = 20.0


class OfctlError(RuntimeError):
    """ovs-ofctl is missing, did not answer in time, or (when checked) failed."""


def run(
    addr: tuple[str, int], args: Sequence[str], check: bool = True, timeout_s: float = TIMEOUT_S
) -> subprocess.CompletedProcess:
    """Run ovs-ofctl's `args[0]` against the switch listening at `addr`.

    Args:
        addr: the switch's passive OpenFlow listener (host, port).
        args: the ovs-ofctl command ("add-flow", "dump-flows", "add-meter" ...)
            and its arguments.
        check: raise when ovs-ofctl exits non-zero (its stderr in the message).

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
    host, port = addr
    argv = ["ovs-ofctl", "-O", "OpenFlow13", args[0], f"tcp:{host}:{port}", *args[1:]]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise OfctlError(f"{' '.join(argv)}: no answer within {timeout_s:g} s") from exc
    if check and res.returncode != 0:
        raise OfctlError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
    return res

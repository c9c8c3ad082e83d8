"""Kernel traffic with iperf3: TCP and UDP flows between fabric hosts.

Owns starting an iperf3 server and client pair in two hosts' namespaces and
returning iperf3's JSON result. Kernel traffic rides the lossy class unless a
TOS puts it elsewhere (`tos=0x68` is DSCP 26, the lossless RoCE class: what a
misconfigured storage flow looks like).
"""

from __future__ import annotations

import json
import subprocess

from emu.net import Fabric, wait_for

SERVER_READY_TIMEOUT_S = 10.0


def run(fab: Fabric, src: str, dst: str, seconds: float, port: int = 5201, **options) -> dict:
    """One iperf3 test src -> dst; returns iperf3's JSON result (with "error" on failure).

    Options: parallel (streams), udp (bool), bitrate ("18M"), tos (int), length (bytes).
    """
    return finish(fab, start(fab, src, dst, seconds, port, **options), timeout_s=seconds + 30)


def start(fab: Fabric, src: str, dst: str, seconds: float, port: int = 5201, parallel: int = 1,
          udp: bool = False, bitrate: str | None = None, tos: int | None = None,
          length: int | None = None) -> subprocess.Popen:
    """Start server and client; the client runs in the background until `finish`."""
    server = fab.popen(dst, ["iperf3", "-s", "-1", "-p", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _listening(fab, dst, port), SERVER_READY_TIMEOUT_S,
                 f"iperf3 server on {dst}:{port}", interval_s=0.05)
    except BaseException:
        fab.stop_proc(server)
        raise
    argv = ["iperf3", "-c", fab.graph.nodes[dst]["ip"], "-p", str(port), "-t", str(seconds),
            "-P", str(parallel), "-J", "--connect-timeout", "3000"]
    if udp:
        argv.append("-u")
    if bitrate:
        argv += ["-b", bitrate]
    if tos is not None:
        argv += ["--tos", str(tos)]
    if length:
        argv += ["-l", str(length)]
    client = fab.popen(src, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    client.server = server
    return client


def finish(fab: Fabric, client: subprocess.Popen, timeout_s: float = 60.0) -> dict:
    """Wait for a client from `start`; stop its server; return the JSON result."""
    try:
        out, _ = client.communicate(timeout=timeout_s)
    finally:
        fab.stop_proc(client)
        fab.stop_proc(client.server)
    return json.loads(out or '{"error": "no output"}')


def _listening(fab: Fabric, host: str, port: int) -> bool:
    res = fab.host_run(host, ["ss", "-Hltn", f"sport = :{port}"], timeout_s=5)
    return bool(res.stdout.strip())


class Job:
    """An iperf3 test in the background (`Fabric.start("iperf", ...)`); `wait()` gives its JSON."""

    def __init__(self, fab: Fabric, src: str, dst: str, seconds: float, port: int = 5201,
                 **options) -> None:
        self.fab = fab
        self.seconds = seconds
        self.client = start(fab, src, dst, seconds, port, **options)
        self._doc: dict | None = None

    def wait(self, timeout_s: float | None = None) -> dict:
        if self._doc is None:
            self._doc = finish(self.fab, self.client, timeout_s or self.seconds + 30)
        return self._doc

"""Kernel traffic with iperf3: TCP and UDP flows between fabric hosts.

Owns starting an iperf3 server and client pair in two hosts' namespaces and
returning iperf3's JSON result. Kernel traffic rides the lossy class unless a
TOS puts it elsewhere (`tos=0x68` is DSCP 26, the lossless RoCE class: what a
misconfigured storage flow looks like).
"""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

from emu.registry import wait_for

if TYPE_CHECKING:
    from emu.net import Fabric

SERVER_READY_TIMEOUT_S = 10.0


def run(fab: Fabric, src: str, dst: str, seconds: float, port: int = 5201, **options) -> dict:
    """One iperf3 test src -> dst; returns iperf3's JSON result (with "error" on failure).

    Options: parallel (streams), udp (bool), bitrate ("18M"), tos (int), length (bytes).
    """
    return finish(fab, start(fab, src, dst, seconds, port, **options), timeout_s=seconds + 30)


def start(
    fab: Fabric, src: str, dst: str, seconds: float, port: int = 5201, **options
) -> subprocess.Popen:
    """Start server and client; the client runs in the background until `finish`."""
    [client] = start_many(fab, [(src, dst)], seconds, first_port=port, **options)
    return client


def start_many(
    fab: Fabric,
    flows: list[tuple[str, str]],
    seconds: float,
    first_port: int = 5201,
    parallel: int = 1,
    udp: bool = False,
    bitrate: str | None = None,
    tos: int | None = None,
    length: int | None = None,
    omit_s: float | None = None,
    server_output: bool = False,
) -> list[subprocess.Popen]:
    """Start one iperf3 test per (src, dst), all servers first, then all clients together.

    Flows that start together share the fabric for the same window (a pattern
    of simultaneous flows, as in Hedera's experiments). `omit_s` leaves the
    first seconds (slow start, routing reacting) out of iperf3's totals.
    `server_output` adds the receiver's own intervals to the result
    (`received_mbps`): the sender's intervals count bytes written into its
    socket, which can pause for seconds while the socket's buffer drains, so
    only the receiver says when a flow moved no bytes. Finish each with `finish`.
    """
    servers = []
    clients: list[subprocess.Popen] = []
    try:
        for i, (_src, dst) in enumerate(flows):
            servers.append(
                fab.popen(
                    dst,
                    # -J: the server's intervals reach the client (--get-server-output)
                    # as JSON, not as text.
                    ["iperf3", "-s", "-1", "-J", "-p", str(first_port + i)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for i, (_src, dst) in enumerate(flows):
            wait_for(
                lambda dst=dst, i=i: _listening(fab, dst, first_port + i),
                SERVER_READY_TIMEOUT_S,
                f"iperf3 server on {dst}:{first_port + i}",
                interval_s=0.05,
            )
        for i, (src, dst) in enumerate(flows):
            argv = _client_argv(
                fab,
                dst,
                first_port + i,
                seconds,
                parallel,
                udp,
                bitrate,
                tos,
                length,
                omit_s,
                server_output,
            )
            client = fab.popen(
                src, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            client.server = servers[i]
            clients.append(client)
    except BaseException:
        for proc in clients + servers:
            fab.stop_proc(proc)
        raise
    return clients


def _client_argv(
    fab: Fabric,
    dst: str,
    port: int,
    seconds: float,
    parallel: int,
    udp: bool,
    bitrate: str | None,
    tos: int | None,
    length: int | None,
    omit_s: float | None,
    server_output: bool = False,
) -> list[str]:
    argv = [
        "iperf3",
        "-c",
        fab.graph.nodes[dst]["ip"],
        "-p",
        str(port),
        "-t",
        str(seconds),
        "-P",
        str(parallel),
        "-J",
        "--connect-timeout",
        "3000",
    ]
    if omit_s:
        argv += ["-O", str(omit_s)]
    if udp:
        argv.append("-u")
    if bitrate:
        argv += ["-b", bitrate]
    if tos is not None:
        argv += ["--tos", str(tos)]
    if length:
        argv += ["-l", str(length)]
    if server_output:
        argv.append("--get-server-output")
    return argv


def finish(fab: Fabric, client: subprocess.Popen, timeout_s: float = 60.0) -> dict:
    """Wait for a client from `start`; stop its server; return the JSON result."""
    try:
        out, _ = client.communicate(timeout=timeout_s)
    finally:
        fab.stop_proc(client)
        fab.stop_proc(client.server)
    return json.loads(out or '{"error": "no output"}')


def received_mbps(doc: dict) -> list[float]:
    """The receiver's Mbit/s in each of its intervals (needs `server_output=True`)."""
    server = doc.get("server_output_json")
    if not server:
        raise ValueError(
            "iperf3 result has no server_output_json: start it with server_output=True"
        )
    return [iv["sum"]["bits_per_second"] / 1e6 for iv in server.get("intervals", [])]


def _listening(fab: Fabric, host: str, port: int) -> bool:
    res = fab.host_run(host, ["ss", "-Hltn", f"sport = :{port}"], timeout_s=5)
    return bool(res.stdout.strip())


class Job:
    """An iperf3 test in the background (`Fabric.start("iperf", ...)`); `wait()` gives its JSON."""

    def __init__(
        self, fab: Fabric, src: str, dst: str, seconds: float, port: int = 5201, **options
    ) -> None:
        self.fab = fab
        self.seconds = seconds
        self.client = start(fab, src, dst, seconds, port, **options)
        self._doc: dict | None = None

    def wait(self, timeout_s: float | None = None) -> dict:
        if self._doc is None:
            self._doc = finish(self.fab, self.client, timeout_s or self.seconds + 30)
        return self._doc

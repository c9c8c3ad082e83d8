"""Kernel traffic with iperf3: TCP and UDP flows between fabric hosts.

Owns starting an iperf3 server and client pair in two hosts' namespaces and
what comes back. Kernel traffic rides the lossy class unless a TOS puts it
elsewhere (`tos=0x68` is DSCP 26, the lossless RoCE class: what a
misconfigured storage flow looks like).

Two layers: `Job` (what `Fabric.start("iperf", ...)` returns) and `measure`
give an `IperfResult`, the iperf workload's one result type, with iperf3's
JSON kept in `raw`; `run`, `start`, `start_many` and `finish` are the
building blocks that scenarios use, and return iperf3's JSON as it is. Every
workload's duration keyword is `duration_s` (`seconds=` is its old name, a
DeprecationWarning). `received_mbps`, `received_by_stream` and `tcp_mss` read
what measurements need from that JSON.
"""

from __future__ import annotations

import json
import math
import subprocess
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from emu.registry import wait_for

if TYPE_CHECKING:
    from emu.net import Fabric

SERVER_READY_TIMEOUT_S = 10.0
DEFAULT_DURATION_S = 5.0
# Linux's MSS on a 1500-byte MTU with TCP timestamps (1500 - IPv4 20 - TCP 20 - 12).
DEFAULT_TCP_MSS = 1448


def resolve_duration(
    duration_s: float | None, seconds: float | None, workload: str, default: float | None = None
) -> float:
    """The workload's duration from `duration_s`, or its old name `seconds` (with a warning).

    Raises:
        ValueError: both given, or not a finite number of seconds > 0.
    """
    if seconds is not None:
        if duration_s is not None:
            raise ValueError(f"{workload}: give duration_s, not also its old name seconds")
        warnings.warn(
            f"{workload}: seconds= is deprecated; use duration_s=", DeprecationWarning, stacklevel=3
        )
        duration_s = seconds
    if duration_s is None:
        duration_s = DEFAULT_DURATION_S if default is None else default
    if (
        isinstance(duration_s, bool)
        or not isinstance(duration_s, (int, float))
        or not (0 < duration_s < math.inf)
    ):
        raise ValueError(f"{workload}: duration_s={duration_s!r}: must be a number of seconds > 0")
    return float(duration_s)


@dataclass(frozen=True)
class IperfResult:
    """One iperf3 test's figures, with iperf3's JSON in `raw`.

    Attributes:
        src, dst: the hosts.
        duration_s: how long the test was asked to run.
        protocol: "tcp" or "udp".
        sent_bps, received_bps: the sender's and the receiver's mean rate (payload bits/s).
        sent_bytes, received_bytes: payload bytes.
        retransmits: TCP segments retransmitted (None for UDP).
        lost_percent: UDP datagrams lost (None for TCP).
        error: iperf3's error, or None when the test ran.
        raw: iperf3's JSON document.
    """

    src: str
    dst: str
    duration_s: float
    protocol: str
    sent_bps: float
    received_bps: float
    sent_bytes: int
    received_bytes: int
    retransmits: int | None
    lost_percent: float | None
    error: str | None
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def received_mbps(self) -> float:
        return self.received_bps / 1e6

    def receiver_intervals_mbps(self) -> list[float]:
        """The receiver's Mbit/s in each interval (needs `server_output=True`)."""
        return received_mbps(self.raw)

    @classmethod
    def from_json(cls, doc: dict, src: str, dst: str, duration_s: float) -> IperfResult:
        """The figures of iperf3's JSON `doc` (pure; a failed test gives zeros and its error)."""
        end = doc.get("end", {}) or {}
        udp = (doc.get("start", {}).get("test_start", {}) or {}).get("protocol") == "UDP"
        # UDP puts its totals in "sum"; TCP in "sum_sent" and "sum_received".
        sent = end.get("sum_sent") or end.get("sum") or {}
        received = end.get("sum_received") or end.get("sum") or {}
        error = doc.get("error")
        return cls(
            src=src,
            dst=dst,
            duration_s=duration_s,
            protocol="udp" if udp else "tcp",
            sent_bps=float(sent.get("bits_per_second", 0.0)),
            received_bps=float(received.get("bits_per_second", 0.0)),
            sent_bytes=int(sent.get("bytes", 0)),
            received_bytes=int(received.get("bytes", 0)),
            retransmits=None if udp else sent.get("retransmits"),
            lost_percent=(end.get("sum") or {}).get("lost_percent") if udp else None,
            error=None if error is None else str(error),
            raw=doc,
        )


def measure(
    fab: Fabric,
    src: str,
    dst: str,
    duration_s: float | None = None,
    port: int = 5201,
    *,
    seconds: float | None = None,
    **options,
) -> IperfResult:
    """One iperf3 test src -> dst, waited for; its IperfResult (options as `start_many`)."""
    return Job(fab, src, dst, duration_s, port, seconds=seconds, **options).wait()


def run(
    fab: Fabric,
    src: str,
    dst: str,
    duration_s: float | None = None,
    port: int = 5201,
    *,
    seconds: float | None = None,
    **options,
) -> dict:
    """One iperf3 test src -> dst; returns iperf3's JSON result (with "error" on failure).

    Options: parallel (streams), udp (bool), bitrate ("18M"), tos (int), length (bytes).
    """
    duration_s = resolve_duration(duration_s, seconds, "iperf")
    client = start(fab, src, dst, duration_s, port, **options)
    return finish(fab, client, timeout_s=duration_s + 30)


def start(
    fab: Fabric,
    src: str,
    dst: str,
    duration_s: float | None = None,
    port: int = 5201,
    *,
    seconds: float | None = None,
    **options,
) -> subprocess.Popen:
    """Start server and client; the client runs in the background until `finish`."""
    duration_s = resolve_duration(duration_s, seconds, "iperf")
    [client] = start_many(fab, [(src, dst)], duration_s, first_port=port, **options)
    return client


def start_many(
    fab: Fabric,
    flows: list[tuple[str, str]],
    duration_s: float | None = None,
    first_port: int = 5201,
    parallel: int = 1,
    udp: bool = False,
    bitrate: str | None = None,
    tos: int | None = None,
    length: int | None = None,
    omit_s: float | None = None,
    server_output: bool = False,
    congestion: str | None = None,
    *,
    seconds: float | None = None,
) -> list[subprocess.Popen]:
    """Start one iperf3 test per (src, dst), all servers first, then all clients together.

    Flows that start together share the fabric for the same window (a pattern
    of simultaneous flows, as in Hedera's experiments). `omit_s` leaves the
    first seconds (slow start, routing reacting) out of iperf3's totals.
    `server_output` adds the receiver's own intervals to the result
    (`received_mbps`): the sender's intervals count bytes written into its
    socket, which can pause for seconds while the socket's buffer drains, so
    only the receiver says when a flow moved no bytes. `congestion` names the
    senders' TCP congestion control (iperf3 -C; root may pick any the kernel
    has), else each host's default, which the machine decides. Finish each
    with `finish`.
    """
    duration_s = resolve_duration(duration_s, seconds, "iperf")
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
                duration_s,
                parallel,
                udp,
                bitrate,
                tos,
                length,
                omit_s,
                server_output,
                congestion,
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
    duration_s: float,
    parallel: int,
    udp: bool,
    bitrate: str | None,
    tos: int | None,
    length: int | None,
    omit_s: float | None,
    server_output: bool = False,
    congestion: str | None = None,
) -> list[str]:
    argv = [
        "iperf3",
        "-c",
        fab.graph.nodes[dst]["ip"],
        "-p",
        str(port),
        "-t",
        str(duration_s),
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
    if congestion:
        argv += ["-C", congestion]
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


def received_by_stream(doc: dict) -> dict[int, int]:
    """iperf3's streams: each one's client source port -> payload bytes the server received.

    The source port is what names a stream's 5-tuple (with the two hosts and
    the server's port), so that `Fabric.trace_path` can say which way it went.
    A stream whose socket the start section does not list is left out; a
    failed test gives {}.
    """
    port = {c["socket"]: c["local_port"] for c in doc.get("start", {}).get("connected", [])}
    return {
        port[st["receiver"]["socket"]]: int(st["receiver"]["bytes"])
        for st in doc.get("end", {}).get("streams", [])
        if st.get("receiver", {}).get("socket") in port
    }


def tcp_mss(doc: dict, default: int = DEFAULT_TCP_MSS) -> int:
    """The MSS iperf3's TCP test ran with (`tcp_mss_default`), else `default`."""
    return doc.get("start", {}).get("tcp_mss_default", default) or default


def _listening(fab: Fabric, host: str, port: int) -> bool:
    res = fab.host_run(host, ["ss", "-Hltn", f"sport = :{port}"], timeout_s=5)
    return bool(res.stdout.strip())


class Job:
    """An iperf3 test in the background (`Fabric.start("iperf", ...)`); `wait()` gives its result.

    Args:
        fab: the running fabric (emu.net.Fabric).
        src, dst: host names (client and server).
        duration_s: how long the test runs (the workloads' one duration keyword).
        port: the server's port.
        seconds: the old name of `duration_s` (a DeprecationWarning).
        **options: as `start_many`: parallel, udp, bitrate, tos, length, omit_s,
            server_output, congestion.

    Example:
        >>> job = Job(fab, "h1", "h2", duration_s=3)   # doctest: +SKIP
        >>> job.wait().received_bps > 0                # doctest: +SKIP
    """

    def __init__(
        self,
        fab: Fabric,
        src: str,
        dst: str,
        duration_s: float | None = None,
        port: int = 5201,
        *,
        seconds: float | None = None,
        **options,
    ) -> None:
        self.fab = fab
        self.src, self.dst = src, dst
        self.duration_s = resolve_duration(duration_s, seconds, "iperf")
        self.client = start(fab, src, dst, self.duration_s, port, **options)
        self._result: IperfResult | None = None

    def wait(self, timeout_s: float | None = None) -> IperfResult:
        """Wait for the test to finish; returns its IperfResult (iperf3's JSON in `.raw`)."""
        if self._result is None:
            doc = finish(self.fab, self.client, timeout_s or self.duration_s + 30)
            self._result = IperfResult.from_json(doc, self.src, self.dst, self.duration_s)
        return self._result

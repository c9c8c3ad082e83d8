"""Tests of the controller launcher as a real subprocess (no root needed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from emu.registry import FabricError, free_tcp_port, proc_start_time, wait_for

REPO = Path(__file__).resolve().parents[2]
OFPT_HELLO = 0
OFP13 = 0x04


def _launch(args: List[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "controllers.launch", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _connect(port: int, timeout_s: float) -> socket.socket:
    def attempt():
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=1.0)
        except OSError:
            return None

    try:
        return wait_for(
            attempt, timeout_s, f"the launcher to listen on port {port}", interval_s=0.05
        )
    except FabricError as exc:
        raise AssertionError(str(exc)) from None


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple]:
    port = free_tcp_port()
    status = tmp_path / "status.json"
    log = tmp_path / "ctl.log"
    proc = _launch(
        [
            "--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(port),
            "--status-file", str(status), "--log-file", str(log),
            "--expect-switches", "2", "--expect-links", "1", "--expect-hosts", "2",
            "controllers.routing",
        ]
    )  # fmt: skip
    try:
        yield proc, port, status, log
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=5)


def test_listens_speaks_hello_and_exits_on_sigterm(launcher: tuple) -> None:
    proc, port, status, log = launcher
    with _connect(port, timeout_s=15.0) as sock:
        sock.sendall(struct.pack("!BBHI", OFP13, OFPT_HELLO, 8, 1))
        version, msg_type, length, _xid = struct.unpack("!BBHI", _recv_exact(sock, 8))
        assert (version, msg_type) == (OFP13, OFPT_HELLO)
        _recv_exact(sock, length - 8)
    st = json.loads(status.read_text())
    assert st["converged"] is False  # 0 of 2 expected switches
    assert st["switches"] == [] and st["topology_version"] == 0
    assert st["expected"] == {"switches": 2, "links": 1, "hosts": 2}
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=5)
    assert time.monotonic() - start < 2.0
    assert rc == 0
    assert "signal 15" in log.read_text()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--status-file", "/tmp/x.json", "controllers.routing"], "--ofp-tcp-listen-port"),
        (
            [
                "--ofp-tcp-listen-port",
                "99999",
                "--status-file",
                "/tmp/x.json",
                "controllers.routing",
            ],
            "99999",
        ),
        (
            [
                "--ofp-tcp-listen-port",
                "6653",
                "--status-file",
                "/no/such/dir/x.json",
                "controllers.routing",
            ],
            "/no/such/dir",
        ),
        (
            [
                "--ofp-tcp-listen-port",
                "6653",
                "--status-file",
                "/tmp/x.json",
                "controllers.no_such_app",
            ],
            "no_such_app",
        ),
        (
            [
                "--ofp-tcp-listen-port",
                "6653",
                "--status-file",
                "/tmp/x.json",
                "--expect-hosts",
                "-1",
                "controllers.routing",
            ],
            "-1",
        ),
        (["--ofp-tcp-listen-port", "6653", "--status-file", "/tmp/x.json"], "APP"),
    ],
)
def test_bad_args_exit_2_without_traceback(args: List[str], needle: str) -> None:
    proc = _launch(args)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, err
    assert needle in err
    assert "Traceback" not in err + out


def test_port_in_use_is_a_bad_arg() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = _launch(
            [
                "--ofp-tcp-listen-port",
                str(port),
                "--status-file",
                "/tmp/x.json",
                "controllers.routing",
            ]
        )
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "cannot listen" in err and "Traceback" not in err + out


def test_dies_with_parent(tmp_path: Path) -> None:
    """The launcher's parent (a shell here) dies: PR_SET_PDEATHSIG ends the launcher."""
    port = free_tcp_port()
    pidfile = tmp_path / "pid"
    # sh starts the launcher in the background, records its pid, waits; we kill sh.
    script = (
        f"{sys.executable} -m controllers.launch --ofp-tcp-listen-port {port} "
        f"--status-file {tmp_path}/s.json --log-file {tmp_path}/l.log controllers.routing & "
        f"echo $! > {pidfile}; wait"
    )
    parent = subprocess.Popen(["sh", "-c", script], cwd=REPO)
    try:
        _connect(port, timeout_s=15.0).close()
        child = int(pidfile.read_text())
        parent.kill()
        parent.wait(timeout=5)
        # A zombie waiting for init to reap it counts as gone (proc_start_time is None).
        try:
            wait_for(lambda: proc_start_time(child) is None, 10, "the launcher to exit")
        except FabricError:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("launcher outlived its parent") from None
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()

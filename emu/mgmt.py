"""The management protocol: JSON lines on a Unix socket.

Owns the one protocol that switch and host processes serve and that emu.net,
emu.faults, emu.telemetry and the CLI use: a request is one JSON object
`{"cmd": NAME, ...args}` on one line, the answer one JSON object on one line,
`{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`.

The server side is sans-I/O friendly (`MgmtServer` is driven by the owning
process's event loop through `fileno()`/`on_readable()`); the client side is a
blocking call with a timeout.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
from typing import Any, Callable

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024


class MgmtError(RuntimeError):
    """A management call failed: no such socket, timeout, or the peer said no."""


def call(path: str, cmd: str, timeout_s: float = 5.0, **args: Any) -> Any:
    """Send one request to the process serving `path` and return its result.

    Raises:
        MgmtError: the socket is missing or refuses, the answer does not come
            within `timeout_s`, or the process answered with an error.
    """
    req = dict(args, cmd=cmd)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
            sock.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
        except (OSError, socket.timeout) as exc:
            raise MgmtError(f"{cmd} on {path}: {exc}") from exc
    if not buf:
        raise MgmtError(f"{cmd} on {path}: connection closed without an answer")
    answer = json.loads(buf)
    if not answer.get("ok"):
        raise MgmtError(f"{cmd} on {path}: {answer.get('error')}")
    return answer.get("result")


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = b""


class MgmtServer:
    """A non-blocking JSON-lines server that dispatches to `handlers[cmd](**args)`.

    The owner registers `listener` and every connection in `conns` with its
    selector and calls `accept()` / `on_readable(conn)` when they are readable.
    A handler that raises `ValueError`/`KeyError`/`MgmtError` answers with an
    error; the server keeps running.
    """

    def __init__(self, path: str, handlers: dict[str, Callable[..., Any]]) -> None:
        self.path = path
        self.handlers = handlers
        if os.path.exists(path):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self.listener.setblocking(False)

    def accept(self) -> _Conn | None:
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return None
        sock.setblocking(False)
        return _Conn(sock)

    def on_readable(self, conn: _Conn) -> bool:
        """Serve what `conn` sent; False when the connection is finished."""
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            return False
        conn.inbuf += data
        if len(conn.inbuf) > MAX_REQUEST_BYTES:
            self._answer(conn, {"ok": False, "error": "request too long"})
            return False
        while b"\n" in conn.inbuf:
            line, conn.inbuf = conn.inbuf.split(b"\n", 1)
            self._answer(conn, self._dispatch(line))
        return True

    def _dispatch(self, line: bytes) -> dict:
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
            cmd = req.pop("cmd")
        except (ValueError, KeyError) as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        handler = self.handlers.get(cmd)
        if handler is None:
            return {"ok": False, "error": f"unknown command {cmd!r}; known: {sorted(self.handlers)}"}
        try:
            return {"ok": True, "result": handler(**req)}
        except (ValueError, KeyError, TypeError, MgmtError) as exc:
            return {"ok": False, "error": f"{cmd}: {exc}"}

    def _answer(self, conn: _Conn, answer: dict) -> None:
        data = json.dumps(answer, default=str).encode() + b"\n"
        # Answers are small and the client waits for them; a blocking send
        # with a short timeout keeps the loop simple without risking a hang.
        conn.sock.settimeout(1.0)
        try:
            conn.sock.sendall(data)
        except OSError as exc:
            log.debug("mgmt answer lost: %s", exc)
        finally:
            conn.sock.setblocking(False)

    def serve(self, running: Callable[[], bool], poll_s: float = 0.5) -> None:
        """Serve on the calling thread while `running()` (for owners without an event loop)."""
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, None)
        try:
            while running():
                for key, _ in sel.select(poll_s):
                    if key.data is None:
                        conn = self.accept()
                        if conn:
                            sel.register(conn.sock, selectors.EVENT_READ, conn)
                    elif not self.on_readable(key.data):
                        sel.unregister(key.data.sock)
                        key.data.sock.close()
        finally:
            for key in list(sel.get_map().values()):
                if key.data is not None:
                    key.data.sock.close()
            sel.close()

    def close(self) -> None:
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

"""The management protocol: JSON lines on a Unix socket.

Owns the one protocol that switch and host processes serve and that emu.net,
emu.faults, emu.telemetry and the CLI use: a request is one JSON object
`{"cmd": NAME, ...args}` on one line, the answer one JSON object on one line,
`{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`.

The server side is sans-I/O friendly (`MgmtServer` is driven by the owning
process's event loop through `fileno()`/`on_readable()`); the client side is a
blocking call with a timeout.

A handler whose work is heavy (a collective's 16 MB of input and its exact sum)
returns a `Deferred`: its `work` runs on the server's one worker thread, under
the normal scheduling policy while the loop stays real-time (emu/realtime.py),
and its `then` builds the answer on the loop thread. The loop keeps sending
frames meanwhile; the client waits for its answer as for any other.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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


@dataclass
class Deferred:
    """A handler's answer that needs heavy work first.

    `work()` runs on the worker thread and must touch nothing the loop owns
    (take copies, compute, return); `then(result)` runs on the loop thread and
    returns the answer. An exception in either answers with an error.
    """

    work: Callable[[], Any]
    then: Callable[[Any], Any] = lambda result: result


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = b""
        self.waiting: tuple[str, Deferred, Future] | None = None  # a deferred answer


class MgmtServer:
    """A non-blocking JSON-lines server that dispatches to `handlers[cmd](**args)`.

    The owner registers `listener` and every connection in `conns` with its
    selector and calls `accept()` / `on_readable(conn)` when they are readable.
    A handler that raises `ValueError`/`KeyError`/`MgmtError` answers with an
    error; the server keeps running.
    """

    def __init__(
        self,
        path: str,
        handlers: dict[str, Callable[..., Any]],
        worker_init: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.handlers = handlers
        self._worker_init = worker_init
        self._worker: ThreadPoolExecutor | None = None
        self._finished: list[_Conn] = []
        self._lock = threading.Lock()
        # The last commands served on the owner's thread since `take_served()`:
        # a loop that stalled names them (emu/fidelity.py). Bounded: an owner
        # that never asks (the aggregation controller) must not grow it.
        self._served: deque[str] = deque(maxlen=8)
        # The worker writes a byte here when a deferred work is done; the owner
        # registers `done_reader` with its selector and calls `on_done()`.
        self.done_reader, self._done_writer = socket.socketpair()
        self.done_reader.setblocking(False)
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
        self._serve_lines(conn)
        return True

    def _serve_lines(self, conn: _Conn) -> None:
        # Answers go back in request order: behind a deferred one, lines wait.
        while conn.waiting is None and b"\n" in conn.inbuf:
            line, conn.inbuf = conn.inbuf.split(b"\n", 1)
            answer = self._dispatch(line)
            if isinstance(answer, tuple):
                conn.waiting = answer
                answer[2].add_done_callback(lambda _f, conn=conn: self._work_done(conn))
            else:
                self._answer(conn, answer)

    def _work_done(self, conn: _Conn) -> None:
        """On the worker thread: hand the connection back to the loop."""
        with self._lock:
            self._finished.append(conn)
        try:
            self._done_writer.send(b"!")
        except OSError:
            pass  # the wake-up socket is full: the loop has a wake-up pending anyway

    def on_done(self) -> None:
        """`done_reader` is readable: answer the requests whose deferred work finished."""
        try:
            while self.done_reader.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            finished, self._finished = self._finished, []
        for conn in finished:
            cmd, deferred, future = conn.waiting
            conn.waiting = None
            if conn.sock.fileno() < 0:
                continue  # the client hung up; the owner closed the connection
            try:
                answer = {"ok": True, "result": deferred.then(future.result())}
            except (ValueError, KeyError, TypeError, MgmtError) as exc:
                answer = {"ok": False, "error": f"{cmd}: {exc}"}
            except Exception as exc:  # noqa: BLE001 - the worker's error goes to the client
                log.warning("%s: deferred work failed", cmd, exc_info=True)
                answer = {"ok": False, "error": f"{cmd}: {type(exc).__name__}: {exc}"}
            self._answer(conn, answer)
            if conn.sock.fileno() >= 0:
                self._serve_lines(conn)

    def _dispatch(self, line: bytes) -> dict | tuple:
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
            cmd = req.pop("cmd")
        except (ValueError, KeyError) as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        handler = self.handlers.get(cmd)
        self._served.append(str(cmd))
        if handler is None:
            return {
                "ok": False,
                "error": f"unknown command {cmd!r}; known: {sorted(self.handlers)}",
            }
        try:
            result = handler(**req)
        except (ValueError, KeyError, TypeError, MgmtError) as exc:
            return {"ok": False, "error": f"{cmd}: {exc}"}
        if isinstance(result, Deferred):
            if self._worker is None:
                self._worker = ThreadPoolExecutor(
                    1, thread_name_prefix="mgmt-work", initializer=self._worker_init
                )
            return cmd, result, self._worker.submit(result.work)
        return {"ok": True, "result": result}

    def take_served(self) -> str:
        """The commands served since the last call, e.g. "counters,ports" ("" if none)."""
        served = ",".join(self._served)
        self._served.clear()
        return served

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
        sel.register(self.done_reader, selectors.EVENT_READ, "done")
        try:
            while running():
                for key, _ in sel.select(poll_s):
                    if key.data == "done":
                        self.on_done()
                    elif key.data is None:
                        conn = self.accept()
                        if conn:
                            sel.register(conn.sock, selectors.EVENT_READ, conn)
                    elif not self.on_readable(key.data):
                        sel.unregister(key.data.sock)
                        key.data.sock.close()
        finally:
            for key in list(sel.get_map().values()):
                if isinstance(key.data, _Conn):
                    key.data.sock.close()
            sel.close()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
        self.done_reader.close()
        self._done_writer.close()
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

"""The live view's web server: the page, its vendored JS/CSS, the state JSON and the run's results.

Owns the HTTP side of the live view, on the standard library's
`ThreadingHTTPServer` in a thread of the calling process (nothing to start or
reap): `GET /` is the page, `/static/NAME` a file of emu/live/static/ (the
page's JavaScript and CSS ship in the package: labs run offline), `/api/state`
the sampler's latest page model (emu/live/sampler.py), `/results/PATH` a
report, plot or CSV of the finished run's results directory. Anything else is
a 404; a handler that fails answers 500 and the server goes on. Called by the
CLI (`emu run --web`, `emu cli --web`, `emu web`) and by whoever holds a
`Fabric` (`emu.live.serve(fab)`); `close()` stops the server and the sampler.
"""

from __future__ import annotations

import http.server
import logging
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from emu.live.sampler import FabricSource, OneFabric, RegisteredRuns, Sampler

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765
DEFAULT_HOST = "127.0.0.1"  # the view is for this machine; --web-host to share it
STATIC_DIR = Path(__file__).parent / "static"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
}
RESULT_SUFFIXES = (".png", ".txt", ".json", ".csv")  # what /results/ serves of a run's files
MAX_PLOTS = 40  # a run with a plot per switch would bury the report


class LiveViewError(RuntimeError):
    """The live view could not start (e.g. its port is taken)."""


def results_summary(results_dir: Path) -> dict:
    """What the page shows of a finished run: its report text and its plots' URLs."""
    results_dir = Path(results_dir)
    report_path = results_dir / "report.txt"
    report = report_path.read_text(errors="replace") if report_path.is_file() else None
    plots = sorted(
        (p.relative_to(results_dir).as_posix() for p in results_dir.rglob("*.png")),
        key=lambda rel: (rel.count("/"), rel),  # the scenario's own plots first
    )[:MAX_PLOTS]
    return {
        "dir": str(results_dir),
        "report": report,
        "plots": [{"name": rel, "url": f"/results/{rel}"} for rel in plots],
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _LiveHTTPServer
    server_version = "emu-live"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        try:
            self._route(send_body=True)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away mid-answer: nothing to answer
        except Exception:  # noqa: BLE001 - one bad request must not stop the view
            log.exception("live view: %s failed", self.path)
            self._fail(500, "internal error (see the log)")

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        try:
            self._route(send_body=False)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # noqa: BLE001 - one bad request must not stop the view
            log.exception("live view: HEAD %s failed", self.path)
            self._fail(500, "internal error (see the log)")

    def _fail(self, code: int, message: str) -> None:
        try:
            self.send_error(code, message)
        except OSError:
            pass  # the connection is gone too

    def _route(self, send_body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        if path in ("/", "/index.html"):
            self._send_file(STATIC_DIR / "index.html", send_body)
        elif path.startswith("/static/"):
            name = path[len("/static/") :]
            # Only the files the package ships, by exact name: no path ever reaches the disk.
            if name in self.server.static_files:
                self._send_file(STATIC_DIR / name, send_body)
            else:
                self._fail(404, f"no static file {name!r}")
        elif path == "/api/state":
            self._send(200, "application/json", self.server.sampler.document(), send_body)
        elif path.startswith("/results/"):
            self._send_result(path[len("/results/") :], send_body)
        else:
            self._fail(404, f"nothing at {path!r}")

    def _send_result(self, rel: str, send_body: bool) -> None:
        root = self.server.results_dir
        if root is None:
            self._fail(404, "the run has not finished: no results yet")
            return
        target = (root / rel).resolve()
        if (
            not target.is_relative_to(root)
            or target.suffix not in RESULT_SUFFIXES
            or not target.is_file()
        ):
            self._fail(404, f"no result {rel!r}")
            return
        self._send_file(target, send_body)

    def _send_file(self, path: Path, send_body: bool) -> None:
        body = path.read_bytes()
        self._send(200, CONTENT_TYPES.get(path.suffix, "application/octet-stream"), body, send_body)

    def _send(self, code: int, content_type: str, body: bytes, send_body: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")  # every poll must see the present
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        # Four polls a second would flood the terminal that runs the scenario.
        log.debug("live view %s: " + format, self.client_address[0], *args)


class _LiveHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a browser's kept-alive connection must not hold close() up
    sampler: Sampler
    results_dir: Path | None
    static_files: frozenset[str]


class LiveServer:
    """A running live view: `url`, `finished(results_dir)` and `close()`.

    Use `serve()` to make one. A context manager too: `with serve(fab) as view:`.
    """

    def __init__(self, source: FabricSource, port: int, host: str, sampler: Sampler) -> None:
        try:
            self._httpd = _LiveHTTPServer((host, port), _Handler)
        except OSError as exc:
            raise LiveViewError(
                f"live view: cannot listen on {host}:{port} ({exc.strerror}); "
                "choose another port with --web-port"
            ) from None
        self.source = source
        self.sampler = sampler
        self._httpd.sampler = sampler
        self._httpd.results_dir = None
        self._httpd.static_files = frozenset(p.name for p in STATIC_DIR.iterdir() if p.is_file())
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="emu-live-http",
            daemon=True,
        )
        self._closed = False
        sampler.start()
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def finished(self, results_dir: str | Path) -> None:
        """The run ended: show its report and plots, served from `results_dir`."""
        root = Path(results_dir).resolve()
        self._httpd.results_dir = root
        self.sampler.finished(results_summary(root))

    def close(self) -> None:
        """Stop serving and sampling; idempotent. Returns once both threads ended."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()  # serve_forever returns within its poll interval
        self._httpd.server_close()
        self._thread.join(5.0)
        self.sampler.close()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    fabric=None,
    port: int = DEFAULT_PORT,
    host: str = DEFAULT_HOST,
    *,
    source: FabricSource | None = None,
    interval_s: float | None = None,
) -> LiveServer:
    """Serve the live view of `fabric` on http://HOST:PORT/ from threads of this process.

    Args:
        fabric: a `emu.net.Fabric` (open, or opened later), or None to follow
            the fabrics this process opens, one after another (`emu run --web`).
        port: the TCP port (0: any free one; `LiveServer.port` says which).
        host: the address to listen on.
        source: which fabric to watch, instead of `fabric` (e.g. `RegisteredRuns()`
            for any running fabric, as `emu web` does).
        interval_s: the sampling period (default 0.25 s).

    Returns:
        The running `LiveServer`; call `close()` (or use it as a context
        manager) when the run ends.

    Raises:
        LiveViewError: the port cannot be bound.

    Example:
        >>> with Fabric(leaf_spine(leaves=2, spines=2)) as fab:   # doctest: +SKIP
        ...     with serve(fab, port=8765) as view:
        ...         print("open", view.url)
    """
    if source is None:
        source = RegisteredRuns(owner_pid=os.getpid()) if fabric is None else OneFabric(fabric)
    sampler = Sampler(source) if interval_s is None else Sampler(source, interval_s=interval_s)
    return LiveServer(source, port, host, sampler)

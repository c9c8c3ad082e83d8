"""The live view's server (emu/live/server.py) and sampler on a fake fabric: the page and
its files, the state JSON, the results, and bad requests that must not stop it."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request

import pytest

from emu import fabric as fabric_mod
from emu.live.sampler import Sampler, Watched
from emu.live.server import LiveServer
from emu.registry import wait_for
from emu.switch import reports
from emu.switch.aggregation import AggEngine
from emu.switch.pipeline import Pipeline
from emu.switch.ports import PortState
from tests.unit.fakes import lite_datapath


class FakeFabric:
    """A leaf/spine whose switches answer `live` from socketless datapaths."""

    def __init__(self, sock_dir) -> None:
        self.graph = fabric_mod.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
        self.sock_dir = sock_dir
        self.dps = {}
        for sw in fabric_mod.switches(self.graph):
            ports = {}
            for edge in self.graph[sw].values():
                n = edge["ports"][sw]
                ports[n] = PortState(n, edge["intfs"][sw], bytes([2, 0, 0, 0, 2, n]), 10**7)
            self.dps[sw] = lite_datapath(ports, Pipeline(n_tables=1, ports=ports), AggEngine(ports))
            (sock_dir / f"{sw}.sock").touch()  # the sampler skips switches without a socket
        self.calls = 0
        self.lock = threading.Lock()

    def current(self) -> Watched:
        return Watched("fake-run", self.graph, str(self.sock_dir))

    def call(self, path, cmd, timeout_s=5.0):
        assert cmd == "live"
        with self.lock:
            self.calls += 1
        return reports.live(self.dps[path.rsplit("/", 1)[1][: -len(".sock")]])


@pytest.fixture
def fake(tmp_path):
    return FakeFabric(tmp_path)


@pytest.fixture
def view(fake):
    server = LiveServer(fake, 0, "127.0.0.1", Sampler(fake, interval_s=0.05, call=fake.call))
    yield server
    server.close()


def get(view, path):
    """(status, content type, body) of GET `path`; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(view.url.rstrip("/") + path, timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def state(view) -> dict:
    status, kind, body = get(view, "/api/state")
    assert status == 200 and kind == "application/json"
    return json.loads(body)


def test_the_page_and_its_vendored_files_are_served_without_any_cdn(view):
    status, kind, page = get(view, "/")
    assert status == 200 and kind.startswith("text/html")
    assert b'src="/static/live.js"' in page and b'href="/static/live.css"' in page
    assert b"http" not in page.replace(b"http://www.w3.org", b""), "nothing from the network"
    status, kind, js = get(view, "/static/live.js")
    assert status == 200 and kind.startswith("text/javascript") and b"/api/state" in js
    assert get(view, "/static/live.css")[0] == 200


def test_the_state_json_shows_the_fabric_once_a_page_asks(view, fake):
    doc = state(view)  # asking starts the sampler
    assert doc["version"] == 1
    doc = wait_for(
        lambda: (d := state(view))["ports"] and fake.calls >= 2 * len(fake.dps) and d,
        5.0,
        "two sampling rounds of every switch",
        interval_s=0.05,
    )
    assert doc["phase"] == "running" and doc["fabric"]["run_id"] == "fake-run"
    assert {n["name"] for n in doc["nodes"]} == set(fake.graph.nodes)
    assert len(doc["links"]) == fake.graph.number_of_edges()
    assert {p["switch"] for p in doc["ports"]} == set(fake.dps)
    assert doc["sampler"]["rounds"] >= 1 and doc["sampler"]["failed"] == 0


def test_a_finished_run_shows_its_report_and_serves_its_plots(view, tmp_path):
    results = tmp_path / "results"
    (results / "watchdog-off" / "telemetry").mkdir(parents=True)
    (results / "report.txt").write_text("emu scenario: pause-storm\n3/3 checks passed\n")
    png = b"\x89PNG\r\n\x1a\n" + b"0" * 32
    (results / "pause-storm.png").write_bytes(png)
    (results / "watchdog-off" / "telemetry" / "queues.png").write_bytes(png)
    assert get(view, "/results/report.txt")[0] == 404, "no results before the run ends"
    view.finished(results)
    doc = state(view)
    assert doc["phase"] == "finished"
    assert doc["results"]["report"].startswith("emu scenario: pause-storm")
    urls = [p["url"] for p in doc["results"]["plots"]]
    assert urls == ["/results/pause-storm.png", "/results/watchdog-off/telemetry/queues.png"]
    status, kind, body = get(view, urls[1])
    assert (status, kind, body) == (200, "image/png", png)


@pytest.mark.parametrize(
    "path",
    [
        "/nothing-here",
        "/static/",
        "/static/../server.py",
        "/static/%2e%2e/server.py",
        "/static/..%2fsampler.py",
        "/results/../../etc/passwd",
        "/results/%2e%2e/%2e%2e/etc/passwd",
        "/results/logs/switches-1.log",
        "/api/state/extra",
        "//etc/passwd",
    ],
)
def test_a_bad_path_is_a_404_and_the_server_goes_on(view, tmp_path, path):
    (tmp_path / "results").mkdir()
    view.finished(tmp_path / "results")
    status, _, body = get(view, path)
    assert status == 404, body
    assert get(view, "/")[0] == 200


def raw(view, data: bytes) -> bytes:
    with socket.create_connection((view.host, view.port), timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"GET / HTTP/9.9\r\n\r\n", b"505"),
        (b"POST /api/state HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", b"501"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.0\r\n\r\n", b"414"),
    ],
    ids=["no-method", "bad-version", "post", "huge-line"],
)
def test_a_malformed_request_is_answered_with_an_error_and_the_server_goes_on(
    view, request_bytes, status
):
    # A request line that is not HTTP/1.x gets the error page without a status line
    # (HTTP/0.9 had none): the code is in the page.
    assert b"Error code: " + status in raw(view, request_bytes)
    assert get(view, "/api/state")[0] == 200


def test_a_client_that_hangs_up_at_once_does_not_stop_the_server(view):
    with socket.create_connection((view.host, view.port), timeout=5):
        pass
    with socket.create_connection((view.host, view.port), timeout=5) as sock:
        sock.sendall(b"GET /api/st")  # half a request line, then gone
    assert get(view, "/api/state")[0] == 200


def test_a_handler_that_fails_answers_500_and_the_server_goes_on(view, monkeypatch):
    def broken():
        raise RuntimeError("a bug in the model")

    monkeypatch.setattr(view.sampler, "document", broken)
    assert get(view, "/api/state")[0] == 500
    assert get(view, "/")[0] == 200


def test_close_stops_both_threads_and_the_port_serves_again(fake):
    server = LiveServer(fake, 0, "127.0.0.1", Sampler(fake, interval_s=0.05, call=fake.call))
    state(server)
    port = server.port
    server.close()
    server.close()  # idempotent
    alive = [t.name for t in threading.enumerate() if t.name.startswith("emu-live")]
    assert alive == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    again = LiveServer(fake, port, "127.0.0.1", Sampler(fake, call=fake.call))
    assert again.port == port
    again.close()


def test_a_taken_port_is_named_in_one_line(fake, view):
    from emu.live import LiveViewError

    with pytest.raises(LiveViewError, match=f"127.0.0.1:{view.port}.*--web-port"):
        LiveServer(fake, view.port, "127.0.0.1", Sampler(fake, call=fake.call))


def test_emu_web_names_an_unknown_run_in_one_line(capsys):
    from emu.cli import EXIT_USAGE, main

    assert main(["web", "--run", "no-such-run", "--web-port", "0"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("emu: no running fabric 'no-such-run'") and err.count("\n") == 1


def test_run_and_cli_take_the_web_options():
    from emu.cli import build_parser

    args = build_parser().parse_args(
        ["run", "pause-storm", "--web", "--web-port", "0", "--web-linger", "0"]
    )
    assert (args.web, args.web_port, args.web_linger, args.web_host) == (True, 0, 0.0, "127.0.0.1")
    args = build_parser().parse_args(["cli", "--web"])
    assert args.web and args.web_port == 8765
    args = build_parser().parse_args(["lab", "start", "ecmp-app", "--web", "--web-port", "8800"])
    assert args.web and args.web_port == 8800

"""The management protocol and the run registry (no root needed)."""

import os
import subprocess
import threading

import pytest

from emu import mgmt, registry


@pytest.fixture
def server(tmp_path):
    srv = mgmt.MgmtServer(str(tmp_path / "s.sock"), {
        "echo": lambda **kw: kw,
        "fail": lambda: (_ for _ in ()).throw(ValueError("nope")),
    })
    stop = threading.Event()

    t = threading.Thread(target=srv.serve, args=(lambda: not stop.is_set(), 0.05),
                         daemon=True)
    t.start()
    yield srv
    stop.set()
    t.join()
    srv.close()


def test_call_round_trip(server):
    assert mgmt.call(server.path, "echo", a=1, b="x") == {"a": 1, "b": "x"}


def test_handler_error_is_an_answer_not_a_crash(server):
    with pytest.raises(mgmt.MgmtError, match="fail: nope"):
        mgmt.call(server.path, "fail")
    with pytest.raises(mgmt.MgmtError, match="unknown command 'zap'"):
        mgmt.call(server.path, "zap")
    assert mgmt.call(server.path, "echo") == {}


def test_missing_socket_is_a_named_error(tmp_path):
    with pytest.raises(mgmt.MgmtError, match="nosock"):
        mgmt.call(str(tmp_path / "nosock"), "info", timeout_s=0.5)


def test_registry_cleans_only_dead_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path)
    child = subprocess.Popen(["sleep", "60"])  # a process to stop
    run = registry.Run.create(log_dir=str(tmp_path / "logs"), label="t")
    run.add_pid(child.pid, "proc sleeper")
    # Alive owner: left alone.
    assert registry.clean_dead_runs() == []
    assert child.poll() is None
    # Owner recorded as a process that no longer exists: cleaned.
    run.owner_start = -1
    run.save()
    removed = registry.clean_dead_runs()
    assert removed and removed[0]["stopped_pids"] == [child.pid]
    # The registry reaped it (it is our child): gone from /proc.
    assert registry.proc_start_time(child.pid) is None
    assert not os.path.exists(run.sock_dir)
    assert registry.load_runs() == []


def test_registry_never_signals_a_reused_pid(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path)
    child = subprocess.Popen(["sleep", "60"])  # a process to stop
    try:
        entry = {"pid": child.pid, "start_time": registry.proc_start_time(child.pid) + 1}
        assert registry.stop_pids([entry], grace_s=0.1) == []
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()

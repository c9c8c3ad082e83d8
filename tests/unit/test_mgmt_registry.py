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


def test_a_deferred_answer_comes_after_its_work_and_does_not_hold_up_the_loop(tmp_path):
    gate = threading.Event()
    worker_threads = []
    srv = mgmt.MgmtServer(str(tmp_path / "d.sock"), {
        "slow": lambda x: mgmt.Deferred(lambda: gate.wait(30) and x * 10,
                                        lambda r: {"work": r, "then": threading.get_ident()}),
        "bad": lambda: mgmt.Deferred(lambda: int("x")),
        "late": lambda: mgmt.Deferred(lambda: 1, lambda r: {}[r]),
        "ping": lambda: "pong",
    }, worker_init=lambda: worker_threads.append(threading.get_ident()))
    stop = threading.Event()
    loop = threading.Thread(target=srv.serve, args=(lambda: not stop.is_set(), 0.05),
                            daemon=True)
    loop.start()
    answers = {}
    caller = threading.Thread(target=lambda: answers.update(
        slow=mgmt.call(srv.path, "slow", timeout_s=30, x=4)))
    caller.start()
    try:
        # The worker is blocked on `gate`, so the slow answer cannot have come yet,
        # and the loop still answers other clients meanwhile.
        for _ in range(3):
            assert mgmt.call(srv.path, "ping") == "pong"
        assert "slow" not in answers
        gate.set()
        caller.join(30)
        assert answers["slow"]["work"] == 40
        # `then` ran on the loop's thread; the work on the worker, which
        # `worker_init` set up (the agent drops real-time there).
        assert answers["slow"]["then"] == loop.ident
        assert len(worker_threads) == 1 and worker_threads[0] != loop.ident
        with pytest.raises(mgmt.MgmtError, match="bad: invalid literal"):
            mgmt.call(srv.path, "bad")
        with pytest.raises(mgmt.MgmtError, match="late: 1"):
            mgmt.call(srv.path, "late")
        assert mgmt.call(srv.path, "ping") == "pong"
    finally:
        gate.set()
        stop.set()
        loop.join()
        srv.close()


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

"""The management protocol and the run registry (no root needed)."""

import os
import signal
import subprocess
import threading

import pytest

from emu import mgmt, registry


@pytest.fixture
def server(tmp_path):
    srv = mgmt.MgmtServer(
        str(tmp_path / "s.sock"),
        {
            "echo": lambda **kw: kw,
            "fail": lambda: (_ for _ in ()).throw(ValueError("nope")),
        },
    )
    stop = threading.Event()

    t = threading.Thread(target=srv.serve, args=(lambda: not stop.is_set(), 0.05), daemon=True)
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
    srv = mgmt.MgmtServer(
        str(tmp_path / "d.sock"),
        {
            "slow": lambda x: mgmt.Deferred(
                lambda: gate.wait(30) and x * 10,
                lambda r: {"work": r, "then": threading.get_ident()},
            ),
            "bad": lambda: mgmt.Deferred(lambda: int("x")),
            "late": lambda: mgmt.Deferred(lambda: 1, lambda r: {}[r]),
            "ping": lambda: "pong",
        },
        worker_init=lambda: worker_threads.append(threading.get_ident()),
    )
    stop = threading.Event()
    loop = threading.Thread(target=srv.serve, args=(lambda: not stop.is_set(), 0.05), daemon=True)
    loop.start()
    answers = {}
    caller = threading.Thread(
        target=lambda: answers.update(slow=mgmt.call(srv.path, "slow", timeout_s=30, x=4))
    )
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


# ----- process hygiene: one home in emu.registry ------------------------------------


def test_wait_for_returns_the_condition_value():
    values = iter([None, 0, {"ready": True}])
    assert registry.wait_for(lambda: next(values), 5, "a dict", interval_s=0.01) == {"ready": True}


def test_wait_for_timeout_names_what_and_where_the_logs_are():
    with pytest.raises(registry.FabricError) as info:
        registry.wait_for(
            lambda: False, 0.05, "the widget to spin", interval_s=0.01, logs="/tmp/widget.log"
        )
    assert str(info.value) == (
        "timed out after 0 s waiting for the widget to spin; logs in /tmp/widget.log"
    )
    with pytest.raises(registry.FabricError, match=r"waiting for x$"):
        registry.wait_for(lambda: False, 0.01, "x", interval_s=0.01)


def test_wait_for_lets_the_condition_end_the_wait_early():
    def exited():
        raise registry.FabricError("switch s1 exited during start-up; see s1.log")

    with pytest.raises(registry.FabricError, match="exited during start-up"):
        registry.wait_for(exited, 10, "s1")


def test_one_error_class_per_name():
    """emu.net.FabricError (run time) and emu.fabric.FabricSpecError (bad spec) differ."""
    from emu import fabric, net

    assert net.FabricError is registry.FabricError
    assert issubclass(registry.FabricError, RuntimeError)
    assert issubclass(fabric.FabricSpecError, ValueError)
    assert not issubclass(fabric.FabricSpecError, registry.FabricError)
    assert not hasattr(fabric, "FabricError")
    assert net.wait_for is registry.wait_for


def test_free_tcp_port_is_free():
    import socket

    port = registry.free_tcp_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_die_with_parent_ends_the_child_when_its_parent_dies(tmp_path):
    """A process that called die_with_parent() gets SIGTERM when its parent (sh) is killed."""
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    pidfile = tmp_path / "pid"
    child = (
        f"{sys.executable} -c 'import time; from emu.registry import die_with_parent; "
        f'die_with_parent(); open("{tmp_path}/ready", "w").close(); time.sleep(60)\''
    )
    parent = subprocess.Popen(
        ["sh", "-c", f"{child} & echo $! > {pidfile}; wait"],
        cwd=repo,
        env=dict(os.environ, PYTHONPATH=str(repo)),
    )
    try:
        registry.wait_for(lambda: (tmp_path / "ready").exists(), 20, "the child to start")
        pid = int(pidfile.read_text())
        parent.kill()
        parent.wait(timeout=5)
        try:  # a zombie waiting for init counts as gone (proc_start_time is None)
            registry.wait_for(
                lambda: registry.proc_start_time(pid) is None, 10, "the child to exit"
            )
        except registry.FabricError:
            os.kill(pid, 9)
            raise AssertionError("the child outlived its parent") from None
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


@pytest.fixture
def stop_handlers():
    """The handlers of TERM, INT and HUP, put back after the test."""
    saved = {sig: signal.getsignal(sig) for sig in registry.STOP_SIGNALS}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_signal_during_a_held_block_is_acted_on_after_it(stop_handlers):
    """A teardown under signals_held finishes; the signal then reaches the handler
    that was in place (emu's raises KeyboardInterrupt), as if it had just come."""
    got = []

    def interrupt(signum, frame):
        got.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in registry.STOP_SIGNALS:
        signal.signal(sig, interrupt)
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        with registry.signals_held() as held:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGHUP)
            registry.wait_for(lambda: len(held) == 2, 5, "both signals to be held")
            got.append("teardown done")
    assert got == ["teardown done", signal.SIGTERM]  # the first one, once
    assert all(signal.getsignal(sig) is interrupt for sig in registry.STOP_SIGNALS)


def test_a_held_block_without_a_signal_puts_every_handler_back(stop_handlers):
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    before = {sig: signal.getsignal(sig) for sig in registry.STOP_SIGNALS}
    with registry.signals_held() as held:
        assert signal.getsignal(signal.SIGTERM) is not interrupt
    assert held == [] and {s: signal.getsignal(s) for s in registry.STOP_SIGNALS} == before


def test_a_held_block_in_another_thread_runs_as_is(stop_handlers):
    """Python delivers signals to the main thread only: nothing to hold elsewhere."""
    seen = []

    def block():
        with registry.signals_held() as held:
            seen.append((held, signal.getsignal(signal.SIGTERM)))

    t = threading.Thread(target=block)
    t.start()
    t.join(timeout=5)
    assert seen == [([], signal.getsignal(signal.SIGTERM))]

"""emu.servers and emu.remote without a fabric: names, ssh's failures as one line,
tunnel commands, the report's arithmetic, and the guard and agent processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from emu import registry, remote, servers
from emu.servers import ServerError


def test_server_names_parse_with_local_first_class():
    assert servers.parse_servers("local,b, c") == ["local", "b", "c"]
    assert servers.parse_servers("localhost,b") == ["local", "b"]
    assert servers.parse_servers(["b", "local"]) == ["b", "local"]
    assert servers.parse_servers("") == [] and servers.parse_servers(None) == []
    assert servers.remote_servers(["local", "b"]) == ["b"]


@pytest.mark.parametrize(
    "value, says",
    [
        ("local,,b", "an empty server name"),
        ("local,b,b", "b is named twice"),
        ("local,localhost", "local is named twice"),
        ("local,-oProxyCommand=x", "is not a host name"),
        ("local,a b", "is not a host name"),
    ],
)
def test_bad_server_names_are_named(value, says):
    with pytest.raises(ServerError, match=says):
        servers.parse_servers(value)


def test_a_server_error_is_a_fabric_error():
    assert issubclass(ServerError, registry.FabricError)


@pytest.mark.parametrize(
    "stderr, says",
    [
        ("root@10.0.0.2: Permission denied (publickey).", "server b: no key accepted"),
        ("Host key verification failed.", "server b: its host key is not known here"),
        ("ssh: Could not resolve hostname b: Name or service not known", "server b: unknown host"),
        ("ssh: connect to host 10.0.0.2 port 22: Connection refused", "server b: unreachable"),
        ("ssh: connect to host 10.0.0.2 port 22: Connection timed out", "server b: unreachable"),
    ],
)
def test_ssh_failures_are_one_line_naming_the_server(stderr, says):
    line = servers.ssh_failure("b", stderr)
    assert line.startswith(says) and "\n" not in line


def test_tunnel_commands():
    assert remote.tunnel_argv("vxlan", "s1-eth1", 7, "10.0.0.1", "10.0.0.2") == [
        "ip", "link", "add", "s1-eth1", "type", "vxlan", "id", "7", "local", "10.0.0.1",
        "remote", "10.0.0.2", "dstport", "4789", "nolearning",
    ]  # fmt: skip
    gre = remote.tunnel_argv("gretap", "s1-eth1", 7, "10.0.0.1", "10.0.0.2")
    assert gre[:6] == ["ip", "link", "add", "s1-eth1", "type", "gretap"] and gre[-2:] == [
        "key",
        "7",
    ]
    with pytest.raises(ValueError, match="tunnel kind 'geneve'"):
        remote.tunnel_argv("geneve", "x", 7, "a", "b")
    for key in (0, 1 << 24):
        with pytest.raises(ValueError, match="tunnel key"):
            remote.tunnel_argv("vxlan", "x", key, "a", "b")


def _way(sent, received, dropped=0, exact=True):
    return {"sent": sent, "sent_bytes": 0, "received": received,
            "lost": sent - received if exact else None, "tx_dropped": dropped, "tx_errors": 0,
            "rx_dropped": 0, "rx_errors": 0, "exact": exact, "mbps": 1.5}  # fmt: skip


DOC = {
    "servers": ["local", "b"],
    "tunnel_kind": "vxlan",
    "switches": {"local": ["leaf1", "spine1"], "b": ["leaf2"]},
    "hosts": {"local": ["h1"], "b": ["h2", "h3"]},
    "tunnels": [
        {"link": "spine1-leaf2", "server_a": "localhost", "intf_a": "spine1-eth2",
         "server_b": "b", "intf_b": "leaf2-eth2", "a_to_b": _way(10, 10), "b_to_a": _way(7, 5, dropped=1)},
    ],
    "tunnel_link_rates_bps": {"spine1-leaf2": 40e6, "x-y": 20e6},
}  # fmt: skip


def test_the_report_counts_what_crossed_and_what_was_lost():
    assert servers.placement_rows(DOC) == [["local", "leaf1, spine1", 1], ["b", "leaf2", 2]]
    assert servers.tunnel_rows(DOC) == [
        ["spine1-leaf2", "local:spine1-eth2", "b:leaf2-eth2", 10, 10, 0, 1.5],
        ["spine1-leaf2", "b:leaf2-eth2", "local:spine1-eth2", 7, 5, 3, 1.5],  # 2 not out, 1 dropped
    ]
    assert servers.tunnels_lost(DOC) == {"lost": 3, "judged": 2, "unjudged": 0, "unread": 0}
    assert servers.tunnel_frames(DOC) == 15
    # One 1514-byte frame at the slowest tunnelled link: 20 Mbit/s.
    assert servers.tunnel_delay_limit_s(DOC) == pytest.approx(1514 * 8 / 20e6)
    assert servers.tunnel_delay_limit_s({}) is None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_guard_ends_its_command_when_its_stdin_ends(tmp_path):
    pidfile = tmp_path / "pid"
    guard = subprocess.Popen(
        [sys.executable, "-m", "emu.remote", "guard", "--", "sh", "-c",
         f"echo $$ > {pidfile}; exec sleep 300"],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        registry.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, "the sleep")
        child = int(pidfile.read_text())
        assert _alive(child)
        guard.stdin.close()  # what a dropped ssh connection does to the remote command
        assert guard.wait(timeout=10) != 0
        registry.wait_for(lambda: not _alive(child), 5, "the guarded command to end")
    finally:
        if guard.poll() is None:
            guard.kill()
            guard.wait()


def test_the_guard_passes_the_exit_status_and_output():
    # stdin held open, as the run holds a remote command's (closing it ends the command)
    guard = subprocess.Popen(
        [sys.executable, "-m", "emu.remote", "guard", "--", "sh", "-c", "echo out; exit 3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert guard.stdout.read() == "out\n"
        assert guard.wait(timeout=20) == 3
    finally:
        guard.stdin.close()
        if guard.poll() is None:
            guard.kill()
            guard.wait()


def test_the_agent_removes_what_it_started_when_its_stdin_ends(tmp_path):
    env = dict(os.environ, EMU_REGISTRY_DIR=str(tmp_path / "reg"))
    agent = subprocess.Popen(
        [sys.executable, "-m", "emu.remote", "serve", "--origin", "run-x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )

    def ask(**req):
        agent.stdin.write(json.dumps(req) + "\n")
        agent.stdin.flush()
        return json.loads(agent.stdout.readline())

    try:
        hello = json.loads(agent.stdout.readline())["result"]
        manifest = tmp_path / "reg" / "runs" / f"{hello['run_id']}.json"
        assert json.loads(manifest.read_text())["info"]["origin_run"] == "run-x"
        log = os.path.join(hello["log_dir"], "sleep.log")
        pid = ask(op="spawn", argv=["sleep", "300"], log=log, role="sleep")["result"]["pid"]
        assert ask(op="poll", pid=pid, id=7) == {"ok": True, "result": None, "id": 7}
        assert [e["pid"] for e in json.loads(manifest.read_text())["pids"]] == [pid]
        assert ask(op="run", argv=["sh", "-c", "echo hi; exit 4"])["result"] == {
            "rc": 4, "stdout": "hi\n", "stderr": ""}  # fmt: skip
        bad = ask(op="nonsense")
        assert not bad["ok"] and "unknown op 'nonsense'" in bad["error"]
        agent.stdin.close()  # the run's connection went
        assert agent.wait(timeout=20) == 0
        assert not _alive(pid) and not manifest.exists()
        assert not os.path.exists(hello["log_dir"])
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGKILL)
            agent.wait()


def test_preflight_names_what_this_machine_has():
    info = remote.preflight()
    assert info["version"] == remote.package_version()
    assert set(info) == {
        "version", "python", "root", "mnexec", "tunnels", "max_sessions", "source", "c_source",
        "addresses",
    }  # fmt: skip
    assert info["source"] == remote.source_fingerprint() and "127.0.0.1" in info["addresses"]
    assert set(info["tunnels"]) <= set(remote.TUNNEL_KINDS)
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith("emuprobe")]


def _checks(tmp_path, doc) -> dict:
    from emu.scenario import Context, add_servers

    ctx = Context(name="t", params={}, out_dir=tmp_path)
    ctx.fabrics.servers_documents.append(("", doc))
    add_servers(ctx)
    return {c.name.split(": ", 1)[1]: c for c in ctx.checks}


def _doc(tunnels, rtt=None):
    return dict(DOC, tunnels=tunnels, underlay_rtt=rtt or {"b": {"avg_ms": 0.04, "max_ms": 0.1}})


def _tunnel(a_to_b, b_to_a, **extra):
    return {"link": "spine1-leaf2", "server_a": "localhost", "intf_a": "spine1-eth2",
            "server_b": "b", "intf_b": "leaf2-eth2", "a_to_b": a_to_b, "b_to_a": b_to_a,
            **extra}  # fmt: skip


def test_the_tunnel_check_fails_on_a_lost_frame_and_passes_on_none(tmp_path):
    ok = _checks(tmp_path, _doc([_tunnel(_way(10, 10), _way(7, 7))]))
    assert ok["every frame sent into a tunnel came out"].passed
    assert ok["every frame sent into a tunnel came out"].value == "0 lost in 2 tunnel directions"
    assert ok["the underlay adds less than one frame time"].passed  # 20 µs < 606 µs
    bad = _checks(tmp_path, _doc([_tunnel(_way(10, 9), _way(7, 7))]))
    assert not bad["every frame sent into a tunnel came out"].passed
    dropped = _checks(tmp_path, _doc([_tunnel(_way(10, 10, dropped=1), _way(7, 7))]))
    assert not dropped["every frame sent into a tunnel came out"].passed
    unread = _checks(tmp_path, _doc([_tunnel(None, _way(7, 7))]))
    assert not unread["every frame sent into a tunnel came out"].passed


def test_a_tunnel_a_fault_took_down_is_reported_not_judged(tmp_path):
    faulted = _tunnel(_way(10, 8), _way(7, 7), faulted=True)
    healthy = dict(_tunnel(_way(3, 3), _way(4, 4)), link="spine2-leaf2")
    check = _checks(tmp_path, _doc([faulted, healthy]))["every frame sent into a tunnel came out"]
    assert check.passed and "taken down by a fault, not judged: spine1-leaf2" in check.value


def test_a_tunnel_never_read_with_nothing_in_flight_is_not_judged(tmp_path):
    # One tunnel's traffic never paused: its counts say nothing about loss.
    busy = _tunnel(_way(10, 9, exact=False), _way(7, 7, exact=False))
    quiet = dict(_tunnel(_way(3, 3), _way(4, 4)), link="spine2-leaf2")
    check = _checks(tmp_path, _doc([busy, quiet]))["every frame sent into a tunnel came out"]
    assert check.passed and "2 not judged" in check.value
    # With nothing judged at all the run cannot vouch for its tunnels.
    alone = _checks(tmp_path, _doc([busy]))["every frame sent into a tunnel came out"]
    assert not alone.passed


def test_a_fabric_that_could_not_read_its_servers_fails_a_check(tmp_path):
    check = _checks(tmp_path, {"servers": ["local", "b"], "error": "agent gone"})["reported"]
    assert not check.passed and check.value == "agent gone"


def test_the_underlay_check_fails_for_a_server_it_could_not_measure(tmp_path):
    rtt = {"b": {"avg_ms": 0.05, "max_ms": 0.1}, "c": {"error": ["100% packet loss"]}}
    check = _checks(tmp_path, _doc([_tunnel(_way(1, 1), _way(1, 1))], rtt))
    check = check["the underlay adds less than one frame time"]
    assert not check.passed and "no RTT to c" in check.value
    slow = {"b": {"avg_ms": 2.0, "max_ms": 3.0}}  # 1 ms one way > 606 µs at 20 Mbit/s
    assert not _checks(tmp_path, _doc([_tunnel(_way(1, 1), _way(1, 1))], slow))[
        "the underlay adds less than one frame time"
    ].passed


def _agent(tmp_path, *extra):
    env = dict(os.environ, EMU_REGISTRY_DIR=str(tmp_path / "reg"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "emu.remote", "serve", "--origin", "run-y", *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    hello = json.loads(proc.stdout.readline())["result"]
    log = os.path.join(hello["log_dir"], "sleep.log")
    req = {"op": "spawn", "argv": ["sleep", "300"], "log": log, "role": "sleep", "id": 1}
    proc.stdin.write(json.dumps(req) + "\n")
    proc.stdin.flush()
    pid = json.loads(proc.stdout.readline())["result"]["pid"]
    return proc, env, pid, tmp_path / "reg" / "runs" / f"{hello['run_id']}.json"


def test_an_agent_whose_run_falls_silent_removes_its_part(tmp_path):
    # The run's machine died without closing the connection: no heartbeat comes.
    agent, _, pid, manifest = _agent(tmp_path, "--silence-s", "1")
    try:
        assert agent.wait(timeout=20) == 1  # stdin still open: it gave up on the run
        assert not _alive(pid) and not manifest.exists()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_emu_remote_end_ends_a_runs_part_by_its_manifest(tmp_path):
    agent, env, pid, manifest = _agent(tmp_path)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "emu.remote", "end", "--origin", "run-y"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert res.returncode == 0 and "ended 1 part(s) of run run-y" in res.stdout, res.stderr
        assert agent.wait(timeout=20) == 128 + signal.SIGTERM  # its handler ended it
        assert not _alive(pid) and not manifest.exists()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_the_source_fingerprint_follows_the_code_not_the_version(tmp_path, monkeypatch):
    here = remote.source_fingerprint()
    assert here == remote.source_fingerprint() and len(here) == 12
    # A checkout also hashes its C sources, apart (an installed wheel has none).
    assert remote.source_fingerprint((".c", ".h")) not in (None, here)
    assert remote.source_fingerprint((".nothing",)) is None
    # The same files hash the same; one changed line does not; a build product is not hashed.
    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "m.py").write_text("x = 1\n")
        (tmp_path / name / "sub" / "n.py").write_text("y = 2\n")
    (tmp_path / "b" / "fast.so").write_bytes(b"\x7fELF")
    a, b = (remote.source_fingerprint(root=str(tmp_path / n)) for n in ("a", "b"))
    assert a == b
    (tmp_path / "b" / "sub" / "n.py").write_text("y = 3\n")
    assert remote.source_fingerprint(root=str(tmp_path / "b")) != a


def test_a_kernel_without_vxlan_makes_the_run_fall_back_to_gretap(monkeypatch):
    # Each preflight names the first kind its kernel makes; b has no VXLAN, this
    # machine both: this machine is asked about gretap too, and that is the kind.
    asked = []

    def here(kinds=remote.TUNNEL_KINDS):
        asked.append(tuple(kinds))
        return [k for k in kinds if k in ("vxlan", "gretap")][:1]

    monkeypatch.setattr(remote, "tunnel_kinds_here", here)
    infos = {"b": {"tunnels": ["gretap"]}}
    assert servers.common_tunnel_kind(["local", "b"], infos, None, "python") == ["gretap"]
    assert asked == [remote.TUNNEL_KINDS, ("gretap",)]
    infos = {"b": {"tunnels": ["vxlan"]}}
    assert servers.common_tunnel_kind(["local", "b"], infos, None, "python") == ["vxlan"]

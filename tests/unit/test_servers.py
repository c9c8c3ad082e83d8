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


def _way(sent, received, lost=0, dropped=0):
    return {"sent": sent, "sent_bytes": 0, "received": received, "lost": lost,
            "in_flight": sent - received - lost, "tx_dropped": dropped, "tx_errors": 0,
            "rx_errors": 0}  # fmt: skip


DOC = {
    "servers": ["local", "b"],
    "tunnel_kind": "vxlan",
    "switches": {"local": ["leaf1", "spine1"], "b": ["leaf2"]},
    "hosts": {"local": ["h1"], "b": ["h2", "h3"]},
    "tunnels": [
        {"link": "spine1-leaf2", "server_a": "localhost", "intf_a": "spine1-eth2",
         "server_b": "b", "intf_b": "leaf2-eth2", "a_to_b": _way(10, 9), "b_to_a": _way(7, 5, lost=2, dropped=1)},
    ],
    "tunnel_link_rates_bps": {"spine1-leaf2": 40e6, "x-y": 20e6},
}  # fmt: skip


def test_the_report_counts_what_crossed_and_what_was_lost():
    assert servers.placement_rows(DOC) == [["local", "leaf1, spine1", 1], ["b", "leaf2", 2]]
    assert servers.tunnel_rows(DOC) == [
        ["spine1-leaf2", "local:spine1-eth2", "b:leaf2-eth2", 10, 9, 1, 0],  # 1 in flight
        ["spine1-leaf2", "b:leaf2-eth2", "local:spine1-eth2", 7, 5, 0, 3],  # 2 never out, 1 dropped
    ]
    assert servers.tunnel_frames(DOC) == 14
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
        assert ask(op="poll", pid=pid) == {"ok": True, "result": None}
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
    assert set(info) == {"version", "python", "root", "mnexec", "tunnels", "max_sessions"}
    assert set(info["tunnels"]) <= set(remote.TUNNEL_KINDS)
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith("emuprobe")]

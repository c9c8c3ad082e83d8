"""One fabric over two servers (issue 32): the second a loop server made here.

The second server (emu.testserver.LoopServer) is a network namespace with its
own address, its own sshd and a key made for the test; emu reaches it only
through ssh, as a real server. What a test asserts comes from the packets
and counters: smoke's checks over the split fabric, the tunnel devices'
counters, and what is left on either server after a SIGKILL and `emu clean`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from scapy.all import ICMP, IP, rdpcap

from emu import fabric, registry, remote, telemetry
from emu.net import Fabric
from emu.registry import wait_for
from emu.servers import ServerError
from emu.testserver import SSHD, LoopServer
from emu.traffic.rdma import RdmaHosts

from ..conftest import leftovers
from ..scenarios import assert_checks

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(
    not os.path.exists(SSHD), reason="openssh-server is not installed (scripts/bootstrap does it)"
)


@pytest.fixture(scope="module")
def second():
    """The second server, reachable by its name in this process too (EMU_SSH_CONFIG)."""
    before = os.environ.get("EMU_SSH_CONFIG")
    with LoopServer("second") as server:
        os.environ.update(server.env())
        try:
            yield server
        finally:
            if before is None:
                os.environ.pop("EMU_SSH_CONFIG", None)
            else:
                os.environ["EMU_SSH_CONFIG"] = before


def emu(server, *args, env=None, timeout_s=600):
    return subprocess.run(
        [sys.executable, "-m", "emu.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout_s,
        env={**os.environ, **server.env(), **(env or {})},
    )


def assert_nothing_left(server) -> None:
    """Nothing of a run on the second server (waited for: sshd ends sessions on its own time)."""
    try:
        wait_for(lambda: server.leftovers() == {"runs": [], "interfaces": [], "processes": []}, 15.0,
                 "the second server to be empty")  # fmt: skip
    except registry.FabricError:
        pytest.fail(f"left on the second server: {server.leftovers()}")


def test_smoke_split_over_two_servers(second, tmp_path, no_leaks):
    out = tmp_path / "out"
    res = emu(second, "run", "smoke", "--servers", "local,second", "--out", str(out),
              "--set", "iperf_s=3", "--set", "ecmp_flows=8")  # fmt: skip
    doc = json.loads((out / "metrics.json").read_text())
    assert_checks(res, doc)
    (split,) = doc["metrics"]["servers"]
    # Switches ran on both servers, and the report says which.
    assert split["switches"]["local"] and split["switches"]["second"], split
    assert "servers: which node ran where" in res.stdout
    # Frames crossed every tunnel, by the tunnel devices' own counters at both ends.
    servers_doc = json.loads((out / "servers.json").read_text())
    assert servers_doc["tunnels"], "the placement cut no link"
    for t in servers_doc["tunnels"]:
        for way in ("a_to_b", "b_to_a"):
            w = t[way]
            assert w["received"] > 0, t
            if not t["faulted"]:  # smoke's link cut may be a tunnel: its losses are the cut's
                assert w["exact"] and w["lost"] == 0 and w["received"] == w["sent"], t
    assert split["tunnel_frames"] == sum(
        t[w]["received"] for t in servers_doc["tunnels"] for w in ("a_to_b", "b_to_a")
    )
    # The second server's switch logs came back with the run.
    assert any((out / "logs" / "second").iterdir())
    assert_nothing_left(second)


def test_sigkilled_split_run_is_removed_by_emu_clean(second, tmp_path, no_leaks):
    script = (
        "import os, signal, json\n"
        "from emu import fabric\n"
        "from emu.net import Fabric\n"
        "fab = Fabric(fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1),\n"
        f"             out_dir={str(tmp_path)!r}, servers='local,second')\n"
        "fab.open()\n"
        "remote = [h for h in ('h1', 'h2') if fab.server_of(h) == 'second'][0]\n"
        "fab.popen(remote, ['sleep', '3001'])\n"
        "print(json.dumps({'remote_host': remote, 'pid': fab.host(remote).pid}), flush=True)\n"
        "signal.pause()  # until the test kills this process\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, **second.env()),
    )
    try:
        line = proc.stdout.readline()
        started = json.loads(line)  # the child did not bring its fabric up if this fails
        assert second.leftovers()["runs"], "the run's part should be registered on the server"
        wait_for(lambda: any("sleep 3001" in p for p in second.processes()), 10.0,
                 "the remote host's sleep to start")  # fmt: skip
        assert registry.proc_start_time(started["pid"]), "the remote host's shell should be alive"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    res = emu(second, "clean")
    assert res.returncode == 0, res.stderr
    assert "server second:" in res.stdout, res.stdout
    assert_nothing_left(second)
    assert not any("sleep 3001" in p for p in second.processes())
    assert leftovers(held=[second.run]) == {"interfaces": [], "processes": [], "runs": []}


def fake_python(tmp_path, version: str, source: str) -> str:
    """A 'python' on the second server that answers the preflight as another emu would."""
    path = tmp_path / "python"
    answer = {"version": version, "source": source, "root": True, "mnexec": True,
              "tunnels": ["vxlan"], "max_sessions": 1000, "addresses": []}  # fmt: skip
    path.write_text(f"#!/bin/sh\necho '{json.dumps(answer)}'\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("unreachable", "server nowhere: unreachable"),
        ("no key", "server second: no key accepted"),
        ("no emu", "server second: no /nonexistent/python there"),
        ("wrong version", "server second: emu 0.0.1 (source 000000000000) there"),
        (
            "other source",
            f"server second: emu {remote.package_version()} (source 000000000000) there",
        ),
        ("small MTU", "server second: the network to"),
    ],
)
def test_a_bad_server_is_one_line_and_exit_2(second, tmp_path, case, expected, request, no_leaks):
    env, name = {}, "second"
    if case == "unreachable":  # an address with nothing listening on ssh's port
        config = tmp_path / "ssh_config"
        config.write_text(
            open(second.ssh_config).read()
            + f"Host nowhere\n  HostName {second.address}\n  Port 2\n"
        )
        env, name = {"EMU_SSH_CONFIG": str(config)}, "nowhere"
    elif case == "no key":  # a key the server does not know
        key = tmp_path / "other"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        config = tmp_path / "ssh_config"
        text = open(second.ssh_config).read().replace(f"{second.dir}/id\n", f"{key}\n")
        config.write_text(text)
        env = {"EMU_SSH_CONFIG": str(config)}
    elif case == "small MTU":  # a tunnelled full frame (1550 bytes) would not pass
        subprocess.run(["ip", "link", "set", "dev", second.veth, "mtu", "1500"], check=True)
        request.addfinalizer(
            lambda: subprocess.run(
                ["ip", "link", "set", "dev", second.veth, "mtu", "1600"], check=True
            )
        )
    elif case == "no emu":
        env = {"EMU_REMOTE_PYTHON": "/nonexistent/python"}
    elif case == "wrong version":
        env = {"EMU_REMOTE_PYTHON": fake_python(tmp_path, "0.0.1", "000000000000")}
    else:  # the same version number, other code (another commit)
        env = {"EMU_REMOTE_PYTHON": fake_python(tmp_path, remote.package_version(), "000000000000")}
    runs_before = sorted(r.run_id for r in registry.load_runs())
    res = emu(second, "run", "smoke", "--servers", f"local,{name}", "--out", str(tmp_path / "o"),
              env=env, timeout_s=60)  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"emu: {expected}"), res.stderr
    assert "Traceback" not in res.stderr
    # Nothing started: no run recorded here, nothing on the server.
    assert sorted(r.run_id for r in registry.load_runs()) == runs_before
    assert second.leftovers() == {"runs": [], "interfaces": [], "processes": []}


@pytest.mark.emu_fabric(servers="local,second", leaves=4, spines=2, hosts_per_leaf=1)
def test_the_pytest_fixture_runs_a_split_fabric_and_its_faults(second, fabric):
    fab = fabric
    switches = {s: fab.server_of(s) for s in ("leaf1", "leaf2", "leaf3", "leaf4")}
    assert set(switches.values()) == {"local", "second"}, switches
    crossing = [(u, v) for u, v in fab.placement.cut]
    assert crossing, "the placement cut no link"
    u, v = crossing[0]
    # A link between servers is a tunnel: taking it down must reach both ends,
    # on both servers (a tunnel has no carrier to lose), and the controller must see it.
    fab.set_link(u, v, up=False)
    wait_for(
        lambda: len(fab.controller_status()["links"]) == 2 * (8 - 1), 10, "LLDP to drop the link"
    )
    hosts = ["h1", "h2", "h3", "h4"]
    for src in hosts:
        for dst in hosts:
            if src != dst:
                assert fab.ping(src, dst, count=1) == (1, 1), (src, dst)
    fab.set_link(u, v, up=True)
    wait_for(lambda: len(fab.controller_status()["links"]) == 2 * 8, 10, "LLDP to find it again")
    # `emu ps` says which server each node runs on, and every switch's socket answers here.
    ps = emu(second, "ps", "--json", "--run", fab.run.run_id, timeout_s=60)
    (shown,) = json.loads(ps.stdout)
    assert {n["name"]: n["server"] for n in shown["nodes"]} == {
        n: fab.server_of(n) for n in fab.graph.nodes
    }
    assert all(n["up"] for n in shown["nodes"] if n["kind"] == "switch")


@pytest.mark.emu_fabric(servers="local,second", leaves=2, spines=2, hosts_per_leaf=1)
def test_a_capture_on_a_remote_switch_port_comes_back_whole(second, fabric, tmp_path):
    """tcpdump on a port of a switch on the second server writes into a pcap here."""
    fab = fabric
    (far,) = [h for h in ("h1", "h2") if fab.server_of(h) == "second"]
    near = "h1" if far == "h2" else "h2"
    leaf = fab.graph.nodes[far]["leaf"]
    intf = fab.graph.edges[far, leaf]["intfs"][leaf]  # the switch's side of the host's link
    assert fab.switch_server(intf) == "second"
    pcap = tmp_path / "far.pcap"
    cap = telemetry.start_capture(fab, intf, pcap, bpf="icmp")
    assert fab.ping(near, far, count=5, interval_s=0.05) == (5, 5)
    fab.stop_proc(cap)  # its input ends: tcpdump ends and its last packets come out
    echoes = [p for p in rdpcap(str(pcap)) if p.haslayer(ICMP)]
    far_ip = fab.graph.nodes[far]["ip"]
    assert sum(p[ICMP].type == 8 and p[IP].dst == far_ip for p in echoes) == 5, echoes
    assert sum(p[ICMP].type == 0 and p[IP].src == far_ip for p in echoes) == 5, echoes


def test_a_server_whose_sshd_allows_too_few_sessions_is_refused_before_anything_starts(
    monkeypatch, no_leaks
):
    # sshd's default MaxSessions is 10; every node there is one session (mininet issue #1078).
    graph = fabric.leaf_spine(leaves=4, spines=2, hosts_per_leaf=2)
    with LoopServer("small", max_sessions=10) as small:
        monkeypatch.setenv("EMU_SSH_CONFIG", small.ssh_config)
        with pytest.raises(ServerError, match=r"server small: its sshd allows 10 sessions"):
            Fabric(graph, servers="local,small").open()
        assert small.leftovers() == {"runs": [], "interfaces": [], "processes": []}


def test_rdma_between_servers_and_every_nic_reports_its_fidelity(second, tmp_path, no_leaks):
    """NIC agents start on their host's server; their sockets and records reach the run."""
    graph = fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1, modelled_rate_bps=25e9)
    with Fabric(graph, out_dir=str(tmp_path), servers="local,second") as fab:
        assert {fab.server_of("h1"), fab.server_of("h2")} == {"local", "second"}
        nics = RdmaHosts(fab, ["h1", "h2"])
        remote = "h1" if fab.server_of("h1") == "second" else "h2"
        assert nics.nics[remote].call("info")["engine"] == "c"
        assert any(f"{remote}.nic.sock" in p for p in _agent_files(second))
        qp = nics.connect("h1", "h2")
        writes = nics.post_write("h1", qp, 250_000, remote_va=0x7F000000, rkey=7)
        done = []

        def all_done():
            done.extend(nics.poll_completions("h1", qp))
            return len(done) == 1

        wait_for(all_done, 20, "the write to complete across the tunnel")
        assert [c["msg_id"] for c in done] == writes
        assert nics.stats("h2")["recv"][str(qp)]["rx_bytes"] == 250_000
    names = {rec["name"] for rec in fab.fidelity_document["processes"]}
    assert {"h1", "h2"} <= names and not fab.fidelity_document["missing"]
    assert_nothing_left(second)


def _agent_files(server) -> list[str]:
    """The files in the run's part's socket directory on the server (its private /run/emu)."""
    root = f"/proc/{server.sshd.pid}/root/run/emu"
    return [f for d in os.listdir(root) if d != "runs" for f in os.listdir(os.path.join(root, d))]

"""The NIC agent's C loop (emu/host/csrc/nic_loop.c) on a socket pair, no namespaces.

Two C engines, each run by its loop in a thread, exchange a message over a
SOCK_DGRAM socket pair (the loop only sends and receives whole frames, as on
an AF_PACKET socket). Python's callback is asked for what it asked for: its
timer, its readable sockets, the messages waiting for a collective and the
non-RoCE frames a collective takes; the loop sends what the pacing allows and
stops when the callback says so. scripts/sanitize runs this under ASan/UBSan.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import types

import pytest

from emu.host import agent as agent_mod
from emu.host import nicpath
from emu.host.rnic import NicConfig
from emu.proto import credit
from emu.registry import wait_for

pytestmark = pytest.mark.skipif(nicpath._nicpath is None, reason="emu.host._nicpath not built")

RATE = 50_000_000
MAC = ("02:00:00:00:00:01", "02:00:00:00:00:02")
IP = ("10.0.0.1", "10.0.0.2")


def pair() -> list[nicpath.CRnic]:
    now = time.monotonic()
    nics = [
        nicpath.CRnic(NicConfig(mac=MAC[i], ip=IP[i], rate_bps=RATE, dcqcn=True), now)
        for i in range(2)
    ]
    for a in range(2):
        nics[a].connect(7, 7, MAC[1 - a], IP[1 - a], 49152, now)
    return nics


class Loop(threading.Thread):
    """A loop over one or more engines in a thread; `serve` records every call and stops on `done()`."""

    def __init__(self, nics, socks, extra_fds=(), done=lambda: False, takers=False):
        super().__init__(daemon=True)
        self.nics, self.done = nics, done
        self.calls: list[tuple] = []
        self.frames: list[tuple] = []
        self.messages: list[tuple] = []
        self.error: BaseException | None = None
        self.loop = nicpath.new_loop()
        for nic, sock in zip(nics, socks):
            nic.engine.set_takers(takers)
            nic.engine.loop_reset(0.001)
            self.loop.add(nic.engine, sock.fileno())
        self.loop.watch(list(extra_fds))

    def serve(self, now, ready, frames, wanting):
        self.calls.append((now, ready, len(frames), wanting))
        self.frames.extend(frames)
        for i, nic in enumerate(self.nics):
            self.messages.extend((i, *m) for m in nic.take_messages(7))
        return -1.0 if self.done() else now + 0.01

    def run(self):
        try:
            self.loop.run(self.serve)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_the_c_loop_carries_a_message_both_ways_without_python_per_frame():
    a, b = pair()
    b.set_deliver_data(7, True)
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    data = bytes(range(256)) * 800  # 204,800 bytes: 200 frames
    a.post_send(7, len(data), time.monotonic(), data=data)
    done = threading.Event()
    la = Loop([a], [sa], done=done.is_set)
    lb = Loop([b], [sb], done=done.is_set)
    la.start()
    lb.start()
    try:
        wait_for(
            lambda: lb.messages and a.stats(0)["send"][7]["completed"],
            10,
            "the message and its completion",
            interval_s=0.005,
        )
    finally:
        done.set()
    la.join(5)
    lb.join(5)
    assert la.error is None and lb.error is None
    assert not la.is_alive() and not lb.is_alive()
    assert [m[2] for m in lb.messages] == [data]
    assert len(a.take_completions(7)) == 1
    sent = a.qp_counters(7)["tx_packets"]
    assert sent >= 200 and a.engine.loop_stats()["tx_frames"] >= sent
    # Python ran per message and per timer, not per frame: 200 data frames and
    # their ACKs crossed, and the receiver's callback ran far fewer times.
    assert len(lb.calls) < sent / 2
    # The loop named the engine whose message waited (engine 0, the only one).
    assert any(c[3] == (0,) for c in lb.calls)
    # At 50 Mbit/s the transfer takes ~33 ms; no stall the size of a pass's work.
    assert a.engine.loop_stats()["passes"] > 0
    sa.close()
    sb.close()


def test_one_loop_serves_several_engines():
    """Two senders in one loop, their two receivers in another: each message arrives whole,
    and the senders' loop woke fewer times than they sent frames."""
    nics = [pair(), pair()]
    socks = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    data = [bytes([k]) * 150_000 for k in range(2)]
    for k in range(2):
        nics[k][1].set_deliver_data(7, True)
        nics[k][0].post_send(7, len(data[k]), time.monotonic(), data=data[k])
    done = threading.Event()
    senders = Loop([nics[0][0], nics[1][0]], [socks[0][0], socks[1][0]], done=done.is_set)
    receivers = Loop([nics[0][1], nics[1][1]], [socks[0][1], socks[1][1]], done=done.is_set)
    senders.start()
    receivers.start()
    try:
        wait_for(lambda: len(receivers.messages) >= 2, 10, "both messages", interval_s=0.005)
    finally:
        done.set()
    senders.join(5)
    receivers.join(5)
    assert senders.error is None and receivers.error is None
    # (engine index, msn, bytes): each receiver got its own sender's message
    assert sorted((m[0], m[2]) for m in receivers.messages) == [(0, data[0]), (1, data[1])]
    sent = sum(nics[k][0].qp_counters(7)["tx_packets"] for k in range(2))
    assert sent >= 2 * 147
    # Both senders pace at the same rate: most passes serve both.
    assert senders.loop.stats()["engines"] == 2
    assert senders.loop.stats()["wakeups"] < sent
    for pair_ in socks:
        for s in pair_:
            s.close()


def test_python_sockets_and_non_roce_frames_reach_the_callback():
    (a,) = pair()[:1]
    sa, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    mgmt_r, mgmt_w = socket.socketpair()
    seen = threading.Event()
    loop = Loop([a], [sa], extra_fds=[mgmt_r.fileno()], done=seen.is_set, takers=True)
    loop.start()
    # A frame no NIC parses (IEEE 802's Local Experimental Ethertype 2) goes up; a
    # credit flow control frame (Ethertype 1, emu/proto/credit.py) is the NIC's own,
    # never a collective's, as agent._receive has it.
    other = b"\xff" * 12 + b"\x88\xb6" + b"not roce" * 8
    peer.send(credit.build(credit.template("02:00:00:00:00:09"), credit.FcPacket(3, 0, 10)))
    peer.send(other)
    mgmt_w.send(b"x")
    try:
        wait_for(
            lambda: loop.frames and any(mgmt_r.fileno() in c[1] for c in loop.calls),
            5,
            "the frame and the readable socket to reach the callback",
            interval_s=0.005,
        )
    finally:
        seen.set()
    mgmt_w.send(b"y")  # wake it to see `done`
    loop.join(5)
    assert loop.error is None and not loop.is_alive()
    assert loop.frames == [(0, other)]
    assert any(mgmt_r.fileno() in c[1] for c in loop.calls)
    for s in (sa, peer, mgmt_r, mgmt_w):
        s.close()


def test_a_callback_that_raises_ends_the_loop_with_its_error():
    (a,) = pair()[:1]
    sa, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    loop = nicpath.new_loop()
    with pytest.raises(ValueError):
        loop.run(lambda now, ready, frames, wanting: -1.0)  # no engine yet
    loop.add(a.engine, sa.fileno())

    def boom(now, ready, frames, wanting):
        raise RuntimeError("the callback failed")

    with pytest.raises(RuntimeError, match="the callback failed"):
        loop.run(boom)
    with pytest.raises(ValueError):
        loop.run(42)
    sa.close()
    peer.close()


# ----- run_agents: one process's agents, each served only when it has work -----


class FakeAgent:
    """What run_agents uses of an Agent (engine, port socket, sockets, serve,
    stopping) around a real C engine; records every serve.

    `serve` drains its readable sockets, takes the whole messages of QP 7 and
    asks to be called again `every_s` later, as Agent.serve asks for its
    samples and its collectives' wake-ups.
    """

    def __init__(self, nic, sock, fds=(), every_s=3600.0, takers=False):
        self.rnic, self.sock = nic, sock
        self.fidelity = types.SimpleNamespace(loop=types.SimpleNamespace(frame_s=0.001))
        self.fds = list(fds)
        self.every_s = every_s
        self.stopping = False
        self.calls: list[tuple] = []  # (now, ready fds, frames)
        self.messages: list[tuple] = []
        nic.engine.set_takers(takers)

    def python_fds(self):
        return self.fds

    def serve(self, now, ready, frames):
        self.calls.append((now, list(ready), list(frames)))
        for fd in ready:
            os.read(fd, 4096)
        if 7 in self.rnic.qpns:
            self.messages.extend(self.rnic.take_messages(7))
        return now + self.every_s, False


class Agents(threading.Thread):
    """agent.run_agents in a thread; `stop()` ends it through `stopping` and a wake-up."""

    def __init__(self, agents, wake_w):
        super().__init__(daemon=True)
        self.agents, self.wake_w = agents, wake_w
        self.error: BaseException | None = None

    def run(self):
        try:
            agent_mod.run_agents(self.agents)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self):
        self.agents[-1].stopping = True
        self.wake_w.send(b"s")  # a socket of the last agent's: the loop wakes and sees it
        self.join(5)
        assert self.error is None and not self.is_alive()


def test_an_idle_agent_is_not_served_when_the_others_are():
    """A busy agent (its timer every 2 ms, its socket written) and an idle one in one loop:
    the idle one is served at the first pass and when its own socket is readable, never
    for the busy one's work."""
    busy_nic, idle_nic = pair()
    socks = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    busy_r, busy_w = socket.socketpair()
    idle_r, idle_w = socket.socketpair()
    busy = FakeAgent(busy_nic, socks[0][0], fds=[busy_r.fileno()], every_s=0.002)
    idle = FakeAgent(idle_nic, socks[1][0], fds=[idle_r.fileno()])
    run = Agents([busy, idle], idle_w)
    run.start()
    try:
        wait_for(lambda: len(busy.calls) >= 50, 10, "50 timer calls of the busy agent")
        busy_w.send(b"m")
        wait_for(
            lambda: any(c[1] == [busy_r.fileno()] for c in busy.calls),
            5,
            "the busy agent's socket to be served",
        )
        assert len(idle.calls) == 1  # the first pass serves everyone
        idle_w.send(b"m")
        wait_for(lambda: len(idle.calls) == 2, 5, "the idle agent's socket to be served")
        assert idle.calls[1][1] == [idle_r.fileno()]
        calls_then = len(busy.calls)
        wait_for(lambda: len(busy.calls) >= calls_then + 20, 5, "20 more timer calls")
        assert len(idle.calls) == 2
    finally:
        run.stop()
    for s in (*socks[0], *socks[1], busy_r, busy_w, idle_r, idle_w):
        s.close()


def test_an_agent_is_served_for_its_messages_and_frames_though_its_timer_is_far():
    """Two receivers whose timers are an hour away: one is served when a whole message
    waits for it, the other when a frame for its collective arrives; neither for the
    other's."""
    a, b = pair()
    c, d = pair()
    b.set_deliver_data(7, True)
    wires = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    ctl_r, ctl_w = socket.socketpair()
    takes_messages = FakeAgent(b, wires[0][1])
    takes_frames = FakeAgent(d, wires[1][1], fds=[ctl_r.fileno()], takers=True)
    run = Agents([takes_messages, takes_frames], ctl_w)
    done = threading.Event()
    sender = Loop([a], [wires[0][0]], done=done.is_set)
    run.start()
    sender.start()
    data = bytes(range(256)) * 200  # 51,200 bytes: 50 frames
    try:
        wait_for(lambda: takes_frames.calls and takes_messages.calls, 5, "the first pass")
        a.post_send(7, len(data), time.monotonic(), data=data)
        wait_for(lambda: takes_messages.messages, 10, "the message to be taken")
        assert [m[1] for m in takes_messages.messages] == [data]
        assert len(takes_frames.calls) == 1  # not served for the other's message
        served = len(takes_messages.calls)
        other = b"\xff" * 12 + b"\x88\xb6" + b"not roce" * 8
        wires[1][0].send(other)
        wait_for(lambda: len(takes_frames.calls) == 2, 5, "the frame to reach its agent")
        assert takes_frames.calls[1][2] == [other]
        assert len(takes_messages.calls) == served  # not served for the other's frame
        assert all(frames == [] for _, _, frames in takes_messages.calls)
    finally:
        done.set()
        run.stop()
    sender.join(5)
    assert sender.error is None
    for s in (*wires[0], *wires[1], ctl_r, ctl_w):
        s.close()

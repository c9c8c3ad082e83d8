"""The switch's OpenFlow channels (emu/switch/channel.py) over loopback TCP (no root).

A plain socket plays the controller (or ovs-ofctl); `now` is given, so the
keepalive and reconnect times are checked without waiting for them.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p

from emu.switch import channel
from emu.switch.aggregation import AggEngine
from emu.switch.channel import Channels, OFChannel
from emu.switch.openflow import Reply, Transmit
from emu.switch.ports import OFPPC_PORT_DOWN

from .fakes import HELLO, decode, encode, frame, lite_datapath, mkmodel


def recv_some(conn: socket.socket, timeout_s: float = 2.0) -> bytes:
    conn.settimeout(timeout_s)
    return conn.recv(65536)


def pump(
    chans: Channels,
    sel: selectors.BaseSelector,
    ch: OFChannel,
    now: float,
    until,
    timeout_s: float = 2.0,
) -> list:
    """Serve the channel's socket events until `until(effects)` holds; return the effects."""
    effects: list = []
    deadline = time.monotonic() + timeout_s
    while not until(effects):
        assert time.monotonic() < deadline, f"timed out; effects so far {effects}"
        for key, events in sel.select(0.05):
            if key.data == ("of", ch):
                effects += chans.on_ready(ch, events, now)
    return effects


@pytest.fixture
def controller():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    yield srv
    srv.close()


def connected(controller: socket.socket):
    sel = selectors.SelectSelector()
    chans = Channels("s1", mkmodel(), sel, ("127.0.0.1", 0), [controller.getsockname()])
    chans.connect_due(0.0)
    [ch] = chans.channels
    assert (
        ch.active
        and not ch.connected
        and chans.info()
        == [{"peer": "127.0.0.1:%d" % controller.getsockname()[1], "connected": False}]
    )
    controller.settimeout(2.0)
    conn, _ = controller.accept()
    pump(chans, sel, ch, 0.0, lambda _e: ch.connected)
    assert decode(recv_some(conn)).__class__ is p.OFPHello  # our hello, first
    return sel, chans, ch, conn


@pytest.mark.timeout(30)
def test_controller_channel_returns_effects_and_sends_only_what_it_is_told(controller) -> None:
    sel, chans, ch, conn = connected(controller)
    try:
        out = p.OFPPacketOut(
            None, ofp.OFP_NO_BUFFER, ofp.OFPP_CONTROLLER, [p.OFPActionOutput(2)], frame()
        )
        conn.sendall(HELLO + encode(out) + encode(p.OFPEchoRequest(None, data=b"hi")))
        effects = pump(chans, sel, ch, 1.0, lambda e: any(type(x) is Reply for x in e))
        assert effects[0] == Transmit([(2, frame(), None)])
        [reply] = [e for e in effects if type(e) is Reply]
        # The channel sends nothing the caller did not pass to `send`.
        conn.settimeout(0.2)
        with pytest.raises(socket.timeout):
            conn.recv(100)
        chans.send(ch, reply.data)
        echo = decode(recv_some(conn))
        assert isinstance(echo, p.OFPEchoReply) and echo.data == b"hi"
        assert ch.last_rx == 1.0 and chans.info()[0]["connected"]
        # The controller goes away: the channel closes and is redialled after the backoff.
        assert chans.model.sessions == [ch.session]
        conn.close()
        pump(chans, sel, ch, 2.0, lambda _e: not chans.channels)
        assert chans.model.sessions == []  # a dead channel's session holds no role
        assert chans.reconnect_at == {controller.getsockname(): 2.0 + channel.RECONNECT_MIN_S}
        chans.connect_due(2.1)
        assert not chans.channels
        chans.connect_due(2.0 + channel.RECONNECT_MIN_S)
        assert len(chans.channels) == 1
    finally:
        conn.close()
        chans.close()


@pytest.mark.timeout(30)
def test_keepalive_echoes_a_quiet_controller_then_drops_a_silent_one(controller) -> None:
    sel, chans, ch, conn = connected(controller)
    try:
        chans.keepalive(channel.ECHO_INTERVAL_S)  # not quiet for long enough yet
        chans.keepalive(channel.ECHO_INTERVAL_S + 0.1)
        echo = recv_some(conn)
        assert struct.unpack("!BBHI", echo) == (4, ofp.OFPT_ECHO_REQUEST, 8, channel.ECHO_XID)
        assert ch.echo_sent_at == channel.ECHO_INTERVAL_S + 0.1
        chans.keepalive(channel.ECHO_INTERVAL_S + 0.1 + channel.ECHO_TIMEOUT_S + 0.1)
        assert chans.channels == [] and controller.getsockname() in chans.reconnect_at
    finally:
        conn.close()
        chans.close()


@pytest.mark.timeout(30)
def test_listener_says_hello_and_closes_an_unframeable_stream_after_its_error() -> None:
    sel = selectors.SelectSelector()
    chans = Channels("s1", mkmodel(), sel, ("127.0.0.1", 0), [])
    tool = socket.create_connection(chans.listen_addr, timeout=2.0)
    try:
        for key, _events in sel.select(2.0):
            assert key.data == ("of-listen", None)
            chans.accept(0.0)
        [ch] = chans.channels
        assert not ch.active and ch.connected and chans.info() == []
        assert isinstance(decode(recv_some(tool)), p.OFPHello)
        tool.sendall(HELLO + bytes.fromhex("0402000400000009"))  # length 4: no framing left
        effects = pump(chans, sel, ch, 0.0, lambda e: bool(e))
        assert [type(e) for e in effects] == [Reply] and ch.session.closed
        for e in effects:
            chans.send(ch, e.data)
        chans.close_if_done(ch, 0.0)
        assert chans.channels == [] and chans.reconnect_at == {}
        err = decode(recv_some(tool))
        assert isinstance(err, p.OFPErrorMsg) and err.code == ofp.OFPBRC_BAD_LEN
        assert recv_some(tool) == b""  # and the switch hung up
    finally:
        tool.close()
        chans.close()


# ----- the datapath carries the effects out ------------------------------------------------


@pytest.mark.timeout(30)
def test_datapath_executes_packet_out_and_port_change_effects(controller) -> None:
    """What a session returns, carried out by the datapath on its queues and channels."""
    sel, chans, ch, conn = connected(controller)
    model = chans.model
    dp = lite_datapath(model.ports, model.pipeline, AggEngine(model.ports))
    dp.of = chans
    try:
        out = p.OFPPacketOut(
            None, ofp.OFP_NO_BUFFER, ofp.OFPP_CONTROLLER, [p.OFPActionOutput(2)], frame()
        )
        port_down = p.OFPPortMod(None, 2, "02:00:00:00:00:02", OFPPC_PORT_DOWN, OFPPC_PORT_DOWN, 0)
        dp._execute(ch, ch.session.feed(HELLO + encode(out), 1.0))
        assert dp.busy == {2} and dp.schedulers[2].depth_bytes[0] == len(frame())
        assert dp.buffer.ingress.get((0, 0), 0) > 0  # charged to the CPU port
        dp._execute(ch, ch.session.feed(encode(port_down), 1.0))
        assert dp.schedulers[2].pending == 0 and dp.ports[2].counters.tx_dropped == 1
        assert dp.busy == set() and dp.buffer.ingress.get((0, 0), 0) == 0
        status = decode(recv_some(conn))  # the controller hears of the change
        assert isinstance(status, p.OFPPortStatus) and status.desc.port_no == 2
        assert status.desc.config == OFPPC_PORT_DOWN
    finally:
        conn.close()
        chans.close()

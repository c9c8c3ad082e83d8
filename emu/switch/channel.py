"""The OpenFlow channels of one emu switch: the TCP side of its agent.

Owns every OpenFlow socket of one switch process: an active connection to
each configured controller (non-blocking connect, reconnect with exponential
backoff, echo keepalive), a passive listener for tools such as `ovs-ofctl`,
and each connection's output buffer. Every connection carries its own
`OpenFlowSession` (`openflow.py`, sans I/O) on the switch's shared
`SwitchModel`; bytes read are fed to it in bites of `OF_RECV_BYTES`, and the
effects it returns go back to the caller, which carries them out (replies
through `send`, so that they leave in order with the frames and port changes
that the same messages asked for). Asynchronous messages (packet-in, port
status, flow removed) are built per channel by its session and sent here.

Does not own: the selector (the datapath's loop; sockets are registered in it
with the data ("of", channel) and ("of-listen", None)), the switch model, the
ports or the clock: `now` comes in. Used only by `datapath.py`.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
from typing import Optional

from os_ken.ofproto import ofproto_v1_3 as ofp

from emu.switch import ofcodec as codec
from emu.switch.openflow import Effect, OpenFlowSession, SwitchModel
from emu.switch.pipeline import FlowEntry, PacketIn
from emu.switch.ports import PortState

log = logging.getLogger(__name__)

ECHO_INTERVAL_S = 5.0
ECHO_TIMEOUT_S = 15.0
ECHO_XID = 0xE0E0
RECONNECT_MIN_S = 0.2
RECONNECT_MAX_S = 2.0
# OpenFlow bytes taken per loop pass. A controller's burst after a link change
# (hundreds of FlowMods and GroupMods, ~0.5 ms of CPU each) handled in one pass
# stalled the data path for up to 22 ms (36 frame times at 20 Mbit/s;
# emu/fidelity.py names the pass and its CPU). A real switch's ASIC forwards
# while its CPU programs it; in bites of a few messages, frames are served
# between them and the rest waits in the socket.
OF_RECV_BYTES = 512

Address = tuple[str, int]


class OFChannel:
    """One OpenFlow TCP connection and its sans-I/O session.

    Args:
        sock: the connected (or connecting) non-blocking socket.
        session: the OpenFlow session on this connection.
        addr: the controller's address for an active connection; None for
            one accepted on the listener.
        peer: "host:port" of the other end, for logs and `info`.
        now: when the connection was made (keepalive starts from here).
    """

    def __init__(
        self,
        sock: socket.socket,
        session: OpenFlowSession,
        addr: Optional[Address],
        peer: str,
        now: float,
    ) -> None:
        self.sock = sock
        self.session = session
        self.addr = addr
        self.active = addr is not None
        self.peer = peer
        self.outbuf = bytearray()
        self.connected = not self.active
        self.last_rx = now
        self.echo_sent_at = 0.0


class Channels:
    """Every OpenFlow connection of one switch, plus its passive listener.

    Args:
        name: the switch's name, for logs.
        model: the switch model every session works on.
        sel: the datapath loop's selector; the channels register their sockets.
        listen: address of the passive listener (port 0: any free port).
        controllers: addresses of the controllers to connect to (and reconnect).
    """

    def __init__(
        self,
        name: str,
        model: SwitchModel,
        sel: selectors.BaseSelector,
        listen: Address,
        controllers: list[Address],
    ) -> None:
        self.name = name
        self.model = model
        self.sel = sel
        self.channels: list[OFChannel] = []
        self.reconnect_at: dict[Address, float] = {addr: 0.0 for addr in controllers}
        self.reconnect_delay: dict[Address, float] = {addr: RECONNECT_MIN_S for addr in controllers}
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(listen)
        self.listener.listen(8)
        self.listener.setblocking(False)
        sel.register(self.listener, selectors.EVENT_READ, ("of-listen", None))

    @property
    def listen_addr(self) -> Address:
        """Where the passive listener is bound (the port the kernel chose for 0)."""
        return self.listener.getsockname()

    def info(self) -> list[dict]:
        """Each controller connection: its peer and whether it is connected."""
        return [{"peer": ch.peer, "connected": ch.connected} for ch in self.channels if ch.active]

    # ----- connections ------------------------------------------------------

    def connect_due(self, now: float) -> None:
        """Start a connection to every controller whose reconnect time has come."""
        for addr, at in list(self.reconnect_at.items()):
            if at <= now:
                self._connect(addr, now)

    def _connect(self, addr: Address, now: float) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self._schedule_reconnect(addr, now)
            return
        ch = OFChannel(
            sock,
            OpenFlowSession(self.model, is_controller_channel=True),
            addr,
            f"{addr[0]}:{addr[1]}",
            now,
        )
        self.channels.append(ch)
        self.sel.register(sock, selectors.EVENT_WRITE, ("of", ch))
        self.reconnect_at.pop(addr, None)

    def _schedule_reconnect(self, addr: Address, now: float) -> None:
        delay = self.reconnect_delay[addr]
        self.reconnect_at[addr] = now + delay
        self.reconnect_delay[addr] = min(delay * 2, RECONNECT_MAX_S)

    def accept(self, now: float) -> None:
        """Take a connection from the listener (a tool, not a controller) and say hello."""
        try:
            sock, peer = self.listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ch = OFChannel(
            sock,
            OpenFlowSession(self.model, is_controller_channel=False),
            None,
            f"{peer[0]}:{peer[1]}",
            now,
        )
        self.channels.append(ch)
        self.sel.register(sock, selectors.EVENT_READ, ("of", ch))
        self.send(ch, ch.session.hello())

    def on_ready(self, ch: OFChannel, events: int, now: float) -> list[Effect]:
        """A channel's socket is ready: finish connecting, flush, or read and feed.

        Returns:
            The effects its session returned for the bytes read (none when
            nothing was read). The caller carries them out, then calls
            `close_if_done`.
        """
        if not ch.connected:
            err = ch.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.close_channel(ch, now)
                return []
            ch.connected = True
            ch.last_rx = now
            self.reconnect_delay[ch.addr] = RECONNECT_MIN_S
            log.info("%s: connected to controller %s", self.name, ch.peer)
            self.send(ch, ch.session.hello())
            return []
        if events & selectors.EVENT_WRITE:
            self._flush(ch)
        if not events & selectors.EVENT_READ:
            return []
        try:
            data = ch.sock.recv(OF_RECV_BYTES)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.close_channel(ch, now)
            return []
        ch.last_rx = now
        ch.echo_sent_at = 0.0
        return ch.session.feed(data, now)

    def close_if_done(self, ch: OFChannel, now: float) -> None:
        """Close a channel whose session ended itself, after sending its last words."""
        if ch.session.closed and ch in self.channels:
            self._flush(ch)
            self.close_channel(ch, now)

    def close_channel(self, ch: OFChannel, now: float) -> None:
        """Drop a connection; a controller's is retried after the backoff."""
        try:
            self.sel.unregister(ch.sock)
        except (KeyError, ValueError):
            pass
        ch.sock.close()
        ch.session.close()  # leaves the model's sessions (roles are per live channel)
        if ch in self.channels:
            self.channels.remove(ch)
        if ch.active:
            log.info("%s: controller %s connection lost; reconnecting", self.name, ch.peer)
            self._schedule_reconnect(ch.addr, now)

    def keepalive(self, now: float) -> None:
        """Echo a controller that has been quiet; drop (and redial) one that stays silent."""
        for ch in list(self.channels):
            if not (ch.active and ch.connected):
                continue
            idle = now - ch.last_rx
            if ch.echo_sent_at and now - ch.echo_sent_at > ECHO_TIMEOUT_S:
                log.warning(
                    "%s: controller %s silent for %.0f s; reconnecting", self.name, ch.peer, idle
                )
                self.close_channel(ch, now)
            elif idle > ECHO_INTERVAL_S and not ch.echo_sent_at:
                ch.echo_sent_at = now
                self.send(ch, codec.header(ofp.OFPT_ECHO_REQUEST, b"", ECHO_XID))

    def close(self) -> None:
        """Close every connection and the listener (the process is ending)."""
        for ch in list(self.channels):
            ch.sock.close()
        self.listener.close()

    # ----- sending ----------------------------------------------------------

    def send(self, ch: OFChannel, data: bytes) -> None:
        """Queue `data` on a channel and send what the socket takes now."""
        ch.outbuf += data
        self._flush(ch)

    def _flush(self, ch: OFChannel) -> None:
        if ch.outbuf:
            try:
                sent = ch.sock.send(ch.outbuf)
                del ch.outbuf[:sent]
            except BlockingIOError:
                pass
            except OSError:
                ch.outbuf.clear()
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if ch.outbuf else 0)
        try:
            self.sel.modify(ch.sock, want, ("of", ch))
        except (KeyError, ValueError):
            pass

    def packet_ins(self, records: list[PacketIn]) -> None:
        """OFPT_PACKET_IN on every connected controller channel that wants each record."""
        for ch in self.channels:
            if not (ch.connected and ch.active):
                continue
            for rec in records:
                msg = ch.session.packet_in(rec)
                if msg:
                    self.send(ch, msg)

    def port_status(self, reason: int, port: PortState) -> None:
        """OFPT_PORT_STATUS on every connected channel whose async config asks for it."""
        for ch in self.channels:
            if ch.connected:
                msg = ch.session.port_status(reason, port)
                if msg:
                    self.send(ch, msg)

    def flow_removed(self, entries: list[FlowEntry]) -> None:
        """OFPT_FLOW_REMOVED for each entry on every connected channel that asked for it."""
        for ch in self.channels:
            if ch.connected:
                for entry in entries:
                    msg = ch.session.flow_removed(entry)
                    if msg:
                        self.send(ch, msg)

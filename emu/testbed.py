"""One live emu switch whose ports end in sockets of the test process.

Owns the harness of tests that hold a single switch to account (the OpenFlow
1.3 conformance suite, a user's own pytest): `SwitchTestbed` creates one veth
pair per port in the root namespace, starts one switch on the switch ends
(emu's `emu.switch.worker`, or an Open vSwitch bridge to compare with, both
through emu/rig.py, the benches' rig too) and keeps an AF_PACKET socket on each test end, so that a
test programs the switch over OpenFlow 1.3 (`ofctl`, or `controller()`, an
`OFClient` that sends os-ken message objects and returns decoded replies) and
sends and receives real Ethernet frames on its ports (`send`, `receive`).
Every interface is recorded in an `emu.registry.Run` before it is created and
the switch's pid right after it is spawned, so `close()`, or `emu clean` after
the test process was killed, removes exactly what the testbed made.

Does not own: the switch (emu/switch), starting and stopping it (emu/rig.py),
the management protocol (emu/mgmt.py),
Mininet or namespaces (none are used: a registry run records interfaces and
pids, and a namespace would hide both from it), nor the OpenFlow codec of the
controller side: os-ken builds and parses every message here. Used by
tests/integration/test_testbed.py and by the OpenFlow conformance tests.

Example (as root):

    from os_ken.ofproto import ofproto_v1_3 as ofp, ofproto_v1_3_parser as p
    from scapy.all import Ether, IP, UDP, raw

    with SwitchTestbed(n_ports=2) as tb, tb.controller() as c:
        apply = p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(2)])
        c.send(p.OFPFlowMod(c.datapath, match=p.OFPMatch(in_port=1), instructions=[apply]))
        assert c.barrier() == []
        frame = raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / UDP())
        tb.send(1, frame)
        assert tb.receive() == {1: [], 2: [frame]}
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterable
from typing import Any, Literal, overload

from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofpp

from emu import mgmt, ofctl
from emu.registry import Run, interface_exists
from emu.rig import EmuSwitches, OvsBridges, RigError, SwitchSpec

log = logging.getLogger(__name__)

SWITCH_NAME = "tb"
SWITCHES = ("emu", "ovs")
DPID = 0x1
MAX_PORTS = 64  # a conformance test needs a handful; each port is two interfaces
MAX_TABLES = ofp.OFPTT_MAX + 1  # table ids 0..0xfe; 0xff is OFPTT_ALL
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
READY_TIMEOUT_S = 20.0
OFCTL_TIMEOUT_S = 20.0
OF_TIMEOUT_S = 5.0
SEND_TIMEOUT_S = 1.0

ETH_P_ALL = 0x0003
ETH_HLEN = 14
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_AUXDATA = 8
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20+
# <linux/if_packet.h> struct tpacket_auxdata: status, len, snaplen, mac, net, vlan_tci, vlan_tpid.
TPACKET_AUXDATA = struct.Struct("=IIIHHHH")
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
ETH_P_8021Q = 0x8100
RECV_BYTES = 65536
OFP_HEADER = struct.Struct("!BBHI")
# What the switch sends unasked; they wait in OFClient.inbox until a test takes them.
ASYNC_MESSAGES = (ofpp.OFPPacketIn, ofpp.OFPPortStatus, ofpp.OFPFlowRemoved)


class TestbedError(RuntimeError):
    """The testbed could not be built or driven; the message names what and where the logs are."""

    __test__ = False  # not a pytest test class, although its name starts with "Test"


class _Datapath:
    """What os-ken's serialize() and parsers need of a datapath, without a controller."""

    ofproto = ofp
    ofproto_parser = ofpp
    id = DPID


class OFClient:
    """One OpenFlow 1.3 connection to the testbed's switch, past the HELLO exchange.

    Build messages with os-ken (`ofproto_v1_3_parser`) on `datapath`:
    `p.OFPFlowMod(client.datapath, ...)`. Every wait answers the switch's echo
    requests and keeps what it did not wait for: OFPT_ERRORs and asynchronous
    messages (PACKET_IN, PORT_STATUS, FLOW_REMOVED) and replies to messages
    sent with `send` wait in `inbox`, in arrival order, until `barrier` or
    `expect` takes them.

    Args:
        sock: a connected TCP socket to the switch.
        what: how messages name this connection ("the passive listener 127.0.0.1:6653").
        timeout_s: how long to wait for the switch's HELLO.

    Raises:
        TestbedError: no HELLO within `timeout_s`, or the switch refused ours.
    """

    def __init__(self, sock: socket.socket, what: str, timeout_s: float = OF_TIMEOUT_S) -> None:
        self.sock = sock
        self.what = what
        self.datapath = _Datapath()
        self.inbox: list = []
        self.closed = False
        self._buf = bytearray()
        self._xid = 0
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send(ofpp.OFPHello(self.datapath))
        deadline = time.monotonic() + timeout_s
        hello = self._next_message(deadline, timeout_s, "the switch's HELLO")
        if not isinstance(hello, ofpp.OFPHello):
            self.close()
            raise TestbedError(f"{what}: the switch answered our HELLO with {hello}")

    def __enter__(self) -> OFClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, msg: Any) -> int:
        """Serialize an os-ken message and send it; returns its xid.

        A message without an xid gets the next one of this connection; one
        built without a datapath (`None`) is given `self.datapath`.

        Raises:
            TestbedError: the connection is closed or the switch does not take the bytes.
        """
        if msg.datapath is None:
            msg.datapath = self.datapath
        if msg.xid is None:
            self._xid = self._xid % 0xFFFF_FFFF + 1
            msg.set_xid(self._xid)
        msg.serialize()
        self._sendall(bytes(msg.buf), f"sending {type(msg).__name__}")
        return msg.xid

    def request(self, msg: Any, timeout_s: float = OF_TIMEOUT_S) -> list:
        """Send `msg` and return its replies, decoded by os-ken.

        For a multipart request, every part up to the one without
        OFPMPF_REPLY_MORE; otherwise the one reply (FEATURES, GET_CONFIG, ROLE,
        ECHO, BARRIER ...). An OFPT_ERROR for `msg` ends the wait and is the
        last item. Messages with other xids go to `inbox`.

        Raises:
            TestbedError: the reply did not come within `timeout_s` (`msg`
                needs no reply, say) or the connection closed.
        """
        xid = self.send(msg)
        what = f"the reply to {type(msg).__name__} (xid {xid:#x})"
        deadline = time.monotonic() + timeout_s
        replies: list = []
        while True:
            reply = self._next_message(deadline, timeout_s, what)
            if reply.xid != xid or isinstance(reply, ASYNC_MESSAGES):
                self.inbox.append(reply)
                continue
            replies.append(reply)
            more = isinstance(reply, ofpp.OFPMultipartReply) and (
                reply.flags & ofp.OFPMPF_REPLY_MORE
            )
            if not more:
                return replies

    def barrier(self, timeout_s: float = OF_TIMEOUT_S) -> list:
        """Send a barrier; return the OFPT_ERRORs (os-ken `OFPErrorMsg`) that came before its reply.

        The switch answers messages in order, so these are the errors for
        everything sent before, including errors `request` set aside in
        `inbox` (they are taken out of it). `[]`: everything was accepted.

        Raises:
            TestbedError: no barrier reply within `timeout_s`, or the switch
                refused the barrier itself.
        """
        xid = self.send(ofpp.OFPBarrierRequest(self.datapath))
        what = f"the barrier reply (xid {xid:#x})"
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self._next_message(deadline, timeout_s, what)
            if msg.xid == xid and isinstance(msg, ofpp.OFPBarrierReply):
                break
            if msg.xid == xid and isinstance(msg, ofpp.OFPErrorMsg):
                raise TestbedError(f"{self.what}: the switch refused a barrier: {msg}")
            self.inbox.append(msg)
        errors = [m for m in self.inbox if isinstance(m, ofpp.OFPErrorMsg)]
        self.inbox = [m for m in self.inbox if not isinstance(m, ofpp.OFPErrorMsg)]
        return errors

    def expect(self, msg_type: type, timeout_s: float = OF_TIMEOUT_S) -> Any:
        """The first message of `msg_type` (an os-ken class, e.g. `OFPPacketIn`), taken from `inbox`.

        Waits for one if `inbox` holds none; what else arrives meanwhile stays in `inbox`.

        Raises:
            TestbedError: none came within `timeout_s`, or the connection closed.
        """
        for i, msg in enumerate(self.inbox):
            if isinstance(msg, msg_type):
                return self.inbox.pop(i)
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self._next_message(deadline, timeout_s, f"an {msg_type.__name__}")
            if isinstance(msg, msg_type):
                return msg
            self.inbox.append(msg)

    def close(self) -> None:
        """Close the connection (harmless if closed)."""
        self.closed = True
        self.sock.close()

    # ----- bytes ------------------------------------------------------------

    def _sendall(self, data: bytes, doing: str) -> None:
        if self.closed:
            raise TestbedError(f"{self.what}: {doing} on a closed connection")
        self.sock.settimeout(OF_TIMEOUT_S)
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise TestbedError(f"{self.what}: {doing}: {exc}") from exc

    def _next_message(self, deadline: float, timeout_s: float, what: str) -> Any:
        """The next message that is not an echo request (those are answered here), decoded."""
        while True:
            raw = self._next_raw(deadline, timeout_s, what)
            version, mtype, length, xid = OFP_HEADER.unpack_from(raw)
            if mtype == ofp.OFPT_ECHO_REQUEST:
                # The switch drops a controller that leaves its echo unanswered.
                reply = OFP_HEADER.pack(version, ofp.OFPT_ECHO_REPLY, length, xid) + raw[8:]
                self._sendall(reply, "answering an echo request")
                continue
            if version != ofp.OFP_VERSION:
                raise TestbedError(
                    f"{self.what}: OpenFlow version {version:#x} in a message of type "
                    f"{mtype} while waiting for {what}: {raw[:64].hex()}"
                )
            msg = ofproto_parser.msg(self.datapath, version, mtype, length, xid, raw)
            if msg is None:  # os-ken logged why; the switch sent bytes it cannot parse
                raise TestbedError(
                    f"{self.what}: os-ken cannot parse a message of type {mtype} "
                    f"(xid {xid:#x}, {length} bytes) from the switch: {raw[:64].hex()}"
                )
            return msg

    def _next_raw(self, deadline: float, timeout_s: float, what: str) -> bytes:
        while True:
            if len(self._buf) >= 8:
                length = OFP_HEADER.unpack_from(self._buf)[2]
                if length < 8:
                    raise TestbedError(
                        f"{self.what}: a message header with length {length} "
                        f"while waiting for {what}: {bytes(self._buf[:64]).hex()}"
                    )
                if len(self._buf) >= length:
                    raw = bytes(self._buf[:length])
                    del self._buf[:length]
                    return raw
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TestbedError(
                    f"{self.what}: timed out after {timeout_s:g} s waiting for {what}"
                )
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(RECV_BYTES)
            except socket.timeout:
                continue  # the deadline check above names what was awaited
            except OSError as exc:
                raise TestbedError(f"{self.what}: {exc} while waiting for {what}") from exc
            if not chunk:
                raise TestbedError(
                    f"{self.what}: the switch closed the connection while we waited for {what}"
                )
            self._buf += chunk


class SwitchTestbed:
    """One emu switch with `n_ports` ports, each ending in an AF_PACKET socket of ours.

    Port P (1-based) is the veth pair `tb<tag>s<P>` (the switch's end) and
    `tb<tag>t<P>` (ours); `tag` is six hex digits unique to this testbed.

    Args:
        n_ports: number of switch ports, 1..64.
        rate_bps: link rate of every port (the switch paces its output at it).
        tables: number of flow tables, 1..255.
        out_dir: where the switch's log goes (default: a /tmp/emu-<run id> directory).
        controllers: "HOST:PORT" addresses the switch connects to actively
            (a real os-ken app under test).
        log_level: the switch's log level.
        active_controller: also have the switch connect to a listener of the
            testbed, so that `controller(active=True)` is a controller
            connection: emu sends PACKET_IN, PORT_STATUS and FLOW_REMOVED on
            those only, never on its passive listener.
        switch: "emu", or "ovs" for an Open vSwitch userspace bridge on the
            same ports (our own daemons, emu.ovs), so that one test holds
            emu to account against OVS. OVS does not pace its ports
            (`rate_bps` is emu's only), and `switch_call` is emu's only.

    Raises:
        ValueError: an argument is out of range; the message names it.
    """

    def __init__(
        self,
        n_ports: int = 4,
        rate_bps: int = 100_000_000,
        tables: int = 8,
        out_dir: str | os.PathLike | None = None,
        controllers: tuple[str, ...] = (),
        log_level: str = "INFO",
        active_controller: bool = False,
        switch: str = "emu",
    ) -> None:
        _check_int("n_ports", n_ports, 1, MAX_PORTS)
        if switch not in SWITCHES:
            raise ValueError(f"switch={switch!r}: one of {', '.join(SWITCHES)}")
        _check_int("rate_bps", rate_bps, 1, None)
        _check_int("tables", tables, 1, MAX_TABLES)
        if isinstance(controllers, str):
            raise ValueError(
                f"controllers={controllers!r}: a tuple of 'HOST:PORT' strings, not one string"
            )
        for addr in controllers:
            _check_hostport(addr)
        if not isinstance(log_level, str) or log_level.upper() not in LOG_LEVELS:
            raise ValueError(f"log_level={log_level!r}: one of {', '.join(LOG_LEVELS)}")
        self.n_ports = n_ports
        self.rate_bps = rate_bps
        self.tables = tables
        self.out_dir = None if out_dir is None else os.fspath(out_dir)
        self.controllers = tuple(controllers)
        self.log_level = log_level.upper()
        self.active_controller = active_controller
        self.switch = switch

        self.run: Run | None = None
        self.tag = ""
        # port_no -> (switch end, test end)
        self.pairs: dict[int, tuple[str, str]] = {}
        self.rig: EmuSwitches | OvsBridges | None = None
        self.log_path = ""
        self.mgmt_path = ""
        self._socks: dict[int, socket.socket] = {}
        self._listener: socket.socket | None = None
        self._clients: list[OFClient] = []
        self._opened = False
        self._closed = False

    # ----- life -------------------------------------------------------------

    def __enter__(self) -> SwitchTestbed:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> SwitchTestbed:
        """Create the ports, start the switch and wait until it answers; returns self.

        Raises:
            TestbedError: an interface could not be made, or the switch exited
                or did not answer in time (the message names its log file).
        """
        if self._opened:
            raise TestbedError("a SwitchTestbed opens once; make a new one")
        self._opened = True
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        self.run = Run.create(log_dir=self.out_dir, label="testbed")
        self.tag = self._free_tag()
        self.pairs = {
            n: (f"tb{self.tag}s{n}", f"tb{self.tag}t{n}") for n in range(1, self.n_ports + 1)
        }
        self.run.add_interfaces([name for pair in self.pairs.values() for name in pair])
        from emu.switch.node import disable_ipv6, disable_offloads  # imports Mininet

        for sw_end, test_end in self.pairs.values():
            _ip(["link", "add", sw_end, "type", "veth", "peer", "name", test_end])
            for name in (sw_end, test_end):
                try:
                    disable_ipv6(name)
                except RuntimeError as exc:
                    raise TestbedError(str(exc)) from None
                disable_offloads(name)
            for name in (sw_end, test_end):
                _ip(["link", "set", "dev", name, "up"])
        for port_no, (_, test_end) in self.pairs.items():
            self._socks[port_no] = _packet_socket(test_end)
        if self.active_controller:
            # Listening before the switch starts, so that its first connect succeeds.
            self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._listener.bind(("127.0.0.1", 0))
            self._listener.listen(4)
        self._start_switch()
        self.drain()

    def _free_tag(self) -> str:
        while True:
            tag = uuid.uuid4().hex[:6]
            if not any(
                interface_exists(f"tb{tag}{end}{n}")
                for n in range(1, self.n_ports + 1)
                for end in "st"
            ):
                return tag

    def extra_args(self) -> list[str]:
        """More arguments of emu's switch (a subclass may add some, as p4-utils' P4Switch allows)."""
        return []

    def _spec(self) -> SwitchSpec:
        controllers = list(self.controllers)
        if self._listener is not None:
            controllers.append("127.0.0.1:%d" % self._listener.getsockname()[1])
        return SwitchSpec(
            name=SWITCH_NAME,
            dpid=DPID,
            ports=tuple((sw_end, n) for n, (sw_end, _) in self.pairs.items()),
            rate_bps=self.rate_bps,
            controllers=tuple(controllers),
            tables=self.tables,
            log_level=self.log_level,
            extra_args=tuple(self.extra_args()),
        )

    def _start_switch(self) -> None:
        """emu's switch or an OVS bridge on the switch ends (emu/rig.py), ready when it answers."""
        if self.switch == "ovs":
            # Named per testbed: two testbeds may share an out_dir.
            directory = os.path.join(self.run.log_dir, f"ovs-{self.tag}")
            self.rig = OvsBridges(self.run, [self._spec()], directory)
            self.log_path = self.rig.log_path
        else:
            self.rig = EmuSwitches(self.run, [self._spec()], log_prefix=f"{self.tag}-")
            self.log_path = os.path.join(self.run.log_dir, f"{self.tag}-{SWITCH_NAME}.log")
            self.mgmt_path = self.rig.mgmt_paths[SWITCH_NAME]
        try:
            self.rig.start(READY_TIMEOUT_S)
        except RigError as exc:
            raise TestbedError(str(exc)) from exc

    def close(self) -> None:
        """Stop the switch (TERM, then KILL), close our sockets, delete every interface.

        Harmless when called again or on a testbed that never opened.

        Raises:
            TestbedError: an interface of the testbed is still there afterwards.
        """
        if self._closed:
            return
        self._closed = True
        for client in self._clients:
            client.close()
        for sock in self._socks.values():
            sock.close()
        if self._listener is not None:
            self._listener.close()
        try:
            if self.rig is not None:
                self.rig.stop()
        finally:
            if self.run is not None:
                self.run.teardown()
        left = [n for pair in self.pairs.values() for n in pair if interface_exists(n)]
        if left:
            raise TestbedError(f"testbed {self.tag}: interfaces left after teardown: {left}")

    # ----- the switch -------------------------------------------------------

    @property
    def ports(self) -> tuple[int, ...]:
        """The switch's port numbers, 1..n_ports."""
        return tuple(self.pairs)

    @property
    def pid(self) -> int | None:
        """The switch process's pid (None before `open`)."""
        if self.rig is None:
            return None
        role = "ovs-vswitchd" if self.switch == "ovs" else f"switch {SWITCH_NAME}"
        return self.rig.started.get(role)

    @property
    def of_addr(self) -> tuple[str, int]:
        """(host, port) of the switch's passive OpenFlow listener."""
        if self.rig is None or not self.rig.of_ports:
            raise TestbedError("the testbed is not open")
        return self.rig.of_addr(SWITCH_NAME)

    @property
    def interfaces(self) -> list[str]:
        """Every interface of the testbed, switch ends and test ends."""
        return [name for pair in self.pairs.values() for name in pair]

    def switch_call(self, cmd: str, timeout_s: float = 5.0, **args: Any) -> Any:
        """Ask the switch over its management socket ("flows", "counters", "ports" ...).

        Raises:
            emu.mgmt.MgmtError: no answer within `timeout_s`, or the switch said no.
            TestbedError: the switch is Open vSwitch, which has no such socket.
        """
        if self.switch != "emu":
            raise TestbedError(f"switch_call({cmd!r}): only emu's switch has a management socket")
        return mgmt.call(self.mgmt_path, cmd, timeout_s=timeout_s, **args)

    @overload
    def ofctl(self, *args: str, check: Literal[True] = True) -> str: ...

    @overload
    def ofctl(self, *args: str, check: Literal[False]) -> subprocess.CompletedProcess: ...

    def ofctl(self, *args: str, check: bool = True) -> str | subprocess.CompletedProcess:
        """Run `ovs-ofctl -O OpenFlow13 ARGS[0] tcp:HOST:PORT ARGS[1:]` against the switch.

        Args:
            args: the ovs-ofctl command ("add-flow", "dump-flows" ...) and its arguments.
            check: raise when ovs-ofctl fails, and return its stdout.

        Returns:
            stdout (check=True), or the `CompletedProcess` (check=False:
            `.returncode`, `.stdout`, `.stderr`).

        Raises:
            TestbedError: ovs-ofctl failed (check=True; the message carries its
                stderr), or did not finish within 20 s.
        """
        try:
            res = ofctl.run(self.of_addr, args, check=check, timeout_s=OFCTL_TIMEOUT_S)
        except ofctl.OfctlError as exc:
            raise TestbedError(f"{exc}; switch log {self.log_path}") from exc
        return res.stdout if check else res

    def controller(self, active: bool = False, timeout_s: float = OF_TIMEOUT_S) -> OFClient:
        """An OpenFlow 1.3 connection to the switch, past the HELLO exchange.

        Args:
            active: False: connect to the switch's passive listener (`of_addr`),
                as ovs-ofctl does. True: take the connection the switch made to
                the testbed (needs `active_controller=True`); only there does
                emu send PACKET_IN, PORT_STATUS and FLOW_REMOVED.
            timeout_s: how long to wait for the connection and the HELLO.

        Raises:
            TestbedError: no connection or no HELLO within `timeout_s`.
        """
        if active:
            if self._listener is None:
                raise ValueError(
                    "controller(active=True) needs SwitchTestbed(active_controller=True)"
                )
            host, port = self._listener.getsockname()
            what = f"the switch's connection to the testbed's controller {host}:{port}"
            self._listener.settimeout(timeout_s)
            try:
                sock, _ = self._listener.accept()
            except socket.timeout as exc:
                raise TestbedError(
                    f"timed out after {timeout_s:g} s waiting for {what}; "
                    f"switch log {self.log_path}"
                ) from exc
        else:
            host, port = self.of_addr
            what = f"the switch's passive listener {host}:{port}"
            try:
                sock = socket.create_connection((host, port), timeout=timeout_s)
            except OSError as exc:
                raise TestbedError(
                    f"connecting to {what}: {exc}; switch log {self.log_path}"
                ) from exc
        client = OFClient(sock, what, timeout_s)
        self._clients.append(client)
        return client

    # ----- frames -----------------------------------------------------------

    def send(self, port_no: int, frame: bytes) -> None:
        """Send one Ethernet frame into switch port `port_no` (1-based).

        `frame` is bytes, or anything `bytes()` takes (a Scapy packet).

        Raises:
            ValueError: no such port, or the frame is shorter than an Ethernet header.
            TestbedError: the kernel refused the frame (longer than the MTU, say).
        """
        sock = self._sock(port_no, "port_no")
        frame = bytes(frame)
        if len(frame) < ETH_HLEN:
            raise ValueError(f"frame: {len(frame)} bytes, shorter than an Ethernet header")
        where = f"port {port_no} ({self.pairs[port_no][1]})"
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_WRITE)
            # A full veth queue takes frames again within microseconds; wait for that.
            if not sel.select(SEND_TIMEOUT_S):
                raise TestbedError(f"{where} took no frame for {SEND_TIMEOUT_S:g} s")
        try:
            sock.send(frame)
        except OSError as exc:
            raise TestbedError(f"sending {len(frame)} bytes into {where}: {exc}") from exc

    def receive(
        self,
        timeout_s: float = 1.0,
        quiet_s: float = 0.2,
        ports: Iterable[int] | None = None,
    ) -> dict[int, list[bytes]]:
        """Every frame the switch sends out of `ports` until they are quiet.

        Collects until no frame came for `quiet_s` (counted from the call, then
        from the last frame) or `timeout_s` passed in all. A frame on a port
        not asked for stays pending.

        Args:
            timeout_s: the longest the call takes.
            quiet_s: how long a silence ends the collection.
            ports: the ports to listen on (default: all).

        Returns:
            port_no -> frames in arrival order, with an entry (maybe empty) for
            every port asked for. A VLAN tag the kernel took into metadata is
            put back into the frame, as on the wire.
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: must be > 0")
        if not quiet_s > 0:
            raise ValueError(f"quiet_s={quiet_s!r}: must be > 0")
        wanted = list(self.pairs) if ports is None else list(ports)
        for port_no in wanted:
            self._sock(port_no, "ports")
        got: dict[int, list[bytes]] = {port_no: [] for port_no in wanted}
        start = last = time.monotonic()
        with selectors.DefaultSelector() as sel:
            for port_no in got:
                sel.register(self._socks[port_no], selectors.EVENT_READ, port_no)
            while True:
                wait_s = min(last + quiet_s, start + timeout_s) - time.monotonic()
                if wait_s <= 0:
                    return got
                for key, _ in sel.select(wait_s):
                    frames = _read_all(key.fileobj)
                    if frames:
                        got[key.data].extend(frames)
                        last = time.monotonic()

    def drain(self) -> int:
        """Discard every frame pending on the test sockets; returns how many."""
        return sum(len(_read_all(sock)) for sock in self._socks.values())

    def _sock(self, port_no: int, name: str) -> socket.socket:
        if port_no not in self._socks:
            raise ValueError(f"{name}: no port {port_no!r} (ports are 1..{self.n_ports})")
        return self._socks[port_no]


# ----- helpers ----------------------------------------------------------------


def _check_int(name: str, value: Any, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r}: an int")
    if value < low or (high is not None and value > high):
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value!r}: must be {allowed}")


def _check_hostport(addr: Any) -> None:
    """What the switch's --controller takes: [tcp:]HOST:PORT."""
    text = addr[4:] if isinstance(addr, str) and addr.startswith("tcp:") else addr
    host, _, port = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"controllers: {addr!r} is not 'HOST:PORT' with a port 1..65535")


def _ip(args: list[str]) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise TestbedError(f"ip {' '.join(args)}: {res.stderr.strip()}")


def _packet_socket(ifname: str) -> socket.socket:
    """A non-blocking AF_PACKET socket on `ifname` that reads what arrives there, not what we send."""
    # Protocol 0 until bound: an ETH_P_ALL socket would queue frames of every
    # interface between socket() and bind().
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.bind((ifname, ETH_P_ALL))
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        # The kernel moves a received VLAN tag into metadata; auxdata gives it back.
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        # Frames to any MAC, as a switch port sends them, must reach us.
        mreq = struct.pack("iHH8s", socket.if_nametoindex(ifname), PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        # A test reads after it has sent: room for a few thousand frames, not ~200.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise TestbedError(f"packet socket on {ifname}: {exc}") from exc
    return sock


def _read_all(sock: socket.socket) -> list[bytes]:
    """Every frame pending on `sock`, VLAN tags put back where the kernel took them out."""
    frames = []
    while True:
        try:
            data, ancdata, _, _ = sock.recvmsg(RECV_BYTES, socket.CMSG_SPACE(TPACKET_AUXDATA.size))
        except BlockingIOError:
            return frames
        for level, kind, aux in ancdata:
            if level == SOL_PACKET and kind == PACKET_AUXDATA and len(aux) >= TPACKET_AUXDATA.size:
                status, _, _, _, _, tci, tpid = TPACKET_AUXDATA.unpack_from(aux)
                # As libpcap does: older kernels flag no VALID bit but give a non-zero tci.
                if status & TP_STATUS_VLAN_VALID or tci:
                    if not status & TP_STATUS_VLAN_TPID_VALID:
                        tpid = ETH_P_8021Q
                    data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
        frames.append(data)

"""emu's OpenFlow 1.3 experimenter extension: SELECT group modes and aggregation jobs.

Owns the wire format of the vendor messages emu's switch understands
beyond OpenFlow 1.3, so that the switch (`emu/switch/openflow.py`) and the
controllers (`controllers/ofmsg.py`) share a single definition.

OpenFlow 1.3 groups have no properties (group properties arrive in 1.5), so
the mode of a SELECT group is set with an ``OFPT_EXPERIMENTER`` message::

    ofp_header        version=4, type=OFPT_EXPERIMENTER (4), length=28, xid
    uint32 experimenter   EMU_EXPERIMENTER_ID = 0x454d5531 ("EMU1")
    uint32 exp_type       EXP_SET_SELECT_MODE = 1
    uint32 group_id       a SELECT group, or OFPG_ALL (0xfffffffc): the
                          switch-wide default for every SELECT group, now and later
    uint16 mode           SELECT_MODE_HASH = 0 (OpenFlow's: 5-tuple hash),
                          SELECT_MODE_FLOWLET = 1, SELECT_MODE_ADAPTIVE = 2
                          or SELECT_MODE_UGAL = 3 (see below)
    uint16 classes        adaptive and UGAL modes: bit p set = packets of
                          priority p take adaptive routing (0 = every
                          priority, CLASSES_ALL); 0 in the other modes (this
                          was padding before adaptive mode: a hash or flowlet
                          message of an older sender is unchanged)
    uint32 flowlet_gap_us flowlet mode: the idle gap that ends a flowlet,
                          microseconds (> 0); UGAL mode: the bias in bytes
                          (>= 0, below); 0 in hash and adaptive modes

A message for one group sets that group's mode; one for OFPG_ALL sets the
switch-wide default and drops every group's own mode. Deleting a group drops
its own mode. One mode holds per group: a later message replaces the earlier.

Flowlet mode (CONGA, LetFlow): a packet whose flow (the same 5-tuple hash a
hash-mode group uses) has been idle for longer than the gap starts a new
flowlet, and the switch sends that flowlet to the live bucket whose egress
port has the fewest bytes queued (all priorities; ties broken by the hash, so
an idle switch spreads like ECMP). Packets inside a flowlet stay on its
bucket, which keeps TCP in order as long as the gap exceeds the difference in
path delays. A bucket that dies ends its flowlets at once.

Adaptive mode (per-packet adaptive routing, as InfiniBand switches' AR and
Spectrum-X do it; emu/switch/adaptive.py is the specification, the C path's
FP_OP_ADAPT does the same): every packet of an enabled class is placed on its
own, in the data plane, with no controller round trip:

- the candidates are the group's live buckets (weight > 0, watch port and
  group live); weights are otherwise ignored;
- a bucket's egress port is the lowest physical port it outputs to (a
  bucket with none of its own, one that chains to another group, counts as
  an empty port that is never paused);
- a port paused by PFC for the packet's priority is not a candidate, unless
  every port is paused (then all are, and the packet waits where it would
  wait least); PFC composes with it: a paused path is routed around;
- among the candidates the packet takes the port with the fewest bytes
  queued at its own priority and the priorities above it: under strict
  priority (emu/switch/scheduler.py) those are exactly the bytes that leave
  before it, so a deep lossy queue does not push the lossless class away
  from a port on which it would not wait; ties (idle ports always tie) are
  broken by the flow's 5-tuple hash plus the switch's adaptive decisions so
  far (adaptive.py `tie_index`), so a flow's packets spread over equally
  queued ports as packet spraying does: by the hash alone a flow stayed on
  one path until a queue built, and flows that met on a fat-tree's downlinks
  stayed met, as under ECMP, since no upstream queue shows it;
- a packet's priority is the one its switch will queue it at: the queue a
  set_queue action before the group chose, else the DSCP of its IPv4 header
  (untagged or behind one 802.1Q tag) through the switch's DSCP map, else 0.

A packet of a class that is not enabled goes through the group as in hash
mode. Adaptive routing reorders packets of a flow whenever it moves them:
pair it with receivers that tolerate it (RoCE with out-of-order placement),
or keep it off the classes whose receivers do not.

UGAL mode (non-minimal adaptive routing, UGAL-L: Singh, "Load-Balanced
Routing in Interconnection Networks", PhD thesis, Stanford 2005; as Kim,
Dally, Scott, Abts run it on a dragonfly, "Technology-Driven,
Highly-Scalable Dragonfly Topology", ISCA 2008): the group's buckets are a
destination's minimal next hops *and* its non-minimal (Valiant) ones, and
**each bucket's weight says the path through it**: ``2 x H`` for a
minimal bucket, ``2 x H + 1`` for a non-minimal one, H its length in hops
(weights 2..65535; 0 is a dead bucket, as OpenFlow's weight 0 is). The
flag is needed because path length alone does not say which path is
minimal: a Valiant path can be as short as the minimal one, or shorter
(through a third group, two global hops, against local-global-local).
Every packet of an enabled class is placed as in adaptive mode (the same
candidates, paused ports passed over unless all are, bytes queued at the
packet's priority and above), but on the queue weighted by path length,
UGAL's q x H:

- cost = q x H, plus the bias (bytes) for a non-minimal bucket; the packet
  takes the least cost, then a minimal bucket over a non-minimal one, then
  the least H, so an idle switch and empty queues send it minimally, as do
  equal products; remaining ties go by the flow hash (not rotated: a UGAL
  group's ties are minimal paths of one length);
- when no minimal bucket is live, the live ones of the least H stand for
  the minimal path (no bias on them);
- a packet of a class that is not enabled hashes over the minimal buckets
  only (weights otherwise ignored): UGAL never sends it the long way.

Kim et al. compare the minimal path with one random non-minimal path; a
UGAL group compares all of them with its minimal ones and takes the least
weighted queue (its Valiant buckets are few: a router's own global links).
The bias is the offset UGAL variants add to the non-minimal side so that a
packet or two queued minimally does not send traffic the long way (0:
Kim et al.'s rule as published).

Why a mode of its own and not adaptive mode's weights: in adaptive mode
weights are ignored (0 = dead) because routing extensions re-weight
routing's SELECT groups (Hedera's hot ports, `controllers/adaptive.py`;
products of several), and a path length must not mix with a share. A UGAL
group is installed by the UGAL extension (`controllers/ugal.py`) in a
group-id band of its own, which no other manager re-weights, so its weights
mean one thing. A switch that does not know the mode answers the message
with an error and hashes the group by its weights: longer paths then get
larger shares, so install UGAL groups only on emu's switches.

The switch answers nothing on success (send a barrier to know it was
applied) and an ``OFPT_ERROR`` otherwise: ``OFPET_BAD_REQUEST`` /
``OFPBRC_BAD_EXPERIMENTER`` for another experimenter id, ``OFPBRC_BAD_EXP_TYPE``
for an unknown exp_type, ``OFPBRC_BAD_LEN`` for a wrong length;
``OFPET_GROUP_MOD_FAILED`` / ``OFPGMFC_UNKNOWN_GROUP`` for a group that does
not exist, ``OFPGMFC_BAD_TYPE`` for a group that is not SELECT or an unknown
mode, and ``OFPGMFC_BAD_BUCKET`` for a zero gap in flowlet mode or a gap
other than zero in hash or adaptive mode; an ``OFPET_EXPERIMENTER`` error
(type 0xFFFF, experimenter EMU_EXPERIMENTER_ID) with exp_type
SELECT_ERR_BAD_CLASSES (2) for classes with a bit above priority 7, or
classes other than zero in hash or flowlet mode. A rejected message changes
nothing. (A UGAL group's weights are not checked here: any weight is a path
length, and a group modified later keeps its mode.)

Aggregation jobs (SHARP-like reduction engines, emu/switch/aggregation.py) are
configured with two more exp_types, sent by controllers/aggregation.py::

    EXP_AGG_JOB_SET = 2   add a job to this switch's engine, or replace it
        uint16 job_id
        uint16 nslots         slots (chunks in flight) the job holds here, 1..
        uint8  flags          AGG_FLAG_ROOT (1): this switch is the tree's root
        uint8  n_children     1..64
        uint16 pad
        uint32 parent_port    the port towards the root (0 at the root)
        4 bytes job_ip        the job's address: aggregation frames are sent
        6 bytes job_mac       to it, and flows steer it to the engine
        uint16 pad
        n_children x (uint32 port, 6 bytes mac, uint16 pad, 4 bytes ip):
                              a child port and where results sent down it are
                              addressed (a host: its own MAC and IP; a switch:
                              the job's)
    EXP_AGG_JOB_DEL = 3   remove a job and free its slots
        uint16 job_id         (AGG_JOB_ALL = 0xFFFF: every job)
        uint16 pad

The engine counts each child once per chunk and sums what it expects from
``n_children`` contributions. Errors: ``OFPBRC_BAD_LEN`` for a wrong length,
``OFPBRC_BAD_PORT`` for a parent or child port the switch does not have (or a
root with a parent, or a non-root without one), and, when the switch's slot
pool cannot hold ``nslots`` more, an ``OFPET_EXPERIMENTER`` error (type
0xFFFF) with ``exp_type`` = AGG_ERR_NO_SLOTS (1) and experimenter
EMU_EXPERIMENTER_ID: the manager then refuses the job. Flows steer a job's
frames to the engine with ``output:AGG_PORT``, a logical port number.

The id is not ONF-registered: it is private to emu, and an OpenFlow switch
that is not emu's rejects the message with ``OFPBRC_BAD_EXPERIMENTER``.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Optional

EMU_EXPERIMENTER_ID = 0x454D5531
EXP_SET_SELECT_MODE = 1
EXP_AGG_JOB_SET = 2
EXP_AGG_JOB_DEL = 3

SELECT_MODE_HASH = 0
SELECT_MODE_FLOWLET = 1
SELECT_MODE_ADAPTIVE = 2
SELECT_MODE_UGAL = 3
MODE_NAMES = {
    SELECT_MODE_HASH: "hash",
    SELECT_MODE_FLOWLET: "flowlet",
    SELECT_MODE_ADAPTIVE: "adaptive",
    SELECT_MODE_UGAL: "ugal",
}
#: Modes whose `classes` field says which priorities choose per packet.
CLASS_MODES = (SELECT_MODE_ADAPTIVE, SELECT_MODE_UGAL)

#: Priorities (traffic classes) a switch has: 802.1Q's eight.
N_CLASSES = 8
#: `classes` of adaptive mode: every priority (on the wire, 0 says the same).
CLASSES_ALL = 0xFF
#: exp_type of the OFPET_EXPERIMENTER error for a bad `classes` field.
SELECT_ERR_BAD_CLASSES = 2

OFPG_ALL = 0xFFFFFFFC
OFPT_EXPERIMENTER = 4
OFP_VERSION = 4

_BODY = struct.Struct("!IHHI")  # group_id, mode, classes, flowlet_gap_us
SET_SELECT_MODE_LEN = 8 + 8 + _BODY.size  # header + experimenter/exp_type + body = 28

#: Default flowlet gap: 100 us at the modelled hardware rate (CONGA, LetFlow).
DEFAULT_FLOWLET_GAP_MODELLED_S = 100e-6


class ExtensionError(ValueError):
    """A SET_SELECT_MODE body that cannot be applied; `reason` names the field."""


@dataclass(frozen=True)
class SetSelectMode:
    """The decoded body of EXP_SET_SELECT_MODE (`classes`: the wire's 16 bits, unchecked)."""

    group_id: int
    mode: int
    flowlet_gap_us: int
    classes: int = 0

    @property
    def gap_s(self) -> float:
        return self.flowlet_gap_us * 1e-6

    @property
    def bias_bytes(self) -> int:
        """UGAL mode's bias: the same 32 bits that carry flowlet mode's gap."""
        return self.flowlet_gap_us


def ugal_weight(hops: int, minimal: bool) -> int:
    """A UGAL bucket's weight: 2 x its path length in hops, plus 1 off the minimal path.

    Examples:
        >>> ugal_weight(2, True), ugal_weight(3, False)
        (4, 7)

    Raises:
        ExtensionError: a length outside 1..32767 (the weight is 16 bits).
    """
    if not 1 <= hops <= 0x7FFF:
        raise ExtensionError(f"a UGAL path of {hops} hops: 1..32767")
    return 2 * hops + (0 if minimal else 1)


def pack_set_select_mode(
    group_id: int, mode: int, flowlet_gap_us: int = 0, classes: int = 0, bias_bytes: int = 0
) -> bytes:
    """The experimenter *data* (after experimenter id and exp_type) of SET_SELECT_MODE.

    Args:
        group_id: a SELECT group, or OFPG_ALL for the switch-wide default.
        mode: SELECT_MODE_HASH, SELECT_MODE_FLOWLET, SELECT_MODE_ADAPTIVE or
            SELECT_MODE_UGAL.
        flowlet_gap_us: flowlet mode's gap (1..2^32-1); ignored in the other modes.
        classes: adaptive and UGAL modes' priorities as a bit mask (0 or
            CLASSES_ALL: all).
        bias_bytes: UGAL mode's bias (0..2^32-1); ignored in the other modes.

    Raises:
        ExtensionError: an unknown mode, a flowlet gap or bias out of range,
            or classes outside 0..0xFF or given for hash or flowlet mode.
    """
    if mode not in MODE_NAMES:
        raise ExtensionError(f"unknown select mode {mode} (known: {MODE_NAMES})")
    if mode == SELECT_MODE_FLOWLET and not 0 < flowlet_gap_us <= 0xFFFFFFFF:
        raise ExtensionError(f"flowlet_gap_us must be 1..2^32-1, got {flowlet_gap_us}")
    if mode == SELECT_MODE_UGAL and not 0 <= bias_bytes <= 0xFFFFFFFF:
        raise ExtensionError(f"bias_bytes must be 0..2^32-1, got {bias_bytes}")
    if not 0 <= classes <= CLASSES_ALL:
        raise ExtensionError(f"classes must be a mask of priorities 0..7, got {classes:#x}")
    if classes and mode not in CLASS_MODES:
        raise ExtensionError(f"classes {classes:#x} given for {MODE_NAMES[mode]} mode")
    param = {SELECT_MODE_FLOWLET: flowlet_gap_us, SELECT_MODE_UGAL: bias_bytes}.get(mode, 0)
    return _BODY.pack(group_id, mode, classes, param)


def unpack_set_select_mode(data: bytes) -> SetSelectMode:
    """Decode the experimenter data of SET_SELECT_MODE; raises ExtensionError on bad length."""
    if len(data) != _BODY.size:
        raise ExtensionError(f"SET_SELECT_MODE body is {len(data)} bytes, expected {_BODY.size}")
    group_id, mode, classes, gap = _BODY.unpack(data)
    return SetSelectMode(group_id, mode, gap, classes)


def set_select_mode_message(
    group_id: int,
    mode: int,
    flowlet_gap_us: int = 0,
    xid: int = 0,
    classes: int = 0,
    bias_bytes: int = 0,
) -> bytes:
    """A whole OFPT_EXPERIMENTER message (for tests and tools that speak raw OpenFlow)."""
    body = struct.pack("!II", EMU_EXPERIMENTER_ID, EXP_SET_SELECT_MODE)
    body += pack_set_select_mode(group_id, mode, flowlet_gap_us, classes, bias_bytes)
    return struct.pack("!BBHI", OFP_VERSION, OFPT_EXPERIMENTER, 8 + len(body), xid) + body


def classes_mask(text: str) -> int:
    """The priorities of a class list (``"3"``, ``"0,3"``, ``"all"``) as a mask.

    Examples:
        >>> classes_mask("3"), classes_mask("0,3"), classes_mask("all")
        (8, 9, 255)

    Raises:
        ExtensionError: not "all" nor a comma-separated list of priorities 0..7.
    """
    text = text.strip().lower()
    if text == "all":
        return CLASSES_ALL
    mask = 0
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= N_CLASSES:
            raise ExtensionError(
                f"class {part!r} in {text!r}: expected priorities 0..7 (e.g. 3 or 0,3) or all"
            )
        mask |= 1 << int(part)
    return mask


def classes_of(mask: int) -> list[int]:
    """The priorities a mask enables, lowest first (0 on the wire: all of them)."""
    mask = mask or CLASSES_ALL
    return [p for p in range(N_CLASSES) if mask >> p & 1]


def parse_adaptive_spec(text: str) -> dict[Optional[int], int]:
    """Which switches run adaptive routing for which classes: dpid (None: every
    switch not named) -> class mask (0: none).

    The spec is ``;``-separated entries ``[DPID=]CLASSES``, CLASSES as
    `classes_mask` reads them or ``none``; a DPID is decimal or 0x-hex.

    Examples:
        >>> parse_adaptive_spec("3")
        {None: 8}
        >>> parse_adaptive_spec("0,3;0x10001=none;65538=all")
        {None: 9, 65537: 0, 65538: 255}

    Raises:
        ExtensionError: an entry that is not one of these, or a switch named twice.
    """
    out: dict[Optional[int], int] = {}
    for entry in text.split(";"):
        who, sep, classes = entry.strip().rpartition("=")
        dpid: Optional[int] = None
        if sep:
            try:
                dpid = int(who.strip(), 0)
            except ValueError:
                raise ExtensionError(f"{entry!r}: {who!r} is not a dpid") from None
            if not 0 <= dpid < 2**64:
                raise ExtensionError(f"{entry!r}: dpid out of range")
        if dpid in out:
            raise ExtensionError(f"{text!r}: {'every switch' if dpid is None else dpid} twice")
        out[dpid] = 0 if classes.strip().lower() == "none" else classes_mask(classes)
    return out


#: How a dragonfly routes between groups (the UGAL extension, controllers/ugal.py):
#: routing's shortest paths, UGAL's choice per packet, or always Valiant's.
DRAGONFLY_ROUTINGS = ("minimal", "ugal", "valiant")


@dataclass(frozen=True)
class DragonflyRouting:
    """A dragonfly's routing between groups, as `parse_dragonfly_routing` reads it.

    `classes` and `bias_bytes` are UGAL mode's (the priorities a UGAL group
    places per packet, the bias of its non-minimal buckets).
    """

    mode: str = "minimal"
    classes: int = CLASSES_ALL
    bias_bytes: int = 0

    def spec(self) -> str:
        """The text `parse_dragonfly_routing` reads back."""
        if self.mode != "ugal":
            return self.mode
        classes = ",".join(map(str, classes_of(self.classes)))
        return f"ugal:{'all' if self.classes == CLASSES_ALL else classes}:{self.bias_bytes}"


def parse_dragonfly_routing(text: str) -> DragonflyRouting:
    """``minimal``, ``valiant`` or ``ugal[:CLASSES[:BIAS_BYTES]]`` (CLASSES as
    `classes_mask` reads them; default all classes, bias 0).

    Examples:
        >>> parse_dragonfly_routing("ugal")
        DragonflyRouting(mode='ugal', classes=255, bias_bytes=0)
        >>> parse_dragonfly_routing("ugal:0,3:3000")
        DragonflyRouting(mode='ugal', classes=9, bias_bytes=3000)

    Raises:
        ExtensionError: another mode, classes or bias, named with what is allowed.
    """
    mode, *rest = [part.strip() for part in text.strip().lower().split(":")]
    if mode not in DRAGONFLY_ROUTINGS or (rest and mode != "ugal") or len(rest) > 2:
        raise ExtensionError(
            f"dragonfly routing {text!r}: expected minimal, valiant or "
            "ugal[:CLASSES[:BIAS_BYTES]] (e.g. ugal, ugal:3, ugal:all:3000)"
        )
    classes = classes_mask(rest[0]) if rest else CLASSES_ALL
    bias = rest[1] if len(rest) > 1 else "0"
    if not bias.isdigit() or int(bias) > 0xFFFFFFFF:
        raise ExtensionError(f"dragonfly routing {text!r}: bias {bias!r} is not 0..2^32-1 bytes")
    return DragonflyRouting(mode, classes, int(bias))


def parse_dragonfly_groups(text: str) -> dict[int, int]:
    """Which dragonfly group each router is in: ``DPID=GROUP,...`` (DPID decimal or
    0x-hex) -> {dpid: group}.

    Examples:
        >>> parse_dragonfly_groups("0x10101=1, 0x10102=1,66049=2")
        {65793: 1, 65794: 1, 66049: 2}

    Raises:
        ExtensionError: an entry that is not DPID=GROUP, or a router named twice.
    """
    out: dict[int, int] = {}
    for entry in text.split(","):
        who, sep, group = entry.strip().partition("=")
        try:
            dpid, number = int(who.strip(), 0), int(group.strip(), 0)
        except ValueError:
            raise ExtensionError(f"dragonfly groups: {entry!r} is not DPID=GROUP") from None
        if not sep or dpid in out or not 0 <= dpid < 2**64:
            raise ExtensionError(f"dragonfly groups: {entry!r} (each router once, DPID=GROUP)")
        out[dpid] = number
    return out


def gap_us_for(
    link_rate_bps: float,
    modelled_gbps: float,
    gap_modelled_s: float = DEFAULT_FLOWLET_GAP_MODELLED_S,
) -> int:
    """The flowlet gap at the emulated rate for a gap given at the modelled rate.

    Time scales with the rate ratio (a frame takes modelled/emulated times longer
    on the emulated link); floored at three full-size frames' time, below which
    every back-to-back burst would be split.
    """
    if link_rate_bps <= 0 or modelled_gbps <= 0:
        raise ValueError("link_rate_bps and modelled_gbps must be positive")
    scaled = gap_modelled_s * modelled_gbps * 1e9 / link_rate_bps
    floor = 3 * 1514 * 8 / link_rate_bps
    return max(1, int(round(max(scaled, floor) * 1e6)))


# ----------------------------------------------------------------- aggregation jobs

#: The logical port of the switch's reduction engine (below OFPP_MAX, above any real port).
AGG_PORT = 0xFFFFFE00
#: UDP destination port of aggregation frames (emu/proto/agg.py), which steering flows match.
AGG_UDP_PORT = 4792
AGG_FLAG_ROOT = 1
AGG_JOB_ALL = 0xFFFF
AGG_MAX_CHILDREN = 64
#: exp_type of the OFPET_EXPERIMENTER error a switch answers when its slots run out.
AGG_ERR_NO_SLOTS = 1
OFPET_EXPERIMENTER = 0xFFFF

_AGG_JOB = struct.Struct("!HHBBxxI4s6sxx")  # 24 bytes
_AGG_CHILD = struct.Struct("!I6sxx4s")  # 16 bytes
_AGG_DEL = struct.Struct("!Hxx")


@dataclass(frozen=True)
class AggChild:
    """A child port of a job's tree and where results sent down it are addressed."""

    port: int
    mac: str
    ip: str


@dataclass(frozen=True)
class AggJobSet:
    """The decoded body of EXP_AGG_JOB_SET."""

    job_id: int
    nslots: int
    root: bool
    parent_port: int
    job_ip: str
    job_mac: str
    children: tuple[AggChild, ...]


def _mac_bytes(mac: str) -> bytes:
    raw = bytes.fromhex(mac.replace(":", ""))
    if len(raw) != 6:
        raise ExtensionError(f"bad MAC address {mac!r}")
    return raw


def _ip_bytes(ip: str) -> bytes:
    try:
        return socket.inet_pton(socket.AF_INET, ip)
    except OSError:
        raise ExtensionError(f"bad IPv4 address {ip!r}") from None


def pack_agg_job_set(job: AggJobSet) -> bytes:
    """The experimenter data of EXP_AGG_JOB_SET."""
    if not 1 <= len(job.children) <= AGG_MAX_CHILDREN:
        raise ExtensionError(f"{len(job.children)} children: allowed 1..{AGG_MAX_CHILDREN}")
    if not 1 <= job.nslots <= 0xFFFF or not 0 <= job.job_id < AGG_JOB_ALL:
        raise ExtensionError(f"job {job.job_id} with {job.nslots} slots: out of range")
    ports = [job.parent_port] + [c.port for c in job.children]
    if not all(0 <= p <= 0xFFFFFFFF for p in ports):
        raise ExtensionError(f"port numbers {ports} out of range 0..2^32-1")
    out = _AGG_JOB.pack(
        job.job_id,
        job.nslots,
        AGG_FLAG_ROOT if job.root else 0,
        len(job.children),
        job.parent_port,
        _ip_bytes(job.job_ip),
        _mac_bytes(job.job_mac),
    )
    for c in job.children:
        out += _AGG_CHILD.pack(c.port, _mac_bytes(c.mac), _ip_bytes(c.ip))
    return out


def unpack_agg_job_set(data: bytes) -> AggJobSet:
    """Decode EXP_AGG_JOB_SET data; ExtensionError on a bad length or count."""
    if len(data) < _AGG_JOB.size:
        raise ExtensionError(
            f"AGG_JOB_SET body is {len(data)} bytes, need at least {_AGG_JOB.size}"
        )
    job_id, nslots, flags, n, parent, ip, mac = _AGG_JOB.unpack_from(data)
    if len(data) != _AGG_JOB.size + n * _AGG_CHILD.size:
        raise ExtensionError(
            f"AGG_JOB_SET body is {len(data)} bytes; {n} children need "
            f"{_AGG_JOB.size + n * _AGG_CHILD.size}"
        )
    if not 1 <= n <= AGG_MAX_CHILDREN or nslots == 0 or job_id == AGG_JOB_ALL:
        raise ExtensionError(f"AGG_JOB_SET job {job_id}: {n} children, {nslots} slots")
    children = []
    for i in range(n):
        port, cmac, cip = _AGG_CHILD.unpack_from(data, _AGG_JOB.size + i * _AGG_CHILD.size)
        children.append(AggChild(port, cmac.hex(":"), socket.inet_ntoa(cip)))
    return AggJobSet(
        job_id,
        nslots,
        bool(flags & AGG_FLAG_ROOT),
        parent,
        socket.inet_ntoa(ip),
        mac.hex(":"),
        tuple(children),
    )


def pack_agg_job_del(job_id: int) -> bytes:
    """The experimenter data of EXP_AGG_JOB_DEL (AGG_JOB_ALL: every job)."""
    return _AGG_DEL.pack(job_id)


def unpack_agg_job_del(data: bytes) -> int:
    if len(data) != _AGG_DEL.size:
        raise ExtensionError(f"AGG_JOB_DEL body is {len(data)} bytes, expected {_AGG_DEL.size}")
    return _AGG_DEL.unpack(data)[0]


def experimenter_message(exp_type: int, data: bytes, xid: int = 0) -> bytes:
    """A whole OFPT_EXPERIMENTER message of emu's (for tests and raw-OpenFlow tools)."""
    body = struct.pack("!II", EMU_EXPERIMENTER_ID, exp_type) + data
    return struct.pack("!BBHI", OFP_VERSION, OFPT_EXPERIMENTER, 8 + len(body), xid) + body

"""emu's OpenFlow 1.3 experimenter extension: switch-local adaptive (flowlet) SELECT groups.

Owns the wire format of the one vendor message emu's switch understands
beyond OpenFlow 1.3, so that the switch (`emu/switch/openflow.py`) and the
controllers (`controllers/ofmsg.py`) share a single definition.

OpenFlow 1.3 groups have no properties (group properties arrive in 1.5), so
the mode of a SELECT group is set with an ``OFPT_EXPERIMENTER`` message::

    ofp_header        version=4, type=OFPT_EXPERIMENTER (4), length=28, xid
    uint32 experimenter   EMU_EXPERIMENTER_ID = 0x454d5531 ("EMU1")
    uint32 exp_type       EXP_SET_SELECT_MODE = 1
    uint32 group_id       a SELECT group, or OFPG_ALL (0xfffffffc): the
                          switch-wide default for every SELECT group, now and later
    uint16 mode           SELECT_MODE_HASH = 0 (OpenFlow's: 5-tuple hash) or
                          SELECT_MODE_FLOWLET = 1 (see below)
    uint16 pad
    uint32 flowlet_gap_us the idle gap that ends a flowlet, microseconds (> 0
                          for flowlet mode; ignored for hash)

Flowlet mode (CONGA, LetFlow): a packet whose flow (the same 5-tuple hash a
hash-mode group uses) has been idle for longer than the gap starts a new
flowlet, and the switch sends that flowlet to the live bucket whose egress
port has the fewest bytes queued (ties broken by the hash, so an idle switch
spreads like ECMP). Packets inside a flowlet stay on its bucket, which keeps
TCP in order as long as the gap exceeds the difference in path delays. A
bucket that dies ends its flowlets at once.

The switch answers nothing on success (send a barrier to know it was
applied) and an ``OFPT_ERROR`` otherwise: ``OFPET_BAD_REQUEST`` /
``OFPBRC_BAD_EXPERIMENTER`` for another experimenter id, ``OFPBRC_BAD_EXP_TYPE``
for an unknown exp_type, ``OFPBRC_BAD_LEN`` for a wrong length;
``OFPET_GROUP_MOD_FAILED`` / ``OFPGMFC_UNKNOWN_GROUP`` for a group that does
not exist, ``OFPGMFC_BAD_TYPE`` for a group that is not SELECT or an unknown
mode, and ``OFPGMFC_BAD_BUCKET`` for a zero gap in flowlet mode.

The id is not ONF-registered: it is private to emu, and an OpenFlow switch
that is not emu's rejects the message with ``OFPBRC_BAD_EXPERIMENTER``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EMU_EXPERIMENTER_ID = 0x454D5531
EXP_SET_SELECT_MODE = 1

SELECT_MODE_HASH = 0
SELECT_MODE_FLOWLET = 1
MODE_NAMES = {SELECT_MODE_HASH: "hash", SELECT_MODE_FLOWLET: "flowlet"}

OFPG_ALL = 0xFFFFFFFC
OFPT_EXPERIMENTER = 4
OFP_VERSION = 4

_BODY = struct.Struct("!IHxxI")  # group_id, mode, pad, flowlet_gap_us
SET_SELECT_MODE_LEN = 8 + 8 + _BODY.size  # header + experimenter/exp_type + body = 28

#: Default flowlet gap: 100 us at the modelled hardware rate (CONGA, LetFlow).
DEFAULT_FLOWLET_GAP_MODELLED_S = 100e-6


class ExtensionError(ValueError):
    """A SET_SELECT_MODE body that cannot be applied; `reason` names the field."""


@dataclass(frozen=True)
class SetSelectMode:
    """The decoded body of EXP_SET_SELECT_MODE."""

    group_id: int
    mode: int
    flowlet_gap_us: int

    @property
    def gap_s(self) -> float:
        return self.flowlet_gap_us * 1e-6


def pack_set_select_mode(group_id: int, mode: int, flowlet_gap_us: int = 0) -> bytes:
    """The experimenter *data* (after experimenter id and exp_type) of SET_SELECT_MODE."""
    if mode not in MODE_NAMES:
        raise ExtensionError(f"unknown select mode {mode} (known: {MODE_NAMES})")
    if mode == SELECT_MODE_FLOWLET and not 0 < flowlet_gap_us <= 0xFFFFFFFF:
        raise ExtensionError(f"flowlet_gap_us must be 1..2^32-1, got {flowlet_gap_us}")
    return _BODY.pack(group_id, mode, flowlet_gap_us if mode == SELECT_MODE_FLOWLET else 0)


def unpack_set_select_mode(data: bytes) -> SetSelectMode:
    """Decode the experimenter data of SET_SELECT_MODE; raises ExtensionError on bad length."""
    if len(data) != _BODY.size:
        raise ExtensionError(f"SET_SELECT_MODE body is {len(data)} bytes, expected {_BODY.size}")
    return SetSelectMode(*_BODY.unpack(data))


def set_select_mode_message(group_id: int, mode: int, flowlet_gap_us: int = 0,
                            xid: int = 0) -> bytes:
    """A whole OFPT_EXPERIMENTER message (for tests and tools that speak raw OpenFlow)."""
    body = struct.pack("!II", EMU_EXPERIMENTER_ID, EXP_SET_SELECT_MODE)
    body += pack_set_select_mode(group_id, mode, flowlet_gap_us)
    return struct.pack("!BBHI", OFP_VERSION, OFPT_EXPERIMENTER, 8 + len(body), xid) + body


def gap_us_for(link_rate_bps: float, modelled_gbps: float,
               gap_modelled_s: float = DEFAULT_FLOWLET_GAP_MODELLED_S) -> int:
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

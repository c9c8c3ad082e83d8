"""IEEE 802.1Qbb priority flow control frames: where a PFC frame is built and read.

Owns the wire format of PFC (MAC control, ethertype 0x8808, opcode 0x0101,
a class-enable vector and eight per-priority pause times in quanta) and the
conversion of quanta to time. Frames are built once with `struct` and
patched on the hot path; tests check them against Scapy's
`MACControlClassBasedFlowControl`, and reports dissect them with Scapy or
tshark.

One quantum is 512 bit times at the port's speed (802.1Qbb / 802.3 Annex
31B). Scapy's own pause-time helper assumes other speeds, so the conversion
is done here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from emu.proto import headers

ETH_TYPE_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PAUSE_OPCODE = 0x0001  # 802.3x link-level PAUSE (all priorities)
PFC_DST_MAC = "01:80:c2:00:00:01"
BITS_PER_QUANTUM = 512
MAX_QUANTA = 0xFFFF
PFC_FRAME_BYTES = 60  # minimum Ethernet frame without FCS

_QUANTA = struct.Struct("!8H")


def quanta_to_s(quanta: int, rate_bps: float) -> float:
    """Pause time of `quanta` at `rate_bps` (one quantum = 512 bit times)."""
    return quanta * BITS_PER_QUANTUM / rate_bps


def s_to_quanta(seconds: float, rate_bps: float) -> int:
    """The quanta (capped at 0xFFFF) that pause for at least `seconds`."""
    q = -(-seconds * rate_bps // BITS_PER_QUANTUM)
    return int(min(MAX_QUANTA, max(0, q)))


def template(src_mac: str) -> bytes:
    """A PFC frame from `src_mac` with no class enabled, padded to the minimum frame."""
    head = headers.ethernet(PFC_DST_MAC, src_mac, ETH_TYPE_MAC_CONTROL)
    frame = head + struct.pack("!HH", PFC_OPCODE, 0) + _QUANTA.pack(*[0] * 8)
    return frame + bytes(PFC_FRAME_BYTES - len(frame))


def build(tmpl: bytes, quanta_by_prio: dict[int, int]) -> bytes:
    """Patch `tmpl` (from `template`) to pause each listed priority for its quanta.

    A priority listed with 0 quanta is enabled with pause time 0: XON, resume now.
    """
    vector = 0
    quanta = [0] * 8
    for prio, q in quanta_by_prio.items():
        vector |= 1 << prio
        quanta[prio] = q
    return tmpl[:14] + struct.pack("!HH", PFC_OPCODE, vector) + _QUANTA.pack(*quanta) + tmpl[34:]


@dataclass(frozen=True)
class PfcFrame:
    """A decoded PFC frame: class-enable vector and the eight pause times."""

    vector: int
    quanta: tuple[int, ...]

    def enabled(self) -> list[int]:
        return [p for p in range(8) if self.vector >> p & 1]


def is_mac_control(frame: bytes) -> bool:
    """Any 802.3 MAC control frame (PFC or PAUSE): consumed by the port, never forwarded."""
    return frame[12:14] == b"\x88\x08"


def parse(frame: bytes) -> PfcFrame | None:
    """Decode a PFC frame; an 802.3x PAUSE becomes 'all priorities'. None otherwise."""
    if len(frame) < 18 or not is_mac_control(frame):
        return None
    opcode = struct.unpack_from("!H", frame, 14)[0]
    if opcode == PAUSE_OPCODE:
        (q,) = struct.unpack_from("!H", frame, 16)
        return PfcFrame(0xFF, (q,) * 8)
    if opcode != PFC_OPCODE or len(frame) < 34:
        return None
    vector = struct.unpack_from("!H", frame, 16)[0] & 0xFF
    return PfcFrame(vector, _QUANTA.unpack_from(frame, 18))

"""OFPP_NORMAL: the traditional L2 switching an OpenFlow switch may offer beside its tables.

Owns the MAC learning table of one switch and the decision for a frame sent
to NORMAL: learn (VLAN, source MAC) -> in_port, then send a unicast frame to
the port its destination was learned on, and flood anything else (broadcast,
multicast, unknown destinations) to every live port but the one it came in
on and those configured OFPPC_NO_FWD, as OVS's NORMAL does for a bridge
without VLAN configuration. Entries age out after `AGE_S` without traffic
(IEEE 802.1Q's default of 300 s). Pure logic: time comes in as `now`.

A lab's first flow is often `actions=NORMAL`: this is what makes it work.
"""

from __future__ import annotations

from emu.switch.ports import OFPPC_NO_FWD, PortState

AGE_S = 300.0
MAX_ENTRIES = 8192


class MacTable:
    """(VLAN id, MAC) -> (port, last seen) for one switch."""

    def __init__(self, age_s: float = AGE_S, max_entries: int = MAX_ENTRIES) -> None:
        self.age_s = age_s
        self.max_entries = max_entries
        self.entries: dict[tuple[int, bytes], tuple[int, float]] = {}

    def outputs(
        self,
        frame: bytes,
        in_port: int,
        ports: dict[int, PortState],
        now: float,
        learn: bool = True,
    ) -> list[int]:
        """Where NORMAL sends `frame` that arrived on `in_port` (learning its source unless not `learn`)."""
        if len(frame) < 14:
            return []
        vid = 0
        if frame[12:14] in (b"\x81\x00", b"\x88\xa8") and len(frame) >= 18:
            vid = int.from_bytes(frame[14:16], "big") & 0x0FFF
        src, dst = frame[6:12], frame[0:6]
        if learn and not src[0] & 1:  # a multicast source is never learned
            if len(self.entries) >= self.max_entries and (vid, src) not in self.entries:
                self._expire(now)
            if len(self.entries) < self.max_entries:
                self.entries[(vid, src)] = (in_port, now)
        if not dst[0] & 1:
            hit = self.entries.get((vid, dst))
            if hit is not None and now - hit[1] < self.age_s:
                port = ports.get(hit[0])
                if hit[0] == in_port:
                    return []  # the destination is behind the port it came from
                if port is not None and port.live and not port.config & OFPPC_NO_FWD:
                    return [hit[0]]
        return [
            n
            for n in sorted(ports)
            if n != in_port and ports[n].live and not ports[n].config & OFPPC_NO_FWD
        ]

    def _expire(self, now: float) -> None:
        self.entries = {k: v for k, v in self.entries.items() if now - v[1] < self.age_s}

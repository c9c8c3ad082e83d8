"""Port state and counters of one emu switch.

Owns the per-port record that the datapath updates (link state, counters) and
that the OpenFlow agent reads (port desc, port stats, port status) and writes
(port mod config). Pure data: no sockets, no clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# OpenFlow 1.3 ofp_port_config bits (spec 7.2.1).
OFPPC_PORT_DOWN = 1 << 0
OFPPC_NO_RECV = 1 << 2
OFPPC_NO_FWD = 1 << 5
OFPPC_NO_PACKET_IN = 1 << 6
# OpenFlow 1.3 ofp_port_state bits.
OFPPS_LINK_DOWN = 1 << 0
OFPPS_BLOCKED = 1 << 1
OFPPS_LIVE = 1 << 2


@dataclass
class PortCounters:
    """The counters of ofp_port_stats, plus the switch's own drop causes."""

    rx_packets: int = 0
    tx_packets: int = 0
    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0
    rx_errors: int = 0
    tx_errors: int = 0


@dataclass
class PortState:
    """One switch port: an AF_PACKET socket on a veth, seen as an OpenFlow port.

    `port_no` is the OpenFlow port number (Mininet's `<switch>-eth<N>` is port N).
    `rate_bps` is the emulated link rate the scheduler paces at.
    """

    port_no: int
    name: str
    hw_addr: bytes
    rate_bps: int
    config: int = 0
    link_up: bool = True
    created_at: float = 0.0
    counters: PortCounters = field(default_factory=PortCounters)

    @property
    def state(self) -> int:
        """ofp_port_state: LINK_DOWN when the carrier is gone, else LIVE."""
        return OFPPS_LINK_DOWN if not self.link_up else OFPPS_LIVE

    @property
    def live(self) -> bool:
        """A port that can carry frames: carrier up and not administratively down.

        This is the liveness that FAST_FAILOVER watch_port and SELECT buckets use.
        """
        return self.link_up and not self.config & OFPPC_PORT_DOWN

    @property
    def curr_speed_kbps(self) -> int:
        return self.rate_bps // 1000

"""OpenFlow 1.3 meters of one switch: the meter table, its bands and their counters.

Owns what OFPT_METER_MOD configures and what OFPMP_METER, _METER_CONFIG and
_METER_FEATURES report: meters with DROP and DSCP_REMARK bands, rates in
kbit/s or packets/s, with or without an explicit burst. Pure logic: time comes
in as `now`; the pipeline asks `Meter.apply(size, now)` for every packet of a
flow entry that has a meter instruction.

How a packet meets the bands (OF1.3 5.7, and OVS's userspace datapath): each
band has a token bucket filled at the band's rate up to its burst. A packet
takes tokens from every band whose bucket holds enough; the bands that cannot
pay are the ones whose rate the flow now exceeds, and of those the band with
the highest rate applies: DROP drops the packet, DSCP_REMARK raises the drop
precedence of an AF DSCP (RFC 2597) by the band's prec_level, at most to 3.

Burst: with OFPMF_BURST, the band's burst_size (kilobits or packets).
Without it, or when it is 0, the band's rate, i.e. one second of traffic
(`DEFAULT_BURST_S`): OF1.3 leaves the size to the switch, and this is what
Open vSwitch does on both its datapaths (`dpif-netdev.c` dp_netdev_meter_set,
`dpif-netlink.c` meter set), so an app's meter behaves on emu as on OVS. A
smaller default failed os-ken's switch tester at 1 Mbit/s: it offers its
frames in bursts every 10 ms, and a 10 ms bucket passed 57% of the rate.

Does not own flow entries (the pipeline removes a deleted meter's flows) or
the wire format (`ofcodec.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from os_ken.ofproto import ofproto_v1_3 as ofp

from emu.switch.match import OFError

DEFAULT_BURST_S = 1.0  # OVS: burst_size = rate when none is given
MAX_BANDS = 8
SUPPORTED_FLAGS = ofp.OFPMF_KBPS | ofp.OFPMF_PKTPS | ofp.OFPMF_BURST | ofp.OFPMF_STATS
BAND_TYPES = (1 << ofp.OFPMBT_DROP) | (1 << ofp.OFPMBT_DSCP_REMARK)
MTU_BITS = 1500 * 8


@dataclass
class Band:
    """One meter band and its counters."""

    type: int
    rate: int
    burst_size: int
    prec_level: int = 0
    capacity: float = 0.0  # bucket size, in bits (kbps) or packets (pktps)
    tokens: float = 0.0
    packets: int = 0
    bytes: int = 0


@dataclass
class Meter:
    """One meter: flags, bands, and what it has measured."""

    meter_id: int
    flags: int
    bands: list[Band]
    created: float
    last: float
    packets_in: int = 0
    bytes_in: int = 0
    by_rate: list[Band] = field(default_factory=list, repr=False)  # the order apply() reads

    def __post_init__(self) -> None:
        # The band that applies is the highest-rate one the flow exceeds.
        self.by_rate = sorted(self.bands, key=lambda b: b.rate, reverse=True)

    @property
    def pktps(self) -> bool:
        return bool(self.flags & ofp.OFPMF_PKTPS)

    def apply(self, size: int, now: float) -> Optional[Band]:
        """Measure one packet of `size` bytes; the band it exceeds, or None.

        The caller drops the packet on a DROP band and remarks it on a
        DSCP_REMARK band.
        """
        self.packets_in += 1
        self.bytes_in += size
        elapsed = max(0.0, now - self.last)
        self.last = now
        cost = 1.0 if self.pktps else size * 8.0
        scale = 1.0 if self.pktps else 1000.0  # kbit/s -> bit/s
        exceeded = None
        for band in self.by_rate:
            band.tokens = min(band.capacity, band.tokens + elapsed * band.rate * scale)
            if band.tokens >= cost - 1e-9:  # sums of float refills fall short by ulps
                band.tokens -= cost
            elif exceeded is None:
                exceeded = band
        if exceeded is not None:
            exceeded.packets += 1
            exceeded.bytes += size
        return exceeded


def remark_dscp(dscp: int, prec_level: int) -> int:
    """An AF DSCP (AFxy = 8x + 2y, RFC 2597) with its drop precedence y raised; others as is."""
    af_class, rest = dscp >> 3, dscp & 7
    if not 1 <= af_class <= 4 or rest & 1 or not 1 <= rest >> 1 <= 3:
        return dscp
    return (af_class << 3) | (min(3, (rest >> 1) + prec_level) << 1)


class MeterTable:
    """The switch's meters by id (OF1.3 5.7, A.3.4.4)."""

    def __init__(self, max_meters: int = 1024) -> None:
        self.max_meters = max_meters
        self.meters: dict[int, Meter] = {}

    def features(self) -> tuple[int, int, int, int, int]:
        """(max_meter, band_types, capabilities, max_bands, max_color) for OFPMP_METER_FEATURES."""
        return self.max_meters, BAND_TYPES, SUPPORTED_FLAGS, MAX_BANDS, 0

    def get(self, meter_id: int) -> Meter:
        """The meter a flow's meter instruction names (METER_MOD_FAILED/UNKNOWN_METER if none)."""
        meter = self.meters.get(meter_id)
        if meter is None:
            raise OFError(ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_UNKNOWN_METER, str(meter_id))
        return meter

    def select(self, meter_id: int) -> list[Meter]:
        """Meters a stats request names (OFPM_ALL: every one)."""
        if meter_id == ofp.OFPM_ALL:
            return [self.meters[m] for m in sorted(self.meters)]
        return [self.meters[meter_id]] if meter_id in self.meters else []

    def meter_mod(
        self, command: int, flags: int, meter_id: int, bands: list[tuple], now: float
    ) -> list[int]:
        """Apply an OFPT_METER_MOD; returns the ids of the meters deleted.

        `bands`: (type, rate, burst_size, prec_level) per band.

        Raises:
            OFError: METER_MOD_FAILED with the spec's code.
        """
        if command == ofp.OFPMC_DELETE:
            return self._delete(meter_id)
        error_code = self._add_or_modify_error(command, flags, meter_id, bands)
        if error_code is not None:
            raise OFError(ofp.OFPET_METER_MOD_FAILED, error_code)
        built = []
        for btype, rate, burst, prec in bands:
            capacity = _bucket_capacity(flags, rate, burst)
            built.append(Band(btype, rate, burst, prec, capacity, capacity))
        old = self.meters.get(meter_id)
        meter = Meter(meter_id, flags, built, now, now)
        if old is not None:  # a modified meter keeps its counters and age
            meter.created = old.created
            meter.packets_in, meter.bytes_in = old.packets_in, old.bytes_in
        self.meters[meter_id] = meter
        return []

    def _delete(self, meter_id: int) -> list[int]:
        """Delete one meter or, for OFPM_ALL, every one; the ids deleted."""
        if meter_id == ofp.OFPM_ALL:
            gone = sorted(self.meters)
            self.meters.clear()
            return gone
        if meter_id == 0 or meter_id > ofp.OFPM_MAX:
            raise OFError(ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_INVALID_METER)
        return [meter_id] if self.meters.pop(meter_id, None) is not None else []

    def _add_or_modify_error(
        self, command: int, flags: int, meter_id: int, bands: list[tuple]
    ) -> Optional[int]:
        """The METER_MOD_FAILED code a non-DELETE meter mod earns, or None if it is valid."""
        if command not in (ofp.OFPMC_ADD, ofp.OFPMC_MODIFY):
            return ofp.OFPMMFC_BAD_COMMAND
        if meter_id == 0 or meter_id > ofp.OFPM_MAX:
            # The virtual meters (slowpath, controller) are not emu's to configure.
            return ofp.OFPMMFC_INVALID_METER
        adding = command == ofp.OFPMC_ADD
        if adding and meter_id in self.meters:
            return ofp.OFPMMFC_METER_EXISTS
        if not adding and meter_id not in self.meters:
            return ofp.OFPMMFC_UNKNOWN_METER
        if adding and len(self.meters) >= self.max_meters:
            return ofp.OFPMMFC_OUT_OF_METERS
        if flags & ~SUPPORTED_FLAGS or (flags & ofp.OFPMF_KBPS and flags & ofp.OFPMF_PKTPS):
            return ofp.OFPMMFC_BAD_FLAGS
        if not bands:
            return ofp.OFPMMFC_BAD_BAND
        if len(bands) > MAX_BANDS:
            return ofp.OFPMMFC_OUT_OF_BANDS
        for btype, rate, _burst, prec in bands:
            error_code = _band_error(btype, rate, prec)
            if error_code is not None:
                return error_code
        return None


def _band_error(btype: int, rate: int, prec_level: int) -> Optional[int]:
    """The METER_MOD_FAILED code one band earns, or None if it is valid."""
    if btype not in (ofp.OFPMBT_DROP, ofp.OFPMBT_DSCP_REMARK):
        return ofp.OFPMMFC_BAD_BAND
    if rate == 0:
        return ofp.OFPMMFC_BAD_RATE
    if btype == ofp.OFPMBT_DSCP_REMARK and not 1 <= prec_level <= 3:
        return ofp.OFPMMFC_BAD_BAND_VALUE
    return None


def _bucket_capacity(flags: int, rate: int, burst: int) -> float:
    """A band's bucket size: its burst_size under OFPMF_BURST, else one second of its rate."""
    pktps = bool(flags & ofp.OFPMF_PKTPS)
    if flags & ofp.OFPMF_BURST and burst > 0:
        return float(burst) if pktps else burst * 1000.0
    if pktps:
        return max(1.0, rate * DEFAULT_BURST_S)
    return max(float(MTU_BITS), rate * 1000.0 * DEFAULT_BURST_S)

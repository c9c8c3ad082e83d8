"""How long an all-reduce should take, from first principles: link rate, frames, bytes per rank.

Owns the prediction that scenarios check measured all-reduce times against
(scenarios/straggler.py), so that a check never derives its expectation from
the measurement it judges. Pure arithmetic: no fabric, no clock, no data.

What a rank's link carries for one all-reduce of S bytes on n ranks:

- Ring (emu/host/ring.py `RingAllReduce` on emu/host/rnic.py): 2(n-1)
  steps; in step k rank r sends chunk (r-k) mod n (about S/n bytes, cut into
  slices of at most `slice_bytes`, each one RoCEv2 SEND message) to rank r+1,
  so 2(n-1)/n x S in all. A message is cut into packets of `mtu_payload`
  bytes, each a frame of Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload +
  ICRC 4 (no RETH: SENDs). The responder acknowledges every packet that asks
  for it (emu/host/rnic.py ACK_EVERY: every 4th PSN and every message's last)
  with a 62-byte ACK (BTH 12 + AETH 4) on its own wire. So rank r's NIC sends
  its data frames plus the ACKs for rank r-1's, and its switch port sends
  down r-1's data frames plus rank r+1's ACKs.
- In-network aggregation (emu/host/sharp.py, emu/proto/agg.py): every rank
  sends its S bytes up in frames of up to 256 elements (1 KiB), each with
  Ethernet 14 + IPv4 20 + UDP 8 + aggregation header 16 bytes, and gets the
  reduced chunks back in frames of the same size; no acknowledgements.

Time: the all-reduce is paced by its slowest link. Each ring step ends when
the last of its messages has arrived, and a rank's next step needs the
previous rank's message, so every step lasts as long as the slowest link
needs for its step's bytes (`nic_factor` f: that link runs at rate / f both
ways, emu/faults.py `straggler`): T = sum over steps of max over ranks of
bytes x 8 / rate. In-network aggregation streams: every chunk's result
waits for its slowest contributor, so T = max over ranks of (bytes up, bytes
down) x 8 / rate; the job's slots (64 KiB in flight per rank by default) keep
the pipe full as long as the round trip through the tree stays below their
serialization time (tens of ms at emulated rates, against about a
millisecond of forwarding).

Not counted, and why that is safe: rates are those of Ethernet frames as
handed to the veth (emu/switch/scheduler.py: no FCS, preamble or gap, like
tc); and there is no fill or drain term, because the emulated links hand a
frame to the next hop at the start of its transmission slot (veths have no
serialization delay), so the last frame is forwarded while the sender's wire
is still busy with it: the processing of the hops (a fraction of a frame time
when the emulator keeps up) hides inside that frame's own time. A run where
the emulator did not keep up is flagged by its fidelity checks (emu/fidelity.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.host.rnic import ACK_EVERY, DEFAULT_MTU_PAYLOAD
from emu.proto import agg, roce

# Frame sizes as the emulator puts them on the wire (tests build real frames and compare).
ETH_BYTES = 14
IPV4_BYTES = 20
UDP_BYTES = 8
#: A RoCEv2 SEND packet's headers: Ethernet, IPv4, UDP, BTH, ICRC.
ROCE_SEND_OVERHEAD_BYTES = ETH_BYTES + IPV4_BYTES + UDP_BYTES + roce.BTH_BYTES + roce.ICRC_BYTES
#: A RoCEv2 ACK: Ethernet, IPv4, UDP, BTH, AETH, ICRC.
ROCE_ACK_FRAME_BYTES = ROCE_SEND_OVERHEAD_BYTES + roce.AETH_BYTES
#: An aggregation frame's bytes before its elements (Ethernet, IPv4, UDP, aggregation header).
AGG_OVERHEAD_BYTES = agg.PAYLOAD_OFFSET

ALGOS = ("ring", "sharp")


@dataclass(frozen=True)
class LinkLoad:
    """What one rank's link carries for one all-reduce.

    `up_bytes`: frames the rank's NIC sends (data and its ACKs); `down_bytes`:
    frames its switch port sends to it; `payload_bytes`: the data the rank
    sends (without headers); `up_frames`: frames it sends.
    """

    payload_bytes: int
    up_frames: int
    up_bytes: int
    down_bytes: int


@dataclass(frozen=True)
class Prediction:
    """A predicted all-reduce time and what it is made of.

    `time_s`: the prediction; `wire_s`: the same bytes at the healthy link rate
    (time_s / wire_s is the slow link's share); `loads`: per rank;
    `goodput_fraction`: data bytes / frame bytes on the busiest link's way up.
    """

    algo: str
    nranks: int
    size_bytes: int
    link_rate_bps: float
    nic_factor: float
    time_s: float
    wire_s: float
    loads: tuple[LinkLoad, ...]

    @property
    def goodput_fraction(self) -> float:
        worst = max(self.loads, key=lambda ld: ld.up_bytes)
        return worst.payload_bytes / worst.up_bytes if worst.up_bytes else 1.0


def roce_message_frames(
    size_bytes: int, first_psn: int = 0, mtu_payload: int = DEFAULT_MTU_PAYLOAD
) -> tuple[int, int, int]:
    """(packets, frame bytes, ACKs asked for) of one SEND of `size_bytes` starting at `first_psn`.

    As emu/host/rnic.py `post_send`: ceil(size / mtu) packets (one, empty, for
    an empty message), each payload padded to whole 4-byte words (IBA 9.2: the
    BTH pad count; emu/proto/roce.py); an ACK is asked for on every
    ACK_EVERY-th PSN and on the message's last packet.

    Examples:
        >>> roce_message_frames(4096)
        (4, 4328, 1)
        >>> roce_message_frames(0), roce_message_frames(1025, first_psn=3)
        ((1, 58, 1), (2, 1144, 2))
    """
    if size_bytes < 0 or mtu_payload < 4 or mtu_payload % 4:
        raise ValueError(
            f"size_bytes={size_bytes}, mtu_payload={mtu_payload}: need >= 0 and "
            "a whole number of 4-byte words"
        )
    packets = max(1, -(-size_bytes // mtu_payload))
    last = size_bytes - mtu_payload * (packets - 1)
    padded = mtu_payload * (packets - 1) + last + (-last & 3)
    acks = sum(
        1
        for i in range(packets)
        if i == packets - 1 or (first_psn + i) % ACK_EVERY == ACK_EVERY - 1
    )
    return packets, padded + packets * ROCE_SEND_OVERHEAD_BYTES, acks


def ring_step_messages(
    size_bytes: int, nranks: int, itemsize: int = 4, slice_bytes: int = 64 * 1024
) -> list[list[int]]:
    """Message sizes (bytes) of each chunk, as `RingAllReduce` cuts the array.

    Chunk c holds elements [c*L/n, (c+1)*L/n); every chunk is cut into the same
    number of slices (enough for the largest chunk at `slice_bytes`).

    Examples:
        >>> ring_step_messages(1024, 4)
        [[256], [256], [256], [256]]
        >>> ring_step_messages(40, 3, slice_bytes=8)   # 10 elements: chunks of 3, 3, 4
        [[4, 8], [4, 8], [8, 8]]
    """
    if nranks < 1 or itemsize < 1 or size_bytes % itemsize or slice_bytes < itemsize:
        raise ValueError(
            f"size_bytes={size_bytes}, nranks={nranks}, itemsize={itemsize}, "
            f"slice_bytes={slice_bytes}: need whole elements, >= 1 rank, "
            "slices of at least one element"
        )
    count = size_bytes // itemsize
    edges = [c * count // nranks for c in range(nranks + 1)]
    largest = max(edges[c + 1] - edges[c] for c in range(nranks))
    nslices = max(1, -(-largest // (slice_bytes // itemsize)))
    out = []
    for c in range(nranks):
        lo, n = edges[c], edges[c + 1] - edges[c]
        out.append(
            [
                (lo + (s + 1) * n // nslices - (lo + s * n // nslices)) * itemsize
                for s in range(nslices)
            ]
        )
    return out


def _rate_factors(nranks: int, nic_factor: float, slow_rank: int) -> list[float]:
    if not 1.0 <= nic_factor < float("inf"):
        raise ValueError(f"nic_factor={nic_factor}: must be >= 1 (1 = healthy)")
    if not 0 <= slow_rank < nranks:
        raise ValueError(f"slow_rank={slow_rank}: allowed 0..{nranks - 1}")
    factors = [1.0] * nranks
    factors[slow_rank] = nic_factor
    return factors


def ring_allreduce(
    size_bytes: int,
    nranks: int,
    link_rate_bps: float,
    nic_factor: float = 1.0,
    slow_rank: int = 0,
    itemsize: int = 4,
    slice_bytes: int = 64 * 1024,
    mtu_payload: int = DEFAULT_MTU_PAYLOAD,
) -> Prediction:
    """The ring all-reduce's time on `nranks` ranks whose links run at `link_rate_bps`.

    Rank `slow_rank`'s link runs at link_rate_bps / nic_factor both ways. Every
    step lasts as long as its slowest link needs for that step's frames (data
    sent plus ACKs for the data received, either way of the link).

    Examples:
        >>> p = ring_allreduce(256 << 10, 8, 10e6)
        >>> round(p.time_s, 4), p.loads[0].payload_bytes == 2 * 7 * (256 << 10) // 8
        (0.3933, True)
        >>> round(ring_allreduce(256 << 10, 8, 10e6, nic_factor=2).time_s / p.time_s, 6)
        2.0
    """
    if nranks < 2:
        raise ValueError(f"nranks={nranks}: a ring needs at least 2 ranks")
    if link_rate_bps <= 0:
        raise ValueError(f"link_rate_bps={link_rate_bps}: must be positive")
    factors = _rate_factors(nranks, nic_factor, slow_rank)
    chunks = ring_step_messages(size_bytes, nranks, itemsize, slice_bytes)
    n = nranks
    psn = [0] * n  # next PSN of rank r's send QP (to r+1)
    payload, frames, up, down = ([0] * n for _ in range(4))
    total_s = wire_s = 0.0
    for k in range(2 * (n - 1)):
        data = [0] * n  # data frame bytes rank r sends in step k
        acks = [0] * n  # ACKs rank r+1 sends back for them
        for r in range(n):
            for m in chunks[(r - k) % n]:
                packets, nbytes, asked = roce_message_frames(m, psn[r], mtu_payload)
                psn[r] += packets
                data[r] += nbytes
                acks[r] += asked
                payload[r] += m
                frames[r] += packets
        step_up = [data[r] + acks[r - 1] * ROCE_ACK_FRAME_BYTES for r in range(n)]
        step_down = [data[r - 1] + acks[r] * ROCE_ACK_FRAME_BYTES for r in range(n)]
        for r in range(n):
            up[r] += step_up[r]
            down[r] += step_down[r]
            frames[r] += acks[r - 1]
        busiest = [max(step_up[r], step_down[r]) for r in range(n)]
        total_s += max(b * f for b, f in zip(busiest, factors)) * 8 / link_rate_bps
        wire_s += max(busiest) * 8 / link_rate_bps
    loads = tuple(LinkLoad(payload[r], frames[r], up[r], down[r]) for r in range(n))
    return Prediction("ring", n, size_bytes, link_rate_bps, nic_factor, total_s, wire_s, loads)


def sharp_allreduce(
    size_bytes: int, nranks: int, link_rate_bps: float, nic_factor: float = 1.0, slow_rank: int = 0
) -> Prediction:
    """In-network aggregation's time: every rank sends S up and gets S back, at its link rate.

    Every chunk's result waits for its slowest contributor, and the slowest
    rank's link (rate / nic_factor both ways) paces the stream.

    Examples:
        >>> p = sharp_allreduce(256 << 10, 8, 10e6)
        >>> round(p.time_s, 4), p.loads[0].up_frames
        (0.2216, 256)
        >>> round(sharp_allreduce(256 << 10, 8, 10e6, nic_factor=2).time_s, 4)
        0.4432
    """
    if nranks < 1:
        raise ValueError(f"nranks={nranks}: need at least one rank")
    if link_rate_bps <= 0:
        raise ValueError(f"link_rate_bps={link_rate_bps}: must be positive")
    if size_bytes < agg.ELEMENT_BYTES or size_bytes % agg.ELEMENT_BYTES:
        raise ValueError(f"size_bytes={size_bytes}: a positive multiple of {agg.ELEMENT_BYTES}")
    factors = _rate_factors(nranks, nic_factor, slow_rank)
    chunks = agg.chunk_count(size_bytes)
    nbytes = size_bytes + chunks * AGG_OVERHEAD_BYTES
    load = LinkLoad(size_bytes, chunks, nbytes, nbytes)
    wire_s = nbytes * 8 / link_rate_bps
    return Prediction(
        "sharp",
        nranks,
        size_bytes,
        link_rate_bps,
        nic_factor,
        wire_s * max(factors),
        wire_s,
        (load,) * nranks,
    )


def predict_allreduce(
    algo: str,
    size_bytes: int,
    nranks: int,
    link_rate_bps: float,
    nic_factor: float = 1.0,
    slow_rank: int = 0,
    **ring_options,
) -> Prediction:
    """`ring_allreduce` or `sharp_allreduce` by name.

    `ring_options` (itemsize, slice_bytes, mtu_payload) shape the ring's messages;
    in-network aggregation's frames are fixed (emu/proto/agg.py), so it ignores them.

    Raises:
        ValueError: an unknown algorithm, or a bad size, rank count, rate or factor.
    """
    if algo == "ring":
        return ring_allreduce(
            size_bytes, nranks, link_rate_bps, nic_factor, slow_rank, **ring_options
        )
    if algo == "sharp":
        return sharp_allreduce(size_bytes, nranks, link_rate_bps, nic_factor, slow_rank)
    raise ValueError(f"algo={algo!r}: one of {', '.join(ALGOS)}")

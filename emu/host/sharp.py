"""One rank's side of a SHARP-like in-network all-reduce.

Owns the host half of the aggregation protocol (emu/proto/agg.py): the rank
cuts its array into chunks of up to 256 elements, sends each chunk up to the
switch that is its leaf in the job's reduction tree, and writes the reduced
chunk that comes back down into its result. The job's slots bound what is in
flight (SwitchML): chunk seq + slots is sent only after the result of seq came
back, so the switch can recycle the slot. A chunk whose result does not come
back in time is sent again, with the timeout doubling on every retry; the
switches count each child once per chunk and resend a result they hold, so a
retransmission never adds a contribution twice. As TCP's single
retransmission timer (RFC 6298 5.4-5.6), a timeout sends only the earliest
outstanding chunk again, and every other outstanding chunk waits at least
until that one's backed-off timeout: no result for a whole window most likely
means a straggling rank, not a lost window, and a window sent again by every
other rank met the straggler's contributions on the links (measured:
straggler's sharp compute x2 at 5 Mbit/s, 1344 retransmissions, +22%).

Pure: every method takes `now`; the host agent (emu/host/agent.py) owns the
socket. `SharpOnNic` is the collective algorithm the agent runs
(emu/host/collective.py, ALGORITHMS["sharp"]): it paces the frames on the
NIC's wire clock and honours PAUSE like the NIC's own traffic. Sequence numbers keep
growing across all-reduces of one job, because a switch starts a new round on
a slot only for a higher seq; the NIC keeps the next one per job
(`Rnic.agg_next_seq`), as it keeps a queue pair's PSN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from emu.proto import agg

DATA_PRIO = 3  # the lossless class the frames ride on (DSCP 26), as emu/host/rnic.py's

#: First retransmission timeout on top of the window's own serialization time.
BASE_TIMEOUT_S = 0.2
MAX_TIMEOUT_S = 2.0


@dataclass
class SharpStats:
    chunks: int = 0
    frames_sent: int = 0
    bytes_sent: int = 0  # whole frames, as the host port counts them
    payload_bytes_sent: int = 0
    retransmitted: int = 0
    results: int = 0
    duplicate_results: int = 0
    foreign_frames: int = 0  # aggregation frames of another job or seq range


class SharpAllReduce:
    """One all-reduce of `data` through job `job_id`'s reduction tree.

    Args:
        data: the rank's contribution (int32 or float32, 1-D).
        rank: this host's rank (carried in the header for captures).
        job_id, job_ip, job_mac, nslots: what the aggregation manager registered.
        src_mac, src_ip: this host's addresses.
        first_seq: the job's next unused sequence number (see the module docstring).
        rate_bps: the NIC's link rate, to size the retransmission timeout.
    """

    def __init__(
        self,
        data: np.ndarray,
        *,
        rank: int,
        job_id: int,
        job_ip: str,
        job_mac: str,
        nslots: int,
        src_mac: str,
        src_ip: str,
        first_seq: int,
        rate_bps: float,
        now: float,
    ) -> None:
        if data.ndim != 1 or data.dtype.name not in agg.DTYPE_CODES:
            raise ValueError(
                f"data must be 1-D int32 or float32, got {data.dtype} with shape {data.shape}"
            )
        if nslots < 1:
            raise ValueError(f"nslots={nslots}: must be >= 1")
        self.dtype = agg.DTYPE_CODES[data.dtype.name]
        # Chunks are converted to the wire's byte order as they are sent: the whole
        # array at once (16 MB) held the NIC's loop for tens of ms at every
        # all-reduce's start, and the fidelity monitor saw those stalls.
        self.data = data
        self.wire_dtype = agg.WIRE_DTYPES[self.dtype]
        self.result = np.zeros_like(data)
        self.rank, self.job_id, self.nslots = rank, job_id, nslots
        self.first_seq = first_seq
        self.nchunks = agg.chunk_count(data.nbytes)
        self.tmpl = agg.AggTemplate(src_mac, job_mac, src_ip, job_ip)
        self.received = bytearray(self.nchunks)  # 1 once a chunk's result is in
        # Outstanding chunk -> when it is sent again; in first-send order, so
        # the first due chunk is the earliest.
        self.deadline: dict[int, float] = {}
        self.timeout: dict[int, float] = {}
        self.next_new = 0  # next chunk never sent
        # When each chunk's result came in: chunk c + nslots may go from then on.
        self.result_at = [0.0] * self.nchunks
        self.last_ready = now  # when the frame next_frame last returned could first have gone
        self.remaining = self.nchunks
        window_s = nslots * (agg.PAYLOAD_OFFSET + agg.MAX_ELEMENTS * 4) * 8 / rate_bps
        self.base_timeout_s = BASE_TIMEOUT_S + 2 * window_s
        self.started_at = now
        self.finished_at: float | None = None
        self.stats = SharpStats(chunks=self.nchunks)

    @property
    def done(self) -> bool:
        return self.remaining == 0

    @property
    def next_seq(self) -> int:
        """The first seq the job's next all-reduce may use."""
        return self.first_seq + self.nchunks

    def _frame(self, chunk: int) -> bytes:
        lo = chunk * agg.MAX_ELEMENTS
        payload = self.data[lo : lo + agg.MAX_ELEMENTS].astype(self.wire_dtype).tobytes()
        seq = self.first_seq + chunk
        return self.tmpl.frame(
            agg.KIND_CONTRIB,
            self.dtype,
            self.job_id,
            seq,
            seq % self.nslots,
            payload,
            rank=self.rank,
        )

    def next_frame(self, now: float) -> bytes | None:
        """The next frame to send now: a timed-out chunk first, else a new one the window allows."""
        # The same comparison as next_wakeup's: a wake-up at that time must find it due.
        chunk = next((c for c, t in self.deadline.items() if now >= t), None)
        if chunk is not None:
            self.stats.retransmitted += 1
            self.last_ready = self.deadline[chunk]
            self.timeout[chunk] = min(MAX_TIMEOUT_S, 2 * self.timeout[chunk])
            frame = self._send(chunk, now)
            probe = self.deadline[chunk]
            for c, t in self.deadline.items():  # they go again only if no result comes
                if t < probe:
                    self.deadline[c] = probe
            return frame
        chunk = self.next_new
        if chunk < self.nchunks and (chunk < self.nslots or self.received[chunk - self.nslots]):
            self.next_new += 1
            self.last_ready = (
                self.started_at
                if chunk < self.nslots
                else max(self.started_at, self.result_at[chunk - self.nslots])
            )
            self.timeout[chunk] = self.base_timeout_s
            return self._send(chunk, now)
        return None

    def _send(self, chunk: int, now: float) -> bytes:
        frame = self._frame(chunk)
        self.deadline[chunk] = now + self.timeout[chunk]
        self.stats.frames_sent += 1
        self.stats.bytes_sent += len(frame)
        self.stats.payload_bytes_sent += len(frame) - agg.PAYLOAD_OFFSET
        return frame

    def next_wakeup(self, now: float) -> float | None:
        """When `next_frame` may have something again (None: waiting for results only)."""
        times = list(self.deadline.values())
        c = self.next_new
        if c < self.nchunks and (c < self.nslots or self.received[c - self.nslots]):
            times.append(now)
        return min(times) if times else None

    def on_frame(self, frame: bytes, now: float) -> bool:
        """Take a RESULT of this all-reduce; False for any frame that is not one."""
        try:
            pkt = agg.parse(frame)
        except agg.MalformedAgg:
            return False
        if pkt is None or pkt.kind != agg.KIND_RESULT:
            return False
        chunk = pkt.seq - self.first_seq
        if pkt.job_id != self.job_id or not 0 <= chunk < self.nchunks:
            self.stats.foreign_frames += 1
            return True
        if self.received[chunk]:
            self.stats.duplicate_results += 1
            return True
        lo = chunk * agg.MAX_ELEMENTS
        expect = min(agg.MAX_ELEMENTS, len(self.result) - lo)
        if pkt.count != expect or pkt.dtype != self.dtype:
            self.stats.foreign_frames += 1
            return True
        self.result[lo : lo + expect] = pkt.array()
        self.received[chunk] = 1
        self.result_at[chunk] = now
        self.deadline.pop(chunk, None)
        self.timeout.pop(chunk, None)
        self.remaining -= 1
        self.stats.results += 1
        if self.remaining == 0:
            self.finished_at = now
        return True


class SharpOnNic:
    """One iteration of in-network all-reduce on a host's NIC (`collective.ALGORITHMS["sharp"]`).

    The job's `options` carry what the aggregation manager registered:
    `job_id`, `job_ip`, `job_mac`, `nslots`. Frames go out on the NIC's wire
    clock and respect PAUSE on the lossless priority, as the NIC's own RoCE
    traffic does. The job's sequence numbers come from the NIC
    (`rnic.agg_next_seq`), which outlives the job's all-reduces: they keep
    growing across iterations and sizes.
    """

    recv_qpns: tuple[int, ...] = ()
    tx_qpns: tuple[int, ...] = ()
    #: Bytes of a frame before its elements (Ethernet, IPv4, UDP, aggregation header).
    frame_header_bytes = agg.PAYLOAD_OFFSET

    def __init__(self, spec: Any, rnic: Any, data: np.ndarray) -> None:
        opts = dict(spec.options)
        missing = sorted({"job_id", "job_ip", "job_mac", "nslots"} - set(opts))
        if missing:
            raise ValueError(
                f"job {spec.job!r}: sharp needs options {missing} from the aggregation manager"
            )
        self.rnic = rnic
        seqs = rnic.agg_next_seq
        job_id = int(opts["job_id"])
        self.sharp = SharpAllReduce(
            data,
            rank=spec.rank,
            job_id=job_id,
            job_ip=str(opts["job_ip"]),
            job_mac=str(opts["job_mac"]),
            nslots=int(opts["nslots"]),
            src_mac=rnic.cfg.mac,
            src_ip=rnic.cfg.ip,
            first_seq=seqs.get(job_id, 0),
            rate_bps=rnic.cfg.rate_bps,
            now=0.0,
        )
        seqs[job_id] = self.sharp.next_seq
        self.running = False

    @property
    def done(self) -> bool:
        return self.sharp.done

    @property
    def result(self) -> np.ndarray:
        return self.sharp.result

    @property
    def stats(self) -> SharpStats:
        return self.sharp.stats

    def start(self, now: float) -> None:
        self.running = True
        self.sharp.started_at = now

    def on_message(self, qpn: int, data: bytes, now: float) -> None:
        raise ValueError(f"in-network all-reduce receives no RoCE messages (QP {qpn})")

    def on_frame(self, frame: bytes, now: float) -> bool:
        return self.sharp.on_frame(frame, now)

    def _blocked_until(self) -> float:
        return max(self.rnic.free_at, self.rnic.paused_until[DATA_PRIO])

    def next_frame(self, now: float) -> bytes | None:
        if not self.running or not self.rnic.may_send(now):
            return None
        frame = self.sharp.next_frame(now)
        if frame is not None:
            self.rnic.use_wire(len(frame), now, ready_at=self.sharp.last_ready)
        return frame

    def next_wakeup(self, now: float) -> float | None:
        if not self.running:
            return None
        t = self.sharp.next_wakeup(now)
        return None if t is None else max(t, self._blocked_until())

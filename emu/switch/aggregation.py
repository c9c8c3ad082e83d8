"""The switch's SHARP-like reduction engine: aggregation jobs, their slots and sums.

Owns the aggregation jobs that the controller configured on this switch (the
emu OpenFlow extension, `emu/proto/ofext.py`: EXP_AGG_JOB_SET/DEL), the
switch's bounded slot pool, every slot's round (seq, children seen,
accumulator, result) and the engine's counters. Flows steer a job's frames to
the logical port `ofext.AGG_PORT`; the pipeline (`pipeline.py`) outputs them
there and the datapath (`datapath.py`) hands them to `AggEngine.receive`,
which returns the frames to send (partial sums up the tree, results down it)
as `(port_no, frame, None)` outputs: the datapath queues them like any other
output, classified by their DSCP (26: the lossless priority 3, so PFC applies).

Semantics (SwitchML's, on a tree of switches; a job is one tree):

- A job has `n` children (hosts or child switches), a parent port (none at the
  root) and `nslots` slots. A chunk `seq` lives in slot `seq % nslots`; a host
  sends chunk `seq + nslots` only after the result of `seq` came back, so a
  contribution with a higher seq than its slot's starts a new round there.
- A contribution is counted once per child; when all `n` are in, the root
  stores the sum as the result and sends it to every child, another switch
  sends its partial sum to the parent. A RESULT from the parent is stored and
  sent to every child.
- Retransmissions recover losses: a child's duplicate gets the stored result
  (to that child only) or, at a switch whose partial sum may have been lost on
  its way up, makes the switch send the partial sum again.
- Each slot also keeps the previous round's result (SwitchML's shadow copy): a
  child whose result was lost may retransmit chunk `seq` after other children
  already moved the slot on to `seq + nslots`; it gets that kept result
  instead of being dropped as stale, which would stall the job forever.

Pure logic: no sockets and no clock (`now` comes in); nothing raises out of
`receive` for any input bytes. Frames are built from `emu/proto/agg.py`
templates (switch port MAC and the job's IP as source).
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np
from os_ken.ofproto import ofproto_v1_3 as ofp

from emu.proto import agg, ofext
from emu.switch.match import OFError
from emu.switch.ports import OFPPC_NO_FWD, PortState

LOG = logging.getLogger(__name__)

#: Slots a switch holds for all its jobs together (SwitchML: a bounded pool of
#: aggregator slots in switch memory; 1024 x 256 elements = 1 MiB of accumulators).
DEFAULT_TOTAL_SLOTS = 1024
_FREE = -1
#: Accumulate in native byte order; the wire is big-endian (agg.WIRE_DTYPES).
_NATIVE = {code: dt.newbyteorder("=") for code, dt in agg.WIRE_DTYPES.items()}
_JOB_COUNTERS = (
    "contributions",
    "duplicates",
    "stale",
    "up_sent",
    "results_sent",
    "results_in",
    "completed",
    "abandoned",
    "shadow_replies",
)


class AggNoSlots(OFError):
    """The slot pool cannot hold a job: answered as emu's OFPET_EXPERIMENTER error."""

    def __init__(self, text: str = "") -> None:
        super().__init__(ofext.OFPET_EXPERIMENTER, ofext.AGG_ERR_NO_SLOTS, text)
        self.experimenter = ofext.EMU_EXPERIMENTER_ID


class _Slot:
    """One slot: the current round of chunk `seq` and the previous round's result."""

    __slots__ = (
        "seq",
        "seen",
        "acc",
        "dtype",
        "count",
        "result",
        "prev_seq",
        "prev_result",
        "prev_dtype",
    )

    def __init__(self) -> None:
        self.seq = _FREE
        self.seen: set[int] = set()
        self.acc: Optional[np.ndarray] = None
        self.dtype = 0
        self.count = 0
        self.result: Optional[bytes] = None  # the reduced payload, network byte order
        self.prev_seq = _FREE
        self.prev_result: Optional[bytes] = None
        self.prev_dtype = 0

    def start(self, seq: int) -> bool:
        """Begin the round of `seq`; True if the round it replaces never got its result."""
        abandoned = self.seq != _FREE and self.result is None
        self.prev_seq, self.prev_result, self.prev_dtype = self.seq, self.result, self.dtype
        self.seq = seq
        self.seen = set()
        self.acc = None
        self.result = None
        return abandoned

    @property
    def active(self) -> bool:
        return self.seq != _FREE and self.result is None


class AggJob:
    """One job configured on this switch: its tree, slots, frame templates and counters."""

    def __init__(self, spec: ofext.AggJobSet, ports: dict[int, PortState]) -> None:
        self.spec = spec
        self.job_id = spec.job_id
        self.root = spec.root
        self.parent_port = spec.parent_port
        self.nslots = spec.nslots
        self.children = {c.port: c for c in spec.children}
        self.n = len(self.children)
        self.slots = [_Slot() for _ in range(spec.nslots)]
        self.counters = dict.fromkeys(_JOB_COUNTERS, 0)
        # Built once with Scapy; per frame only patched (agg.AggTemplate).
        self.up = (
            None
            if spec.root
            else agg.AggTemplate(
                _mac(ports[spec.parent_port]), spec.job_mac, spec.job_ip, spec.job_ip
            )
        )
        self.down = {
            c.port: agg.AggTemplate(_mac(ports[c.port]), c.mac, spec.job_ip, c.ip)
            for c in spec.children
        }

    def report(self) -> dict:
        return {
            "root": self.root,
            "parent_port": None if self.root else self.parent_port,
            "children": {str(p): {"mac": c.mac, "ip": c.ip} for p, c in self.children.items()},
            "job_ip": self.spec.job_ip,
            "job_mac": self.spec.job_mac,
            "nslots": self.nslots,
            "slots_in_use": sum(1 for s in self.slots if s.active),
            **self.counters,
        }


def _mac(port: PortState) -> str:
    return bytes(port.hw_addr[:6]).ljust(6, b"\0").hex(":")


class AggEngine:
    """The reduction engine of one switch.

    Args:
        ports: the switch's port dict (shared with the pipeline): port numbers
            are validated against it, frames are sent from its MACs, and
            nothing is sent out of a port that is not live.
        total_slots: the slot pool shared by all jobs.
    """

    def __init__(self, ports: dict[int, PortState], total_slots: int = DEFAULT_TOTAL_SLOTS) -> None:
        if total_slots < 0:
            raise ValueError(f"total_slots={total_slots}: must be >= 0")
        self.ports = ports
        self.total_slots = total_slots
        self.jobs: dict[int, AggJob] = {}
        self.malformed = 0
        self.unknown_job = 0
        self.bad_port = 0
        self.dropped_port_down = 0

    # ----- configuration (the OpenFlow agent calls these) ------------------------------

    @property
    def slots_used(self) -> int:
        return sum(j.nslots for j in self.jobs.values())

    def job_set(self, spec: ofext.AggJobSet) -> None:
        """Add a job, or replace the job with the same id (its state starts over).

        A request that is refused leaves the engine as it was.

        Raises:
            OFError: OFPET_BAD_REQUEST/OFPBRC_BAD_PORT for a port the switch does
                not have, a parent port at the root or none elsewhere, a port
                that is both parent and child or a child listed twice.
            AggNoSlots: the pool cannot hold `nslots` more (the replaced job's
                slots count as free).
        """
        child_ports = [c.port for c in spec.children]
        if spec.root and spec.parent_port != 0:
            raise OFError(
                ofp.OFPET_BAD_REQUEST,
                ofp.OFPBRC_BAD_PORT,
                f"job {spec.job_id}: the root has parent port {spec.parent_port}",
            )
        if not spec.root and spec.parent_port not in self.ports:
            raise OFError(
                ofp.OFPET_BAD_REQUEST,
                ofp.OFPBRC_BAD_PORT,
                f"job {spec.job_id}: parent port {spec.parent_port} not on this switch",
            )
        for port in child_ports:
            if port not in self.ports:
                raise OFError(
                    ofp.OFPET_BAD_REQUEST,
                    ofp.OFPBRC_BAD_PORT,
                    f"job {spec.job_id}: child port {port} not on this switch",
                )
        if len(set(child_ports)) != len(child_ports) or (
            not spec.root and spec.parent_port in child_ports
        ):
            raise OFError(
                ofp.OFPET_BAD_REQUEST,
                ofp.OFPBRC_BAD_PORT,
                f"job {spec.job_id}: ports repeat (parent {spec.parent_port}, "
                f"children {child_ports})",
            )
        old = self.jobs.get(spec.job_id)
        free = self.total_slots - self.slots_used + (old.nslots if old is not None else 0)
        if spec.nslots > free:
            raise AggNoSlots(
                f"job {spec.job_id} needs {spec.nslots} slots, {free} free of {self.total_slots}"
            )
        self.jobs[spec.job_id] = AggJob(spec, self.ports)
        LOG.info(
            "aggregation job %d %s: %d children, parent %s, %d slots",
            spec.job_id,
            "replaced" if old is not None else "added",
            len(child_ports),
            "root" if spec.root else spec.parent_port,
            spec.nslots,
        )

    def job_del(self, job_id: int) -> None:
        """Remove a job and free its slots (AGG_JOB_ALL: every job); unknown ids are ignored."""
        if job_id == ofext.AGG_JOB_ALL:
            self.jobs.clear()
        else:
            self.jobs.pop(job_id, None)

    # ----- per frame -------------------------------------------------------------------

    def receive(self, in_port: int, frame: bytes, now: float) -> list:
        """Take one frame that a flow sent to AGG_PORT; return the frames to send.

        Returns:
            (port_no, frame, None) outputs; the datapath queues them by DSCP.
            Frames that are malformed, for an unknown job or from a port outside
            the job's tree are counted and dropped. Never raises.
        """
        try:
            pkt = agg.parse(frame)
        except agg.MalformedAgg as exc:
            self.malformed += 1
            LOG.debug("aggregation frame on port %d dropped: %s", in_port, exc)
            return []
        if pkt is None:  # steered here but not an aggregation frame at all
            self.malformed += 1
            return []
        job = self.jobs.get(pkt.job_id)
        if job is None:
            self.unknown_job += 1
            return []
        if pkt.slot != pkt.seq % job.nslots:
            self.malformed += 1
            return []
        if pkt.kind == agg.KIND_CONTRIB:
            if in_port not in job.children:
                self.bad_port += 1
                return []
            return self._contrib(job, in_port, pkt)
        if job.root or in_port != job.parent_port:
            self.bad_port += 1
            return []
        return self._result(job, pkt)

    def _contrib(self, job: AggJob, port: int, pkt: agg.AggPacket) -> list:
        slot = job.slots[pkt.slot]
        seq = pkt.seq
        ctr = job.counters
        if slot.seq == _FREE or slot.seq < seq:
            if slot.start(seq):
                ctr["abandoned"] += 1
        elif slot.seq > seq:
            if seq == slot.prev_seq and slot.prev_result is not None:
                # The child missed the previous round's result (shadow copy, SwitchML).
                ctr["shadow_replies"] += 1
                return self._down(job, [port], seq, pkt.slot, slot.prev_dtype, slot.prev_result)
            ctr["stale"] += 1
            return []
        elif port in slot.seen:
            ctr["duplicates"] += 1
            if slot.result is not None:
                return self._down(job, [port], seq, pkt.slot, slot.dtype, slot.result)
            if len(slot.seen) == job.n and not job.root:
                return self._up(job, slot)  # the first partial sum may have been lost
            return []
        if slot.acc is None:
            slot.acc = pkt.array().astype(_NATIVE[pkt.dtype])
            slot.dtype, slot.count = pkt.dtype, pkt.count
        elif pkt.dtype != slot.dtype or pkt.count != slot.count:
            self.malformed += 1
            return []
        else:
            with np.errstate(all="ignore"):  # int32 wraps; float32 may overflow to inf
                np.add(slot.acc, pkt.array(), out=slot.acc)
        slot.seen.add(port)
        ctr["contributions"] += 1
        if len(slot.seen) < job.n:
            return []
        ctr["completed"] += 1
        if not job.root:
            return self._up(job, slot)
        slot.result = slot.acc.astype(agg.WIRE_DTYPES[slot.dtype]).tobytes()
        return self._down(job, list(job.children), seq, pkt.slot, slot.dtype, slot.result)

    def _result(self, job: AggJob, pkt: agg.AggPacket) -> list:
        slot = job.slots[pkt.slot]
        job.counters["results_in"] += 1
        if slot.seq != pkt.seq:
            job.counters["stale"] += 1
            return []
        if slot.acc is not None and (pkt.dtype != slot.dtype or pkt.count != slot.count):
            self.malformed += 1
            return []
        slot.result, slot.dtype, slot.count = pkt.payload, pkt.dtype, pkt.count
        return self._down(job, list(job.children), pkt.seq, pkt.slot, pkt.dtype, pkt.payload)

    def _up(self, job: AggJob, slot: _Slot) -> list:
        if not self._live(job.parent_port):
            self.dropped_port_down += 1
            return []
        payload = slot.acc.astype(agg.WIRE_DTYPES[slot.dtype]).tobytes()
        job.counters["up_sent"] += 1
        return [
            (
                job.parent_port,
                job.up.frame(
                    agg.KIND_CONTRIB,
                    slot.dtype,
                    job.job_id,
                    slot.seq,
                    slot.seq % job.nslots,
                    payload,
                ),
                None,
            )
        ]

    def _down(
        self, job: AggJob, ports: list, seq: int, slot_no: int, dtype: int, payload: bytes
    ) -> list:
        outs = []
        for port in ports:
            if not self._live(port):
                self.dropped_port_down += 1
                continue
            outs.append(
                (
                    port,
                    job.down[port].frame(agg.KIND_RESULT, dtype, job.job_id, seq, slot_no, payload),
                    None,
                )
            )
        job.counters["results_sent"] += len(outs)
        return outs

    def _live(self, port_no: int) -> bool:
        ps = self.ports.get(port_no)
        return ps is not None and ps.live and not ps.config & OFPPC_NO_FWD

    # ----- reports ---------------------------------------------------------------------

    def report(self) -> dict:
        """Counters for the management socket (`emu ctl SWITCH agg`)."""
        return {
            "slots_total": self.total_slots,
            "slots_used": self.slots_used,
            "malformed": self.malformed,
            "unknown_job": self.unknown_job,
            "bad_port": self.bad_port,
            "dropped_port_down": self.dropped_port_down,
            "jobs": {str(jid): job.report() for jid, job in sorted(self.jobs.items())},
        }

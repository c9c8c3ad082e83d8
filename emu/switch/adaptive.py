"""SELECT group modes and per-packet adaptive routing in the switch (the specification).

Owns two things the emu OpenFlow extension (`emu/proto/ofext.py`) sets:

- `SelectModes`: the mode of every SELECT group (hash, flowlet, adaptive or
  UGAL with its classes) and the switch-wide default, validated as the
  extension's documentation says (every field; a rejected message changes
  nothing);
- `AdaptiveRouter`: the choice a group in adaptive mode makes for each packet
  of an enabled class (InfiniBand AR, Spectrum-X): among the live buckets,
  the egress port with the fewest bytes queued at the packet's priority and
  above, a port PFC-paused for that priority passed over unless all are,
  ties broken by the flow hash; the choice a UGAL group makes (UGAL-L, Kim
  et al. ISCA 2008): the same, on the queue times the bucket's path length
  plus a bias for non-minimal buckets (its weight says both: `ugal_weight`),
  ties to a minimal bucket, then the shorter path, then the hash; and their
  counters (decisions, picks per port, paused ports
  passed over, decisions where every port was paused, UGAL's decisions and
  the packets it sent non-minimally).

The pipeline (`pipeline.py`) compiles an adaptive or UGAL group, for a
packet of an enabled class, into a per-packet choice among its buckets'
compiled programs (P_ADAPTIVE, P_UGAL) and calls `AdaptiveRouter.choose`
or `choose_ugal`; the C path does the same in `csrc/fp_ar.c` (FP_OP_ADAPT,
FP_OP_UGAL), held to this module by tests/unit/test_fastpath_differential.py. The queues come from a function the
owner declares (the datapath's schedulers; tests pass their own). Pure: no
clocks, `now` comes in. Flowlet state lives in `flowlet.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from os_ken.ofproto import ofproto_v1_3 as ofp

from emu.proto import ofext
from emu.switch.match import OFError

N_PRIORITIES = ofext.N_CLASSES

#: (port_no, prio, now) -> (bytes queued at prio and above, paused for prio), or
#: None for a port without queues (counted as empty and never paused).
EgressView = Callable[[int, int, float], Optional[tuple[int, bool]]]


def _idle(port_no: int, prio: int, now: float) -> tuple[int, bool]:
    return 0, False


@dataclass(frozen=True)
class SelectMode:
    """One SELECT group's mode: `classes` is adaptive or UGAL mode's priority mask
    (0xFF: all), `bias_bytes` UGAL's bias."""

    mode: int = ofext.SELECT_MODE_HASH
    gap_s: Optional[float] = None
    classes: int = 0
    bias_bytes: int = 0

    def adaptive_for(self, prio: int) -> bool:
        """Whether a packet of priority `prio` takes adaptive routing in this mode."""
        return self.mode == ofext.SELECT_MODE_ADAPTIVE and bool(self.classes >> prio & 1)

    def ugal_for(self, prio: int) -> bool:
        """Whether a packet of priority `prio` takes UGAL's choice in this mode."""
        return self.mode == ofext.SELECT_MODE_UGAL and bool(self.classes >> prio & 1)

    @property
    def ugal(self) -> bool:
        return self.mode == ofext.SELECT_MODE_UGAL

    def describe(self) -> dict:
        """The mode as management answers give it."""
        if self.mode == ofext.SELECT_MODE_FLOWLET:
            return {"mode": "flowlet", "gap_s": self.gap_s}
        if self.mode == ofext.SELECT_MODE_ADAPTIVE:
            return {"mode": "adaptive", "classes": ofext.classes_of(self.classes)}
        if self.mode == ofext.SELECT_MODE_UGAL:
            return {
                "mode": "ugal",
                "classes": ofext.classes_of(self.classes),
                "bias_bytes": self.bias_bytes,
            }
        return {"mode": "hash"}


HASH = SelectMode()


def _check(req: ofext.SetSelectMode) -> SelectMode:
    """The mode a SET_SELECT_MODE asks for, every field checked (OFError otherwise)."""
    if req.mode not in ofext.MODE_NAMES:
        raise OFError(
            ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE, f"unknown select mode {req.mode}"
        )
    flowlet = req.mode == ofext.SELECT_MODE_FLOWLET
    ugal = req.mode == ofext.SELECT_MODE_UGAL
    if not ugal and flowlet != (req.flowlet_gap_us != 0):
        raise OFError(
            ofp.OFPET_GROUP_MOD_FAILED,
            ofp.OFPGMFC_BAD_BUCKET,
            "flowlet mode needs a gap > 0; hash and adaptive modes a gap of 0",
        )
    per_packet = req.mode in ofext.CLASS_MODES
    if req.classes > ofext.CLASSES_ALL or (req.classes and not per_packet):
        raise OFError(
            ofext.OFPET_EXPERIMENTER,
            ofext.SELECT_ERR_BAD_CLASSES,
            f"classes {req.classes:#x} in {ofext.MODE_NAMES[req.mode]} mode",
        )
    if flowlet:
        return SelectMode(req.mode, gap_s=req.gap_s)
    if per_packet:
        classes = req.classes or ofext.CLASSES_ALL
        return SelectMode(req.mode, classes=classes, bias_bytes=req.bias_bytes if ugal else 0)
    return HASH


class SelectModes:
    """The mode of every SELECT group: its own, else the switch-wide default."""

    def __init__(self) -> None:
        self.by_group: dict[int, SelectMode] = {}
        self.default = HASH

    def apply(self, req: ofext.SetSelectMode, groups: dict[int, Any]) -> None:
        """Validate and apply a SET_SELECT_MODE request against the switch's groups.

        Raises:
            OFError: the codes listed in `emu/proto/ofext.py`.
        """
        mode = _check(req)
        if req.group_id != ofext.OFPG_ALL:
            group = groups.get(req.group_id)
            if group is None:
                raise OFError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP)
            if group.type != ofp.OFPGT_SELECT:
                raise OFError(
                    ofp.OFPET_GROUP_MOD_FAILED,
                    ofp.OFPGMFC_BAD_TYPE,
                    f"{ofext.MODE_NAMES[req.mode]} mode needs a SELECT group",
                )
        self.set(req.group_id, mode)

    def set(self, group_id: int, mode: SelectMode) -> None:
        """Set a group's mode; OFPG_ALL sets the switch-wide default and clears the others."""
        if group_id == ofext.OFPG_ALL:
            self.default = mode
            self.by_group.clear()
        else:
            self.by_group[group_id] = mode

    def of(self, group_id: int) -> SelectMode:
        return self.by_group.get(group_id, self.default)

    def forget_group(self, group_id: int) -> None:
        """A deleted group loses its own mode (the switch default stays)."""
        self.by_group.pop(group_id, None)

    def gaps(self) -> list[float]:
        """Every flowlet gap in use (the flowlet table sweeps what is idle for longer)."""
        modes = [self.default, *self.by_group.values()]
        return [m.gap_s for m in modes if m.gap_s is not None]


#: A UGAL bucket's weight from its path (emu/proto/ofext.py owns the encoding).
ugal_weight = ofext.ugal_weight


def ugal_minimal(weights: Sequence[int]) -> list[bool]:
    """Which of a UGAL group's live buckets (their weights) stand for the minimal path:
    the minimal ones (even weights), or when none is live, those of the least length."""
    if any(w & 1 == 0 for w in weights):
        return [w & 1 == 0 for w in weights]
    shortest = min(w >> 1 for w in weights)
    return [w >> 1 == shortest for w in weights]


def packet_prio(frame: bytes, queue_id: Optional[int], dscp_to_prio: Sequence[int]) -> int:
    """The priority a switch queues `frame` at: datapath._enqueue's rule (and fp_switch_enqueue's).

    A set_queue's queue, else the IPv4 DSCP (untagged or behind one 802.1Q
    tag) through the switch's map, else 0.
    """
    if queue_id is not None and 0 <= queue_id < N_PRIORITIES:
        return queue_id
    if frame[12:14] == b"\x08\x00" and len(frame) > 15:
        return dscp_to_prio[frame[15] >> 2]
    if frame[12:14] == b"\x81\x00" and frame[16:18] == b"\x08\x00" and len(frame) > 19:
        return dscp_to_prio[frame[19] >> 2]
    return 0


def tie_index(flow_hash: int, decisions: int) -> int:
    """What picks among an adaptive group's tied options: the flow's hash plus the
    switch's adaptive decisions so far, mod 2^64 (fp_ar.c adds them in a uint64_t).

    By the hash alone a flow kept one port whenever the queues were equal, and
    idle ports always are: on a k=4 fat-tree a cross-pod ring's flows then met
    on the downlinks as under ECMP, where no upstream queue shows it, and
    DCQCN held the ring to 0.49-0.79 of its goodput; rotated per packet, each
    flow spreads over the tied ports as packet spraying does (Spectrum-X).
    """
    return (flow_hash + decisions) & 0xFFFFFFFFFFFFFFFF


class AdaptiveRouter:
    """The per-packet choice of adaptive and UGAL SELECT groups and its counters.

    An option is (bucket index, egress port or None, compiled bucket, bucket
    counter) and, for a UGAL group, the bucket's weight fifth (`ugal_weight`).

    Args:
        egress: the queues' view (`EgressView`); None: every queue empty, no pause.
    """

    def __init__(self, egress: Optional[EgressView] = None) -> None:
        self.egress: EgressView = egress or _idle
        self.decisions = 0
        self.paused_skips = 0  # paused ports passed over
        self.all_paused = 0  # decisions where every candidate was paused
        self.picks: dict[int, int] = {}  # egress port -> packets sent there
        self.ugal_decisions = 0  # packets a UGAL group placed
        self.ugal_nonminimal = 0  # ... on a bucket longer than the group's shortest live one
        self._rotation = 0
        # The tie rotation (`tie_index`): rotation(take) gives it, and with take
        # counts a decision. The compiled path replaces it with C's counter, which
        # its own decisions advance too (fastpath.py), so both paths rotate as one.
        self.rotation: Callable[[bool], int] = self._local_rotation

    def _local_rotation(self, take: bool) -> int:
        now = self._rotation
        self._rotation += take
        return now

    def rank(
        self, prio: int, options: Sequence[tuple], now: float, bias: Optional[int] = None
    ) -> tuple[list, int, bool]:
        """(the options tied best, paused options passed over, whether all were paused).

        `options` are (bucket index, egress port or None, ...) of the live
        buckets, in bucket order; the ties keep that order. With `bias` (a
        UGAL group) each option's fifth field is its weight, 2 H (+1 if not
        minimal): the cost is the bytes queued x H, plus `bias` off the
        minimal path (`ugal_minimal`), and ties go to a minimal option, then
        the least H, before the hash.
        """
        egress = self.egress
        seen = []
        for opt in options:
            view = egress(opt[1], prio, now) if opt[1] is not None else None
            seen.append((opt, view[0] if view else 0, bool(view and view[1])))
        free = [s for s in seen if not s[2]]
        every_paused = not free
        if every_paused:
            free = seen
        if bias is None:
            keys = [(s[1], 0, 0) for s in free]
        else:
            minimal = dict(zip([o[0] for o in options], ugal_minimal([o[4] for o in options])))
            keys = []
            for opt, queued, _paused in free:
                off = not minimal[opt[0]]
                keys.append((queued * (opt[4] >> 1) + (bias if off else 0), off, opt[4] >> 1))
        best = min(keys)
        ties = [s[0] for s, key in zip(free, keys) if key == best]
        return ties, len(seen) - len(free), every_paused

    def choose(self, prio: int, flow_hash: int, options: Sequence[tuple], now: float) -> tuple:
        """The option this packet takes (adaptive mode), counted.

        Ties go to the flow's hash rotated by the decisions made before
        (`tie_index`): equal queues, which idle ports always are, spread a
        flow's packets over the tied ports instead of pinning it to one.
        """
        pick = self._pick(prio, tie_index(flow_hash, self.rotation(True)), options, now, None)
        self.decisions += 1
        return pick

    def choose_ugal(
        self, prio: int, flow_hash: int, options: Sequence[tuple], bias: int, now: float
    ) -> tuple:
        """The option this packet takes (UGAL mode), counted."""
        pick = self._pick(prio, flow_hash, options, now, bias)
        self.ugal_decisions += 1
        minimal = ugal_minimal([o[4] for o in options])
        self.ugal_nonminimal += not next(m for o, m in zip(options, minimal) if o is pick)
        return pick

    def _pick(
        self, prio: int, flow_hash: int, options: Sequence[tuple], now: float, bias: Optional[int]
    ) -> tuple:
        ties, skipped, every_paused = self.rank(prio, options, now, bias)
        pick = ties[flow_hash % len(ties)]
        self.paused_skips += skipped
        self.all_paused += every_paused
        port = pick[1]
        if port is not None and self.egress(port, prio, now) is not None:
            self.picks[port] = self.picks.get(port, 0) + 1
        return pick

    def peek(
        self,
        prio: int,
        flow_hash: int,
        options: Sequence[tuple],
        now: float,
        bias: Optional[int] = None,
    ) -> dict:
        """What `choose` (or, with `bias`, `choose_ugal`) would do now, touching no
        counter (the pipeline's trace)."""
        ties, _skipped, every_paused = self.rank(prio, options, now, bias)
        if bias is None:
            flow_hash = tie_index(flow_hash, self.rotation(False))
        paused = [
            o[1]
            for o in options
            if o[1] is not None and (v := self.egress(o[1], prio, now)) is not None and v[1]
        ]
        out = {
            "prio": prio,
            "ports": [o[1] for o in options],
            "paused": sorted(paused),
            "every_port_paused": every_paused,
            "takes": ties[flow_hash % len(ties)][1],
        }
        if bias is not None:
            minimal = ugal_minimal([o[4] for o in options])
            out.update(
                mode="ugal",
                hops=[o[4] >> 1 for o in options],
                minimal=[o[1] for o, m in zip(options, minimal) if m],
                bias_bytes=bias,
            )
        return out

    def counts(self) -> dict:
        """The counters, as management answers give them."""
        return {
            "decisions": self.decisions,
            "paused_skips": self.paused_skips,
            "all_paused": self.all_paused,
            "picks": dict(sorted(self.picks.items())),
            "ugal_decisions": self.ugal_decisions,
            "ugal_nonminimal": self.ugal_nonminimal,
        }

"""Switch-local adaptive routing: the flowlet state of SELECT groups in flowlet mode.

Owns which SELECT groups run in flowlet mode (set by the emu OpenFlow
extension, `emu/proto/ofext.py`), the per-flow flowlet table and the choice of
a bucket when a flowlet starts: the live bucket whose egress port has the
fewest bytes queued. The pipeline (`pipeline.py`) compiles a flowlet group
into a per-packet choice instead of a cached one and calls `choose`; the
queue depth comes from a function the owner declares at construction (the
datapath's schedulers; tests pass a dict lookup). Pure: no clocks, `now` comes in.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from os_ken.ofproto import ofproto_v1_3 as ofp

from emu.proto import ofext
from emu.switch.match import OFError

#: Flowlet entries kept before idle ones are swept (bounds memory under churn).
MAX_FLOWLETS = 65536


def _empty(port_no: int) -> int:
    return 0


class FlowletTable:
    """Flowlet modes per group and the flowlet of every active flow.

    Args:
        queue_bytes: bytes queued on an egress port (all priorities), read when a
            flowlet starts; None: every queue reads empty (flowlets spread like ECMP).
    """

    def __init__(self, queue_bytes: Optional[Callable[[int], int]] = None) -> None:
        # gap in seconds per group id; `default_gap_s` applies to SELECT groups not listed.
        self.gap_by_group: dict[int, Optional[float]] = {}
        self.default_gap_s: Optional[float] = None
        # (group id, flow hash) -> [bucket index, last packet time]
        self._flows: dict[tuple[int, int], list] = {}
        self.flowlets_started = 0
        self.bucket_changes = 0
        self.queue_bytes: Callable[[int], int] = queue_bytes or _empty

    def apply(self, req: ofext.SetSelectMode, groups: dict[int, Any]) -> None:
        """Validate and apply a SET_SELECT_MODE request against the switch's groups.

        Raises:
            OFError: the codes listed in `emu/proto/ofext.py`.
        """
        if req.mode not in ofext.MODE_NAMES:
            raise OFError(
                ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE, f"unknown select mode {req.mode}"
            )
        if req.mode == ofext.SELECT_MODE_FLOWLET and req.flowlet_gap_us == 0:
            raise OFError(
                ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET, "flowlet mode needs a gap > 0"
            )
        if req.group_id != ofext.OFPG_ALL:
            group = groups.get(req.group_id)
            if group is None:
                raise OFError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP)
            if group.type != ofp.OFPGT_SELECT:
                raise OFError(
                    ofp.OFPET_GROUP_MOD_FAILED,
                    ofp.OFPGMFC_BAD_TYPE,
                    "flowlet mode needs a SELECT group",
                )
        self.set_mode(req.group_id, req.mode, req.gap_s)

    def set_mode(self, group_id: int, mode: int, gap_s: float) -> None:
        """Set a group's mode; OFPG_ALL sets the switch-wide default and clears the others."""
        gap = gap_s if mode == ofext.SELECT_MODE_FLOWLET else None
        if group_id == ofext.OFPG_ALL:
            self.default_gap_s = gap
            self.gap_by_group.clear()
        else:
            self.gap_by_group[group_id] = gap
        self._flows.clear()

    def gap_of(self, group_id: int) -> Optional[float]:
        """The flowlet gap of a SELECT group, None when it hashes."""
        return self.gap_by_group.get(group_id, self.default_gap_s)

    def forget_group(self, group_id: int) -> None:
        """A deleted group loses its own mode (the switch default stays)."""
        self.gap_by_group.pop(group_id, None)

    def choose(
        self, group_id: int, gap_s: float, flow_hash: int, options: Sequence[tuple], now: float
    ) -> tuple:
        """The option (bucket index, egress port or None, ...) this packet takes.

        Keeps the flow on its bucket while packets are at most `gap_s` apart and
        that bucket is still among `options` (the live ones); otherwise starts
        a flowlet on the option with the least queued bytes.
        """
        key = (group_id, flow_hash)
        ent = self._flows.get(key)
        if ent is not None and now - ent[1] <= gap_s:
            for opt in options:
                if opt[0] == ent[0]:
                    ent[1] = now
                    return opt
        depth = self.queue_bytes
        best = min(depth(o[1]) if o[1] is not None else 0 for o in options)
        ties = [o for o in options if (depth(o[1]) if o[1] is not None else 0) == best]
        pick = ties[flow_hash % len(ties)]
        self.flowlets_started += 1
        if ent is not None and ent[0] != pick[0]:
            self.bucket_changes += 1
        if ent is None and len(self._flows) >= MAX_FLOWLETS:
            self._sweep(now)
        self._flows[key] = [pick[0], now]
        return pick

    def _sweep(self, now: float) -> None:
        longest = max([g for g in self.gap_by_group.values() if g] + [self.default_gap_s or 0.0])
        stale = [k for k, (_, t) in self._flows.items() if now - t > longest]
        for k in stale:
            del self._flows[k]
        if len(self._flows) >= MAX_FLOWLETS:
            self._flows.clear()

    def report(self) -> dict:
        return {
            "default": None
            if self.default_gap_s is None
            else {"mode": "flowlet", "gap_s": self.default_gap_s},
            "groups": {
                gid: ("hash" if gap is None else {"mode": "flowlet", "gap_s": gap})
                for gid, gap in sorted(self.gap_by_group.items())
            },
            "active_flowlets": len(self._flows),
            "flowlets_started": self.flowlets_started,
            "bucket_changes": self.bucket_changes,
        }

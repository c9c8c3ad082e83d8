"""Switch-local adaptive routing by flowlets: the flowlet state of SELECT groups in flowlet mode.

Owns the per-flow flowlet table and the choice of a bucket when a flowlet
starts: the live bucket whose egress port has the fewest bytes queued. Which
groups run in flowlet mode is `adaptive.SelectModes`' (set by the emu OpenFlow
extension, `emu/proto/ofext.py`). The pipeline (`pipeline.py`) compiles a
flowlet group into a per-packet choice instead of a cached one and calls
`choose`; the queue depth comes from a function the owner declares at
construction (the datapath's schedulers; tests pass a dict lookup). Pure: no
clocks, `now` comes in.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from emu.proto import ofext
from emu.switch.adaptive import SelectModes

#: Flowlet entries kept before idle ones are swept (bounds memory under churn).
MAX_FLOWLETS = 65536


def _empty(port_no: int) -> int:
    return 0


class FlowletTable:
    """The flowlet of every active flow of the groups `modes` puts in flowlet mode.

    Args:
        modes: the switch's SELECT group modes (read for the gaps).
        queue_bytes: bytes queued on an egress port (all priorities), read when a
            flowlet starts; None: every queue reads empty (flowlets spread like ECMP).
    """

    def __init__(
        self, modes: SelectModes, queue_bytes: Optional[Callable[[int], int]] = None
    ) -> None:
        self.modes = modes
        # (group id, flow hash) -> [bucket index, last packet time]
        self._flows: dict[tuple[int, int], list] = {}
        self.flowlets_started = 0
        self.bucket_changes = 0
        self.queue_bytes: Callable[[int], int] = queue_bytes or _empty

    def gap_of(self, group_id: int) -> Optional[float]:
        """The flowlet gap of a SELECT group, None when it is not in flowlet mode."""
        return self.modes.of(group_id).gap_s

    def reset(self) -> None:
        """Forget every flowlet (a group's mode changed)."""
        self._flows.clear()

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
        longest = max(self.modes.gaps(), default=0.0)
        stale = [k for k, (_, t) in self._flows.items() if now - t > longest]
        for k in stale:
            del self._flows[k]
        if len(self._flows) >= MAX_FLOWLETS:
            self._flows.clear()

    def report(self) -> dict:
        default = self.modes.default
        return {
            "default": default.describe() if default.gap_s is not None else None,
            "groups": {
                gid: (m.describe() if m.gap_s is not None else ofext.MODE_NAMES[m.mode])
                for gid, m in sorted(self.modes.by_group.items())
            },
            "active_flowlets": len(self._flows),
            "flowlets_started": self.flowlets_started,
            "bucket_changes": self.bucket_changes,
        }

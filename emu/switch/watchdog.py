"""The PFC watchdog: detects a queue stuck in PAUSE and isolates it (SONiC `pfcwd`).

Owns the per-queue (egress port, priority) storm state. A storm is declared
when, at a poll, the queue holds frames, has sent nothing since the previous
poll, and has been paused continuously for the detection time. The action is
then applied by the datapath: `drop` (flush the queue, drop its arrivals,
ignore PAUSE on it), `forward` (ignore PAUSE: transmit regardless) or
`alert` (count and log only). The storm is over once no PAUSE has arrived for
that queue for the restoration time. Pure: the datapath polls with `now` and
the queues' state (and the wall-clock time, which it stamps on events so that
reports line them up across processes) and acts on the returned events; every
event is counted and timestamped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emu.config import WatchdogSpec


@dataclass
class QueueView:
    """What the watchdog needs to know about one lossless egress queue at a poll."""

    port: int
    prio: int
    depth_bytes: int
    tx_packets: int
    paused: bool
    last_pause_rx: float


@dataclass
class _QueueState:
    last_tx: int = -1
    last_poll: float | None = None
    stuck_since: float | None = None
    stormed_at: float | None = None


@dataclass
class PfcWatchdog:
    """Storm detection and restoration for every lossless queue of a switch."""

    spec: WatchdogSpec
    events: list = field(default_factory=list)  # {"t", "kind", "port", "prio"[, "wall"]}
    detected: int = 0
    restored: int = 0
    _queues: dict = field(default_factory=dict)

    @property
    def detection_s(self) -> float:
        return self.spec.detection_s * self.spec.time_scale

    @property
    def restoration_s(self) -> float:
        return self.spec.restoration_s * self.spec.time_scale

    def stormed(self) -> set[tuple[int, int]]:
        """The queues currently isolated."""
        return {k for k, st in self._queues.items() if st.stormed_at is not None}

    def poll(
        self, now: float, queues: list[QueueView], wall: float | None = None
    ) -> list[tuple[str, int, int]]:
        """Update every queue; returns ("storm", port, prio) / ("restored", port, prio) events.

        Args:
            now: the poller's monotonic time (detection and restoration run on it).
            queues: every lossless egress queue's state now.
            wall: the wall-clock time now, recorded as each event's "wall" when given.
        """
        out = []
        if not self.spec.enabled:
            for key, st in self._queues.items():
                if st.stormed_at is not None:
                    st.stormed_at = None
                    out.append(self._event("restored", key, now, wall))
            return out
        for q in queues:
            key = (q.port, q.prio)
            st = self._queues.setdefault(key, _QueueState())
            if st.stormed_at is not None:
                if now - q.last_pause_rx >= self.restoration_s:
                    st.stormed_at = None
                    st.stuck_since = None
                    out.append(self._event("restored", key, now, wall))
            else:
                stuck = q.paused and q.depth_bytes > 0 and q.tx_packets == st.last_tx
                if not stuck:
                    st.stuck_since = None
                elif st.stuck_since is None:
                    # Paused with frames and no progress since the last poll: the
                    # stall began at that poll at the latest.
                    st.stuck_since = st.last_poll if st.last_poll is not None else now
                if st.stuck_since is not None and now - st.stuck_since >= self.detection_s:
                    st.stormed_at = now
                    out.append(self._event("storm", key, now, wall))
            st.last_tx = q.tx_packets
            st.last_poll = now
        return out

    def _event(
        self, kind: str, key: tuple[int, int], now: float, wall: float | None
    ) -> tuple[str, int, int]:
        if kind == "storm":
            self.detected += 1
        else:
            self.restored += 1
        event = {"t": now, "kind": kind, "port": key[0], "prio": key[1]}
        if wall is not None:
            event["wall"] = wall
        self.events.append(event)
        del self.events[:-200]
        return kind, key[0], key[1]

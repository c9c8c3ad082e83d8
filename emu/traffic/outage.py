"""How long a link cut interrupts ping streams, and when the controller saw it.

Owns the measurement behind "reachability comes back after a link goes
down, without restarting anything": ping streams from several senders to
one host (emu/traffic/ping.py), the switches' counters read over a window
before the cut to find which of a switch's candidate links carried them
(`cut_under_pings` cuts that one, so that the cut is on the pings' path),
the cut itself, and then, per sender, the longest run of lost replies, when
each ping was sent on the pings' own clock, when replies came back, and
when the controller's published status first listed the cut
(`controller_events`). Its result (`LinkCut`) writes its events, metrics and
table into a scenario's context and draws each sender's replies across the
cut; the scenario judges it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emu.telemetry import Panel
from emu.traffic.ecmp_spread import port_tx_bytes
from emu.traffic.ping import PingResult

if TYPE_CHECKING:
    from emu.scenario import Context

# A controller event counts as the cut's when stamped no earlier than this before it:
# the controller's clock and ours are the same machine's, read a little apart.
CONTROLLER_SLACK_S = 0.5
# How many of the controller's events metrics.json keeps.
CONTROLLER_EVENTS_KEPT = 4


def controller_events(
    status: dict,
    kind: str | tuple[str, ...],
    since_wall: float,
    slack_s: float = CONTROLLER_SLACK_S,
) -> list[dict]:
    """The events of `kind` (one, or any of several) in the controller's status stamped
    from `since_wall - slack_s` on."""
    kinds = (kind,) if isinstance(kind, str) else kind
    return [
        e
        for e in status.get("events", [])
        if e.get("kind") in kinds and e.get("t", 0) >= since_wall - slack_s
    ]


@dataclass(frozen=True)
class LinkCut:
    """What the ping streams saw across the cut.

    Attributes:
        link: (switch, neighbour) of the link cut.
        ping_bytes: bytes the switch sent towards each candidate in the window before the cut.
        window_s: that window's length.
        wall0: the streams' start (unix time, the earliest sender's).
        wall_down: when the link went down (unix time).
        interval_s: the pings' interval.
        duration_s: how long the streams ran.
        count: pings each sender was asked to send.
        dst: the host pinged.
        results: per sender, what its stream saw.
        controller_saw: the controller's events that name the cut, in its order.
    """

    link: tuple[str, str]
    ping_bytes: dict[str, int]
    window_s: float
    wall0: float
    wall_down: float
    interval_s: float
    duration_s: float
    count: int
    dst: str
    results: dict[str, PingResult]
    controller_saw: list[dict]

    @property
    def t_down_s(self) -> float:
        """When the link went down, from the pings' start."""
        return self.wall_down - self.wall0

    @property
    def victim_bytes(self) -> int:
        """What the link cut carried in the window before the cut."""
        return self.ping_bytes[self.link[1]]

    @property
    def outages_s(self) -> dict[str, float]:
        """Per sender, its longest run of lost replies in seconds."""
        return {h: r.longest_outage_s for h, r in self.results.items()}

    @property
    def worst_outage_s(self) -> float | None:
        """The longest outage of any sender; None without senders."""
        return max(self.outages_s.values()) if self.results else None

    @property
    def controller_saw_wall(self) -> float | None:
        """When the controller first listed the cut (its own unix time), or None."""
        return min(e["t"] for e in self.controller_saw) if self.controller_saw else None

    @property
    def restored_wall(self) -> float:
        """When the last sender's replies came back (none lost: when the link went down)."""
        restored = [r.restored_wall(self.wall_down) for r in self.results.values()]
        return max((w for w in restored if w), default=self.wall_down)

    def sent_s(self) -> dict[str, list[float]]:
        """Per sender, when each ping was sent from the pings' start (ping's own clock;
        one interval per seq where ping's output placed nothing)."""
        return {
            h: [
                round(
                    (at if at is not None else self.wall0 + seq * self.interval_s) - self.wall0, 4
                )
                for seq, (at, _) in enumerate(r.timeline(), start=1)
            ]
            for h, r in self.results.items()
        }

    def metrics(self) -> dict:
        return {
            "link": list(self.link),
            "ping_bytes_per_first_hop": self.ping_bytes,
            "t_down_s": self.t_down_s,
            "interval_s": self.interval_s,
            "count": self.count,
            "outage_s": self.outages_s,
            "replies": {h: list(r.replied) for h, r in self.results.items()},
            "sent_s": self.sent_s(),
            "controller_events": self.controller_saw[-CONTROLLER_EVENTS_KEPT:],
        }

    def report(self, ctx: Context) -> None:
        """The events (link down, controller saw it, reachability restored), metrics.json's
        "controller_reaction_s" and "link_failure", and the table of outages per sender."""
        u, v = self.link
        ctx.event("link_down", at=self.wall_down, link=f"{u}-{v}")
        saw = self.controller_saw_wall
        if saw is not None:
            ctx.metrics["controller_reaction_s"] = saw - self.wall_down
            after_ms = round(1000 * ctx.metrics["controller_reaction_s"])
            ctx.event("controller saw link down", at=saw, after_ms=after_ms)
        ctx.metrics["link_failure"] = self.metrics()
        worst = self.worst_outage_s
        ctx.event(
            "reachability restored",
            at=self.restored_wall,
            worst_outage_ms=round(1000 * worst) if worst is not None else None,
        )
        ctx.table(
            f"link {u}-{v} down at t={self.t_down_s:.2f} s (from the pings' start), pings every "
            f"{self.interval_s * 1000:.0f} ms to {self.dst}",
            ["sender", "longest outage ms"],
            [[h, 1000 * o] for h, o in self.outages_s.items()],
        )

    def panel(self) -> Panel:
        """Each sender's pings, reply (1) or lost (0), by when each was sent; the cut marked."""
        lines = {}
        for h, xs in self.sent_s().items():
            got = set(self.results[h].replied)
            lines[h] = (xs, [1 if i in got else 0 for i in range(1, len(xs) + 1)])
        return Panel(
            f"pings across link {'-'.join(self.link)} down, by when each was sent",
            "time (s)",
            "reply (1) / lost (0)",
            lines=lines,
            vline=self.t_down_s,
            vline_label="link down",
            step=True,
        )


def cut_under_pings(
    fab,
    switch: str,
    candidates: list[str],
    senders: list[str],
    dst: str,
    interval_s: float = 0.02,
    duration_s: float = 4.0,
    watch_from_s: float = 0.3,
    cut_at_s: float = 1.0,
) -> LinkCut:
    """Ping dst from every sender; at `cut_at_s` cut the link of `switch` that carried them.

    A schedule, not a wait: the pings run for `watch_from_s`, then `switch`'s
    counters towards each of `candidates` are read until `cut_at_s`, and the
    link towards the one that sent the most goes down. Returns when the
    streams have ended, with the controller's status read then.
    """
    jobs = {
        h: fab.start("ping", src=h, dst=dst, interval_s=interval_s, duration_s=duration_s)
        for h in senders
    }
    count = jobs[senders[0]].count
    # The plot's and the events' zero: the pings' start, on the clock ping stamps with.
    wall0 = min(job.started_wall for job in jobs.values())
    t0 = time.monotonic()
    time.sleep(watch_from_s)
    before, t_before = port_tx_bytes(fab, switch, candidates), time.monotonic()
    time.sleep(max(0.0, cut_at_s - (time.monotonic() - t0)))
    after, t_after = port_tx_bytes(fab, switch, candidates), time.monotonic()
    pinged = {n: after[n] - before[n] for n in candidates}
    victim = max(candidates, key=lambda n: pinged[n])
    wall_down = time.time()
    fab.set_link(switch, victim, up=False)
    results = {h: job.wait() for h, job in jobs.items()}
    seen = controller_events(fab.controller_status(), "link_down", wall_down)
    return LinkCut(
        (switch, victim),
        pinged,
        t_after - t_before,
        wall0,
        wall_down,
        interval_s,
        duration_s,
        count,
        dst,
        results,
        seen,
    )

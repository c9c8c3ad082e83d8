"""DCQCN's fluid model of an incast: the bottleneck queue over time and its fixed point.

Owns the model that scenarios/incast.py, scenarios/ecn_thresholds.py and the
ecn_tuning lab compare measured queues with: the fluid model of DCQCN of Zhu
et al., "ECN or Delay: Lessons Learnt from Analysis of DCQCN and TIMELY"
(CoNEXT 2016), with RED marking at enqueue as emu's switch marks
(emu/switch/buffer.py), the NICs' timers and byte counter in emulated units
(emu/host/dcqcn.py), its fixed point (Rc = C/N, the marking probability at
which decreases balance increases), the loop's delay outside the queue
from the fabric's graph, the model of one incast on a fabric (`dcqcn_model`),
and the statistics of a queue series that the model's and the fabric's
queues are both summed up by (`transient`, `percentile`, `empty_share`;
emu/traffic/incast.py measures with them). Pure (tests/unit/test_incast_model.py).
"""

from __future__ import annotations

import math

import networkx as nx

from emu import fabric as fabric_mod
from emu.config import EcnSpec
from emu.host.dcqcn import DcqcnEffective, DcqcnSpec
from emu.host.rnic import DEFAULT_MTU_PAYLOAD
from emu.proto import roce

# RoCEv2 frames on the wire (emu/proto/roce.py): a full-MTU data frame, and a CNP.
DATA_FRAME_BYTES = roce.data_frame_bytes(DEFAULT_MTU_PAYLOAD)
CNP_FRAME_BYTES = roce.CNP_FRAME_BYTES
SAMPLE_S = 0.05  # the queue series' default sampling period


def _marking(q_bytes: float, kmin: float, kmax: float, pmax: float) -> float:
    """RED marking probability at enqueue, as emu/switch/buffer.py marks (DCQCN's CP)."""
    if q_bytes <= kmin:
        return 0.0
    return 1.0 if q_bytes >= kmax else pmax * (q_bytes - kmin) / (kmax - kmin)


class _Events:
    """The fluid model's event rates for one flow at marking probability `p` and rate `rate`
    (frames/s): the chance of at least one mark in x frames is 1 - (1-p)^x."""

    def __init__(
        self, p: float, rate: float, eff: DcqcnEffective, fast_recovery_steps: int, frame_bytes: int
    ) -> None:
        self.log1mp = math.log1p(-p) if p < 1 else -745.0
        self.p = p
        b = eff.byte_counter_bytes / frame_bytes  # B in frames
        t = eff.increase_period_s * rate  # frames per T
        self.cnp = 1 - self.pow(eff.cnp_interval_s * rate)  # a CNP per CNP interval
        self.alpha_target = 1 - self.pow(eff.alpha_period_s * rate)
        # Rate-increase events per second, by the byte counter and by the timer; the share of
        # them past F fast-recovery steps (no CNP in F periods) adds R_AI to the target.
        self.byte_events = rate * self.per_frame(b)
        self.timer_events = rate * self.per_frame(t)
        f = fast_recovery_steps
        self.ai_events = self.byte_events * self.pow(f * b) + self.timer_events * self.pow(f * t)

    def pow(self, x: float) -> float:
        """(1 - p)^x."""
        return math.exp(max(-745.0, x * self.log1mp))

    def per_frame(self, x: float) -> float:
        """p / ((1-p)^-x - 1): events per frame when one comes every x unmarked frames."""
        if self.p <= 0:
            return 1 / x
        e = -x * self.log1mp
        return 0.0 if e > 700 else self.p / math.expm1(e)


def dcqcn_fluid(
    senders: int,
    rate_bps: float,
    kmin: float,
    kmax: float,
    pmax: float,
    spec: DcqcnSpec,
    base_delay_s: float,
    duration_s: float,
    frame_bytes: int = DATA_FRAME_BYTES,
    sample_s: float = SAMPLE_S,
) -> list[tuple[float, float]]:
    """The bottleneck queue of DCQCN's fluid model, sampled: [(s, bytes)].

    The fluid model of DCQCN in Zhu et al., "ECN or Delay: Lessons Learnt
    from Analysis of DCQCN and TIMELY" (CoNEXT 2016): `senders` identical
    flows start at line rate (Rc = Rt = C, alpha = 1) into one link of
    `rate_bps`; alpha, Rt and Rc follow its equations with `spec`'s timers, byte counter, R_AI, F and g (in
    emulated units, as the NICs run them), and dq/dt = N Rc - C. The senders
    see the marking probability and rate of the time their marks left: the
    switch marks at enqueue, so the loop delay is the marked frame's own
    queueing delay q/C plus `base_delay_s` (the rest of the path and the CNP's
    way back). Hyper increase is left out: it needs F byte-counter events
    (5 x 10 MB) without a CNP, which no flow of an incast gets.
    """
    eff = spec.effective()
    g, f = spec.g, spec.fast_recovery_steps
    c = rate_bps / 8 / frame_bytes  # frames/s
    floor, top = eff.min_rate_bps / 8 / frame_bytes, c
    rai = eff.rate_ai_bps / 8 / frame_bytes
    # A step well below the shortest time in the loop (CNP interval, base delay).
    dt = min(eff.cnp_interval_s, eff.alpha_period_s, base_delay_s) / 20
    rc = rt = c
    alpha, q = spec.alpha_init, 0.0
    sent: list[tuple[float, float, float]] = []  # (feedback arrives, p, Rc)
    seen, k = (0.0, c), 0
    out, every = [], max(1, round(sample_s / dt))
    for i in range(int(duration_s / dt)):
        now = i * dt
        if i % every == 0:
            out.append((now, q * frame_bytes))
        # FIFO: the feedback of later frames arrives later, so one cursor walks the list.
        sent.append((now + q / c + base_delay_s, _marking(q * frame_bytes, kmin, kmax, pmax), rc))
        while k < len(sent) and sent[k][0] <= now:
            seen, k = sent[k][1:], k + 1
        p, rate = seen
        ev = _Events(p, rate, eff, f, frame_bytes)
        d_alpha = g / eff.alpha_period_s * (ev.alpha_target - alpha)
        d_rt = -(rt - rc) / eff.cnp_interval_s * ev.cnp + rai * ev.ai_events
        d_rc = -rc * alpha / (2 * eff.cnp_interval_s) * ev.cnp + (rt - rc) / 2 * (
            ev.byte_events + ev.timer_events
        )
        alpha = min(1.0, max(0.0, alpha + d_alpha * dt))
        rt = min(top, max(floor, rt + d_rt * dt))
        rc = min(top, max(floor, rc + d_rc * dt))
        q = max(0.0, q + (senders * rc - c) * dt)
    return out


def dcqcn_fixed_point(
    senders: int,
    rate_bps: float,
    kmin: float,
    kmax: float,
    pmax: float,
    spec: DcqcnSpec,
    frame_bytes: int = DATA_FRAME_BYTES,
) -> dict:
    """The fluid model's fixed point: Rc = C/N, and the marking probability p* at which
    decreases (alpha/2 per CNP) balance increases; q* is where RED marks with p*.

    Returns:
        {"p", "alpha", "queue_bytes"}; queue_bytes is Kmax when p* > pmax.
    """
    eff = spec.effective()
    rate = rate_bps / 8 / frame_bytes / senders
    rai = eff.rate_ai_bps / 8 / frame_bytes

    def excess(p: float) -> float:  # decrease minus increase of Rc at the fixed point
        ev = _Events(p, rate, eff, spec.fast_recovery_steps, frame_bytes)
        gap = eff.cnp_interval_s / ev.cnp * rai * ev.ai_events  # Rt - Rc, from dRt/dt = 0
        return rate * ev.alpha_target * ev.cnp / eff.cnp_interval_s - gap * (
            ev.byte_events + ev.timer_events
        )

    lo, hi = 1e-9, 1 - 1e-9
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if excess(mid) > 0 else (mid, hi)
    p = (lo + hi) / 2
    alpha = _Events(p, rate, eff, spec.fast_recovery_steps, frame_bytes).alpha_target
    q = kmax if p >= pmax else kmin + p / pmax * (kmax - kmin)
    return {"p": p, "alpha": alpha, "queue_bytes": q}


def loop_base_delay_s(graph, senders: list[str], receiver: str, rate_bps: float) -> float:
    """The DCQCN loop's delay outside the bottleneck queue, averaged over the senders: a data
    frame stored and forwarded on every hop to the receiver, and the CNP on every hop back,
    plus every link's propagation delay both ways (along a shortest path)."""
    paths = [nx.shortest_path(fabric_mod.network(graph), s, receiver) for s in senders]
    hops = [len(path) - 1 for path in paths]
    propagation = [
        2 * sum(graph.edges[u, v]["delay_s"] for u, v in zip(path, path[1:])) for path in paths
    ]
    return sum(hops) / len(hops) * (DATA_FRAME_BYTES + CNP_FRAME_BYTES) * 8 / rate_bps + sum(
        propagation
    ) / len(propagation)


def dcqcn_model(
    p: dict, graph, senders: list[str], receiver: str, qos: dict, sample_s: float = SAMPLE_S
) -> dict:
    """The fluid model of an incast (Zhu et al., CoNEXT 2016): fixed point, loop delay,
    queue series and statistics, as emu/traffic/incast.py measures them on the fabric.

    Args:
        p: the incast's parameters: modelled_gbps (DCQCN's timers, scaled to the
            emulated rate), duration_s and warmup_s (the start of the steady state).
        graph: the fabric's graph; the receiver's link is the bottleneck.
        senders: the sending hosts.
        receiver: the receiving host.
        qos: the switches' settings; its "ecn" section sets Kmin, Kmax and pmax.
        sample_s: the queue series' sampling period.

    Returns:
        {"fixed_point", "loop_base_delay_s", "loop_delay_at_fixed_point_s",
        "cnp_interval_s", "queue_p50_bytes", "queue_p95_bytes", "queue_empty_share",
        "transient_peak_bytes", "transient_peak_s", "transient_settled_s", "queue_depth"}.
    """
    leaf = graph.nodes[receiver]["leaf"]
    rate = graph.edges[receiver, leaf]["rate_bps"]
    ecn = EcnSpec.from_dict(qos.get("ecn", {}))
    kmin, kmax = ecn.thresholds(rate)
    spec = DcqcnSpec.from_hardware(rate, p["modelled_gbps"] * 1e9)
    base = loop_base_delay_s(graph, senders, receiver, rate)
    fixed = dcqcn_fixed_point(len(senders), rate, kmin, kmax, ecn.pmax, spec)
    depth = dcqcn_fluid(
        len(senders), rate, kmin, kmax, ecn.pmax, spec, base, p["duration_s"], sample_s=sample_s
    )
    steady = [d for t, d in depth if t >= p["warmup_s"]]
    peak_s, peak, settled_s = transient(depth, kmax)
    return {
        "fixed_point": fixed,
        "loop_base_delay_s": base,
        "loop_delay_at_fixed_point_s": base + fixed["queue_bytes"] * 8 / rate,
        "cnp_interval_s": spec.effective().cnp_interval_s,
        "queue_p50_bytes": percentile(steady, 50),
        "queue_p95_bytes": percentile(steady, 95),
        "queue_empty_share": empty_share(steady),
        "transient_peak_bytes": peak,
        "transient_peak_s": peak_s,
        "transient_settled_s": settled_s,
        "queue_depth": depth,
    }


# ----- a queue series' statistics, the model's and the fabric's alike -----------------


def transient(depth: list[tuple[float, float]], kmax: float) -> tuple[float, float, float | None]:
    """The incast's start-up transient in a queue series [(s, bytes)]: (when it peaked, the
    peak, when the queue first came back to Kmax or below after it; None if never)."""
    if not depth:
        return 0.0, 0.0, None
    i = max(range(len(depth)), key=lambda j: depth[j][1])
    settled = next((t for t, d in depth[i:] if d <= kmax), None)
    return depth[i][0], depth[i][1], settled


def empty_share(xs: list[float]) -> float:
    """Share of queue samples below one frame (empty, give or take the frame in service)."""
    return sum(1 for x in xs if x < DATA_FRAME_BYTES) / len(xs) if xs else 0.0


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile of `xs`: the sample at rank floor(n q / 100) of the sorted n (the
    largest for q = 100); 0 for no samples."""
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q / 100))]

"""DCQCN state machines (emu/host/dcqcn.py): the paper's equations, checked numerically.

Pure tests with injected time; equation numbers refer to Zhu et al.,
SIGCOMM 2015, section 3.1.
"""

from __future__ import annotations

import random

import pytest

from emu.config import ConfigError
from emu.host.dcqcn import DcqcnSpec, NotificationPoint, ReactionPoint

LINE = 40e9
G = 1 / 256
F = 5


def spec(**kw) -> DcqcnSpec:
    """Paper parameters at 40 Gbit/s, time_scale 1, byte counter out of the way unless given."""
    kw.setdefault("byte_counter_bytes", 10**15)
    return DcqcnSpec(line_rate_bps=LINE, **kw)


def test_defaults_follow_the_paper_at_40g():
    eff = DcqcnSpec(line_rate_bps=LINE).effective()
    assert eff.rate_ai_bps == pytest.approx(40e6)
    assert eff.rate_hai_bps == pytest.approx(200e6)
    assert eff.increase_period_s == eff.alpha_period_s == pytest.approx(55e-6)
    assert eff.cnp_interval_s == pytest.approx(50e-6)
    assert eff.byte_counter_bytes == 10_000_000
    assert DcqcnSpec(line_rate_bps=LINE).g == G


def test_first_cnp_halves_the_rate_with_alpha_one():
    rp = ReactionPoint(spec(), 0.0)
    assert rp.rate_bps == rp.target_rate_bps == LINE and rp.alpha == 1.0
    rp.on_cnp(0.0)
    assert rp.target_rate_bps == LINE  # Rt = Rc (before the cut)
    assert rp.rate_bps == LINE / 2  # Rc (1 - alpha/2)
    assert rp.alpha == pytest.approx((1 - G) * 1 + G)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 1.0])
def test_decrease_factor_follows_alpha(alpha):
    rp = ReactionPoint(spec(alpha_init=alpha), 0.0)
    rp.on_cnp(0.0)
    assert rp.rate_bps == pytest.approx(LINE * (1 - alpha / 2))
    assert rp.alpha == pytest.approx((1 - G) * alpha + G)


def test_alpha_ewma_over_cnps():
    rp = ReactionPoint(spec(alpha_init=0.2), 0.0)
    expected, rate = 0.2, LINE
    for k in range(10):
        rp.on_cnp(k * 1e-6)  # well inside one alpha period: no decay
        rate *= 1 - expected / 2
        expected = (1 - G) * expected + G
        assert rp.alpha == pytest.approx(expected)
        assert rp.rate_bps == pytest.approx(rate)


def test_alpha_decays_once_per_period_without_cnp():
    rp = ReactionPoint(spec(), 0.0)
    rp.on_cnp(0.0)
    a0 = rp.alpha
    rp.advance(55e-6 * 0.99)
    assert rp.alpha == a0
    for k in range(1, 6):
        rp.advance(55e-6 * k + 1e-9)
        assert rp.alpha == pytest.approx(a0 * (1 - G) ** k)
    rp.advance(55e-6 * 1000 + 1e-9)
    assert rp.alpha == pytest.approx(a0 * (1 - G) ** 1000)
    assert rp.alpha_decays == 1000


def test_cnp_restarts_the_alpha_timer():
    rp = ReactionPoint(spec(), 0.0)
    rp.on_cnp(0.0)
    rp.on_cnp(50e-6)  # no decay before 55 us; the timer restarts at 50 us
    a1 = rp.alpha
    rp.advance(100e-6)  # 50 us after the last CNP: still no decay
    assert rp.alpha == a1
    rp.advance(105e-6 + 1e-9)
    assert rp.alpha == pytest.approx(a1 * (1 - G))


def test_fast_recovery_halves_the_gap_f_times():
    rp = ReactionPoint(spec(), 0.0)
    rp.on_cnp(0.0)
    rt, rc = rp.target_rate_bps, rp.rate_bps
    for k in range(1, F + 1):
        rp.advance(55e-6 * k)
        assert rp.target_rate_bps == rt
        assert rt - rp.rate_bps == pytest.approx((rt - rc) / 2**k)
    assert rp.increases == {"fast_recovery": F, "additive": 0, "hyper": 0}


def two_cuts() -> ReactionPoint:
    """Rt = L/2, Rc = L/4: both rates well below the line rate."""
    rp = ReactionPoint(spec(byte_counter_bytes=1_000_000), 0.0)
    rp.on_cnp(0.0)
    rp.on_cnp(0.0)
    assert (rp.target_rate_bps, rp.rate_bps) == (LINE / 2, LINE / 4)
    return rp


def test_additive_then_hyper_increase():
    rp = two_cuts()
    ai, hai, b = 40e6, 200e6, 1_000_000
    rp.on_bytes_sent(F * b, 0.0)  # byte stage F: still fast recovery
    for k in range(1, F + 1):  # timer stage 1..F: fast recovery
        rp.advance(55e-6 * k)
    assert rp.increases == {"fast_recovery": 2 * F, "additive": 0, "hyper": 0}
    assert rp.target_rate_bps == LINE / 2
    rt, rc = rp.target_rate_bps, rp.rate_bps
    rp.advance(55e-6 * (F + 1))  # timer passed F, bytes did not: additive, eq. (4)
    assert rp.increases["additive"] == 1
    assert rp.target_rate_bps == pytest.approx(rt + ai)
    assert rp.rate_bps == pytest.approx((rt + ai + rc) / 2)
    rt, rc = rp.target_rate_bps, rp.rate_bps
    rp.on_bytes_sent(b, 55e-6 * (F + 1))  # both passed F: hyper with i = 1
    assert rp.increases["hyper"] == 1
    assert rp.target_rate_bps == pytest.approx(rt + hai)
    assert rp.rate_bps == pytest.approx((rt + hai + rc) / 2)
    rp.advance(55e-6 * (F + 2))  # t = F+2, b = F+1: i = 1
    rp.on_bytes_sent(b, 55e-6 * (F + 2))  # t = b = F+2: i = 2
    assert rp.increases["hyper"] == 3
    assert rp.target_rate_bps == pytest.approx(rt + hai + hai + 2 * hai)


@pytest.mark.parametrize("driver", ["timer", "bytes"])
def test_one_counter_alone_never_reaches_hyper_increase(driver):
    rp = two_cuts()
    for k in range(1, 3 * F):
        if driver == "timer":
            rp.advance(55e-6 * k)
        else:
            rp.on_bytes_sent(1_000_000, 1e-6 * k)  # before the first timer expiry
    assert rp.increases == {"fast_recovery": F, "additive": 2 * F - 1, "hyper": 0}
    assert rp.target_rate_bps == pytest.approx(LINE / 2 + (2 * F - 1) * 40e6)


def test_byte_counter_counts_every_b_bytes_and_keeps_the_remainder():
    rp = two_cuts()
    rp.on_bytes_sent(2_500_000, 1e-6)
    assert rp.byte_events == 2 and rp.bytes_since_event == 500_000
    rp.on_bytes_sent(500_000, 2e-6)
    assert rp.byte_events == 3 and rp.bytes_since_event == 0


def test_cnp_resets_the_increase_state():
    rp = two_cuts()
    rp.on_bytes_sent(7_500_000, 1e-6)
    rp.advance(55e-6 * 3)
    rp.on_cnp(55e-6 * 3 + 1e-6)
    assert (rp.timer_stage, rp.byte_stage, rp.bytes_since_event) == (0, 0, 0)
    assert rp.next_event_at() == pytest.approx(55e-6 * 4 + 1e-6)


def test_rates_capped_at_line_rate_and_timer_goes_idle():
    rp = ReactionPoint(spec(byte_counter_bytes=1_000_000), 0.0)
    assert rp.next_event_at() is None
    rp.on_cnp(0.0)
    assert rp.next_event_at() == pytest.approx(55e-6)
    for k in range(1, 400):
        rp.on_bytes_sent(5_000_000, 55e-6 * k)
        assert rp.rate_bps <= LINE and rp.target_rate_bps <= LINE
    assert rp.rate_bps == rp.target_rate_bps == LINE
    assert rp.next_event_at() is None


def test_min_rate_floor():
    rp = ReactionPoint(spec(min_rate_bps=100e6), 0.0)
    for k in range(50):
        rp.on_cnp(k * 1e-6)
    assert rp.rate_bps == pytest.approx(100e6)
    rp.on_cnp(50e-6)  # before the first increase event
    assert rp.rate_bps == pytest.approx(100e6)


def test_many_periods_in_one_advance_equal_stepwise():
    s = spec(byte_counter_bytes=1_000_000)
    stepwise, at_once = ReactionPoint(s, 0.0), ReactionPoint(s, 0.0)
    for rp in (stepwise, at_once):
        rp.on_cnp(0.0)
        rp.on_cnp(0.0)
    end = 55e-6 * 300 + 1e-9
    while stepwise.next_event_at() is not None and stepwise.next_event_at() <= end:
        stepwise.advance(stepwise.next_event_at())
    stepwise.advance(end)
    at_once.advance(end)
    assert at_once.counters() == pytest.approx(stepwise.counters())
    assert at_once.timer_events == 300
    assert 0 < at_once.rate_bps < LINE


def test_advance_far_past_line_rate_is_cheap_and_exact():
    rp = ReactionPoint(spec(), 0.0)
    rp.on_cnp(0.0)
    rp.advance(3600.0)  # an hour of 55 us periods
    assert rp.rate_bps == LINE and rp.timer_events == int(3600.0 / 55e-6)
    assert rp.alpha == pytest.approx(((1 - G) + G) * (1 - G) ** int(3600.0 / 55e-6))


def test_time_scale_stretches_timers_and_shrinks_rates():
    s = DcqcnSpec.from_hardware(100e6, 400e9)
    assert s.time_scale == 4000
    assert s.modelled_line_rate_bps == 400e9
    eff = s.effective()
    assert eff.increase_period_s == pytest.approx(0.22)  # 55 us x 4000
    assert eff.alpha_period_s == pytest.approx(0.22)
    assert eff.cnp_interval_s == pytest.approx(0.2)  # 50 us x 4000
    assert eff.rate_ai_bps == pytest.approx(400e6 / 4000)  # line/1000 modelled
    assert eff.byte_counter_bytes == 10_000_000  # bytes are not scaled
    s40 = DcqcnSpec.from_hardware(10e6, 40e9, rate_ai_bps=40e6, rate_hai_bps=200e6)
    assert s40.effective().rate_ai_bps == pytest.approx(10e3)
    assert s40.effective().rate_hai_bps == pytest.approx(50e3)
    rp = ReactionPoint(s, 10.0)
    rp.on_cnp(10.0)
    assert rp.rate_bps == 50e6
    rp.advance(10.2199)
    assert rp.timer_events == 0
    rp.advance(10.2201)
    assert rp.timer_events == 1


def test_np_sends_at_most_one_cnp_per_interval_per_qp():
    np_ = NotificationPoint(spec())
    assert np_.on_ce("qp1", 0.0)
    assert not np_.on_ce("qp1", 10e-6)
    assert np_.on_ce("qp2", 10e-6)  # per queue pair
    assert not np_.on_ce("qp1", 49.9e-6)
    assert np_.on_ce("qp1", 50e-6)
    assert not np_.on_ce("qp1", 60e-6)
    assert np_.counters() == {"ce_received": 6, "cnps_sent": 3, "cnps_suppressed": 3}
    np_.forget("qp1")
    assert np_.on_ce("qp1", 61e-6)


def test_np_interval_is_scaled():
    np_ = NotificationPoint(DcqcnSpec.from_hardware(100e6, 400e9))
    assert np_.on_ce(7, 0.0)
    assert not np_.on_ce(7, 0.199)
    assert np_.on_ce(7, 0.2)


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"line_rate_bps": 0}, "line_rate_bps"),
        ({"time_scale": 0}, "time_scale"),
        ({"g": 0}, "g"),
        ({"g": 1.0}, "g"),
        ({"alpha_init": 1.5}, "alpha_init"),
        ({"alpha_period_s": 0}, "alpha_period_s"),
        ({"increase_period_s": -1e-6}, "increase_period_s"),
        ({"cnp_interval_s": float("nan")}, "cnp_interval_s"),
        ({"byte_counter_bytes": 0}, "byte_counter_bytes"),
        ({"byte_counter_bytes": 1.5}, "byte_counter_bytes"),
        ({"fast_recovery_steps": -1}, "fast_recovery_steps"),
        ({"rate_ai_bps": 0}, "rate_ai_bps"),
        ({"rate_hai_bps": 2 * LINE}, "rate_hai_bps"),
        ({"min_rate_bps": LINE}, "min_rate_bps"),
    ],
)
def test_spec_rejects(kw, key):
    args = {"line_rate_bps": LINE, **kw}
    with pytest.raises(ConfigError, match=f"{key}="):
        DcqcnSpec(**args)


def test_spec_rejects_unknown_key():
    with pytest.raises(ConfigError, match="unknown DcqcnSpec key.*rate_ia_bps"):
        DcqcnSpec.from_dict({"line_rate_bps": LINE, "rate_ia_bps": 1})


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"time_scale": 2}, "time_scale"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_from_hardware_rejects_overrides(kw, key):
    with pytest.raises(ConfigError, match=key):
        DcqcnSpec.from_hardware(100e6, 400e9, **kw)


def test_from_hardware_rejects_bad_modelled_rate():
    with pytest.raises(ConfigError, match="modelled_rate_bps="):
        DcqcnSpec.from_hardware(100e6, 0)


def closed_loop(line_bps: float, time_scale: float, seed: int = 1):
    """Two RPs through one bottleneck of `line_bps`, RED marking, NP at the receiver.

    Fluid steps of 1 us modelled; 1000-byte packets; RED with the paper's
    Kmin 5 KB, Kmax 200 KB, Pmax 1% (section 5) on the queue seen at
    enqueue; CNPs reach the sender at once. Flow 2 joins after 5 ms modelled.
    Returns (mean rates over the second half, maximum queue in the second half).
    """
    s = DcqcnSpec(line_rate_bps=line_bps, time_scale=time_scale)
    dt, duration, start2 = 1e-6 * time_scale, 0.1 * time_scale, 0.005 * time_scale
    rng = random.Random(seed)
    kmin, kmax, pmax, pkt = 5_000, 200_000, 0.01, 1000
    np_ = NotificationPoint(s)
    rps: list[ReactionPoint | None] = [ReactionPoint(s, 0.0), None]
    credit, sent, queue, queue_max = [0.0, 0.0], [0, 0], 0.0, 0.0
    for k in range(int(round(duration / dt))):
        now = k * dt
        if rps[1] is None and now >= start2:
            rps[1] = ReactionPoint(s, now)
        for i, rp in enumerate(rps):
            if rp is None:
                continue
            rp.advance(now)
            credit[i] += rp.rate_bps * dt / 8
            n = 0
            while credit[i] >= pkt:
                credit[i] -= pkt
                n += 1
                p = (
                    0.0
                    if queue <= kmin
                    else pmax
                    if queue >= kmax
                    else pmax * (queue - kmin) / (kmax - kmin)
                )
                queue += pkt
                if rng.random() < p and np_.on_ce(i, now):
                    rp.on_cnp(now)
            if n:
                rp.on_bytes_sent(n * pkt, now)
            if now >= duration / 2:
                sent[i] += n * pkt
        queue = max(0.0, queue - line_bps * dt / 8)
        if now >= duration / 2:
            queue_max = max(queue_max, queue)
    rates = [8 * b / (duration / 2) for b in sent]
    return rates, queue_max


@pytest.mark.parametrize("line_bps, time_scale", [(40e9, 1.0), (100e6, 400.0)])
def test_two_flows_converge_to_a_fair_share_with_a_bounded_queue(line_bps, time_scale):
    rates, queue_max = closed_loop(line_bps, time_scale)
    jain = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))
    assert jain >= 0.9, rates
    assert sum(rates) >= 0.8 * line_bps  # the bottleneck stays busy
    assert queue_max < 200_000  # below Kmax: marking holds the queue

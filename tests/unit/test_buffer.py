"""The shared buffer model: threshold arithmetic, PFC decisions, ECN, drops (time injected)."""

import random

import pytest

from emu.config import MTU_FRAME_BYTES, BufferSpec, ConfigError, EcnSpec, PfcSpec
from emu.proto.pfc import quanta_to_s
from emu.switch.buffer import (
    DROP_HEADROOM,
    DROP_LOSSLESS_NO_PFC,
    DROP_LOSSY,
    HEADROOM,
    SHARED,
    SharedBuffer,
)

RATE = 20_000_000
F = 1000  # frame size used in these tests


def make(pfc=None, ecn=None, spec=None, ports=(1, 2, 3, 4)):
    return SharedBuffer(
        spec or BufferSpec(size_bytes=1 << 20),
        pfc or PfcSpec(),
        ecn or EcnSpec(enabled=False),
        {p: RATE for p in ports},
        rng=random.Random(1),
    )


def test_dynamic_xoff_threshold_is_alpha_times_free_buffer():
    buf = make()
    headroom = 16 * MTU_FRAME_BYTES
    assert buf.reserved == 4 * headroom  # one lossless priority on four ports
    assert buf.xoff_threshold() == pytest.approx((1 << 20) / 8 - 4 * headroom / 8)
    buf.admit(1, 3, 2, F, False, 0.0)
    assert buf.xoff_threshold() == pytest.approx(((1 << 20) - 4 * headroom - F) / 8)


def test_lossless_ingress_xoff_headroom_then_drop_and_xon_on_drain():
    buf = make()
    charges = []
    # The fixed point of x = alpha * (B - R - x): where the first frame spills over.
    limit = (buf.spec.size_bytes - buf.reserved) / 9
    while True:
        res = buf.admit(1, 3, 2, F, False, now=0.0)
        assert res is not None
        charges.append(res[0])
        if res[0] == HEADROOM:
            break
    assert charges.count(SHARED) == int(limit // F)
    assert buf.pfc_due(0.0) == [(1, {3: 0xFFFF})]  # XOFF out of ingress port 1, priority 3
    assert buf.pfc_due(0.0) == []  # once, not per frame
    # In-flight frames fill the headroom; beyond it they are lossless drops.
    while buf.admit(1, 3, 2, F, False, 0.0) is not None:
        charges.append(HEADROOM)
    assert buf.headroom_used[(1, 3)] <= buf.headroom[1]
    assert buf.counters.drops[DROP_HEADROOM] == 1
    # Refresh every half pause time while still above the resume point.
    half = quanta_to_s(0xFFFF, RATE) / 2
    assert buf.pfc_due(half - 1e-3) == []
    assert buf.pfc_due(half) == [(1, {3: 0xFFFF})]
    # Drain: XON (quanta 0) once below XOFF minus the hysteresis, headroom empty.
    for charge in reversed(charges):
        buf.release(1, 3, 2, F, charge)
    assert buf.pfc_due(half + 0.01) == [(1, {3: 0})]
    assert buf.counters.xoff_sent[(1, 3)] == 2 and buf.counters.xon_sent[(1, 3)] == 1
    assert buf.shared_used == 0 and buf.egress[(2, 3)] == 0


def test_xon_waits_for_the_hysteresis():
    buf = make()
    charges = []
    while True:
        res = buf.admit(1, 3, 2, F, False, 0.0)
        charges.append(res[0])
        if res[0] == HEADROOM:
            break
    buf.pfc_due(0.0)
    buf.release(1, 3, 2, F, charges.pop())  # headroom frame leaves
    buf.release(1, 3, 2, F, charges.pop())  # one shared frame: still within 2 MTU of XOFF
    assert buf.pfc_due(0.001) == []
    for _ in range(3):
        buf.release(1, 3, 2, F, charges.pop())
    assert buf.pfc_due(0.002) == [(1, {3: 0})]


def test_lossy_priority_tail_drops_at_its_dynamic_threshold():
    buf = make()
    admitted = 0
    while buf.admit(1, 0, 2, F, False, 0.0) is not None:
        admitted += 1
    free0 = buf.spec.size_bytes - buf.reserved
    assert admitted == int((free0 / 3) // F)  # x = 1/2 (B - R - x)
    assert buf.counters.drops[DROP_LOSSY] == 1
    assert buf.pfc_due(0.0) == []  # lossy traffic never pauses anyone


def test_pfc_off_lossless_class_drops_instead_of_pausing():
    buf = make(pfc=PfcSpec(enabled=False))
    while buf.admit(1, 3, 2, F, False, 0.0) is not None:
        pass
    assert buf.counters.drops[DROP_LOSSLESS_NO_PFC] == 1
    assert buf.pfc_due(0.0) == [] and buf.reserved == 0


def test_ecn_never_below_kmin_always_above_kmax_linear_between():
    ecn = EcnSpec(kmin_bytes=10 * F, kmax_bytes=30 * F, pmax=0.2)
    buf = make(ecn=ecn, spec=BufferSpec(size_bytes=8 << 20))
    marks = []
    for _ in range(60):
        res = buf.admit(1, 3, 2, F, True, 0.0)
        marks.append(res[1])
    # Queue before frame i is i*F: unmarked up to Kmin, all marked from Kmax.
    assert not any(marks[:11])
    assert all(marks[30:])
    # Between, the probability rises linearly to Pmax: check with many trials at the middle.
    mid = make(ecn=ecn, spec=BufferSpec(size_bytes=8 << 20))
    hits = sum(mid._ecn_mark(2, 20 * F) for _ in range(20000))
    assert hits / 20000 == pytest.approx(0.1, abs=0.01)
    # Non-ECT and other priorities are never marked.
    assert buf.admit(1, 3, 2, F, False, 0.0)[1] is False
    assert buf.admit(1, 0, 2, F, True, 0.0)[1] is False


def test_default_ecn_thresholds_scale_with_rate_and_floor_at_frames():
    ecn = EcnSpec()
    assert ecn.thresholds(25_000_000_000) == (100_000, 400_000)
    assert ecn.thresholds(20_000_000) == (4 * MTU_FRAME_BYTES, 16 * MTU_FRAME_BYTES)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: PfcSpec(lossless_priorities=(8,)), "lossless_priorities"),
        (lambda: PfcSpec(pause_quanta=0), "pause_quanta=0"),
        (lambda: EcnSpec(pmax=1.5), "pmax=1.5"),
        (lambda: EcnSpec(kmin_bytes=5000, kmax_bytes=100), "kmin_bytes=5000"),
        (lambda: BufferSpec(size_bytes=100), "size_bytes=100"),
        (lambda: BufferSpec(alpha_lossless=0), "alpha_lossless=0"),
        (lambda: BufferSpec.from_dict({"size": 1}), "unknown BufferSpec key"),
    ],
)
def test_bad_config_names_the_key(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_headroom_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="cannot hold the headroom"):
        make(spec=BufferSpec(size_bytes=16 * MTU_FRAME_BYTES), ports=(1, 2))

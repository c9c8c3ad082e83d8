"""Go-back-N's loss recovery model (emu/models/loss_recovery.py), by hand from its formula:
floor = (1 - p*L) x sent - message - L x MTU payload (Bertsekas & Gallager, Data Networks, 2.4)."""

from __future__ import annotations

import doctest

import pytest

from emu.host.rnic import DEFAULT_MTU_PAYLOAD
from emu.models import loss_recovery
from emu.models.loss_recovery import go_back_n_floor


def test_no_loss_keeps_all_but_the_message_in_progress():
    # p = 0, L = 0: (1 - 0) x 4 MiB - 1 MiB - 0 = 3 MiB.
    assert go_back_n_floor(4 << 20, 0.0, 0.0, 1 << 20) == 3 << 20


def test_livelock_defaults_one_loss_in_256_with_a_loop_of_8():
    # p = 1/256, L = 8: efficiency 1 - 8/256 = 0.96875; of 10 MiB sent, 0.96875 x 10485760 =
    # 10158080 B, less one 1 MiB message (1048576) and one loop of 8 x 1024 B (8192):
    # 10158080 - 1048576 - 8192 = 9101312 B.
    floor = go_back_n_floor(10 << 20, 1 / 256, 8.0, 1 << 20, mtu_payload_bytes=1024)
    assert floor == pytest.approx(9_101_312)


def test_the_loop_in_flight_is_counted_in_the_nics_payload_per_frame():
    # Same p and L with the NIC's own payload per frame: the floor falls by L x MTU payload
    # against an MTU payload of 0 (the message and the efficiency term are the same).
    with_mtu = go_back_n_floor(10 << 20, 1 / 256, 8.0, 1 << 20)
    without = go_back_n_floor(10 << 20, 1 / 256, 8.0, 1 << 20, mtu_payload_bytes=0)
    assert without - with_mtu == pytest.approx(8 * DEFAULT_MTU_PAYLOAD)


def test_a_loop_as_long_as_the_loss_interval_leaves_no_floor():
    # p = 1/256, L = 256: 1 - p*L = 0, so the floor is -message - L x MTU: below zero
    # (-65536 - 256 x 1024 = -327680): every frame sent is resent once more.
    floor = go_back_n_floor(1 << 20, 1 / 256, 256.0, 65536, mtu_payload_bytes=1024)
    assert floor == pytest.approx(-327_680)


def test_the_models_doctests_pass():
    result = doctest.testmod(loss_recovery, verbose=False)
    assert result.attempted > 0 and result.failed == 0

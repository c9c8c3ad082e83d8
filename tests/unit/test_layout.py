"""The controllers' shared vocabulary (controllers/layout.py): bands that must not overlap."""

from __future__ import annotations

import pytest

from controllers import layout


def test_barrier_xid_bands_do_not_overlap() -> None:
    routing, agg = layout.ROUTING_BARRIER_XIDS, layout.AGGREGATION_BARRIER_XIDS
    assert routing.last < agg.first or agg.last < routing.first


@pytest.mark.parametrize("band", [layout.ROUTING_BARRIER_XIDS, layout.AGGREGATION_BARRIER_XIDS])
def test_an_xid_band_wraps_inside_itself(band: layout.XidBand) -> None:
    assert band.next(band.first) == band.first + 1
    assert band.next(band.last) == band.first
    xid = band.last - 2
    for _ in range(10):
        xid = band.next(xid)
        assert xid in band


def test_a_bad_band_is_refused() -> None:
    with pytest.raises(ValueError, match="size=0x0"):
        layout.XidBand(0x10, 0)
    with pytest.raises(ValueError, match="first=0xffffffff"):
        layout.XidBand(0xFFFF_FFFF, 2)


def test_cookie_bands_and_group_bands_are_distinct() -> None:
    cookies = [
        layout.ROUTING_COOKIE,
        layout.ADAPTIVE_COOKIE,
        layout.AGGREGATION_COOKIE,
        layout.TAGGER_COOKIE,
        layout.UGAL_COOKIE,
    ]
    assert len({c & layout.COOKIE_BAND_MASK for c in cookies}) == 5
    assert (
        layout.ROUTING_GROUP_BASE
        < layout.ADAPTIVE_GROUP_BASE
        < layout.AGGREGATION_GROUP_BASE
        < layout.UGAL_GROUP_BASE
    )

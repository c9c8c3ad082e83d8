"""The significance tests of emu/models/stats.py: quantile tables, the interval of a mean
of ratios to a noisy reference, the band of two models, chi-square against equal shares."""

from __future__ import annotations

import numpy as np
import pytest

from emu.models import stats


def test_the_quantile_tables_and_what_lies_beyond_them():
    assert stats.t_995(1) == pytest.approx(63.657)
    assert stats.t_995(14) == pytest.approx(2.977)
    assert stats.t_995(21) == pytest.approx(2.819)  # the next row the table has (22)
    assert stats.t_995(30) == pytest.approx(2.750)
    assert stats.t_995(1000) == pytest.approx(2.576)  # the normal's
    assert stats.chi2_999(1) == pytest.approx(10.828)
    assert stats.chi2_999(7) == pytest.approx(24.322)
    # Wilson-Hilferty beyond the table, against the tables' 26.124, 32.909 and 59.703.
    assert stats.chi2_999(8) == pytest.approx(26.124, rel=0.01)
    assert stats.chi2_999(12) == pytest.approx(32.909, rel=0.02)
    assert stats.chi2_999(30) == pytest.approx(59.703, rel=0.01)


def test_the_interval_covers_the_truth_when_one_noisy_reference_divides_every_run():
    """99% intervals of mean(measured / reference - model) cover the true 0 about 99%
    of the time. One reference measurement and the runs' own t-interval (what
    ecmp-vs-adaptive's check did before) do not: the reference's error moves all
    runs together, which their spread cannot show."""
    rng = np.random.default_rng(7)
    n, m, trials = 15, 5, 3000
    covered = naive_covered = 0
    for _ in range(trials):
        bps = rng.normal(0.62 * 14.4, 0.3, n)  # the runs' spread, as measured (README)
        references = list(rng.normal(14.4, 0.15, m))  # 1% spread, as measured
        got = list(bps / np.mean(references))
        diffs = [g - 0.62 for g in got]
        half, df = stats.mean_interval(diffs, got, [(1,)] * n, {(1,): references})
        assert m - 1 <= df <= n - 1 + m - 1
        covered += abs(np.mean(diffs)) <= half
        single = [g - 0.62 for g in bps / references[0]]
        naive = stats.t_995(n - 1) * np.std(single, ddof=1) / n**0.5
        naive_covered += abs(np.mean(single)) <= naive
    # 3000 trials estimate a coverage within +-0.2% (one standard error at 99%):
    # 0.98 is five of them below the nominal 0.99; the old design covers ~0.95.
    assert covered / trials >= 0.98, covered / trials
    assert naive_covered / trials < 0.97, naive_covered / trials
    # A reference without spread adds nothing: the runs' own t-interval.
    diffs = [0.01, -0.02, 0.015, 0.0]
    half, df = stats.mean_interval(diffs, [0.6] * 4, [(1,)] * 4, {(1,): [14e6, 14e6]})
    assert df == pytest.approx(3) and half == pytest.approx(
        stats.t_995(3) * np.std(diffs, ddof=1) / 2
    )
    # Nothing varies: no width.
    assert stats.mean_interval([0.0, 0.0], [0.6, 0.6], [(1,)] * 2, {(1,): [1.0, 1.0]}) == (
        0.0,
        float("inf"),
    )


def test_the_band_holds_runs_between_the_models_and_fails_them_outside():
    low = [0.50, 0.60, 0.55, 0.62]
    high = [0.52, 0.63, 0.57, 0.64]
    keys = [(1,)] * 4
    reference = {(1,): [14.3e6, 14.4e6, 14.35e6]}
    for got, holds in (
        ([0.51, 0.62, 0.55, 0.63], True),  # inside the band
        ([0.60, 0.70, 0.66, 0.72], False),  # well above fair sharing
        ([0.40, 0.52, 0.45, 0.50], False),  # the fabric lost throughput
    ):
        band = stats.between(got, low, high, keys, reference)
        assert band.holds is holds, (got, band)
    band = stats.between([0.51, 0.62, 0.55, 0.63], low, high, keys, reference)
    assert band.measured == pytest.approx(0.5775)
    assert (band.low, band.high) == (pytest.approx(0.5675), pytest.approx(0.59))
    assert band.below == pytest.approx(0.01) and band.above == pytest.approx(-0.0125)
    assert (band.runs, band.references) == (4, 3)
    # Each reference is counted once, however many runs it divided.
    two = stats.between(
        [0.5, 0.6, 0.55], [0.5] * 3, [0.6] * 3, [(1,), (2,), (1,)], {(1,): [1, 2], (2,): [3, 4]}
    )
    assert two.references == 4
    assert stats.between([0.5], [0.5], [0.6], [(1,)], reference) is None


def test_chi_square_against_equal_shares_sums_its_groups():
    # 456 binary choices 246/210: (18^2 + 18^2) / 228.
    assert stats.chi_square_uniform({2: [246, 210]}) == (pytest.approx(648 / 228), 1, 456)
    assert stats.chi_square_uniform({2: [10, 10], 4: [5, 5, 5, 5]}) == (0.0, 4, 40)
    stat, df, n = stats.chi_square_uniform({2: [456, 0], 3: [3, 0, 0]})
    assert (stat, df, n) == (pytest.approx(456 + 6), 3, 459)
    assert stats.chi_square_uniform({}) == (0.0, 0, 0)

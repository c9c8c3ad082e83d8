"""The significance tests that hold a scenario's measurements to a model.

Owns the quantiles and tests that checks use where a measurement is noisy and
its verdict must not hang on one run's luck:

- `t_995`, `chi2_999`: Student's t at 99% two-sided and chi-square at
  p = 0.001 from their tables (beyond them, the normal's 2.576 and
  Wilson & Hilferty's approximation, PNAS 1931), so that no check needs scipy.
- `mean_interval`: the 99% half-width of the mean of differences between runs
  and a model, where every run was divided by the mean of a few reference
  measurements: the runs' own spread and each reference's error, their
  degrees of freedom by Welch (1947) and Satterthwaite (1946).
- `between`: two one-sided t-tests of measured runs against a band of two
  models (`Band`), with that interval.
- `chi_square_uniform`: Pearson's chi-square of counts against equal shares,
  summed over independent groups.

Pure: numbers in, numbers out (tests/unit/test_models_stats.py). It holds no
threshold of any check: the caller compares, and names what it compares.
scenarios/ecmp_vs_adaptive.py uses all of it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# Two-sided 99% quantiles of Student's t by degrees of freedom (beyond 30: the normal's).
T_995 = {
    1: 63.657,
    2: 9.925,
    3: 5.841,
    4: 4.604,
    5: 4.032,
    6: 3.707,
    7: 3.499,
    8: 3.355,
    9: 3.250,
    10: 3.169,
    11: 3.106,
    12: 3.055,
    13: 3.012,
    14: 2.977,
    15: 2.947,
    16: 2.921,
    17: 2.898,
    18: 2.878,
    19: 2.861,
    20: 2.845,
    22: 2.819,
    25: 2.787,
    30: 2.750,
}
# Chi-square at p = 0.001 by degrees of freedom (beyond 7: Wilson-Hilferty).
CHI2_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322}


def t_995(df: int) -> float:
    """Student's t two-sided 99% quantile for `df` degrees of freedom.

    A `df` the table skips takes the next larger row (t(21) = 2.831 reads as
    t(22) = 2.819, at most 1% narrower up to 30); beyond 30, the normal's
    2.576, which is 6% narrower than t(31) = 2.744.
    """
    return next((T_995[d] for d in sorted(T_995) if d >= df), 2.576)


def chi2_999(df: int) -> float:
    """Chi-square's upper quantile at p = 0.001 for `df` degrees of freedom.

    From the table up to 7, else Wilson & Hilferty's cube-root normal
    approximation (z = 3.090), within 1% from df = 8 on.
    """
    if df in CHI2_999:
        return CHI2_999[df]
    return df * (1 - 2 / (9 * df) + 3.090 * (2 / (9 * df)) ** 0.5) ** 3


def mean_interval(
    diffs: list[float], got: list[float], keys: list, reference: dict
) -> tuple[float, float]:
    """The 99% two-sided half-width of mean(diffs), and its degrees of freedom, where
    diff i = got i - a model and got i = a measurement / the mean of reference[keys[i]].

    Two independent errors: the runs' own spread (their standard error), and
    each reference mean's (its relative standard error moves every run it
    divides together, which the runs' spread cannot show). The degrees of
    freedom of the sum are Welch-Satterthwaite's.

    Args:
        diffs: each run's normalised measurement less the model's figure (2 or more).
        got: each run's normalised measurement.
        keys: each run's reference, a key of `reference`.
        reference: by key, the reference's measurements (2 or more each).

    Returns:
        (half-width, degrees of freedom); (0, inf) when nothing varies.
    """
    n = len(diffs)
    runs_var = statistics.variance(diffs) / n
    terms = []  # (variance, degrees of freedom) of each reference's share of the mean
    for key in dict.fromkeys(keys):
        refs = reference[key]
        share = sum(g for g, k in zip(got, keys) if k == key) / n
        rel_se = statistics.stdev(refs) / statistics.mean(refs) / len(refs) ** 0.5
        terms.append(((share * rel_se) ** 2, len(refs) - 1))
    var = runs_var + sum(v for v, _df in terms)
    if var == 0:
        return 0.0, float("inf")
    df = var**2 / (runs_var**2 / (n - 1) + sum(v**2 / d for v, d in terms))
    return t_995(int(df)) * var**0.5, df


@dataclass(frozen=True)
class Band:
    """Measured runs against a band of two models, run by run (`between`).

    Attributes:
        measured, low, high: the means of the runs and of the two models.
        below, above: the means of (run - low) and of (run - high).
        slack_low, slack_high: 99% half-widths of `below` and `above` (`mean_interval`).
        df: the degrees of freedom of the upper test.
        runs: how many runs; references: how many reference measurements divided them.
    """

    measured: float
    low: float
    high: float
    below: float
    above: float
    slack_low: float
    slack_high: float
    df: float
    runs: int
    references: int

    @property
    def holds(self) -> bool:
        """Neither one-sided test says the runs sit below `low` or above `high`."""
        return self.below >= -self.slack_low and self.above <= self.slack_high


def between(
    got: list[float], low: list[float], high: list[float], keys: list, reference: dict
) -> Band | None:
    """Whether runs `got` lie between models `low` and `high`: two one-sided t-tests at 99%.

    Run i was normalised by the mean of reference[keys[i]], whose error enters
    the intervals (`mean_interval`). None with fewer than 2 runs: no spread,
    no test.
    """
    if len(got) < 2:
        return None
    below = [g - m for g, m in zip(got, low)]
    above = [g - m for g, m in zip(got, high)]
    slack_low, _ = mean_interval(below, got, keys, reference)
    slack_high, df = mean_interval(above, got, keys, reference)
    return Band(
        measured=statistics.mean(got),
        low=statistics.mean(low),
        high=statistics.mean(high),
        below=statistics.mean(below),
        above=statistics.mean(above),
        slack_low=slack_low,
        slack_high=slack_high,
        df=df,
        runs=len(got),
        references=sum(len(reference[k]) for k in dict.fromkeys(keys)),
    )


def chi_square_uniform(groups: dict[int, list[int]]) -> tuple[float, int, int]:
    """Pearson's chi-square of each group's counts against equal shares, summed.

    Args:
        groups: by number of choices m, how often each of the m was taken.

    Returns:
        (statistic, degrees of freedom (the sum of m - 1), choices counted).
    """
    stat, df, n = 0.0, 0, 0
    for m, counts in groups.items():
        total = sum(counts)
        stat += sum((c - total / m) ** 2 / (total / m) for c in counts)
        df += m - 1
        n += total
    return stat, df, n

"""Chi-square tests for "these samples come from that distribution" (no scipy needed).

Two tests, both over bins of token sequences with pooled low-count bins:
  goodness_of_fit   observed counts vs exact probabilities (the toy, whose distribution is known)
  homogeneity       two samples vs each other (speculative vs plain sampling on a real model)
Bins whose expected count is below `min_expected` (5: Cochran's rule, under which the
chi-square approximation holds) are pooled into one "rest" bin; if the rest is still below it,
the smallest remaining bins join it. The p-value is the chi-square survival function,
Q(df/2, x/2) = torch.special.gammaincc, exact to float64 precision.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch

MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class ChiSquare:
    statistic: float
    df: int  # bins - 1
    p_value: float
    bins: int  # after pooling

    def as_dict(self) -> dict:
        return {"chi2": self.statistic, "df": self.df, "p_value": self.p_value, "bins": self.bins}


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularised upper incomplete gamma Q(df/2, x/2)."""
    if df <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    a, z = torch.tensor(df / 2, dtype=torch.float64), torch.tensor(x / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(a, z))


def _test(cells: list[list[tuple[float, float]]], min_expected: float) -> ChiSquare:
    """cells: one entry per bin, each a list of (observed, expected) per sample. Pools bins whose
    smallest expected count is below min_expected, then computes Pearson's statistic."""
    def small(cell):
        return min(e for _, e in cell)

    kept = sorted((c for c in cells if small(c) >= min_expected), key=small)
    rest = [[sum(c[i][j] for c in cells if small(c) < min_expected) for j in (0, 1)] for i in range(len(cells[0]))]
    while kept and 0 < min(e for _, e in rest) < min_expected:  # the rest bin is too small: widen it
        for i, (o, e) in enumerate(kept.pop(0)):
            rest[i] = [rest[i][0] + o, rest[i][1] + e]
    bins = kept + ([[tuple(r) for r in rest]] if any(o or e for o, e in rest) else [])
    statistic = 0.0
    for cell in bins:
        for o, e in cell:
            statistic += (o - e) ** 2 / e if e > 0 else (math.inf if o > 0 else 0.0)
    df = len(bins) - 1
    return ChiSquare(statistic, df, chi2_sf(statistic, df), len(bins))


def goodness_of_fit(observed: Counter, probs: dict, impossible: int = 0,
                    min_expected: float = MIN_EXPECTED) -> ChiSquare:
    """Do `observed` counts (n draws) fit the exact distribution? `probs` gives the bins, chosen
    without looking at the draws (e.g. every outcome with expected count >= 5); every other
    outcome falls in the rest bin, of probability 1 - sum(probs). `impossible`: draws of an
    outcome of probability 0 (any at all rejects: p = 0)."""
    n = sum(observed.values())
    if impossible:
        return ChiSquare(math.inf, 0, 0.0, 0)
    cells = [[(observed.get(key, 0), n * p)] for key, p in probs.items()]
    others = n - sum(observed.get(key, 0) for key in probs)
    cells.append([(others, max(0.0, n * (1 - sum(probs.values()))))])
    return _test(cells, min_expected)


def homogeneity(a: Counter, b: Counter, min_expected: float = MIN_EXPECTED) -> ChiSquare:
    """Were samples `a` and `b` drawn from the same distribution? Pearson's chi-square on the
    2 x bins table; expected counts split each bin's total in proportion to the sample sizes."""
    na, nb = sum(a.values()), sum(b.values())
    share = na / (na + nb)
    cells = []
    for key in set(a) | set(b):
        total = a.get(key, 0) + b.get(key, 0)
        cells.append([(a.get(key, 0), total * share), (b.get(key, 0), total * (1 - share))])
    return _test(cells, min_expected)

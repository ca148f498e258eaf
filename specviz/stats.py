"""Goodness-of-fit helpers for checking samplers. Limits come from chi2(df) at about 4 sigma."""

from __future__ import annotations

import math

import torch

SIGMAS = 4.0  # one-sided normal tail 3.2e-5: a correct sampler fails about once in 30,000 runs


def chi2_threshold(df: int, sigmas: float = SIGMAS) -> float:
    """Upper quantile of chi2(df) at the one-sided normal tail of `sigmas` (Wilson-Hilferty)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + sigmas * math.sqrt(c)) ** 3


def chi2_stat(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic of observed counts against probabilities; inf if a zero-probability cell is hit."""
    counts = counts.double().flatten()
    probs = probs.double().flatten()
    n = counts.sum()
    support = probs > 0
    if bool((counts[~support] > 0).any()):
        return math.inf, int(support.sum()) - 1
    expected = n * probs[support]
    if not bool((expected >= 5).all()):
        raise ValueError(f"too few draws for a chi-square test: expected counts {expected.tolist()} include < 5")
    return float(((counts[support] - expected) ** 2 / expected).sum()), int(support.sum()) - 1


def assert_fits(counts: torch.Tensor, probs: torch.Tensor, what: str) -> None:
    stat, df = chi2_stat(counts, probs)
    limit = chi2_threshold(df)
    n = int(counts.sum())
    if stat > limit:
        raise AssertionError(
            f"{what}: chi2 = {stat:.1f} > {limit:.1f} (df {df}, N {n}, 4 sigma)\n"
            f"observed {(counts.double().flatten() / n).tolist()}\nexpected {probs.double().flatten().tolist()}"
        )


def noncentrality(n: int, probs: torch.Tensor, wrong: torch.Tensor) -> float:
    """Expected chi2 excess when draws come from `wrong` but are tested against `probs`: N * sum (w - p)^2 / p."""
    probs, wrong = probs.double().flatten(), wrong.double().flatten()
    if bool((wrong[probs == 0] > 0).any()):
        return math.inf
    s = probs > 0
    return n * float(((wrong[s] - probs[s]) ** 2 / probs[s]).sum())


def two_sample_stat(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int]:
    """Chi-square homogeneity statistic of two count vectors of equal totals over the same cells."""
    a, b = a.double().flatten(), b.double().flatten()
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    return float(((a - b) ** 2 / (a + b)).sum()), int(keep.sum()) - 1


def pool_small(
    counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge the cells whose expected count is under `min_expected` into one, so a chi-square test over a
    large vocabulary stays valid. Cells with probability 0 stay apart (a draw there is always an error)."""
    counts, probs = counts.double().flatten(), probs.double().flatten()
    n = float(counts.sum())
    small = (probs > 0) & (probs * n < min_expected)
    keep = ~small
    pooled_c = torch.cat([counts[keep], counts[small].sum()[None]])
    pooled_p = torch.cat([probs[keep], probs[small].sum()[None]])
    if float(pooled_p[-1]) * n < min_expected:  # the pool itself is too small: fold it into the least likely cell
        nonzero = (pooled_p[:-1] > 0).nonzero().flatten()
        j = int(nonzero[pooled_p[nonzero].argmin()])
        pooled_c[j] += pooled_c[-1]
        pooled_p[j] += pooled_p[-1]
        pooled_c, pooled_p = pooled_c[:-1], pooled_p[:-1]
    return pooled_c, pooled_p

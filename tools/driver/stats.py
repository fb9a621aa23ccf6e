"""Statistics for baseline-vs-branch comparisons, with SciPy (python3-scipy).

For each metric the two sides' per-iteration values are compared the way benchstat and Google
Benchmark's compare tool do it, with distribution-free tools (a handful of iterations on a noisy
machine is nowhere near normal):

- median, mean and sample standard deviation per side;
- delta = (median B - median A) / median A, in %;
- a 95 % confidence interval of that delta: percentile bootstrap over both samples (resampled
  independently, fixed seed so a report is reproducible);
- a two-sided Mann-Whitney U test of "same distribution": p-value;
- the verdict: "~" (no significant change: p >= alpha, or the interval holds 0), else
  "improvement" or "regression" by the metric's direction ("higher"/"lower" for metrics that
  have no better direction, such as CPU % in a closed loop).

Runs interleave the sides (round i runs every side's iteration i, in an order that rotates from
round to round: `interleaved_order`), so the iterations of a round share whatever the machine was
doing then: next to each other for two sides, with other sides' iterations between them for
more. A guest whose speed drifts by a third within a run moves both; side against side, that
drift swamps a change of a few %, while the ratio within each round cancels most of it. With at least MIN_PAIRS rounds that have both sides,
`compare_rounds` therefore pairs them (`test` = "paired"):

- x = the per-round log ratios log(B/A); when a paired value is 0 or negative (an error count),
  the differences B - A instead;
- delta = the median of x as a change in % (exp(median) - 1; for differences, relative to A's
  median); with an even number of rounds, the geometric mean of the two middle ratios;
- its interval: the distribution-free one for a median from the order statistics of x (the sign
  test's; at least 95 %: from the smallest to the largest x for 6 to 8 rounds);
- p: the two-sided Wilcoxon signed-rank test of x (exact unless some x is 0);
- the verdict by the same rule as above: with 6 to 8 rounds both hold only when every round
  moved the same way.

Below MIN_PAIRS it compares the sides unpaired, as `compare` does: with 5 pairs neither the
signed-rank nor the sign test can reach p < 0.05 (all five of one sign gives 2/32).

With fewer than 4 iterations a side no difference can reach p < 0.05 with this test (the
smallest two-sided p for 3 vs 3 is 0.1); `min_iterations_note` says so in reports.
"""

import dataclasses
import itertools
import math
import warnings
from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
MIN_PAIRS = 6  # the fewest rounds whose signed-rank test can reach p < ALPHA (2/2^6 = 0.031)
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20190717  # any fixed value: the same samples give the same interval


@dataclasses.dataclass
class Summary:
    n: int
    median: float
    mean: float
    stdev: float
    minimum: float
    maximum: float


@dataclasses.dataclass
class Comparison:
    a: Summary
    b: Summary
    delta_pct: Optional[float]        # None when A's median is 0
    ci_low_pct: Optional[float]
    ci_high_pct: Optional[float]
    p_value: Optional[float]          # None when either side has < 2 values
    verdict: str                      # "~", "improvement", "regression", "higher", "lower"
    test: str = "unpaired"            # "unpaired" (Mann-Whitney) or "paired" (by round)
    pairs: int = 0                    # the rounds paired ("paired" only)


def summarize(values: Sequence[float]) -> Summary:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan)
    return Summary(n=int(v.size), median=float(np.median(v)), mean=float(np.mean(v)),
                   stdev=float(np.std(v, ddof=1)) if v.size > 1 else 0.0,
                   minimum=float(np.min(v)), maximum=float(np.max(v)))


# Up to this many values in all, the p is the exact permutation p (at most C(20, 10) = 184,756
# splits, about a tenth of a second).
EXACT_MAX_VALUES = 20


def _rank_sum_permutation_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of the rank-sum statistic over every split of the pooled values into groups
    of len(a) and len(b): exact with ties too, where SciPy falls back to the normal approximation
    (which at 3 against 3 reports p = 0.047, below the exact test's smallest possible 0.1)."""
    ranks = sps.rankdata(list(a) + list(b)).tolist()
    n, total = len(a), len(ranks)
    mean = n * (total + 1) / 2.0
    observed = abs(sum(ranks[:n]) - mean)
    as_far = splits = 0
    for chosen in itertools.combinations(range(total), n):
        splits += 1
        if abs(sum(ranks[i] for i in chosen) - mean) >= observed - 1e-9:
            as_far += 1
    return as_far / splits


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    """Two-sided Mann-Whitney U p-value: exact up to EXACT_MAX_VALUES values, ties or not; SciPy's
    (its normal approximation, with ties or past 8 a side) for more."""
    if len(a) < 2 or len(b) < 2:
        return None
    if len(set(a) | set(b)) == 1:
        return 1.0  # every value equal: nothing to tell apart
    if len(a) + len(b) <= EXACT_MAX_VALUES:
        return _rank_sum_permutation_p(a, b)
    return float(sps.mannwhitneyu(a, b, alternative="two-sided", method="auto").pvalue)


def _relative_median_delta(a, b, axis=-1):
    ma = np.median(a, axis=axis)
    mb = np.median(b, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (mb - ma) / np.abs(ma) * 100.0  # as compare's delta: a rise is + for any sign


def bootstrap_delta_ci(a: Sequence[float], b: Sequence[float]):
    """95 % percentile-bootstrap interval of the relative median delta, in %, or (None, None)."""
    if len(a) < 2 or len(b) < 2 or np.median(a) == 0:
        return None, None
    if len(set(a)) == 1 and len(set(b)) == 1:
        d = (b[0] - a[0]) / abs(a[0]) * 100.0
        return d, d
    # A resample whose baseline median is 0 has no relative delta: those come out inf/nan and
    # make the interval unusable (reported as None), never a warning on the terminal.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.bootstrap((np.asarray(a, float), np.asarray(b, float)),
                            _relative_median_delta, vectorized=True, paired=False,
                            confidence_level=CONFIDENCE, n_resamples=BOOTSTRAP_RESAMPLES,
                            method="percentile",
                            random_state=np.random.default_rng(BOOTSTRAP_SEED))
    low, high = res.confidence_interval
    if not (math.isfinite(low) and math.isfinite(high)):
        return None, None
    return float(low), float(high)


def _verdict(p: Optional[float], low: Optional[float], high: Optional[float], up: Optional[bool],
             direction: int) -> str:
    """"~" unless p < ALPHA and the interval excludes 0; then the word for a move up or down."""
    significant = p is not None and p < ALPHA and not (
        low is not None and high is not None and low <= 0 <= high)
    if not significant or up is None:
        return "~"
    if direction == 0:
        return "higher" if up else "lower"
    return "improvement" if up == (direction > 0) else "regression"


def median_interval(x: Sequence[float]):
    """The distribution-free interval of the median of x at confidence CONFIDENCE or more: the
    k-th smallest and k-th largest value, k the largest with P(Binomial(n, 1/2) < k) <= half the
    rest; (None, None) when n is too small for any (n < 6)."""
    v = sorted(x)
    n = len(v)
    tail = (1.0 - CONFIDENCE) / 2.0
    k = 0
    while k < n // 2 and sps.binom.cdf(k, n, 0.5) <= tail:  # P(B <= k) = P(B < k + 1)
        k += 1
    if k == 0:
        return None, None
    return v[k - 1], v[n - k]


def compare_rounds(a: Dict[int, float], b: Dict[int, float], direction: int) -> Comparison:
    """Compares A and B by round (see the module comment): `a` and `b` map each round that gave
    a value to it. Paired over the rounds both have once there are MIN_PAIRS of them; unpaired
    over every value (`compare`) before that."""
    rounds = sorted(set(a) & set(b))
    if len(rounds) < MIN_PAIRS:
        return compare(list(a.values()), list(b.values()), direction)
    sa, sb = summarize(list(a.values())), summarize(list(b.values()))
    pa = np.asarray([a[r] for r in rounds], dtype=float)
    pb = np.asarray([b[r] for r in rounds], dtype=float)
    if np.all(pa > 0) and np.all(pb > 0):
        x = np.log(pb / pa)  # symmetric: a halving and a doubling weigh the same

        def to_pct(v):
            return math.expm1(v) * 100.0
    else:
        x = pb - pa
        base = abs(float(np.median(pa)))

        def to_pct(v):
            return v / base * 100.0 if base else (0.0 if v == 0 else math.copysign(math.inf, v))
    median = float(np.median(x))
    delta = to_pct(median)
    low, high = median_interval(x.tolist())
    if low is not None:
        low, high = to_pct(low), to_pct(high)
        if not (math.isfinite(low) and math.isfinite(high)):
            low = high = None
    if not math.isfinite(delta):
        delta = None
    if np.all(x == 0):
        p = 1.0  # every round the same: nothing to tell apart
    else:
        with warnings.catch_warnings():  # a zero x: the normal approximation, said quietly
            warnings.simplefilter("ignore")
            p = float(sps.wilcoxon(x, alternative="two-sided").pvalue)
    up = None if median == 0 else median > 0
    return Comparison(sa, sb, delta, low, high, p, _verdict(p, low, high, up, direction),
                      test="paired", pairs=len(rounds))


def compare(a: Sequence[float], b: Sequence[float], direction: int) -> Comparison:
    """Compares per-iteration values of A (baseline) and B (branch).

    direction: +1 if higher is better (RPS), -1 if lower is better (latency), 0 if neither.
    """
    sa, sb = summarize(a), summarize(b)
    delta = None
    if sa.n and sb.n and sa.median != 0:
        delta = (sb.median - sa.median) / abs(sa.median) * 100.0
    elif sa.n and sb.n and sa.median == 0 and sb.median == 0:
        delta = 0.0
    low, high = bootstrap_delta_ci(list(a), list(b))
    p = mann_whitney_p(list(a), list(b))
    up = None if sb.median == sa.median else sb.median > sa.median
    return Comparison(sa, sb, delta, low, high, p, _verdict(p, low, high, up, direction))


def min_iterations_note(n_a: int, n_b: int) -> Optional[str]:
    """A warning when the sample sizes cannot show significance at ALPHA at all."""
    if n_a < 2 or n_b < 2:
        return "fewer than 2 iterations on a side: no test is possible"
    smallest = 2.0 / math.comb(n_a + n_b, n_a)  # all of A below all of B, two-sided
    if smallest >= ALPHA:
        return (f"{n_a} vs {n_b} iterations: the smallest possible p is {smallest:.3f}, so no "
                f"change can be significant at p < {ALPHA}; use at least 4 per side")
    return None


def interleaved_order(labels: List[str], iterations: int) -> List[tuple]:
    """The run order: round 1 runs iteration 1 of every side, then round 2 iteration 2, ... The
    order within a round rotates (A B C, then B C A, then C A B, ...), so every side runs in every
    position equally often over a multiple of len(labels) rounds: whatever favours a position (the
    first run after the previous round's last one, say) does not favour one side in every pair."""
    n = len(labels)
    return [(i, labels[(i - 1 + k) % n]) for i in range(1, iterations + 1) for k in range(n)]

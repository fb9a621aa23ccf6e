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

With fewer than 4 iterations a side no difference can reach p < 0.05 with this test (the
smallest two-sided p for 3 vs 3 is 0.1); `min_iterations_note` says so in reports.
"""

import dataclasses
import math
import warnings
from typing import List, Optional, Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
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


def summarize(values: Sequence[float]) -> Summary:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan)
    return Summary(n=int(v.size), median=float(np.median(v)), mean=float(np.mean(v)),
                   stdev=float(np.std(v, ddof=1)) if v.size > 1 else 0.0,
                   minimum=float(np.min(v)), maximum=float(np.max(v)))


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    """Two-sided Mann-Whitney U p-value (exact for small samples without ties)."""
    if len(a) < 2 or len(b) < 2:
        return None
    if len(set(a) | set(b)) == 1:
        return 1.0  # every value equal: nothing to tell apart
    return float(sps.mannwhitneyu(a, b, alternative="two-sided", method="auto").pvalue)


def _relative_median_delta(a, b, axis=-1):
    ma = np.median(a, axis=axis)
    mb = np.median(b, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (mb - ma) / ma * 100.0


def bootstrap_delta_ci(a: Sequence[float], b: Sequence[float]):
    """95 % percentile-bootstrap interval of the relative median delta, in %, or (None, None)."""
    if len(a) < 2 or len(b) < 2 or np.median(a) == 0:
        return None, None
    if len(set(a)) == 1 and len(set(b)) == 1:
        d = (b[0] - a[0]) / a[0] * 100.0
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
    verdict = "~"
    significant = p is not None and p < ALPHA and not (
        low is not None and high is not None and low <= 0 <= high)
    if significant and sb.median != sa.median:
        up = sb.median > sa.median
        if direction == 0:
            verdict = "higher" if up else "lower"
        else:
            verdict = "improvement" if up == (direction > 0) else "regression"
    return Comparison(sa, sb, delta, low, high, p, verdict)


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
    """The run order: iteration 1 of every side, then iteration 2 of every side, ..."""
    return [(i, label) for i in range(1, iterations + 1) for label in labels]

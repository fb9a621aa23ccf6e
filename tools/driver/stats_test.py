"""The comparison statistics against values known independently of SciPy."""

import math
import random
import unittest

from tools.driver import stats


class StatsTest(unittest.TestCase):
    def test_summary_of_known_values(self):
        s = stats.summarize([2, 4, 4, 4, 5, 5, 7, 9])
        self.assertEqual(s.n, 8)
        self.assertEqual(s.median, 4.5)
        self.assertEqual(s.mean, 5.0)
        self.assertAlmostEqual(s.stdev, math.sqrt(32 / 7))  # sample stdev
        self.assertEqual((s.minimum, s.maximum), (2, 9))
        self.assertEqual(stats.summarize([3]).stdev, 0.0)

    def test_mann_whitney_exact_p_of_complete_separation(self):
        # All 5 of A below all 5 of B: 1 of C(10,5) = 252 orderings each way, p = 2/252.
        self.assertAlmostEqual(stats.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]),
                               2 / 252, places=12)
        # 3 vs 3: the smallest two-sided p is 2/20.
        self.assertAlmostEqual(stats.mann_whitney_p([1, 2, 3], [4, 5, 6]), 0.1, places=12)

    def test_mann_whitney_of_one_swap(self):
        # U = 1 for A = {1,2,3,4,6}, B = {5,7,8,9,10}: P(U <= 1) = 2/252, two-sided 4/252.
        self.assertAlmostEqual(stats.mann_whitney_p([1, 2, 3, 4, 6], [5, 7, 8, 9, 10]),
                               4 / 252, places=12)

    def test_tied_values_get_the_exact_p(self):
        # All of A below all of B, with ties inside each side: still only the two extreme splits
        # of C(6,3) = 20 (and of C(12,6) = 924) are as far apart. SciPy's normal approximation
        # says 0.047 for the first, below what 3 against 3 can ever reach.
        self.assertAlmostEqual(stats.mann_whitney_p([0, 0, 0], [1, 1, 1]), 0.1, places=12)
        self.assertEqual(stats.compare([0, 0, 0], [1, 1, 1], -1).verdict, "~")
        self.assertAlmostEqual(stats.mann_whitney_p([0] * 6, [1] * 6), 2 / 924, places=12)
        # One tie across the sides, {1,2,3} against {3,4,5}: rank sums 6.5 against 14.5 of 21; of
        # the 20 splits, only the one with ranks {1,2,3.5} and its mirror are as far: 4/20.
        self.assertAlmostEqual(stats.mann_whitney_p([1, 2, 3], [3, 4, 5]), 0.2, places=12)

    def test_a_negative_baseline_has_its_interval_around_its_delta(self):
        # Both the delta and its interval measure a rise as +, whatever the baseline's sign.
        c = stats.compare([-10, -11, -9, -10.5, -10.2], [-5, -6, -4, -5.5, -5.2], -1)
        self.assertAlmostEqual(c.delta_pct, 5 / 10.2 * 100)  # medians −10.2 and −5.2
        self.assertLess(0, c.ci_low_pct)
        self.assertLessEqual(c.ci_low_pct, c.delta_pct)
        self.assertLessEqual(c.delta_pct, c.ci_high_pct)
        c = stats.compare([-10] * 3, [-5] * 3, -1)
        self.assertEqual((c.delta_pct, c.ci_low_pct, c.ci_high_pct), (50.0, 50.0, 50.0))

    def test_identical_values_are_not_different(self):
        self.assertEqual(stats.mann_whitney_p([7, 7, 7], [7, 7, 7]), 1.0)
        c = stats.compare([7, 7, 7, 7], [7, 7, 7, 7], +1)
        self.assertEqual(c.verdict, "~")
        self.assertEqual(c.delta_pct, 0.0)

    def test_too_few_values_give_no_p(self):
        self.assertIsNone(stats.mann_whitney_p([1], [2, 3]))
        self.assertEqual(stats.compare([1], [2], +1).verdict, "~")

    def test_delta_is_of_the_medians(self):
        c = stats.compare([100, 90, 110, 100, 100], [120, 120, 130, 110, 120], +1)
        self.assertAlmostEqual(c.delta_pct, 20.0)
        self.assertEqual(c.a.median, 100)
        self.assertEqual(c.b.median, 120)

    def test_verdicts_follow_the_direction(self):
        low = [100, 101, 99, 100, 102, 98]
        high = [110, 111, 109, 112, 110, 108]
        self.assertEqual(stats.compare(low, high, +1).verdict, "improvement")
        self.assertEqual(stats.compare(low, high, -1).verdict, "regression")
        self.assertEqual(stats.compare(high, low, -1).verdict, "improvement")
        self.assertEqual(stats.compare(low, high, 0).verdict, "higher")
        self.assertEqual(stats.compare(high, low, 0).verdict, "lower")

    def test_overlapping_samples_are_no_significant_change(self):
        c = stats.compare([100, 105, 95, 102, 98], [101, 96, 104, 99, 103], +1)
        self.assertEqual(c.verdict, "~")
        self.assertGreater(c.p_value, 0.05)
        self.assertLess(c.ci_low_pct, 0)
        self.assertGreater(c.ci_high_pct, 0)

    def test_interval_covers_a_known_shift(self):
        rng = random.Random(7)
        a = [rng.gauss(1000, 20) for _ in range(40)]
        b = [rng.gauss(1100, 20) for _ in range(40)]  # +10 %
        c = stats.compare(a, b, +1)
        self.assertLess(c.ci_low_pct, 10.0)
        self.assertGreater(c.ci_high_pct, 10.0)
        self.assertLess(c.ci_high_pct - c.ci_low_pct, 4.0)
        self.assertEqual(c.verdict, "improvement")

    def test_interval_is_reproducible(self):
        a, b = [10, 12, 11, 13, 12], [14, 15, 13, 16, 15]
        self.assertEqual(stats.bootstrap_delta_ci(a, b), stats.bootstrap_delta_ci(a, b))

    def test_a_zero_baseline_has_no_relative_interval(self):
        c = stats.compare([0, 0, 0, 0], [1, 2, 1, 2], -1)
        self.assertIsNone(c.delta_pct)
        self.assertIsNone(c.ci_low_pct)

    def test_min_iterations_note(self):
        self.assertIn("smallest possible p is 0.100", stats.min_iterations_note(3, 3))
        self.assertIsNone(stats.min_iterations_note(4, 4))
        self.assertIn("no test", stats.min_iterations_note(1, 5))

    # A guest whose speed drifts by half within a run, and a branch 3.0 to 4.0 % faster in every
    # round (distinct ratios: no ties, so the signed-rank p is the exact one in any SciPy).
    DRIFTING = [100.0, 70.0, 130.0, 60.0, 140.0, 90.0]
    FASTER = [1.030, 1.032, 1.034, 1.036, 1.038, 1.040]

    def rounds(self, values, factors=None, skip=()):
        factors = factors or [1.0] * len(values)
        return {i + 1: v * f for i, (v, f) in enumerate(zip(values, factors)) if i + 1 not in skip}

    def test_paired_rounds_see_a_small_change_through_a_drifting_machine(self):
        a = self.rounds(self.DRIFTING)
        b = self.rounds(self.DRIFTING, self.FASTER)
        unpaired = stats.compare(list(a.values()), list(b.values()), +1)
        self.assertEqual(unpaired.verdict, "~")
        self.assertGreater(unpaired.p_value, 0.5)
        c = stats.compare_rounds(a, b, +1)
        self.assertEqual((c.test, c.pairs), ("paired", 6))
        # The geometric mean of the two middle ratios; the interval spans the smallest to the
        # largest (the sign test's interval for six rounds).
        self.assertAlmostEqual(c.delta_pct, (math.sqrt(1.034 * 1.036) - 1) * 100)
        self.assertAlmostEqual(c.ci_low_pct, 3.0)
        self.assertAlmostEqual(c.ci_high_pct, 4.0)
        self.assertAlmostEqual(c.p_value, 2 / 2 ** 6)  # exact: all six of one sign
        self.assertEqual(c.verdict, "improvement")
        self.assertEqual(stats.compare_rounds(a, b, -1).verdict, "regression")
        self.assertEqual(stats.compare_rounds(b, a, -1).verdict, "improvement")
        self.assertEqual(stats.compare_rounds(a, b, 0).verdict, "higher")
        # The side summaries are still each side's own values.
        self.assertEqual(c.a.median, unpaired.a.median)
        self.assertEqual(c.b.n, 6)

    def test_a_round_against_the_trend_is_no_significant_change(self):
        a = self.rounds(self.DRIFTING)
        b = self.rounds(self.DRIFTING, self.FASTER)
        b[4] = a[4] * 0.9
        c = stats.compare_rounds(a, b, +1)
        self.assertEqual(c.verdict, "~")
        # Exact: the lone negative has the largest rank, 6; 14 of the 64 sign patterns have a
        # negative rank sum of 6 or less.
        self.assertAlmostEqual(c.p_value, 2 * 14 / 2 ** 6)
        self.assertAlmostEqual(c.ci_low_pct, -10.0)
        self.assertAlmostEqual(c.delta_pct, (math.sqrt(1.032 * 1.034) - 1) * 100)  # round 4 out

    def test_rounds_are_compared_by_their_ratios(self):
        # One round with a tiny A: its ratio is large, its difference small. The median of the
        # log ratios (+1.75 %) is not the median difference over A's median (+1.25 %).
        a = self.rounds([1.0, 100.0, 100.0, 100.0, 100.0, 100.0])
        b = self.rounds([1.5, 100.5, 101.0, 101.5, 102.0, 102.5])
        c = stats.compare_rounds(a, b, +1)
        self.assertAlmostEqual(c.delta_pct, (math.sqrt(1.015 * 1.02) - 1) * 100)
        self.assertAlmostEqual(c.ci_high_pct, 50.0)

    def test_median_interval_takes_order_statistics_by_the_sign_test(self):
        self.assertEqual(stats.median_interval([5, 1, 4, 2, 3]), (None, None))
        self.assertEqual(stats.median_interval([6, 1, 5, 2, 4, 3]), (1, 6))   # 1 - 2/64
        self.assertEqual(stats.median_interval(list(range(1, 10))), (2, 8))   # 1 - 2·10/512
        self.assertEqual(stats.median_interval(list(range(1, 13))), (3, 10))  # 1 - 2·79/4096

    def test_fewer_rounds_than_min_pairs_are_compared_unpaired(self):
        a = self.rounds(self.DRIFTING[:5])
        b = self.rounds(self.DRIFTING[:5], self.FASTER)
        c = stats.compare_rounds(a, b, +1)
        self.assertEqual((c.test, c.pairs), ("unpaired", 0))
        self.assertEqual(c, stats.compare(list(a.values()), list(b.values()), +1))

    def test_only_rounds_both_sides_have_are_paired(self):
        a = self.rounds(self.DRIFTING + [80.0])
        b = self.rounds(self.DRIFTING + [80.0], self.FASTER + [1.042], skip=(3,))  # B's 3 failed
        c = stats.compare_rounds(a, b, +1)
        self.assertEqual((c.test, c.pairs), ("paired", 6))
        self.assertEqual((c.a.n, c.b.n), (7, 6))
        self.assertEqual(c.verdict, "improvement")
        b = self.rounds(self.DRIFTING, self.FASTER, skip=(3,))
        self.assertEqual(stats.compare_rounds(a, b, +1).test, "unpaired")  # 5 rounds in common

    def test_paired_counts_with_zeros_compare_differences(self):
        zeros = self.rounds([0.0] * 6)
        c = stats.compare_rounds(zeros, zeros, -1)
        self.assertEqual((c.delta_pct, c.p_value, c.verdict), (0.0, 1.0, "~"))
        a = self.rounds([0.0, 2.0, 4.0, 2.0, 0.0, 4.0])  # median 2
        b = self.rounds([1.0, 3.0, 5.0, 3.0, 1.0, 5.0])  # one more error in every round
        c = stats.compare_rounds(a, b, -1)
        self.assertEqual(c.test, "paired")
        self.assertAlmostEqual(c.delta_pct, 50.0)  # +1 against A's median of 2
        self.assertEqual((c.ci_low_pct, c.ci_high_pct), (50.0, 50.0))
        self.assertLess(c.p_value, 0.05)
        self.assertEqual(c.verdict, "regression")  # fewer is better

    def test_order_interleaves_the_sides_and_rotates_them_in_each_round(self):
        self.assertEqual(stats.interleaved_order(["A", "B"], 3),
                         [(1, "A"), (1, "B"), (2, "B"), (2, "A"), (3, "A"), (3, "B")])
        self.assertEqual(stats.interleaved_order(["A", "B", "C"], 3),
                         [(1, "A"), (1, "B"), (1, "C"), (2, "B"), (2, "C"), (2, "A"),
                          (3, "C"), (3, "A"), (3, "B")])
        self.assertEqual(stats.interleaved_order(["A"], 2), [(1, "A"), (2, "A")])


if __name__ == "__main__":
    unittest.main()

"""Exercise 8's t-tests: the right one (seed_verdict's docstring: the two-sided p of Welch's test, or
the paired test, against alpha, the direction from the sign of the difference, as dev/map.py's
verdicts) and each known wrong one a student may write, as the standard error and the verdict
("below", "above", "tie") each gives on the same seeds, so that lab/checks.py can name the mistake a
wrong answer matches: the verdict at 0.01 whatever alpha, a one-sided p each way (a two-sided test at
2 alpha), a two-sided p without its sign, a one-sided p from |t| (or half the two-sided p), min(n) - 1
degrees of freedom, a pooled variance, a normal p, the population SD, the SD for the SE, Welch's SE on
paired seeds. Every p comes from scipy (its tests' t and df, its t and normal distributions).

    from lab import ttests; ttests.verdicts([0.79, 0.80], [0.84, 0.86], False, 0.01)["right"]
"""
import torch

MISTAKES = (  # (name, message): the check names the first whose se or verdict a wrong answer matches
    ("alpha", "the verdict at 0.01, not at the alpha passed in"),
    ("each way", "a one-sided p each way compared with alpha: that tests at twice the level (a two-sided test at "
                 "2 alpha): compare the two-sided p with alpha and take the direction from the sign of the difference"),
    ("blind", "the verdict ignores the sign of the gap (a two-sided p says there is a gap, not which way): 'below' "
              "when mean(a) < mean(b), 'above' when it is greater"),
    ("half", "a one-sided p from |t| (or half the two-sided p): blind to the sign and at twice the level: compare "
             "the two-sided p with alpha and take the direction from the sign of the difference"),
    ("min df", "a t distribution with min(n) - 1 degrees of freedom: Welch's test has its own (scipy's ttest_ind "
               "with equal_var=False computes them)"),
    ("pooled", "a pooled variance (Student's t, equal_var=True): the two models' seeds need not spread alike: use "
               "Welch's, var(a) / n_a + var(b) / n_b"),
    ("normal", "a normal p: use a t distribution with its df (scipy's tests do)"),
    ("population", "the population SD (dividing by n): use n - 1 (torch's std and var do; numpy's need ddof=1)"),
    ("std", "the standard deviation, not the standard error of the mean difference: divide by sqrt(n)"),
    ("welch", "Welch's: it ignores the pairing; a_i and b_i are a matched pair: use d_i = a_i - b_i, se = "
              "std(d) / sqrt(n)"))


def verdicts(a, b, paired, alpha):
    """{name: (se, verdict)} of exercise 8's test on a and b (name 'right') and of each of MISTAKES."""
    import scipy.stats  # here: its import takes longer than a grade of most exercises, which never need it
    A, B = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    n, m, diff = len(a), len(b), float(A.mean() - B.mean())
    test = scipy.stats.ttest_rel(A, B) if paired else scipy.stats.ttest_ind(A, B, equal_var=False)
    t, df, var = float(test.statistic), float(test.df), lambda X, u=True: float(X.var(unbiased=u))
    se = lambda u: float((A - B).std(unbiased=u) / n ** 0.5) if paired else (var(A, u) / n + var(B, u) / m) ** 0.5
    pooled = (((n - 1) * var(A) + (m - 1) * var(B)) / (n + m - 2) * (1 / n + 1 / m)) ** 0.5
    signed = lambda p, x, level=alpha: ("below" if x < 0 else "above") if p < level else "tie"
    two_sided = lambda x, cdf: signed(2 * cdf(-abs(x)), x)  # the two-sided p of statistic x, with x's sign
    right = signed(float(test.pvalue), t)
    return {"right": (se(True), right),
            "alpha": (se(True), signed(float(test.pvalue), t, 0.01)),
            "each way": (se(True), signed(scipy.stats.t.cdf(-abs(t), df), t)),  # the lower one-sided p, i.e. p / 2
            "blind": (se(True), "below" if test.pvalue < alpha else "tie"),
            "half": (se(True), "below" if scipy.stats.t.sf(abs(t), df) < alpha else "tie"),
            "min df": (se(True), two_sided(t, lambda x: scipy.stats.t.cdf(x, min(n, m) - 1))),
            "pooled": (se(True), right) if paired else  # (no pooling of paired seeds)
            (pooled, two_sided(diff / pooled, lambda x: scipy.stats.t.cdf(x, n + m - 2))),
            "normal": (se(True), two_sided(t, scipy.stats.norm.cdf)),
            "population": (se(False), right),
            "std": (se(True) * n ** 0.5 if paired else (var(A) + var(B)) ** 0.5, right),
            "welch": ((var(A) / n + var(B) / m) ** 0.5, right)}

"""The statistics of seeded comparisons (dev/map.py's, beside it): per-seed summaries, Welch's two-sided test with
its interval, the exact permutation test over seed labels and its floor, Holm's step-down correction,
the verdict that needs both tests, the seeds a side a planned power needs, and a seeds-by-documents
bootstrap of a mean's standard error.

Shapes: x, y the per-seed values of two arms (n_a, n_b); S seeds, W evaluation windows, D documents,
B bootstrap resamples. Welch: scipy.stats.ttest_ind(equal_var=False); the permutation p counts the
relabellings whose |difference of means| reaches the observed one (every relabelling up to
PERMUTATIONS, else that many at random with seed 0); Holm: the j-th smallest of m p values times
(m - j + 1), made non-decreasing. The bootstrap reads plumbing/repeats.py's per-window sums
(windows.json) and gives each window to the document holding its first target (batches.eval_windows).

Run: nothing to run; tests/test_map.py checks each against scipy and brute force; `python -m dev.map`
uses them (results/map/map.md).
"""

import itertools
import math

PERMUTATIONS = 200_000  # relabellings: all of them up to this many, else this many at random (seed 0)
BOOTSTRAP = 2000  # seeds-by-documents resamples (seed 0)


def summary(values):
    """n, mean, standard error, a 95% t interval (scipy) of a list of per-seed values."""
    from scipy import stats
    n, mean = len(values), sum(values) / len(values)
    se = (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5 if n > 1 else None
    ci = list(stats.t.interval(0.95, n - 1, loc=mean, scale=se)) if se else None
    return dict(n=n, mean=mean, se=se, ci95=ci, values=values)


def permutation(x, y, limit=PERMUTATIONS, seed=0):
    """The two-sided permutation p of |mean(x) - mean(y)| over the relabellings of the pooled seeds:
    every one (itertools.combinations) when there are at most `limit`, else `limit` at random (the
    observed labelling counted in: (hits + 1) / (limit + 1)); -> (p, exact)."""
    import numpy as np
    pool, n = np.array(list(x) + list(y), dtype=float), len(x)
    total = math.comb(len(pool), n)
    if total <= limit:
        idx = np.array(list(itertools.combinations(range(len(pool)), n)))  # (C, n_a) the first side's seeds
    else:
        idx = np.argsort(np.random.default_rng(seed).random((limit, len(pool))), axis=1)[:, :n]  # (limit, n_a)
    first = pool[idx].sum(1)
    stat = np.abs(first / n - (pool.sum() - first) / len(y))
    hits = int((stat >= abs(np.mean(x) - np.mean(y)) - 1e-12).sum())  # 1e-12: the same split summed in another order
    return (hits / total, True) if total <= limit else ((hits + 1) / (limit + 1), False)


def floor(n_a, n_b):
    """The smallest p the two-sided permutation test can give: 2 / C(n_a + n_b, n_a) with equal sides (the
    observed labelling and its swap give the same |difference|), 1 / C(n_a + n_b, n_a) with unequal ones."""
    return (2 if n_a == n_b else 1) / math.comb(n_a + n_b, n_a)


def holm(ps):
    """Holm's step-down adjusted p of a family's p values (None: a comparison not run, counted as
    p = 1, so the family keeps its planned size): the j-th smallest p times (m - j + 1), made
    non-decreasing, capped at 1."""
    order = sorted(range(len(ps)), key=lambda i: 1.0 if ps[i] is None else ps[i])
    out, top = [None] * len(ps), 0.0
    for j, i in enumerate(order):
        if ps[i] is not None:
            top = out[i] = max(top, min(1.0, (len(ps) - j) * ps[i]))
    return out


def welch(x, y, alpha):
    """x against y (per-seed values): the difference of means (x - y), its standard error, Welch's t,
    degrees of freedom, two-sided p and both one-sided p (scipy.stats.ttest_ind, equal_var=False),
    the 1 - alpha Welch interval of the difference, and the permutation p with its floor."""
    from scipy import stats
    va, vb = stats.tvar(x) / len(x), stats.tvar(y) / len(y)
    diff, se = sum(x) / len(x) - sum(y) / len(y), math.sqrt(va + vb)
    p_perm, exact = permutation(x, y)
    out = dict(diff=diff, se=se, n_a=len(x), n_b=len(y), p_perm=p_perm, perm_exact=exact,
               perm_floor=floor(len(x), len(y)))
    if se == 0:  # every seed equal on both sides: no spread to test against (hand-made tables only)
        return dict(out, t=None, df=None, p_welch=None, p_below=None, p_above=None, ci99=[diff, diff])
    res = stats.ttest_ind(x, y, equal_var=False)
    half = stats.t.ppf(1 - alpha / 2, res.df) * se
    return dict(out, t=float(res.statistic), df=float(res.df), p_welch=float(res.pvalue),
                p_below=float(stats.t.cdf(res.statistic, res.df)), p_above=float(stats.t.sf(res.statistic, res.df)),
                ci99=[float(diff - half), float(diff + half)])


def n_for_power(sd_a, sd_b, gap, alpha, power, cap):
    """Seeds a side for a two-sided test at alpha to find a difference of `gap` with `power` (Welch's normal
    approximation: n = (z_{1 - alpha/2} + z_power)^2 (sd_a^2 + sd_b^2) / gap^2, rounded up, at least 2), capped
    at `cap` -> (the n needed, uncapped; n; the gap n seeds a side find with that power: (z + z) sqrt((sd_a^2 +
    sd_b^2) / n))."""
    from scipy import stats
    z, var = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power), sd_a ** 2 + sd_b ** 2
    need = max(2, math.ceil(z * z * var / gap ** 2))
    return need, min(need, cap), float(z * math.sqrt(var / min(need, cap)))


def verdict(c, alpha):
    """'below'/'above' where the Holm-adjusted Welch p and the permutation p are both under alpha;
    'no verdict' where the permutation test cannot get there (its floor above alpha); else 'tie'."""
    if c["perm_floor"] > alpha:
        return "no verdict"
    if c["p_holm"] is not None and c["p_holm"] < alpha and c["p_perm"] < alpha:
        return "below" if c["diff"] < 0 else "above"
    return "tie"


def documents(tokens, sep, T):
    """Each evaluation window's document (batches.eval_windows over the split `tokens`, windows of T
    targets): the one holding its first target; documents numbered from 0, each followed by `sep`."""
    import numpy as np
    from plumbing import batches
    tokens = np.asarray(tokens)
    doc = np.concatenate([[0], np.cumsum(tokens == sep)[:-1]])  # each position's document: separators before it
    starts, _ = batches.eval_windows(len(tokens), T)
    return doc[starts + 1]


def ratios(w, metric):
    """windows.json's per-window sums -> (loss, targets) per window for one metric (score_totals' split)."""
    import numpy as np
    if metric == "all":
        return np.array(w["loss"]), np.array(w["n"])
    if metric == "copies":
        return np.array(w["copy_loss"]), np.array(w["copy_n"])
    if metric == "copies_far":
        return np.array(w["bin_loss"][-1]), np.array(w["bin_n"][-1])
    return np.array(w["loss"]) - np.array(w["copy_loss"]), np.array(w["n"]) - np.array(w["copy_n"])


def bootstrap(windows, docs, metric, B=BOOTSTRAP, seed=0):
    """The standard error of a model's mean over seeds (each seed's loss: its summed window losses over
    its targets), by resampling the seeds only, the documents only (the same resample for every seed:
    they are scored on the same split), and both; and the seeds' share of the variance,
    var_seeds / (var_seeds + var_documents). windows: per seed its windows.json sums; docs: each
    window's document."""
    import numpy as np
    _, doc = np.unique(docs, return_inverse=True)  # the documents that hold a window, 0..D-1
    D, S = doc.max() + 1, len(windows)
    num = np.array([np.bincount(doc, ratios(w, metric)[0], D) for w in windows])  # (S, D) summed losses
    den = np.array([np.bincount(doc, ratios(w, metric)[1], D) for w in windows])  # (S, D) targets
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(D, np.full(D, 1 / D), size=B)  # (B, D) each document's draws
    picks = rng.integers(0, S, size=(B, S))  # (B, S) each seed's draws
    kept = (den @ counts.T > 0).all(0)  # resamples where every seed has targets (all but a few tiny hand-made ones)
    counts, picks, B = counts[kept], picks[kept], int(kept.sum())
    per = (num @ counts.T) / (den @ counts.T)  # (S, B) each seed's loss on each document resample
    full = num.sum(1) / den.sum(1)  # (S,)
    se = dict(seeds=float(full[picks].mean(1).std(ddof=1)), documents=float(per.mean(0).std(ddof=1)),
              both=float(per[picks, np.arange(B)[:, None]].mean(1).std(ddof=1)))
    return dict(se=se, seed_share=se["seeds"] ** 2 / (se["seeds"] ** 2 + se["documents"] ** 2), n_seeds=S,
                n_documents=int(D), replicates=B)

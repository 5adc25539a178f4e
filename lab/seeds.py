"""Seeds as an axis: section 6's comparison of the byte models read from the seeded map
(results/map/map.json, written by `python -m dev.map`), and the data of exercise 8, the noise.
Every number and every "below", "above", "tie" or "no verdict" printed here comes from the file's
records (n seeds, mean ± standard error; per comparison the two-sided Welch p, the exact permutation
p over the seed labels and its floor, the Holm-adjusted p over the family, the 99% interval, the
verdict), never from one curve, and none is typed into the notebook's or the kit's prose.

    python -m lab.seeds                 # the answer to the kit's discussion question 4, from the file

map.json: {"alpha", "min_seeds", "n_comparisons", "family_sizes", "models": {NAME: {"n", "seeds", "cpu",
"point", "metrics": {METRIC: {"mean", "se", "ci95", "values"}}}}, "comparisons": [{"a", "b", "metric",
"diff", "se", "t", "df", "p_welch", "p_perm", "perm_floor", "p_holm", "family_size", "ci99", "verdict",
"n_a", "n_b"}]}; losses in nats per byte, each seed's at its `point` (the cooldown's) on the whole
validation split; METRIC one of all, copies, copies_far (copies whose earlier occurrence is 128+ bytes
back), other.
"""
import argparse
import json
import os
import sys

from plumbing import cli

cli.exit_on_ctrl_c(__name__, "lab.seeds")  # a Ctrl-C from the first second is one line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAP = os.path.join(ROOT, "results", "map", "map.json")
CORE = ("gpt", "delta", "delta_conv", "hybrid_ema_kv")  # GPT, the plain delta rule, with a convolution, a hybrid
METRICS = (("all", "all bytes"), ("copies", "copies"), ("copies_far", "copies 128+ bytes back"),
           ("other", "all other bytes"))
ROWS = dict(all="val_loss", copies="loss_copy", copies_far="loss_copy_far", other="loss_other")  # the older file's


def load(path=MAP):
    with open(path) as f:
        return json.load(f)


def seeded(m):
    """Whether map.json `m` carries the per-model statistics and the tests' rules (an older file has only
    its curves' rows, or one-sided p's without the family)."""
    return isinstance(m.get("models"), dict) and isinstance(m.get("comparisons"), list) and "min_seeds" in m \
        and "family_sizes" in m


def _p(p):
    return "-" if p is None else f"{p:.2g}"


def verdict_sentence(c, alpha):
    """One comparison of the file in words: the means' difference ± its SE, the tests' p's, the 99% interval
    and the verdict (below/above: the Holm-adjusted Welch p and the permutation p both under alpha)."""
    lo, hi = c["ci99"]
    open_gap = f"a gap between {lo:+.3f} and {hi:+.3f} is not ruled out" + (
        " (that interval, uncorrected for the family, excludes 0)" if lo > 0 or hi < 0 else "")
    said = {"below": f"{c['a']} is below {c['b']} (Holm's p and the permutation p both < {alpha:g})",
            "above": f"{c['a']} is above {c['b']} (Holm's p and the permutation p both < {alpha:g})",
            "tie": f"a tie at {alpha:g}: {open_gap}",
            "no verdict": f"no verdict: with {c['n_a']} and {c['n_b']} seeds no relabelling of the seeds gives a "
                          f"permutation p under {c['perm_floor']:.2g}, above {alpha:g}: too few seeds for a "
                          f"distribution-free test at this level; {open_gap}"}[c["verdict"]]
    return (f"{c['a']} - {c['b']} on {dict(METRICS)[c['metric']]}: {c['diff']:+.3f} ± {c['se']:.3f} nats/byte "
            f"(n = {c['n_a']} and {c['n_b']} seeds; two-sided Welch p = {_p(c['p_welch'])}, permutation p = "
            f"{_p(c['p_perm'])}, Holm-adjusted p = {_p(c['p_holm'])} over the family's {c['family_size']} "
            f"comparisons; 99% interval [{lo:+.3f}, {hi:+.3f}]): {said}")


def reading(m, models=CORE):
    """Which reading the verdicts are, the family and its correction, in one sentence from the file."""
    points = sorted({m["models"][n]["point"] for n in models if n in m["models"]})
    families = ", ".join(f"{k}: {v}" for k, v in m["family_sizes"].items())
    return (f"Each seed read at its {' and '.join(points)} point on the whole validation split, in nats per byte. "
            f"Every test is two-sided at alpha = {m['alpha']:g}; the file's {m['n_comparisons']} comparisons form "
            f"families ({families} comparisons), and Holm's correction adjusts each Welch p for its family. "
            f"'below' or 'above' needs the adjusted p and the exact permutation p (over the seed labels) both "
            f"under alpha; 'no verdict' where the seeds are too few for the permutation p ever to get under it.")


def correlation(m, a="delta", b="gpt", metric="copies"):
    """(r, p, n): Pearson's correlation of a's and b's per-seed losses on `metric` over their shared seeds, from
    map.json `m`: a shared seed effect (the seed fixes the data order and the initial draw of both) shows
    as r well above 0, and only then does pairing seed s of a with seed s of b remove noise."""
    import scipy.stats
    va, vb = (dict(zip(m["models"][x]["seeds"], m["models"][x]["metrics"][metric]["values"])) for x in (a, b))
    shared = sorted(set(va) & set(vb))
    res = scipy.stats.pearsonr([va[s] for s in shared], [vb[s] for s in shared])
    return float(res.statistic), float(res.pvalue), len(shared)


def summary(m, models=CORE, against="gpt"):
    """(rows of the table, sentences) of the seeded map `m` for `models`, each compared with
    `against`; models absent from the file are named in one sentence. An older file without the
    statistics: no rows and one sentence that says so."""
    if not seeded(m):
        return [], ["results/map/map.json has no per-model statistics or two-sided tests yet (an older file; "
                    "`python -m dev.map` writes them): the seeded comparison is not shown"]
    here = [n for n in models if n in m["models"]]
    rows = [[n, m["models"][n]["n"], ", ".join(map(str, m["models"][n]["seeds"]))] +
            [(f"{s['mean']:.3f}" + (f" ± {s['se']:.3f}" if s["se"] is not None else " (one seed)"))
             if (s := m["models"][n]["metrics"].get(k)) else "-" for k, _ in METRICS]
            for n in here]
    said = [verdict_sentence(c, m["alpha"]) for n in here if n != against for k, _ in METRICS
            for c in m["comparisons"] if (c["a"], c["b"], c["metric"]) == (n, against, k)]
    untested = [n for n in here if n != against and not any(c["a"] == n and c["b"] == against for c in m["comparisons"])]
    if untested:
        said.append(f"no test yet for {', '.join(untested)} against {against} (fewer than {m['min_seeds']} "
                    "seeds a side): no verdict")
    missing = [n for n in models if n not in m["models"]]
    if missing:
        said.append(f"not in the map: {', '.join(missing)}")
    return rows, said


def show(path=MAP, models=CORE):
    """Section 6's cell: the table of the models' seeds and the verdicts, or one line -> the sentences."""
    from lab import helpers as H
    m = load(path)
    rows, said = summary(m, models)
    if rows:
        H.table(["model", "n seeds", "seeds"] + [f"{label} (mean ± SE)" for _, label in METRICS], rows)
        print(reading(m, models))
    for line in said:
        print(line)
    return said


def values(m, model, metric="copies"):
    """The per-seed values of `model` on `metric` from map.json `m` (from an older file's rows too)."""
    if seeded(m) and model in m["models"]:
        return list(m["models"][model]["metrics"][metric]["values"])
    rows = sorted((r for r in m.get("rows", []) if r.get("model") == model), key=lambda r: r.get("seed", 0))
    return [r[ROWS[metric]] for r in rows if r.get(ROWS[metric]) is not None]


def discussion(path=MAP):
    """The answer to the kit's discussion question 4 (section 6), its numbers from the file."""
    m = load(path)
    rows, said = summary(m)
    if not rows:
        return said[0]
    copies = "; ".join(s for s in said if " on copies" in s) or \
        f"No comparison on copies has {m['min_seeds']} seeds a side yet"
    return ("Read the verdicts, not the curves. " + copies + ". A gap is judged against the standard error "
            "of the difference and its 99% interval, not against the seeds' spread: the SD says how far one seed "
            "lands from another, the SE (about the SD over the root of the seeds' number) how far a difference of "
            "means may land from the one more seeds would give, and a tie leaves open every gap in its interval. Which ingredient causes a gap is a question these runs do not test (the "
            "map compares models, not decays).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The answer to the kit's discussion question 4, from the seeded map.")
    parser.add_argument("map", nargs="?", default=MAP, help="a map.json written by python -m dev.map (default: the "
                        "committed one)")
    path = parser.parse_args().map
    cli.main_guard(lambda: print(discussion(path)), prog="lab.seeds")

"""Seeds as an axis: section 6's comparison of the byte models read from the seeded map
(results/map/map.json, written by `python -m dev.map`), and the data of exercise 8, the noise.
Every number and every "below", "above" or "tie" printed here comes from the file's records (n
seeds, mean ± standard error, the one-sided Welch test and its verdict at the file's alpha),
never from one curve, and none is typed into the notebook's or the kit's prose.

    python -m lab.seeds                 # the answer to the kit's discussion question 4, from the file

map.json: {"alpha", "min_seeds", "n_comparisons", "models": {NAME: {"n", "seeds", "cpu", "point", "metrics":
{METRIC: {"mean", "se", "ci95", "values"}}}}, "comparisons": [{"a", "b", "metric", "diff", "se",
"t", "df", "p_below", "p_above", "verdict", "n_a", "n_b"}]}; losses in nats per byte; METRIC one of
all, copies, copies_far (copies whose earlier occurrence is 128+ bytes back), other.
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
    """Whether map.json `m` carries the per-model statistics and the test's rules (an older file has only
    its curves' rows)."""
    return isinstance(m.get("models"), dict) and isinstance(m.get("comparisons"), list) and "min_seeds" in m


def verdict_sentence(c, alpha):
    """One comparison of the file in words: the means' difference ± its SE, and the test's verdict."""
    name = dict(METRICS)[c["metric"]]
    said = {"below": f"{c['a']} is below {c['b']} (one-sided p = {c['p_below']:.2g} < {alpha:g})",
            "above": f"{c['a']} is above {c['b']} (one-sided p = {c['p_above']:.2g} < {alpha:g})",
            "tie": f"a tie at {alpha:g}: neither one-sided p is below it ({c['p_below']:.2g} below, "
                   f"{c['p_above']:.2g} above)"}[c["verdict"]]
    return (f"{c['a']} - {c['b']} on {name}: {c['diff']:+.3f} ± {c['se']:.3f} nats/byte (Welch t = {c['t']:.2f}, "
            f"df = {c['df']:.1f}, n = {c['n_a']} and {c['n_b']} seeds): {said}")


def summary(m, models=CORE, against="gpt"):
    """(rows of the table, sentences) of the seeded map `m` for `models`, each compared with
    `against`; models absent from the file are named in one sentence. An older file without the
    statistics: no rows and one sentence that says so."""
    if not seeded(m):
        return [], ["results/map/map.json has no per-model statistics yet (an older file; `python -m dev.map` "
                    "writes them): the seeded comparison is not shown"]
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
        print(f"nats per byte; alpha = {m['alpha']:g}, {m['n_comparisons']} comparisons in the file")
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
    return ("Read the verdicts, not the curves. " + copies + ". A gap "
            "within the seeds' spread is a tie; which ingredient causes a gap is a question these runs do not "
            "test (the map compares models, not decays).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The answer to the kit's discussion question 4, from the seeded map.")
    parser.add_argument("map", nargs="?", default=MAP, help="a map.json written by python -m dev.map (default: the "
                        "committed one)")
    path = parser.parse_args().map
    cli.main_guard(lambda: print(discussion(path)), prog="lab.seeds")

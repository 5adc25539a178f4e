"""The map on text: what brings the copies back, at what state, and which gaps survive the noise
(results/map).

Two kinds of record, read apart:
- **The seeds** (results/map/seeds/<model>_s<seed>/scaling.json, written by `python -m dev.seeds`):
  each core model at several seeds on ONE machine (each curve names its CPU), every point scored on
  the whole validation split (every byte once) and read at two points: the constant-lr trunk's last
  (10M bytes) and its cooldown branch's (the lr linearly to 0 over the last 20%). Per model: n,
  mean ± standard error and a 95% interval on all bytes, copies, copies 128+ bytes back and the
  other bytes; per comparison (each model against GPT, each ingredient against its base; MIN_SEEDS
  seeds or more a side): the difference, Welch's t-test (scipy) and its one-sided p, and the verdict
  "below"/"above" only at p < ALPHA, else "tie". Also what the cooldown does to the spread across
  seeds, and each seed's copy onset (the bytes at which its copy loss first falls below ONSET nats)
  against its final copy loss: is the seed spread a timing shift?
- **The earlier curves** (results/scaling/scaling.json's references and results/map/<model>/,
  results/map/seed1/<model>/): one or two seeds each, on earlier CPUs, read on 128 fixed windows;
  tabled as they are, in no test.
A (model, seed) found twice is refused in one line, as is a curve at other settings or a record
with a damaged value. State: floats per sequence and layer at T = 256 (model.state_floats).

Run (from the repository root)
    python -m dev.map                           # -> out/map/map.md, map.json, map.png
    python -m dev.map --out_dir results/map     # refresh the committed map
The curves: `python -m dev.seeds --out_dir results/map/seeds` (the seeds); the earlier ones
`python scaling.py --models NAME --widths 128 --out_dir results/map/NAME`.
"""

import argparse
import glob
import json
import math
import os

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "dev.map")

from dev import seeds
from plumbing import checkpoint, tables

REFERENCE = "results/scaling/scaling.json"
SEEDS = "results/map/seeds"
SAME = ("n_layer", "data", "tokenizer", "block_size", "batch_size", "grad_accum", "max_tokens", "first_tokens",
        "points", "eval_iters", "hit_seqs", "copy_k", "lr", "warmup_iters")  # what every curve must share
REFS = ("gpt", "softmax_history", "linear", "ema_kv", "delta")  # from the reference record, width 128
BUDGET = 18_000  # a quarter of GPT's cache per layer at T = 256 (2 T C = 65,536): the bound set for a bounded reader
METRICS = {"all": "all bytes", "copies": "copies", "copies_far": "copies 128+ back", "other": "other bytes"}
ALPHA = 0.01  # a verdict's level, one-sided (the modded-nanogpt speedrun's for a record)
MIN_SEEDS = 3  # a test needs this many seeds a side: with 2, a side's variance rests on one difference, which
#                Welch's degrees of freedom do not weigh (two close seeds make a confident, wrong test)
BASES = (("delta_conv", "delta", "the convolution"), ("gated_delta", "delta_conv", "the gate (with its conv)"),
         ("hybrid_gated_delta", "gated_delta", "one attention block over gated delta blocks"))  # ingredient, base
ONSET = 1.5  # nats per byte on copies: a level every curve crosses early (the byte unigram is ~3.2)


def load(path):
    """The scaling.json at path -> (settings, {curve key: curve}); one line if it is not one."""
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        raise cli.UserError(f"{path} is not a scaling.py record ({type(e).__name__}); rerun its scaling.py") from None
    wrong = tables.shape_error(res, {"settings": dict, "curves": tables.Each(
        {"model": str, "width": int, "points": [{"tokens": int, "val_loss": (int, float)}], "copy": list})}, path)
    if wrong:
        raise cli.UserError(f"{path} is not a scaling.py record ({wrong}); rerun its scaling.py")
    return res["settings"], res["curves"]


def finite(x, where):
    """x if it is a finite number (or None), else one line naming where it was read."""
    if x is not None and not (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)):
        raise cli.UserError(f"{where} is {x!r}, not a finite number: a damaged record; rerun its scaling.py")
    return x


def row(curve, seed, state_floats, step=None):
    """An earlier curve's numbers at its last point, or at `step` (its 128-window copy split there)."""
    last = curve["points"][-1] if step is None else next(p for p in curve["points"] if p["step"] == step)
    split = {c["step"]: c for c in curve["copy"]}.get(last["step"])
    far = next((d["loss"] for d in split["by_distance"] if d["lo"] == 128), None) if split else None
    return dict(model=curve["model"], seed=seed, params=curve["params"], state_floats=state_floats,
                bounded=bounded(curve["model"]), tokens=last["tokens"], val_loss=last["val_loss"],
                loss_copy=split and split["loss_copy"], loss_copy_far=far, loss_other=split and split["loss_other"])


def same_settings(path, settings, ref):
    differ = [k for k in SAME if settings.get(k) != ref.get(k)]
    cli.require(not differ, "{} has other settings than {} ({}): not on the same map", path, REFERENCE,
                ", ".join(differ))


def collect(root="."):
    """The earlier curves, reference first: a list of rows (dicts)."""
    ref_settings, ref = load(os.path.join(root, REFERENCE))
    out = [row(ref[f"{m}_c128"], ref_settings["seed"], ref[f"{m}_c128"]["state_floats"]) for m in REFS]
    paths = sorted(glob.glob(os.path.join(root, "results/map/*/scaling.json"))) + \
        sorted(glob.glob(os.path.join(root, "results/map/seed1/*/scaling.json")))
    for path in paths:
        settings, curves = load(path)
        same_settings(path, settings, ref_settings)
        out += [row(c, settings["seed"], c.get("state_floats")) for c in curves.values() if c["width"] == 128 and c["points"]]
    return out, ref_settings


def collect_seeds(root, ref_settings):
    """The seeds' curves: one dict per (model, seed) with its whole-split losses at the trunk's last
    point and the cooldown's, its onset, and the machine; only curves that reached both."""
    out, where = [], {}
    for path in sorted(glob.glob(os.path.join(root, SEEDS, "*", "scaling.json"))):
        settings, curves = load(path)
        same_settings(path, settings, ref_settings)
        for key, c in curves.items():
            if c["width"] != 128 or not seeds.done(c, settings):
                continue  # still training: not a seed yet
            last = {s["step"]: s for s in c["scores"]}[c["points"][-1]["step"]]
            cool = c["cooldown"]["scores"]
            seed = (c["model"], settings["seed"])
            cli.require(seed not in where, "{} seed {} is in both {} and {}: one curve per seed (move one away)",
                        *seed, where.get(seed), path)
            where[seed] = path
            read = lambda s, part: {m: finite(s[m], f"{path}: {key}.{part}.{m}") for m in METRICS}
            out.append(dict(model=c["model"], seed=settings["seed"], params=c["params"],
                            state_floats=c["state_floats"], bounded=bounded(c["model"]), machines=c["machines"],
                            trunk=read(last, "scores"), cooldown=read(cool[-1], "cooldown.scores"),
                            onset=onset(c["scores"]), train_seconds=c["train_seconds"]))
    return out


def onset(scores, level=ONSET):
    """The bytes at which the copy loss first falls below `level` (log-interpolated between the two
    points around it); None when it never does."""
    pts = [(s["tokens"], s["copies"]) for s in scores if s["tokens"] > 0 and s["copies"] is not None]
    for (d0, l0), (d1, l1) in zip([(None, math.inf)] + pts, pts):
        if l1 < level:
            if d0 is None:
                return float(d1)
            return float(math.exp(math.log(d0) + (l0 - level) / (l0 - l1) * (math.log(d1) - math.log(d0))))
    return None


def bounded(name):
    """Whether the named model's state per layer stays the same as T grows (recall.state_kind)."""
    import recall
    return recall.state_kind(name) != "grows"


# ---- the statistics ------------------------------------------------------------------------


def summary(values):
    """n, mean, standard error, a 95% t interval (scipy) of a list of per-seed values."""
    from scipy import stats
    n, mean = len(values), sum(values) / len(values)
    se = (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5 if n > 1 else None
    ci = list(stats.t.interval(0.95, n - 1, loc=mean, scale=se)) if se else None
    return dict(n=n, mean=mean, se=se, ci95=ci, values=values)


def models_table(seeds, point):
    """{model: dict(n, seeds, cpu, point, metrics={metric: summary})} at `point` ('cooldown' | 'trunk')."""
    out = {}
    for m in dict.fromkeys(r["model"] for r in seeds):
        rs = sorted((r for r in seeds if r["model"] == m), key=lambda r: r["seed"])
        out[m] = dict(n=len(rs), seeds=[r["seed"] for r in rs], state_floats=rs[0]["state_floats"],
                      bounded=rs[0]["bounded"], cpu=" | ".join(sorted({x for r in rs for x in r["machines"]})),
                      point=point, metrics={k: summary([r[point][k] for r in rs]) for k in METRICS})
    return out


def welch(a, b, metric, alpha=ALPHA):
    """a against b on one metric: the difference of means (a - b), its standard error, Welch's t
    and degrees of freedom and both one-sided p (scipy.stats.ttest_ind, equal_var=False), and the
    verdict: 'below' when p(a < b) < alpha, 'above' when p(a > b) < alpha, else 'tie'."""
    from scipy import stats
    x, y = a["metrics"][metric]["values"], b["metrics"][metric]["values"]
    se = (a["metrics"][metric]["se"] ** 2 + b["metrics"][metric]["se"] ** 2) ** 0.5
    diff = a["metrics"][metric]["mean"] - b["metrics"][metric]["mean"]
    if se == 0:  # every seed equal on both sides: no spread to test against (hand-made tables only)
        return dict(metric=metric, diff=diff, se=0.0, ci95=[diff, diff], t=None, df=None, p_below=None, p_above=None,
                    verdict="tie", n_a=len(x), n_b=len(y), resolvable=None)
    below = stats.ttest_ind(x, y, equal_var=False, alternative="less")
    above = stats.ttest_ind(x, y, equal_var=False, alternative="greater")
    half = stats.t.ppf(0.975, below.df) * se
    verdict = "below" if below.pvalue < alpha else "above" if above.pvalue < alpha else "tie"
    return dict(metric=metric, diff=diff, se=se, ci95=[diff - half, diff + half], t=float(below.statistic),
                df=float(below.df), p_below=float(below.pvalue), p_above=float(above.pvalue), verdict=verdict,
                n_a=len(x), n_b=len(y), resolvable=resolvable(se, float(below.df), alpha))


def resolvable(se, df, alpha=ALPHA, power=0.8):
    """The smallest true gap a one-sided t-test at `alpha` with this standard error and df detects
    with probability `power` (the noncentral t, scipy): what a 'tie' can and cannot rule out."""
    from scipy import optimize, stats
    crit = stats.t.ppf(1 - alpha, df)
    return float(optimize.brentq(lambda d: stats.nct.sf(crit, df, d / se) - power, 1e-9, 100 * se + 1))


def comparisons(models):
    """Each model against GPT, each ingredient against its base (BASES), on every metric; only
    pairs with MIN_SEEDS seeds or more on each side."""
    pairs = [(m, "gpt", "against GPT") for m in models if m != "gpt"] + list(BASES)
    return [dict(a=a, b=b, what=what, **welch(models[a], models[b], k)) for a, b, what in pairs for k in METRICS
            if a in models and b in models and min(models[a]["n"], models[b]["n"]) >= MIN_SEEDS]


def cooldown_effect(seeds):
    """Per model: the spread (sample std) across seeds of each metric at the trunk's last point and
    after the cooldown, and the mean change the cooldown makes (cooldown - trunk, paired by seed)."""
    out = {}
    for m, rs in group(seeds).items():
        if len(rs) < 2:
            continue
        out[m] = {k: dict(std_trunk=tables.mean_std([r["trunk"][k] for r in rs])[1],
                          std_cooldown=tables.mean_std([r["cooldown"][k] for r in rs])[1],
                          change=sum(r["cooldown"][k] - r["trunk"][k] for r in rs) / len(rs)) for k in METRICS
                  if all(r["trunk"][k] is not None for r in rs)}
    return out


def onset_test(seeds):
    """Does a seed's copy onset predict its final copy loss (cooldown point)? Pearson's r (scipy)
    per model, and pooled over models on the deviations from each model's means."""
    from scipy import stats
    out, pooled = {}, ([], [])
    for m, rs in group(seeds).items():
        rs = [r for r in rs if r["onset"]]
        if len(rs) < 3:
            continue
        x, y = [math.log(r["onset"]) for r in rs], [r["cooldown"]["copies"] for r in rs]
        if len(set(x)) > 1 and len(set(y)) > 1:
            out[m] = dict(n=len(rs), r=float(stats.pearsonr(x, y).statistic), p=float(stats.pearsonr(x, y).pvalue))
        pooled[0].extend(v - sum(x) / len(x) for v in x)
        pooled[1].extend(v - sum(y) / len(y) for v in y)
    if len(pooled[0]) >= 4 and len(set(pooled[0])) > 1 and len(set(pooled[1])) > 1:
        res = stats.pearsonr(*pooled)
        out["pooled"] = dict(n=len(pooled[0]), r=float(res.statistic), p=float(res.pvalue))
    return out


def group(seeds):
    return {m: [r for r in seeds if r["model"] == m] for m in dict.fromkeys(r["model"] for r in seeds)}


# ---- the tables and the figure -------------------------------------------------------------


def pm(s, fmt=".3f"):
    """'mean ± se' of a summary ('mean' alone for one seed)."""
    return f"{s['mean']:{fmt}}" + (f" ± {s['se']:{fmt}}" if s["se"] is not None else "")


def seed_lines(res):
    """map.md's tested part: the seeds' table at both points, the tests, the cooldown, the onsets."""
    models, n_tests = res["models"], len(res["comparisons"])
    if not models:
        return ["## The seeds", "", f"No seeded curve has finished yet (`python -m dev.seeds --out_dir {SEEDS}`).", ""]
    lines = ["## The seeds (one machine, whole validation split)", "",
             "CPU of every curve: " + "; ".join(sorted({v['cpu'] for v in models.values()})) + ". Nats per byte, "
             "mean ± standard error over the seeds, the 95% interval below each table in map.json.", ""]
    for point, table in (("cooldown", models), ("trunk", res["models_trunk"])):
        lines += [f"**At {'the end of the cooldown branch (lr linearly to 0 over the last 20%)' if point == 'cooldown' else 'the constant-lr trunk’s last point'}**, 10M bytes:", ""]
        lines += tables.md_table(["model", "n", "state floats / layer", *METRICS.values()],
                                 [[f"`{m}`", v["n"], f"{v['state_floats']:,}" + ("" if v["bounded"] else " (grows)"),
                                   *(pm(v["metrics"][k]) for k in METRICS)] for m, v in table.items()])
        lines.append("")
    lines += [f"**The tests** ({n_tests} comparisons, each Welch's t-test, one-sided, at the cooldown point, of "
              f"models with {MIN_SEEDS} seeds or more on each side; a "
              f"verdict only at p < {ALPHA}, else a tie; no correction for the number of comparisons: with "
              f"Bonferroni's the level would be {ALPHA / max(1, n_tests):.1e}). Difference = first − second, "
              "negative: the first is lower (better); resolvable: the smallest true gap this test detects with "
              "80% power (a tie rules out gaps above it, not below):", ""]
    lines += tables.md_table(["first", "second", "what", "metric", "difference ± SE", "95% interval", "t (df)",
                              "p below", "p above", "verdict", "resolvable"],
                             [[f"`{c['a']}`", f"`{c['b']}`", c["what"], METRICS[c["metric"]],
                               f"{c['diff']:+.3f} ± {c['se']:.3f}", f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]",
                               f"{c['t']:.2f} ({c['df']:.1f})" if c["t"] is not None else None,
                               tables.cell(c["p_below"], ".3g"), tables.cell(c["p_above"], ".3g"),
                               f"**{c['verdict']}**", tables.cell(c["resolvable"])] for c in res["comparisons"]])
    lines += ["", "**What the cooldown does**: the spread (sample std over seeds) at the trunk's last point and "
              "after the cooldown, and the mean change it makes (paired by seed):", ""]
    lines += tables.md_table(["model", "metric", "std, trunk", "std, cooldown", "mean change"],
                             [[f"`{m}`", METRICS[k], f"{e['std_trunk']:.3f}", f"{e['std_cooldown']:.3f}",
                               f"{e['change']:+.3f}"] for m, es in res["cooldown_effect"].items() for k, e in es.items()])
    lines += ["", f"**Copy onset**: the bytes at which each seed's copy loss (whole split, trunk) first falls below "
              f"{ONSET} nats, and whether it predicts the seed's final copy loss (Pearson's r of log onset against "
              "the cooldown point's copies):", ""]
    lines += tables.md_table(["model", "onset per seed (M bytes)", "r", "p", "n"],
                             [[f"`{m}`", ", ".join(f"{r['onset'] / 1e6:.2f}" if r["onset"] else "never"
                                                   for r in sorted(rs, key=lambda r: r["seed"])),
                               *((f"{t['r']:+.2f}", f"{t['p']:.2g}", t["n"]) if (t := res["onset"].get(m)) else
                                 ("—", "—", len(rs)))] for m, rs in group(res["seeds"]).items()])
    if "pooled" in res["onset"]:
        t = res["onset"]["pooled"]
        lines += ["", f"Pooled over the models (deviations from each model's means): r = {t['r']:+.2f}, p = "
                  f"{t['p']:.2g}, n = {t['n']}."]
    return lines + [""]


def write_md(res, rows, settings, path):
    done = settings["max_tokens"]
    lines = ["# The map on text: copy loss against state (10M bytes, width 128)", "",
             "Written by `python -m dev.map --out_dir results/map` from the records under results/map and "
             "results/scaling/scaling.json; README.md beside this file says what it means. A copy: a byte that it "
             "and the 8 before it occurred earlier in the window; state: floats per sequence and layer at T = 256 "
             f"(budget for a bounded reader: {BUDGET:,}, a quarter of GPT's cache).", ""]
    lines += seed_lines(res)
    lines += ["## The earlier curves (earlier CPUs, 128 fixed windows; one or two seeds, in no test)", "",
              f"At the last point of each curve; a curve short of {done / 1e6:.0f}M bytes is marked *.", ""]
    order = sorted(rows, key=lambda r: (r["loss_copy"] is None, r["loss_copy"] or 0))
    lines += tables.md_table(
        ["model", "seed", "bounded", "state floats / layer", "params", "bytes", "all", "copies", "copies 128+ back",
         "other bytes"],
        [[f"`{r['model']}`", r["seed"], "yes" if r["bounded"] else "no", f"{r['state_floats']:,}", f"{r['params']:,}",
          f"{r['tokens'] / 1e6:.1f}M" + ("" if r["tokens"] >= 0.99 * done else " *"), r["val_loss"], r["loss_copy"],
          r["loss_copy_far"], r["loss_other"]] for r in order])
    tables.save_text("\n".join(lines) + "\n", path)


def plot(res, rows, path):
    """Copy loss and other-bytes loss against state: each seeded model's mean ± SE (cooldown point)
    with its seeds as faint points; the earlier curves as small hollow markers."""
    plt = tables.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), sharex=True)
    colors = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors
    models = list(dict.fromkeys([*res["models"], *(r["model"] for r in rows)]))
    for ax, key, old_key in ((axes[0], "copies", "loss_copy"), (axes[1], "other", "loss_other")):
        for m, v in res["models"].items():
            c, s = colors[models.index(m) % len(colors)], v["metrics"][key]
            ax.scatter([v["state_floats"]] * s["n"], s["values"], color=c, alpha=0.25, s=14, lw=0)
            ax.errorbar(v["state_floats"], s["mean"], yerr=s["se"] or 0, color=c, marker="o" if v["bounded"] else "s",
                        ms=7, capsize=4, zorder=3)
        for r in rows:
            if r[old_key] is not None:
                ax.scatter(r["state_floats"], r[old_key], color=colors[models.index(r["model"]) % len(colors)],
                           marker="o" if r["bounded"] else "s", facecolors="none", s=22, lw=0.7, alpha=0.6)
        ax.axvline(BUDGET, color="0.7", ls=":", lw=1, label=f"bounded budget ({BUDGET:,})")
        ax.set(xscale="log", xlabel="state floats per layer at T = 256", ylabel="nats per byte", title=METRICS[key])
        ax.legend(fontsize=7, loc="lower left")
    fig.legend([plt.Line2D([], [], color=colors[i % len(colors)], marker="o", ls="") for i in range(len(models))],
               [m + (f" (n = {res['models'][m]['n']})" if m in res["models"] else "") for m in models], fontsize=7,
               loc="center right")
    fig.suptitle("The map on text at 10M bytes, width 128: filled, seeds on one machine, mean ± SE after the cooldown "
                 "(faint: each seed); hollow: earlier curves, 128 windows", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.86, 1))  # the right edge for the models' legend
    tables.save_figure(fig, path)
    plt.close(fig)


def analyse(root="."):
    """Everything map.json holds: the earlier rows, the seeds, their statistics and tests."""
    rows, settings = collect(root)
    seeds = collect_seeds(root, settings)
    models = models_table(seeds, "cooldown")
    tests = comparisons(models)
    return dict(alpha=ALPHA, min_seeds=MIN_SEEDS, n_comparisons=len(tests), models=models,
                models_trunk=models_table(seeds, "trunk"), comparisons=tests, cooldown_effect=cooldown_effect(seeds),
                onset=onset_test(seeds), onset_level=ONSET, seeds=seeds, rows=rows), settings


def main(out_dir):
    checkpoint.check_out_dir(out_dir)
    res, settings = analyse()
    checkpoint.make_out_dir(out_dir)
    tables.save_text(json.dumps(dict(command=f"python -m dev.map --out_dir {out_dir}", **res), indent=1) + "\n",
                     os.path.join(out_dir, "map.json"))
    write_md(res, res["rows"], settings, os.path.join(out_dir, "map.md"))
    plot(res, res["rows"], os.path.join(out_dir, "map.png"))
    print(f"wrote {out_dir}/map.md, map.json, map.png ({len(res['seeds'])} seeded curves of {len(res['models'])} "
          f"models, {len(res['rows'])} earlier curves)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default="out/map", help="folder for map.md, map.json, map.png")
    cli.main_guard(lambda: main(p.parse_args().out_dir), prog="dev/map.py")

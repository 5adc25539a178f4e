"""The map on text: what brings the copies back, at what state, and which gaps survive the noise
(results/map).

Two campaigns of seeded curves (each (arm, seed) one scaling.py curve in a folder of its own,
<model>_s<seed> or <model>_lr<lr>_s<seed>, written by `python -m dev.seeds`), each read on its own:
- **map**: results/map/seeds (an Intel Xeon); each model against GPT, each ingredient against its base.
- **screen**: results/map/screen, results/map/PLAN.md's screening: its families (PLANNED), its stage 2
  and the confirmation its rule picks; on another CPU, its curves' own folder (--seeds; PLAN.md).
An arm is a model at a learning rate (`delta`, or `delta@0.004` at another rate than RATE). Every
point is scored on the whole validation split, read at the constant-lr trunk's last point (10M
bytes) and at its cooldown branch's end. Per arm and CPU (two CPUs are never pooled, nor tested
against each other): n, mean ± standard error, a 95% interval on all bytes, copies, copies 128+
bytes back and the other bytes, a seeds-by-documents bootstrap of the standard error
(windows.json). Per comparison (first - second, MIN_SEEDS seeds or more a side) dev/map_stats.py's
statistics and PLAN.md's verdict ("below"/"above", "tie", or "no verdict" where the permutation
test cannot reach ALPHA); what the cooldown does to the spread; each seed's copy onset against its
final copy loss. The map also tables its earlier curves (results/scaling/scaling.json's references,
results/map/<model>/ and seed1/<model>/: earlier CPUs, 128 fixed windows), in no test. A damaged
record (a NaN, a negative loss, a missing field, other settings, one seed twice, a folder named for
another arm or seed) is refused in one line naming the file; a seed folder without a finished curve
is said on stderr and counted in map.md. State: floats per sequence and layer at T = 256.

Run (from the repository root)
    python -m dev.map                                                # -> out/map/map.md, map.json, map.png
    python -m dev.map --out_dir results/map                          # refresh the committed map
    python -m dev.map --campaign screen --out_dir results/map/screen # the screening of PLAN.md
    python -m dev.map --campaign screen --seeds results/map/screen_f26 --out_dir results/map/screen_f26
The curves: `python -m dev.seeds --out_dir results/map/seeds`; the earlier ones
`python scaling.py --models NAME --widths 128 --out_dir results/map/NAME`.
"""

import argparse
import glob
import json
import math
import os
import statistics
import sys

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "dev.map")

from dev import map_stats, seeds
from plumbing import checkpoint, tables
from plumbing.records import LOSS, MAYBE_LOSS, NULL, NUMBER, Each, Opt, Range, read_json

REFERENCE = "results/scaling/scaling.json"
SEEDS = "results/map/seeds"
CAMPAIGNS = {"map": SEEDS, "screen": "results/map/screen"}  # campaign -> its seed folders
SAME = ("n_layer", "data", "tokenizer", "block_size", "batch_size", "grad_accum", "max_tokens", "first_tokens",
        "points", "eval_iters", "hit_seqs", "copy_k", "warmup_iters")  # what every curve must share
CURVE = ("cooldown", "eval_data")  # and every seed of a campaign (the earlier curves have no cooldown)
RATE = 2e-3  # the map's learning rate: an arm at it is its model's plain name
REFS = ("gpt", "softmax_history", "linear", "ema_kv", "delta")  # from the reference record, width 128
BUDGET = 18_000  # a quarter of GPT's cache per layer at T = 256 (2 T C = 65,536): the bound set for a bounded reader
METRICS = {"all": "all bytes", "copies": "copies", "copies_far": "copies 128+ back", "other": "other bytes"}
ALPHA = 0.01  # a verdict's level, two-sided (results/map/PLAN.md)
MIN_SEEDS = 3  # a test needs this many seeds a side: with 2, a side's variance rests on one difference
BASES = (("delta_conv", "delta", "the convolution"), ("gated_delta", "delta_conv", "the gate (with its conv)"),
         ("hybrid_gated_delta", "gated_delta", "one attention block over gated delta blocks"))  # ingredient, base
ONSET = 1.5  # nats per byte on copies: a level every curve crosses early (the byte unigram is ~3.2)
HYPOTHESES = (("H1", "gated_delta_ret", "gated_delta"), ("H2a", "delta_k128_v32", "delta"),
              ("H2b", "delta_k128_v64", "delta"), ("H2c", "delta_wide", "delta"), ("H3a", "delta@0.001", "delta"),
              ("H3b", "delta@0.004", "delta"), ("H3c", "gpt@0.001", "gpt"), ("H3d", "gpt@0.004", "gpt"),
              ("H4", "delta_product", "delta"))  # results/map/PLAN.md's table, first - second
PLANNED = {"P": [(h, a, b, "copies") for h, a, b in HYPOTHESES],  # family -> (label, first, second, metric)
           "S": [(h, a, b, "all") for h, a, b in HYPOTHESES],
           "G": [("G", a, "gpt", "copies") for a in ("delta", "gated_delta", "gated_delta_ret", "delta_k128_v32",
                                                     "delta_k128_v64", "delta_wide", "delta_product")]}
GAP, POWER, CAP, FRESH = 0.05, 0.8, 16, 100  # the confirmation's (PLAN.md): gap on copies, power, seeds a side, first seed
RATED = {"delta_k128_v32": "delta", "delta_k128_v64": "delta", "delta_wide": "delta"}  # delta's shapes take its H3 rate
SCORE = {"step": int, "tokens": NUMBER, **{m: LOSS for m in METRICS}}  # a whole-split score, every metric
SEED = {"model": str, "width": int, "params": (int, NULL), "state_floats": Range(int, 1), "train_seconds": Range(NUMBER, 0),
        "machines": [str], "points": [{"step": int, "tokens": NUMBER, "val_loss": LOSS}], "scores": [SCORE],
        "cooldown": Opt({"scores": [SCORE], "machines": [str]})}  # a seed's curve (no cooldown yet: unfinished)
EARLIER = {"model": str, "width": int, "points": [{"step": int, "tokens": int, "val_loss": LOSS}],
           "copy": [{"step": int, "loss_copy": MAYBE_LOSS, "loss_other": MAYBE_LOSS,
                     "by_distance": [{"lo": int, "loss": MAYBE_LOSS}]}]}
WINDOWS = {"n": [int], "loss": [NUMBER], "copy_n": [int], "copy_loss": [NUMBER], "bin_n": [[int]],
           "bin_loss": [[NUMBER]]}  # windows.json's cooldown entry (plumbing/repeats.py window_scores)


def load(path, curve=EARLIER, settings=dict):
    """The scaling.json at path -> (settings, {curve key: curve}); one line if it is not one (its
    settings and curves not of these shapes: a loss is a finite number >= 0)."""
    res = read_json(path, {"settings": settings, "curves": Each(curve)}, "rerun its scaling.py", "a scaling.py record")
    return res["settings"], res["curves"]


def row(curve, seed, state_floats, step=None):
    """An earlier curve's numbers at its last point, or at `step` (its 128-window copy split there)."""
    last = curve["points"][-1] if step is None else next(p for p in curve["points"] if p["step"] == step)
    split = {c["step"]: c for c in curve["copy"]}.get(last["step"])
    far = next((d["loss"] for d in split["by_distance"] if d["lo"] == 128), None) if split else None
    return dict(model=curve["model"], seed=seed, params=curve["params"], state_floats=state_floats,
                bounded=bounded(curve["model"]), tokens=last["tokens"], val_loss=last["val_loss"],
                loss_copy=split and split["loss_copy"], loss_copy_far=far, loss_other=split and split["loss_other"])


def same_settings(path, settings, ref, keys, against):
    differ = [k for k in keys if settings.get(k) != ref.get(k)]
    cli.require(not differ, "{} has other settings than {} ({}): not on the same map", path, against, ", ".join(differ))


def collect(root="."):
    """The earlier curves, reference first: a list of rows (dicts); a (model, seed) found twice refused."""
    ref_settings, ref = load(os.path.join(root, REFERENCE))
    out = [row(ref[f"{m}_c128"], ref_settings["seed"], ref[f"{m}_c128"]["state_floats"]) for m in REFS]
    where = {(r["model"], r["seed"]): REFERENCE for r in out}
    paths = sorted(glob.glob(os.path.join(root, "results/map/*/scaling.json"))) + \
        sorted(glob.glob(os.path.join(root, "results/map/seed1/*/scaling.json")))
    for path in paths:
        settings, curves = load(path)
        same_settings(path, settings, ref_settings, SAME + ("lr",), REFERENCE)
        for c in curves.values():
            if c["width"] == 128 and c["points"]:
                key = (c["model"], settings["seed"])
                cli.require(key not in where, "{} seed {} is in both {} and {}: one curve per seed (move one away)",
                            *key, where.get(key), path)
                where[key] = path
                out.append(row(c, settings["seed"], c.get("state_floats")))
    return out, ref_settings


def arm_of(model, lr):
    """The arm's name (dev.seeds' naming): the model's at RATE, else MODEL@LR."""
    return model if lr == RATE else f"{model}@{lr:g}"


def cpu_of(machines):
    """The CPU models of a curve's machines ('Intel(R) Xeon(R) ..., torch 2.13.0+cpu, 1 thread(s)')."""
    return " + ".join(sorted({m.split(", torch")[0] for m in machines}))


def collect_seeds(root, ref_settings, folder=SEEDS):
    """A campaign's finished curves: one dict per (arm, seed) with its whole-split losses at the
    trunk's last point and the cooldown's, its onset, its CPU; and one line per seed folder that holds
    no finished curve (said on stderr, counted in map.md)."""
    out, unfinished, where, first = [], [], {}, None
    for d in sorted(p for p in glob.glob(os.path.join(root, folder, "*")) if os.path.isdir(p)):
        path = os.path.join(d, "scaling.json")
        if not os.path.exists(path):
            unfinished.append(f"{d}: no scaling.json yet: not a seed, not in n")
            continue
        settings, curves = load(path, SEED, {"lr": NUMBER, "seed": int, "max_tokens": NUMBER})
        same_settings(path, settings, ref_settings, SAME, REFERENCE)
        first = first or (path, settings)
        same_settings(path, settings, first[1], CURVE, first[0])
        for key, c in curves.items():
            if c["width"] != 128:
                continue
            arm = arm_of(c["model"], settings["lr"])
            cli.require(os.path.basename(d) == seeds.folder(arm, settings["seed"]), "{} holds {} seed {}, whose "
                        "folder is {}: move it there", path, arm, settings["seed"], seeds.folder(arm, settings["seed"]))
            if not c["points"] or not seeds.done(c, settings):
                last = c["points"][-1]["tokens"] if c["points"] else 0
                unfinished.append(f"{d}: unfinished ({last / 1e6:.1f}M of {settings['max_tokens'] / 1e6:.0f}M bytes"
                                  f"{'' if (c.get('cooldown') or {}).get('scores') else ', no cooldown'}): not in n")
                continue
            seed, same = (arm, settings["seed"]), json.dumps([arm, c["points"], c["scores"], c["cooldown"]["scores"]])
            cli.require(seed not in where, "{} seed {} is in both {} and {}: one curve per seed (move one away)",
                        *seed, where.get(seed), path)
            cli.require(same not in where, "{} holds the same curve as {}: one curve under two seeds (move one away)",
                        path, where.get(same))
            where[seed] = where[same] = path
            last = {s["step"]: s for s in c["scores"]}[c["points"][-1]["step"]]
            out.append(dict(arm=arm, model=c["model"], lr=settings["lr"], seed=settings["seed"], params=c["params"],
                            state_floats=c["state_floats"], bounded=bounded(c["model"]),
                            machines=c["machines"] + c["cooldown"]["machines"],
                            cpu=cpu_of(c["machines"] + c["cooldown"]["machines"]),
                            trunk={m: last[m] for m in METRICS}, cooldown={m: c["cooldown"]["scores"][-1][m]
                                                                            for m in METRICS},
                            onset=onset(c["scores"]), train_seconds=c["train_seconds"], folder=d, key=key))
    return out, unfinished


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


def models_table(seeds, point):
    """{row: dict(arm, cpu, n, seeds, point, metrics={metric: summary})} at `point` ('cooldown' |
    'trunk'), a row per (arm, CPU) (group's names)."""
    return {name: dict(arm=rs[0]["arm"], cpu=rs[0]["cpu"], n=len(rs), seeds=[r["seed"] for r in rs],
                       state_floats=rs[0]["state_floats"], bounded=rs[0]["bounded"], params=rs[0]["params"],
                       point=point, metrics={k: map_stats.summary([r[point][k] for r in rs]) for k in METRICS})
            for name, rs in group(seeds).items()}


def planned(campaign, models):
    """The campaign's families: {family: [(label, first arm, second arm, metric), ...]}. The map's: each
    arm against GPT and each ingredient against its base, on every metric, one family; the screen's:
    PLANNED."""
    if campaign == "screen":
        return PLANNED
    arms = dict.fromkeys(v["arm"] for v in models.values())
    n = {a: max(v["n"] for v in models.values() if v["arm"] == a) for a in arms}  # arm -> its most seeds on one CPU
    pairs = [("against GPT", a, "gpt") for a in n if a != "gpt"] + [(w, a, b) for a, b, w in BASES]
    return {"map": [(w, a, b, k) for w, a, b in pairs for k in METRICS if min(n.get(a, 0), n.get(b, 0)) >= MIN_SEEDS]}


def comparisons(models, families, alpha=ALPHA):
    """Each planned comparison, per CPU, that has MIN_SEEDS seeds or more a side: welch(), Holm's p
    over its family (its planned size, per CPU) and the verdict."""
    out = []
    for cpu in dict.fromkeys(v["cpu"] for v in models.values()):
        on = {v["arm"]: v for v in models.values() if v["cpu"] == cpu}
        for family, plan in families.items():
            tests = [dict(family=family, what=label, a=a, b=b, metric=k, cpu=cpu,
                          **map_stats.welch(on[a]["metrics"][k]["values"], on[b]["metrics"][k]["values"], alpha))
                     if a in on and b in on and min(on[a]["n"], on[b]["n"]) >= MIN_SEEDS else None
                     for label, a, b, k in plan]
            for c, p in zip(tests, map_stats.holm([c and c["p_welch"] for c in tests])):
                if c:
                    c.update(p_holm=p, family_size=len(plan))
                    out.append(dict(c, verdict=map_stats.verdict(c, alpha)))
    return out


def stage2(seeds, alpha=ALPHA):
    """PLAN.md's stage 2: each family-P comparison whose 1 - alpha Welch interval at 3 vs 3 (seeds 0-2)
    excludes 0, per CPU: its arms get seeds 3 and 4."""
    out = []
    for label, a, b, k in PLANNED["P"]:
        for cpu in dict.fromkeys(r["cpu"] for r in seeds):
            x, y = ([r["cooldown"][k] for r in seeds if r["arm"] == arm and r["cpu"] == cpu and r["seed"] < 3]
                    for arm in (a, b))
            if len(x) == len(y) == 3:
                c = map_stats.welch(x, y, alpha)
                out.append(dict(what=label, a=a, b=b, cpu=cpu, diff=c["diff"], ci99=c["ci99"],
                                extend=c["ci99"][0] > 0 or c["ci99"][1] < 0))
    return out


def confirmation(models):
    """PLAN.md's pick and n, per CPU, from the arms with MIN_SEEDS seeds: the bounded arm at RATE with the lowest
    mean cooldown copies, at its model's best H3 rate (the lowest mean copies of the rates measured; delta's for its
    shapes, RATED), against GPT at its best; the seeds a side their spreads need (map_stats.n_for_power) and the
    dev.seeds plan that runs them. `short`: the planned arms still short of MIN_SEEDS seeds (a provisional pick)."""
    out, planned_arms = [], {arm for plan in PLANNED.values() for _, a, b, _ in plan for arm in (a, b)}
    for cpu in dict.fromkeys(v["cpu"] for v in models.values()):
        on = {v["arm"]: v for v in models.values() if v["cpu"] == cpu and v["n"] >= MIN_SEEDS}
        mean = lambda arm: on[arm]["metrics"]["copies"]["mean"]
        sd = lambda arm: statistics.stdev(on[arm]["metrics"]["copies"]["values"])
        best = lambda model: min((a for a in on if seeds.split_arm(a)[0] == model), key=mean, default=model)
        pick = min((a for a in on if on[a]["bounded"] and "@" not in a), key=mean, default=None)
        if "gpt" not in on or pick is None:
            continue
        a, b = arm_of(pick, seeds.split_arm(best(RATED.get(pick, pick)))[1] or RATE), best("gpt")
        need, n, gap = map_stats.n_for_power(sd(a if a in on else pick), sd(b), GAP, ALPHA, POWER, CAP)
        out.append(dict(cpu=cpu, pick=pick, copies=mean(pick), a=a, b=b, need=need, n=n, gap=gap, short=sorted(
            planned_arms - set(on)), plan=",".join(f"{arm}:{FRESH}-{FRESH + n - 1}" for arm in (a, b))))
    return out


def noise(seeds, settings, read_split=None):
    """Per model row and metric the seeds-by-documents bootstrap of its mean (cooldown point), from
    each seed folder's windows.json; {} for a row whose seeds lack one."""
    from plumbing import corpus
    out, docs = {}, None
    for name, rs in group(seeds).items():
        paths = [os.path.join(r["folder"], "windows.json") for r in rs]
        if len(rs) < 2 or not all(map(os.path.exists, paths)):
            continue
        windows = [read_json(path, {r["key"]: {"cooldown": WINDOWS}}, "rerun its scaling.py", "a windows.json")
                   [r["key"]]["cooldown"] for path, r in zip(paths, rs)]
        if docs is None:
            split = (read_split or corpus.load_split)(settings["data"], "val", tokenizer=settings["tokenizer"])
            docs = map_stats.documents(split, corpus.separator(settings["tokenizer"]), settings["block_size"])
        cli.require(all(len(w["n"]) == len(docs) for w in windows), "{}: windows.json holds another number of "
                    "windows than the validation split's {}: another split; rerun its scaling.py", paths[0], len(docs))
        out[name] = {k: map_stats.bootstrap(windows, docs, k) for k in METRICS}
    return out


def cooldown_effect(seeds):
    """Per arm: the spread (sample std) across seeds of each metric at the trunk's last point and
    after the cooldown, and the mean change the cooldown makes (cooldown - trunk, paired by seed)."""
    out = {}
    for m, rs in group(seeds).items():
        if len(rs) < 2:
            continue
        out[m] = {k: dict(std_trunk=tables.mean_std([r["trunk"][k] for r in rs])[1],
                          std_cooldown=tables.mean_std([r["cooldown"][k] for r in rs])[1],
                          change=sum(r["cooldown"][k] - r["trunk"][k] for r in rs) / len(rs)) for k in METRICS}
    return out


def onset_test(seeds):
    """Does a seed's copy onset predict its final copy loss (cooldown point)? Pearson's r (scipy)
    per arm, and pooled over arms on the deviations from each arm's means."""
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
    """{row name: its seeds, by seed}: a row per (arm, CPU), named by the arm alone when the campaign ran on one CPU."""
    one = len({r["cpu"] for r in seeds}) == 1
    keys = dict.fromkeys((r["arm"], r["cpu"]) for r in seeds)
    return {a if one else f"{a} on {c}": sorted((r for r in seeds if (r["arm"], r["cpu"]) == (a, c)),
                                                 key=lambda r: r["seed"]) for a, c in keys}


# ---- the tables and the figure -------------------------------------------------------------


def pm(s, fmt=".3f"):
    """'mean ± se' of a summary ('mean' alone for one seed)."""
    return f"{s['mean']:{fmt}}" + (f" ± {s['se']:{fmt}}" if s["se"] is not None else "")


def seed_lines(res):
    """map.md's tested part: the seeds' table at both points, the noise, the tests, the cooldown, the onsets."""
    models, folder = res["models"], res["folder"]
    lines = ["## The seeds (whole validation split)", ""]
    if res["unfinished"]:
        lines += [f"{len(res['unfinished'])} seed folder(s) under {folder} hold no finished curve (not in n): "
                  + "; ".join(os.path.basename(u.split(":")[0]) for u in res["unfinished"]) + ".", ""]
    if not models:
        return lines + [f"No seeded curve has finished yet (`python -m dev.seeds --out_dir {folder}`).", ""]
    lines += ["CPU of every curve: " + "; ".join(dict.fromkeys(v['cpu'] for v in models.values())) + " (a row per "
              "arm and CPU; two CPUs are never pooled or tested against each other). Nats per byte, mean ± standard "
              "error over the seeds, the 95% interval in map.json.", ""]
    for point, table in (("cooldown", models), ("trunk", res["models_trunk"])):
        lines += [f"**At {'the end of the cooldown branch (lr linearly to 0 over the last 20%)' if point == 'cooldown' else 'the constant-lr trunk’s last point'}**, 10M bytes:", ""]
        lines += tables.md_table(["arm", "n", "params", "state floats / layer", *METRICS.values()],
                                 [[f"`{m}`", v["n"], f"{v['params']:,}" if v["params"] else None,
                                   f"{v['state_floats']:,}" + ("" if v["bounded"] else " (grows)"),
                                   *(pm(v["metrics"][k]) for k in METRICS)] for m, v in table.items()])
        lines.append("")
    if res["noise"]:
        lines += [f"**Seeds or documents?** The standard error of each mean (cooldown point) by a bootstrap "
                  f"({map_stats.BOOTSTRAP} resamples) of the seeds only, of the validation documents only (each "
                  "window given to the document holding its first target; one resample for every seed), and of both; "
                  "the seeds' share: var_seeds / (var_seeds + var_documents):", ""]
        lines += tables.md_table(["arm", "metric", "seeds", "documents", "SE: seeds", "SE: documents", "SE: both",
                                  "seeds' share"],
                                 [[f"`{m}`", METRICS[k], b["n_seeds"], b["n_documents"], f"{b['se']['seeds']:.4f}",
                                   f"{b['se']['documents']:.4f}", f"{b['se']['both']:.4f}", f"{b['seed_share']:.0%}"]
                                  for m, bs in res["noise"].items() for k, b in bs.items()])
        lines.append("")
    sizes = ", ".join(f"{f}: {n}" for f, n in res["family_sizes"].items())
    lines += [f"**The tests** ({len(res['comparisons'])} comparisons run, at the cooldown point, of arms with "
              f"{MIN_SEEDS} seeds or more a side; families and their planned sizes, {sizes}). Difference = first − "
              "second (negative: the first's loss is lower); Welch's t-test, two-sided, and Holm's adjustment of its p "
              "over the family; the permutation test over seed labels (two-sided, |difference of means|, exact: "
              "every relabelling, else sampled) and its floor, the smallest p it can give (2 / C(n_a + n_b, n_a); 1 / C "
              "with unequal sides); the 99% Welch interval. "
              f"Verdict: below/above where Holm's p and the permutation p are both under {ALPHA}; no verdict where "
              f"the floor is above {ALPHA}; else a tie.", ""]
    lines += tables.md_table(["family", "first", "second", "what", "metric", "n", "difference ± SE", "99% interval",
                              "t (df)", "Welch p", "Holm p", "permutation p", "floor", "verdict"],
                             [[c["family"], f"`{c['a']}`", f"`{c['b']}`", c["what"], METRICS[c["metric"]],
                               f"{c['n_a']} vs {c['n_b']}", f"{c['diff']:+.3f} ± {c['se']:.3f}",
                               f"[{c['ci99'][0]:+.3f}, {c['ci99'][1]:+.3f}]",
                               f"{c['t']:.2f} ({c['df']:.1f})" if c["t"] is not None else None,
                               tables.cell(c["p_welch"], ".2g"), tables.cell(c["p_holm"], ".2g"),
                               f"{c['p_perm']:.3g}" + ("" if c["perm_exact"] else " (sampled)"),
                               f"{c['perm_floor']:.3g}", f"**{c['verdict']}**"] for c in res["comparisons"]])
    if res["campaign"] == "screen":
        ext = [s for s in res["stage2"] if s["extend"]]
        plan = ",".join(dict.fromkeys(f"{arm}:3-4" for s in ext for arm in (s["a"], s["b"])))
        lines += ["", "**Stage 2** (PLAN.md): the family-P comparisons whose 99% Welch interval at 3 vs 3 (seeds 0-2) "
                  "excludes 0; their arms get seeds 3 and 4: " + (", ".join(
                      f"{s['what']} (`{s['a']}` − `{s['b']}`, [{s['ci99'][0]:+.3f}, {s['ci99'][1]:+.3f}])"
                      for s in ext) or "none") + f" (of {len(res['stage2'])} read at 3 vs 3)" + (
                      f": `python -m dev.seeds --out_dir {folder} --plan \"{plan}\"`." if plan else ".")]
        if not res["confirmation"]:
            lines += ["", f"**The confirmation** (PLAN.md's pick): not yet: GPT and a bounded arm need {MIN_SEEDS} seeds each."]
        for c in res["confirmation"]:
            short = f", provisional: {len(c['short'])} planned arms short of {MIN_SEEDS} seeds" if c["short"] else ""
            cap = f", capped at {CAP}" if c["need"] > CAP else ""
            lines += ["", f"**The confirmation** (PLAN.md's pick{short}): `{c['pick']}`, the bounded arm with the lowest "
                      f"mean cooldown copies ({c['copies']:.3f}), as `{c['a']}` against `{c['b']}`: {c['n']} seeds a side "
                      f"({c['need']} for {POWER:.0%} power at a {GAP}-nat gap, two-sided at {ALPHA}{cap}; {c['n']} a side "
                      f"find {c['gap']:.3f} with that power): `python -m dev.seeds --out_dir results/map/confirm "
                      f"--plan \"{c['plan']}\"`."]
    lines += ["", "**What the cooldown does**: the spread (sample std over seeds) at the trunk's last point and "
              "after the cooldown, and the mean change it makes (paired by seed):", ""]
    lines += tables.md_table(["arm", "metric", "std, trunk", "std, cooldown", "mean change"],
                             [[f"`{m}`", METRICS[k], f"{e['std_trunk']:.3f}", f"{e['std_cooldown']:.3f}",
                               f"{e['change']:+.3f}"] for m, es in res["cooldown_effect"].items() for k, e in es.items()])
    lines += ["", f"**Copy onset**: the bytes at which each seed's copy loss (whole split, trunk) first falls below "
              f"{ONSET} nats, and whether it predicts the seed's final copy loss (Pearson's r of log onset against "
              "the cooldown point's copies):", ""]
    lines += tables.md_table(["arm", "onset per seed (M bytes)", "r", "p", "n"],
                             [[f"`{m}`", ", ".join(f"{r['onset'] / 1e6:.2f}" if r["onset"] else "never"
                                                   for r in sorted(rs, key=lambda r: r["seed"])),
                               *((f"{t['r']:+.2f}", f"{t['p']:.2g}", t["n"]) if (t := res["onset"].get(m)) else
                                 ("—", "—", len(rs)))] for m, rs in group(res["seeds"]).items()])
    if "pooled" in res["onset"]:
        t = res["onset"]["pooled"]
        lines += ["", f"Pooled over the arms (deviations from each arm's means): r = {t['r']:+.2f}, p = "
                  f"{t['p']:.2g}, n = {t['n']}."]
    return lines + [""]


def write_md(res, settings, path):
    done = settings["max_tokens"]
    lines = [f"# The map on text{': the screening of PLAN.md' if res['campaign'] == 'screen' else ''}: copy loss "
             "against state (10M bytes, width 128)", "",
             f"Written by `{res['command']}` from the records under {res['folder']}"
             + (" and results/map, results/scaling/scaling.json" if res["campaign"] == "map" else "") +
             "; README.md in results/map says what it means. A copy: a byte that it and the 8 before it occurred "
             f"earlier in the window; state: floats per sequence and layer at T = 256 (budget for a bounded reader: "
             f"{BUDGET:,}, a quarter of GPT's cache).", ""]
    lines += seed_lines(res)
    if res["campaign"] == "map":
        rows = res["rows"]
        lines += ["## The earlier curves (earlier CPUs, 128 fixed windows; one or two seeds, in no test)", "",
                  f"At the last point of each curve; a curve short of {done / 1e6:.0f}M bytes is marked *.", ""]
        order = sorted(rows, key=lambda r: (r["loss_copy"] is None, r["loss_copy"] or 0))
        lines += tables.md_table(
            ["model", "seed", "bounded", "state floats / layer", "params", "bytes", "all", "copies",
             "copies 128+ back", "other bytes"],
            [[f"`{r['model']}`", r["seed"], "yes" if r["bounded"] else "no", f"{r['state_floats']:,}",
              f"{r['params']:,}", f"{r['tokens'] / 1e6:.1f}M" + ("" if r["tokens"] >= 0.99 * done else " *"),
              r["val_loss"], r["loss_copy"], r["loss_copy_far"], r["loss_other"]] for r in order])
    tables.save_text("\n".join(lines) + "\n", path)


def plot(res, rows, path):
    """Copy loss and other-bytes loss against state: each seeded row's mean ± SE (cooldown point)
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
    fig.suptitle(f"The map on text{' (screen)' if res['campaign'] == 'screen' else ''} at 10M bytes, width 128: "
                 "filled, seeds on one CPU, mean ± SE after the cooldown (faint: each seed); hollow: earlier curves, "
                 "128 windows", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.86, 1))  # the right edge for the models' legend
    tables.save_figure(fig, path)
    plt.close(fig)


def analyse(root=".", campaign="map", read_split=None, folder=None):
    """Everything map.json holds: the earlier rows (the map only), the seeds (under folder, else the campaign's)."""
    folder = folder or CAMPAIGNS[campaign]
    rows, settings = collect(root) if campaign == "map" else ([], load(os.path.join(root, REFERENCE))[0])
    seeds, unfinished = collect_seeds(root, settings, folder)
    for line in unfinished:
        print(line, file=sys.stderr)
    models = models_table(seeds, "cooldown")
    families = planned(campaign, models)
    tests = comparisons(models, families)
    return dict(campaign=campaign, folder=folder, alpha=ALPHA, min_seeds=MIN_SEEDS, n_comparisons=len(tests),
                family_sizes={f: len(p) for f, p in families.items()},
                planned={f: [dict(what=w, a=a, b=b, metric=k) for w, a, b, k in p] for f, p in families.items()},
                models=models, models_trunk=models_table(seeds, "trunk"), comparisons=tests,
                stage2=stage2(seeds) if campaign == "screen" else None,
                confirmation=confirmation(models) if campaign == "screen" else None,
                noise=noise(seeds, settings, read_split), cooldown_effect=cooldown_effect(seeds),
                onset=onset_test(seeds), onset_level=ONSET, seeds=seeds, unfinished=unfinished, rows=rows), settings


def main(out_dir=None, campaign="map", seeds=None):
    out_dir = out_dir or os.path.join("out", "map" if campaign == "map" else f"map_{campaign}")
    checkpoint.check_out_dir(out_dir)
    cli.require(seeds is None or os.path.isdir(seeds), "--seeds {} is not a folder: name a dev.seeds --out_dir", seeds)
    res, settings = analyse(campaign=campaign, folder=seeds)
    res = dict(command=f"python -m dev.map{'' if campaign == 'map' else ' --campaign ' + campaign}"
                       f"{'' if seeds is None else ' --seeds ' + seeds} --out_dir {out_dir}", **res)
    checkpoint.make_out_dir(out_dir)
    text = json.dumps(res, indent=1, allow_nan=False) + "\n"  # a NaN is a bug here: every value was checked
    write_md(res, settings, os.path.join(out_dir, "map.md"))
    plot(res, res["rows"], os.path.join(out_dir, "map.png"))
    tables.save_text(text, os.path.join(out_dir, "map.json"))  # last: a failure above leaves no new json by an old md
    print(f"wrote {out_dir}/map.md, map.png, map.json ({len(res['seeds'])} seeded curves of {len(res['models'])} "
          f"arms, {len(res['rows'])} earlier curves, {len(res['unfinished'])} unfinished seed folders)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--campaign", default="map", choices=CAMPAIGNS, help="which seeds: map (results/map/seeds) or "
                   "screen (results/map/screen, PLAN.md's families)")
    p.add_argument("--seeds", default=None, help="the folder of the campaign's seed folders, when not the "
                   "campaign's own: the screen's curves on another CPU (results/map/PLAN.md)")
    p.add_argument("--out_dir", default=None, help="folder for map.md, map.json, map.png (default out/map, "
                   "out/map_screen)")
    cli.main_guard(lambda: main(**vars(p.parse_args())), prog="dev/map.py")

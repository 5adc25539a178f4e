"""Results as files, one way for every command: markdown tables, figures and the results JSON,
and the mean ± std of a variant's seeds that they show.

`md_table` is the one builder of the GitHub tables in the commands' .md reports; `save_json` is
the one writer of their results JSON: the command that reproduces the run and its settings first,
then the results, written atomically (checkpoint.atomic_json: a full disk is one line, a crash
leaves the old file whole); `save_text` and `save_figure` write the .md and .png the same way (`pyplot`: matplotlib drawing
into files, imported only when a figure is made).
records.load_record reads such a JSON back for a command that adds to it (ablate.py's rows, scaling.py's
curves), refusing one of other settings in one line. `shape_error` says where a JSON read back
departs from the shape its reader needs (a list where a number should be, a null accuracy, a
truncated record, a NaN): every results file a command reads is checked so, and refused in one
line naming it, instead of a traceback from deep inside a table (plumbing/records.py holds the
shapes and the readers of a run folder's records).

Each command's report is here too, written from its results dict (what the numbers mean is in the
command's docstring): probe.py's results.md (the role accuracies of the four readers beside the
paper's) and roles.png (probe_md, probe_plot); recall.py's recall.md (accuracy per model and pair
count, the binding, the plateau exits, accuracy by distance) and recall.png (recall_md,
recall_plot); scaling.py's scaling.md (the curves, the overfitting watch, the copy splits, the
whole split, where GPT overtakes) and scaling.png (scaling_md, scaling_plot); ablate.py's ablate.md (every
variant against `linear` and the yardsticks, history readers against their state counterparts, where the loss
goes: recall hits, copies by distance) and curves.png, hits.png, copy.png (ablate_md, ablate_curves, ablate_hits,
ablate_copy).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556): its results tables, and the claims
results/probe, results/recall, results/scaling and results/ablate test.

Run: nothing to run; tests/test_tables.py, and each command's tests (tests/test_recall.py re-renders
a committed report).
"""

import dataclasses
import json
import os
import pathlib
import statistics

import numpy as np
import torch

from plumbing import checkpoint, cli, ngram, repeats
from plumbing.records import NUMBER, Each, shape_error  # the shapes of what is read back (plumbing/records.py)


def cell(x, fmt=".3f"):
    """One table cell: None -> '—', a float with fmt, anything else as str."""
    if x is None:
        return "—"
    return format(x, fmt) if isinstance(x, float) else str(x)


def md_table(header, rows, fmt=".3f"):
    """GitHub markdown lines: the header, the rule, one line per row (cells through `cell`).
    header: list of column names; rows: iterables of the same length."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        r = list(r)
        if len(r) != len(header):
            raise ValueError(f"a row of {len(r)} cells under {len(header)} columns: {r}")
        lines.append("| " + " | ".join(cell(x, fmt) for x in r) + " |")
    return lines


def diverged_runs(results):
    """{name: step} of a grid's runs whose loss was not finite (recall.py's variants, frontier.py's points)."""
    return {f"{r.get('variant') or r.get('point')} seed {r['seed']}": r["diverged"] for r in results
            if r.get("diverged") is not None}


def diverged_lines(res):
    """A report's lines on diverged runs (none when none did): they are out of every table."""
    if not res.get("diverged"):
        return []
    return ["", "**Diverged** (the training loss was not finite; lower --lr): " + ", ".join(
        f"{k} at step {v}" for k, v in res["diverged"].items()) + ". These runs are in no mean and no table above."]


def mean_std(values):
    """(mean, sample standard deviation) of a list of numbers; the std of one value is 0."""
    values = [float(v) for v in values]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def save_json(res, path, script, cfg):
    """Write {command, settings, **res} to path atomically; returns the dict written.
    script: the command's file name ('recall.py'); cfg: its config dataclass."""
    out = dict(command=cli.command_line(script, cfg), settings=dataclasses.asdict(cfg))
    out.update({k: v for k, v in res.items() if k not in out})
    checkpoint.atomic_json(out, path)
    return out


def save_text(text, path):
    """Write text to path atomically (a report's .md)."""
    checkpoint.atomic_write(path, lambda f: f.write(text))


def pyplot():
    """matplotlib.pyplot drawing into files only (the Agg backend: no screen), imported when a
    figure is made, so a command that draws nothing never imports matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, dpi=120):
    """Save a matplotlib figure as a PNG at path atomically."""
    checkpoint.atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi), "wb")


# ---- probe.py's report: results.md, roles.png ------------------------------------------------


def probe_md(res, path, who, contexts):
    """results.md: the summary table against the paper's numbers (res["paper"]), then per role.
    who: the four readers' labels in column order (probe.WHO); contexts: the rc_verb contexts and
    their descriptions (probe.RC_VERB_CONTEXTS)."""
    s, p = res["std"], res["paper"]
    cell = lambda g, k: f"{res[g][k]:.3f} ± {s[g][k]:.3f}"
    row = lambda label, g, keys, paper_spcn="-", paper_bigru="-": [label, *(cell(g, k) for k in keys), paper_spcn,
                                                                   paper_bigru]
    four = ("spcn", "untrained", "gru", "bigru")
    rv = res["roles"]["rc_verb"], s["roles"]["rc_verb"]
    pe = res["prediction_error"]
    lines = [
        f"# Role probes: SPCN (EMA traces), trained and untrained, vs supervised causal GRU and BiGRU "
        f"({res['seeds']} seed{'s' if res['seeds'] > 1 else ''}, {res['seconds']:.0f} s)", "",
        f"Command: `{res['command']}`", "",
        "SPCN columns: linear probes on activity + EMA traces, fit on A-train roles (the SPCN itself "
        "never sees a label). Taggers: trained on A-train roles. Mean ± std over seeds.", ""]
    rows = [
        row("within A", "within", ("traces", "untrained", "gru", "bigru"), f"{p['within_traces']:.3f}"),
        ["within A, instantaneous activity only", cell("within", "instantaneous"), "-", "-", "-",
         f"{p['within_instantaneous']:.3f}", "-"],
        ["within A, relative to the BiGRU", *(f"{res['within'][k] / res['within']['bigru']:.1%}"
                                              for k in ("traces", "untrained", "gru", "bigru")),
         f"{p['spcn_over_bigru']:.0%}", "-"],
        row("transfer A -> B, overall", "transfer", four, f"{p['transfer_spcn']:.3f}"),
        row("deep-embedded roles, transfer", "deep_embedded", four, f"{p['deep_embedded']:.2f}"),
        row("deep-embedded roles, within A", "deep_embedded_within", four),
        row("structural roles, transfer", "structural_transfer", four),
        row("content roles, transfer", "content_transfer", four, "-", "better than SPCN"),
        ["rc_verb, transfer", *(f"{rv[0]['transfer_' + w]:.3f} ± {rv[1]['transfer_' + w]:.3f}" for w in four),
         f"{p['rc_verb_transfer_spcn']:.3f}", f"{p['rc_verb_transfer_bigru']:.3f}"]]
    rows += [row(f"rc_verb, transfer, {desc}", "rc_verb_transfer_by_context", [f"{w}_after_{c}" for w in four])
             for c, desc in contexts.items()]
    rows += [["prediction error per unit, A-test / B-test",
              *(f"{pe[w]['within']:.4f} / {pe[w]['transfer']:.4f}" for w in ("spcn", "untrained")), "-", "-", "-", "-"],
             ["parameters", "-", "-", f"{res['params']['gru']:,}", f"{res['params']['bigru']:,}", "-", "-"]]
    lines += md_table(["quantity", *who.values(), "paper SPCN", "paper BiGRU"], rows)
    lines += ["", "## Per role (mean over seeds)", ""]
    lines += md_table(
        ["role", "kind", *(f"within {v}" for v in who.values()), *(f"transfer {v}" for v in who.values())],
        ([r, d["kind"], *(d[f"{sp}_{w}"] for sp in ("within", "transfer") for w in four)]
         for r, d in res["roles"].items()))
    save_text("\n".join(lines) + "\n", path)


def probe_plot(res, path):
    """roles.png: accuracy per role of the four readers, within Grammar A and in transfer to B."""
    plt = pyplot()

    roles = list(res["roles"])
    fig, axes = plt.subplots(2, 1, figsize=(13, 6.5), sharex=True)
    x = torch.arange(len(roles)).float()
    bars = (("spcn", "tab:blue", "SPCN, PGHU (activity + traces)"),
            ("untrained", "lightsteelblue", "SPCN, untrained (same traces, no PGHU)"),
            ("gru", "tab:green", "causal GRU (supervised, left context)"),
            ("bigru", "tab:orange", "BiGRU (supervised, both sides)"))
    for ax, split_name in zip(axes, ("within", "transfer")):
        for i, (who, color, label) in enumerate(bars):
            vals = [res["roles"][r][f"{split_name}_{who}"] for r in roles]
            ax.bar(x + 0.2 * (i - 1.5), vals, width=0.2, color=color, label=label)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"{split_name} accuracy")
        ax.set_title("within Grammar A (held-out)" if split_name == "within"
                     else "transfer: trained on A, tested on B", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, 0.95))
    axes[1].set_xticks(x.tolist())
    axes[1].set_xticklabels(roles, rotation=60, ha="right", fontsize=8)
    for lab, r in zip(axes[1].get_xticklabels(), roles):
        lab.set_color("tab:red" if res["roles"][r]["kind"] == "content" else "black")
    fig.suptitle("Role accuracy per role (red labels: content roles)")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    save_figure(fig, path, dpi=110)
    plt.close(fig)

# ---- recall.py's report: recall.md, recall.png -----------------------------------------------


RECALL_NOTES = "## Notes"  # recall.md from this heading on is hand-written and kept when the table is rewritten


def recall_md(res, path, val_seed, test_seed):
    """recall.md: accuracy per variant and pair count, the binding, the plateau exits and accuracy by
    distance (val_seed, test_seed: the data seeds of the validation and test sequences, named in
    it); a hand-written part from RECALL_NOTES on, in the file already there, is kept."""
    s, pairs = res["settings"], list(res["settings"]["pairs"])
    vs = res["variants"]
    recipe = (f"{s['steps']} steps x {s['batch_size']} fresh sequences (the first {s['curriculum']} with "
              f"N = {min(pairs)} only), AdamW lr {s['lr']:g} (warmup {s['warmup']}, constant, linear decay to 0 over the last "
              f"{s['decay']}), weight decay {s['weight_decay']:g}, clip 1.0, the same for every variant")
    lines = [f"# MQAR recall: accuracy at answer positions (test sequences, data seed {test_seed})", "",
             f"`{res['command']}`", "",
             f"T = {s['block_size']}, C = {s['n_embd']}, {s['n_layer']} layer(s), {s['n_head']} head(s); {recipe}; "
             f"{s['seeds']} seed(s); {s['n_keys']} keys, {s['n_values']} values (chance {res['chance']:.4f}). "
             f"Wall {res['seconds']:.0f} s for this invocation with {s['workers']} worker(s) of one thread each on "
             f"{res['hardware']} ({res['reused']} of the runs reused from runs/); the runs' own times sum to "
             f"{res['run_seconds']:.0f} s.", ""]
    lines += md_table(
        ["variant", "params", "state floats / layer", "capacity (pairs)"] + [f"N={N} (1/N={1 / N:.2f})" for N in pairs],
        ([v + (f" (seed {', '.join(map(str, r['diverged_seeds']))} diverged: not averaged)"
               if r.get("diverged_seeds") else ""), f"{r['params']:,}", f"{r['state_floats']:,}",
          f"{r['capacity_pairs']:.1f}"]
         + [f"{r['acc'][str(N)]:.3f} ± {r['acc_std'][str(N)]:.3f}" for N in pairs] for v, r in vs.items()))
    lines += ["", "Binding, (accuracy - 1/N) / (1 - 1/N): 0 is the 1/N plateau (a model that knows which values "
              "occurred, not which key each belongs to), 1 perfect recall.", ""]
    lines += md_table(["variant"] + [f"N={N}" for N in pairs],
                             ([v] + [f"{r['binding'][str(N)]:+.3f}" for N in pairs] for v, r in vs.items()))
    lines += ["", f"Plateau exit: the first validation evaluation (every {s['eval_every']} steps, {s['val_seqs']} "
              "sequences per N, data seed " f"{val_seed}) whose accuracy at N pairs is above (1/N + 1) / 2; "
              "'-' = never within the budget; one entry per seed.", ""]
    lines += md_table(["variant"] + [f"N={N} (> {res['threshold'][str(N)]:.3f})" for N in pairs],
                             ([v] + [", ".join("-" if x is None else f"{x:,}" for x in r["exit_step"][str(N)])
                                     for N in pairs] for v, r in vs.items()))
    bins = sorted({int(d) for r in vs.values() for d in r["acc_distance"]})
    lines += ["", "Accuracy by key-to-query distance d (all pair counts pooled; bin = [lo, 2 lo)):", ""]
    lines += md_table(["variant"] + [f"d>={d}" for d in bins],
                             ([v] + [r["acc_distance"].get(str(d), float("nan")) for d in bins] for v, r in vs.items()))
    lines += diverged_lines(res)
    old = pathlib.Path(path).read_text(encoding="utf-8") if os.path.exists(path) else ""
    notes = old[old.index(RECALL_NOTES):] if RECALL_NOTES in old else ""
    save_text("\n".join(lines) + "\n" + ("\n" + notes if notes else ""), path)


MARKERS = "os^DvP*Xp"  # one per variant: lines that coincide (several at 1.000) stay apart


def recall_plot(res, path, dashed):
    """recall.png: accuracy by N, by distance, and the validation curve at N = 8 (seed 0). Each
    variant has its own marker, a small sideways offset and a line thinner than the one before,
    so a line at the same accuracy as another (gpt and softmax_history at 1.000) shows around it.
    dashed: the variants whose state has a fixed size whatever T (recall.FIXED), drawn dashed."""
    plt = pyplot()
    pairs, every = list(res["settings"]["pairs"]), res["settings"]["eval_every"]
    ref = 8 if 8 in pairs else max(pairs)  # the pair count whose learning curve is drawn
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(16, 4))
    for i, (v, r) in enumerate(res["variants"].items()):
        style, shift = ("--" if v in dashed else "-") + MARKERS[i % len(MARKERS)], i - (len(res["variants"]) - 1) / 2
        side, lw = (lambda xs: [x * 2 ** (0.04 * shift) for x in xs]), 3.5 - 0.35 * i  # log axes: a few % apart
        a1.errorbar(side(pairs), [r["acc"][str(N)] for N in pairs], [r["acc_std"][str(N)] for N in pairs],
                    fmt=style, ms=4, lw=lw, capsize=2, label=v)
        d = sorted(int(k) for k in r["acc_distance"])
        a2.plot(side(d), [r["acc_distance"][str(k)] for k in d], style, ms=4, lw=lw, label=v)
        curve = r["curves"][0]  # seed 0
        a3.plot([step + 0.08 * every * shift for step, _ in curve], [acc[str(ref)] for _, acc in curve], style, ms=3,
                lw=lw, label=v)
    a1.plot(pairs, [1 / N for N in pairs], "k:", label="1/N (knows which values, not which key)")
    a3.axhline(1 / ref, color="k", ls=":", lw=0.8, label=f"1/N = 1/{ref}")
    a3.axhline(res["threshold"][str(ref)], color="k", lw=0.6, label="plateau exit: > (1/N + 1) / 2")
    for a in (a1, a2, a3):
        a.axhline(res["chance"], color="grey", lw=0.8, label="chance 1/M")
        a.set_ylim(-0.02, 1.02)
        a.set_ylabel("accuracy")
    for a in (a1, a2):
        a.set_xscale("log", base=2)
    a1.set_xlabel("key-value pairs N")
    a2.set_xlabel("key-to-query distance (bin start, all N pooled)")
    a3.set_xlabel("optimizer step")
    a3.set_title(f"validation accuracy at N = {ref} while training (seed 0)")
    a1.legend(fontsize=7)
    a3.legend(fontsize=7, loc="center right")
    a1.set_title("MQAR recall (dashed: state of fixed size whatever T)")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)

# ---- scaling.py's report: scaling.md, scaling.png --------------------------------------------


def scaling_md(res, path, prepared):
    """scaling.md: the curves, the overfitting watch, the copy splits, the whole split, the crossovers;
    `prepared`: the lines naming the prepared GPU runs (scaling.py's presets)."""
    s, y = res["settings"], res["yardsticks"] or {}
    unit = "byte" if s["tokenizer"] == "bytes" else "token"
    lines = [f"# Where GPT overtakes SPEN: validation loss against training {unit}s", "",
             f"`python scaling.py` on `{s['data']}` ({s['tokenizer']}), {s['n_layer']} blocks, T = {s['block_size']}, "
             f"{res['tokens_per_step']:,} {unit}s per step, lr {s['lr']:g} after {s['warmup_iters']} warmup steps, "
             f"{res['schedule']}; seed {s['seed']}, one run per (model, width). Train split: "
             f"{res['train_split_tokens']:,} {unit}s. Wall time of this invocation {res['seconds']:.0f} s.", ""]
    if y:
        lines += [f"Yardsticks (nats/{unit}): unigram {y['unigram']:.3f}, bigram {y['bigram']:.3f}"
                  + (f", trigram {y['trigram']:.3f}" if "trigram" in y else "") + "."
                  + (f" Compressors on the same val bytes (NUL separators included; they see the whole split as "
                     f"context): {ngram.compressor_line(y, unit)}." if ngram.compressor_line(y) else ""), ""]
    points = [f"{p['tokens']:,}" for p in _longest(res)]
    lines += md_table(["run", "params", "state floats / layer", "train s", *points],
                             [[k, f"{c['params']:,}", f"{c['state_floats']:,}", round(c["train_seconds"]),
                               *(p["val_loss"] for p in c["points"]), *[None] * (len(points) - len(c["points"]))]
                              for k, c in res["curves"].items()])
    lines += ["", f"Validation loss (nats/{unit}) after the number of training {unit}s in the header "
              "(train.py's fixed validation batches). State floats / layer: the numbers per sequence and layer a "
              "model's step() holds after T tokens (ablate.py's column).", "", "Overfitting watch, at the last point "
              "of each run:", ""]
    lines += md_table(["run", "passes over train", "mean train loss since previous point", "val loss",
                              "val − train"],
                             [[k, f"{p['epochs']:.2f}", p["train_loss"], p["val_loss"], f"{p['val_loss'] - p['train_loss']:+.3f}"]
                              for k, c in res["curves"].items() for p in c["points"][-1:] if p["train_loss"] is not None])
    lines += ["", f"Where the loss goes at the last point with a copy split (ablate.py's split: a target is a copy "
              f"when it and the {s['copy_k']} tokens before it occurred earlier in the window; {s['hit_seqs']} fixed "
              "validation windows, the ablation's; every point's split is in scaling.json and the figure):", ""]
    lines += md_table(["run", "tokens", "loss on copies", "loss on others", "copies − others", "by distance"],
                             [[k, f"{r['tokens']:,}", r["loss_copy"], r["loss_other"],
                               None if r["loss_copy"] is None else f"{r['loss_copy'] - r['loss_other']:+.3f}",
                               ", ".join(f"{repeats.bin_name(b)}: {b['loss']:.3f}" for b in r["by_distance"]
                                         if b["loss"] is not None)]
                              for k, c in res["curves"].items() for r in c["copy"][-1:]])
    scored = [(k, c) for k, c in res["curves"].items() if c.get("scores")]
    if scored:
        lines += ["", "The whole validation split (every byte once, copies split inside each window) at the last "
                  "scored point of the trunk (constant lr) and after its cooldown branch (lr linearly to 0):", ""]
        lines += md_table(["run", "reading", f"{unit}s", "all", "copies", "copies 128+ back", "others",
                                  "scored on"],
                                 [[k, name, f"{r['tokens']:,}", r["all"], r["copies"], r["copies_far"], r["other"],
                                   "; ".join(c.get("machines", []))]
                                  for k, c in scored for name, part in (("trunk", c), ("cooldown", c.get("cooldown")))
                                  if part and part.get("scores") for r in part["scores"][-1:]])
    lines += ["", "GPT against each SPEN reader at the same width (gap = loss_gpt − loss_spen; negative: GPT ahead):", ""]
    lines += md_table(["pair", "measured up to", "gap at the last point", f"crossover {unit}s",
                              f"slope of the gap per e-fold of {unit}s (fit on the last points)", "extrapolated zero"],
                             [[k, f"{x['up_to_tokens']:,}", f"{x['gap_last']:+.3f}",
                               f"{x['crossover_tokens']:,.0f}" if x["crossover_tokens"] else "none measured",
                               f"{x['slope_per_efold']:+.4f} ({x['fit_points']} points)",
                               f"~{x['tokens_at_zero']:.2g}" if x["tokens_at_zero"] else None]
                              for k, x in res["crossovers"].items()])
    lines += ["", "The extrapolation fits a straight line to the gap in log tokens over the last half of the points "
              "and reads where it reaches zero: a pointer to where to look, not a measurement.", "",
              "Prepared GPU runs (the same script and schedule; each run reads its own curve):", ""] + prepared
    save_text("\n".join(lines) + "\n", path)


def _longest(res):
    return max((c["points"] for c in res["curves"].values()), key=len, default=[])


def scaling_plot(res, path):
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5.5))
    widths = sorted({c["width"] for c in res["curves"].values()}, reverse=True)
    models = list(dict.fromkeys(c["model"] for c in res["curves"].values()))
    for c in res["curves"].values():
        pts = [p for p in c["points"] if p["tokens"] > 0]
        style = dict(color=f"C{models.index(c['model'])}", ls=["-", "--", ":", "-."][widths.index(c["width"]) % 4])
        ax.plot([p["tokens"] for p in pts], [p["val_loss"] for p in pts], marker="o", ms=3, **style,
                label=f"{c['model']} C={c['width']} ({c['params'] / 1e6:.2f}M)")
        cp = [r for r in c["copy"] if r["tokens"] > 0 and r["loss_copy"] is not None]
        if not cp:
            continue  # no target was a copy (a short --block_size): nothing to draw on the right
        bx.plot([r["tokens"] for r in cp], [r["loss_copy"] for r in cp], marker="o", ms=3, **style,
                label=f"{c['model']} C={c['width']}: copies")
        bx.plot([r["tokens"] for r in cp], [r["loss_other"] for r in cp], marker="x", ms=4, alpha=0.5, **style,
                label=f"{c['model']} C={c['width']}: others")
    for k, ls in (("bigram", "-."), ("trigram", ":")):
        if res["yardsticks"] and k in res["yardsticks"]:
            ax.axhline(res["yardsticks"][k], color="k", lw=1, ls=ls, label=f"{k} yardstick ({res['yardsticks'][k]:.2f})")
    for k, shade in zip(ngram.COMPRESSORS, ("0.35", "0.55", "0.75")):
        if k in (res["yardsticks"] or {}):
            ax.axhline(res["yardsticks"][k], color=shade, lw=1.2, ls=":", label=f"{k} on val ({res['yardsticks'][k]:.2f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    unit = "bytes" if res["settings"]["tokenizer"] == "bytes" else "tokens"
    ax.set_xlabel(f"training {unit} (constant lr after warmup)")
    ax.set_ylabel(f"validation loss (nats/{unit[:-1]})")
    ax.set_title(f"where GPT overtakes SPEN: {res['settings']['data']} ({res['settings']['tokenizer']})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if bx.get_legend_handles_labels()[0]:  # no copy split recorded (no target was a copy): no log axes to scale
        bx.set_xscale("log")
        bx.set_yscale("log")
    bx.set_xlabel(f"training {unit}")
    bx.set_ylabel(f"validation loss (nats/{unit[:-1]})")
    bx.set_title(f"targets an in-context copy (>= {res['settings']['copy_k']} tokens) predicts (o) vs the rest (x)")
    bx.grid(alpha=0.3, which="both")
    if bx.get_legend_handles_labels()[0]:  # no copy split recorded: no legend to draw
        bx.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


# ---- ablate.py's report: ablate.md, curves.png, hits.png, copy.png ---------------------------


def ablate_md(res, path):
    """ablate.md: every variant against linear and the yardsticks, history against state, where the loss goes."""
    s, y, vs = res["settings"], res["yardsticks"], res["variants"]
    tokens = next(iter(vs.values()))["tokens"]
    lines = [f"# LM ablation: trace readers, state vs history, on `{s['data']}`", "",
             f"`python ablate.py` settings: {s['n_layer']} blocks, width {s['n_embd']}, T = {s['block_size']}, "
             f"{s['max_iters']} steps x {s['batch_size']} x {s['block_size']} = {tokens:,} tokens per run, lr "
             f"{s['lr']:g} -> {s['min_lr']:g}, dropout {s['dropout']:g}, seeds 0..n-1 per row. Training time summed "
             f"over the runs (train.py's own clock): {sum(sum(v['seconds']) for v in vs.values()):.0f} s; wall time of "
             f"this invocation {res['seconds']:.0f} s (reused runs and rows of earlier invocations cost nothing in it).",
             "", f"Yardsticks of the `{s['data']}` validation split (counted on its train split, data.py): "
             f"**unigram {y['unigram']:.3f}**, **bigram {y['bigram']:.3f}**"
             + (f", **trigram {y['trigram']:.3f}**" if "trigram" in y else "") + " nats/token."
             + (f" General-purpose compressors on the same val bytes (NUL separators included; they see the whole "
                f"split as context): {ngram.compressor_line(y)}." if ngram.compressor_line(y) else ""), ""]
    rows = []
    for name, v in vs.items():
        c = v["vs_linear"] or dict(delta=None, two_se=None, verdict="reference")
        rows.append([name, v["family"], f"{v['params']:,}", f"{v['state_floats']:,}",
                     f"{v['val_loss_mean']:.3f}" + (f" ± {v['val_loss_std']:.3f}" if len(v["val_loss"]) > 1 else ""),
                     ", ".join(f"{x:.3f}" for x in v["val_loss"]),
                     f"{v['minus_bigram']:+.3f}", None if c["delta"] is None else f"{c['delta']:+.3f}", c["two_se"],
                     c["verdict"], float(np.mean(v["best_val"]))])
    lines += md_table(["variant", "reads", "params", "state floats / layer", "val loss mean ± std", "per seed",
                              "− bigram", "Δ vs linear", "2·SE", "verdict", "best val"], rows)
    lines += ["", "State floats / layer: the numbers per sequence and layer a model's step() holds after T tokens "
              "(the S x C traces, plus a reader's own state: the history readers' cache or sums, the write readers' "
              "D x D matrices; GPT: its key-value cache, 2 T C)."]
    if res["history_vs_state"]:
        lines += ["", "History reader against its state counterpart (same reader, lossless input):", ""]
        lines += md_table(["comparison", "Δ", "2·SE", "verdict"],
                                 [[k, f"{c['delta']:+.3f}", c["two_se"], c["verdict"]]
                                  for k, c in res["history_vs_state"].items()])
    ys = res["yardstick_split"]
    lines += ["", f"Where the loss goes: per-token loss on {s['hit_seqs']} fixed validation windows, split into "
              "recall hits (the bigram (w_(i-1), w_i) occurred earlier in the window: "
              f"{ys['bigram']['hit_fraction']:.1%} of tokens) and all others:", ""]
    rows = []
    for name, r in [*vs.items(), *((f"*{k} yardstick*", ys[k]) for k in repeats.YARDSTICKS if k in ys)]:
        all_ = r.get("loss_all", r["hit_fraction"] * r["loss_hit"] + (1 - r["hit_fraction"]) * r["loss_other"])
        rows.append([name, r["loss_hit"], r["loss_other"], all_, f"{r['loss_hit'] - r['loss_other']:+.3f}"])
    lines += md_table(["model", "loss on hits", "loss on others", "all tokens", "hits − others"], rows)
    if res.get("yardstick_copy") and all("copy" in v for v in vs.values()):
        lines += ablate_copy_table(res)
    lines += ["", "Validation loss in nats after the last step (train.py's fixed validation batches; best val: the "
              "lowest over the evaluations, mean over seeds); "
              "seed s reads the same training batches in every variant. Noise rule: " + res["noise_rule"] + "."]
    save_text("\n".join(lines) + "\n", path)


def ablate_copy_table(res):
    """ablate.md lines: the copy split per variant and yardstick, overall and by distance."""
    s, vs, yc = res["settings"], res["variants"], res["yardstick_copy"]
    bins = yc["bigram"]["by_distance"]
    lines = ["", f"The copy split: a target is a **copy** when it and the {s['copy_k']} tokens before it occurred "
             f"earlier in the window (an in-context copy of a >= {s['copy_k']}-token string predicts it): "
             f"{yc['bigram']['copy_fraction']:.1%} of the {s['hit_seqs']} x {s['block_size']} validation targets. "
             "By distance to the nearest earlier occurrence (share of all targets in brackets):", ""]
    rows = []
    for name, r in [*vs.items(), *((f"*{k} yardstick*", yc[k]) for k in repeats.YARDSTICKS if k in yc)]:
        c = r.get("copy", r)
        gap = None if c["loss_copy"] is None else f"{c['loss_copy'] - c['loss_other']:+.3f}"
        rows.append([name, c["loss_copy"], c["loss_other"], gap, *(b["loss"] for b in c["by_distance"])])
    return lines + md_table(["model", "loss on copies", "loss on others", "copies − others"]
                                   + [f"copy at {repeats.bin_name(b)} ({b['fraction']:.1%})" for b in bins], rows)


def ablate_copy(res, path):
    """Loss on copies (by distance) and on all other targets, per variant, beside the yardsticks."""
    plt = pyplot()
    rows = {n: v["copy"] for n, v in res["variants"].items()}
    rows.update({f"{k} (yardstick)": res["yardstick_copy"][k] for k in repeats.YARDSTICKS if k in res["yardstick_copy"]})
    bins = res["yardstick_copy"]["bigram"]["by_distance"]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    width = 0.8 / (len(bins) + 1)
    x = np.arange(len(rows))
    for i, b in enumerate(bins):
        ax.bar(x + (i - len(bins) / 2) * width, [r["by_distance"][i]["loss"] or 0 for r in rows.values()], width,
               color=plt.cm.viridis(i / len(bins)), label=f"copy, distance {repeats.bin_name(b)} ({b['fraction']:.1%})")
    ax.bar(x + len(bins) / 2 * width, [r["loss_other"] for r in rows.values()], width, color="0.6",
           label=f"not a copy ({1 - res['yardstick_copy']['bigram']['copy_fraction']:.1%})")
    ax.set_xticks(x, list(rows), rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("per-token validation loss (nats)")
    ax.set_title(f"where the loss goes: targets an in-context copy of >= {res['settings']['copy_k']} tokens predicts, "
                 "by distance, and the rest")
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def ablate_curves(res, path):
    """curves.png: validation loss against tokens, every seed of every variant, beside the yardsticks."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, v) in enumerate(res["variants"].items()):
        for s, (xs, ys) in enumerate(v.get("curves", [])):  # rows from before curves were kept have none
            ax.plot(xs, ys, color=f"C{i}", ls="--" if "history" in v["family"] else "-",
                    alpha=0.9 if s == 0 else 0.4, label=name if s == 0 else None)
    y = res["yardsticks"]
    for k, ls in (("unigram", ":"), ("bigram", "-."), ("trigram", "--")):
        if k in y:
            ax.axhline(y[k], color="k", ls=ls, lw=1.2, label=f"{k} yardstick ({y[k]:.2f})")
    for k, shade in zip(ngram.COMPRESSORS, ("0.35", "0.55", "0.75")):
        if k in y:
            ax.axhline(y[k], color=shade, ls=":", lw=1.2, label=f"{k} on val ({y[k]:.2f})")
    ax.set_ylim(min(y.get("trigram", y["bigram"]), *(v["val_loss_mean"] for v in res["variants"].values())) - 0.3,
                y["unigram"] + 1.5)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats)")
    ax.set_title(f"validation loss on {res['settings']['data']} (dashed: history readers; faint: other seeds)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def ablate_hits(res, path):
    """hits.png: the loss on recall hits and on all other tokens, per variant and yardstick."""
    plt = pyplot()
    ys = res["yardstick_split"]
    rows = {**res["variants"], **{f"{k} (yardstick)": ys[k] for k in repeats.YARDSTICKS if k in ys}}
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.bar(x - 0.2, [r["loss_hit"] for r in rows.values()], 0.4, label="recall hits (in-context copy possible)")
    ax.bar(x + 0.2, [r["loss_other"] for r in rows.values()], 0.4, label="all other tokens")
    ax.set_xticks(x, list(rows), rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("per-token validation loss (nats)")
    hf = res["yardstick_split"]["bigram"]["hit_fraction"]
    ax.set_title(f"where the loss goes: {hf:.0%} of validation tokens are recall hits")
    ax.set_ylim(0, 1.2 * max(r["loss_other"] for r in rows.values()))
    ax.legend(fontsize=8, ncol=2, loc="upper center")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)

"""scaling.py's report: scaling.md (the curves, the overfitting watch, the copy splits, the whole
split, where GPT overtakes) and scaling.png (loss against training tokens; the copy split).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN". Run: nothing to
run; scaling.py writes both from the record it keeps (scaling.json), results/scaling holds one.
"""

from plumbing import ngram, repeats, tables


def write_md(res, path, prepared):
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
    lines += tables.md_table(["run", "params", "state floats / layer", "train s", *points],
                             [[k, f"{c['params']:,}", f"{c['state_floats']:,}", round(c["train_seconds"]),
                               *(p["val_loss"] for p in c["points"]), *[None] * (len(points) - len(c["points"]))]
                              for k, c in res["curves"].items()])
    lines += ["", f"Validation loss (nats/{unit}) after the number of training {unit}s in the header "
              "(train.py's fixed validation batches). State floats / layer: the numbers per sequence and layer a "
              "model's step() holds after T tokens (ablate.py's column).", "", "Overfitting watch, at the last point "
              "of each run:", ""]
    lines += tables.md_table(["run", "passes over train", "mean train loss since previous point", "val loss",
                              "val − train"],
                             [[k, f"{p['epochs']:.2f}", p["train_loss"], p["val_loss"], f"{p['val_loss'] - p['train_loss']:+.3f}"]
                              for k, c in res["curves"].items() for p in c["points"][-1:] if p["train_loss"] is not None])
    lines += ["", f"Where the loss goes at the last point with a copy split (ablate.py's split: a target is a copy "
              f"when it and the {s['copy_k']} tokens before it occurred earlier in the window; {s['hit_seqs']} fixed "
              "validation windows, the ablation's; every point's split is in scaling.json and the figure):", ""]
    lines += tables.md_table(["run", "tokens", "loss on copies", "loss on others", "copies − others", "by distance"],
                             [[k, f"{r['tokens']:,}", r["loss_copy"], r["loss_other"],
                               None if r["loss_copy"] is None else f"{r['loss_copy'] - r['loss_other']:+.3f}",
                               ", ".join(f"{repeats.bin_name(b)}: {b['loss']:.3f}" for b in r["by_distance"]
                                         if b["loss"] is not None)]
                              for k, c in res["curves"].items() for r in c["copy"][-1:]])
    scored = [(k, c) for k, c in res["curves"].items() if c.get("scores")]
    if scored:
        lines += ["", "The whole validation split (every byte once, copies split inside each window) at the last "
                  "scored point of the trunk (constant lr) and after its cooldown branch (lr linearly to 0):", ""]
        lines += tables.md_table(["run", "reading", f"{unit}s", "all", "copies", "copies 128+ back", "others",
                                  "scored on"],
                                 [[k, name, f"{r['tokens']:,}", r["all"], r["copies"], r["copies_far"], r["other"],
                                   "; ".join(c.get("machines", []))]
                                  for k, c in scored for name, part in (("trunk", c), ("cooldown", c.get("cooldown")))
                                  if part and part.get("scores") for r in part["scores"][-1:]])
    lines += ["", "GPT against each SPEN reader at the same width (gap = loss_gpt − loss_spen; negative: GPT ahead):", ""]
    lines += tables.md_table(["pair", "measured up to", "gap at the last point", f"crossover {unit}s",
                              f"slope of the gap per e-fold of {unit}s (fit on the last points)", "extrapolated zero"],
                             [[k, f"{x['up_to_tokens']:,}", f"{x['gap_last']:+.3f}",
                               f"{x['crossover_tokens']:,.0f}" if x["crossover_tokens"] else "none measured",
                               f"{x['slope_per_efold']:+.4f} ({x['fit_points']} points)",
                               f"~{x['tokens_at_zero']:.2g}" if x["tokens_at_zero"] else None]
                              for k, x in res["crossovers"].items()])
    lines += ["", "The extrapolation fits a straight line to the gap in log tokens over the last half of the points "
              "and reads where it reaches zero: a pointer to where to look, not a measurement.", "",
              "Prepared GPU runs (the same script and schedule; each run reads its own curve):", ""] + prepared
    tables.save_text("\n".join(lines) + "\n", path)


def _longest(res):
    return max((c["points"] for c in res["curves"].values()), key=len, default=[])


def plot(res, path):
    plt = tables.pyplot()
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
    tables.save_figure(fig, path)
    plt.close(fig)

"""The files ablate.py writes from its ablate.json dict (ablate.summarize): ablate.md, the table of
every variant's validation loss against `linear` and the yardsticks, the history readers against
their state counterparts, and where the loss goes (recall hits, copies by distance); curves.png
(validation loss against tokens), hits.png (the hit split) and copy.png (the copy split). What the
numbers mean, and the noise rule behind each verdict, is in ablate.py's docstring.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": its predictor
swap (linear map, linear attention, softmax attention over the same EMA traces).

Run: nothing to run; `python ablate.py` writes these (tests/test_ablate.py checks them), and
results/ablate/ and results/ablate_bytes/ hold the committed ones.
"""
import numpy as np

from plumbing import ngram, repeats, tables


def write_md(res, path):
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
    lines += tables.md_table(["variant", "reads", "params", "state floats / layer", "val loss mean ± std", "per seed",
                              "− bigram", "Δ vs linear", "2·SE", "verdict", "best val"], rows)
    lines += ["", "State floats / layer: the numbers per sequence and layer a model's step() holds after T tokens "
              "(the S x C traces, plus a reader's own state: the history readers' cache or sums, the write readers' "
              "D x D matrices; GPT: its key-value cache, 2 T C)."]
    if res["history_vs_state"]:
        lines += ["", "History reader against its state counterpart (same reader, lossless input):", ""]
        lines += tables.md_table(["comparison", "Δ", "2·SE", "verdict"],
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
    lines += tables.md_table(["model", "loss on hits", "loss on others", "all tokens", "hits − others"], rows)
    if res.get("yardstick_copy") and all("copy" in v for v in vs.values()):
        lines += copy_table(res)
    lines += ["", "Validation loss in nats after the last step (train.py's fixed validation batches; best val: the "
              "lowest over the evaluations, mean over seeds); "
              "seed s reads the same training batches in every variant. Noise rule: " + res["noise_rule"] + "."]
    tables.save_text("\n".join(lines) + "\n", path)


def copy_table(res):
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
    return lines + tables.md_table(["model", "loss on copies", "loss on others", "copies − others"]
                                   + [f"copy at {repeats.bin_name(b)} ({b['fraction']:.1%})" for b in bins], rows)


def plot_copy(res, path):
    """Loss on copies (by distance) and on all other targets, per variant, beside the yardsticks."""
    plt = tables.pyplot()
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
    tables.save_figure(fig, path)
    plt.close(fig)


def plot_curves(res, path):
    plt = tables.pyplot()
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
    tables.save_figure(fig, path)
    plt.close(fig)


def plot_hits(res, path):
    plt = tables.pyplot()
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
    tables.save_figure(fig, path)
    plt.close(fig)

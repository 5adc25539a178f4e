"""The files recall.py writes from its recall.json dict (recall.summarize, or recall.read_report of
a committed one): recall.md, its tables (accuracy per variant and pair count N, the binding, the
plateau exits, accuracy by key-to-query distance), and recall.png, the same as curves. What the
numbers mean is in recall.py's docstring.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": its claim that
no reader of EMA traces recovers a token's identity, tested on associative recall (MQAR).
Glossary: N key-value pairs, T tokens per sequence, M value ids (chance 1/M).

Run: nothing to run; `python recall.py` writes these (tests/test_recall.py re-renders a committed
report), and results/recall/recall.md is the committed one.
"""
import os
import pathlib

from plumbing import tables

NOTES = "## Notes"  # recall.md from this heading on is hand-written and kept when the table is rewritten


def write_md(res, path, val_seed, test_seed):
    """recall.md: accuracy per variant and pair count, the binding, the plateau exits and accuracy by
    distance (val_seed, test_seed: the data seeds of the validation and test sequences, named in
    it); a hand-written part from NOTES on, in the file already there, is kept."""
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
    lines += tables.md_table(
        ["variant", "params", "state floats / layer", "capacity (pairs)"] + [f"N={N} (1/N={1 / N:.2f})" for N in pairs],
        ([v + (f" (seed {', '.join(map(str, r['diverged_seeds']))} diverged: not averaged)"
               if r.get("diverged_seeds") else ""), f"{r['params']:,}", f"{r['state_floats']:,}",
          f"{r['capacity_pairs']:.1f}"]
         + [f"{r['acc'][str(N)]:.3f} ± {r['acc_std'][str(N)]:.3f}" for N in pairs] for v, r in vs.items()))
    lines += ["", "Binding, (accuracy - 1/N) / (1 - 1/N): 0 is the 1/N plateau (a model that knows which values "
              "occurred, not which key each belongs to), 1 perfect recall.", ""]
    lines += tables.md_table(["variant"] + [f"N={N}" for N in pairs],
                             ([v] + [f"{r['binding'][str(N)]:+.3f}" for N in pairs] for v, r in vs.items()))
    lines += ["", f"Plateau exit: the first validation evaluation (every {s['eval_every']} steps, {s['val_seqs']} "
              "sequences per N, data seed " f"{val_seed}) whose accuracy at N pairs is above (1/N + 1) / 2; "
              "'-' = never within the budget; one entry per seed.", ""]
    lines += tables.md_table(["variant"] + [f"N={N} (> {res['threshold'][str(N)]:.3f})" for N in pairs],
                             ([v] + [", ".join("-" if x is None else f"{x:,}" for x in r["exit_step"][str(N)])
                                     for N in pairs] for v, r in vs.items()))
    bins = sorted({int(d) for r in vs.values() for d in r["acc_distance"]})
    lines += ["", "Accuracy by key-to-query distance d (all pair counts pooled; bin = [lo, 2 lo)):", ""]
    lines += tables.md_table(["variant"] + [f"d>={d}" for d in bins],
                             ([v] + [r["acc_distance"].get(str(d), float("nan")) for d in bins] for v, r in vs.items()))
    lines += tables.diverged_lines(res)
    old = pathlib.Path(path).read_text(encoding="utf-8") if os.path.exists(path) else ""
    notes = old[old.index(NOTES):] if NOTES in old else ""
    tables.save_text("\n".join(lines) + "\n" + ("\n" + notes if notes else ""), path)


MARKERS = "os^DvP*Xp"  # one per variant: lines that coincide (several at 1.000) stay apart


def plot(res, path, dashed):
    """recall.png: accuracy by N, by distance, and the validation curve at N = 8 (seed 0). Each
    variant has its own marker, a small sideways offset and a line thinner than the one before,
    so a line at the same accuracy as another (gpt and softmax_history at 1.000) shows around it.
    dashed: the variants whose state has a fixed size whatever T (recall.FIXED), drawn dashed."""
    plt = tables.pyplot()
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
    tables.save_figure(fig, path)
    plt.close(fig)

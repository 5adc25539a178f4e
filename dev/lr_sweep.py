"""The learning-rate sweep of the byte ablation: every model's seed-0 loss at each peak rate.

The ablation (results/ablate_bytes/ablate.json) trains every variant at one shared rate, 2e-3
(cosine to a tenth of it). This table asks whether that rate favours some models: seed 0 of each
model at every rate found, everything else equal (the same data order, steps and cosine shape),
from one ablate.py invocation per rate, e.g. 4e-3 and 8e-3:
    python ablate.py --preset cpu_bytes --models gpt linear ema_kv delta --seeds 1 --lr 4e-3 --min_lr 4e-4 \
        --out_dir results/ablate_bytes/lr_4e-3
and the ablation's own seed-0 runs for 2e-3. Any results/ablate_bytes/lr_*/ablate.json joins the
table (one made with other settings than the ablation's is refused). Run:
    python -m dev.lr_sweep --out_dir results/ablate_bytes     # the committed table
Reads --results (default results/ablate_bytes); writes lr_sweep.json, lr_sweep.md and lr_sweep.png
under --out_dir (default out/lr_sweep).
"""

import argparse
import glob
import json
import os
import sys

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line
cli.exit_on_ctrl_c(__name__, "dev/lr_sweep.py")  # until main_guard; the imports below take seconds
from plumbing import checkpoint, tables

FREE = ("out_dir", "models", "variants", "seeds", "lr", "min_lr", "workers", "content", "content_only", "probe_json",
        "device")  # settings a rate's ablate.json may differ in (variants: --models's name before)


N = tables.NUMBER
SHAPE = dict(settings=dict(lr=N, max_iters=int, batch_size=int, block_size=int, n_layer=int, n_embd=int),
             variants=tables.Each(dict(val_loss=[N])))  # what the table reads


def read(path):
    """An ablate.json, or one line (exit 1) naming it when it is unreadable or of another shape."""
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"lr_sweep.py: {path} is not readable JSON ({' '.join(str(e).split())}); rerun the ablate.py command "
                 "in its folder's ablate.md, or move it away")
    wrong = tables.shape_error(res, SHAPE, "the file")
    if wrong or not all(v["val_loss"] for v in res["variants"].values()):
        sys.exit(f"lr_sweep.py: {path} is not an ablate.json this table can read ({wrong or 'a row with no seed'}); "
                 "rerun the ablate.py command in its folder's ablate.md, or move it away")
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default="results/ablate_bytes", help="the ablation's folder: its ablate.json and lr_*/")
    p.add_argument("--out_dir", default="out/lr_sweep", help="where lr_sweep.json, .md and .png go")
    a = p.parse_args(argv)
    checkpoint.make_out_dir(a.out_dir)
    found = {}  # lr -> {model: dict(val, copy, other)}
    base = None
    for path in [os.path.join(a.results, "ablate.json"),
                 *sorted(glob.glob(os.path.join(a.results, "lr_*", "ablate.json")))]:
        res = read(path)
        s = {k: v for k, v in res["settings"].items() if k not in FREE}
        if base is None:
            base = s
        if s != base:
            sys.exit(f"lr_sweep.py: {path} differs from the ablation in more than the rate: "
                     f"{ {k: v for k, v in s.items() if base.get(k) != v} }")
        lr = res["settings"]["lr"]
        for name, v in res["variants"].items():
            c = v.get("copy", {})
            found.setdefault(lr, {})[name] = dict(val=v["val_loss"][0], copy=(c.get("loss_copy_per_seed") or [None])[0],
                                                  other=(c.get("loss_other_per_seed") or [None])[0])
    lrs = sorted(found)
    models = [m for m in ("gpt", "linear", "ema_kv", "delta") if any(m in found[lr] for lr in lrs)]
    ran = {m: [lr for lr in lrs if m in found[lr]] for m in models}  # the rates each model ran at
    best = {m: min(ran[m], key=lambda lr: found[lr][m]["val"]) for m in models}
    cell = lambda m, lr: (None if m not in found[lr] else f"**{found[lr][m]['val']:.3f}**" if lr == best[m]
                          else found[lr][m]["val"])
    rows = [[m, *(cell(m, lr) for lr in lrs), f"{best[m]:g}",
             "edge: try beyond" if best[m] in (ran[m][0], ran[m][-1]) else "inside the sweep"] for m in models]
    lines = ["# Learning-rate sweep of the byte ablation (seed 0)", "",
             f"Validation loss (nats/byte) after {base['max_iters']} steps of {base['batch_size']} x {base['block_size']} "
             f"bytes, {base['n_layer']} x {base['n_embd']}, cosine from the peak rate to a tenth of it; the same data order "
             "for every run. Bold: the model's best rate; a blank: not run at that rate. Command: "
             "`python -m dev.lr_sweep --out_dir results/ablate_bytes` (its docstring names the ablate.py runs).", ""]
    lines += tables.md_table(["model", *(f"lr {lr:g}" for lr in lrs), "best", "where"], rows)
    lines += ["", "On copies and the other bytes at each rate (seed 0):", ""]
    lines += tables.md_table(["model", *(f"copies / others at {lr:g}" for lr in lrs)],
                             [[m, *(f"{found[lr][m]['copy']:.3f} / {found[lr][m]['other']:.3f}"
                                    if m in found[lr] and found[lr][m]["copy"] is not None else None for lr in lrs)]
                              for m in models])
    res = dict(lrs=lrs, models=models, best=best, loss={f"{lr:g}": {m: found[lr][m] for m in models if m in found[lr]}
                                                        for lr in lrs})
    checkpoint.atomic_json(res, os.path.join(a.out_dir, "lr_sweep.json"))
    tables.save_text("\n".join(lines) + "\n", os.path.join(a.out_dir, "lr_sweep.md"))
    plt = tables.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in models:
        ax.plot(ran[m], [found[lr][m]["val"] for lr in ran[m]], marker="o", label=m)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("validation loss after the run (nats/byte)")
    ax.set_title("byte ablation, seed 0: loss against the peak rate")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tables.save_figure(fig, os.path.join(a.out_dir, "lr_sweep.png"))
    print("\n".join(lines))


if __name__ == "__main__":
    cli.main_guard(main, prog="dev/lr_sweep.py")  # a bad --out_dir, a Ctrl-C: one line

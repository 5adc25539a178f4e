"""The map on text: what brings the copies back, and at what state (results/map).

Reads the byte curves of scaling.py at the committed settings (width 128, 4 blocks, T = 256,
constant lr 2e-3, 10M bytes, the copy split at every point): the references in
results/scaling/scaling.json (gpt, linear, softmax_history, ema_kv, delta) and one scaling.json
per candidate under results/map/<model>/ (a second seed under results/map/seed1/<model>/). At each
curve's last point it tables the loss on all copies, on copies 128+ bytes back and on the other
bytes, against the state floats per layer at T = 256 (model.state_floats: traces, a write
reader's M, a convolution's cache, a cache of past positions; a hybrid's blocks averaged), and
draws copy loss against state. A curve that has not reached the last point is shown at the
point it reached, marked.

Run (from the repository root)
    python -m dev.map                           # -> out/map/map.md, map.json, map.png
    python -m dev.map --out_dir results/map     # refresh the committed map
The curves themselves: `python scaling.py --models NAME --widths 128 --out_dir results/map/NAME`
(one invocation per model; `--seed 1 --out_dir results/map/seed1/NAME` for the second seed).
"""

import argparse
import glob
import json
import os

from plumbing import checkpoint, cli, registry, tables

REFERENCE = "results/scaling/scaling.json"
SAME = ("n_layer", "data", "tokenizer", "block_size", "batch_size", "grad_accum", "max_tokens", "first_tokens",
        "points", "eval_iters", "hit_seqs", "copy_k", "lr", "warmup_iters")  # what every curve must share
REFS = ("gpt", "softmax_history", "linear", "ema_kv", "delta")  # from the reference record, width 128
BUDGET = 18_000  # a quarter of GPT's cache per layer at T = 256 (2 T C = 65,536): the bound set for a bounded reader


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


def row(curve, seed, state_floats, step=None):
    """The map's numbers at a curve's last point, or at `step` (its copy split at the same step)."""
    last = curve["points"][-1] if step is None else next(p for p in curve["points"] if p["step"] == step)
    split = {c["step"]: c for c in curve["copy"]}.get(last["step"])
    far = next((d["loss"] for d in split["by_distance"] if d["lo"] == 128), None) if split else None
    return dict(model=curve["model"], seed=seed, params=curve["params"], state_floats=state_floats,
                bounded=None, tokens=last["tokens"], val_loss=last["val_loss"],
                loss_copy=split and split["loss_copy"], loss_copy_far=far, loss_other=split and split["loss_other"])


def collect(root="."):
    """Every curve of the map, reference first: a list of rows (dicts), and for a curve short of the
    last point the references at its step (every curve stops at the same log-spaced steps)."""
    ref_settings, ref = load(os.path.join(root, REFERENCE))
    out = [row(ref[f"{m}_c128"], ref_settings["seed"], ref[f"{m}_c128"]["state_floats"]) for m in REFS]
    seed1 = os.path.join(root, "results/map/seed1/gpt/scaling.json")  # GPT's second seed: a copy split at every point
    gpt1 = load(seed1)[1]["gpt_c128"] if os.path.exists(seed1) else None
    at_step = lambda step: [row(ref[f"{m}_c128"], ref_settings["seed"], ref[f"{m}_c128"]["state_floats"], step)
                            for m in ("gpt", "ema_kv", "delta")] + ([row(gpt1, 1, None, step)] if gpt1 else [])
    paths = sorted(glob.glob(os.path.join(root, "results/map/*/scaling.json"))) + \
        sorted(glob.glob(os.path.join(root, "results/map/seed*/*/scaling.json")))
    for path in paths:
        settings, curves = load(path)
        differ = [k for k in SAME if settings.get(k) != ref_settings.get(k)]
        cli.require(not differ, "{} has other settings than {} ({}): not on the same map", path, REFERENCE,
                    ", ".join(differ))
        for c in curves.values():
            if c["width"] == 128 and c["points"]:
                out.append(row(c, settings["seed"], c.get("state_floats")))
                out[-1]["refs"] = at_step(c["points"][-1]["step"]) if c["points"][-1]["tokens"] < 0.99 * \
                    ref_settings["max_tokens"] else None
    for r in out:  # bounded: the state at T = 256 is the state at any T (a cache that grows is not)
        r["bounded"] = bounded(r["model"])
    return out, ref_settings


def bounded(name):
    """Whether the named model's state per layer stays the same as T grows (recall.state_kind)."""
    import recall
    return recall.state_kind(name) != "grows"


def write_md(rows, settings, path):
    done = settings["max_tokens"]
    lines = ["# The map on text: copy loss against state (10M bytes, width 128)", "",
             "Written by `python -m dev.map --out_dir results/map` from results/scaling/scaling.json and "
             "results/map/*/scaling.json; see README.md beside this file for what it means.", "",
             f"Loss in nats per byte at the last point of each curve (a copy: the byte and the 8 before it occurred "
             f"earlier in the window); state: floats per sequence and layer at T = 256 (budget for a bounded "
             f"reader: {BUDGET:,}, a quarter of GPT's cache). A curve short of {done / 1e6:.0f}M bytes is marked *.", ""]
    order = sorted(rows, key=lambda r: (r["loss_copy"] is None, r["loss_copy"] or 0))
    lines += tables.md_table(
        ["model", "seed", "bounded", "state floats / layer", "params", "bytes", "all", "copies", "copies 128+ back",
         "other bytes"],
        [[f"`{r['model']}`", r["seed"], "yes" if r["bounded"] else "no", f"{r['state_floats']:,}", f"{r['params']:,}",
          f"{r['tokens'] / 1e6:.1f}M" + ("" if r["tokens"] >= 0.99 * done else " *"), r["val_loss"], r["loss_copy"],
          r["loss_copy_far"], r["loss_other"]] for r in order])
    seeds = {}  # model -> its rows at the last point, one per seed
    for r in order:
        if r["tokens"] >= 0.99 * done and r["loss_copy"] is not None:
            seeds.setdefault(r["model"], []).append(r)
    paired = {m: rs for m, rs in seeds.items() if len({r["seed"] for r in rs}) > 1}
    if paired:
        keys = ("val_loss", "loss_copy", "loss_copy_far", "loss_other")
        lines += ["", "The models with more than one seed: the mean over the seeds, and the spread (largest − "
                  "smallest) in brackets. GPT's spread on copies is the yardstick for every gap above.", ""]
        lines += tables.md_table(
            ["model", "seeds", "all", "copies", "copies 128+ back", "other bytes"],
            [[f"`{m}`", len(rs)] + [f"{tables.mean_std([r[k] for r in rs])[0]:.3f} "
                                    f"({max(r[k] for r in rs) - min(r[k] for r in rs):.3f})" for k in keys]
             for m, rs in sorted(paired.items(), key=lambda kv: tables.mean_std([r["loss_copy"] for r in kv[1]])[0])])
    short = [r for r in order if r.get("refs")]
    if short:
        lines += ["", "The curves marked * beside the references at the same step (every curve evaluates at the "
                  "same log-spaced steps): overall / copies / other bytes.", ""]
        lines += tables.md_table(
            ["model", "bytes", "the model", "`gpt`", "`ema_kv`", "`delta`", "`gpt`, seed 1"][:3 + len(short[0]["refs"])],
            [[f"`{r['model']}`", f"{r['tokens'] / 1e6:.1f}M"] +
             [" / ".join(tables.cell(x[k]) for k in ("val_loss", "loss_copy", "loss_other")) for x in [r] + r["refs"]]
             for r in short])
    tables.save_text("\n".join(lines) + "\n", path)


def plot(rows, path, done):
    """Copy loss and other-bytes loss against state; a curve short of `done` bytes is labelled with
    the bytes it reached, one under a fifth of them is left out (still on its plateau)."""
    rows = [r for r in rows if r["tokens"] >= 0.2 * done]
    plt = tables.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), sharex=True)
    colors = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors  # 18 strong colours: one per model
    models = list(dict.fromkeys(r["model"] for r in rows))
    gpts = [r for r in rows if r["model"] == "gpt"]
    for ax, key, title in ((axes[0], "loss_copy", "copies (all distances)"), (axes[1], "loss_other", "other bytes")):
        for r in rows:
            if r[key] is None:
                continue
            c = colors[models.index(r["model"]) % len(colors)]
            ax.scatter(r["state_floats"], r[key], color=c, marker="o" if r["bounded"] else "s",
                       facecolors="none" if r["seed"] else c, s=50, zorder=3)
        lo, hi = min(r[key] for r in gpts), max(r[key] for r in gpts)
        ax.axhspan(lo, hi, color="0.5", alpha=0.15, lw=0, label=f"gpt, {len(gpts)} seed(s) (its cache: 65,536 floats)")
        ax.axhline(lo, color="0.4", ls="--", lw=0.6)
        ax.axvline(BUDGET, color="0.7", ls=":", lw=1, label=f"bounded budget ({BUDGET:,})")
        ax.set(xscale="log", xlabel="state floats per layer at T = 256", ylabel="nats per byte", title=title)
        ax.legend(fontsize=7, loc="lower left")
    short = {r["model"]: f" ({r['tokens'] / 1e6:.1f}M bytes)" for r in rows if r["tokens"] < 0.99 * done}
    fig.legend([plt.Line2D([], [], color=colors[i % len(colors)], marker="o", ls="") for i in range(len(models))],
               [m + short.get(m, "") for m in models], fontsize=7, loc="center right")
    fig.suptitle("The map on text at 10M bytes (width 128; circles bounded, squares growing; hollow: seed 1)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.86, 1))  # the right edge for the models' legend
    tables.save_figure(fig, path)


def main(out_dir):
    checkpoint.check_out_dir(out_dir)
    rows, settings = collect()
    checkpoint.make_out_dir(out_dir)
    tables.save_text(json.dumps(dict(command=f"python -m dev.map --out_dir {out_dir}", rows=rows), indent=1) + "\n",
                     os.path.join(out_dir, "map.json"))
    write_md(rows, settings, os.path.join(out_dir, "map.md"))
    plot(rows, os.path.join(out_dir, "map.png"), settings["max_tokens"])
    print(f"wrote {out_dir}/map.md, map.json, map.png ({len(rows)} curves)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default="out/map", help="folder for map.md, map.json, map.png")
    cli.main_guard(lambda: main(p.parse_args().out_dir), prog="dev/map.py")

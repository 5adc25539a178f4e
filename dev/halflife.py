"""How long each gated head keeps a write, at init and after training: H1's mechanism
(results/map/PLAN.md), seen in the heads and not only in the loss.

A gated delta head decays its state by alpha_t = exp(g_t) a token, g_t = -exp(A_log)
softplus(W_a u_t + dt_bias) (writes.py, GatedDeltaState). Its half-life in tokens is
ln 2 / (-g): at init read without the input term (W_a u = 0: ln 2 / (A softplus(dt_bias)), the
head's rate as its initialisation sets it), after training averaged over the validation split
(ln 2 / mean_t(-g_t), the decay of the mean log-decay, over WINDOWS windows of T bytes). A copy 128
or more bytes back needs a head whose half-life is past 128. For every seed folder of a gated arm
under --seeds (OUT/<arm>_s<seed>, written by `python -m dev.seeds`), the init is rebuilt from the
seed (train.py's seeded build: the same draws) and the trained heads are read from the cooldown
branch's last checkpoint (the map's readout point), of finished curves only (dev.seeds.finished: a
curve still training is said on stderr and left out, as the map leaves it out of n). Each seed's
median, every seed's heads pooled, and the arm's init rule itself (RULE_HEADS heads drawn from its
reader's gate_init: what a seed's few heads are a sample of). The checkpoints are in the campaign's
own folders (git holds the records, not runs/): point --seeds there.

Run (from the repository root)
    python -m dev.halflife --seeds results/map/screen --out_dir results/map/screen   # -> halflife.json, .png
    python -m dev.halflife --seeds WORKTREE/results/map/screen --out_dir results/map/screen  # the campaign's worktree
"""

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "dev.halflife")

import torch

from dev import seeds
from plumbing import checkpoint, corpus, tables

WINDOWS = 32  # validation windows the trained gates are averaged over (32 x 256 bytes)
FAR = 128  # bytes back: a copy the map counts as far
RULE_HEADS = 100_000  # heads drawn from an arm's init rule for its distribution (rule_lives)


def heads(model):
    """The gated readers of a model, in block order (blocks whose reader has a learned decay)."""
    return [b.pred for b in getattr(model, "blocks", ()) if hasattr(b.pred, "log_decay")]  # GPT: none


def lives(A_log, dt_bias):
    """ln 2 / (A softplus(dt_bias)) per head: the half-life a gate's parameters give without the input."""
    return [math.log(2) / x for x in (A_log.exp() * torch.nn.functional.softplus(dt_bias)).tolist()]


def init_lives(model):
    """Per head of the model, in block order, its half-life at init (lives)."""
    return [x for p in heads(model) for x in lives(p.A_log, p.dt_bias)]


def rule_lives(reader):
    """The half-lives of RULE_HEADS heads drawn (seed 0) from a gated reader's init rule (its gate_init):
    the distribution each seed's few heads come from."""
    torch.manual_seed(0)
    return lives(*reader.gate_init(RULE_HEADS))


@torch.no_grad()
def trained_lives(model, tokens, T):
    """Per head, ln 2 / mean_t(-g_t) over WINDOWS contiguous windows of T tokens of `tokens`."""
    x = torch.as_tensor(tokens[:WINDOWS * T].astype("int64")).view(WINDOWS, T)
    seen = {}

    def keep(mod, args, out):  # the reader's input u (its first argument): its gates on these windows
        seen[id(mod)] = mod.log_decay(args[0])  # (B, H, T)

    hooks = [p.register_forward_hook(keep) for p in heads(model)]
    try:
        model(x)
    finally:
        for h in hooks:
            h.remove()
    return [math.log(2) / x for p in heads(model) for x in (-seen[id(p)]).mean((0, 2)).tolist()]  # (H,) per block


def arm_seed(name):
    """A seed folder's name (dev.seeds.folder's) -> (arm, seed): delta_lr0.004_s2 -> ('delta@0.004', 2);
    None for another name."""
    m = re.fullmatch(r"(.+?)(?:_lr([0-9.e+-]+))?_s(\d+)", name)
    return m and (m[1] if m[2] is None else f"{m[1]}@{float(m[2]):g}", int(m[3]))


def read_folder(folder, val, T):
    """{'init': [...], 'trained': [...], 'point': 'cooldown', 'step', 'reader': its gated reader's class} of one
    finished seed folder's heads, or None when it holds no gated model or no cooldown checkpoint."""
    ckpts = sorted(glob.glob(os.path.join(folder, "runs", "*_cool*", "ckpt_last.pt")))
    if not ckpts:
        return None
    model, ckpt = checkpoint.load_model(ckpts[-1])
    if not heads(model):
        return None
    Config, Model = checkpoint.MODELS[ckpt["kind"]]
    torch.manual_seed(ckpt["train"]["seed"])  # train.py's seeded build: the init this run started from
    init = Model(Config(**ckpt["config"]))
    return dict(init=init_lives(init), trained=trained_lives(model, val, T), point="cooldown", step=ckpt["step"],
                reader=type(heads(model)[0]))


def summary(lives):
    """An arm's heads: the median half-life (of an even count, the mean of the middle two), the share past FAR."""
    return dict(median=statistics.median(lives), past_far=sum(x > FAR for x in lives) / len(lives), heads=len(lives))


def plot(res, path):
    """Each arm's heads: log10 half-life at init and after training, every seed, a line at FAR."""
    plt = tables.pyplot()
    arms = list(res)
    fig, ax = plt.subplots(figsize=(2.6 + 2.2 * len(arms), 4.2))
    for i, arm in enumerate(arms):
        for j, when in enumerate(("init", "trained")):
            ys = [math.log10(x) for r in res[arm]["seeds"].values() for x in r[when]]
            xs = [2 * i + j + 0.25 * (k % 5 - 2) / 2 for k in range(len(ys))]
            ax.scatter(xs, ys, s=14, alpha=0.6, color="C0" if when == "init" else "C1")
    ax.axhline(math.log10(FAR), color="0.5", ls=":", lw=1)
    ax.set_xticks([2 * i + j for i in range(len(arms)) for j in (0, 1)],
                  [f"{a}\n{w}" for a in arms for w in ("init", "trained")], fontsize=7)
    ax.set(ylabel="log10 half-life (tokens)", title=f"Gated heads' half-lives (dotted: {FAR} bytes)")
    fig.tight_layout()
    tables.save_figure(fig, path)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="results/map/screen", help="the seed folders (python -m dev.seeds --out_dir)")
    p.add_argument("--out_dir", default="out/halflife", help="folder for halflife.json and halflife.png")
    a = p.parse_args(argv)
    checkpoint.check_out_dir(a.out_dir)
    cli.require(os.path.isdir(a.seeds), "--seeds {} is not a folder of seed runs (python -m dev.seeds --out_dir)", a.seeds)
    val, res, readers = None, {}, {}
    for folder in sorted(glob.glob(os.path.join(a.seeds, "*_s*"))):
        named = arm_seed(os.path.basename(folder))
        if not os.path.isdir(folder) or not named:
            continue
        if not seeds.finished(a.seeds, *named):
            print(f"{folder}: not finished: left out", file=sys.stderr)
            continue
        if val is None:
            val = corpus.load_split("builtin", "val", tokenizer="bytes")
        got = read_folder(folder, val, 256)
        if got:
            readers[named[0]] = got.pop("reader")
            res.setdefault(named[0], {"seeds": {}})["seeds"][named[1]] = got
    cli.require(res, "no gated model's checkpoint under {} yet: train its curves first (python -m dev.seeds)", a.seeds)
    for arm, v in res.items():
        for r in v["seeds"].values():  # each seed's own median, then every seed's heads pooled, then the rule's
            r["median"] = {w: statistics.median(r[w]) for w in ("init", "trained")}
        v.update({w: summary([x for r in v["seeds"].values() for x in r[w]]) for w in ("init", "trained")})
        v["rule"] = summary(rule_lives(readers[arm]))
        print(f"{arm:<18s} seeds {sorted(v['seeds'])} | heads past {FAR} bytes: init {v['init']['past_far']:.0%}, "
              f"trained {v['trained']['past_far']:.0%} | median half-life init {v['init']['median']:.0f}, "
              f"trained {v['trained']['median']:.0f} tokens | its init rule over {RULE_HEADS:,} heads: median "
              f"{v['rule']['median']:.1f}, {v['rule']['past_far']:.1%} past {FAR}")
    checkpoint.make_out_dir(a.out_dir)
    plot(res, os.path.join(a.out_dir, "halflife.png"))
    tables.save_text(json.dumps(dict(command=f"python -m dev.halflife --seeds {a.seeds} --out_dir {a.out_dir}",
                                     far=FAR, windows=WINDOWS, arms=res), indent=1) + "\n",
                     os.path.join(a.out_dir, "halflife.json"))


if __name__ == "__main__":
    cli.main_guard(main, prog="dev.halflife")

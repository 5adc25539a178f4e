"""The boundary, measured: the predictor ablation, two controls, and the content probe.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN". The paper
swaps SPEN's predictor (static linear map, causal linear attention, full causal softmax
attention, all reading the same EMA traces) and finds the same loss, 7.60 vs 7.60 nats at its
small scale: the gap to GPT-2 sits in the traces, not in what reads them. This script runs
that ablation at a size a CPU can train, plus the two controls the paper only argues for:
    linear, linear_attn, softmax_attn   SPEN with each predictor (the paper's ablation)
    selective                           SPEN whose trace decays are computed from the input
                                        (a_t = sigmoid(W x_t + b), ours: the positive control)
    gpt                                 GPT-2 style transformer (gpt.py), same width and depth
Every variant trains with the same token budget, width, depth and, for seed s, the same data
order (train.py's get_batch is a pure function of (seed, step)), over >= 2 seeds.

Then the content probe ("structure kept, content lost" made visible): a linear classifier
decodes the identity of the token k steps back, k = 0..64, from
    (a) raw EMA traces of token embeddings, h_t = sum_k a (1 - a)^k E[x_{t-k}], one per a in
        (0.5, 0.1, 0.02) and the three concatenated. E is the trained SPEN's (linear, seed 0)
        token embedding table, the vectors its first block's traces average; random N(0, 1)
        embeddings when no checkpoint is given (the test);
    (b) the trained SPENs' hidden states (linear/ema and selective), (c) the GPT's hidden states;
for (b) and (c) every layer is probed and the figure shows the layer with the best mean accuracy
over k (all layers are in content.json). The figure overlays the analytic trace weight
a (1 - a)^k and the role (structure) accuracy the SPCN's traces reach in probe.py
(results/probe/results.json; plotted without it, and said so, when that file is absent).

Shape glossary
    B sequences, T tokens per sequence, C width, S number of traces (3), L layers,
    N probe samples (positions), K classes (the K most frequent tokens), G lags (65).

Choices (ours; the paper has no such experiment)
    - Classifier: ridge regression onto one-hot labels (a linear least-squares classifier),
      features standardised on the training positions, lambda = 1e-3 * N per feature. It is
      closed form (one C x C solve per lag), so all 65 lags x all feature sets cost seconds,
      and it has no optimiser settings to tune. Ties broken by argmax.
    - Classes: only positions whose lag-k token is among the K = 32 most frequent tokens of the
      probe sample are used (others are dropped for that lag), so chance is the majority-class
      rate among those (reported per lag as `chance`, about 0.1 for BPE text).
    - Positions t >= 64 of each length-T sequence, so every lag has a real token; sequences are
      split 75/25 into train/test, so no test position shares a sequence with a training one.
    - Seed noise rule (ablate.md): a variant differs from `linear` when |mean difference| >
      2 x standard error of the difference, SE = sqrt(s_v^2 / n + s_lin^2 / n) with sample
      standard deviations over the n seeds; otherwise "within seed noise". With n = 2 this is a
      weak test; the per-seed values are printed so a reader can judge.

Run (expected output and time)
    python ablate.py --preset cpu --out_dir results/ablate     # 5 variants x 2 seeds + probe
        # 10 runs x 100 steps: 8 min 43 s on 2 quiet x86_64 cores (~50 s a run, probe 8 s);
        # 36 min while ~6 other jobs shared the cores. Writes ablate.json, ablate.md,
        # curves.png, content.json, content.png; run folders (checkpoints, logs,
        # metrics.jsonl) under DIR/runs/. Result (results/ablate/ablate.md): linear 5.99,
        # linear_attn 6.03, softmax_attn 6.02, selective 6.00, gpt 6.17 nats (mean of 2 seeds,
        # 102k tokens each).
    python ablate.py --preset gpu --out_dir out/ablate_gpu     # larger, one GPU
    python ablate.py --content_only --out_dir results/ablate  # re-run the probe on saved runs
A run folder whose result.json holds the same train.py arguments is reused, so an interrupted
ablation resumes at the next unfinished run, and more cores can be used by running disjoint
--variants in separate processes (OMP_NUM_THREADS=1 each) with the same --out_dir and
--no-content, then the full command once to collect them (what results/ablate was made with).
"""

import argparse
import json
import math
import os
import time

import numpy as np
import torch

import data as data_lib
import ema
import train

VARIANTS = {  # name -> train.py flags; everything else is shared
    "linear": dict(model="spen", predictor="linear", context="ema"),
    "linear_attn": dict(model="spen", predictor="linear_attn", context="ema"),
    "softmax_attn": dict(model="spen", predictor="softmax_attn", context="ema"),
    "selective": dict(model="spen", predictor="linear", context="selective"),
    "gpt": dict(model="gpt"),
}
PRESETS = {
    # train.py's cpu preset (4 blocks, width 128, T 128, B 8, builtin corpus) shortened so that
    # 5 variants x 2 seeds fit ~15-20 min on 2 quiet cores: 100 steps x 1,024 tokens = 102k
    # tokens each. Measured: ~2.4 CPU-seconds per step (the 50304-wide output layer dominates).
    "cpu": dict(train_preset="cpu", max_iters=100, seeds=2, eval_interval=25, eval_iters=10,
                probe_seqs=128),
    # One GPU: 6 blocks of width 384, T 256, 32 x 256 = 8k tokens/step, 2,000 steps = 16M tokens
    # of WikiText-103 (103M tokens, so no repetition; the builtin corpus has only 645k). Needs
    # the hub once to build the token cache (python data.py --dataset wikitext103). Untested here.
    "gpu": dict(train_preset="cpu", max_iters=2000, seeds=2, eval_interval=100, eval_iters=20,
                n_layer=6, n_embd=384, block_size=256, batch_size=32, lr=1e-3, min_lr=1e-4,
                warmup_iters=100, data="wikitext103", probe_seqs=512),
}
TRAIN_FLAGS = ("n_layer", "n_embd", "block_size", "batch_size", "lr", "min_lr", "warmup_iters",
               "eval_interval", "eval_iters", "data", "device", "dtype")
ALPHAS = (0.5, 0.1, 0.02)  # the paper's fast, medium, slow decays
MAX_LAG = 64


def get_parser():
    p = argparse.ArgumentParser(description="Predictor ablation + controls + content probe (see docstring).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("I/O")
    g.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="size of the ablation")
    g.add_argument("--out_dir", default="results/ablate", help="folder for ablate.json/md, curves.png, content.*; runs in OUT/runs")
    g.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    g.add_argument("--content", action=argparse.BooleanOptionalAction, default=True, help="run the content probe after the ablation")
    g.add_argument("--content_only", action="store_true", help="skip training; probe the runs already in OUT/runs")
    g.add_argument("--probe_json", default="results/probe/results.json", help="probe.py results (role accuracy line)")
    g = p.add_argument_group("training (default: the preset)")
    g.add_argument("--max_iters", type=int, help="optimizer steps per run")
    g.add_argument("--seeds", type=int, help="seeds per variant (>= 2 for a noise estimate)")
    for f, t in (("n_layer", int), ("n_embd", int), ("block_size", int), ("batch_size", int), ("lr", float),
                 ("min_lr", float), ("warmup_iters", int), ("eval_interval", int), ("eval_iters", int)):
        g.add_argument(f"--{f}", type=t, help=f"passed to train.py --{f}")
    g.add_argument("--data", help="passed to train.py --data (and --eval_data); default: the train preset's")
    g = p.add_argument_group("content probe")
    g.add_argument("--top_k", type=int, default=32, help="K, classify among the K most frequent tokens")
    g.add_argument("--probe_seqs", type=int, help="B, sequences sampled from the validation split")
    g = p.add_argument_group("system")
    g.add_argument("--device", help="passed to train.py --device (auto: cuda if available)")
    g.add_argument("--dtype", choices=["auto", "fp32", "bf16", "fp16"], help="passed to train.py --dtype")
    return p


def resolve(args):
    """Command line > ablate preset; returns a dict of the settings actually used."""
    a = dict(PRESETS[args.preset])
    a.update({k: v for k, v in vars(args).items() if v is not None})
    if a["seeds"] < 1 or a["max_iters"] < 1:
        raise SystemExit("--seeds and --max_iters must be >= 1")
    names = [v for v in a["variants"].split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise SystemExit(f"--variants: unknown {bad}; choose from {','.join(VARIANTS)}")
    a["variants"] = names
    return a


def run_dir(a, name, seed):
    return os.path.join(a["out_dir"], "runs", f"{name}_s{seed}")


def train_one(a, name, seed):
    """Train one variant at one seed in-process; returns train.main's result dict. A run folder
    whose result.json records the same train.py arguments is reused, not retrained."""
    argv = ["--preset", a["train_preset"], "--out_dir", run_dir(a, name, seed), "--max_iters", str(a["max_iters"]),
            "--seed", str(seed), "--log_interval", str(max(1, a["max_iters"] // 10))]
    for k, v in VARIANTS[name].items():
        argv += [f"--{k}", str(v)]
    for k in TRAIN_FLAGS:
        if a.get(k) is not None:
            argv += [f"--{k}", str(a[k])]
    if a.get("data") is not None:
        argv += ["--eval_data", a["data"]]
    done = os.path.join(run_dir(a, name, seed), "result.json")
    if os.path.exists(done) and json.load(open(done)).get("argv") == argv:
        print(f"   reusing {done}", flush=True)
        return json.load(open(done))
    res = train.main(train.get_parser().parse_args(argv))
    with open(os.path.join(run_dir(a, name, seed), "result.json"), "w") as f:
        json.dump({**res, "argv": argv}, f, indent=2)
    return res


def summarize(a, results):
    """results: {name: [result per seed]} -> the ablate.json dict (issue 4's shape)."""
    variants = {}
    for name, rs in results.items():
        losses = [r["val_loss"] for r in rs]
        variants[name] = dict(val_loss=losses, val_loss_mean=float(np.mean(losses)),
                              val_loss_std=float(np.std(losses, ddof=1)) if len(losses) > 1 else 0.0,
                              params=rs[0]["params"], tokens=rs[0]["tokens"],
                              seconds=float(np.mean([r["seconds"] for r in rs])))
    return dict(variants=variants, preset=a["preset"], max_iters=a["max_iters"])


def noise_verdict(v, ref):
    """(difference, 2 x SE, within-noise?) of v's mean loss against ref's (rule in the docstring)."""
    n_v, n_r = len(v["val_loss"]), len(ref["val_loss"])
    diff = v["val_loss_mean"] - ref["val_loss_mean"]
    two_se = 2 * math.sqrt(v["val_loss_std"] ** 2 / n_v + ref["val_loss_std"] ** 2 / n_r)
    return diff, two_se, abs(diff) <= two_se


def write_md(a, summary, path, wall):
    v = summary["variants"]
    lines = [f"# Predictor ablation (preset {a['preset']}, {a['max_iters']} steps, {a['seeds']} seeds)", "",
             "| variant | val loss mean ± std | per seed | Δ vs linear | 2·SE | verdict | params | tokens | s/run |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in v.items():
        per_seed = ", ".join(f"{x:.3f}" for x in r["val_loss"])
        if name == "linear" or "linear" not in v:
            delta, se, verdict = "—", "—", "reference"
        else:
            d, s2, within = noise_verdict(r, v["linear"])
            delta, se = f"{d:+.3f}", f"{s2:.3f}"
            verdict = "within seed noise" if within else ("better than linear" if d < 0 else "worse than linear")
            if min(len(r["val_loss"]), len(v["linear"]["val_loss"])) < 2:
                se, verdict = "—", "1 seed: no noise estimate"
        lines.append(f"| {name} | {r['val_loss_mean']:.3f} ± {r['val_loss_std']:.3f} | {per_seed} | {delta} | {se} | "
                     f"{verdict} | {r['params']:,} | {r['tokens']:,} | {r['seconds']:.0f} |")
    lines += ["", "Validation loss in nats (train.py's fixed validation batches) after the last step. "
              "Rule: a difference from `linear` is outside seed noise when |Δ| > 2·SE, "
              "SE = sqrt(s_v²/n + s_linear²/n) over the n seeds (sample std). "
              "Seed s uses the same data order for every variant.",
              f"Training time summed over all runs: {sum(r['seconds'] * len(r['val_loss']) for r in v.values()):.0f} s "
              f"(s/run is the mean per run); wall time of the invocation that wrote this file: {wall:.0f} s "
              f"(runs reused from earlier invocations are not in it)."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_curve(run):
    """(tokens, val_loss) lists from a run folder's metrics.jsonl."""
    res = json.load(open(os.path.join(run, "result.json")))
    per_step = res["tokens"] / max(1, res["step"])
    xs, ys = [], []
    for line in open(os.path.join(run, "metrics.jsonl")):
        rec = json.loads(line)
        if "val_loss" in rec:
            xs.append(rec["step"] * per_step)
            ys.append(rec["val_loss"])
    return xs, ys


def plot_curves(a, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, name in enumerate(a["variants"]):
        for s in range(a["seeds"]):
            xs, ys = read_curve(run_dir(a, name, s))
            ax.plot(xs, ys, color=f"C{i}", alpha=0.9 if s == 0 else 0.45, label=name if s == 0 else None)
    lo = min(min(l.get_ydata()) for l in ax.lines)
    hi = max(l.get_ydata()[1] for l in ax.lines if len(l.get_ydata()) > 1)  # skip the step-0 ~10.8
    ax.set_ylim(lo - 0.05, hi + 0.1)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats)")
    ax.set_title(f"SPEN predictors vs selective traces vs GPT ({a['preset']}; {a['seeds']} seeds, faint = other seeds)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- the content probe -------------------------------------------------------------------

def ridge_probe(X, labels, train_rows, lam=1e-3):
    """Linear classifier for each lag. X (N, F) features; labels (N, G) class ids in [0, K) or -1
    (ignored); train_rows (N,) bool. Returns (accuracy (G,), chance (G,)) on the other rows.
    W = argmin ||X_tr W - Y||^2 + lam N ||W||^2, Y one-hot, predict argmax X_te W."""
    X = X.double()
    mu, sd = X[train_rows].mean(0), X[train_rows].std(0) + 1e-8
    X = torch.cat([(X - mu) / sd, torch.ones(len(X), 1, dtype=X.dtype)], 1)  # (N, F+1), bias column
    K = int(labels.max()) + 1
    acc, chance = [], []
    for g in range(labels.size(1)):
        y = labels[:, g]
        tr, te = train_rows & (y >= 0), ~train_rows & (y >= 0)
        Xtr = X[tr]
        Y = torch.nn.functional.one_hot(y[tr], K).double()  # (n, K)
        A = Xtr.T @ Xtr + lam * len(Xtr) * torch.eye(X.size(1), dtype=X.dtype)  # (F+1, F+1)
        W = torch.linalg.solve(A, Xtr.T @ Y)  # (F+1, K)
        pred = (X[te] @ W).argmax(1)
        acc.append((pred == y[te]).double().mean().item())
        chance.append(torch.bincount(y[te], minlength=K).max().item() / max(1, int(te.sum())))
    return acc, chance


def probe_tokens(a, top_k):
    """Sample B validation sequences; return idx (B, T), labels (N, G) and train_rows (N,)
    for positions t in [MAX_LAG, T): labels[n, k] = class of token x_{t-k} or -1 if not top-K."""
    val = data_lib.load_split(a["eval_data"], "val")
    B, T = a["probe_seqs"], a["block_size"]
    if T <= MAX_LAG:
        raise SystemExit(f"content probe needs block_size > {MAX_LAG}, got {T}")
    idx, _ = data_lib.get_batch(val, B, T, step=0, seed=train.EVAL_SEED + 1)  # (B, T)
    counts = torch.bincount(idx.flatten())
    top = counts.argsort(descending=True)[:top_k]
    cls = torch.full((int(counts.numel()),), -1, dtype=torch.long)
    cls[top] = torch.arange(len(top))
    t = torch.arange(MAX_LAG, T)
    lags = torch.arange(MAX_LAG + 1)
    labels = cls[idx[:, t[:, None] - lags[None, :]]]  # (B, T', G)
    labels = labels.reshape(-1, len(lags))  # (N, G), row = (sequence, position)
    train_rows = (torch.arange(B) < int(0.75 * B)).repeat_interleave(len(t))  # split by sequence
    return idx, labels, train_rows


def positions(h):
    """(B, T, F) -> (N, F) rows for positions t >= MAX_LAG, matching probe_tokens' order."""
    return h[:, MAX_LAG:].reshape(-1, h.size(-1))


def load_run(path):
    """Rebuild a trained SPEN or GPT from a train.py checkpoint (train.py's loader and its errors)."""
    return train.build_from_checkpoint(train.load_checkpoint(path), path).eval()


@torch.no_grad()
def content_probe(a, runs):
    """runs: {name: checkpoint path} for the trained models ('linear' also supplies E).
    Returns the content.json dict."""
    t0 = time.time()
    idx, labels, train_rows = probe_tokens(a, a["top_k"])
    out = dict(lags=list(range(MAX_LAG + 1)), top_k=a["top_k"], alphas=list(ALPHAS), samples=int(len(labels)),
               raw={}, models={}, embedding="")
    if "linear" in runs:
        E = _embedding_table(load_run(runs["linear"]))  # (V, C)
        out["embedding"] = f"trained SPEN token embeddings ({runs['linear']})"
    else:
        g = torch.Generator().manual_seed(0)
        E = torch.randn(int(idx.max()) + 1, a.get("n_embd") or 64, generator=g)
        out["embedding"] = "random N(0, 1) embeddings (no trained SPEN given)"
    x = E[idx].float()  # (B, T, C)
    h = ema.traces(x, ALPHAS)  # (B, T, S, C)
    for s, al in enumerate(ALPHAS):
        acc, chance = ridge_probe(positions(h[:, :, s]), labels, train_rows)
        out["raw"][str(al)] = acc
        out["chance"] = chance
    acc, _ = ridge_probe(positions(h.flatten(2)), labels, train_rows)
    out["raw"]["all"] = acc
    for name, path in runs.items():
        m = load_run(path)
        hs = m.hidden_states(idx)  # L + 1 tensors (B, T, C)
        per_layer = [ridge_probe(positions(hl.float()), labels, train_rows)[0] for hl in hs]
        best = int(np.argmax([np.mean(p) for p in per_layer]))
        out["models"][name] = dict(layers=per_layer, best_layer=best, best=per_layer[best], checkpoint=path)
    out["seconds"] = time.time() - t0
    return out


def _embedding_table(model):
    """The (V, C) token embedding weight of a SPEN or GPT (the first nn.Embedding)."""
    emb = next(mod for mod in model.modules() if isinstance(mod, torch.nn.Embedding))
    return emb.weight


def plot_content(res, probe_json, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    k = np.array(res["lags"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    wax = ax1.twinx()
    for i, al in enumerate(ALPHAS):
        ax1.plot(k, res["raw"][str(al)], color=f"C{i}", label=f"EMA trace a={al}")
        wax.plot(k, al * (1 - al) ** k, color=f"C{i}", ls=":", lw=1)
    ax1.plot(k, res["raw"]["all"], color="k", label="3 traces concatenated")
    wax.set_yscale("log")
    wax.set_ylim(1e-6, 1)
    wax.set_ylabel("analytic trace weight a(1-a)^k (dotted)")
    ax1.set_title("token identity in raw EMA traces of token embeddings")
    ax2.plot(k, res["raw"]["all"], color="k", alpha=0.4, label="raw traces (3 concatenated)")
    for i, (name, r) in enumerate(res["models"].items()):
        ax2.plot(k, r["best"], color=f"C{i + 3}", label=f"{name} hidden state (layer {r['best_layer']})")
    note = "role accuracy: results/probe/results.json absent"
    if probe_json and os.path.exists(probe_json):
        pr = json.load(open(probe_json))
        w = pr["within"]
        ax2.axhline(w["traces"], color="g", ls="--", label=f"role (structure) accuracy from traces, probe.py ({w['traces']:.2f})")
        ax2.axhline(w["instantaneous"], color="g", ls=":", label=f"role accuracy without traces, probe.py ({w['instantaneous']:.2f})")
        note = ""
    ax2.set_title("trained models' hidden states" + (f"\n({note})" if note else ""))
    for ax in (ax1, ax2):
        ax.plot(k, res["chance"], color="grey", ls="--", lw=1, label="chance (majority class)")
        ax.set_xlabel("lag k (tokens back)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="center right")
    ax1.set_ylabel(f"accuracy decoding token x_(t-k) (top {res['top_k']} tokens)")
    ax1.set_ylim(0, 1.02)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return note


def main(args):
    ema.configure_allocator()
    a = resolve(args)
    tp = train.PRESETS[a["train_preset"]]
    a.setdefault("block_size", tp["block_size"])
    a["eval_data"] = a.get("data") or tp["eval_data"]
    os.makedirs(a["out_dir"], exist_ok=True)
    t0 = time.time()
    if not a["content_only"]:
        results = {name: [] for name in a["variants"]}
        for s in range(a["seeds"]):  # seed-major: an interrupted run has every variant at seed 0
            for name in a["variants"]:
                print(f"== ablate: {name} seed {s} ({time.time() - t0:.0f} s elapsed)", flush=True)
                results[name].append(train_one(a, name, s))
        wall = time.time() - t0
        summary = summarize(a, results)
        summary["seconds"] = wall  # this invocation only; reused runs cost nothing here
        with open(os.path.join(a["out_dir"], "ablate.json"), "w") as f:
            json.dump(summary, f, indent=2)
        write_md(a, summary, os.path.join(a["out_dir"], "ablate.md"), wall)
        plot_curves(a, os.path.join(a["out_dir"], "curves.png"))
        print(open(os.path.join(a["out_dir"], "ablate.md")).read(), flush=True)
    if a["content"] or a["content_only"]:
        runs = {n: os.path.join(run_dir(a, n, 0), "ckpt_last.pt") for n in ("linear", "selective", "gpt")
                if os.path.exists(os.path.join(run_dir(a, n, 0), "ckpt_last.pt"))}
        res = content_probe(a, runs)
        res["role_accuracy_note"] = plot_content(res, a["probe_json"], os.path.join(a["out_dir"], "content.png"))
        with open(os.path.join(a["out_dir"], "content.json"), "w") as f:
            json.dump(res, f, indent=2)
        print(f"content probe: {res['seconds']:.0f} s; acc at k=0/8/64: " + ", ".join(
            f"{n} {v[0]:.2f}/{v[8]:.2f}/{v[64]:.2f}" for n, v in
            [*((f"raw a={al}", res["raw"][str(al)]) for al in ALPHAS),
             *((n, r["best"]) for n, r in res["models"].items())]), flush=True)
    print(f"ablate: done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(get_parser().parse_args())

"""The content probe: how long does token identity survive in EMA traces and in trained models?

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": the traces
keep structure but lose content, because a token enters a trace with weight a and fades as
a (1 - a)^k. This script makes that visible. A linear classifier decodes the identity of the
token k steps back, k = 0..64, from
    (a) raw EMA traces of token embeddings, h_t = sum_k a (1 - a)^k E[x_{t-k}], one per decay a
        of that SPEN's config.alphas (the paper's 0.5, 0.1, 0.02) and the traces concatenated;
        E is the token embedding table of the trained SPEN `linear` (seed 0), or of the first
        SPEN run found without it;
    (b) the hidden states of every trained seed-0 run in --runs (SPEN readers, selective, GPT):
        every layer is probed, the figure shows each run's layer with the best mean accuracy
        over k (all layers are in content.json).
The figure overlays the analytic trace weight a (1 - a)^k and the role (structure) accuracy
the SPCN's traces reach in probe.py (--probe_json; plotted without it, and said so, when that
file is absent).

Shape glossary
    B sequences, T tokens per sequence, C width, S number of traces (3), L layers,
    N probe samples (positions), F features, K classes (the K most frequent tokens), G lags (65).

Choices (ours; the paper has no such experiment)
    - Classifier: ridge regression onto one-hot labels (a linear least-squares classifier),
      features standardised on the training positions, lambda = 1e-3 * N per feature. Closed
      form (one F x F solve per lag), no optimiser settings to tune; ties broken by argmax.
    - Classes: only positions whose lag-k token is among the K most frequent tokens of the probe
      sample are used for that lag, so chance is the majority-class rate among them (`chance`).
    - Positions t >= 64 of each length-T validation window, so every lag has a real token;
      windows are split 75/25 into train/test, so no test position shares a window with a
      training one. The windows come from the runs' validation corpus, a fixed seed.

Run
    python content.py --runs out/ablate/runs          # probe the runs `python ablate.py` trained
    python content.py --runs results/ablate/runs --out_dir results/ablate   # the reference
Writes content.json and content.png under --out_dir (default out/content). The reference numbers
are in results/ablate/content.json. Without trained runs in --runs: one line naming the
command that makes them, nothing written.
"""

import json
import os
from dataclasses import dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "content.py")  # until main_guard; the imports below take seconds

import numpy as np
import torch

from plumbing import batches, checkpoint, cli, corpus, grid, runtime, tables
import ema

MAX_LAG = 64
MODEL_COLORS = ("C3", "C4", "C5", "C6", "C8", "C9", "navy", "darkgoldenrod")  # C0-C2: raw traces, grey: chance
PROBE_SEED = runtime.EVAL_SEED + 1  # windows differ from the validation-loss batches


class ContentError(cli.UserError):
    """No usable trained runs; the message is one line naming the command that makes them."""


@dataclass
class ContentConfig:
    runs: str = cli.arg("out/ablate/runs", "folder of trained runs (NAME_s0/ckpt_last.pt), as ablate.py "
                        "writes them", group="I/O")
    out_dir: str = cli.arg("out/content", "folder for content.json and content.png", group="I/O")
    probe_json: str = cli.arg("results/probe/results.json", "probe.py results (role accuracy lines)", group="I/O")
    top_k: int = cli.arg(32, "K, classify among the K most frequent tokens", group="probe", bounds=(2, 10 ** 6))
    probe_seqs: int = cli.arg(128, "B, validation windows probed (75% fit, 25% scored)", group="probe",
                              bounds=(4, 10 ** 6))

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's): one line; probe_seqs >= 4: a quarter
        # of them is the test set


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


def probe_tokens(val, B, T, top_k):
    """B validation windows; return idx (B, T), labels (N, G) and train_rows (N,) for positions
    t in [MAX_LAG, T): labels[n, k] = class of token x_{t-k}, or -1 if it is not in the top K."""
    idx, _ = batches.get_batch(val, B, T, step=0, seed=PROBE_SEED)  # (B, T)
    counts = torch.bincount(idx.flatten())
    top = counts.argsort(descending=True)[:top_k]
    cls = torch.full((int(counts.numel()),), -1, dtype=torch.long)
    cls[top] = torch.arange(len(top))
    t = torch.arange(MAX_LAG, T)
    lags = torch.arange(MAX_LAG + 1)
    labels = cls[idx[:, t[:, None] - lags[None, :]]]  # (B, T', G)
    labels = labels.reshape(-1, len(lags))  # (N, G), row = (window, position)
    train_rows = (torch.arange(B) < int(0.75 * B)).repeat_interleave(len(t))  # split by window
    return idx, labels, train_rows


def positions(h):
    """(B, T, F) -> (N, F) rows for positions t >= MAX_LAG, matching probe_tokens' order."""
    return h[:, MAX_LAG:].reshape(-1, h.size(-1))


def find_runs(folder):
    """{name: checkpoint path} of the seed-0 runs in folder (NAME_s0/ckpt_last.pt), or ContentError."""
    found = {}
    if os.path.isdir(folder):
        for d in sorted(os.listdir(folder)):
            path = os.path.join(folder, d, "ckpt_last.pt")
            if d.endswith("_s0") and os.path.isfile(path):
                found[d[:-3]] = path
    if not found:
        parent = os.path.dirname(os.path.normpath(folder)) or "."
        raise ContentError(f"no trained runs in {folder} (NAME_s0/ckpt_last.pt); make them first with: "
                           f"python ablate.py --out_dir {parent}")
    return found


def embedding_table(model):
    """The (V, C) token embedding weight of a SPEN or GPT (the first nn.Embedding)."""
    return next(mod for mod in model.modules() if isinstance(mod, torch.nn.Embedding)).weight


@torch.no_grad()
def probe(cfg, runs):
    """runs: {name: checkpoint path}. Returns the content.json dict."""
    models = {name: checkpoint.load_model(path) for name, path in runs.items()}  # (model, ckpt)
    spens = [n for n, (m, ck) in models.items() if ck["kind"] == "spen"]
    cli.require(bool(spens), "--runs {} holds no SPEN run to take the token embeddings from", cfg.runs)
    source = "linear" if "linear" in spens else spens[0]
    tcfg = models[source][1]["train"]
    T, name = tcfg["block_size"], tcfg.get("eval_data") or tcfg["data"]
    cli.require(T > MAX_LAG, "the runs in {} use block_size {}; the probe needs > {} (lags 0..{})",
                cfg.runs, T, MAX_LAG, MAX_LAG)
    val = corpus.load_split(name, "val")
    idx, labels, train_rows = probe_tokens(val, cfg.probe_seqs, T, cfg.top_k)
    alphas = tuple(models[source][0].config.alphas)  # the probed SPEN's own decays
    out = dict(lags=list(range(MAX_LAG + 1)), top_k=cfg.top_k, alphas=list(alphas), samples=int(len(labels)),
               data=name, block_size=T, embedding=f"{source} ({runs[source]})", raw={}, models={})
    E = embedding_table(models[source][0])  # (Vp, C)
    h = ema.traces(E[idx].float(), alphas)  # (B, T, S, C)
    for s, a in enumerate(alphas):
        out["raw"][str(a)], out["chance"] = ridge_probe(positions(h[:, :, s]), labels, train_rows)
    out["raw"]["all"] = ridge_probe(positions(h.flatten(2)), labels, train_rows)[0]  # (B, T, S*C) features
    for name, (model, _) in models.items():
        per_layer = [ridge_probe(positions(hl.float()), labels, train_rows)[0] for hl in model.hidden_states(idx)]
        best = int(np.argmax([np.mean(p) for p in per_layer]))
        out["models"][name] = dict(layers=per_layer, best_layer=best, best=per_layer[best], checkpoint=runs[name])
    return out


def plot(res, probe_json, path):
    """content.png: raw traces (left), trained models (right); returns a note if role lines are missing."""
    plt = tables.pyplot()
    k = np.array(res["lags"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    wax = ax1.twinx()
    for i, a in enumerate(res["alphas"]):
        ax1.plot(k, res["raw"][str(a)], color=f"C{i}", label=f"EMA trace a={a}")
        wax.plot(k, a * (1 - a) ** k, color=f"C{i}", ls=":", lw=1)
    ax1.plot(k, res["raw"]["all"], color="k", label=f"{len(res['alphas'])} traces concatenated")
    wax.set_yscale("log")
    wax.set_ylim(1e-6, 1)
    wax.set_ylabel("analytic trace weight a(1-a)^k (dotted)")
    ax1.set_title("token identity in raw EMA traces of token embeddings")
    ax2.plot(k, res["raw"]["all"], color="k", alpha=0.4, label=f"raw traces ({len(res['alphas'])} concatenated)")
    for i, (name, r) in enumerate(res["models"].items()):
        ax2.plot(k, r["best"], color=MODEL_COLORS[i % len(MODEL_COLORS)], label=f"{name} (layer {r['best_layer']})")
    note = f"role accuracy: {probe_json} absent"
    if probe_json and os.path.exists(probe_json):
        with open(probe_json) as f:
            w = json.load(f)["within"]
        ax2.axhline(w["traces"], color="g", ls="--", label=f"SPCN role accuracy from traces ({w['traces']:.2f})")
        ax2.axhline(w["instantaneous"], color="g", ls=":", label=f"... without traces ({w['instantaneous']:.2f})")
        note = ""
    ax2.set_title("trained models' hidden states (best layer)" + (f"\n({note})" if note else ""))
    for ax in (ax1, ax2):
        ax.plot(k, res["chance"], color="grey", ls="--", lw=1, label="chance (majority class)")
        ax.set_xlabel("lag k (tokens back)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center right")
    ax1.set_ylabel(f"accuracy decoding token x_(t-k) (top {res['top_k']} tokens)")
    ax1.set_ylim(0, 1.02)
    fig.tight_layout()
    tables.save_figure(fig, path)
    plt.close(fig)
    return note


def main(cfg):
    """Probe the runs in cfg.runs; write content.json and content.png; return the dict."""
    checkpoint.check_out_dir(cfg.out_dir)  # one line before anything is read
    res = probe(cfg, find_runs(cfg.runs))  # every input is read and checked before the first write
    checkpoint.make_out_dir(cfg.out_dir)
    with grid.locked(cfg.out_dir):  # one writer per folder; a killed one's temp files removed
        res["role_accuracy_note"] = plot(res, cfg.probe_json, os.path.join(cfg.out_dir, "content.png"))
        res = tables.save_json(res, os.path.join(cfg.out_dir, "content.json"), "content.py", cfg)
    rows = [*((f"raw a={a}", res["raw"][str(a)]) for a in res["alphas"]),
            *((n, r["best"]) for n, r in res["models"].items())]
    print("content probe, accuracy at lag k = 0 / 1 / 8 / 64: " +
          "; ".join(f"{n} {v[0]:.2f}/{v[1]:.2f}/{v[8]:.2f}/{v[64]:.2f}" for n, v in rows), flush=True)
    return res


def get_parser():
    return cli.parser(ContentConfig, "Decode the token k steps back from EMA traces and trained models' hidden "
                      "states (see the module docstring).")


if __name__ == "__main__":
    config = cli.parse(ContentConfig, get_parser())
    cli.main_guard(lambda: main(config), prog="content.py")  # data errors are cli.UserErrors

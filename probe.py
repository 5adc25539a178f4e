"""Role probes: SPCN activity vs activity + EMA traces, against a supervised BiGRU tagger.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Small scale: SPCN", its results
table: probe accuracy within Grammar A with instantaneous activity (0.795) and with traces
(0.960), SPCN at 96% of a supervised BiGRU, transfer A -> B overall 61.8%, deep-embedded roles
84%, relative-clause verb in transfer 89.3% (SPCN) vs 7.9% (BiGRU), BiGRU better on content
(noun) roles in transfer.

What one run does, for each seed s (data split, SPCN projection, probe and BiGRU all seeded):
    1. grammar.split: A/B train, val, test sentences (aligned; no sentence shared by splits)
    2. SPCN trained by PGHU on A-train text, no labels (or loaded with --load_spcn)
    3. representations per word: instantaneous = bottom-up activity a_t (B, T, D);
       traces = [percept r_t, EMA traces h_t] (B, T, (S+1) D)
    4. multinomial logistic-regression probes (L2, L-BFGS) fit on A-train roles; tested on
       A-test (within) and B-test (transfer)
    5. BiGRU tagger (word embeddings -> bidirectional GRU -> linear) trained with Adam on
       A-train roles, epoch chosen on A-val; tested on A-test and B-test. B's words never occur
       in training, so their embeddings stay at their random initialisation.
Accuracies are per token; "per role" is the recall of that role; deep-embedded = tokens whose
role is in grammar.DEEP_ROLES; content = roles whose ROLE_KIND is 'content'.

Shape glossary: B sentences, T words, D SPCN units, S traces, N tokens (non-padding), R roles.

Decisions (README "Differences from the paper")
    - The SPCN side of "transfer" is the traces probe; "deep_embedded" in results.json is the
      transfer accuracy on the deep-embedded roles (the paper reports it beside transfer
      overall); the within-A figure is stored as "deep_embedded_within".
    - Probe L2 and the SPCN's settings were chosen on the validation splits, never on test:
      A-val accuracy is flat (0.997-0.999) for L2 in 1e-4..3e-2 while B-val transfer of rc_verb
      rises (0.48 -> 0.59), so L2 = 1e-2; g = 1 predictive units raised B-val transfer overall
      from 0.68 to 0.75 at equal A-val accuracy.
    - The BiGRU is bidirectional and reads the whole sentence; the SPCN is causal (left context).

Run: `python probe.py --out_dir results/probe` -> results.json, results.md, roles.png, one
progress line per stage and seed. Measured: 385 s wall (184 s CPU) with one thread on a 2-core
CPU shared with other jobs (load ~9); about 3 minutes when the machine is quiet. Expect, mean
over 3 seeds: within A instantaneous 0.533, traces 0.998, BiGRU 1.000; transfer SPCN 0.764,
BiGRU 0.841; rc_verb transfer SPCN 0.579, BiGRU 0.823; deep-embedded transfer SPCN 0.985,
BiGRU 0.848; content roles in transfer SPCN 0.481, BiGRU 0.721.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

import ema
import grammar
import spcn

PAPER = {"within_instantaneous": 0.795, "within_traces": 0.960, "spcn_over_bigru": 0.96,
         "transfer_spcn": 0.618, "deep_embedded": 0.84, "rc_verb_transfer_spcn": 0.893,
         "rc_verb_transfer_bigru": 0.079}


# --- representations and linear probes -----------------------------------------------------


def representations(model, ids):
    """ids (B, T) -> {'instantaneous': a (B, T, D), 'traces': [r, h] (B, T, (S+1) D)}."""
    a, r, h, _ = model.run(ids)
    return {"instantaneous": a, "traces": torch.cat([r, h.flatten(2)], dim=-1)}


def tokens(x, roles):
    """Drop padding: x (B, T, ...) and roles (B, T) -> x (N, ...), roles (N,)."""
    keep = roles >= 0
    return x[keep], roles[keep]


def fit_probe(X, y, l2, iters, n_classes=len(grammar.ROLES)):
    """Multinomial logistic regression on standardised features, full-batch L-BFGS.

    minimise  mean_n CE(softmax(W^T z_n + b), y_n) + l2 * ||W||^2,  z = (x - mu) / sd.
    X (N, F), y (N,) -> predict(X) -> (N,) role ids.
    """
    mu, sd = X.mean(0), X.std(0) + 1e-3  # (F,)
    Z = (X - mu) / sd  # (N, F)
    W = torch.zeros(X.shape[1], n_classes, requires_grad=True)  # (F, R)
    b = torch.zeros(n_classes, requires_grad=True)  # (R,)
    opt = torch.optim.LBFGS([W, b], max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(Z @ W + b, y) + l2 * (W ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    W, b = W.detach(), b.detach()
    return lambda X: (((X - mu) / sd) @ W + b).argmax(-1)


# --- the supervised baseline ------------------------------------------------------------------


class BiGRUTagger(torch.nn.Module):
    """Word embeddings -> 1-layer bidirectional GRU -> linear role classifier."""

    def __init__(self, vocab_size, n_embd, n_hidden, n_roles):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, n_embd)  # N(0, 1) init, PyTorch default
        self.gru = torch.nn.GRU(n_embd, n_hidden, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(2 * n_hidden, n_roles)

    def forward(self, ids, lengths):
        """ids (B, T) with padding -1, lengths (B,) -> logits (B, T, R)."""
        x = self.emb(ids.clamp(min=0))  # (B, T, E)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                         enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                        total_length=ids.shape[1])  # (B, T, 2H)
        return self.head(out)  # (B, T, R)


def train_bigru(train, val, args, seed):
    """Adam on A-train roles; keep the epoch with the best A-val accuracy. Returns the model."""
    torch.manual_seed(seed)
    model = BiGRUTagger(len(grammar.VOCAB), args.gru_embd, args.gru_hidden, len(grammar.ROLES))
    opt = torch.optim.Adam(model.parameters(), lr=args.gru_lr)
    ids, roles, lengths = train
    g = torch.Generator().manual_seed(seed)
    best, best_state = -1.0, None
    for _ in range(args.gru_epochs):
        model.train()
        order = torch.randperm(len(ids), generator=g)
        for i in range(0, len(ids), args.gru_batch):
            j = order[i:i + args.gru_batch]
            logits = model(ids[j], lengths[j])  # (b, T, R)
            loss = F.cross_entropy(logits.flatten(0, 1), roles[j].flatten(), ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
        acc = accuracy(bigru_predict(model, val), val[1])["overall"]
        if acc > best:
            best, best_state = acc, {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    return model


def bigru_predict(model, data):
    ids, roles, lengths = data
    model.eval()
    with torch.no_grad():
        pred = model(ids, lengths).argmax(-1)  # (B, T)
    return pred[roles >= 0]  # (N,)


# --- scoring ------------------------------------------------------------------------------------


def accuracy(pred, roles):
    """pred (N,) and roles (B, T) or (N,) -> overall, deep, content and per-role accuracy."""
    y = roles[roles >= 0] if roles.dim() > 1 else roles
    ok = (pred == y).float()
    mask = lambda names: torch.isin(y, torch.tensor([grammar.ROLE_ID[r] for r in names]))
    out = {"overall": ok.mean().item(), "deep": ok[mask(grammar.DEEP_ROLES)].mean().item(),
           "content": ok[mask(grammar.CONTENT_ROLES)].mean().item()}
    for i, r in enumerate(grammar.ROLES):
        out[r] = ok[y == i].mean().item() if (y == i).any() else float("nan")
    return out


RC_VERB_CONTEXTS = {"rel": "subject-relative (right after the relativizer)",
                    "rc_subj": "object-relative (after Rel Det N)",
                    "deep_verb": "stacked (after the depth-2 verb)"}


def rc_verb_by_context(pred, roles):
    """Accuracy on rc_verb split by the role of the word before it. pred (N,), roles (B, T)."""
    prev = torch.cat([torch.full_like(roles[:, :1], -1), roles[:, :-1]], dim=1)  # (B, T)
    y, prev = roles[roles >= 0], prev[roles >= 0]  # (N,)
    is_rc = y == grammar.ROLE_ID["rc_verb"]
    return {ctx: (pred[is_rc & (prev == grammar.ROLE_ID[ctx])] == y[is_rc & (prev == grammar.ROLE_ID[ctx])])
            .float().mean().item() for ctx in RC_VERB_CONTEXTS}


def run_seed(args, seed, log):
    """Everything for one seed -> {'within_instantaneous': acc dict, ..., 'transfer_bigru': ...}."""
    torch.manual_seed(seed)
    data = grammar.split(args.n_train, args.n_val, args.n_test, seed=args.data_seed + seed)
    enc = {(gr, s): grammar.encode(data[gr][s]) for gr in grammar.GRAMMARS
           for s in ("train", "val", "test")}
    log(f"seed {seed}: data {args.n_train}/{args.n_val}/{args.n_test} sentences per grammar")

    if args.load_spcn:
        model = spcn.load(args.load_spcn)
    else:
        cfg = spcn.SPCNConfig(n_columns=args.n_columns, column_size=args.column_size, k=args.k,
                              alphas=tuple(args.alphas), feedback_gain=args.feedback_gain,
                              lr=args.spcn_lr, seed=seed)
        model = spcn.SPCN(cfg)
        errs = model.fit(data["A"]["train"], epochs=args.spcn_epochs, log=None)
        log(f"seed {seed}: SPCN trained by PGHU, prediction error {errs[0]:.4f} -> {errs[-1]:.4f}")

    reps = {key: representations(model, enc[key][0]) for key in
            [("A", "train"), ("A", "test"), ("B", "test")]}
    out = {}
    for kind in ("instantaneous", "traces"):
        X, y = tokens(reps[("A", "train")][kind], enc[("A", "train")][1])
        predict = fit_probe(X, y, args.l2, args.probe_iters)
        for gr, split_name in (("A", "within"), ("B", "transfer")):
            Xt, yt = tokens(reps[(gr, "test")][kind], enc[(gr, "test")][1])
            name = f"{split_name}_{'spcn' if kind == 'traces' else 'instantaneous'}"
            pred = predict(Xt)
            out[name] = accuracy(pred, yt)
            out[name].update({f"rc_verb_after_{c}": v for c, v in
                              rc_verb_by_context(pred, enc[(gr, "test")][1]).items()})
        log(f"seed {seed}: probe on {kind:13s} within {out['within_' + ('spcn' if kind == 'traces' else kind)]['overall']:.3f}"
            f"  transfer {out['transfer_' + ('spcn' if kind == 'traces' else kind)]['overall']:.3f}")

    gru = train_bigru(enc[("A", "train")], enc[("A", "val")], args, seed)
    for gr, split_name in (("A", "within"), ("B", "transfer")):
        pred = bigru_predict(gru, enc[(gr, "test")])
        out[f"{split_name}_bigru"] = accuracy(pred, enc[(gr, "test")][1])
        out[f"{split_name}_bigru"].update({f"rc_verb_after_{c}": v for c, v in
                                           rc_verb_by_context(pred, enc[(gr, "test")][1]).items()})
    log(f"seed {seed}: BiGRU within {out['within_bigru']['overall']:.3f}"
        f"  transfer {out['transfer_bigru']['overall']:.3f}")
    return out


# --- outputs --------------------------------------------------------------------------------------


def mean_std(values):
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarise(runs, seconds):
    """Per-seed accuracy dicts -> the results.json dictionary (means, with stds beside)."""
    def agg(name, key):
        return mean_std([r[name][key] for r in runs])

    res, std = {}, {}
    table = {"within": {"instantaneous": ("within_instantaneous", "overall"),
                        "traces": ("within_spcn", "overall"), "bigru": ("within_bigru", "overall")},
             "transfer": {"spcn": ("transfer_spcn", "overall"), "bigru": ("transfer_bigru", "overall")},
             "deep_embedded": {"spcn": ("transfer_spcn", "deep"), "bigru": ("transfer_bigru", "deep")},
             "deep_embedded_within": {"spcn": ("within_spcn", "deep"), "bigru": ("within_bigru", "deep")},
             "content_transfer": {"spcn": ("transfer_spcn", "content"),
                                  "bigru": ("transfer_bigru", "content")},
             "transfer_instantaneous": {"spcn": ("transfer_instantaneous", "overall")}}
    table["rc_verb_transfer_by_context"] = {
        f"{who}_after_{c}": (f"transfer_{who}", f"rc_verb_after_{c}")
        for c in RC_VERB_CONTEXTS for who in ("spcn", "bigru")}
    for group, entries in table.items():
        res[group], std[group] = {}, {}
        for k, (name, key) in entries.items():
            res[group][k], std[group][k] = agg(name, key)
    res["roles"], std["roles"] = {}, {}
    cols = {"within_spcn": "within_spcn", "within_bigru": "within_bigru",
            "transfer_spcn": "transfer_spcn", "transfer_bigru": "transfer_bigru"}
    for r in grammar.ROLES:
        res["roles"][r] = {"kind": grammar.ROLE_KIND[r]}
        std["roles"][r] = {}
        for col, name in cols.items():
            res["roles"][r][col], std["roles"][r][col] = agg(name, r)
    res["spcn_over_bigru_within"] = res["within"]["traces"] / res["within"]["bigru"]
    res["seeds"], res["seconds"], res["std"], res["paper"] = len(runs), seconds, std, PAPER
    return res


def write_markdown(res, path, argv):
    s, p = res["std"], PAPER
    f = lambda g, k: f"{res[g][k]:.3f} ± {s[g][k]:.3f}"
    rv = res["roles"]["rc_verb"], s["roles"]["rc_verb"]
    lines = [
        f"# Role probes: SPCN (EMA traces) vs supervised BiGRU ({res['seeds']} seeds, "
        f"{res['seconds']:.0f} s)", "", f"Command: `python probe.py {' '.join(argv)}`", "",
        "| quantity | this run (mean ± std) | paper |", "|---|---|---|",
        f"| probe within A, instantaneous activity | {f('within', 'instantaneous')} | {p['within_instantaneous']:.3f} |",
        f"| probe within A, activity + EMA traces | {f('within', 'traces')} | {p['within_traces']:.3f} |",
        f"| BiGRU within A | {f('within', 'bigru')} | - |",
        f"| SPCN / BiGRU within A | {res['spcn_over_bigru_within']:.1%} | {p['spcn_over_bigru']:.0%} |",
        f"| transfer A -> B overall, SPCN | {f('transfer', 'spcn')} | {p['transfer_spcn']:.3f} |",
        f"| transfer A -> B overall, BiGRU | {f('transfer', 'bigru')} | - |",
        f"| deep-embedded roles, transfer, SPCN | {f('deep_embedded', 'spcn')} | {p['deep_embedded']:.2f} |",
        f"| deep-embedded roles, transfer, BiGRU | {f('deep_embedded', 'bigru')} | - |",
        f"| deep-embedded roles, within A, SPCN / BiGRU | {res['deep_embedded_within']['spcn']:.3f} / {res['deep_embedded_within']['bigru']:.3f} | - |",
        f"| rc_verb transfer, SPCN | {rv[0]['transfer_spcn']:.3f} ± {rv[1]['transfer_spcn']:.3f} | {p['rc_verb_transfer_spcn']:.3f} |",
        f"| rc_verb transfer, BiGRU | {rv[0]['transfer_bigru']:.3f} ± {rv[1]['transfer_bigru']:.3f} | {p['rc_verb_transfer_bigru']:.3f} |",
        f"| content roles transfer, SPCN / BiGRU | {res['content_transfer']['spcn']:.3f} / {res['content_transfer']['bigru']:.3f} | BiGRU better |",
        "", "rc_verb in transfer, by construction (SPCN / BiGRU): " + "; ".join(
            f"{desc} {res['rc_verb_transfer_by_context'][f'spcn_after_{c}']:.3f} / "
            f"{res['rc_verb_transfer_by_context'][f'bigru_after_{c}']:.3f}"
            for c, desc in RC_VERB_CONTEXTS.items()),
        "", "## Per role (mean over seeds)", "",
        "| role | kind | within SPCN | within BiGRU | transfer SPCN | transfer BiGRU |",
        "|---|---|---|---|---|---|"]
    for r, d in res["roles"].items():
        lines.append(f"| {r} | {d['kind']} | {d['within_spcn']:.3f} | {d['within_bigru']:.3f} | "
                     f"{d['transfer_spcn']:.3f} | {d['transfer_bigru']:.3f} |")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def plot_roles(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = list(res["roles"])
    fig, axes = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True)
    x = torch.arange(len(roles)).float()
    for ax, split_name in zip(axes, ("within", "transfer")):
        for off, who, color in ((-0.2, "spcn", "tab:blue"), (0.2, "bigru", "tab:orange")):
            vals = [res["roles"][r][f"{split_name}_{who}"] for r in roles]
            ax.bar(x + off, vals, width=0.4, color=color,
                   label="SPCN (activity + traces)" if who == "spcn" else "BiGRU (supervised)")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"{split_name} accuracy")
        ax.set_title("within Grammar A (held-out)" if split_name == "within"
                     else "transfer: trained on A, tested on B", fontsize=10)
    axes[0].legend(loc="lower left", fontsize=8)
    axes[1].set_xticks(x.tolist())
    axes[1].set_xticklabels(roles, rotation=60, ha="right", fontsize=8)
    for lab, r in zip(axes[1].get_xticklabels(), roles):
        lab.set_color("tab:red" if res["roles"][r]["kind"] == "content" else "black")
    fig.suptitle("Role accuracy per role (red labels: content roles)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def get_parser():
    p = argparse.ArgumentParser(description="SPCN role probes vs a supervised BiGRU (A -> B).")
    io = p.add_argument_group("I/O")
    io.add_argument("--out_dir", default="results/probe", help="where results.* are written")
    io.add_argument("--load_spcn", default="", help="spcn.pt from `python spcn.py` (else train)")
    data = p.add_argument_group("data")
    data.add_argument("--n_train", type=int, default=2000, help="training sentences per grammar")
    data.add_argument("--n_val", type=int, default=500, help="validation sentences (tuning)")
    data.add_argument("--n_test", type=int, default=1000, help="held-out test sentences")
    data.add_argument("--data_seed", type=int, default=0, help="split seed = data_seed + seed")
    model = p.add_argument_group("model (SPCN)")
    d = spcn.SPCNConfig()
    model.add_argument("--n_columns", type=int, default=d.n_columns, help="K columns")
    model.add_argument("--column_size", type=int, default=d.column_size, help="U units per column")
    model.add_argument("--k", type=int, default=d.k, help="winners per column")
    model.add_argument("--alphas", type=float, nargs="+", default=list(d.alphas), help="trace decays")
    model.add_argument("--feedback_gain", type=float, default=d.feedback_gain,
                       help="g: top-down bias in the percept's competition")
    opt = p.add_argument_group("optimization")
    opt.add_argument("--spcn_epochs", type=int, default=2, help="PGHU passes over A-train")
    opt.add_argument("--spcn_lr", type=float, default=d.lr, help="PGHU rate eta")
    opt.add_argument("--l2", type=float, default=1e-2, help="probe L2 penalty (chosen on the val splits)")
    opt.add_argument("--probe_iters", type=int, default=100, help="L-BFGS iterations per probe")
    opt.add_argument("--gru_embd", type=int, default=32, help="BiGRU word embedding size")
    opt.add_argument("--gru_hidden", type=int, default=64, help="BiGRU hidden size per direction")
    opt.add_argument("--gru_epochs", type=int, default=6, help="BiGRU epochs (best on A-val kept)")
    opt.add_argument("--gru_batch", type=int, default=32, help="BiGRU sentences per step")
    opt.add_argument("--gru_lr", type=float, default=3e-3, help="BiGRU Adam learning rate")
    ev = p.add_argument_group("evaluation")
    ev.add_argument("--seeds", type=int, default=3, help="number of seeds (>= 1)")
    sysg = p.add_argument_group("system")
    sysg.add_argument("--threads", type=int, default=1,
                      help="torch CPU threads (1: the per-word SPCN steps are small matmuls)")
    return p


def main(args, argv=None):
    ema.configure_allocator()
    torch.set_num_threads(args.threads)
    if args.seeds < 1 or min(args.n_train, args.n_val, args.n_test) < 1:
        raise ValueError("--seeds, --n_train, --n_val and --n_test must all be >= 1")
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.time()
    log = lambda msg: print(f"[{time.time() - t0:6.1f} s] {msg}", flush=True)
    runs = [run_seed(args, s, log) for s in range(args.seeds)]
    res = summarise(runs, time.time() - t0)
    res["args"] = vars(args)
    with open(os.path.join(args.out_dir, "results.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    write_markdown(res, os.path.join(args.out_dir, "results.md"),
                   argv if argv is not None else [f"--out_dir {args.out_dir}"])
    plot_roles(res, os.path.join(args.out_dir, "roles.png"))
    log(f"wrote {args.out_dir}/results.json, results.md, roles.png | within: instantaneous "
        f"{res['within']['instantaneous']:.3f} traces {res['within']['traces']:.3f} BiGRU "
        f"{res['within']['bigru']:.3f} | transfer: SPCN {res['transfer']['spcn']:.3f} BiGRU "
        f"{res['transfer']['bigru']:.3f} | rc_verb transfer SPCN "
        f"{res['roles']['rc_verb']['transfer_spcn']:.3f} BiGRU "
        f"{res['roles']['rc_verb']['transfer_bigru']:.3f}")
    return res


if __name__ == "__main__":
    import sys
    main(get_parser().parse_args(), sys.argv[1:])

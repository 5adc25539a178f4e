"""Role probes: SPCN traces, with and without Hebbian learning, against supervised GRU taggers.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Small scale: SPCN", its results
table: probe accuracy within Grammar A with instantaneous activity (0.795) and with traces
(0.960), SPCN at 96% of a supervised BiGRU, transfer A -> B overall 61.8%, deep-embedded roles
84%, relative-clause verb in transfer 89.3% (SPCN) vs 7.9% (BiGRU), BiGRU better on content
(noun) roles in transfer.

What one run does, for each seed s (data split, SPCN projection, probes and taggers all seeded):
    1. grammar.split: A/B train, val, test sentences (aligned; no sentence shared by splits)
    2. SPCN trained by PGHU on A-train text, no labels (or loaded with --load_spcn), and its
       untrained control: the same frozen projection and traces, P = 0, no PGHU update
       (`--spcn_epochs 0` makes the two the same network)
    3. representations per word: instantaneous = bottom-up activity a_t (B, T, D);
       traces = [percept r_t, EMA traces h_t] (B, T, (S+1) 2D)
    4. multinomial logistic-regression probes (L2, L-BFGS) fit on A-train roles, for the
       trained SPCN (instantaneous and traces) and the untrained one (traces); tested on
       A-test (within) and B-test (transfer)
    5. two supervised taggers, word embeddings -> GRU -> linear, trained with Adam on A-train
       roles, epoch chosen on A-val: the paper's bidirectional GRU (reads the whole sentence)
       and a causal GRU, the same with its backward direction removed (reads the left context
       only, like the SPCN). B's words never occur in training, so their embeddings stay at
       their random initialisation.
Accuracies are per token; "per role" is the recall of that role; deep-embedded = tokens whose
role is in grammar.DEEP_ROLES; content / structural = roles by grammar.ROLE_KIND.

Shape glossary: B sentences, T words, D SPCN units, S traces, N tokens (non-padding), F
features, R roles, E embedding, H GRU hidden size per direction.

Choices, written out once in PAPER.md ("Choices in probe.py"): 1 logistic-regression probes;
2 the BiGRU on word embeddings; 3 the causal GRU and untrained SPCN controls; 4 every setting
chosen on validation splits; 5 deep-embedded reported in transfer. results.json["params"] gives
the parameter counts of both GRUs.

Run: `python probe.py` (3 seeds) -> out/probe/results.json, results.md, roles.png, one progress
line per stage and seed; `python probe.py --out_dir results/probe` refreshes the committed
reference, results/probe/results.md holds its numbers. `python probe.py fit` only trains an
SPCN on Grammar A (no labels) and saves out/spcn/spcn.pt for `--load_spcn` (`--epochs 0`: the
untrained network).
`python probe.py --quick` (QUICK: one seed, half the sentences, half the L-BFGS iterations,
4 tagger epochs) -> out/probe_quick/, ending in a verdict line: do the traces lift within-A role
accuracy by >= 0.3 over the instantaneous code (the full run's numbers: results/probe/results.md)?
Every committed number comes from the full run.
"""

import dataclasses
import os
import sys
import time
from dataclasses import dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "probe.py")  # until main_guard; the imports below take seconds

import torch
import torch.nn.functional as F

from plumbing import checkpoint, cli, grid, tables
import grammar
import spcn

PAPER = {"within_instantaneous": 0.795, "within_traces": 0.960, "spcn_over_bigru": 0.96,
         "transfer_spcn": 0.618, "deep_embedded": 0.84, "rc_verb_transfer_spcn": 0.893,
         "rc_verb_transfer_bigru": 0.079}
QUICK = dict(quick=True, seeds=1, n_train=1000, n_val=250, n_test=500, probe_iters=50, gru_epochs=4,
             out_dir="out/probe_quick")  # --quick, under the flags typed
QUICK_TRADES = ("quick mode: 1 seed instead of 3, 1000/250/500 sentences per grammar instead of 2000/500/1000, 50 "
                "L-BFGS iterations per probe instead of 100, 4 tagger epochs instead of 6. Every committed number "
                "comes from the full run, `python probe.py`.")
LIFT = 0.3  # the quick verdict: traces lift within-A role accuracy by at least this over the instantaneous code
# the four readers of the grammar, in table order
WHO = {"spcn": "SPCN, PGHU", "untrained": "SPCN, untrained", "gru": "causal GRU", "bigru": "BiGRU"}

# One flag per SPCN setting, its help written here once; defaults and checks are SPCNConfig's own.
# ProbeConfig and FitConfig both inherit these flags (the seed of the projection is per run).
SPCN_HELP = dict(n_columns=("K columns", (1, 4096)), column_size=("U units per column", (1, 4096)),
                 k=("winners per column, 1..column_size", (1, 4096)), alphas=("trace decays alpha_s in (0, 1]", (0, 1)),
                 feedback_gain=("g: amplitude of the predictive units", (0, 1e6)),
                 lr=("eta: PGHU learning rate (0: no learning)", (0, 1e6)),
                 var_rate=("rho: rate of the running error variance", (0, 1)),
                 eps=("floor added to the error variance", (0, 1e6)))  # flag -> (help, bounds)


def spcn_config(self, seed):
    """The SPCNConfig these flags describe, with the projection seed `seed`."""
    return spcn.SPCNConfig(**{name: getattr(self, name) for name in SPCN_HELP}, seed=seed)


SPCNFlags = dataclasses.make_dataclass(
    "SPCNFlags", [(f.name, f.type, cli.arg(f.default, SPCN_HELP[f.name][0], group="model (SPCN)",
                                           bounds=SPCN_HELP[f.name][1]))
                  for f in dataclasses.fields(spcn.SPCNConfig) if f.name in SPCN_HELP],
    namespace=dict(spcn_config=spcn_config))


@dataclass
class ProbeConfig(SPCNFlags):
    out_dir: str = cli.arg("out/probe", "where results.json, results.md, roles.png are written", group="I/O")
    load_spcn: str = cli.arg("", "spcn.pt from `python probe.py fit` (its own settings; else train one per seed)",
                             group="I/O")
    n_train: int = cli.arg(2000, "training sentences per grammar", group="data", bounds=(1, 10 ** 7))
    n_val: int = cli.arg(500, "validation sentences (tuning, tagger epoch choice)", group="data", bounds=(1, 10 ** 7))
    n_test: int = cli.arg(1000, "held-out test sentences", group="data", bounds=(1, 10 ** 7))
    data_seed: int = cli.arg(0, "split seed = data_seed + seed", group="data", bounds=(0, 2 ** 31))
    spcn_epochs: int = cli.arg(2, "PGHU passes over A-train (0: no learning, the untrained net)",
                               group="optimization", bounds=(0, 10 ** 6))
    l2: float = cli.arg(1e-2, "probe L2 penalty (chosen on the val splits)", group="optimization", bounds=(0, 10 ** 6))
    probe_iters: int = cli.arg(100, "L-BFGS iterations per probe", group="optimization", bounds=(1, 10 ** 7))
    gru_embd: int = cli.arg(32, "E: tagger word embedding size", group="optimization", bounds=(1, 2 ** 16))
    gru_hidden: int = cli.arg(64, "H: tagger hidden size per direction", group="optimization", bounds=(1, 2 ** 16))
    gru_epochs: int = cli.arg(6, "tagger epochs (best on A-val kept)", group="optimization", bounds=(1, 10 ** 6))
    gru_batch: int = cli.arg(32, "tagger sentences per step", group="optimization", bounds=(1, 2 ** 20))
    gru_lr: float = cli.arg(3e-3, "tagger Adam learning rate", group="optimization", bounds=(0, 10))
    seeds: int = cli.arg(3, "number of seeds", group="evaluation", bounds=(1, 100))
    threads: int = cli.arg(1, "torch CPU threads (1: the per-word SPCN steps are small matmuls)",
                           group="system", bounds=cli.THREADS)
    quick: bool = cli.arg(False, "the quick mode: " + ", ".join(
        f"{k}={v}" for k, v in QUICK.items() if k != "quick") + " unless given; ends with a verdict line",
        group="quick mode")

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        self.alphas = tuple(self.alphas)
        req = cli.require
        req(self.gru_lr > 0, "--gru_lr must be > 0, got {}", self.gru_lr)
        req(not self.load_spcn or os.path.isfile(self.load_spcn),
            "--load_spcn: no file at {}; make one with `python probe.py fit`", self.load_spcn)
        model_settings(lambda: self.spcn_config(0))  # validates the SPCN's fields, with their flag names


def model_settings(make):
    """make() -> an SPCNConfig; its one-line ValueError becomes a cli.ConfigError (exit 2)."""
    try:
        return make()
    except ValueError as e:
        raise cli.ConfigError(str(e)) from None


# --- representations and linear probes -----------------------------------------------------


def representations(model, ids):
    """Reference: one padded run. ids (B, T) -> ({'instantaneous': a (B, T, D), 'traces':
    [r, h] (B, T, (S+1) 2D)}, mean squared prediction error per unit and token)."""
    a, r, h, err = model.run(ids)
    return {"instantaneous": a, "traces": torch.cat([r, h.flatten(2)], dim=-1)}, err


def features(model, ids, batch_size=256):
    """Fast path of tokens(representations(...)): the same per-token features (N, F), in the
    order of ids[ids >= 0], computed in batches of similar length so that padding costs
    nothing (a sentence's features do not depend on its batch). Returns (dict, error)."""
    lengths = (ids >= 0).sum(1)  # (B,)
    offsets = lengths.cumsum(0) - lengths  # (B,) row of each sentence's first token
    order = lengths.argsort(descending=True, stable=True)  # (B,) longest first
    out, sq = {}, 0.0
    for i in range(0, len(ids), batch_size):
        idx = order[i:i + batch_size]
        L = int(lengths[idx].max())
        reps, err = representations(model, ids[idx, :L])  # (b, L, ...)
        mask = torch.arange(L) < lengths[idx, None]  # (b, L)
        rows = (offsets[idx, None] + torch.arange(L))[mask]  # (n,)
        for kind, x in reps.items():
            if kind not in out:
                out[kind] = torch.empty(int(lengths.sum()), x.shape[-1])  # (N, F)
            out[kind][rows] = x[mask]
        sq += err * int(mask.sum())
    return out, sq / max(int(lengths.sum()), 1)


def tokens(x, roles):
    """Drop padding: x (B, T, ...) and roles (B, T) -> x (N, ...), roles (N,)."""
    keep = roles >= 0
    return x[keep], roles[keep]


def fit_probe(X, y, l2, iters, n_classes=len(grammar.ROLES), drop_constant=True):
    """Multinomial logistic regression on standardised features, full-batch L-BFGS.

    minimise  mean_n CE(softmax(W^T z_n + b), y_n) + l2 * ||W||^2,  z = (x - mu) / sd.
    X (N, F), y (N,) -> predict(X) -> (N,) role ids.
    drop_constant: a feature constant on the training tokens has z = 0 there, so its weights
    get zero gradient and stay at their zero start; leaving it out gives the same probe,
    faster (the untrained SPCN's predictive units are all zero).
    """
    keep = (X.amax(0) > X.amin(0)).nonzero().squeeze(1) if drop_constant else torch.arange(X.shape[1])
    Z = X[:, keep]  # (N, F') a copy, standardised in place
    mu, sd = Z.mean(0), Z.std(0) + 1e-3  # (F',)
    Z.sub_(mu).div_(sd)
    W = torch.zeros(Z.shape[1], n_classes, requires_grad=True)  # (F', R)
    b = torch.zeros(n_classes, requires_grad=True)  # (R,)
    opt = torch.optim.LBFGS([W, b], max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(Z @ W + b, y) + l2 * (W ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    W, b = W.detach(), b.detach()
    return lambda X: (((X[:, keep] - mu) / sd) @ W + b).argmax(-1)


# --- the supervised baselines -----------------------------------------------------------------


class GRUTagger(torch.nn.Module):
    """Word embeddings -> 1-layer GRU -> linear role classifier. bidirectional=True is the
    paper's BiGRU (each word sees the whole sentence); False is causal (words up to t only)."""

    def __init__(self, vocab_size, n_embd, n_hidden, n_roles, bidirectional):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, n_embd)  # N(0, 1) init, PyTorch default
        self.gru = torch.nn.GRU(n_embd, n_hidden, batch_first=True, bidirectional=bidirectional)
        self.head = torch.nn.Linear((2 if bidirectional else 1) * n_hidden, n_roles)

    def forward(self, ids, lengths):
        """ids (B, T) with padding -1, lengths (B,) -> logits (B, T, R)."""
        x = self.emb(ids.clamp(min=0))  # (B, T, E)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                         enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                        total_length=ids.shape[1])  # (B, T, 2H or H)
        return self.head(out)  # (B, T, R)


def train_tagger(train, val, cfg, seed, bidirectional):
    """Adam on A-train roles; keep the epoch with the best A-val accuracy. Returns the model."""
    torch.manual_seed(seed)
    model = GRUTagger(len(grammar.VOCAB), cfg.gru_embd, cfg.gru_hidden, len(grammar.ROLES), bidirectional)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.gru_lr)
    ids, roles, lengths = train
    g = torch.Generator().manual_seed(seed)
    best, best_state = -1.0, None
    for _ in range(cfg.gru_epochs):
        model.train()
        order = torch.randperm(len(ids), generator=g)
        for i in range(0, len(ids), cfg.gru_batch):
            j = order[i:i + cfg.gru_batch]
            logits = model(ids[j], lengths[j])  # (b, T, R)
            loss = F.cross_entropy(logits.flatten(0, 1), roles[j].flatten(), ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
        acc = accuracy(tagger_predict(model, val), val[1])["overall"]
        if acc > best:
            best, best_state = acc, {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    return model


def tagger_predict(model, data):
    ids, roles, lengths = data
    model.eval()
    with torch.no_grad():
        pred = model(ids, lengths).argmax(-1)  # (B, T)
    return pred[roles >= 0]  # (N,)


# --- scoring ------------------------------------------------------------------------------------


def accuracy(pred, roles):
    """pred (N,) and roles (B, T) or (N,) -> overall, deep, content, structural and per-role."""
    y = roles[roles >= 0] if roles.dim() > 1 else roles
    ok = (pred == y).float()
    mask = lambda names: torch.isin(y, torch.tensor([grammar.ROLE_ID[r] for r in names]))
    out = {"overall": ok.mean().item(), "deep": ok[mask(grammar.DEEP_ROLES)].mean().item(),
           "content": ok[mask(grammar.CONTENT_ROLES)].mean().item(),
           "structural": ok[~mask(grammar.CONTENT_ROLES)].mean().item()}
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
    out = {}
    for c in RC_VERB_CONTEXTS:
        sel = (y == grammar.ROLE_ID["rc_verb"]) & (prev == grammar.ROLE_ID[c])  # (N,)
        out[f"rc_verb_after_{c}"] = (pred[sel] == y[sel]).float().mean().item()
    return out


def score(pred, roles):
    return {**accuracy(pred, roles), **rc_verb_by_context(pred, roles)}


def probe_spcn(model, who, enc, cfg, out, log, seed):
    """Probe one SPCN's representations; fills out[f'{within|transfer}_{who}'] (and the
    instantaneous rows for the trained one) and out['prediction_error'][who]."""
    feats = {key: features(model, enc[key][0]) for key in [("A", "train"), ("A", "test"), ("B", "test")]}
    out["prediction_error"][who] = {"within": feats[("A", "test")][1], "transfer": feats[("B", "test")][1]}
    y = enc[("A", "train")][1]
    y = y[y >= 0]  # (N,) A-train roles, in the order of the features
    for kind in ("instantaneous", "traces") if who == "spcn" else ("traces",):
        name = who if kind == "traces" else "instantaneous"
        predict = fit_probe(feats[("A", "train")][0][kind], y, cfg.l2, cfg.probe_iters)
        for gr, split_name in (("A", "within"), ("B", "transfer")):
            out[f"{split_name}_{name}"] = score(predict(feats[(gr, "test")][0][kind]), enc[(gr, "test")][1])
        log(f"seed {seed}: probe {WHO[who] + ' ' + kind:30s} within {out['within_' + name]['overall']:.3f}"
            f"  transfer {out['transfer_' + name]['overall']:.3f}")


def run_seed(cfg, seed, log, loaded=None):
    """Everything for one seed -> {'within_instantaneous': scores, ..., 'transfer_bigru': ...,
    'prediction_error': {...}, 'params': {...}}."""
    torch.manual_seed(seed)
    data = grammar.split(cfg.n_train, cfg.n_val, cfg.n_test, seed=cfg.data_seed + seed)
    enc = {(gr, s): grammar.encode(data[gr][s]) for gr in grammar.GRAMMARS
           for s in ("train", "val", "test")}
    log(f"seed {seed}: data {cfg.n_train}/{cfg.n_val}/{cfg.n_test} sentences per grammar")

    model = loaded
    if model is None:
        model = spcn.SPCN(cfg.spcn_config(seed))
        errs = model.fit(data["A"]["train"], epochs=cfg.spcn_epochs, log=None)
        log(f"seed {seed}: SPCN trained by PGHU, prediction error " +
            (f"{errs[0]:.4f} -> {errs[-1]:.4f}" if errs else "- (0 epochs: untrained)"))
    untrained = spcn.SPCN(model.cfg)  # the same frozen projection, P = 0
    out = {"prediction_error": {}}
    probe_spcn(model, "spcn", enc, cfg, out, log, seed)
    if torch.equal(model.P, untrained.P) and torch.equal(model.W_ff, untrained.W_ff):
        # no PGHU change (0 epochs or eta = 0): the same network, so the same numbers
        for split_name in ("within", "transfer"):
            out[f"{split_name}_untrained"] = out[f"{split_name}_spcn"]
        out["prediction_error"]["untrained"] = out["prediction_error"]["spcn"]
    else:
        probe_spcn(untrained, "untrained", enc, cfg, out, log, seed)

    out["params"] = {}
    for who, bidirectional in (("bigru", True), ("gru", False)):
        tagger = train_tagger(enc[("A", "train")], enc[("A", "val")], cfg, seed, bidirectional)
        out["params"][who] = sum(p.numel() for p in tagger.parameters())
        for gr, split_name in (("A", "within"), ("B", "transfer")):
            out[f"{split_name}_{who}"] = score(tagger_predict(tagger, enc[(gr, "test")]), enc[(gr, "test")][1])
        log(f"seed {seed}: {WHO[who]:14s} within {out['within_' + who]['overall']:.3f}"
            f"  transfer {out['transfer_' + who]['overall']:.3f}")
    return out


# --- `python probe.py fit`: only train an SPCN on Grammar A and save it --------------------------


@dataclass
class FitConfig(SPCNFlags):
    out_dir: str = cli.arg("out/spcn", "folder for spcn.pt", group="I/O")
    n_train: int = cli.arg(2000, "Grammar A training sentences", group="data", bounds=(1, 10 ** 7))
    data_seed: int = cli.arg(0, "seed of grammar.split", group="data", bounds=(0, 2 ** 31))
    seed: int = cli.arg(spcn.SPCNConfig.seed, "seed of the frozen random projection", group="model (SPCN)",
                        bounds=cli.SEED)
    epochs: int = cli.arg(2, "PGHU passes over the training sentences (0: save the untrained net)",
                          group="optimization", bounds=(0, 10 ** 6))
    batch_size: int = cli.arg(64, "sentences per PGHU step", group="optimization", bounds=(1, 2 ** 20))

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        model_settings(lambda: self.spcn_config(self.seed))  # validates the model fields


def get_fit_parser():
    p = cli.parser(FitConfig, "Train the SPCN on Grammar A with PGHU (no labels) and save it.")
    p.prog = "probe.py fit"
    return p


def fit(cfg):
    """`python probe.py fit`: train an SPCN as FitConfig says and save it to out_dir/spcn.pt -> {errors, path}."""
    torch.set_num_threads(1)  # small matmuls: one thread is fastest and polite on 2 cores
    checkpoint.make_out_dir(cfg.out_dir)
    model = spcn.SPCN(cfg.spcn_config(cfg.seed))
    train = grammar.split(cfg.n_train, 0, 0, seed=cfg.data_seed)["A"]["train"]
    t0 = time.time()
    errs = model.fit(train, epochs=cfg.epochs, batch_size=cfg.batch_size)
    path = os.path.join(cfg.out_dir, "spcn.pt")
    spcn.save(model, path)
    curve = f"prediction error {errs[0]:.4f} -> {errs[-1]:.4f}" if errs else "untrained (0 epochs)"
    print(f"saved {path} ({time.time() - t0:.1f} s); {curve}")
    return {"errors": errs, "path": path}


# --- outputs --------------------------------------------------------------------------------------


def summarize(per_seed, seconds):
    """Per-seed score dicts -> the results.json dictionary (means, with stds beside)."""
    def agg(name, key):
        return tables.mean_std([r[name][key] for r in per_seed])

    every = lambda split_name, key: {w: (f"{split_name}_{w}", key) for w in WHO}
    within = every("within", "overall")
    within["traces"] = within.pop("spcn")
    table = {"within": {"instantaneous": ("within_instantaneous", "overall"), **within},
             "transfer": every("transfer", "overall"),
             "deep_embedded": every("transfer", "deep"),
             "deep_embedded_within": every("within", "deep"),
             "content_transfer": every("transfer", "content"),
             "structural_transfer": every("transfer", "structural"),
             "transfer_instantaneous": {"spcn": ("transfer_instantaneous", "overall")},
             "rc_verb_transfer_by_context": {f"{w}_after_{c}": (f"transfer_{w}", f"rc_verb_after_{c}")
                                             for c in RC_VERB_CONTEXTS for w in WHO}}
    res, std = {}, {}
    for group, entries in table.items():
        res[group], std[group] = {}, {}
        for k, (name, key) in entries.items():
            res[group][k], std[group][k] = agg(name, key)
    res["roles"], std["roles"] = {}, {}
    for r in grammar.ROLES:
        res["roles"][r], std["roles"][r] = {"kind": grammar.ROLE_KIND[r]}, {}
        for split_name in ("within", "transfer"):
            for w in WHO:
                col = f"{split_name}_{w}"
                res["roles"][r][col], std["roles"][r][col] = agg(col, r)
    res["prediction_error"], std["prediction_error"] = {}, {}
    for w in ("spcn", "untrained"):
        res["prediction_error"][w], std["prediction_error"][w] = {}, {}
        for split_name in ("within", "transfer"):
            res["prediction_error"][w][split_name], std["prediction_error"][w][split_name] = \
                tables.mean_std([r["prediction_error"][w][split_name] for r in per_seed])
    res["params"] = per_seed[0]["params"]
    res["per_seed"] = [{name: {k: v[k] for k in ("overall", "deep", "content", "structural", "rc_verb")}
                        for name, v in r.items() if name.startswith(("within_", "transfer_"))}
                       for r in per_seed]
    res["spcn_over_bigru_within"] = res["within"]["traces"] / res["within"]["bigru"]
    res["seeds"], res["seconds"], res["std"], res["paper"] = len(per_seed), seconds, std, PAPER
    return res


def get_parser():
    return cli.parser(ProbeConfig, "SPCN role probes (trained and untrained) vs supervised causal GRU "
                                   "and BiGRU taggers, within Grammar A and A -> B.")


def main(cfg):
    """Run every seed, then write results.json, results.md and roles.png -> the results dict."""
    loaded = load_spcn(cfg.load_spcn) if cfg.load_spcn else None  # a bad file fails before any output
    checkpoint.make_out_dir(cfg.out_dir)  # one line before anything is trained
    with grid.locked(cfg.out_dir):  # one command per folder; a killed one's temp files removed
        return run_and_report(cfg, loaded)


def run_and_report(cfg, loaded):
    """main, in its locked folder."""
    if cfg.quick:
        print(QUICK_TRADES, flush=True)
    torch.set_num_threads(cfg.threads)
    t0 = time.time()
    log = lambda msg: print(f"[{time.time() - t0:6.1f} s] {msg}", flush=True)
    per_seed = [run_seed(cfg, s, log, loaded) for s in range(cfg.seeds)]
    res = tables.save_json(summarize(per_seed, time.time() - t0), os.path.join(cfg.out_dir, "results.json"),
                           "probe.py", cfg)
    tables.probe_md(res, os.path.join(cfg.out_dir, "results.md"), WHO, RC_VERB_CONTEXTS)
    tables.probe_plot(res, os.path.join(cfg.out_dir, "roles.png"))
    w, t, rv = res["within"], res["transfer"], res["roles"]["rc_verb"]
    log(f"wrote {cfg.out_dir}/results.json, results.md, roles.png | within: instantaneous "
        f"{w['instantaneous']:.3f} SPCN {w['traces']:.3f} untrained {w['untrained']:.3f} GRU {w['gru']:.3f} "
        f"BiGRU {w['bigru']:.3f} | transfer: SPCN {t['spcn']:.3f} untrained {t['untrained']:.3f} GRU "
        f"{t['gru']:.3f} BiGRU {t['bigru']:.3f} | rc_verb transfer: SPCN {rv['transfer_spcn']:.3f} untrained "
        f"{rv['transfer_untrained']:.3f} GRU {rv['transfer_gru']:.3f} BiGRU {rv['transfer_bigru']:.3f}")
    if cfg.quick:
        log(verdict(res)[0])
    return res


def verdict(res):
    """The structure half in one line: (line, holds), holds = the traces lift within-A role accuracy
    by at least LIFT over the instantaneous code."""
    w = res["within"]
    lift = w["traces"] - w["instantaneous"]
    return (f"verdict: within A, instantaneous {w['instantaneous']:.3f} -> traces {w['traces']:.3f} (untrained "
            f"{w['untrained']:.3f}): lift {lift:+.3f} " + (f">= {LIFT}: the traces carry the structure, as in the "
            f"full run (results/probe/results.md)" if lift >= LIFT else f"< {LIFT}: NOT the full run's result")), \
        lift >= LIFT


def parse(argv=None):
    """The ProbeConfig of a command line; --quick sets QUICK's values under the flags typed."""
    return cli.parse(ProbeConfig, get_parser(), argv, presets={"quick": QUICK})


def load_spcn(path):
    """spcn.load, its one-line LoadError (a missing or foreign file) as a cli.UserError."""
    try:
        return spcn.load(path)
    except spcn.LoadError as e:
        raise cli.UserError(f"--load_spcn: {e}") from e


if __name__ == "__main__":
    if sys.argv[1:2] == ["fit"]:  # `python probe.py fit [flags]`: only train an SPCN and save it
        fit_cfg = cli.parse(FitConfig, get_fit_parser(), sys.argv[2:])
        cli.main_guard(lambda: fit(fit_cfg), prog="probe.py fit")
    else:
        cfg = parse()
        cli.main_guard(lambda: main(cfg), prog="probe.py")

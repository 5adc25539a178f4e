"""Associative recall (MQAR): can a model read back a token it saw many steps ago?

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN", argues that
EMA traces destroy token identity, so no reader of the traces can recover it (the data
processing inequality). This script tests that claim where it can fail, on multi-query
associative recall (Arora et al. 2023, "Zoology"): a sequence lists N key-value pairs, then
asks for every key once; the model must answer each query with that key's value. Variants (the
named models of plumbing/registry.py, any of which --models takes, and one of recall's own), all
with the same width, depth, optimizer, data and token budget:
    gpt                      gpt.GPT: causal softmax attention over all past token states
    linear                   SPEN, the paper's predictor: a linear map of the S traces h_{t-1}
    softmax_state            SPEN, softmax attention over the S trace slots h_{t-1}^{1..S} only
    softmax_history          SPEN, softmax attention over every past (position, trace) slot
    linear_attn_history      SPEN, linear attention over every past (position, trace) slot
    selective                SPEN linear with input-dependent decays (context='selective'; the
                             committed reports call it selective_linear, read back as selective)
    selective_softmax_state  SPEN softmax_state with input-dependent decays
The data-processing argument is about the state a reader sees. State readers see S x C numbers
per layer whatever the length; history readers see the whole sequence of trace states, an
invertible transform of the inputs (u_t = (h_t - (1 - a) h_{t-1}) / a), so nothing is lost
before they read it; GPT's KV cache holds 2 x T x C numbers per layer.

Shape glossary
    B sequences, T tokens per sequence (block_size), N key-value pairs, C width, S traces (3),
    H heads, D = C / H head width, K key ids, M value ids (what a query retrieves).

The task (our choices, each stated because it decides what "recall" means):
    token ids   keys [0, K), values [K, K + M), one blank id K + M; vocab_size = K + M + 1
    sequence    k_1 v_1 k_2 v_2 ... k_N v_N, then --gap G noise tokens (default 0), each a value
                id drawn uniformly (Zoology's random_non_queries, restricted to values so that no
                key is ever repeated: a value in the gap follows no key and answers nothing), then
                T - 2N - G query positions: each key is asked exactly once, at a random position
                among the first --query_span x N of them (default 1: the N queries right after
                the pairs or the gap, in random order; 0: anywhere), every other position is
                blank. No value id ever occurs in the query region (nor does a blank after the
                last query change any answer: attention is causal), and within a sequence keys
                are distinct and paired values are distinct, so an answer can only come from its
                pair: nothing in the query region can be copied.
    targets     at a query position the target is that key's value; -1 (ignored) everywhere
                else: loss and accuracy count answer positions only. Accuracy is the argmax over
                the whole vocabulary being the right value.
    distance    key-to-query distance = query position - key position (>= 2)
    chance      1 / M (a uniform guess among value ids); 1 / N is what a model scores that
                knows which values occur in the sequence but not which key each belongs to.
    training    every batch holds an equal share of each pair count in --pairs (a mixture, as
                Zoology trains), fresh draws each step from the run's seed, after an
                curriculum (the first --curriculum steps hold the smallest N only, without the
                gap); validation and test sequences come from two other fixed seeds, the same for
                every run. The test sequences are never used to choose anything.

The recipe (one for every variant: the same data, steps, batch, optimizer and lr, so the table
is fair): AdamW at a constant lr (optional warmup and final linear decay), no weight decay by
default, clip 1.0, the curriculum above; why this recipe (GPT's 1/N plateau and what ends it) is
in results/recall/README.md. Every run is evaluated on the validation sequences every
--eval_every steps; the "plateau exit" of a variant at N pairs is the first evaluation whose
accuracy is above (1/N + 1) / 2, halfway from the plateau to perfect recall.

Capacity (the "state floats" column): numbers one layer's step() state holds after the test
length T: state readers S*C (the traces, whatever T), softmax history S*C + 2*T*S*C (the cached
keys and values of every slot), linear-attention history S*C + C*D + C (its running sums: bounded,
so a state reader of a larger state), GPT 2*T*C (the KV cache). The capacity column is a count
of linear memory, not a limit the readers meet: N C-wide values and their N C-wide keys stored
side by side take 2 N C numbers, so F numbers hold about F / (2C) such pairs (1.5 for the state
readers). The map (frontier.py, results/frontier) shows the count is not what binds: the additive
EMA stays at 1/N up to 24 decays, while the same three decays writing key-value products recall
most of 8 pairs in a state of the same order. The write loses the pairs, not the bytes.

Run (the measured times and numbers are in results/recall/recall.md and results/recall/far/)
    python recall.py                       # every variant, 1 seed: a line per finished run, then
                                           # recall.json, recall.md, recall.png and runs/
    python recall.py --seeds 2             # 2 seeds each: twice the default's time
    python recall.py --gap 40 --block_size 64    # far queries, behind 40 distractor values
    python recall.py --models gpt --query_span 0 --curriculum 0 --steps 3000
                                           # GPT without the curriculum, queries anywhere: the plateau
    python recall.py --quick               # both kinds of reader in minutes (the QUICK preset)
The quick mode trades the full run's breadth for time (QUICK: 4 of the 7 variants, 800 steps
instead of 1,500, 128 test sequences per N, one seed) and prints a verdict read at the largest
N (8): gpt and softmax_history answer >= 0.9 of the queries, every state reader's binding is
<= 0.1. It writes under out/recall_quick; every committed number comes from the full run.
Two single-threaded runs train at a time (--workers). Writes under --out_dir (default
out/recall); each finished run is saved at once as runs/VARIANT_sSEED.json beside its whole
config (plumbing/grid.py: reused only under the same config, never replaced by a run of other
settings, one command per folder; Ctrl-C saves what finished and the same command continues).
The reference numbers are in results/recall/.
"""

import dataclasses
import itertools
import json
import os
import platform
import time
from dataclasses import dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "recall.py")  # until main_guard; the imports below take seconds

import torch

from plumbing import checkpoint, cli, grid, records, registry, tables
import lm

# The models are the registry's (plumbing/registry.py: name -> Model(family, overrides); width, depth and heads
# are recall's), plus the one entry of recall's own below; any registry name is a --models choice.
OWN = {"selective_softmax_state": registry.Model("state, selective", dict(model="spen", predictor="softmax_attn",
                                                                         reads="state", context="selective"))}
DEFAULT = ("gpt", "linear", "softmax_state", "softmax_history", "linear_attn_history", "selective",
           "selective_softmax_state")  # the committed table's variants (results/recall)
RENAMED = {"selective_linear": "selective"}  # an old name -> the registry's: saved reports and flags still read
# --quick: these settings under the flags typed (how the step count was chosen: results/recall/README.md)
QUICK = dict(quick=True, models=("gpt", "softmax_history", "linear", "softmax_state"), steps=800, curriculum=300,
             decay=100, eval_every=200, test_seqs=128, seeds=1, out_dir="out/recall_quick")
QUICK_TRADES = ("quick mode: 4 of the 7 variants, 800 steps instead of 1,500 (curriculum 300, decay 100), 128 test "
                "sequences per N instead of 256, one seed; the verdict is read at the largest N. Every committed "
                "number comes from the full run, `python recall.py`.")
VAL_SEED, TEST_SEED = 10_001, 20_002  # data seeds of the validation and test sequences
DIST_BINS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # distance bin d in [lo, next lo)


@dataclass
class RecallConfig:
    out_dir: str = cli.arg("out/recall", "folder for recall.json, recall.md, recall.png and runs/ (one JSON per "
                           "finished run; a rerun with the same settings reuses them)", group="I/O")
    models: tuple = cli.arg(DEFAULT, "models to run: any name of plumbing/registry.py (python ablate.py --help "
                            "lists them) or " + " ".join(OWN), group="I/O", was=("variants",))
    pairs: tuple = cli.arg((2, 4, 8), "N, key-value pair counts trained (mixed) and tested", group="data",
                           bounds=(1, 4096))
    block_size: int = cli.arg(24, "T, tokens per sequence (needs T >= 3 max(N) + G)", group="data", bounds=(2, 2 ** 16))
    n_keys: int = cli.arg(8, "K, key ids", group="data", bounds=(1, 2 ** 16))
    n_values: int = cli.arg(64, "M, value ids (chance = 1/M)", group="data", bounds=(1, 2 ** 16))
    query_span: int = cli.arg(1, "the N queries fall among the first query_span x N positions after the pairs "
                              "(1: right after them, in random order; 0: anywhere in the T - 2N positions)",
                              group="data", bounds=(0, 2 ** 16))
    gap: int = cli.arg(0, "G, noise tokens between the pairs and the queries (value ids drawn uniformly): far "
                       "queries, and which values occurred no longer tells the answer", group="data",
                       bounds=(0, 2 ** 16))
    test_seqs: int = cli.arg(256, "test sequences per pair count", group="data", bounds=(1, 10 ** 6))
    val_seqs: int = cli.arg(64, "validation sequences per pair count (the learning curve)", group="data",
                            bounds=(1, 10 ** 6))
    n_layer: int = cli.arg(2, "blocks, every variant", group="model", bounds=(1, 64))
    n_embd: int = cli.arg(64, "C, width, every variant", group="model", bounds=(1, 8192))
    n_head: int = cli.arg(2, "attention heads (GPT and the SPEN attention readers)", group="model", bounds=(1, 8192))
    steps: int = cli.arg(1500, "optimizer steps per run, every variant (the token budget)", group="optimization",
                         bounds=(1, 10 ** 8))
    batch_size: int = cli.arg(64, "B, sequences per step, split evenly over --pairs", group="optimization",
                              bounds=(1, 2 ** 16))
    curriculum: int = cli.arg(500, "first steps that train on the smallest --pairs only and without --gap, then "
                              "the mixture", group="optimization", bounds=(0, 10 ** 8))
    lr: float = cli.arg(1e-3, "learning rate, every variant: constant after the warmup until the final decay",
                        group="optimization", bounds=(0, 10))
    warmup: int = cli.arg(0, "linear warmup steps", group="optimization", bounds=(0, 10 ** 8))
    decay: int = cli.arg(150, "final steps over which the lr falls linearly to 0 (warmup-stable-decay)",
                         group="optimization", bounds=(0, 10 ** 8))
    weight_decay: float = cli.arg(0.0, "AdamW weight decay on matrices", group="optimization", bounds=(0, 10))
    eval_every: int = cli.arg(100, "steps between validation evaluations (the learning curve)", group="evaluation",
                              bounds=(1, 10 ** 8))
    seeds: int = cli.arg(1, "seeds per variant (model init and training data)", group="evaluation", bounds=(1, 100))
    workers: int = cli.arg(2, "runs trained at a time, one thread each", group="system", bounds=cli.WORKERS)
    quick: bool = cli.arg(False, "the quick mode, about 3 minutes on 2 cores: " + ", ".join(
        f"{k}={' '.join(v) if isinstance(v, tuple) else v}" for k, v in QUICK.items() if k != "quick")
        + " unless given; prints a verdict at the largest N", group="quick mode")

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        self.models, self.pairs = tuple(RENAMED.get(v, v) for v in self.models), tuple(self.pairs)
        cli.require_names("models", self.models, names())
        cli.require(self.pairs, "--pairs must name at least one pair count")
        cli.require(self.block_size >= 3 * max(self.pairs) + self.gap,
                    "--block_size must be >= 3 x the largest --pairs + --gap ({}), got {}",
                    3 * max(self.pairs) + self.gap, self.block_size)
        cli.require(self.n_keys >= max(self.pairs) and self.n_values >= max(self.pairs),
                    "--n_keys and --n_values must be >= the largest --pairs ({})", max(self.pairs))
        cli.require(self.batch_size >= len(self.pairs), "--batch_size must be >= the number of --pairs ({}), got {}",
                    len(self.pairs), self.batch_size)
        cli.require(self.n_embd % self.n_head == 0, "--n_embd must be divisible by --n_head, got {} and {}",
                    self.n_embd, self.n_head)
        cli.require(self.warmup + self.decay <= self.steps,
                    "--warmup and --decay must be >= 0 with warmup + decay <= --steps, got {} and {}",
                    self.warmup, self.decay)
        cli.require(self.curriculum <= self.steps, "--curriculum must be in [0, --steps], got {}",
                    self.curriculum)
        for name in self.models:  # a hybrid names its own blocks: --n_layer must be its depth
            depth = len((registry.MODELS.get(name) or OWN[name]).blocks())
            cli.require(depth in (1, self.n_layer), "--models {} has {} blocks: run it with --n_layer {} (got {})",
                        name, depth, depth, self.n_layer)


def names():
    """Every model recall.py can train: the registry's, then its own (read when asked: a model
    registered after this import is one too)."""
    return tuple(registry.MODELS) + tuple(OWN)


def model_overrides(name):
    """(kind, config overrides) of a named model: its registry entry's TrainConfig overrides as the
    model config's fields (a per-block predictor as it is: SPENConfig reads it, variants.block_list)."""
    spec = dict((registry.MODELS.get(name) or OWN[name]).overrides)
    return spec.pop("model"), spec


def state_kind(name, T=2048):
    """What a named model's step() holds, from the model itself (built on the meta device at recall's
    default size, a per-block line at its own depth): 'traces' (the S trace vectors only), 'bounded'
    (more, but not growing from T to 2T tokens: T above any window) or 'grows' (a cache of the
    past, in any block); None for a name no longer known. dev/map.py reads it too: the one place a
    model is called bounded."""
    name = RENAMED.get(name, name)
    if name not in names():
        return None
    kind, overrides = model_overrides(name)
    blocks = (registry.MODELS.get(name) or OWN[name]).blocks()
    cfg = dataclasses.replace(RecallConfig(), n_layer=len(blocks)) if len(blocks) > 1 else RecallConfig()
    with torch.device("meta"):  # shapes only
        model = build_model(cfg, kind, {**overrides, "block_size": 2 * T})
    floats = model.state_floats(T)
    if floats != model.state_floats(2 * T):
        return "grows"
    alphas = getattr(model.config, "alphas", None)
    return "traces" if alphas and floats == len(alphas) * model.config.n_embd else "bounded"


def read_report(path):
    """A recall.json, its variants under their current names (RENAMED) and with the columns a later
    version derives from its numbers: a committed report renders the same numbers."""
    with open(path) as f:
        res = json.load(f)
    res["variants"] = {RENAMED.get(v, v): r for v, r in res["variants"].items()}
    for r in res["variants"].values():  # a report from before the binding column: derived from its accuracies
        r.setdefault("binding", {N: binding(a, int(N)) for N, a in r["acc"].items()})
    res["settings"] = cli.current_names(RecallConfig, res["settings"])  # its --variants read as --models
    res["settings"]["models"] = [RENAMED.get(v, v) for v in res["settings"]["models"]]
    return res


# ---------------------------------------------------------------------------------------------
# Data


def mqar(n_seq, n_pairs, T, n_keys, n_values, generator, span=0, gap=0):
    """n_seq MQAR sequences with n_pairs pairs -> idx (B, T), targets (B, T), distance (B, T).
    `gap` noise tokens follow the pairs (value ids drawn uniformly: distractors, none of them
    after a key); the N queries fall at random among the `span` positions after them (0: all
    T - 2N - gap of them; at most that); the rest is blank. targets is -1 except at query
    positions (the queried key's value); distance is the key-to-query distance there and 0
    elsewhere. Deterministic given the generator's state."""
    N, blank, start = n_pairs, n_keys + n_values, 2 * n_pairs + gap  # start: the first query position
    keys = torch.rand(n_seq, n_keys, generator=generator).argsort(1)[:, :N]  # (B, N) distinct keys
    values = n_keys + torch.rand(n_seq, n_values, generator=generator).argsort(1)[:, :N]  # (B, N) distinct
    span = min(span or T, T - start)
    slots = start + torch.rand(n_seq, span, generator=generator).argsort(1)[:, :N]  # (B, N) query i asks key i
    idx = torch.full((n_seq, T), blank, dtype=torch.long)
    idx[:, 0:2 * N:2], idx[:, 1:2 * N:2] = keys, values  # the pairs k_1 v_1 ... k_N v_N
    if gap:
        idx[:, 2 * N:start] = n_keys + torch.randint(n_values, (n_seq, gap), generator=generator)  # noise
    idx.scatter_(1, slots, keys)  # each key asked once; the rest of the query region stays blank
    targets = torch.full((n_seq, T), -1, dtype=torch.long).scatter_(1, slots, values)
    distance = torch.zeros(n_seq, T, dtype=torch.long).scatter_(1, slots, slots - 2 * torch.arange(N))
    return idx, targets, distance


def draw(cfg, n_seq, N, g):
    """n_seq sequences of cfg's task with N pairs (mqar with cfg's length, ids, span and gap)."""
    return mqar(n_seq, N, cfg.block_size, cfg.n_keys, cfg.n_values, g, cfg.query_span * N, cfg.gap)


def eval_set(cfg, n_seq, seed):
    """{N: (idx, targets, distance)}, one fixed set per pair count, from data seed `seed`."""
    g = torch.Generator().manual_seed(seed)
    return {N: draw(cfg, n_seq, N, g) for N in cfg.pairs}


def train_batch(cfg, g):
    """batch_size sequences split as evenly as possible over cfg.pairs -> idx, targets (B, T) each."""
    n_seq = cfg.batch_size
    shares = [n_seq // len(cfg.pairs) + (i < n_seq % len(cfg.pairs)) for i in range(len(cfg.pairs))]
    parts = [draw(cfg, b, N, g) for b, N in zip(shares, cfg.pairs)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def batches(cfg, seed):
    """The run's training batches, fresh draws from the run's seed: the first cfg.curriculum
    steps hold the smallest pair count only, with no gap (a curriculum), then the mixture of
    cfg.pairs with the gap."""
    g, first = torch.Generator().manual_seed(seed), dataclasses.replace(cfg, pairs=(min(cfg.pairs),), gap=0)
    for step in itertools.count():
        yield train_batch(first if step < cfg.curriculum else cfg, g)


# ---------------------------------------------------------------------------------------------
# Models


def build_model(cfg, kind, overrides):
    """A 'gpt' or 'spen' model (checkpoint.MODELS) for cfg's task: cfg's width, depth and heads,
    vocabulary K + M + 1, then its config overrides (a variant's, or a frontier point's). SPEN's
    FFN is its own default (4C wide, top 6% kept)."""
    Config, Model = checkpoint.MODELS[kind]
    shared = dict(vocab_size=cfg.n_keys + cfg.n_values + 1, block_size=cfg.block_size, n_layer=cfg.n_layer,
                  n_embd=cfg.n_embd, n_head=cfg.n_head)
    return Model(Config(**{**shared, **overrides}))


def lr_at(step, cfg):
    """Warmup-stable-decay: linear warmup to cfg.lr, constant, then linear to 0 over the last
    cfg.decay steps."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.lr * min(1.0, (cfg.steps - step) / cfg.decay) if cfg.decay else cfg.lr


def threshold(N):
    """Validation accuracy at N pairs that counts as off the 1/N plateau: halfway from 1/N to 1."""
    return (1 / N + 1) / 2


def binding(acc, N):
    """How far accuracy at N pairs is from the 1/N that knowing which values occurred gives,
    towards perfect recall: 0 on the plateau, 1 at perfect recall, < 0 below the plateau."""
    return (acc - 1 / N) / (1 - 1 / N)


def plateau_exit(curve, N):
    """First step of the learning curve [(step, {N: acc}), ...] whose accuracy at N pairs is above
    threshold(N); None if it never is."""
    return next((step for step, acc in curve if acc[str(N)] > threshold(N)), None)


@torch.no_grad()
def evaluate(model, sets, cfg):
    """Accuracy and loss at answer positions, per pair count and per distance bin (all N pooled)."""
    model.eval()
    acc, loss, hits, counts = {}, {}, torch.zeros(len(DIST_BINS)), torch.zeros(len(DIST_BINS))
    for N, (idx, targets, distance) in sets.items():
        right, total, nll = 0, 0, 0.0
        for i in range(0, len(idx), 128):
            logits, _ = model(idx[i:i + 128])  # (b, T, V)
            tgt, dist = targets[i:i + 128], distance[i:i + 128]
            mask = tgt >= 0
            ok = (logits.argmax(-1) == tgt)[mask]  # (answers,)
            nll += torch.nn.functional.cross_entropy(logits[mask], tgt[mask], reduction="sum").item()
            right, total = right + ok.sum().item(), total + ok.numel()
            b = torch.bucketize(dist[mask], torch.tensor(DIST_BINS), right=True) - 1  # bin of each answer
            hits += torch.bincount(b, weights=ok.float(), minlength=len(DIST_BINS))[:len(DIST_BINS)]
            counts += torch.bincount(b, minlength=len(DIST_BINS))[:len(DIST_BINS)].float()
        acc[str(N)], loss[str(N)] = right / total, nll / total
    by_dist = {str(lo): (hits[i] / counts[i]).item() for i, lo in enumerate(DIST_BINS) if counts[i] > 0}
    model.train()
    return dict(acc=acc, loss=loss, acc_distance=by_dist)


def run(job):
    """Train one (variant, seed) under the recipe (`train_and_test`)."""
    cfg, variant, seed = job
    torch.manual_seed(seed)
    return dict(train_and_test(cfg, build_model(cfg, *model_overrides(variant)), seed), variant=variant)


def train_and_test(cfg, model, seed):
    """The one recipe, for any model of the lm.py contract (recall.py's variants, frontier.py's
    grid): train on fresh batches from `seed`, the validation curve every eval_every steps, the
    step where it leaves the 1/N plateau at each N, and the final test evaluation. A loss that is
    not finite stops the run: it is saved with `diverged` (the step), and no table averages it."""
    t0, diverged = time.time(), None
    opt = lm.configure_optimizers(model, cfg.weight_decay, cfg.lr, (0.9, 0.98), "cpu")
    val, data, curve, train_loss = eval_set(cfg, cfg.val_seqs, VAL_SEED), batches(cfg, seed), [], []
    for step in range(cfg.steps + 1):
        if step % cfg.eval_every == 0 or step == cfg.steps:
            curve.append((step, evaluate(model, val, cfg)["acc"]))
        if step == cfg.steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        idx, targets = next(data)
        _, loss = model(idx, targets)
        if not torch.isfinite(loss):  # --lr too high, say: its accuracies would be those of a broken model
            diverged = step
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        train_loss.append(loss.item())
    tail = train_loss[-max(1, cfg.steps // 10):] or [float("nan")]  # mean of the last 10% of steps
    return dict(seed=seed, params=model.num_params(), state_floats=model.state_floats(cfg.block_size),
                diverged=diverged, train_loss=sum(tail) / len(tail), curve=curve, exit_step={str(N): plateau_exit(curve, N) for N in cfg.pairs},
                seconds=time.time() - t0, test=evaluate(model, eval_set(cfg, cfg.test_seqs, TEST_SEED), cfg))


PER_GRID = ("out_dir", "models", "seeds", "workers")  # which runs and where: no run's numbers depend on them
SAVED = dict(variant=str, seed=int, params=int, state_floats=int, curve=[list], seconds=tables.NUMBER,
             exit_step=tables.Each((int, type(None))), test={"acc": tables.Each(records.FRACTION),
                                                             "acc_distance": tables.Each(records.FRACTION)})
# what summarize reads, and its shape (grid.Grid checks it)


def run_settings(cfg):
    """The settings one run's numbers depend on (--quick only presets others: a run's key holds it off)."""
    return {k: v for k, v in dataclasses.asdict(dataclasses.replace(cfg, quick=False)).items() if k not in PER_GRID}


def run_key(cfg, variant):
    """Everything a (variant, seed) run's numbers depend on: a saved run is reused only under it."""
    return dict(recall=run_settings(cfg), variant=variant,
                model=dataclasses.asdict(build_model(cfg, *model_overrides(variant)).config))


def progress(r, done, todo, seconds):
    """The line printed as each run finishes."""
    if r.get("diverged") is not None:
        return (f"[{done}/{todo}] {r['variant']:<24s} seed {r['seed']} DIVERGED at step {r['diverged']} (loss not "
                f"finite: lower --lr); not tabled | elapsed {seconds:.0f} s")
    accs = " ".join(f"{N}:{a:.2f}" for N, a in r["test"]["acc"].items())
    return (f"[{done}/{todo}] {r['variant']:<24s} seed {r['seed']} test acc {accs} | plateau exit {r['exit_step']} | "
            f"train loss {r['train_loss']:.3f} | {r['seconds']:.0f} s | elapsed {seconds:.0f} s, ETA "
            f"{seconds / done * (todo - done):.0f} s")


# ---------------------------------------------------------------------------------------------
# Outputs


def summarize(cfg, results, seconds):
    """recall.json after its command and settings (tables.save_json): per variant, mean and std over
    seeds of test accuracy per pair count and distance, the plateau-exit step per seed and pair
    count, and the validation curves."""
    out = dict(seconds=round(seconds, 1), hardware=f"{platform.machine()} CPU, {os.cpu_count()} cores",
               chance=1.0 / cfg.n_values,
               run_seconds=round(sum(r["seconds"] for r in results), 1), reused=sum("reused" in r for r in results),
               threshold={str(N): threshold(N) for N in cfg.pairs}, variants={}, diverged=tables.diverged_runs(results))
    for v in cfg.models:
        rs = sorted((r for r in results if r["variant"] == v and r.get("diverged") is None), key=lambda r: r["seed"])
        if not rs:
            continue  # every seed diverged: listed under "diverged", never shown as a score
        stats = {N: tables.mean_std([r["test"]["acc"][N] for r in rs]) for N in rs[0]["test"]["acc"]}
        dist = {d: tables.mean_std([r["test"]["acc_distance"][d] for r in rs]) for d in rs[0]["test"]["acc_distance"]}
        out["variants"][v] = dict(acc={N: m for N, (m, s) in stats.items()},
                                  acc_std={N: s for N, (m, s) in stats.items()},
                                  binding={N: binding(m, int(N)) for N, (m, s) in stats.items()},
                                  acc_per_seed={N: [r["test"]["acc"][N] for r in rs] for N in stats},
                                  acc_distance={d: m for d, (m, s) in dist.items()},
                                  params=rs[0]["params"], state_floats=rs[0]["state_floats"],
                                  capacity_pairs=rs[0]["state_floats"] / (2 * cfg.n_embd),
                                  exit_step={N: [r["exit_step"][N] for r in rs] for N in stats},
                                  seconds=[round(r["seconds"], 1) for r in rs], curves=[r["curve"] for r in rs],
                                  diverged_seeds=[r["seed"] for r in results if r["variant"] == v and
                                                  r.get("diverged") is not None])
    return out


FIXED = ("traces", "bounded")  # the state kinds of a fixed size whatever T (dashed in the figures)


def dashed(res):
    """The variants of a report whose state has a fixed size whatever T (drawn dashed in recall.png)."""
    return {v for v in res["variants"] if state_kind(v) in FIXED}


def verdict(res, N=None):
    """The result in one line, read at N pairs (default the largest): do gpt and softmax_history
    answer >= 0.9 of the queries, and does every trace-state reader (state_kind) bind no better than 0.1
    above the 1/N plateau? -> (line, holds: True, False, or None if a needed variant is missing)."""
    N = str(N or max(res["settings"]["pairs"]))
    vs = res["variants"]
    readers = [v for v in ("gpt", "softmax_history") if v in vs]
    states = [v for v in vs if state_kind(v) == "traces"]  # the S-trace state readers (the
    # running sums of linear attention over the history are bounded too, but C x D of them: 16 pairs' worth)
    recall_ok = all(vs[v]["acc"][N] >= 0.9 for v in readers)
    state_ok = all(vs[v]["binding"][N] <= 0.1 for v in states)
    holds = (recall_ok and state_ok) if readers and states else None
    line = (f"verdict at N = {N}: accuracy " + ", ".join(f"{v} {vs[v]['acc'][N]:.3f}" for v in readers)
            + " (>= 0.9?); binding " + ", ".join(f"{v} {vs[v]['binding'][N]:+.3f}" for v in states)
            + " (<= 0.1?): " + {True: "the history readers and GPT recall, the state readers do not, as in the "
                                      "full run", False: "NOT the full run's result", None: "incomplete"}[holds])
    return line, holds


def main(cfg):
    """Train and test every (variant, seed) under the one recipe, or reuse the runs saved under
    the same config; returns the recall.json dict."""
    if cfg.quick:
        print(QUICK_TRADES, flush=True)
    t0, out = time.time(), lambda name: os.path.join(cfg.out_dir, name)
    jobs = [grid.Job(f"{v}_s{seed}", run_key(cfg, v), (cfg, v, seed))
            for seed in range(cfg.seeds) for v in cfg.models]
    with grid.Grid(cfg.out_dir, jobs, cli.command_line("recall.py", cfg), vars(cfg), SAVED) as cache:
        grid.refuse_emptier(out("recall.json"), lambda r: len(r["variants"]), len(cfg.models), "variants")
        print(f"recall: {len(jobs)} runs, {len(cache.saved)} already saved, {len(jobs) - len(cache.saved)} to train "
              f"({cfg.workers} at a time)", flush=True)  # the grid's size, announced before it starts
        results = cache.run(run, cfg.workers, progress)
        res = tables.save_json(summarize(cfg, results, time.time() - t0), out("recall.json"), "recall.py", cfg)
        tables.recall_md(res, out("recall.md"), VAL_SEED, TEST_SEED)
        tables.recall_plot(res, out("recall.png"), dashed(res))
    with open(out("recall.md")) as f:
        print(f.read())
    if cfg.quick:
        print(f"{verdict(res)[0]} | {res['seconds']:.0f} s wall", flush=True)
    return res


def get_parser():
    return cli.parser(RecallConfig, "MQAR associative recall: GPT vs SPEN state and history readers.")


def parse(argv=None):
    """The RecallConfig of a command line; --quick sets QUICK's values under the flags typed."""
    return cli.parse(RecallConfig, get_parser(), argv, presets={"quick": QUICK})


if __name__ == "__main__":
    config = parse()
    cli.main_guard(lambda: main(config), prog="recall.py")

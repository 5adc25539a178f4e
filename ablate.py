"""The LM ablation: which reader of the EMA traces, on real text, and where the loss goes.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN". The paper
swaps SPEN's predictor (static linear map, causal linear attention, full causal softmax
attention, all reading the same EMA traces), finds the same loss (7.60 vs 7.60 nats) and
concludes that no reader can recover what the traces lost. That argument holds for readers of
the trace STATE only (variants.py), so both families run here, with two controls:
    linear                SPEN, the paper's predictor: a linear map of h_{t-1}^1..S   (state)
    linear_attn_state     SPEN, linear attention over the S trace slots of h_{t-1}      (state)
    softmax_state         SPEN, softmax attention over the S trace slots of h_{t-1}     (state)
    linear_attn_history   SPEN, linear attention over every past (position, trace)    (history)
    softmax_history       SPEN, softmax attention over every past (position, trace)   (history)
    selective             SPEN linear with input-dependent decays (ours: a control)     (state)
    ema_kv                SPEN, the paper's decays writing key-value outer products     (write)
    delta                 SPEN, the delta rule writing key-value pairs                  (write)
    ema_kv_span, ema_kv_span_norm, ema_kv_wide, delta_decay, delta_norm: the write readers with
                          one of the ingredients the field reports (slower decays, a decay on
                          the delta rule, a normalised read: plumbing/registry.py)       (write)
    gpt                   GPT-2 style transformer (gpt.py), same width and depth
Every variant trains with the same width, depth, token budget and, for seed s, the same data
order (batches.get_batch is a pure function of (seed, step)); every loss is read against the
yardsticks of the validation corpus (corpus.baselines: add-one unigram and interpolated bigram,
counted on its train split; on bytes also zlib, bz2 and lzma on the val bytes, plumbing/ngram.py).

Where the loss goes: per-token losses split into recall hits and copies (plumbing/repeats.py), beside
the yardsticks' on the same tokens.

Shape glossary
    B windows, T tokens per window (block_size), V vocabulary, n seeds per variant,
    k tokens of context a copy must repeat (copy_k).

Noise rule: a difference of means counts when |d| > 2 SE, SE = sqrt(s_1^2 / n + s_2^2 / n),
s the sample standard deviations over the n seeds; otherwise "within seed noise". Applied to
every variant against `linear`, and to each history reader against its state counterpart.

Run
    python ablate.py                                  # preset cpu: registry.ABLATION x 2 seeds, + content.py
    python ablate.py --out_dir results/ablate         # refresh the committed reference
    python ablate.py --preset gpu --out_dir out/ablate_gpu   # larger, one CUDA GPU, offline (see PRESETS)
    python ablate.py --content_only                   # only the content probe of finished runs
    python ablate.py --preset cpu_bytes --out_dir results/ablate_bytes   # UTF-8 bytes, 6 readers
Writes ablate.json, ablate.md, curves.png (validation loss against tokens, with the yardsticks),
hits.png (the hit split), copy.png (the copy split) and, through content.py (BPE runs only),
content.json / content.png under --out_dir
(default out/ablate); run folders (checkpoints, logs, metrics.jsonl, result.json) under
OUT/runs/. A run whose result.json holds the same TrainConfig is reused, and a run stopped
mid-way (Ctrl-C) continues exactly from its ckpt_last.pt, so an interrupted ablation loses
nothing. ablate.json is the record: a later invocation with the same settings and other
--models adds its rows beside the earlier ones (their run folders may be gone: git keeps no
checkpoints), and one with other settings is refused in one line instead of replacing them.
While runs train, each running run says where it stands within the first minute and once a minute after
(grid.watching reads its metrics.jsonl; plain lines, on a terminal or in a log), e.g.
    [running 12:30] linear seed 0 | step 410/2000 | loss 5.4821 | 402 ms/step | eta 10.7 min
The reference numbers are in results/ablate/ (BPE) and results/ablate_bytes/ (bytes).
"""

import contextlib
import dataclasses
import json
import math
import os
import statistics
import time
import typing
from dataclasses import dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "ablate.py")  # until main_guard; the imports below take seconds

import numpy as np
import torch

from plumbing import checkpoint, cli, corpus, grid, ngram, records, registry, repeats, tables
import content
import train

PAIRS = (("linear_attn_history", "linear_attn_state"), ("softmax_history", "softmax_state"))  # history vs state
SHARED = ("data", "tokenizer", "block_size", "n_layer", "n_embd", "dropout", "max_iters", "batch_size", "lr", "min_lr",
          "warmup_iters", "eval_interval", "eval_iters", "device")  # AblateConfig fields every run takes
HIT_SEED = repeats.HIT_SEED  # the hit split's windows (plumbing/repeats.py)
PRESETS = {
    "cpu": {},  # the field defaults
    # One GPU, offline, on builtin: 4 blocks of width 256, T 256, 32 x 256 = 8,192 tokens per step,
    # 1,500 steps = 12.3M tokens per run, i.e. ~19 passes over builtin's 645k train tokens, so
    # dropout 0.1 and the best validation loss are reported beside the last. A local corpus of
    # >= 12M tokens (--data files:PATH) removes the repetition.
    "gpu": dict(n_layer=4, n_embd=256, block_size=256, batch_size=32, max_iters=1500, lr=1e-3, min_lr=1e-4,
                warmup_iters=100, dropout=0.1, eval_interval=100, eval_iters=20, hit_seqs=256, workers=1,
                device="cuda"),
    # UTF-8 bytes of builtin (V = 256): the six readers of the content question at train.py's
    # cpu_bytes shape (4 x 128, T 256), 4.1M bytes per run (~1.9 passes over the train split) as
    # 2,000 steps of 8 x 256: past the ~1.6M bytes where GPT leaves its plateau (results/scaling).
    # One thread per run, no content probe (it decodes BPE).
    "cpu_bytes": dict(tokenizer="bytes", models=("linear", "softmax_state", "linear_attn_history",
                                                 "softmax_history", "selective", "gpt"),
                      n_layer=4, n_embd=128, block_size=256, batch_size=8, max_iters=2000, lr=2e-3, min_lr=2e-4,
                      warmup_iters=50, eval_interval=100, eval_iters=16, hit_seqs=128, workers=2, content=False),
}


@dataclass
class AblateConfig:
    out_dir: str = cli.arg("out/ablate", "folder for ablate.json/md, curves.png, hits.png, content.*; runs in "
                           "OUT/runs", group="I/O")
    models: tuple = cli.arg(registry.ABLATION, "models to run, any of " + " ".join(registry.MODELS), group="I/O",
                            was=("variants",))
    content: bool = cli.arg(True, "run the content probe (content.py) on the seed-0 runs afterwards", group="I/O")
    content_only: bool = cli.arg(False, "train nothing: only the content probe of the runs in OUT/runs", group="I/O")
    probe_json: str = cli.arg("results/probe/results.json", "probe.py results, for the content figure", group="I/O")
    data: str = cli.arg("builtin", "corpus (train and validation splits): builtin | files:PATH | ...", group="data")
    tokenizer: str = cli.arg("gpt2", "gpt2 (BPE) | bytes (UTF-8 bytes, V = 256), every variant",
                             choices=corpus.TOKENIZERS, group="data")
    block_size: int = cli.arg(128, "T, tokens per sequence", group="data", bounds=(2, 2 ** 20))
    n_layer: int = cli.arg(2, "blocks, every variant", group="model", bounds=(1, 1024))
    n_embd: int = cli.arg(64, "C, width, every variant", group="model", bounds=(1, 2 ** 16))
    dropout: float = cli.arg(0.0, "dropout, every variant", group="model", bounds=(0, 1))
    max_iters: int = cli.arg(60, "optimizer steps per run (the token budget)", group="optimization",
                             bounds=(1, 10 ** 10))
    batch_size: int = cli.arg(8, "B, sequences per step", group="optimization", bounds=(1, 2 ** 20))
    lr: float = cli.arg(3e-3, "peak learning rate, every variant", group="optimization", bounds=(0, 10))
    min_lr: float = cli.arg(3e-4, "final learning rate of the cosine", group="optimization", bounds=(0, 10))
    warmup_iters: int = cli.arg(10, "linear warmup steps", group="optimization", bounds=(0, 10 ** 10))
    seeds: int = cli.arg(2, "seeds per variant (>= 2 for a noise estimate)", group="evaluation", bounds=(1, 100))
    eval_interval: int = cli.arg(20, "steps between validation losses (the curves)", group="evaluation",
                                 bounds=(1, 10 ** 10))
    eval_iters: int = cli.arg(10, "validation batches per evaluation (a fixed set)", group="evaluation",
                              bounds=(1, 10 ** 7))
    hit_seqs: int = cli.arg(64, "validation windows of the hit split (a fixed set)", group="evaluation",
                            bounds=(1, 10 ** 6))
    copy_k: int = cli.arg(8, "copy split: a target is a copy when it and the k tokens before it occurred earlier "
                          "in the window", group="evaluation", bounds=(1, 2 ** 16))
    workers: int = cli.arg(2, "runs trained at a time, one CPU thread each (1: in this process)", group="system",
                           bounds=cli.WORKERS)
    device: str = cli.arg("cpu", "passed to train.py: cpu | cuda | auto", group="system")

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        self.models = tuple(self.models)
        cli.require_names("models", self.models, registry.MODELS)
        cli.require(not (self.content and self.tokenizer != "gpt2"), "--content probes BPE runs only; add "
                    "--no-content with --tokenizer {}", self.tokenizer)
        if not self.content_only:
            for name in self.models:
                train_config(self, name, 0)  # train.py's own checks of every setting, as one line


def run_dir(cfg, name, seed):
    return os.path.join(cfg.out_dir, "runs", f"{name}_s{seed}")


def train_config(cfg, name, seed):
    """The TrainConfig of one run: train.py's cpu preset < the shared settings < the variant."""
    shared = {f: getattr(cfg, f) for f in SHARED}
    return train.make_config("cpu", **shared, eval_data=cfg.data, grad_accum=1, seed=seed,
                             out_dir=run_dir(cfg, name, seed), log_interval=max(1, cfg.max_iters // 10),
                             **registry.MODELS[name].overrides)


# ---- where the loss goes -------------------------------------------------------------------


def hit_windows(cfg, val):
    """The fixed validation windows of the hit split: (hit_seqs, T+1) int64."""
    return repeats.hit_windows(val, cfg.hit_seqs, cfg.block_size)


# ---- training (one run per job, cfg.workers at a time) -------------------------------------


class RunInterrupted(cli.UserError):
    """A run stopped before its end for a reason other than Ctrl-C (e.g. train.py's NaN guard)."""


RESUMES = ("finished runs are reused when the same command runs again (unfinished ones continue from their last "
           "checkpoint)")


def same_run(stored, key):
    """Did a finished run use TrainConfig `key`? A field added to TrainConfig since then counts as
    equal when `key` holds its default (the run used that behaviour); a removed field is ignored, and
    so is out_dir: a run folder moved elsewhere (into results/, say) is still the same run."""
    defaults = {f.name: f.default for f in dataclasses.fields(train.TrainConfig)}
    return stored is not None and all(stored.get(k, defaults.get(k)) == v for k, v in key.items() if k != "out_dir")


def run_one(job):
    """Train (or reuse) one (variant, seed) and split its per-token loss; returns its record."""
    cfg, name, seed = job
    tcfg = train_config(cfg, name, seed)
    key = json.loads(json.dumps(dataclasses.asdict(tcfg)))
    hit_key = dict(hit_seqs=cfg.hit_seqs, seed=HIT_SEED, copy_k=cfg.copy_k, copy_bins=list(repeats.COPY_BINS))
    path = os.path.join(tcfg.out_dir, "result.json")
    rec = records.read_json(path, RECORD, "delete it: the same command reads the run again from its checkpoint",
                            "a run record") if os.path.exists(path) else {}
    if not same_run(rec.get("train_config"), key):
        last = os.path.join(tcfg.out_dir, "ckpt_last.pt")
        if os.path.exists(last) and same_run(dict(checkpoint.load(last)["train"], resume=False), key):
            # interrupted: continue exactly from its checkpoint (a resumed run saves resume=True: not a difference)
            tcfg = dataclasses.replace(tcfg, resume=True)
        try:
            with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):  # the log is in log.txt
                res = train.main(tcfg)
        except SystemExit as e:  # train.py stops with a message (a NaN guard) or 130 (Ctrl-C, checkpoint saved)
            if e.code == 130:
                raise KeyboardInterrupt from None
            raise RunInterrupted(f"{name} seed {seed} stopped: {e}") from None
        rec = dict(train_config=key, result={k: res[k] for k in ("val_loss", "best_val", "params", "tokens",
                                                                 "seconds", "step", "kind")}, reused=False)
    else:
        rec["reused"] = True
    if rec.get("hit_key") != hit_key:
        device = "cuda" if tcfg.device == "auto" and torch.cuda.is_available() else tcfg.device.replace("auto", "cpu")
        model, _ = checkpoint.load_model(os.path.join(tcfg.out_dir, "ckpt_last.pt"), device)
        w = hit_windows(cfg, corpus.load_split(cfg.data, "val", tokenizer=cfg.tokenizer))
        nll = repeats.token_nll(model, w.to(device)).cpu()
        rec.update(hit_key=hit_key, split=repeats.split(nll, repeats.recall_hits(w)),
                   copy=repeats.copy_split(nll, repeats.copy_distance(w, cfg.copy_k)))
    checkpoint.atomic_json(rec, path)
    return dict(rec, name=name, seed=seed, run=tcfg.out_dir)


class Job(typing.NamedTuple):
    """One run of the ablation; named as `variant seed s` in messages."""
    cfg: AblateConfig
    name: str
    seed: int

    def __repr__(self):
        return f"{self.name} seed {self.seed}"


def run_key(cfg, name, seed):
    """What a run's numbers depend on: its TrainConfig (not where its folder is) and the hit split's windows."""
    train_cfg = {k: v for k, v in dataclasses.asdict(train_config(cfg, name, seed)).items() if k not in ("out_dir", "resume")}
    return dict(train=train_cfg, hits=dict(hit_seqs=cfg.hit_seqs, seed=HIT_SEED, copy_k=cfg.copy_k,
                                           copy_bins=list(repeats.COPY_BINS)))


def progress(r, done, todo, seconds):
    """One line per finished run, with the ETA of the rest."""
    cost = "reused" if r["reused"] else f"{r['result']['seconds']:.0f} s"
    return (f"[{done}/{todo}] {r['name']:<20s} seed {r['seed']} | val {r['result']['val_loss']:.3f} | "
            f"hit {r['split']['loss_hit']:.3f} other {r['split']['loss_other']:.3f} | {cost} | "
            f"elapsed {seconds:.0f} s, ETA {seconds / done * (todo - done):.0f} s")


def run_status(job):
    """Where a running run stands, read from its own metrics.jsonl while it trains (grid.watching
    asks every grid.PROGRESS_S): step, training loss, ms/step and the run's ETA, the steps left times
    the median ms of its last 20 steps (evaluations not counted: they add eval_iters batches each)."""
    tcfg = train_config(job.cfg, job.name, job.seed)
    recs = [r for r in records.read_jsonl(os.path.join(tcfg.out_dir, "metrics.jsonl")) if "ms" in r]
    if not recs:
        return f"{job!r} | starting (no step yet)"
    ms, last = statistics.median(r["ms"] for r in recs[-20:]), recs[-1]
    eta = (tcfg.max_iters - last["step"]) * ms / 1000
    return (f"{job!r} | step {last['step']}/{tcfg.max_iters} | loss {last['train_loss']:.4f} | {ms:.0f} ms/step | eta "
            + (f"{eta / 3600:.2f} h" if eta > 3600 else f"{eta / 60:.1f} min"))


N, NULL, LOSS, COUNT, SHARE = tables.NUMBER, records.NULL, records.LOSS, records.STEP, records.FRACTION
COPY_SPLIT = dict(loss_copy=records.MAYBE_LOSS, loss_other=records.MAYBE_LOSS, copy_fraction=SHARE,
                  by_distance=[dict(lo=COUNT, hi=(int, NULL), loss=records.MAYBE_LOSS, fraction=SHARE)])
SAVED = dict(result=dict(val_loss=LOSS, best_val=LOSS, params=COUNT, tokens=COUNT, seconds=records.Range(N, 0)),
             split=dict(loss_hit=LOSS, loss_other=LOSS, hit_fraction=SHARE),
             copy=records.Opt(COPY_SPLIT))  # what summarize reads from a saved run (grid.Grid checks it), in range
RECORD = dict(train_config=dict(batch_size=int, block_size=int, grad_accum=int), hit_key=records.Opt(dict),
              **{k: records.Opt(v) for k, v in SAVED.items()})  # a run folder's result.json, as run_one reads it
ROW = dict(family=str, val_loss=[LOSS], val_loss_mean=LOSS, val_loss_std=records.Range(N, 0), best_val=[LOSS],
           params=COUNT, tokens=COUNT, seconds=[N], loss_hit=LOSS, loss_other=LOSS, hit_fraction=SHARE)  # what the tables read from an earlier row


def run_all(cfg, jobs):
    """Run the jobs through the grid's run cache (plumbing/grid.py: OUT/runs/NAME.json beside each
    run folder, reused only under the same run_key, never replaced by a run of other settings, one
    ablation per folder, Ctrl-C one line), cfg.workers at a time, each in its own process
    (grid.run_jobs; workers=1: in this one), each running run's progress (run_status) within the
    first minute and once a minute after. A failed run stops the ablation (RunInterrupted)."""
    cells = [grid.Job(f"{name}_s{seed}", run_key(cfg, name, seed), Job(cfg, name, seed)) for cfg, name, seed in jobs]
    try:
        with grid.Grid(cfg.out_dir, cells, cli.command_line("ablate.py", cfg), vars(cfg), SAVED) as g:
            print(f"ablate: {len(cells)} runs, {len(g.saved)} already saved, {len(cells) - len(g.saved)} to train "
                  f"({cfg.workers} at a time)", flush=True)  # the grid's size, announced before it starts
            return g.run(run_one, cfg.workers, progress, threads=None,  # workers=1: train.py sets its own threads
                         watch=run_status)  # each running run's step, loss and ETA, every grid.PROGRESS_S
    except (RunInterrupted, grid.JobFailed) as e:
        raise RunInterrupted(f"{e}; {RESUMES}") from None


# ---- summary, tables, figures --------------------------------------------------------------


def mean_copy(splits):
    """The copy splits of a variant's seeds -> their means, with the per-seed values beside them."""
    def avg(xs):
        return float(np.mean(xs)) if None not in xs else None
    out = {k: avg([s[k] for s in splits]) for k in ("loss_copy", "loss_other", "copy_fraction")}
    out.update(loss_copy_per_seed=[s["loss_copy"] for s in splits], loss_other_per_seed=[s["loss_other"] for s in splits])
    out["by_distance"] = [dict(lo=b["lo"], hi=b["hi"], fraction=b["fraction"],
                               loss=avg([s["by_distance"][i]["loss"] for s in splits]))
                          for i, b in enumerate(splits[0]["by_distance"])]
    return out


def compare(v, ref):
    """The noise rule (docstring) for v against ref: dict(delta, two_se, verdict)."""
    n_v, n_r = len(v["val_loss"]), len(ref["val_loss"])
    d = v["val_loss_mean"] - ref["val_loss_mean"]
    if min(n_v, n_r) < 2:
        return dict(delta=d, two_se=None, verdict="1 seed: no noise estimate")
    two_se = 2 * math.sqrt(v["val_loss_std"] ** 2 / n_v + ref["val_loss_std"] ** 2 / n_r)
    return dict(delta=d, two_se=two_se, verdict="within seed noise" if abs(d) <= two_se else
                ("lower" if d < 0 else "higher"))


SAME_ABLATION = ("out_dir", "models", "seeds", "content", "content_only", "probe_json", "workers", "device")
# settings that do not change a row (each row lists its seeds): an ablate.json whose other settings match
# is the same ablation


def state_floats(cfg, name):
    """Numbers per sequence and layer the variant's step() holds after block_size tokens
    (model.state_floats: the traces plus a reader's own state, or GPT's key-value cache)."""
    tcfg = train_config(cfg, name, 0)
    with torch.device("meta"):  # the shapes only: nothing allocated, nothing initialised for real
        model = train.build_model(tcfg, seeded=False)
    return model.state_floats(cfg.block_size)


def earlier_rows(cfg):
    """The variant rows of the ablate.json already in out_dir -> {name: row}, for the variants this
    invocation does not run (their run folders hold checkpoints, which git ignores: on a fresh clone a
    committed row lives only there). An ablate.json made with other settings is refused in one line:
    its rows would not compare with this invocation's, and replacing them would lose them."""
    rows = records.load_record(os.path.join(cfg.out_dir, "ablate.json"), cfg, "variants", "an ablation",
                               same=SAME_ABLATION, shape=tables.Each(ROW))
    return {n: dict(r, carried=True) for n, r in rows.items() if n not in cfg.models}


def summarize(cfg, records, yardsticks, yardstick_split, seconds, yardstick_copy=None, earlier=None):
    """records of every run (and the rows of an earlier invocation, `earlier_rows`) -> the ablate.json dict."""
    out = dict(settings=dataclasses.asdict(cfg), seconds=round(seconds, 1), yardsticks=yardsticks,
               yardstick_split=yardstick_split, yardstick_copy=yardstick_copy, copy_bins=list(repeats.COPY_BINS),
               noise_rule="a difference counts when |d| > 2 SE, SE = sqrt(s_a^2/n + s_b^2/n), sample std over n seeds",
               variants=dict(earlier or {}), history_vs_state={})
    for name in cfg.models:
        rs = sorted((r for r in records if r["name"] == name), key=lambda r: r["seed"])
        losses = [r["result"]["val_loss"] for r in rs]
        m, s = tables.mean_std(losses)
        v = dict(family=registry.MODELS[name].family, val_loss=losses, val_loss_mean=m, val_loss_std=s,
                 best_val=[r["result"]["best_val"] for r in rs],
                 minus_bigram=m - yardsticks["bigram"], minus_unigram=m - yardsticks["unigram"],
                 params=rs[0]["result"]["params"], tokens=rs[0]["result"]["tokens"],
                 seconds=[round(r["result"]["seconds"], 1) for r in rs], runs=[r["run"] for r in rs],
                 curves=[read_curve(r["run"]) for r in rs])
        for k in ("loss_hit", "loss_other", "hit_fraction"):
            v[k] = float(np.mean([r["split"][k] for r in rs]))
            v[k + "_per_seed"] = [r["split"][k] for r in rs]
        if all("copy" in r for r in rs):
            v["copy"] = mean_copy([r["copy"] for r in rs])
        out["variants"][name] = v
    order = [n for n in registry.MODELS if n in out["variants"]]  # the registry's order, whichever invocation ran them
    out["variants"] = vs = {n: out["variants"][n] for n in order}
    for name, v in vs.items():
        v["state_floats"] = state_floats(cfg, name)
        v["vs_linear"] = compare(v, vs["linear"]) if "linear" in vs and name != "linear" else None
    for hist, state in PAIRS:
        if hist in vs and state in vs:
            out["history_vs_state"][f"{hist} - {state}"] = compare(vs[hist], vs[state])
    return out


def read_curve(run):
    """[tokens, val_loss] lists from a run folder's metrics.jsonl (kept in ablate.json: the figure
    needs no run folder)."""
    cfg = records.read_json(os.path.join(run, "result.json"), RECORD, "delete it: the same command reads the run "
                            "again from its checkpoint", "a run record")["train_config"]
    per_step = cfg["batch_size"] * cfg["block_size"] * cfg["grad_accum"]
    recs = [r for r in records.read_jsonl(os.path.join(run, "metrics.jsonl"), records.METRICS) if "val_loss" in r]
    return [[r["step"] * per_step for r in recs], [r["val_loss"] for r in recs]]


def content_config(cfg):
    return content.ContentConfig(runs=os.path.join(cfg.out_dir, "runs"), out_dir=cfg.out_dir,
                                 probe_json=cfg.probe_json)


def main(cfg):
    """The ablation (unless content_only), then the content probe; returns the ablate.json dict."""
    if cfg.content_only:
        return content.main(content_config(cfg))  # content.py checks the folder the same way
    checkpoint.make_out_dir(cfg.out_dir)  # one line before anything is read or trained
    earlier = earlier_rows(cfg)  # refuses an ablate.json of other settings before anything trains
    t0 = time.time()
    val = corpus.load_split(cfg.data, "val", tokenizer=cfg.tokenizer)  # a missing corpus fails here, before any write
    baselines = corpus.baselines(cfg.data, tokenizer=cfg.tokenizer)
    yardsticks = {k: baselines[k] for k in ("dataset", "unigram", "bigram", "trigram", *ngram.COMPRESSORS)
                  if k in baselines}  # the compressors: bytes only
    w = hit_windows(cfg, val)
    hits, dist = repeats.recall_hits(w), repeats.copy_distance(w, cfg.copy_k)
    yardstick_losses = repeats.yardstick_nll(cfg.data, w, cfg.tokenizer)
    yardstick_split = {k: repeats.split(nll, hits) for k, nll in yardstick_losses.items()}
    yardstick_copy = {k: repeats.copy_split(nll, dist) for k, nll in yardstick_losses.items()}
    jobs = [(cfg, name, s) for s in range(cfg.seeds) for name in cfg.models]  # seed-major
    records = run_all(cfg, jobs)
    res = summarize(cfg, records, yardsticks, yardstick_split, time.time() - t0, yardstick_copy, earlier)
    checkpoint.atomic_json(res, os.path.join(cfg.out_dir, "ablate.json"))
    tables.ablate_md(res, os.path.join(cfg.out_dir, "ablate.md"))
    tables.ablate_curves(res, os.path.join(cfg.out_dir, "curves.png"))
    tables.ablate_hits(res, os.path.join(cfg.out_dir, "hits.png"))
    if all("copy" in v for v in res["variants"].values()):
        tables.ablate_copy(res, os.path.join(cfg.out_dir, "copy.png"))
    with open(os.path.join(cfg.out_dir, "ablate.md")) as f:
        print(f.read(), flush=True)
    if cfg.content:
        res["content"] = content.main(content_config(cfg))
    return res


def get_parser():
    return cli.parser(AblateConfig, "LM ablation of SPEN's trace readers (state and history) with a selective "
                      "control and GPT, against n-gram yardsticks (see the module docstring).", presets=PRESETS)


if __name__ == "__main__":
    config = cli.parse(AblateConfig, get_parser(), presets=PRESETS)
    cli.main_guard(lambda: main(config), prog="ablate.py", interrupted=f"interrupted; {RESUMES}")

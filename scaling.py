"""Where does GPT overtake SPEN? Validation loss against training tokens, per model and width.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": at 8B tokens
the 130M SPEN reaches C4 perplexity 260 where a GPT-2 small reaches 33. At small budgets the
EMA model wins here (results/ablate, results/ablate_bytes): somewhere in between, as tokens or
width grow, the curves must cross. This script draws the curves (log-log) and finds the
crossing, or says that it lies beyond the budget and where the curves point.

Each (model, width) is one train.py run, trained in segments: it stops at log-spaced steps,
evaluates, saves ckpt_last, and continues from it (train.py --resume is exact), so every
point of a curve is the same run and a stopped script continues where it was. The runs advance
together, point by point: stopped at any time, every curve reaches about the same D. The learning
rate is CONSTANT after a linear warmup (min_lr = lr): the run does not know its length, so
every point means the same thing ("loss after D tokens at this lr"). Read there, a curve is
still falling and each seed sits at its own place on a noisy slope; so each run also has a
COOLDOWN BRANCH (WSD's): from the trunk's checkpoint at (1 - --cooldown) of the budget, the same
run with the lr falling linearly to 0 by the last point (train.py --cooldown_iters), in a folder
of its own, the trunk kept: its last point is the curve's annealed reading.
Overfitting watch: beside each validation loss, the mean training loss of the steps since the
previous point (train.py's metrics.jsonl) and the passes over the training split so far.

Where the loss goes along the way: at every point (and the branch's last), the WHOLE validation
split scored once, every token a target once (repeats.window_scores over batches.eval_windows),
with the copy split of ablate.py inside each window (targets that an in-context copy of >= copy_k
earlier tokens predicts, by distance, against all others), as per-window sums, so anyone can
bootstrap over windows; and the copy split on ablate.py's 128 fixed windows, as before (cheap,
and what the earlier curves hold).

Crossover: the D from which gpt's validation loss stays below `linear`'s to the last point
(log-interpolated between points), per width; one seed, so a gap within seed noise (ablate.py
measures it) is a pointer, not a verdict. Without one, the gap gpt - linear is fit as a line in log D over
the last half of the points and extrapolated to zero: a rough pointer, not a measurement.

Shape glossary
    B sequences per step (batch_size), T tokens per sequence (block_size), A micro-batches per
    step (grad_accum), C width (n_embd), D training tokens = step * A * B * T.

Run
    python scaling.py                                     # preset cpu: bytes on builtin, one thread
    python scaling.py --out_dir results/scaling           # refresh the committed reference
    python scaling.py --out_dir results/scaling --no-train    # tables and figure of the runs as they are
    python scaling.py --preset gpu_130m --out_dir out/scaling_130m   # the paper's pair, one GPU
    python scaling.py --preset gpu_sweep --out_dir out/scaling_sweep # widths 128..768, one GPU
Writes scaling.json (rewritten after every point), scaling.md and scaling.png under --out_dir
(default out/scaling), and windows.json: the per-window sums of each curve's last point and its
branch's, with the machine that scored them. scaling.json is the record: a curve of an earlier invocation with the same
settings stays in it (any --models/--widths; a larger --max_tokens continues the runs), and its run
folder, when there, replaces it; a folder of other settings (--lr, say) is refused in one line
before anything trains, and one invocation holds a folder at a time (a lock). Run folders
(train.py's log.txt, metrics.jsonl, checkpoints; copy.jsonl, the copy split at each point) under
OUT/runs/<model>_c<width> (the branch: <model>_c<width>_cool<step>; scores.jsonl, the whole-split
scores). The reference numbers are in results/scaling/; the seeds of the map, one curve per folder,
in results/map/seeds/ (python -m dev.seeds).
"""

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "scaling.py")  # until main_guard; the imports below take seconds

import numpy as np
import torch

from plumbing import (checkpoint, cli, corpus, evaluate, grid, ngram, records, registry, repeats, runtime,
                      tables)
import train

PRESETS = {
    "cpu": {},  # the field defaults: UTF-8 bytes of builtin, 4 blocks, widths 128 and 64
    # The paper's pair: 12 x 768, GPT-2 BPE, FineWeb-Edu, C4 validation, 524,288 tokens per step,
    # curves to 2B tokens (the paper's 8B: --max_tokens 8e9). Needs the hub (or a filled cache).
    "gpu_130m": dict(data="fineweb-edu", eval_data="c4", tokenizer="gpt2", models=("gpt", "linear"), widths=(768,),
                     n_layer=12, block_size=1024, batch_size=32, grad_accum=16, max_tokens=2e9, first_tokens=5e6,
                     lr=6e-4, warmup_iters=715, eval_iters=50, device="cuda", compile=True),
    # The cheaper sweep: 6 blocks, widths 128 .. 768, 131,072 tokens per step, 1B tokens each.
    "gpu_sweep": dict(data="fineweb-edu", eval_data="fineweb-edu", tokenizer="gpt2", models=("gpt", "linear"),
                      widths=(128, 256, 512, 768), n_layer=6, block_size=1024, batch_size=32, grad_accum=4,
                      max_tokens=1e9, first_tokens=1e6, lr=1e-3, warmup_iters=200, eval_iters=50, device="cuda",
                      compile=True),
}


@dataclass
class ScalingConfig:
    out_dir: str = cli.arg("out/scaling", "folder for scaling.json/md/png; runs in OUT/runs", group="I/O")
    train: bool = cli.arg(True, "train the runs up to --max_tokens (--no-train: only write scaling.json/md/png from "
                          "the run folders as they are, e.g. after stopping)", group="I/O")
    models: tuple = cli.arg(("gpt", "linear", "softmax_history"), "models, any of " + " ".join(registry.MODELS),
                            group="model")
    widths: tuple = cli.arg((128, 64), "C, widths (every model at every width)", group="model", bounds=(1, 2 ** 16))
    n_layer: int = cli.arg(4, "blocks, every run", group="model", bounds=(1, 1024))
    data: str = cli.arg("builtin", "training corpus: builtin | fineweb-edu | files:PATH | ...", group="data")
    eval_data: str = cli.arg("", "validation corpus; empty: the same as --data", group="data")
    tokenizer: str = cli.arg("bytes", "bytes (UTF-8, V = 256) | gpt2 (BPE)", choices=corpus.TOKENIZERS,
                             group="data")
    block_size: int = cli.arg(256, "T, tokens per sequence", group="data", bounds=(2, 2 ** 20))
    batch_size: int = cli.arg(16, "B, sequences per micro-batch", group="optimization", bounds=(1, 2 ** 20))
    grad_accum: int = cli.arg(1, "A, micro-batches per step", group="optimization", bounds=(1, 2 ** 20))
    max_tokens: float = cli.arg(1e7, "training tokens of each run (the last point)", group="optimization",
                                bounds=(1, 1e13))
    first_tokens: float = cli.arg(4e4, "training tokens at the first point after step 0", group="optimization",
                                  bounds=(1, 1e13))
    points: int = cli.arg(16, "evaluation points, log-spaced from --first_tokens to --max_tokens", group="evaluation",
                          bounds=(2, 1000))
    eval_iters: int = cli.arg(20, "validation batches per point (a fixed set, train.py's)", group="evaluation",
                              bounds=(1, 10 ** 7))
    hit_seqs: int = cli.arg(128, "validation windows of the copy split at each point (ablate.py's fixed set)",
                            group="evaluation", bounds=(1, 10 ** 6))
    copy_k: int = cli.arg(8, "copy split: the target and the k tokens before it occurred earlier in the window",
                          group="evaluation", bounds=(1, 2 ** 16))
    cooldown: float = cli.arg(0.2, "a branch of each run leaves the trunk at (1 - this) x --max_tokens and decays the lr "
                              "linearly to 0 by --max_tokens (WSD's cooldown): the curve's annealed last point; "
                              "0: none", group="optimization", bounds=(0, 0.99))
    lr: float = cli.arg(2e-3, "learning rate after warmup, held constant", group="optimization", bounds=(0, 10))
    warmup_iters: int = cli.arg(50, "linear warmup steps", group="optimization", bounds=(0, 10 ** 10))
    seed: int = cli.arg(0, "seed of initialisation and data order (the same for every run)", group="system",
                        bounds=cli.SEED)
    device: str = cli.arg("cpu", "passed to train.py: cpu | cuda | auto", group="system")
    compile: bool = cli.arg(False, "torch.compile (GPU presets)", group="system")

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        self.models, self.widths = tuple(self.models), tuple(self.widths)
        cli.require_names("models", self.models, registry.MODELS)
        cli.require(self.widths, "--widths must name at least one width")
        cli.require(self.first_tokens < self.max_tokens, "need 0 < --first_tokens < --max_tokens, got {} and {}",
                    self.first_tokens, self.max_tokens)
        for m in self.models:
            for w in self.widths:
                run_config(self, m, w, 1)  # train.py's own checks, as one line


def tokens_per_step(cfg):
    return cfg.batch_size * cfg.block_size * cfg.grad_accum


def eval_steps(cfg):
    """The steps at which a curve is read: log-spaced from first_tokens to max_tokens, distinct."""
    per = tokens_per_step(cfg)
    first, last = max(1, round(cfg.first_tokens / per)), max(2, round(cfg.max_tokens / per))
    return sorted({int(round(s)) for s in np.geomspace(first, last, cfg.points)})


def cooldown_start(cfg):
    """The step at which the cooldown branch leaves the constant-lr trunk (None: no cooldown)."""
    last = eval_steps(cfg)[-1]
    return max(1, min(last - 1, round(last * (1 - cfg.cooldown)))) if cfg.cooldown else None


def stops(cfg):
    """Where the trunk stops and is scored: its evaluation points and the cooldown's start (the
    checkpoint the branch starts from)."""
    return sorted(set(eval_steps(cfg)) | ({cooldown_start(cfg)} if cfg.cooldown else set()))


def run_dir(cfg, name, width, branch=False):
    """A run's folder: the trunk's, or (branch=True) its cooldown branch's, named by its start step."""
    return os.path.join(cfg.out_dir, "runs", f"{name}_c{width}" + (f"_cool{cooldown_start(cfg)}" if branch else ""))


def run_config(cfg, name, width, max_iters, resume=False, branch=False):
    """The TrainConfig of one segment: train.py's defaults < the shared settings < the model; a
    branch's ends at the last point, its lr falling linearly to 0 from the cooldown's start."""
    cool = dict(cooldown_iters=max_iters - cooldown_start(cfg)) if branch else {}
    return train.make_config(
        "130m", **registry.MODELS[name].overrides, data=cfg.data, eval_data=cfg.eval_data, tokenizer=cfg.tokenizer,
        n_layer=cfg.n_layer, n_embd=width, block_size=cfg.block_size, batch_size=cfg.batch_size, grad_accum=cfg.grad_accum,
        max_iters=max_iters, lr=cfg.lr, min_lr=cfg.lr, warmup_iters=cfg.warmup_iters, dropout=0.0,
        eval_interval=max(eval_steps(cfg)), eval_iters=cfg.eval_iters, log_interval=10,
        seed=cfg.seed, device=cfg.device, compile=cfg.compile, out_dir=run_dir(cfg, name, width, branch), resume=resume,
        **cool)


def read_points(run, per_step, train_tokens):
    """The curve of a run folder: one dict per evaluation (step 0 included) with the validation
    loss, the mean training loss since the previous evaluation and the passes over the train split."""
    points, losses = [], []
    for rec in records.read_jsonl(os.path.join(run, "metrics.jsonl")):
        if "train_loss" in rec:
            losses.append(rec["train_loss"])
        if "val_loss" in rec:
            points.append(dict(step=rec["step"], tokens=rec["step"] * per_step, val_loss=rec["val_loss"],
                               train_loss=float(np.mean(losses)) if losses else None,
                               epochs=rec["step"] * per_step / train_tokens))
            losses = []
    return points


def read_copy(run):
    """The copy splits of a run folder (copy.jsonl), one per point, by step."""
    return records.read_jsonl(os.path.join(run, "copy.jsonl"))


def read_scores(run):
    """The whole-split scores of a run folder (scores.jsonl), one per scored step."""
    return records.read_jsonl(os.path.join(run, "scores.jsonl"))


def score_point(cfg, run, val, windows, dist, steps):
    """Score run's last checkpoint once, if its step is one of `steps` (a Ctrl-C saves ckpt_last
    between them: an uninterrupted run has no point there): the whole val split, the copy split per
    window (repeats.window_scores), with the machine that scored it, into scores.jsonl; the fixed
    windows' copy split (ablate.py's) into copy.jsonl."""
    path = os.path.join(run, "ckpt_last.pt")
    if not os.path.exists(path):
        return
    ckpt = checkpoint.load(path)
    step, tokens = ckpt["step"], ckpt["step"] * tokens_per_step(cfg)
    todo = [f for f in ("copy.jsonl", "scores.jsonl")
            if step not in {r["step"] for r in records.read_jsonl(os.path.join(run, f))}]
    if step not in steps or not todo:
        return
    model = checkpoint.build(ckpt, path)
    for f in todo:
        rec = (dict(step=step, tokens=tokens, **repeats.copy_split(repeats.token_nll(model, windows), dist))
               if f == "copy.jsonl" else
               dict(step=step, tokens=tokens, machine=runtime.machine_line(),
                    windows=repeats.window_scores(model, val, cfg.block_size, cfg.copy_k)))
        with open(os.path.join(run, f), "a") as out:
            out.write(json.dumps(rec) + "\n")


def fork(cfg, name, width):
    """Start the cooldown branch: the trunk's folder at the cooldown's start (its checkpoint, record
    and log) copied to the branch's folder, once, atomically (a temp folder renamed)."""
    trunk, branch = run_dir(cfg, name, width), run_dir(cfg, name, width, branch=True)
    if os.path.isdir(branch) or progress(trunk) != cooldown_start(cfg):
        return
    tmp = branch + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)  # a fork killed half way
    os.makedirs(tmp)
    for f in ("ckpt_last.pt", "run.json", "metrics.jsonl", "log.txt"):
        if os.path.exists(os.path.join(trunk, f)):
            shutil.copy2(os.path.join(trunk, f), tmp)
    os.replace(tmp, branch)


def progress(run):
    """Steps a run folder's last checkpoint holds (0: none)."""
    path = os.path.join(run, "ckpt_last.pt")
    return checkpoint.load(path)["step"] if os.path.exists(path) else 0


# ---- where the curves cross ------------------------------------------------------------------


def crossover(a, b):
    """The D from which curve a's loss stays below curve b's to the last point (the last crossing
    from above, log-interpolated between the shared points); a and b are lists of (tokens, loss)
    on the same steps. None when a is not below b at the last point, or never was above it."""
    pairs = [(d, la - lb) for (d, la), (_, lb) in zip(a, b) if d > 0]
    if not pairs or pairs[-1][1] >= 0:
        return None
    for (d0, g0), (d1, g1) in reversed(list(zip(pairs, pairs[1:]))):
        if g0 >= 0 > g1:
            return float(math.exp(math.log(d0) + g0 / (g0 - g1) * (math.log(d1) - math.log(d0))))
    return None


def extrapolate_gap(a, b, frac=0.5):
    """Fit gap = a - b as c0 + c1 log D over the last `frac` of the shared points; returns
    dict(slope per e-fold of D, gap_last, tokens_at_zero or None when the gap does not close)."""
    pts = [(math.log(d), la - lb) for (d, la), (_, lb) in zip(a, b) if d > 0]
    pts = pts[-max(2, int(round(frac * len(pts)))):]
    x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    c1, c0 = np.polyfit(x, y, 1)
    zero = float(math.exp(-c0 / c1)) if c1 < 0 and y[-1] > 0 else None
    return dict(slope_per_efold=float(c1), gap_last=float(y[-1]), tokens_at_zero=zero, fit_points=len(pts))


def analyse(curves):
    """Per width: gpt against each SPEN model, measured crossover or the extrapolated one."""
    out = {}
    for w in sorted({c["width"] for c in curves.values()}, reverse=True):
        g = curves.get(f"gpt_c{w}")
        for m in registry.MODELS:
            c = curves.get(f"{m}_c{w}")
            if m == "gpt" or not g or not c:
                continue
            n = min(len(g["points"]), len(c["points"]))
            a = [(p["tokens"], p["val_loss"]) for p in g["points"][:n]]
            b = [(p["tokens"], p["val_loss"]) for p in c["points"][:n]]
            if n >= 3:
                out[f"gpt - {m} at width {w}"] = dict(width=w, model=m, up_to_tokens=a[-1][0], crossover_tokens=
                                                      crossover(a, b), **extrapolate_gap(a, b))
    return out


# ---- the runs ----------------------------------------------------------------------------------


def advance(cfg, name, width, step, branch=False):
    """Train one (model, width) run (or its cooldown branch) up to `step` (a segment: resume, train,
    evaluate, save); nothing when its checkpoint is already there. Returns True when it trained."""
    done = progress(run_dir(cfg, name, width, branch))
    if done >= step:
        return False
    t0 = time.time()
    label = f"{name}{' cooldown' if branch else ''} C={width}"
    try:
        with contextlib.redirect_stdout(Relay(label, eval_steps(cfg)[-1])):  # train.py's log: its log.txt
            res = train.main(run_config(cfg, name, width, step, resume=done > 0, branch=branch))
    except (KeyboardInterrupt, SystemExit) as e:  # train.py saves ckpt_last on Ctrl-C, then SystemExit(130)
        if isinstance(e, SystemExit) and e.code != 130:
            raise  # its NaN guard: the message says it all
        raise grid.Interrupted(f"interrupted: {name} C={width}{' (cooldown)' if branch else ''} stopped at step "
                               f"{progress(run_dir(cfg, name, width, branch))} "
                               f"of its segment to {step}; every finished point is saved in {cfg.out_dir}; the same "
                               f"command continues: {cli.command_line('scaling.py', cfg)}") from None
    print(f"{name + (' cooldown' if branch else ''):<16s} C={width:<4d} step {step:6d} | {res['tokens']:>12,d} tokens | val {res['val_loss']:.4f} | "
          f"{time.time() - t0:.0f} s", flush=True)
    return True


class Relay:
    """Where train.py's stdout goes during a segment (its whole log is in the run's log.txt): a step
    line passed on at most once a minute, with the run's place and the ETA of its last step at this
    segment's rate, so a long segment is never silent."""

    def __init__(self, label, last, every=60.0):
        self.out, self.label, self.last, self.every = sys.stdout, label, last, every
        self.start, self.shown, self.rest = None, time.time(), ""

    def write(self, text):
        *lines, self.rest = (self.rest + text).split("\n")
        for line in lines:
            if not line.startswith("step "):
                continue
            step, now = int(line.split("|")[0].split()[1]), time.time()
            self.start = self.start or (step, now)
            if now - self.shown >= self.every and step > self.start[0]:
                self.shown = now
                eta = (self.last - step) * (now - self.start[1]) / (step - self.start[0])
                print(f"  {self.label} step {step:,}/{self.last:,} |{line.split('|')[1]}| eta {eta / 60:.1f} min",
                      file=self.out, flush=True)
        return len(text)

    def flush(self):
        pass


N, STEP, LOSS = tables.NUMBER, records.STEP, records.LOSS
CURVE = dict(model=str, width=int, params=(int, type(None)), train_seconds=N,
             points=[dict(step=STEP, tokens=records.Range(N, 0), val_loss=LOSS)],
             copy=[dict(step=STEP, tokens=records.Range(N, 0), loss_copy=records.MAYBE_LOSS,
                        loss_other=records.MAYBE_LOSS, by_distance=list)])
# what the tables and the figure read from a recorded curve (records.load_record checks it)
SAME_CURVES = ("out_dir", "train", "models", "widths", "max_tokens", "first_tokens", "points", "cooldown")
# settings that do not change a curve's trunk (the budget, the points read along it, where a branch leaves it)


def recorded_curves(cfg):
    """The curves of the scaling.json already in out_dir (run folders hold checkpoints, which git
    ignores: on a fresh clone a committed curve lives only here). One made with other settings is
    refused in one line: its curves would not compare with this invocation's, its run folders would
    be resumed under the new settings, and rewriting it would lose them."""
    return records.load_record(os.path.join(cfg.out_dir, "scaling.json"), cfg, "curves", "a scaling record",
                               same=SAME_CURVES, shape=tables.Each(CURVE))


def collect(cfg, yardsticks, train_tokens, seconds, recorded):
    """Every curve: the recorded ones (recorded_curves: the same settings, any models and widths),
    each replaced by its run folder's points where the folder has them; then the crossovers."""
    per = tokens_per_step(cfg)
    curves = dict(recorded)
    for m in cfg.models:
        for w in cfg.widths:
            run = run_dir(cfg, m, w)
            pts = read_points(run, per, train_tokens)
            if pts:
                with open(os.path.join(run, "log.txt")) as f:
                    params = next((int(ln.split("params:")[1].split("|")[0].replace(",", ""))
                                   for ln in f if ln.startswith("params:")), None)
                scores = read_scores(run)
                curves[f"{m}_c{w}"] = dict(model=m, width=w, params=params, run=run, points=pts,
                                           train_seconds=train_seconds(run), copy=read_copy(run),
                                           scores=[totals(r) for r in scores], machines=machines(scores))
                branch, start = run_dir(cfg, m, w, branch=True), cooldown_start(cfg)
                if cfg.cooldown and os.path.isdir(branch):
                    scores = read_scores(branch)
                    curves[f"{m}_c{w}"]["cooldown"] = dict(
                        run=branch, start_step=start, start_tokens=start * per, scores=[totals(r) for r in scores],
                        points=[p for p in read_points(branch, per, train_tokens) if p["step"] > start],
                        train_seconds=train_seconds(branch, after=start), machines=machines(scores))
    for c in curves.values():
        c["state_floats"] = state_floats(cfg, c["model"], c["width"])
    names = list(registry.MODELS)
    order = lambda k: (-curves[k]["width"], curves[k]["model"] != "gpt", names.index(curves[k]["model"]))
    curves = {k: curves[k] for k in sorted(curves, key=order)}
    return dict(settings=dataclasses.asdict(cfg), tokens_per_step=per, train_split_tokens=train_tokens,
                eval_steps=eval_steps(cfg), schedule="linear warmup, then constant lr (min_lr = lr)",
                yardsticks=yardsticks, seconds=round(seconds, 1), curves=curves, crossovers=analyse(curves))


def train_seconds(run, after=0):
    """Seconds of training in a run folder (the sum of its step times in metrics.jsonl; a branch:
    the steps after its start)."""
    recs = records.read_jsonl(os.path.join(run, "metrics.jsonl"))
    return round(sum(r.get("ms", 0) for r in recs if r["step"] > after) / 1000, 1)


def totals(rec):
    """A scores.jsonl record as the curve keeps it: the step and the whole split's losses."""
    return dict(step=rec["step"], tokens=rec["tokens"], **repeats.score_totals(rec["windows"]))


def machines(scores):
    """The machines that scored a run's points (one, for a run the seeds driver made)."""
    return sorted({r["machine"] for r in scores})


def read_windows(path):
    """A windows.json as written ({} when there is none); a damaged one is one line."""
    if not os.path.exists(path):
        return {}
    return records.read_json(path, records.Each(dict), "move it away (the run folders rewrite it)", "a windows record")


def window_record(cfg, curves):
    """{curve: {trunk: last scored point's per-window sums, cooldown: the branch's}}: the file a
    bootstrap over windows reads (windows.json)."""
    out = {}
    for k, c in curves.items():
        if "run" not in c:
            continue  # a recorded curve without its folder: its windows are in the windows.json that holds it
        for part, run in (("trunk", c["run"]), ("cooldown", c.get("cooldown", {}).get("run"))):
            scores = read_scores(run) if run else []
            if scores:
                out.setdefault(k, {})[part] = dict(step=scores[-1]["step"], tokens=scores[-1]["tokens"],
                                                   **scores[-1]["windows"])
    return out


# ---- tables and figure: plumbing/tables.py (scaling_md, scaling_plot) --------------------------


def prepared_runs():
    """The lines of scaling.md naming the prepared GPU runs."""
    out = []
    for name in ("gpu_130m", "gpu_sweep"):
        g = cli.build(ScalingConfig, PRESETS, name)
        out.append(f"- `python scaling.py --preset {name} --out_dir out/scaling_{name[4:]}`: {', '.join(g.models)} at "
                   f"width {', '.join(map(str, g.widths))}, {g.n_layer} blocks, {g.tokenizer} on {g.data} "
                   f"(validation: {g.eval_data or g.data}), {tokens_per_step(g):,} tokens per step, "
                   f"{g.max_tokens:.3g} tokens per run, {len(g.models) * len(g.widths)} runs.")
    return out


def state_floats(cfg, name, width):
    """Numbers per sequence and layer the run's model holds after T tokens (model.state_floats)."""
    tcfg = run_config(cfg, name, width, 1)
    with torch.device("meta"):  # shapes only: nothing allocated
        return train.build_model(tcfg, seeded=False).state_floats(cfg.block_size)


def main(cfg):
    """Train every (model, width) curve (or continue it), then write scaling.json/md/png; returns the dict.
    One invocation per folder at a time (a lock); a folder of other settings is refused."""
    if not cfg.train and not os.path.isfile(os.path.join(cfg.out_dir, "scaling.json")) and not os.path.isdir(
            os.path.join(cfg.out_dir, "runs")):
        raise cli.UserError(f"--no-train: {cfg.out_dir} holds no scaling run (no scaling.json, no runs/); a typo in "
                            "--out_dir? Train first: the same command without --no-train")
    checkpoint.make_out_dir(cfg.out_dir)  # one line before anything is read or trained
    with grid.locked(cfg.out_dir):  # and a killed writer's temp files removed
        return run_curves(cfg, recorded_curves(cfg))


def run_curves(cfg, recorded):
    """main without the lock."""
    t0 = time.time()
    name = cfg.eval_data or cfg.data
    train_tokens = len(corpus.load_split(cfg.data, "train", tokenizer=cfg.tokenizer))  # fails before any write
    tc = run_config(cfg, cfg.models[0], cfg.widths[0], 1)
    counted = evaluate.count_yardsticks(tc, evaluate.eval_names(tc)[0])  # train.py's rule: from a cache that exists
    yardsticks = ({k: counted[k] for k in ("unigram", "bigram", "trigram", *ngram.COMPRESSORS) if k in counted}
                  | {"dataset": name}
                  if counted else None)

    def save():
        res = collect(cfg, yardsticks, train_tokens, time.time() - t0, recorded)
        checkpoint.atomic_json(res, os.path.join(cfg.out_dir, "scaling.json"))
        path = os.path.join(cfg.out_dir, "windows.json")  # a curve recorded without its folder keeps its entry
        checkpoint.atomic_json(read_windows(path) | window_record(cfg, res["curves"]), path, indent=None)  # compact
        tables.scaling_md(res, os.path.join(cfg.out_dir, "scaling.md"), prepared_runs())
        tables.scaling_plot(res, os.path.join(cfg.out_dir, "scaling.png"))
        return res

    val = corpus.load_split(name, "val", tokenizer=cfg.tokenizer)
    windows = repeats.hit_windows(val, cfg.hit_seqs, cfg.block_size)  # (hit_seqs, T+1)
    dist = repeats.copy_distance(windows, cfg.copy_k)
    steps, last, start = (stops(cfg) if cfg.train else []), eval_steps(cfg)[-1], cooldown_start(cfg)
    if steps:  # the grid's size, announced before it starts
        print(f"scaling: {len(cfg.models) * len(cfg.widths)} runs of {last:,} steps ({last * tokens_per_step(cfg):,} "
              f"tokens) each, read at {len(steps)} points" + (f", and a cooldown branch of each from its step {start:,}"
                                                               if start else ""), flush=True)
    for step in steps:  # step-major: stopped at any time, every curve reaches about the same D
        trained = False
        for w in cfg.widths:
            for m in cfg.models:
                trained |= advance(cfg, m, w, step)
                score_point(cfg, run_dir(cfg, m, w), val, windows, dist, steps)
                if step == start:
                    fork(cfg, m, w)
        if trained:
            save()  # partial results land on disk as they come
    for w in cfg.widths if steps and start else ():  # the branches, once every trunk is done
        for m in cfg.models:
            if os.path.isdir(run_dir(cfg, m, w, branch=True)):  # none when the trunk passed its start before
                advance(cfg, m, w, last, branch=True)
                score_point(cfg, run_dir(cfg, m, w, branch=True), val, windows, dist, [last])
                save()
    res = save()
    with open(os.path.join(cfg.out_dir, "scaling.md")) as f:
        print(f.read(), flush=True)
    return res


def get_parser():
    return cli.parser(ScalingConfig, "Validation loss against training tokens for GPT and SPEN readers at several "
                      "widths; where GPT overtakes SPEN (see the module docstring).", presets=PRESETS)


if __name__ == "__main__":
    config = cli.parse(ScalingConfig, get_parser(), presets=PRESETS)
    cli.main_guard(lambda: main(config), prog="scaling.py")

"""Train SPEN (or the GPT baseline) with one flat, nanoGPT-style loop; or evaluate a checkpoint.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": a 130M
language model whose only temporal context is EMA traces, trained on 8B tokens of FineWeb-Edu
in bf16 on one H200 and evaluated as C4 perplexity (paper: 260; GPT-2 small: 33).

Shape glossary
    B micro-batch (batch_size), T context (block_size), A micro-batches per optimizer step summed
    over all processes (grad_accum), W processes (DDP world size). One step = A * B * T tokens.

Settings: one `TrainConfig`, every field a flag, validated in __post_init__; presets are dicts of overrides:
'130m' (the paper run, the default), 'cpu' (a small SPEN on the offline `builtin` corpus), 'cpu_bytes' (the
same corpus as UTF-8 bytes). Precedence: default < --preset < typed flags; --resume takes the checkpoint's
settings and refuses a typed model-shape flag (tokenizer included) that contradicts it (in a folder without
run.json the flags name the model: any of them). The choices where the paper is silent (AdamW, lr 6e-4 ->
6e-5, 715 warmup steps, 524,288 tokens per step: 8B tokens in 15,259 steps) are PAPER.md's train.py choices.

Data (plumbing/batches.py): the same caches and keys as data.py (--cache_dir, --max_tokens); ids are checked
against the model's vocabulary as a split loads, never inside forward. Training windows are drawn without
replacement within an epoch, a pure function of (seed, step, rank) (micro-batch m of step s on rank r reads
epoch_batch(step=s * A/W + m, rank=r, world=W)), so `--resume` is exact.

Evaluation (plumbing/evaluate.py): during training, a quick estimate on eval_iters fixed random batches (the
curve, ckpt_best); the reported numbers come from --eval_only: each corpus of --eval_data over contiguous
windows of its whole val split (or --eval_tokens), every token once, eval.json.

Speed: one host sync per step (loss, grad norm, stop flag); a failed --compile logs one warning and trains
eagerly; ms/step, MFU and ETA skip runtime.WARMUP_STEPS steps. torchrun: rank 0 tokenizes a missing cache first.

Faults: inputs, and the memory the sizes need (runtime.check_memory), are checked before anything is written or
allocated; a user's mistake is one line (exit 2 for a flag, else 1), a bug keeps its traceback; a non-finite loss
stops before its update; Ctrl-C or SIGTERM, between micro-batches, saves ckpt_last and exits 130. What a crash,
kill -9 or full disk leaves and how --resume goes on (lock, run.json, atomic writes, records read back checked):
plumbing/checkpoint.py. metrics.jsonl record s: the loss of step s's batches and, at evals, val_loss after s updates.

Run
    python train.py --preset cpu                 # offline, small SPEN; results/train_cpu holds a run
    python train.py --preset cpu_bytes           # offline, UTF-8 bytes (results/scaling: this width)
    python train.py                              # the paper run (preset 130m), one CUDA GPU
    python train.py --out_dir out --resume --max_iters 30000           # continue a run
    python train.py --eval_only --init_from out/ckpt_best.pt --eval_data c4,wikitext103  # the paper's two
    python train.py --eval_only --init_from gpt2 --eval_data c4,wikitext103      # real GPT-2 (hub weights)
    torchrun --standalone --nproc_per_node 8 train.py                  # DDP (nccl; gloo on CPU)
Writes out_dir/log.txt, metrics.jsonl, run.json, ckpt_last.pt, ckpt_best.pt (atomic), eval.json (--eval_only).
"""

import math
import os
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, fields, replace

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "train.py")  # until main_guard; the imports below take seconds

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from plumbing import batches, checkpoint, cli, corpus, runtime
import lm
from plumbing.evaluate import (count_yardsticks, estimate_loss, eval_names, evaluate_checkpoint, load_data,
                               wait_for_caches)
import variants
from gpt import GPTConfig
from spen import CONTEXTS, PREDICTORS, READS, TRACE_METHODS, SPENConfig

def reader_flag(name):
    """The flag of a reader option: its default, doc and bounds are its one declaration's (variants.ReaderOptions)."""
    f = variants.ReaderOptions.__dataclass_fields__[name]
    return cli.arg(f.default, "SPEN " + f.metadata["doc"], group="model", bounds=f.metadata["bounds"])


@dataclass
class TrainConfig:
    out_dir: str = cli.arg("out", "folder for log.txt, metrics.jsonl, checkpoints, eval.json", group="I/O")
    init_from: str = cli.arg("scratch", "scratch | gpt2 (Hugging Face weights, online) | PATH of a "
                             "train.py checkpoint", group="I/O")
    resume: bool = cli.arg(False, "continue from out_dir/ckpt_last.pt; --max_iters is the new total", group="I/O")
    eval_only: bool = cli.arg(False, "evaluate --init_from (or the --resume checkpoint) on --eval_data, "
                              "write eval.json, exit", group="I/O")
    data: str = cli.arg("fineweb-edu", "training corpus: builtin | fineweb-edu | c4 | wikitext103 | files:PATH",
                        group="data")
    eval_data: str = cli.arg("", "validation corpora, a comma list (their val splits), e.g. c4,wikitext103; "
                             "empty: --data. Training validates on the first; --eval_only evaluates each", group="data")
    cache_dir: str = cli.arg("", "token caches, as data.py --cache_dir; empty: data.py's default (.cache/data, or "
                             "$EMA_DATA_DIR)", group="data")
    max_tokens: int = cli.arg(None, "cap on the tokens of each split of --data, as data.py --max_tokens (the same "
                              "cache); None: the whole corpus", group="data", bounds=(1, 10 ** 13))
    tokenizer: str = cli.arg("gpt2", "gpt2 (BPE, V = 50257) | bytes (UTF-8 bytes, V = 256); the model's vocabulary",
                             choices=corpus.TOKENIZERS, group="data")
    block_size: int = cli.arg(1024, "T, tokens per training sequence", group="data", bounds=(2, 2 ** 20))
    model: str = cli.arg("spen", "spen (the paper's model) or gpt (attention baseline)",
                         choices=tuple(checkpoint.MODELS), group="model")
    predictor: str = cli.arg("linear", "SPEN: each block's reader of the traces, one of " + " ".join(PREDICTORS) +
                             "; or a comma list of n_layer specs [N*]PREDICTOR[(option=value, ...)] with a block's own "
                             + ", ".join(variants.READ_AS) + ": '3*delta(conv=4),softmax_attn(reads=history)'",
                             group="model")
    reads: str = cli.arg("state", "SPEN: readers see the trace state h_{t-1} (O(1)) or the whole trace history: "
                         + " | ".join(READS) + " (every block but one whose spec says its own)", group="model")
    context: str = cli.arg("ema", "SPEN: fixed-decay EMA (paper) or selective decays (control)",
                           choices=tuple(CONTEXTS), group="model")
    trace_method: str = cli.arg("auto", "SPEN: how the traces are computed, same numbers (auto: matmul on CUDA, "
                                "scan elsewhere)", choices=TRACE_METHODS, group="model")
    n_layer: int = cli.arg(12, "number of blocks", group="model", bounds=(1, 1024))
    n_embd: int = cli.arg(768, "C, residual width (FFN 4C, top-k 6%, heads C/64)", group="model", bounds=(1, 2 ** 16))
    n_head: int = cli.arg(None, "H, heads of GPT and of SPEN's attention/write readers; None: C // 64", group="model",
                          bounds=(1, 2 ** 16))
    write_alphas: tuple[float, ...] = reader_flag("write_alphas")
    read_norm: bool = reader_flag("read_norm")
    conv: int = reader_flag("conv")
    window: int = reader_flag("window")
    dropout: float = cli.arg(0.0, "dropout probability in [0, 1)", group="model", bounds=(0, 1))
    max_iters: int = cli.arg(15259, "optimizer steps of the whole run (not steps still to do)", group="optimization",
                             bounds=(1, 10 ** 10))
    lr_decay_iters: int = cli.arg(0, "step where the cosine reaches --min_lr; 0: --max_iters", group="optimization",
                                  bounds=(0, 10 ** 10))
    cooldown_iters: int = cli.arg(0, "WSD: the last N steps before --max_iters scale the lr linearly down to 0 "
                                  "(a cooldown branch of a constant-lr run); 0: none", group="optimization",
                                  bounds=(0, 10 ** 10))
    batch_size: int = cli.arg(32, "B, sequences per micro-batch per process", group="optimization", bounds=(1, 2 ** 20))
    grad_accum: int = cli.arg(16, "A, micro-batches per step summed over all processes", group="optimization",
                              bounds=(1, 2 ** 20))
    lr: float = cli.arg(6e-4, "peak learning rate", group="optimization", bounds=(0, 10))
    min_lr: float = cli.arg(6e-5, "final learning rate of the cosine", group="optimization", bounds=(0, 10))
    weight_decay: float = cli.arg(0.1, "AdamW weight decay (matrices and embeddings only)", group="optimization",
                                  bounds=(0, 10))
    beta1: float = cli.arg(0.9, "AdamW beta1", group="optimization", bounds=(0, 1))
    beta2: float = cli.arg(0.95, "AdamW beta2", group="optimization", bounds=(0, 1))
    warmup_iters: int = cli.arg(715, "linear warmup steps", group="optimization", bounds=(0, 10 ** 10))
    grad_clip: float = cli.arg(1.0, "clip the global gradient norm to this; 0: no clipping", group="optimization",
                               bounds=(0, 10 ** 6))
    eval_interval: int = cli.arg(500, "evaluate and checkpoint every this many steps", group="evaluation",
                                 bounds=(1, 10 ** 10))
    eval_iters: int = cli.arg(100, "validation batches per evaluation during training (a fixed set)",
                              group="evaluation", bounds=(1, 10 ** 7))
    eval_tokens: int = cli.arg(0, "--eval_only: evaluate the first N tokens of each val split; 0: the whole split",
                               group="evaluation", bounds=(0, 10 ** 13))
    yardsticks: str = cli.arg("auto", "n-gram yardsticks of the validation corpus: auto (only from a cache that "
                              "exists: its baselines.json, or counted here if its train split holds at most 20M "
                              "tokens), count (prepare and count whatever it takes), off",
                              choices=("auto", "count", "off"), group="evaluation")
    log_interval: int = cli.arg(10, "steps between log lines", group="evaluation", bounds=(1, 10 ** 10))
    device: str = cli.arg("auto", "auto (cuda, then mps, else cpu) | cpu | cuda | cuda:N | mps", group="system")
    dtype: str = cli.arg("auto", "autocast dtype; auto: bf16 on CUDA, fp32 elsewhere",
                         choices=("auto", "fp32", "bf16", "fp16"), group="system")
    compile: bool = cli.arg(False, "torch.compile the model", group="system")
    memory_check: bool = cli.arg(True, "refuse, before the run, a configuration whose estimated memory (parameters, "
                                 "AdamW state, logits, activations) exceeds the device's", group="system")
    seed: int = cli.arg(1337, "seed of initialisation and data order", group="system", bounds=cli.SEED)

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        req = cli.require
        req(0 < self.lr, "--lr must be > 0, got {}", self.lr)
        req(self.min_lr <= self.lr, "--min_lr must be in [0, --lr={}], got {}", self.lr, self.min_lr)
        for name in ("beta1", "beta2", "dropout"):
            req(getattr(self, name) < 1, "--{} must be in [0, 1), got {}", name, getattr(self, name))
        cli.check_device("device", self.device)
        req(not (self.resume and self.init_from != "scratch"), "--resume continues out_dir/ckpt_last.pt; "
            "drop --init_from {} (or start a new --out_dir without --resume)", self.init_from)
        req(not (self.eval_only and self.init_from == "scratch" and not self.resume),
            "--eval_only needs a trained model: --init_from PATH|gpt2, or --resume")
        req(bool(self.out_dir), "--out_dir must not be empty")
        req(all(eval_names(self)), "--eval_data {!r} has an empty name in its comma list", self.eval_data)
        unused = [f"--{f.name}" for f in fields(self) if self.model == "gpt" and f.name in SPEN_ONLY and
                  getattr(self, f.name) != f.default and (self.init_from == "scratch" or self.resume)]
        req(not unused, "model settings: {}: SPEN only; --model gpt has no such part: drop it (or --model spen)",
            ", ".join(unused))  # as a SPEN reader refuses an option it does not use


READER_FLAGS = tuple(f.name for f in fields(TrainConfig) if f.name in variants.ReaderOptions.__dataclass_fields__)
MODEL_FIELDS = ("model", "predictor", "reads", "context", "n_layer", "n_embd", "n_head", *READER_FLAGS, "dropout",
                "tokenizer")
SPEN_ONLY = ("predictor", "reads", "context", "trace_method", *READER_FLAGS)

PRESETS = {
    # The paper's run: 32 x 1024 x 16 = 524,288 tokens/step; 8e9 / 524,288 = 15,259 steps.
    "130m": dict(data="fineweb-edu", eval_data="c4", compile=True),
    # Small SPEN on the offline corpus. The 50304-wide tied head dominates the CPU cost at width
    # 128 (6 * 50304 * 128 = 39 of 44 MFLOP per token), so a step is kept at 1024 tokens.
    "cpu": dict(data="builtin", n_layer=4, n_embd=128, block_size=128, batch_size=8, grad_accum=1,
                max_iters=600, lr=2e-3, min_lr=2e-4, warmup_iters=20, eval_interval=50, eval_iters=10,
                log_interval=10),
    # The same corpus read as UTF-8 bytes (V = 256): the head is cheap, so a step holds 16 x 256
    # = 4,096 bytes and 1,500 steps are 6.1M bytes (about 2.3 passes over builtin's train split),
    # enough for a 4 x 128 model to go well below the byte bigram (results/scaling has the curve).
    "cpu_bytes": dict(data="builtin", tokenizer="bytes", n_layer=4, n_embd=128, block_size=256, batch_size=16,
                      grad_accum=1, max_iters=1500, lr=2e-3, min_lr=2e-4, warmup_iters=50, eval_interval=100,
                      eval_iters=20, log_interval=20),
}


def make_config(preset="130m", **overrides):
    """TrainConfig(defaults < PRESETS[preset] < overrides) whose model the model's own checks accept (built on
    the meta device: nothing allocated); raises cli.ConfigError. The command line checks it once, as it builds."""
    cfg = cli.build(TrainConfig, PRESETS, preset, **overrides)
    if cfg.init_from == "scratch" or cfg.resume:
        with torch.device("meta"):
            build_model(cfg, seeded=False)
    return cfg


def model_config(cfg):
    """The model's config from a TrainConfig; the model checks it as it is built (spen.check, gpt.check)."""
    shape = dict(n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, block_size=cfg.block_size,
                 dropout=cfg.dropout, vocab_size=corpus.vocab_size(cfg.tokenizer))
    if cfg.model == "gpt":  # SPEN's own flags are at their defaults (TrainConfig refuses others)
        return GPTConfig(**shape)
    return SPENConfig(**shape, predictor=cfg.predictor, reads=cfg.reads, context=cfg.context,  # blocks: spen.check
                      trace_method=cfg.trace_method, **{k: getattr(cfg, k) for k in READER_FLAGS})


def build_model(cfg, seeded=True, config=None):
    """A freshly initialised model for cfg (config: its model_config, if made already), seeded by cfg.seed:
    the one way a command gets a model from a TrainConfig. seeded=False leaves the RNG alone: a model built
    under torch.device("meta") for its sizes, inside a run that has seeded already. A config the model's own
    checks refuse (a ValueError naming its config's field, e.g. linear + history) is one line."""
    Config, Model = checkpoint.MODELS[cfg.model]
    if seeded:
        torch.manual_seed(cfg.seed)
    try:
        return Model(config or model_config(cfg))
    except ValueError as e:
        if not str(e).startswith(Config.__name__ + "."):  # not the config's check: a bug keeps its traceback
            raise
        raise cli.ConfigError(f"model settings: {e}") from None


# ---- the model: scratch, resume, a checkpoint, or GPT-2 ------------------------------------


def load_model(cfg, config):
    """(model, checkpoint dict or None, cfg) for every way a run can start; config: cfg's model_config. With a
    checkpoint, the model settings of cfg are replaced by the checkpoint's, so logs and saves are true."""
    if cfg.init_from == "gpt2":
        model = runtime.load_gpt2("gpt2")
        return model, None, replace(cfg, model="gpt", n_layer=12, n_embd=768, dropout=0.0, tokenizer="gpt2",
                                    block_size=min(cfg.block_size, model.config.block_size))
    if cfg.resume or cfg.init_from != "scratch":
        path = start_path(cfg)
        ckpt = checkpoint.load(path)  # parse_args' read, if it made one (keep=True)
        if cfg.resume:  # the folder's own run (run.json's; without one, the model cfg asks for)
            checkpoint.check_run(cfg.out_dir, ckpt, path, checkpoint.identity(cfg.model, asdict(config)))
        model = checkpoint.build(ckpt, path)
        saved = {k: ckpt["train"][k] for k in MODEL_FIELDS if k in ckpt["train"]}
        if ckpt["kind"] == "gpt":  # a learned position table: no context beyond its rows
            saved["block_size"] = min(cfg.block_size, model.config.block_size)
        return model, (ckpt if cfg.resume else None), replace(cfg, **saved)
    return build_model(cfg, config=config), None, cfg


def start_path(cfg):
    """The checkpoint a run starts from: --resume's out_dir/ckpt_last.pt, or --init_from's file."""
    return os.path.join(cfg.out_dir, "ckpt_last.pt") if cfg.resume else cfg.init_from


def merge_checkpoint_settings(typed):
    """--resume / --init_from on the command line: the checkpoint's settings under the flags
    typed; a typed model-shape flag that contradicts the checkpoint is refused."""
    preset, settings = typed.get("preset") or "130m", {k: v for k, v in typed.items() if k != "preset"}
    if not (settings.get("resume") or settings.get("init_from", "scratch") not in ("scratch", "gpt2")):
        return cli.build(TrainConfig, PRESETS, preset, **settings)  # the model checks itself as start builds it
    # the model flags typed are checked once merged with the checkpoint's (a --predictor list is the folder's depth)
    base = cli.build(TrainConfig, PRESETS, preset, **{k: v for k, v in settings.items() if k not in MODEL_FIELDS})
    path = start_path(base)
    saved = checkpoint.load(path, keep=True)["train"]  # kept: the run reads its weights from this read
    clash = [f"--{k} {typed[k]} (checkpoint: {saved.get(k)})" for k in MODEL_FIELDS
             if k in typed and k in saved and typed[k] != saved[k]]
    cli.require(not clash, "{} differs from the checkpoint {}; drop the flag, or start a new run in another "
                "--out_dir", ", ".join(clash), path)
    if not base.resume and not base.eval_only:  # fine-tuning from a checkpoint: only its model
        return replace(base, **{k: saved[k] for k in MODEL_FIELDS if k in saved and k not in settings},
                       **{k: v for k, v in settings.items() if k in MODEL_FIELDS})
    keep = {"out_dir", "init_from", "resume", "eval_only"}
    if base.resume and not os.path.exists(os.path.join(base.out_dir, "run.json")):
        keep |= set(MODEL_FIELDS)  # no record of the folder's model: the flags name it (load_model checks)
    merged = {k: v for k, v in saved.items() if k in {f.name for f in fields(TrainConfig)} and k not in keep}
    merged.update(settings)
    merged.update({k: getattr(base, k) for k in keep if k not in settings})
    return TrainConfig(**merged)


@dataclass
class Progress:
    """Where a run stands; saved in every checkpoint."""
    step: int = 0  # optimizer steps done (= the data position)
    best_val: float = float("inf")
    val_loss: float = float("nan")
    pending: dict = None  # the record of a step whose evaluation a stop interrupted: --resume evaluates it first


def save_checkpoint(folder, name, cfg, model, optimizer, prog):
    weights = model.state_dict()
    folder.save(name, {"model": weights, "digest": checkpoint.digest(weights), "optimizer": optimizer.state_dict(),
                       "kind": cfg.model, "config": asdict(model.config), "train": asdict(cfg), **asdict(prog),
                       "rng": checkpoint.rng_state()})


def evaluate_and_save(cfg, place, model, raw_model, optimizer, prog, val, folder, rec, stop):
    """Validation loss at the current step into its record rec, rec to metrics.jsonl, then ckpt_best
    (if better) and ckpt_last: the record is on disk before the checkpoints that claim its step. A
    stop between evaluation batches saves ckpt_last with rec pending (--resume evaluates it first)."""
    prog.pending, loss = rec, estimate_loss(model, val, cfg, place, stop)
    if loss is None:
        stopped(cfg, raw_model, optimizer, prog, folder)
    prog.pending, prog.val_loss = None, loss
    rec["val_loss"] = loss
    if not math.isfinite(prog.val_loss):
        raise SystemExit(f"non-finite validation loss ({prog.val_loss}) at step {prog.step}: stopping; "
                         f"{folder.path('ckpt_last.pt')} (the last good checkpoint) is left as it was")
    folder.log(f"step {prog.step:6d} | val loss {prog.val_loss:.4f} | val ppl {math.exp(min(prog.val_loss, 50)):.1f}")
    folder.record(rec)  # folder.save makes it durable before it writes a checkpoint
    if prog.val_loss < prog.best_val:
        prog.best_val = prog.val_loss
        save_checkpoint(folder, "ckpt_best.pt", cfg, raw_model, optimizer, prog)
    save_checkpoint(folder, "ckpt_last.pt", cfg, raw_model, optimizer, prog)


def stopped(cfg, raw_model, optimizer, prog, folder):
    """Ctrl-C or SIGTERM (runtime.StopFlag): ckpt_last at prog.step, the last completed step (the
    gradients of a step in progress are dropped), then exit 130."""
    save_checkpoint(folder, "ckpt_last.pt", cfg, raw_model, optimizer, prog)
    folder.log(f"interrupted: saved {folder.path('ckpt_last.pt')} at step {prog.step}; continue with --resume")
    raise SystemExit(130)


# ---- the run -------------------------------------------------------------------------------


def main(cfg, tokens=None):
    """Train (or evaluate) as cfg says; returns a dict of the final numbers. tokens: (train, val)
    token arrays to use instead of reading --data / --eval_data (bench.py's train_run: random tokens)."""
    t0, place = time.time(), runtime.setup_process(cfg)
    try:
        with ExitStack() as stack:  # lock and files are released however the run ends
            cfg, model, ckpt, data, folder, yardsticks = start(cfg, place, stack, tokens)
            if cfg.eval_only:
                result = evaluate_checkpoint(cfg, place, model, data[1], folder, yardsticks, t0)
            else:
                optimizer, prog = optimizer_and_progress(cfg, place, model, ckpt)
                result = dict(train(cfg, place, model, optimizer, prog, data, folder), yardsticks=yardsticks)
        if place.ddp:
            dist.barrier()  # wait for rank 0's last checkpoint before tearing gloo/nccl down
        return result
    finally:
        if place.ddp and dist.is_initialized():
            dist.destroy_process_group()


def start(cfg, place, stack, tokens=None):
    """Check every input (model, checkpoint, data), then open the run folder and log how the run
    was made -> (cfg with the checkpoint's settings, model on its device, checkpoint or None,
    (train tokens, {corpus: val tokens}), folder, yardsticks)."""
    checkpoint.check_out_dir(cfg.out_dir)
    config = model_config(cfg)
    if cfg.memory_check and cfg.init_from != "gpt2":  # a size that cannot fit: one line, before any allocation
        runtime.check_memory(config, cfg.batch_size, cfg.block_size, place.device, cfg.eval_only)
    model, ckpt, cfg = load_model(cfg, config)  # built (and so checked by the model) once
    if tokens is not None:
        data = tokens[0], {eval_names(cfg)[0]: tokens[1]}
    else:
        if place.ddp and not place.master:
            wait_for_caches(cfg)  # rank 0 tokenizes first; the others then read its caches
        data = load_data(cfg, model.config.vocab_size)
    runtime.start_group(place)
    model.to(place.device)
    yardsticks = count_yardsticks(cfg, eval_names(cfg)[0]) if place.master and tokens is None else None
    folder = checkpoint.RunFolder(cfg.out_dir, place.master, stack)  # the first write
    for line in runtime.header(cfg, place, model, yardsticks, eval_names(cfg)[0]):
        folder.log(line)
    if not cfg.eval_only:
        folder.claim(cfg.model, asdict(model.config), fresh=not cfg.resume)  # run.json: what this folder trains
    return cfg, model, ckpt, data, folder, yardsticks


def optimizer_and_progress(cfg, place, model, ckpt):
    """AdamW (lm.configure_optimizers) and where the run stands: a fresh start, or the --resume
    checkpoint's optimizer state, step, best loss and random streams."""
    optimizer = lm.configure_optimizers(model, cfg.weight_decay, cfg.lr, (cfg.beta1, cfg.beta2), place.device_type)
    if ckpt is None:
        return optimizer, Progress()
    try:  # a checkpoint damaged by hand (no optimizer, another model's) is one line
        optimizer.load_state_dict(ckpt["optimizer"])
        checkpoint.set_rng_state(ckpt["rng"])
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        raise checkpoint.CheckpointError(f"{start_path(cfg)} cannot be resumed: its optimizer or random state is "
                                         f"missing or damaged ({checkpoint._one_line(e)}); fine-tune from it with "
                                         f"--init_from in a new --out_dir") from None
    return optimizer, Progress(ckpt["step"], ckpt["best_val"], ckpt["val_loss"], ckpt.get("pending"))


def cosine_lr(step, lr, min_lr, warmup, decay_end, cooldown=0, end=0):
    """Linear warmup to lr over `warmup` steps (step 0 gets lr / warmup), then a cosine from lr
    to min_lr at step decay_end, then flat at min_lr. With cooldown = N > 0 (WSD's cooldown), the
    last N steps before `end` scale that by (end - step) / N: linearly to 0 (the last step: 1 / N)."""
    if cooldown and step >= end - cooldown:
        return cosine_lr(step, lr, min_lr, warmup, decay_end) * (end - step) / cooldown
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= decay_end:
        return min_lr
    ratio = (step - warmup) / max(1, decay_end - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def train(cfg, place, raw_model, optimizer, prog, data, folder):
    """The loop: one optimizer step per iteration; log lines, evaluations and checkpoints.
    One host sync per step: the `.tolist()` that reads the loss, grad norm and stop flag (the
    finiteness check and the log need them); nothing else in a step waits for the device."""
    train_data, val = data[0], data[1][eval_names(cfg)[0]]
    accum = cfg.grad_accum // place.world  # micro-batches per process per step
    tokens_per_step = cfg.grad_accum * cfg.batch_size * cfg.block_size
    folder.log(f"{cfg.model}: {cfg.max_iters} steps x {tokens_per_step:,} tokens = "
               f"{batches.epochs(len(train_data), cfg.block_size, cfg.max_iters * cfg.grad_accum, cfg.batch_size):.2f}"
               f" epochs of {len(train_data):,} train tokens (windows without replacement within an epoch); "
               + (f"resuming at step {prog.step}" if cfg.resume else f"from {cfg.init_from}"))

    def batch(micro):  # micro-batch `micro` of step prog.step: a pure function of (seed, step, rank)
        return batches.epoch_batch(train_data, cfg.batch_size, cfg.block_size, step=prog.step * accum + micro,
                                   seed=cfg.seed, rank=place.rank, world=place.world, device=place.device)

    def evaluate(rec):  # validation loss into rec, rec recorded, then ckpt_best (if better) and ckpt_last
        evaluate_and_save(cfg, place, model, raw_model, optimizer, prog, val, folder, rec, stop)

    model = runtime.compiled_or_eager(raw_model, cfg.compile, place.autocast, *batch(0), folder.log)
    if place.ddp:
        model = DDP(model, device_ids=[int(place.device.split(":")[1])] if place.device_type == "cuda" else None)
    scaler = torch.amp.GradScaler(place.device_type, enabled=(place.dtype == "fp16"))
    folder.open_metrics(keep_upto=prog.step if cfg.resume else -1)
    stop = runtime.StopFlag()
    t_train = time.time()
    try:
        if not cfg.resume or prog.pending:  # step 0's evaluation, or the one a stop interrupted
            evaluate(prog.pending or {"step": 0})
        speed = runtime.Speed(start=prog.step)
        while prog.step < cfg.max_iters:
            lr = cosine_lr(prog.step, cfg.lr, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters or cfg.max_iters,
                           cfg.cooldown_iters, cfg.max_iters)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros((), device=place.device)
            for micro in range(accum):  # gradients are all-reduced on the last micro-batch only
                if stop.requested and not place.ddp:  # a stop within a step: read below, this step dropped
                    break
                if place.ddp:
                    model.require_backward_grad_sync = micro == accum - 1
                x, y = batch(micro)
                with place.autocast:
                    _, loss = model(x, y)
                loss_sum += loss.detach().float()
                scaler.scale(loss / accum).backward()
            scaler.unscale_(optimizer)
            # a tensor: clip_grad_norm_ does not sync (no error_if_nonfinite); read with the loss below
            grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip or float("inf"))
            asked = torch.full((), float(stop.requested), device=place.device)  # Ctrl-C here; a fill, no copy
            flags = torch.stack([loss_sum / accum, grad_norm.float(), asked])
            if place.ddp:
                dist.all_reduce(flags)  # all ranks see the same loss and stop request: they stop together
            train_loss, gnorm, stopping = (flags / place.world).tolist()  # THE host sync of the step
            if stopping:  # Ctrl-C: this step's gradients are dropped; the state is that of prog.step
                stopped(cfg, raw_model, optimizer, prog, folder)
            check_finite(train_loss, gnorm, prog, folder, place)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            prog.step += 1

            dt = speed.tick(prog.step)
            rec = {"step": prog.step, "train_loss": train_loss, "lr": lr, "grad_norm": gnorm, "ms": round(1000 * dt, 2)}
            if prog.step % cfg.log_interval == 0 or prog.step == cfg.max_iters:
                folder.log(log_line(prog.step, rec, speed, tokens_per_step, cfg, place, raw_model))
            if prog.step % cfg.eval_interval == 0 or prog.step == cfg.max_iters:
                evaluate(rec)  # rec, with its val_loss, is written before the checkpoints of this step
                speed.pause()  # evaluation is not part of the step time
            else:
                folder.record(rec)
    finally:
        stop.restore()
    seconds = time.time() - t_train
    folder.log(f"done: step {prog.step}, val loss {prog.val_loss:.4f}, best {prog.best_val:.4f}, {seconds:.0f} s")
    return dict(val_loss=prog.val_loss, best_val=prog.best_val, params=raw_model.num_params(), step=prog.step,
                tokens=prog.step * tokens_per_step, seconds=seconds, out_dir=cfg.out_dir, kind=cfg.model,
                **speed.summary(raw_model, cfg.block_size, place.device, tokens_per_step))


def check_finite(train_loss, gnorm, prog, folder, place):
    """Stop before the update on a non-finite loss or gradient norm (fp16: an inf gradient is the
    GradScaler's business: it skips the step and rescales)."""
    if not math.isfinite(train_loss) or not (math.isfinite(gnorm) or place.dtype == "fp16"):
        raise SystemExit(f"non-finite loss ({train_loss}) or gradient norm ({gnorm}) at step {prog.step}: stopping "
                         f"before the update; {folder.path('ckpt_last.pt')} (the last good checkpoint) is left "
                         f"as it was. Lower --lr, or use --dtype fp32")


def log_line(step, rec, speed, tokens_per_step, cfg, place, model):
    """step | loss | lr | grad norm | ms/step | tok/s | (MFU, GPU memory) | ETA; the rates and
    the ETA once the warm-up steps are over."""
    head = (f"step {step:6d} | loss {rec['train_loss']:.4f} | lr {rec['lr']:.2e} | grad {rec['grad_norm']:.3f} | ")
    mem = (f" | mem {torch.cuda.max_memory_allocated(place.device) / 2**30:.1f} GiB"
           if place.device_type == "cuda" else "")
    if speed.avg is None:
        return head + f"{rec['ms']:.0f} ms (warm-up step: no rates yet){mem}"
    mfu = runtime.estimate_mfu(model, cfg.block_size, tokens_per_step / speed.avg, runtime.gpu_peak(place.device))
    eta = (cfg.max_iters - step) * speed.avg
    return (head + f"{1000 * speed.avg:.0f} ms/step | {tokens_per_step / speed.avg:,.0f} tok/s"
            + (f" | mfu {100 * mfu:.1f}%" if mfu is not None else "") + mem + " | eta "
            + (f"{eta / 3600:.2f} h" if eta > 3600 else f"{eta / 60:.1f} min"))


# ---- command line --------------------------------------------------------------------------


def get_parser():
    return cli.parser(TrainConfig, "Train or evaluate SPEN / GPT (see the module docstring).", presets=PRESETS)


def parse_args(argv=None):
    """The command line as a TrainConfig (with --resume / --init_from, merged with the checkpoint)."""
    p = get_parser()
    p.prog = "train.py"
    typed = cli.given(p, argv)
    try:
        return merge_checkpoint_settings(typed)
    except cli.UserError as e:
        p.exit(2, f"{p.prog}: error: {e}\n")


def cli_main(argv=None):
    """`python train.py ...`: one line and a non-zero exit for every expected failure."""
    cfg = parse_args(argv)
    # data errors (sources.DataUnavailable) are cli.UserErrors: one line too; a Ctrl-C after the first
    # step is train.py's own (runtime.StopFlag: it saves and says so)
    return cli.main_guard(lambda: main(cfg), prog="train.py",
                          interrupted="interrupted before the first step; nothing was saved")


if __name__ == "__main__":
    cli_main()

"""Train (or evaluate) SPEN or the GPT baseline: one flat nanoGPT-style loop.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": a 130M
language model whose only temporal context is EMA traces, trained on 8B tokens of FineWeb-Edu
in bf16 on one H200, evaluated as perplexity on C4 (paper: 260; GPT-2 small: 33).

Shape glossary
    B micro-batch (--batch_size), T context (--block_size), A micro-batches per iteration
    summed over all processes (--grad_accum), W processes (DDP world size), V vocabulary.
    One iteration = one optimizer step on A * B * T tokens.

Code name -> paper / meaning
    PRESETS['130m']   the paper's run (12 blocks, width 768, FineWeb-Edu, bf16, 8B tokens)
    PRESETS['cpu']    a small SPEN on the offline 'builtin' corpus (ours, for 2 CPU cores)
    get_lr(step)      linear warmup then cosine decay to --min_lr at --lr_decay_iters
    metrics.jsonl     one JSON object per iteration: step, train_loss, lr, grad_norm (+ val_loss)

Choices where the paper is silent (all ours, in PRESETS['130m']): AdamW (0.9, 0.95), weight
decay 0.1, peak lr 6e-4 and min lr 6e-5 (GPT-3 small), warmup 715 iterations (GPT-3's 375M
tokens), cosine decay over the whole run, gradient clipping at 1.0, 524,288 tokens per iteration
(32 x 1024 x 16) so 8B tokens are 15,259 iterations. Validation loss of the paper run is on
C4 validation (the paper's headline metric), not on held-out FineWeb-Edu.

Data: `data.get_batch` is a pure function of (seed, step, rank), so the data position of a run is
its step: a checkpoint needs no loader state and `--resume` is exact. Micro-batch m of iteration
s on rank r reads get_batch(step=s * A/W + m, rank=r). Validation reads a fixed set of
--eval_iters batches (seed EVAL_SEED, independent of --seed, so all runs see the same ones).

Settings: flags on the command line > (with --resume) the checkpoint's own arguments > --preset
> DEFAULTS. So `--resume --max_iters 2N` continues an N-step run with its schedule: the cosine
still ends at the old --lr_decay_iters (the run goes on at --min_lr) unless you pass a new one.
Model-shape flags that contradict the checkpoint are refused.

Safety: checkpoints are written only after an evaluation (ckpt_best when it improved, then
ckpt_last); a non-finite loss or gradient norm stops the run before that update is applied,
so the last checkpoint is always a good one. metrics.jsonl record s (1..max_iters) holds the
loss of iteration s's batches (weights after s - 1 updates) and, at evals, val_loss after s
updates; record 0 holds only the initial val_loss. On --resume, records past the checkpoint
step (left by a crash) are dropped.

Run (expected output and time)
    python train.py --preset cpu    # offline, 600 steps; val loss 10.83 -> 5.84 (step 100) -> 4.95
                                    # nats (step 600); 1655 s measured on a busy shared 2-core
                                    # AMD EPYC (load ~7), estimated ~5 min on 2 quiet cores
    python train.py                                   # the paper run, 130m preset, one GPU
    python train.py --out_dir out --resume --max_iters 30000     # continue a run
    python train.py --eval_only --init_from out/ckpt_best.pt --eval_data c4   # perplexity
    python train.py --eval_only --init_from gpt2 --eval_data c4  # real GPT-2 (needs network)
    torchrun --standalone --nproc_per_node 8 train.py            # DDP (nccl; gloo on CPU)
Writes out_dir/log.txt (header + one line per --log_interval), metrics.jsonl, ckpt_last.pt,
ckpt_best.pt (both written to a temp file, then renamed), and eval.json for --eval_only.
"""

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import asdict, fields
from types import SimpleNamespace

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import data as data_lib
import ema
from gpt import GPT, GPTConfig
from spen import CONTEXTS, PREDICTORS, SPEN, SPENConfig

MODELS = {"spen": (SPENConfig, SPEN), "gpt": (GPTConfig, GPT)}
EVAL_SEED = 1234  # validation batches are the same for every run, whatever its --seed
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "4090": 165e12}  # dense bf16

# Values every flag takes unless the preset or the command line says otherwise.
DEFAULTS = dict(
    model="spen", predictor="linear", context="ema", n_layer=12, n_embd=768, dropout=0.0,
    data="fineweb-edu", eval_data=None, out_dir="out", init_from="scratch",
    max_iters=15259, lr_decay_iters=None, batch_size=32, block_size=1024, grad_accum=16,
    lr=6e-4, min_lr=6e-5, weight_decay=0.1, beta1=0.9, beta2=0.95, warmup_iters=715, grad_clip=1.0,
    eval_interval=500, eval_iters=100, log_interval=10,
    device="auto", dtype="auto", compile=False, seed=1337,
)
PRESETS = {
    # The paper's run: 32 x 1024 x 16 = 524,288 tokens/iteration; 8e9 / 524,288 = 15,259 iterations.
    "130m": dict(data="fineweb-edu", eval_data="c4", compile=True),
    # Small SPEN on the offline corpus. The 50304-wide tied output layer dominates CPU cost at
    # width 128 (6 * 50304 * 128 = 39 of the 44 MFLOP/token), so B * T is kept at 1024 tokens per
    # iteration. Measured 0.7 s of CPU time per iteration on one thread of a (busy) 2-core AMD
    # EPYC; with 2 quiet cores ~0.4-0.5 s, so 600 iterations (614k tokens) take ~5 minutes.
    "cpu": dict(data="builtin", eval_data="builtin", n_layer=4, n_embd=128, block_size=128,
                batch_size=8, grad_accum=1, max_iters=600, lr=2e-3, min_lr=2e-4, warmup_iters=20,
                eval_interval=50, eval_iters=10, log_interval=10, compile=False),
}
MODEL_FLAGS = ("model", "predictor", "context", "n_layer", "n_embd", "dropout")


def get_parser():
    epilog = "unset flags take the preset's value, else the default. defaults: " + ", ".join(
        f"{k}={v}" for k, v in DEFAULTS.items()) + "".join(
        f". preset {name}: " + ", ".join(f"{k}={v}" for k, v in pre.items()) for name, pre in PRESETS.items())
    p = argparse.ArgumentParser(description="Train or evaluate SPEN / GPT (see the module docstring).", epilog=epilog)
    # Flags default to None: the value then comes from the preset, else from DEFAULTS
    # (or, with --resume, from the checkpoint's own arguments).
    g = p.add_argument_group("I/O")
    g.add_argument("--preset", choices=sorted(PRESETS), help="bundle of defaults: 130m (paper run, the default) or cpu")
    g.add_argument("--out_dir", help="folder for log.txt, metrics.jsonl, checkpoints, eval.json")
    g.add_argument("--resume", action="store_true", help="continue from out_dir/ckpt_last.pt; --max_iters is the new total")
    g.add_argument("--init_from", help="scratch | gpt2 (Hugging Face weights, online) | PATH to a train.py checkpoint")
    g = p.add_argument_group("data")
    g.add_argument("--data", help="training corpus: builtin | fineweb-edu | c4 | wikitext103 | files:PATH")
    g.add_argument("--eval_data", help="validation corpus (its val split); default: --data")
    g.add_argument("--block_size", type=int, help="T, tokens per sequence")
    g = p.add_argument_group("model")
    g.add_argument("--model", choices=sorted(MODELS), help="spen (the paper's model) or gpt (attention baseline)")
    g.add_argument("--predictor", choices=sorted(PREDICTORS), help="SPEN predictor that reads the traces")
    g.add_argument("--context", choices=sorted(CONTEXTS), help="SPEN context: fixed-decay EMA (paper) or selective (control)")
    g.add_argument("--n_layer", type=int, help="number of blocks")
    g.add_argument("--n_embd", type=int, help="C, residual width (FFN 4C, top-k 6%%, heads C/64 when C != 768)")
    g.add_argument("--dropout", type=float, help="dropout probability")
    g = p.add_argument_group("optimization")
    g.add_argument("--max_iters", type=int, help="total optimizer steps of the run (not steps still to do)")
    g.add_argument("--lr_decay_iters", type=int, help="cosine reaches --min_lr here; default --max_iters")
    g.add_argument("--batch_size", type=int, help="B, sequences per micro-batch per process")
    g.add_argument("--grad_accum", type=int, help="A, micro-batches per step summed over all processes")
    g.add_argument("--lr", type=float, help="peak learning rate")
    g.add_argument("--min_lr", type=float, help="final learning rate of the cosine")
    g.add_argument("--weight_decay", type=float, help="AdamW weight decay (matrices and embeddings only)")
    g.add_argument("--beta1", type=float, help="AdamW beta1")
    g.add_argument("--beta2", type=float, help="AdamW beta2")
    g.add_argument("--warmup_iters", type=int, help="linear warmup steps")
    g.add_argument("--grad_clip", type=float, help="clip the global gradient norm to this (0: off)")
    g = p.add_argument_group("evaluation")
    g.add_argument("--eval_interval", type=int, help="evaluate and checkpoint every this many steps")
    g.add_argument("--eval_iters", type=int, help="validation batches per evaluation (a fixed set)")
    g.add_argument("--log_interval", type=int, help="steps between log lines")
    g.add_argument("--eval_only", action="store_true", help="evaluate --init_from on --eval_data, write eval.json, exit")
    g = p.add_argument_group("system")
    g.add_argument("--device", help="auto | cpu | cuda | cuda:N | mps")
    g.add_argument("--dtype", choices=["auto", "fp32", "bf16", "fp16"], help="autocast dtype; auto: bf16 on CUDA, fp32 elsewhere")
    g.add_argument("--compile", action=argparse.BooleanOptionalAction, help="torch.compile the model (130m preset: on)")
    g.add_argument("--seed", type=int, help="seed of initialisation and data order")
    return p


def resolve(args, saved=None):
    """Flags given on the command line > the checkpoint's arguments (resume) > preset > DEFAULTS."""
    given = {k: v for k, v in vars(args).items() if v is not None}
    preset = given.get("preset") or (saved or {}).get("preset") or "130m"
    a = {**DEFAULTS, **PRESETS[preset], **{k: v for k, v in (saved or {}).items() if k in DEFAULTS}, **given}
    a["preset"] = preset
    a["eval_data"] = a["eval_data"] or a["data"]
    a["lr_decay_iters"] = a["lr_decay_iters"] or a["max_iters"]
    return SimpleNamespace(**a), given


def model_config(a, Config):
    """Build the model config from the flags; fields the model lacks (e.g. predictor for GPT) are
    skipped. Away from the paper's width, FFN width, top-k and heads scale with C."""
    names = {f.name for f in fields(Config)}
    kw = dict(n_layer=a.n_layer, n_embd=a.n_embd, block_size=a.block_size, dropout=a.dropout,
              predictor=a.predictor, context=a.context)
    if a.n_embd != Config().n_embd:
        kw.update(ffn_hidden=4 * a.n_embd, ffn_topk=max(1, round(0.06 * 4 * a.n_embd)), n_head=max(1, a.n_embd // 64))
    return Config(**{k: v for k, v in kw.items() if k in names})


def load_checkpoint(path):
    """torch.load a train.py checkpoint (tensors and plain types only); one-line SystemExit if not."""
    if not os.path.exists(path):
        raise SystemExit(f"checkpoint {path} not found; train first or pass the right path")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise SystemExit(f"checkpoint {path} is corrupt or not a train.py checkpoint "
                         f"({type(e).__name__}); delete it or point to another one") from None
    missing = [k for k in ("model", "kind", "config", "args", "step") if k not in ckpt]
    if missing or ckpt.get("kind") not in MODELS:
        raise SystemExit(f"checkpoint {path} is not a train.py checkpoint (missing {missing or 'a known kind'})")
    return ckpt


def build_from_checkpoint(ckpt, path):
    """Rebuild the model a checkpoint describes and load its weights (clear error on mismatch)."""
    Config, Model = MODELS[ckpt["kind"]]
    try:
        model = Model(Config(**ckpt["config"]))
        model.load_state_dict(ckpt["model"])
    except (TypeError, RuntimeError, ValueError) as e:
        msg = " ".join(str(e).split())[:300]  # one line, however long torch's message
        raise SystemExit(f"checkpoint {path} does not match this code's {ckpt['kind']} model: {msg}") from None
    return model


def save_atomic(obj, path):
    """Write to path.tmp and rename, so a crash never leaves half a checkpoint."""
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def rng_state():
    """Every random stream as tensors and plain types (loadable with weights_only=True)."""
    npst = np.random.get_state()
    pyst = random.getstate()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [npst[0], torch.from_numpy(npst[1].astype(np.int64)), *npst[2:]],
            "python": [pyst[0], list(pyst[1]), pyst[2]]}


def set_rng_state(st):
    torch.set_rng_state(st["torch"].cpu())
    if st["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in st["cuda"]])
    n = st["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), *n[2:]))
    random.setstate((st["python"][0], tuple(st["python"][1]), st["python"][2]))


def provenance(a, device, nparams, world):
    """Header lines: how this run was made, so a log can be reproduced."""
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    dev = platform.processor() or platform.machine()
    if device.startswith("cuda"):
        dev = torch.cuda.get_device_name(device)
    elif os.path.exists("/proc/cpuinfo"):
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")]
        dev = f"{names[0]}, {os.cpu_count()} cores" if names else dev
    return [f"argv: {' '.join(sys.argv)}",
            f"git: {commit or 'unknown'} | python {platform.python_version()} | torch {torch.__version__} | "
            f"numpy {np.__version__} | {platform.platform()}",
            f"device: {device} ({dev}) x {world} process(es), {torch.get_num_threads()} CPU threads",
            f"params: {nparams:,} | args: {json.dumps(vars(a), sort_keys=True)}"]


@torch.no_grad()
def estimate_loss(model, val, a, device, ctx, rank, world):
    """Mean cross-entropy over a fixed set of eval_iters validation batches (all ranks averaged)."""
    model.eval()
    total = torch.zeros((), device=device)
    for i in range(a.eval_iters):
        x, y = data_lib.get_batch(val, a.batch_size, a.block_size, step=i, seed=EVAL_SEED, rank=rank, device=device)
        with ctx:
            _, loss = model(x, y)
        total += loss.float()
    if world > 1:
        dist.all_reduce(total)
    model.train()
    return total.item() / (a.eval_iters * world)


def get_lr(step, a):
    """Linear warmup to lr over warmup_iters, cosine to min_lr at lr_decay_iters, then flat."""
    if step < a.warmup_iters:
        return a.lr * (step + 1) / a.warmup_iters
    if step >= a.lr_decay_iters:
        return a.min_lr
    ratio = (step - a.warmup_iters) / max(1, a.lr_decay_iters - a.warmup_iters)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def main(args):
    ema.configure_allocator()  # glibc: reuse freed large tensors instead of page-faulting them in
    a, given = resolve(args)
    ckpt = init = None
    if a.eval_only and a.init_from == "scratch" and not a.resume:
        raise SystemExit("--eval_only needs --init_from PATH|gpt2 (or --resume) to evaluate a trained model")
    if a.resume:  # the checkpoint's arguments become the defaults (its preset, sizes, schedule)
        ckpt = load_checkpoint(os.path.join(a.out_dir, "ckpt_last.pt"))
        a, given = resolve(args, ckpt["args"])
        saved = ckpt["args"]
        clash = [f"--{k} {given[k]} (checkpoint: {saved.get(k)})" for k in MODEL_FLAGS if k in given and given[k] != saved.get(k)]
        if clash:
            raise SystemExit(f"--resume: {', '.join(clash)} differs from the checkpoint in {a.out_dir}; "
                             f"drop the flag or start a new run in another --out_dir")
    elif a.init_from not in ("scratch", "gpt2"):
        init = load_checkpoint(a.init_from)
        if a.eval_only:  # evaluate with the checkpoint's own block size, batch and validation set
            a, given = resolve(args, {k: v for k, v in init["args"].items() if k != "out_dir"})

    # ---- processes and device ------------------------------------------------------------
    ddp = int(os.environ.get("RANK", -1)) != -1
    rank, local_rank, world = 0, 0, 1
    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.preset == "130m" and a.device == "auto" and device == "cpu" and not a.eval_only:
        raise SystemExit("preset 130m (8B tokens) needs a CUDA GPU; on this machine run "
                         "`python train.py --preset cpu`, or pass --device cpu to force it")
    if ddp:
        rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
        if device.startswith("cuda"):
            device = f"cuda:{local_rank}"
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    try:
        with ExitStack() as files:  # log and metrics files close however the run ends
            result = _run(a, ckpt, init, device, rank, world, ddp, files)
        if ddp:  # wait for rank 0's last checkpoint: tearing gloo down while a peer is
            dist.barrier()  # still in flight aborts that peer ("terminate called ...")
        return result
    finally:
        if ddp:
            dist.destroy_process_group()


def _run(a, ckpt, init, device, rank, world, ddp, files):
    t_start = time.time()
    master = rank == 0
    device_type = "cuda" if device.startswith("cuda") else device.split(":")[0]
    dtype = a.dtype if a.dtype != "auto" else ("bf16" if device_type == "cuda" else "fp32")
    ptdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    ctx = nullcontext() if dtype == "fp32" else torch.autocast(device_type=device_type, dtype=ptdtype)
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if master:
        os.makedirs(a.out_dir, exist_ok=True)
        logf = files.enter_context(open(os.path.join(a.out_dir, "log.txt"), "a", buffering=1))

    def log(msg):
        if master:
            print(msg, flush=True)
            logf.write(msg + "\n")

    # ---- model: from the resumed checkpoint, --init_from PATH, GPT-2, or scratch ----------
    ckpt_path = os.path.join(a.out_dir, "ckpt_last.pt")
    if ckpt is not None:
        model, kind = build_from_checkpoint(ckpt, ckpt_path), ckpt["kind"]
    elif init is not None:
        model, kind = build_from_checkpoint(init, a.init_from), init["kind"]
        init = None
    elif a.init_from == "gpt2":
        why = data_lib._hub_unreachable()  # offline: use the local HF cache only, no ~30 s retry storm
        if why:
            os.environ["HF_HUB_OFFLINE"] = "1"
        try:
            model = GPT.from_pretrained("gpt2")
        except RuntimeError as e:
            raise SystemExit(f"{e}{f' [hub: {why}]' if why else ''}") from None
        kind = "gpt"
    else:
        kind = a.model
        Config, Model = MODELS[kind]
        torch.manual_seed(a.seed)
        model = Model(model_config(a, Config))
    cfg = model.config
    a.block_size = min(a.block_size, cfg.block_size) if kind == "gpt" else a.block_size
    model.to(device)
    nparams = model.num_params()

    # ---- data ----------------------------------------------------------------------------
    def load(name, split):
        try:
            return data_lib.load_split(name, split)
        except (data_lib.DataUnavailable, ValueError) as e:  # unreachable hub, unknown name or split
            raise SystemExit(f"train.py: --data/--eval_data: {e}") from None
    if ddp and not master:
        dist.barrier()  # rank 0 prepares (tokenizes) the caches first; the others then read them
    val = load(a.eval_data, "val")
    train_data = None if a.eval_only else load(a.data, "train")
    if ddp and master:
        dist.barrier()

    for line in provenance(a, device, nparams, world):
        log(line)
    if a.eval_only:
        loss = estimate_loss(model, val, a, device, ctx, rank, world)
        res = dict(init_from=a.init_from if not a.resume else ckpt_path, eval_data=a.eval_data, val_loss=loss,
                   perplexity=math.exp(loss), tokens=a.eval_iters * a.batch_size * a.block_size * world,
                   params=nparams, seconds=time.time() - t_start, out_dir=a.out_dir, kind=kind)
        log(f"eval {a.eval_data}: loss {loss:.4f} nats, perplexity {math.exp(loss):.2f} "
            f"on {res['tokens']:,} tokens ({res['init_from']}, {nparams:,} params)")
        if master:
            with open(os.path.join(a.out_dir, "eval.json"), "w") as f:
                json.dump(res, f, indent=2)
        return res

    # ---- optimizer, state, compile, DDP --------------------------------------------------
    if a.grad_accum % world:
        raise SystemExit(f"--grad_accum ({a.grad_accum}) must be a multiple of the number of processes ({world})")
    accum = a.grad_accum // world  # micro-batches per process per step
    tokens_per_iter = a.grad_accum * a.batch_size * a.block_size
    optimizer = model.configure_optimizers(a.weight_decay, a.lr, (a.beta1, a.beta2), device_type)
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "fp16"))
    step, best_val, val_loss, resumed = 0, float("inf"), float("nan"), ckpt is not None
    if resumed:
        optimizer.load_state_dict(ckpt["optimizer"])
        step, best_val, val_loss = ckpt["step"], ckpt["best_val"], ckpt["val_loss"]
        set_rng_state(ckpt["rng"])
        ckpt = None  # free the checkpoint's copy of the weights
    raw_model = model
    if a.compile:
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[int(device.split(":")[1])] if device_type == "cuda" else None)

    metrics_path = os.path.join(a.out_dir, "metrics.jsonl")
    if master:
        # Keep only records up to the resumed step: a crash after the last checkpoint left later ones.
        old = open(metrics_path).read().splitlines() if (a.resume and os.path.exists(metrics_path)) else []
        kept = [ln for ln in old if ln.strip() and json.loads(ln)["step"] <= step]
        with open(metrics_path, "w") as f:
            f.write("".join(ln + "\n" for ln in kept))
        metrics = files.enter_context(open(metrics_path, "a", buffering=1))  # line-buffered: on disk at once
    log(f"{kind}: {a.max_iters} steps x {tokens_per_iter:,} tokens = {a.max_iters * tokens_per_iter:,} tokens; "
        f"{'resuming at step ' + str(step) if a.resume else 'from ' + a.init_from}; dtype {dtype}, compile {a.compile}")
    gpu = torch.cuda.get_device_name(device) if device_type == "cuda" else ""
    peak = next((v for k, v in PEAK_FLOPS.items() if k in gpu), None)

    def save(name):
        save_atomic({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "kind": kind,
                     "config": asdict(cfg), "args": vars(a), "step": step, "best_val": best_val,
                     "val_loss": val_loss, "rng": rng_state()}, os.path.join(a.out_dir, name))

    def evaluate():
        """Validation loss at the current step, then ckpt_best (if better) and ckpt_last."""
        nonlocal best_val, val_loss
        val_loss = estimate_loss(model, val, a, device, ctx, rank, world)
        if not math.isfinite(val_loss):
            raise SystemExit(f"non-finite validation loss ({val_loss}) at step {step}: stopping; "
                             f"{ckpt_path} (the last good checkpoint) is left as it was")
        log(f"step {step:6d} | val loss {val_loss:.4f} | val ppl {math.exp(min(val_loss, 50)):.1f}")
        if master:
            if val_loss < best_val:
                best_val = val_loss
                save("ckpt_best.pt")
            save("ckpt_last.pt")
        return val_loss

    # ---- the loop ------------------------------------------------------------------------
    # metrics.jsonl: record s (1..max_iters) holds the loss of iteration s's batches (weights
    # after s - 1 updates) and, at evals, val_loss after s updates; record 0 holds only val_loss.
    t_train = time.time()
    if not resumed:
        evaluate()
        if master:
            metrics.write(json.dumps({"step": 0, "val_loss": val_loss}) + "\n")
    dt_avg, t0 = None, time.time()
    while step < a.max_iters:
        lr = get_lr(step, a)
        for group in optimizer.param_groups:
            group["lr"] = lr

        # One optimizer step: accum micro-batches per process; gradients all-reduced on the last.
        loss_sum = torch.zeros((), device=device)
        for micro in range(accum):
            if ddp:
                model.require_backward_grad_sync = micro == accum - 1
            x, y = data_lib.get_batch(train_data, a.batch_size, a.block_size, step=step * accum + micro,
                                      seed=a.seed, rank=rank, device=device)
            with ctx:
                _, loss = model(x, y)
            loss_sum += loss.detach().float()
            scaler.scale(loss / accum).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), a.grad_clip or float("inf"))
        if ddp:
            dist.all_reduce(loss_sum)  # every rank sees the same loss, so every rank stops together
        train_loss, gnorm = (torch.stack([loss_sum / (accum * world), grad_norm.float()])).tolist()  # one sync
        if not math.isfinite(train_loss) or not (math.isfinite(gnorm) or dtype == "fp16"):
            # fp16: an inf gradient is the GradScaler's business (it skips the step and rescales)
            raise SystemExit(f"non-finite loss ({train_loss}) or gradient norm ({gnorm}) at step {step}: "
                             f"stopping before the update; {ckpt_path} (the last good checkpoint) is left "
                             f"as it was. Lower --lr, or use --dtype fp32")
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1

        t1 = time.time()
        dt, t0 = t1 - t0, t1
        dt_avg = dt if dt_avg is None else 0.9 * dt_avg + 0.1 * dt
        rec = {"step": step, "train_loss": train_loss, "lr": lr, "grad_norm": gnorm, "ms": round(1000 * dt, 2)}
        if step % a.log_interval == 0 or step == a.max_iters:
            mfu = ""
            if device_type == "cuda":
                mfu = (f" | mfu {100 * raw_model.estimate_mfu(a.batch_size * accum, dt_avg, peak):.1f}%"
                       f" | mem {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
            eta = (a.max_iters - step) * dt_avg
            eta = f"{eta / 3600:.2f} h" if eta > 3600 else f"{eta / 60:.1f} min"
            log(f"step {step:6d} | loss {train_loss:.4f} | lr {lr:.2e} | grad {gnorm:.3f} | "
                f"{1000 * dt_avg:.0f} ms/step | {tokens_per_iter / dt_avg:,.0f} tok/s{mfu} | eta {eta}")
        if step % a.eval_interval == 0 or step == a.max_iters:
            rec["val_loss"] = evaluate()
            t0 = time.time()  # evaluation is not part of the step time
        if master:
            metrics.write(json.dumps(rec) + "\n")

    seconds = time.time() - t_train
    log(f"done: step {step}, val loss {val_loss:.4f}, best {best_val:.4f}, {seconds:.0f} s")
    return dict(val_loss=val_loss, best_val=best_val, params=nparams, tokens=step * tokens_per_iter,
                seconds=seconds, out_dir=a.out_dir, step=step, kind=kind)


if __name__ == "__main__":
    main(get_parser().parse_args())

"""What SPEN (spen.py) and the GPT baseline (gpt.py) share as language models, written once:
the contract both follow, token-id checks, optimizer groups, the learning-rate schedule,
next-token sampling, MFU and step timing (Speed), and where a run computes (device, autocast
dtype, allocator).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) compares an EMA-only language model with
GPT-2; train.py, sample.py, content.py, ablate.py, recall.py and bench.py treat both models
alike through this file.

The contract (both `spen.SPEN` and `gpt.GPT`)
    config                      the model's dataclass; Model(Config(**asdict(config))) rebuilds it
    forward(idx, targets=None)  idx (B, T) int64 -> (logits (B, T, V), mean cross-entropy over
                                targets != -1, or None); no id checks (no host sync): ids are
                                checked where data enters (data.load_split's vocab=, step, generate)
    hidden_states(idx)          n_layer + 1 tensors (B, T, C): the embedding, then each block's output
    init_state(B, device)       the recurrent state before any token (SPEN: traces; GPT: KV cache)
    step(token, state)          token (B,) -> (logits (B, V) for the next token, new state)
    generate(idx, n, ...)       idx (B, T) -> (B, T + n), sampling with `sample_next`
    num_params(non_embedding)   parameter count, tied embedding counted once
    flops_per_token(T)          training FLOPs per token (forward + backward) at context T

Shape glossary
    B batch, T time, C width, V real vocabulary (config.vocab_size, 50257 for GPT-2 BPE),
    Vp = padded_vocab(V) rows of the embedding table (a multiple of 64: fast matmuls). The
    head computes Vp logits and the models return the first V (as nanochat does), so padding
    rows are never tokens: not valid inputs, never in the loss, never sampled.

Run: nothing to run; tests/test_lm.py checks every function here (Speed: tests/test_syncs.py).
"""

import ctypes
import inspect
import math
import os
import platform
import shutil
import sys
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F

import cli

EVAL_SEED = 1234  # seed of the validation batches: the same for every run, whatever its seed
WARMUP_STEPS = 3  # steps of each process left out of ms/step, MFU and ETA (compilation, allocator warm-up)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# Dense (no sparsity) bf16 tensor-core peak FLOP/s from the vendors' datasheets, keyed by the
# exact name torch.cuda.get_device_name prints: a name missing here gets no MFU, never a guess
# from a similar name ("NVIDIA L4" is not "NVIDIA L40S"). The H200 has the H100 SXM's compute
# (and more memory). RTX 4090: 165 TF is bf16 with fp32 accumulate (what autocast uses; the
# datasheet's 330 is fp16 accumulate).
PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,   # H100 SXM5
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H200": 989e12,             # H200 SXM
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA L4": 121e12,
    "NVIDIA L40S": 362e12,
    "NVIDIA GeForce RTX 4090": 165e12,
}
CUDA_WHEELS = "pip install torch --index-url https://download.pytorch.org/whl/cu124"  # cu12x: match nvidia-smi's CUDA


def padded_vocab(vocab_size, multiple=64):
    """Rows of the embedding table: vocab_size rounded up to a multiple of 64 (50257 -> 50304)."""
    return -(-vocab_size // multiple) * multiple


def check_tokens(idx, vocab_size, what="idx"):
    """Raise a one-line ValueError unless idx is an integer tensor of ids in [0, vocab_size)."""
    if not isinstance(idx, torch.Tensor) or idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        kind = idx.dtype if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise ValueError(f"{what} must be an integer tensor of token ids, got {kind}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise ValueError(f"{what} holds token ids in [{int(idx.min())}, {int(idx.max())}], outside "
                         f"[0, {vocab_size}) of this model's vocabulary")


def check_sampling(max_new_tokens, temperature, top_k):
    """One-line ValueErrors for generation settings that make no sense."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not temperature >= 0:  # also rejects NaN
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 or None (no cut), got {top_k!r}")


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """logits (B, V) -> next token ids (B,). temperature 0 is greedy; top_k keeps the k most
    likely tokens; `generator` (torch.Generator) makes the draw reproducible."""
    logits = logits.float()  # (B, V)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)[:, 0]  # (B,)


def configure_optimizers(model, weight_decay, learning_rate, betas, device_type):
    """AdamW with weight decay on every matrix (dim >= 2: embeddings, linear weights, per-trace
    embeddings) and none on vectors (LayerNorm weights, biases). Every parameter lands in exactly
    one group (asserted). fused=True on CUDA: one kernel for the whole update."""
    params = dict(model.named_parameters())  # tied weights appear once
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    ids = [id(p) for p in decay + no_decay]
    assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()}), "param groups broken"
    groups = [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]
    fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **(dict(fused=True) if fused else {}))


def peak_flops(device_name):
    """Dense bf16 peak FLOP/s for a GPU name exactly as torch.cuda.get_device_name prints it,
    or None if the name is not in PEAK_FLOPS (then no MFU is shown)."""
    return PEAK_FLOPS.get((device_name or "").strip())


def estimate_mfu(model, T, tokens_per_second, peak):
    """Model FLOPs utilisation: model.flops_per_token(T) * tokens/s over the peak FLOP/s.
    None when the peak is unknown (CPU, or a GPU missing from PEAK_FLOPS)."""
    if not peak:
        return None
    return model.flops_per_token(T) * tokens_per_second / peak


def gpu_peak(device):
    """peak_flops of the GPU `device` (a name such as "cuda:0"); None off CUDA (no MFU)."""
    device = torch.device(device)
    return peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


class Speed:
    """Step times of this process, the first WARMUP_STEPS left out of the averages (they hold
    compilation and allocator warm-up), so ms/step, MFU and ETA describe the steady state."""

    def __init__(self, start):
        self.warm_from = start + WARMUP_STEPS  # steps done when timing starts
        self.t_last = time.time()
        self.timed_steps, self.timed_seconds, self.avg = 0, 0.0, None

    def tick(self, step):
        now = time.time()
        dt, self.t_last = now - self.t_last, now
        if step > self.warm_from:
            self.timed_steps += 1
            self.timed_seconds += dt
            self.avg = dt if self.avg is None else 0.9 * self.avg + 0.1 * dt  # recent steps weigh most
        return dt

    def pause(self):
        self.t_last = time.time()

    def summary(self, model, T, device, tokens_per_step):
        """Mean ms/step, tokens/s, MFU (at context T) and peak memory of `device` over the timed
        steps (None if none)."""
        if not self.timed_steps:
            return dict(ms_per_step=None, tok_s=None, mfu=None)
        tok_s = tokens_per_step * self.timed_steps / self.timed_seconds
        out = dict(ms_per_step=1000 * self.timed_seconds / self.timed_steps, tok_s=tok_s,
                   mfu=estimate_mfu(model, T, tok_s, gpu_peak(device)))
        if torch.device(device).type == "cuda":
            out["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        return out


def cosine_lr(step, lr, min_lr, warmup, decay_end):
    """Linear warmup to lr over `warmup` steps (step 0 gets lr / warmup), then a cosine from lr
    to min_lr at step decay_end, then flat at min_lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= decay_end:
        return min_lr
    ratio = (step - warmup) / max(1, decay_end - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


# ---- where a run computes ------------------------------------------------------------------


def hidden_gpu():
    """A one-line note when this machine has an NVIDIA GPU (nvidia-smi on PATH, or /dev/nvidia0)
    that torch cannot use (a CPU wheel, or a driver too old for torch's CUDA); else None."""
    if torch.cuda.is_available() or not (shutil.which("nvidia-smi") or os.path.exists("/dev/nvidia0")):
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return (f"this machine has an NVIDIA GPU but torch {torch.__version__} ({build}) cannot see it: install a "
            f"CUDA build ({CUDA_WHEELS}; cu12x matching the CUDA version nvidia-smi shows), or update the driver")


def hub_weights_unreachable(name):
    """Why Hugging Face weights `name` (e.g. 'gpt2') cannot load, decided before transformers or
    huggingface_hub log anything (their loggers and retries would print a storm): the hub cannot
    be reached (sources.hub_unreachable) and the local Hugging Face cache has no copy. None if
    they can load (online, or cached)."""
    from sources import hub_unreachable
    why = hub_unreachable()
    if not why:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache  # reads the cache folder only
        repos = (name, f"openai-community/{name}")  # 'gpt2' now lives under openai-community
        if any(isinstance(try_to_load_from_cache(repo, "config.json"), str) for repo in repos):
            return None
    except ImportError:
        pass
    return f"{why}, and {name!r} is not in the local Hugging Face cache: run once online (pip install transformers)"


def resolve_device(name, auto=("cuda", "mps")):
    """(device, kind) for a --device value: 'auto' takes the first kind of `auto` that is there,
    else cpu; a device that is not there is a one-line cli.ConfigError."""
    if name == "auto":
        there = dict(cuda=torch.cuda.is_available(), mps=torch.backends.mps.is_available())
        name = next((k for k in auto if there[k]), "cpu")
    kind = name.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise cli.ConfigError(f"--device {name}: " + (hidden_gpu() or f"this torch ({torch.__version__}) sees no "
                              f"CUDA GPU; use --device cpu, or install a CUDA build of torch"))
    if kind == "cuda" and ":" in name and int(name.split(":")[1]) >= torch.cuda.device_count():
        raise cli.ConfigError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise cli.ConfigError("--device mps: MPS (Apple GPU) is not available here; use --device cpu")
    return name, kind


def resolve_dtype(name, kind):
    """A --dtype value for a device kind: 'auto' is bf16 on CUDA, fp32 elsewhere."""
    return name if name != "auto" else ("bf16" if kind == "cuda" else "fp32")


def autocast(dtype, kind):
    """The autocast context for a dtype name on a device kind (fp32: none)."""
    return nullcontext() if dtype == "fp32" else torch.autocast(device_type=kind, dtype=DTYPES[dtype])


def configure_allocator():
    """Keep freed large tensors in the heap instead of returning them to the OS (glibc only).
    glibc serves allocations above M_MMAP_THRESHOLD with mmap and unmaps them on free, so every
    new large tensor pays page faults; M_MMAP_MAX = 0 serves all from the heap and a huge
    M_TRIM_THRESHOLD keeps freed memory for reuse (bench.py measures the difference). Returns
    True when applied; safe to call more than once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl or another libc: nothing to tune
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1)


def device_name(device):
    """What a device is, for provenance lines: the GPU's name, or the CPU model and core count."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:  # not Linux
        pass
    return f"{cpu}, {os.cpu_count()} cores"

"""Where a run computes and how fast: the device and autocast dtype, where one process of a training
run sits (Placement: its DDP rank and world, read once by train.py's setup; the process group starts
later, start_group, once every rank has its data), MFU against an exact table of GPU peaks, step timing (Speed), the glibc allocator setting bench.py
measures, the one-line notes for a GPU torch cannot see or hub weights that cannot load, whether a
configuration's memory fits the device's (check_memory: an estimate from the model's config, before any allocation),
StopFlag (Ctrl-C or SIGTERM stops train.py's loop before its next micro-batch) and
compiled_or_eager (torch.compile, or one warning and the eager model).
train.py, sample.py, bench.py and the experiment scripts use it; the models (lm.py, spen.py,
gpt.py) do not.

Run: nothing to run; tests/test_runtime.py checks every function here (Speed: tests/test_syncs.py;
StopFlag: tests/test_train.py's Ctrl-C tests and tests/test_stop.py; compiled_or_eager: tests/test_syncs.py's
--compile test; check_memory: tests/test_memory.py).
"""

import ctypes
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.distributed as dist

from plumbing import cli, ngram

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: its git commit (header)

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
    from plumbing.sources import hub_unreachable
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


def load_gpt2(name="gpt2"):
    """OpenAI's GPT-2 weights as a gpt.GPT (train.py and sample.py --init_from gpt2): offline with
    no cached copy, or without transformers, one cli.UserError line before anything logs."""
    from gpt import GPT
    why = hub_weights_unreachable(name)
    if why:
        raise cli.UserError(f"--init_from {name}: cannot load OpenAI's weights: {why}")
    try:
        return GPT.from_pretrained(name)
    except (ImportError, OSError) as e:  # transformers missing, or the hub failed mid-download
        raise cli.UserError(f"--init_from {name}: could not load OpenAI's weights ({type(e).__name__}: "
                            f"{' '.join(str(e).split())[:200]}); needs `pip install transformers` and the hub") from e


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


def precision(name, kind):
    """(dtype, autocast context) for a --dtype value on a device kind: 'auto' is bf16 on CUDA, fp32
    elsewhere; fp32 runs without autocast."""
    dtype = name if name != "auto" else ("bf16" if kind == "cuda" else "fp32")
    return dtype, nullcontext() if dtype == "fp32" else torch.autocast(device_type=kind, dtype=DTYPES[dtype])


def compiled_or_eager(model, compile, autocast, x, y, log):
    """torch.compile(model) when `compile`, compiled now on one forward + backward of (x, y) under
    `autocast` (then its gradients dropped and the RNG put back, so the run is unchanged); if
    compiling fails (Triton needs a C compiler and Python headers), one warning line through log
    and the eager model. train.py's loop trains what this returns."""
    if not compile:
        return model
    from plumbing.checkpoint import rng_state, set_rng_state  # here: checkpoint imports the models
    rng = rng_state()
    try:
        compiled = torch.compile(model)
        with autocast:
            _, loss = compiled(x, y)
        loss.backward()
    except Exception as e:  # any compiler failure; a real bug fails again, eagerly, with its traceback
        log(f"warning: torch.compile failed ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
            f"training eagerly (same numbers, slower); --no-compile skips the attempt")
        torch._dynamo.reset()
        compiled = model
    model.zero_grad(set_to_none=True)
    set_rng_state(rng)
    return compiled


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


def machine_line():
    """The CPU a number was computed on, with what decides its rounding: the model as /proc/cpuinfo
    names it with its family and model numbers (one name covers several generations), the vector
    units torch's kernels pick from, torch's version and its thread count."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                k, _, v = ln.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:  # not Linux
        pass
    units = [u for u in ("avx2", "avx512f", "amx_tile") if u in info.get("flags", "").split()]
    cpu = info.get("model name") or platform.processor() or platform.machine()
    return (f"{cpu} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}; {' '.join(units) or 'no avx'}),"
            f" torch {torch.__version__}, {torch.get_num_threads()} thread(s)")


class StopFlag:
    """Ctrl-C (SIGINT) or SIGTERM asks train.py's loop to stop where the weights, optimizer and data
    position agree: before the next micro-batch or evaluation batch (so within one micro-batch's
    time, whatever --grad_accum is; under DDP, whose ranks must stop together, at the next step);
    a second Ctrl-C aborts at once. `requested` is a plain bool: reading it waits for no device."""

    def __init__(self):
        self.requested = False
        self.old = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def restore(self):
        for s, h in self.old.items():
            signal.signal(s, h)


# ---- will a run fit: the memory a configuration needs, against the device's, before any allocation ----
#
# train.py calls check_memory first thing in a run (--no-memory_check skips it): every width, batch and
# context is in bounds one by one, and some together need more than any machine has (--n_embd 65536: a 13 GB
# embedding alone; --batch_size 1048576: terabytes of logits), one line here, not an allocator traceback later.
# P parameters, B micro-batch, T context, C width, L blocks, V vocabulary, S traces, F FFN width.
# The estimate (bytes; 4 per float: fp32 weights, an fp32 optimizer; autocast's bf16 copies are
# left out, so it stays below what a run takes), from the model's config (no model is built):
#     parameters        P                   the weights, at least the token table and the FFNs: V C + 2 F C L
#     training state    3 P                 their gradients and AdamW's two moments (training only)
#     logits            2 B T V             the logits and their gradient (evaluation: the logits)
#     activations       (4 + S) B T C L     what each block keeps for its backward: the FFN's 4C-wide
#                                           hidden layer and SPEN's S traces (evaluation: B T C, one
#                                           block's output at a time)
# Each term is a floor of the real figure (no attention matrix, no temporaries), so a configuration
# refused here could not run; one that passes may still not fit, and then fails as before.

FLOAT_BYTES = 4  # bytes of an fp32 number


def memory_need(config, batch_size, block_size, training=True):
    """{term: bytes} of the estimate (the table above) and 'total'. config: the run's model config (SPEN's
    or GPT's), read for its sizes: no model is built."""
    V, C, L = config.vocab_size, config.n_embd, config.n_layer
    P = V * C + L * 2 * (getattr(config, "ffn_hidden", None) or 4 * C) * C  # a floor: the table and the FFNs only
    S = len(getattr(config, "alphas", ()) or ())  # SPEN's traces; GPT has none
    tokens = batch_size * block_size
    terms = dict(parameters=P * FLOAT_BYTES, training_state=3 * P * FLOAT_BYTES if training else 0,
                 logits=(2 if training else 1) * tokens * V * FLOAT_BYTES,
                 activations=(4 + S) * tokens * C * L * FLOAT_BYTES if training else tokens * C * FLOAT_BYTES)
    return dict(terms, total=sum(terms.values()))


def memory_capacity(device):
    """(bytes, what they are) of the memory a run on `device` can use: a CUDA GPU's memory, else the
    smallest of the machine's physical memory (os.sysconf), this process's cgroup limit and what its
    address-space limit (`ulimit -v`) leaves. (None, '') where none can be read."""
    if str(device).startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        return props.total_memory, f"the {props.name}'s memory"
    try:
        total, what = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's memory"
    except (ValueError, OSError, AttributeError):  # not POSIX
        return None, ""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:  # cgroup v2: a container's limit ("max": none)
            limit = cli.whole(f.read().strip())  # None: "max", no limit
        if limit is not None and limit < total:
            total, what = limit, "this container's memory limit"
    except OSError:
        pass
    import resource  # POSIX, as sysconf above: an address-space limit (RLIMIT_AS, `ulimit -v`), where every
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]  # mapping counts, the interpreter's and torch's own too
    if limit != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm") as f:  # its first field: the pages mapped now
                mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:  # no /proc (macOS): the limit alone
            mapped = 0
        if limit - mapped < total:
            total, what = max(0, limit - mapped), "address space this process's limit leaves (ulimit -v)"
    return total, what


def gib(n):
    return f"{n / 2 ** 30:,.1f} GiB"


def check_memory(config, batch_size, block_size, device, eval_only=False, flag="--no-memory_check"):
    """One cli.ConfigError line, with the estimate and its terms, when memory_need() exceeds memory_capacity(device);
    else the estimate (or None when the capacity cannot be read). config: the run's model config."""
    have, what = memory_capacity(device)
    if have is None:
        return None
    est = memory_need(config, batch_size, block_size, not eval_only)
    if est["total"] <= have:
        return est
    terms = sorted((v, k) for k, v in est.items() if k != "total" and v >= 2 ** 26)  # from 0.1 GiB
    parts = ", ".join(f"{k.replace('_', ' ')} {gib(v)}" for v, k in reversed(terms))
    raise cli.ConfigError(f"this configuration needs at least {gib(est['total'])} ({parts}; at least {est['parameters'] // FLOAT_BYTES:,} "
                          f"parameters, {batch_size} x {block_size} tokens per micro-batch), more than the "
                          f"{gib(have)} of {what}; lower --batch_size (raise --grad_accum), --block_size, --n_embd or "
                          f"--n_layer, or pass {flag} to try anyway")


# ---- where one process of a training run sits (train.py's setup) ---------------------------


@dataclass
class Placement:
    """Where this process runs: rank/world for DDP, the device, and the autocast context."""
    rank: int
    world: int
    ddp: bool
    device: str
    device_type: str
    dtype: str
    autocast: object

    @property
    def master(self):
        return self.rank == 0


def header(cfg, place, model, yardsticks, name):
    """The lines a run's log opens with (its provenance): argv, commit, versions, device, the model's sizes
    (of model, the one the run trains), config. cfg a TrainConfig, place its Placement, name the validation
    corpus, yardsticks: the n-gram losses of its val corpus or None."""
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                cwd=ROOT, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    T = cfg.block_size
    squeezed = ", ".join(f"{k} {yardsticks[k]:.3f}" for k in ngram.COMPRESSORS if k in (yardsticks or {}))  # bytes
    counted = (f"unigram {yardsticks['unigram']:.3f} | bigram {yardsticks['bigram']:.3f} nats (counted on its "
               f"train split)" + (f" | compressors {squeezed} nats/byte" if squeezed else "") if yardsticks else
               f"not counted (python data.py --dataset {name} --baselines, or --yardsticks count)")
    return [f"argv: {' '.join(sys.argv)}",
            f"git: {commit or 'unknown'} | python {platform.python_version()} | torch {torch.__version__} | "
            f"numpy {np.__version__} | {platform.platform()}",
            f"device: {place.device} ({device_name(place.device)}) x {place.world} process(es), "
            f"{torch.get_num_threads()} CPU threads, dtype {place.dtype}" + (f" | note: {hidden_gpu()}" if hidden_gpu() else ""),
            f"params: {model.num_params():,} | recurrent state {model.state_floats(T):,} floats per sequence and layer at "
            f"T = {T} (traces {len(getattr(model.config, 'alphas', ())) * cfg.n_embd:,}) | train FLOPs/token "
            f"{model.flops_per_token(T):.4g} | yardsticks on {name} val: {counted}",
            f"config: {json.dumps(asdict(cfg), sort_keys=True)}"]


def setup_process(cfg):
    """Resolve the device (one-line error if it is not there) and this process's DDP rank (the
    process group starts later, in start_group, once the data is ready), pick autocast."""
    device, kind = resolve_device(cfg.device)
    if cfg.data != "builtin" and kind == "cpu" and cfg.device == "auto" and cfg.max_iters * cfg.grad_accum * \
            cfg.batch_size * cfg.block_size > 1e9 and not cfg.eval_only:
        raise cli.ConfigError((hidden_gpu() or "no GPU here") + "; this run trains over 1B tokens (the default "
                              "preset 130m is the paper run); on a CPU run: python train.py --preset cpu")
    ddp = int(os.environ.get("RANK", -1)) != -1
    rank, world = 0, 1
    if ddp:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if kind == "cuda":
            device = f"cuda:{os.environ['LOCAL_RANK']}"
            torch.cuda.set_device(device)
    cli.require(cfg.grad_accum % world == 0, "--grad_accum ({}) must be a multiple of the number of "
                "processes ({})", cfg.grad_accum, world)
    dtype, autocast = precision(cfg.dtype, kind)
    if kind == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return Placement(rank, world, ddp, device, kind, dtype, autocast)


def start_group(place):
    """Start the DDP process group (nccl on CUDA, gloo on CPU) once every rank has its data, so
    no collective waits through a tokenization (see evaluate.wait_for_caches)."""
    if place.ddp and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if place.device_type == "cuda" else "gloo")

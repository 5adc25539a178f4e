"""How bench.py measures: wall time (best, median, interleaved), peak memory, the operators a
step dispatches, the bytes autograd saves, the tensors in a state and the machine it ran on; and
its sections on one training step: memory per token (against the GPUs the paper's scale implies),
torch.compile against eager, and the speed in the paper's shape on CUDA. Each section is
(device, quick) -> a JSON-able dict, run by bench.py's workers (its RUN table); what they measure
and how to run them is in bench.py's docstring.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": a 130M SPEN
trained at 32 x 1024 tokens a micro-batch in bf16 on one H200.

Shape glossary: B batch (micro-batch), T time, C width.

Run: nothing to run; tests/test_bench.py runs every helper through `python bench.py --quick`
(the sections memory and train too).
"""

import os
import platform
import resource
import statistics
import time

import torch

from plumbing import runtime
import gpt
import lm
import spen
import writes

WARMUP = 3  # calls before timing; see timed()


class BenchError(RuntimeError):
    """A measurement failed or a checked property did not hold: a finding, it keeps its traceback."""


def sync(device):
    """Wait for the device's queued work (CUDA runs asynchronously: a timer must wait for it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps, warmup=WARMUP):
    """Median and min wall time of fn() in ms over reps calls, after warmup calls, and the
    minor page faults per call (getrusage): ~0 once freed blocks are reused. Three warmup calls:
    glibc reuses a freed block for posix_memalign only once neighbouring free blocks have
    coalesced (the heap grows for the first 3-4 calls, then stays)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times, f0 = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / reps
    times.sort()
    return dict(ms=times[len(times) // 2], ms_min=times[0], faults=faults)


def interleaved(fns, device, reps):
    """Median ms of each fn() of the dict fns over reps rounds after one warmup call each; a round
    calls every fn once, in an order rotated each round, so a busy machine's slow spells fall on
    all of them alike and their ratios hold where absolute times do not."""
    for fn in fns.values():
        fn()
    names, times = list(fns), {k: [] for k in fns}
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync(device)
            t = time.perf_counter()
            fns[name]()
            sync(device)
            times[name].append((time.perf_counter() - t) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def proc_status(key):
    """A /proc/self/status field in MiB (VmHWM: peak RSS, VmRSS: current RSS); None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peak(device):
    """Start a new peak-memory reading; False where the CPU's peak RSS cannot be reset."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_mib(device):
    """Peak memory since reset_peak: CUDA's allocated bytes, or the CPU process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return proc_status("VmHWM")


def count_ops(fn):
    """aten operators fn() dispatches (forward and backward), counted by torch.profiler; on a
    GPU each one is at least one kernel launch."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))


def saved_bytes(model, idx):
    """Bytes autograd keeps for the backward of one forward on idx (B, T): unique storages of the
    saved tensors, parameters left out. The activation memory of a step, without transients."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    return sum(seen.values())


def train_step(model, idx, opt=None, autocast=None):
    """One forward + backward (+ optimizer step when opt is given) on idx (B, T) as its own targets."""
    with autocast if autocast is not None else torch.autocast(idx.device.type, enabled=False):
        _, loss = model(idx, idx)
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss


def tensors(obj):
    """Every tensor in nested dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return [t for v in items for t in tensors(v)]


def machine(device):
    """Where a measurement ran: the CPU model, cores, Python, torch, platform, device (and GPU)."""
    cpu = runtime.device_name("cpu").rsplit(", ", 1)[0]  # the CPU model, without the core count
    out = dict(cpu=cpu, cores=os.cpu_count(), python=platform.python_version(), torch=torch.__version__,
               platform=platform.platform(), device=str(device))
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
        out["gpu_memory_gb"] = torch.cuda.get_device_properties(device).total_memory / 1e9
    return out


# ---- the sections on one training step ------------------------------------------------------

GPU_MEMORY_GB = {"H100": 80, "H200": 141}  # the GPUs the paper's scale implies (H200: the paper's)
PAPER_MICRO_BATCH = (32, 1024)  # B x T of one micro-batch in train.py's 130m preset
READERS = ("linear",) + tuple(p for p, _ in writes.WRITE_READERS)  # SPEN predictors the train section times beside GPT


def bench_memory(device, quick):
    """Peak memory growth per token of one SPEN training step (forward, backward, AdamW step)."""
    kw = dict(vocab_size=512, n_layer=2, n_embd=64) if quick else {}
    T = 64 if quick else 256
    out = dict(T=T, fp32=True, rows=[])
    method = "matmul"  # the accelerator path; the scan saves the same tensors (see saved_bytes)
    torch.manual_seed(0)
    model = spen.SPEN(spen.SPENConfig(trace_method=method, **kw)).to(device)
    opt = lm.configure_optimizers(model, 0.1, 6e-4, (0.9, 0.95), device.type)
    peaks = {}
    for B in (1, 1, 4):  # the first step allocates AdamW's state: measured again after it
        idx = torch.randint(model.config.vocab_size, (B, T), device=device)
        sync(device)
        reset_peak(device)
        train_step(model, idx, opt)
        sync(device)
        peaks[B] = peak_mib(device)
    per_token_mib = (peaks[4] - peaks[1]) / (3 * T)
    saved_per_token_mib = saved_bytes(model, idx) / (4 * T) / 2**20
    static_mib = sum(p.numel() for p in model.parameters()) * 4 * 4 / 2**20  # weights, grads, 2 Adam moments
    Bp, Tp = PAPER_MICRO_BATCH
    need_gb = (static_mib + per_token_mib * Bp * Tp) * 2**20 / 1e9
    out["rows"].append(dict(method=method, params=model.num_params(), peak_mib_B1=peaks[1],
                            peak_mib_B4=peaks[4], per_token_mib=per_token_mib,
                            saved_per_token_mib=saved_per_token_mib, static_mib=static_mib,
                            paper_micro_batch=list(PAPER_MICRO_BATCH), paper_need_gb=need_gb,
                            gpu_memory_gb=GPU_MEMORY_GB,
                            fits={k: need_gb <= v for k, v in GPU_MEMORY_GB.items()}))
    return out


def bench_compile(device, quick):
    """torch.compile vs eager on one training forward + backward: same loss and gradients."""
    cfg = spen.SPENConfig(trace_method="matmul", vocab_size=512, n_layer=2, n_embd=128, block_size=128)
    B, T = 2, 64
    torch.manual_seed(0)
    model = spen.SPEN(cfg).to(device)
    idx = torch.randint(cfg.vocab_size, (B, T), device=device)
    compiled = torch.compile(model)
    res = {}
    for name, m in (("eager", model), ("compiled", compiled)):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = train_step(m, idx)
        sync(device)
        first_s = time.perf_counter() - t0
        grads = [p.grad.clone() for p in model.parameters()]
        def again():
            model.zero_grad(set_to_none=True)
            train_step(m, idx)
        step = timed(again, device, reps=3, warmup=1)
        res[name] = dict(loss=loss.item(), first_call_s=first_s, step_ms=step["ms"], grads=grads)
    gerr = max((a - b).abs().max().item() / (b.abs().max().item() + 1e-12)
               for a, b in zip(res["compiled"].pop("grads"), res["eager"].pop("grads")))
    lerr = abs(res["compiled"]["loss"] - res["eager"]["loss"])
    return dict(n_layer=cfg.n_layer, n_embd=cfg.n_embd, B=B, T=T, eager=res["eager"], compiled=res["compiled"],
                loss_diff=lerr, max_grad_rel_diff=gerr, equal=lerr <= 1e-4 and gerr <= 1e-3)


def bench_train_steps(device, quick):
    """Training steps in the 130m preset's shape of SPEN with each reader of READERS and of GPT-2:
    bf16 autocast, fused AdamW, eager (train_run times the compiled SPEN). The micro-batch is
    halved until it fits. MFU counts each model's flops_per_token (the write readers' include
    their recurrence: variants' attn_flops)."""
    small = dict(vocab_size=512, n_layer=2, n_embd=64) if quick else {}
    builds = {f"spen_{p}": (lambda p=p: spen.SPEN(spen.SPENConfig(predictor=p, **small))) for p in READERS}
    builds["gpt"] = lambda: gpt.GPT(gpt.GPTConfig(**small))
    B, T = (2, 64) if quick else PAPER_MICRO_BATCH
    peak = runtime.peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    out = dict(T=T, dtype="torch.bfloat16", peak_flops=peak, models={})
    for name, build in builds.items():
        b, res = B, None
        while res is None:
            try:
                res = _train_steps(build, device, b, T, peak, steps=2 if quick else 10)
            except torch.OutOfMemoryError:
                if b == 1:
                    raise BenchError(f"{name}: one sequence of {T} tokens does not fit") from None
                b //= 2
            torch.cuda.empty_cache()  # after the except block, when the failed step's tensors are gone
        out["models"][name] = res
    return out


def _train_steps(build, device, B, T, peak, steps):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True  # as train.py sets it
    model = build().to(device)
    opt = lm.configure_optimizers(model, 0.1, 6e-4, (0.9, 0.95), device.type)
    idx = torch.randint(model.config.vocab_size, (B, T), device=device)  # (B, T)
    ac = torch.autocast(device.type, dtype=torch.bfloat16)
    t0 = time.perf_counter()
    train_step(model, idx, opt, ac)
    sync(device)
    first_s = time.perf_counter() - t0
    reset_peak(device)
    t = timed(lambda: train_step(model, idx, opt, ac), device, reps=steps, warmup=2)
    tok_s = B * T / t["ms"] * 1e3
    return dict(B=B, params=model.num_params(), flops_per_token=model.flops_per_token(T), first_call_s=first_s,
                ms=t["ms"], tok_s=tok_s, mfu=runtime.estimate_mfu(model, T, tok_s, peak),
                peak_mib=peak_mib(device))

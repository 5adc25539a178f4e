"""How bench.py measures: wall time (best, median, interleaved), peak memory, the operators a
step dispatches, the bytes autograd saves, the tensors in a state and the machine it ran on; and
its sections on one training step: what one seed of the map costs (its step eager and compiled, its
scored point), memory per token (against the GPUs the paper's scale implies), torch.compile against
eager, and the speed in the paper's shape on CUDA. Each section is
(device, quick) -> a JSON-able dict, run by bench.py's workers (its RUN table); what they measure
and how to run them is in bench.py's docstring.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": a 130M SPEN
trained at 32 x 1024 tokens a micro-batch in bf16 on one H200.

The tables bench.py prints (print_tables) are read from its results JSON (the dict bench.main writes):
one per section that ran; with `--allocator both`, each figure for allocator on | off | off/on.

Shape glossary: B batch (micro-batch), T time, C width, S traces, P context already seen, L chunk
length, H heads, D head width.

Run: nothing to run; tests/test_bench.py runs every helper through `python bench.py --quick`
(the sections seed, memory and train too).
"""

import os
import platform
import resource
import statistics
import time

import torch

from plumbing import batches, corpus, registry, repeats, runtime, tables
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


def matmul_peak(device, n, reps, dtype=torch.float32):
    """The yardstick of a step's FLOP/s: an n-square matmul (fp32 unless dtype) in this thread count, best of
    reps, in FLOP/s."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n ** 3 / timed(lambda: a @ a, device, reps=reps)["ms_min"] * 1e3


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


def train_step(model, idx, opt=None, autocast=None, targets=None):
    """One forward + backward (+ optimizer step when opt is given) on idx (B, T), its own targets unless given."""
    with autocast if autocast is not None else torch.autocast(idx.device.type, enabled=False):
        _, loss = model(idx, idx if targets is None else targets)
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


SEED_STEPS = 40  # the seed section's short curve: steps from one initialisation, eager and compiled in turn
MAP_CURVE = dict(curve_steps=2441 + 488, points=17, segments=18)  # scaling.py's curve at the map's settings: its
# trunk and cooldown steps, the points it scores (16 on the trunk, the cooldown's end), its train.main segments


def bench_seed(device, quick, sc):
    """One seed of the map, a `delta` curve of scaling.py (settings sc, its ScalingConfig; counts MAP_CURVE),
    from its parts: a training step (forward, backward, AdamW) eager, as the curves run it, compiled
    (torch.compile: the same maths) and under bf16 autocast (the matmuls in bf16, the recurrent state in
    float32), in turn over a short curve of SEED_STEPS steps from one initialisation on the same batches
    (their losses compared with eager's); one scored point (train.py's evaluation batches, the copy
    windows, the whole validation split: scaling.score_point's work). A curve: steps x step + points x
    point; compiled, plus a first call per segment (the bound of compiling afresh at each); at_peak: the
    step's FLOPs at the fp32 matmul peak measured here, the floor of any fp32 step; bf16's fraction is of
    the bf16 matmul peak measured beside it (a CPU without native bf16 emulates it). --quick: tiny, eager.
    CPU only: the map's curves run on one CPU thread each (results/map/PLAN.md)."""
    if device.type != "cpu":
        return dict(skipped="the map's curves run on a CPU")
    shape = dict(n_layer=1, n_embd=32, block_size=48) if quick else dict(n_layer=sc.n_layer, n_embd=128,
                                                                            block_size=sc.block_size)
    arch = {k: v for k, v in registry.MODELS["delta"].overrides.items() if k != "model"}
    B, T, n = 2 if quick else sc.batch_size, shape["block_size"], 3 if quick else SEED_STEPS
    data, val = (corpus.load_split(sc.data, split, tokenizer=sc.tokenizer)[:4 * T if quick else None]
                 for split in ("train", "val"))
    runs = {}
    for way in ("eager",) if quick else ("eager", "compiled", "bf16"):
        torch.manual_seed(sc.seed)  # the same initialisation each way
        model = spen.SPEN(spen.SPENConfig(**shape, **arch, vocab_size=256, dropout=0.0))
        opt = torch.optim.AdamW(model.parameters(), lr=sc.lr)
        runs[way] = dict(model=model, s=[], losses=[], fn=torch.compile(model) if way == "compiled" else model, opt=opt,
                         autocast=torch.autocast("cpu", dtype=torch.bfloat16) if way == "bf16" else None)
    for i in range(n):  # in turn, step by step: a load that comes and goes slows every way alike
        x, y = batches.get_batch(data, B, T, step=i, seed=sc.seed)
        for r in runs.values():
            t0 = time.perf_counter()
            r["losses"].append(train_step(r["fn"], x, r["opt"], r["autocast"], targets=y).item())
            r["s"].append(time.perf_counter() - t0)
    model, windows = runs["eager"]["model"].eval(), repeats.hit_windows(val, sc.hit_seqs, T)
    parts = dict(evaluation=lambda: [model(*batches.get_batch(val, B, T, step=i, seed=1)) for i in range(sc.eval_iters)],
                 copy_windows=lambda: repeats.copy_split(repeats.token_nll(model, windows),
                                                         repeats.copy_distance(windows, sc.copy_k)),
                 whole_split=lambda: repeats.window_scores(model, val, T, sc.copy_k))
    with torch.no_grad():
        point = {k: timed(fn, device, reps=1, warmup=0)["ms_min"] / 1e3 for k, fn in parts.items()}
    peak = matmul_peak(device, 1024, reps=3 if quick else 10)
    peaks = dict(bf16=matmul_peak(device, 1024, reps=10, dtype=torch.bfloat16)) if not quick else {}
    flops = model.flops_per_token(T) * B * T  # a training step's (forward and backward)
    out = dict(model="delta", width=shape["n_embd"], n_layer=shape["n_layer"], B=B, T=T, threads=torch.get_num_threads(),
               **MAP_CURVE, point_s=point, short_curve_steps=n, flops_per_step=flops, matmul_fp32_flops=peak,
               **({"matmul_bf16_flops": peaks["bf16"]} if peaks else {}))
    steps = dict(at_peak=flops / peak, **{way: statistics.median(r["s"][n // 4:]) for way, r in runs.items()})
    for way, step_s in steps.items():  # the median step past the first calls; at_peak: every step at the peak
        curve = MAP_CURVE["curve_steps"] * step_s + MAP_CURVE["points"] * sum(point.values())
        out[way] = dict(step_s=step_s, fraction_of_peak=flops / step_s / peaks.get(way, peak), curve_s=curve,
                        scoring_share=1 - MAP_CURVE["curve_steps"] * step_s / curve)
        if way in runs:
            out[way].update(first_call_s=runs[way]["s"][0], losses=runs[way]["losses"])
    for way in ("compiled", "bf16") if not quick else ():  # each against eager, as the curves run
        out[way].update(speedup=out["eager"]["step_s"] / out[way]["step_s"],
                        max_loss_diff=max(abs(a - b) for a, b in zip(runs["eager"]["losses"], runs[way]["losses"])))
    if not quick:
        out["compiled"]["curve_s_compiling_each_segment"] = (out["compiled"]["curve_s"]
                                                             + MAP_CURVE["segments"] * runs["compiled"]["s"][0])
    return out


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


# ---- the tables bench.py prints, from its results JSON (with `--allocator both`: on | off | off/on) ----


def print_blocks(base, cells):
    """The blocks table of one worker result; cells(get) gives print_tables' on | off | off/on
    figures."""
    if "blocks" in base:
        bl = base["blocks"]
        print(f"\nSPEN block vs GPT block, C={bl['C']}, fwd+bwd, B*T={bl['tokens_per_batch']}: tokens/s, "
              "ratio = GPT ms / SPEN ms")
        for i, row in enumerate(bl["rows"]):
            print(f" T={row['T']:5d}: SPEN {row['spen']['tok_s']:9.0f}  GPT {row['gpt']['tok_s']:9.0f}  block ratio "
                  f"{cells(lambda r: r['blocks']['rows'][i]['ratio_block'])}  mixer ratio "
                  f"{cells(lambda r: r['blocks']['rows'][i]['ratio_mixer'])}")


def print_train_tables(base):
    """The tables of the training-step sections (ops to train_run) in one worker result."""
    if "ops" in base:
        print("\naten operators per training forward+backward, batch 1")
        for r in base["ops"]["rows"]:
            print(f" {r['model']:12s} C={r['C']:4d} L={r['n_layer']:2d} T={r['T']:5d}: {r['ops']:7d}")
        c = base["ops"]["checks"]
        print(f" SPEN(matmul) / GPT at T={c['T_mid']}: {c['spen_over_gpt_at_T_mid']:.2f}x (must be <= 2); "
              f"SPEN(matmul) T={c['T_long']} / T={c['T_mid']}: {c['spen_long_over_mid']:.3f} (within 10% of 1); "
              f"scan: {c['scan_long_over_mid']:.2f}; {'PASS' if c['pass'] else 'FAIL'}")
    if "memory" in base:
        for r in base["memory"]["rows"]:
            fits = ", ".join(f"{k} {gb} GB: {'fits' if r['fits'][k] else 'does not fit'}"
                             for k, gb in r["gpu_memory_gb"].items())
            print(f"\nSPEN training memory (fp32, method {r['method']}): peak grows {r['per_token_mib'] * 1024:.0f} KiB "
                  f"per token (autograd saves {r['saved_per_token_mib'] * 1024:.0f} KiB), "
                  f"{r['static_mib']:.0f} MiB weights+grads+AdamW; at {r['paper_micro_batch'][0]} x "
                  f"{r['paper_micro_batch'][1]}: {r['paper_need_gb']:.1f} GB ({fits})")
    if "compile" in base:
        c = base["compile"]
        print(f"\ntorch.compile vs eager (SPEN n_layer={c['n_layer']} n_embd={c['n_embd']}, B={c['B']} T={c['T']}): "
              f"loss diff {c['loss_diff']:.1e}, max grad rel diff {c['max_grad_rel_diff']:.1e}, "
              f"{'equal' if c['equal'] else 'NOT EQUAL'}; compile {c['compiled']['first_call_s']:.1f} s; step ms "
              f"eager {c['eager']['step_ms']:.1f}, compiled {c['compiled']['step_ms']:.1f}")
    tr = base.get("train")
    if tr and "skipped" not in tr:
        print(f"\ntrain steps, T={tr['T']}, {tr['dtype']} autocast, eager (MFU: none without a known GPU peak)")
        rows = [[k, r["B"], r["ms"], r["tok_s"], r["flops_per_token"] / 1e9, r["mfu"] and f"{r['mfu']:.1%}",
                 r["peak_mib"], r["first_call_s"]] for k, r in tr["models"].items()]
        print("\n".join(tables.md_table(["model", "B", "ms/step", "tokens/s", "GFLOP/token", "MFU", "peak MiB",
                                        "first call s"], rows, ".1f")))
    run = base.get("train_run")
    if run and "skipped" not in run:
        mfu = f"{run['mfu']:.1%}" if run.get("mfu") is not None else "n/a"
        ms = f"{run['ms_per_step']:.0f}" if run.get("ms_per_step") is not None else "n/a"
        print(f"\ntrain.main, 130m preset on random tokens ({run.get('gpu') or 'cpu'}), {run['config']}: {ms} ms/step, "
              f"MFU {mfu}, peak {run.get('peak_mem_gib') or 0:.1f} GiB, train loss {run.get('first_loss')} -> "
              f"{run.get('last_loss')} (ln V {run['ln_V']:.3f}), compile fell back: {run.get('compile_fell_back')}, "
              f"{run['seconds']:.0f} s")


def print_ema(base, cells):
    """The ema.traces table of one worker result (fast paths against the loop and the bandwidth
    floor, the chunk sweep, streaming); cells(get) gives print_tables' on | off | off/on figures."""
    if "ema" not in base:
        return
    print("\nema.traces, ms (best of repeats), x floor = ms / bandwidth floor, err = max |fast - loop| (fp32)")
    for i, row in enumerate(base["ema"]["rows"]):
        print(f" B={row['B']} T={row['T']:5d} C={row['C']} S={row['S']}: floor {row['floor_fwd_ms']:.2f} fwd / "
              f"{row['floor_fb_ms']:.2f} fwd+bwd; loop {row['loop_fwd']['ms_min']:.2f} / {row['loop_fb']['ms_min']:.2f}")
        for meth in [m for m in row if isinstance(row[m], dict) and "max_err" in row[m]]:
            r = row[meth]
            tf32 = f", TF32 err {max(r['max_err_tf32'].values()):.1e}" if "max_err_tf32" in r else ""
            fwd = cells(lambda z: z["ema"]["rows"][i][meth]["fwd"]["ms_min"])
            fb = cells(lambda z: z["ema"]["rows"][i][meth]["fb"]["ms_min"])
            print(f"   {meth:6s} fwd {fwd} ({r['fwd']['x_floor']:.1f}x floor)  fwd+bwd {fb} "
                  f"({r['fb']['x_floor']:.1f}x floor)  err {max(r['max_err'].values()):.1e}{tf32}")
    sw = base["ema"]["chunk_sweep"]
    for meth, ms in sw["ms"].items():
        print(f" chunk sweep {meth} T={sw['T']} fwd+bwd ms: " + ", ".join(f"L={L} {v:.2f}" for L, v in ms.items()))
    st = base["ema"]["stream"]
    print(f" streaming: one step {st['step_us']:.1f} us vs recomputing a {st['P']}-token prefix "
          f"{st['recompute_prefix_ms']:.2f} ms (C={st['C']})")


def print_seed(base):
    """The seed section: a curve's cost from its parts, eager and compiled."""
    if "step_s" not in base.get("seed", {}).get("eager", {}):  # not run, or skipped (not a CPU)
        return
    r = base["seed"]
    print(f"\none seed of the map ({r['model']}, {r['n_layer']} x {r['width']}, T={r['T']} B={r['B']}, "
          f"{r['threads']} thread(s)): {r['curve_steps']:,} steps, {r['points']} scored points of "
          + " + ".join(f"{k} {v:.1f}" for k, v in r["point_s"].items()) + " s")
    print(f" a step {r['flops_per_step'] / 1e9:.1f} GFLOP; the fp32 matmul peak here {r['matmul_fp32_flops'] / 1e9:.1f} GFLOP/s")
    if "matmul_bf16_flops" in r:
        print(f" the bf16 matmul peak here {r['matmul_bf16_flops'] / 1e9:.1f} GFLOP/s (bf16's fraction is of it)")
    for way in ("at_peak", "eager", "compiled", "bf16"):
        if way in r:
            w = r[way]
            print(f" {way:9s} step {w['step_s'] * 1e3:7.1f} ms ({w['fraction_of_peak']:4.0%} of the peak), a curve "
                  f"{w['curve_s'] / 60:5.1f} min, scoring {w['scoring_share']:.0%} of it"
                  + (f", first call {w['first_call_s']:.1f} s" if "first_call_s" in w else "")
                  + (f"; {w['speedup']:.2f}x eager's step, losses within {w['max_loss_diff']:.1e} of eager's over "
                     f"{r['short_curve_steps']} steps" if "speedup" in w else "")
                  + (f", {w['curve_s_compiling_each_segment'] / 60:.1f} min compiling at each of {r['segments']} "
                     f"segments" if way == "compiled" else ""))


def print_tables(res):
    """One table per section; with --allocator both, figures for on | off | off/on."""
    on, off = res["runs"].get("on"), res["runs"].get("off")
    base = on or off

    def cells(get, fmt="{:9.2f}"):
        vals = [get(r) if r else None for r in (on, off)]
        text = " ".join(fmt.format(v) for v in vals if v is not None)
        if None not in vals and vals[0]:
            text += f" {vals[1] / vals[0]:6.2f}x"
        return text

    m = res["machine"]
    print(f"\nmachine: {m.get('gpu', m['cpu'])} ({m['cores']} cores), torch {m['torch']}, device {m['device']}, "
          f"{base['threads']} threads, allocator {'on | off | off/on' if on and off else 'on' if on else 'off'}, "
          f"load average {m['load_start'][0]:.2f} -> {m['load_end'][0]:.2f}")
    if "limits" in base:
        lim = base["limits"]
        print(f"limits: copy {cells(lambda r: r['limits']['copy_gbs'])} GB/s, fp32 matmul "
              f"{lim['matmul_fp32_tflops']:.3f} TFLOP/s, bf16 matmul {lim['matmul_bf16_tflops']:.3f} TFLOP/s")
    print_ema(base, cells)
    if "readers" in base:
        r = base["readers"]
        print(f"\nthe map's readers, a training step (fwd+bwd, fp32) at B={r['B']} T={r['T']} C={r['C']} (median of "
              f"{r['reps']} interleaved repeats, {r.get('threads', '?')} thread(s)): ms, ratio to delta, state floats "
              f"per layer, model FLOP/s as a fraction of the fp32 matmul peak measured beside them "
              f"({r.get('matmul_fp32_flops', 0) / 1e9:.0f} GFLOP/s)")
        for name, m in r["models"].items():
            frac = f"{m['fraction_of_peak']:6.1%}" if "fraction_of_peak" in m else "     —"
            print(f" {name:20s} {m['ms']:9.1f} ms {m['ratio_to_delta']:6.2f}x {m['state_floats']:>9,} {frac}")
    print_seed(base)
    if "chunk" in base:
        print(f"\nwrite readers, chunked vs loop (median of {base['chunk']['reps']} interleaved repeats), fp32: "
              "ms (loop ms / chunked ms)")
        Ls = sorted({int(L) for r in base["chunk"]["rows"] for L in r["ratio"]})
        rows = [[r["reader"], f"{r['H']} x {r['D']}", r["T"], r["B"], r["mode"], f"{r['ms']['loop']:.2f}"]
                + [f"{r['ms'][str(L)]:.2f} ({r['ratio'][str(L)]:.2f}x)" if str(L) in r["ms"] else None
                   for L in Ls] + [r["best_L"]] for r in base["chunk"]["rows"]]
        print("\n".join(tables.md_table(["reader", "H x D", "T", "B", "pass", "loop ms"]
                                        + [f"L={L}" for L in Ls] + ["best L"], rows)))
    print_blocks(base, cells)
    for name in ("gen_spen", "gen_gpt"):
        if name in base:
            gen = base[name]
            print(f"\ngeneration {gen['model']} ({gen['params'] / 1e6:.1f}M params), batch 1: ms/token, "
                  "state MiB, peak MiB")
            for i, row in enumerate(gen["rows"]):
                print(f" P={row['P']:6d}: {cells(lambda r: r[name]['rows'][i]['ms'])}  state {row['state_mib']:8.1f}  "
                      f"peak {row['peak_mib'] or 0:8.0f}")
    print_train_tables(base)
    skipped = [k for k, v in base.items() if isinstance(v, dict) and "skipped" in v]
    if skipped:
        print(f"\nskipped ({', '.join(skipped)}): need CUDA; run: python bench.py --device cuda")

"""bench.py: what the EMA context costs, against the machine's limits and against attention.

Paper section "Large scale: SPEN": an EMA context is linear in T to train and holds a constant
state per generated token; the paper trains its 130M SPEN at 32 x 1024 tokens a micro-batch on
one H200. Each section (a JSON key) measures one part of that claim on the device it is given:
  limits     copy bandwidth (bytes read + written) and fp32 / bf16 matmul FLOP/s
  ema        ema.traces "scan" and "matmul", fwd and fwd+bwd, B=8, C=768, S=3, T in {256, 1024, 4096}:
             ms against the bandwidth floor (bytes to move / copy bandwidth), the loop beside them and
             the largest difference to it (fp32: <= 1e-5; TF32's reported); L swept; a streaming step
  chunk      the write rules' chunked forms (writes.py) at L in CHUNK_LENS against their loops, fwd and
             fwd+bwd, fp32, at the (H, D, T, B) of CHUNK_CASES: interleaved medians, ratios to the loop
  readers    a training step (forward+backward) of each model of MAP_MODELS at scaling.py's shape
             (4 x 128, T=256, B=16, bytes, fp32) as a ratio to delta's, interleaved repeats
  seed       what one seed of the map costs: a `delta` curve of scaling.py at the map's settings, its
             training step eager, compiled (torch.compile) and under bf16 autocast, and its scored point,
             projected to a curve; the loss of a short curve each way
  blocks     one SPEN block vs one GPT block (C=256), fwd+bwd tokens/s at T in {256, .., 8192}, B = 8192 / T
  gen_*      ms per generated token, peak memory at context P up to 16384, full size, batch 1 (gen_spen, gen_gpt)
  ops        aten operators in one training fwd+bwd (batch 1) of the 12-layer SPEN (traces "matmul",
             "scan") and GPT-2 at T in {256, 1024, 4096}, widths 768 (CPU: T=256 only) and 64
  memory     activation memory per token of a 130M SPEN training step (fp32, AdamW), from the peak
             growth between micro-batches of 256 and 1024 tokens and the bytes autograd saves, against 80 / 141 GB
  compile    torch.compile equals eager on one training step of a 2-layer width-128 SPEN
  train      CUDA only: training steps in the 130m preset's shape (12 x 768, T=1024, 32 x 1024, halved
             until it fits; bf16, fused AdamW, eager) of SPEN with each of timing.READERS and of GPT-2:
             ms/step, tokens/s, MFU (runtime.estimate_mfu at runtime.peak_flops), peak memory
  train_run  CUDA only: `train.main`, 130m preset (compile, bf16), TRAIN_RUN_STEPS steps on random
             tokens (no data, no network): ms/step, MFU, peak memory, losses near ln V
`python bench.py --device cuda` is the GPU check: every section, sized to run in a few minutes.

Shape glossary: B batch, T time, C width, S traces, P context already seen, L chunk length,
H heads, D = C / H head width.

Run:  python bench.py                        # every CPU section -> out/bench/bench.json
      python bench.py --threads 1            # one thread per op: steadier on a shared machine
      python bench.py --sections ops,memory  # some sections only
      python bench.py --quick                # tiny sizes, all but compile, CUDA-only ones too (tests/test_bench.py)
      python bench.py --allocator both       # each section with and without the allocator tweak
      python bench.py --device cuda --out results/bench/bench_cuda.json   # the GPU check
      python bench.py --sections chunk --threads 1 --out results/bench/chunk.json   # chunk lengths
      python bench.py --sections readers --threads 1 --out results/bench/readers.json   # the map's readers
      python bench.py --sections seed --threads 1 --out results/bench/seed.json   # one seed's cost
The references (CPU, chunk, GPU: results/bench/{bench,chunk,bench_cuda}.json) are shown in
results/bench/README.md. Speed claims are ratios within one (shared) run. The timers and memory
readings, the sections on one training step (seed, memory, compile, train) and the printed tables are
plumbing/timing.py's.

Worker protocol: the driver runs each job of JOBS in a fresh process (`python -m bench --worker
SECTIONS --worker_out OUT ...`, BENCH_ALLOCATOR=on|off in its environment) and reads OUT, {section:
result, "allocator", "threads", "seconds"}: peak memory and the allocator setting never leak
between sections; --quick runs every section in one worker. Departures: generation states are
synthetic (random KV cache or EMA state: a step's cost does not depend on the values); peak memory
on CPU is the process's peak RSS (VmHWM, reset via /proc/self/clear_refs where allowed).
"""

import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line
cli.exit_on_ctrl_c(__name__, "bench.py")  # until main_guard; the imports below take seconds
import numpy as np
import torch

from plumbing import checkpoint, cli, registry, runtime, tables, timing
import ema
import gpt
import scaling
import spen
import train
import variants
import writes

ALPHAS = spen.SPENConfig().alphas  # SPEN's decays (paper); S = 3
METHODS = tuple(m for m in ema.METHODS if m != "auto")  # the ema.traces methods timed: scan, matmul
SECTIONS = ("limits", "ema", "chunk", "readers", "seed", "blocks", "gen_spen", "gen_gpt", "ops", "memory", "compile",
            "train", "train_run")
CUDA_ONLY = ("train", "train_run")
JOBS = (("limits", "ema"),) + tuple((s,) for s in SECTIONS[2:])  # one worker process each (ema reads limits)
# (H, D, T, B) of the chunk section: the frontier's grid, the byte ablation at width 128, the paper
CHUNK_CASES = ((32, 4, 64, 32), (2, 64, 256, 8), (12, 64, 1024, 1))
CHUNK_LENS = (8, 16, 32, 64)  # L timed against the loop
MAP_MODELS = ("delta", "ema_kv", "softmax_history", "gpt") + registry.MAP  # the readers section: the map's models
TRAIN_RUN_STEPS = 20  # train_run's steps: runtime.WARMUP_STEPS (compiling) + the timed ones


@dataclass
class BenchConfig:
    out: str = cli.arg("out/bench/bench.json", "JSON results file (the committed references: "
                       "results/bench/bench.json, results/bench/bench_cuda.json)", group="I/O")
    sections: str = cli.arg("", "comma-separated sections (default: every one the device runs): "
                            + ", ".join(SECTIONS), group="what")
    quick: bool = cli.arg(False, "tiny sizes, every section in one worker: exercises every code path",
                          group="what")
    device: str = cli.arg("auto", "auto (cuda if available, else cpu) | cpu | cuda | cuda:N", group="system")
    threads: int = cli.arg(0, "torch threads per worker (0: torch's default)", group="system",
                           bounds=(0, cli.THREADS[1]))
    allocator: str = cli.arg("on", "runtime.configure_allocator() in each worker: on | off | both (every "
                             "job twice, the tables show both and their ratio)", choices=("on", "off", "both"),
                             group="system")
    worker: str = cli.arg("", "worker protocol (see the docstring): run these comma-separated sections in "
                          "this process and write their JSON to --worker_out", group="worker protocol")
    worker_out: str = cli.arg("", "worker protocol: the JSON file the worker writes", group="worker protocol")

    def __post_init__(self):
        cli.check_fields(self)
        names = self.section_list()
        unknown = [s for s in names if s not in SECTIONS]
        cli.require(not unknown, "--sections: unknown section(s) {}; choose from {}", ", ".join(unknown),
                    ", ".join(SECTIONS))
        kind = self.device.split(":")[0]
        cli.require(kind in ("auto", "cpu", "cuda"), "--device must be auto, cpu, cuda or cuda:N, got {!r}",
                    self.device)
        runtime.resolve_device(self.device, auto=("cuda",))  # a CUDA device that is not there: one line
        cli.require(not self.worker or self.worker_out, "--worker needs --worker_out FILE")
        cli.require(bool(self.out) and not os.path.isdir(self.out), "--out must name a file, got {!r}", self.out)

    def section_list(self):
        return [s for s in (self.worker or self.sections).split(",") if s]


def get_parser():
    return cli.parser(BenchConfig, "Speed, memory and operator counts of EMA traces, SPEN and GPT.")


# ---------------------------------------------------------------------------------------------
# Sections (each returns a JSON-able dict): the EMA traces and the readers' chunked forms


def bench_limits(device, quick):
    """Copy bandwidth (2 * bytes / time: one read, one write) and dense matmul throughput."""
    n = (4 if quick else 64) * 2**20 if device.type == "cpu" else 256 * 2**20  # floats
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    t = timing.timed(lambda: dst.copy_(src), device, reps=5 if quick else 20)
    out = dict(copy_mib=n * 4 / 2**20, copy_ms=t["ms_min"], copy_gbs=2 * n * 4 / t["ms_min"] / 1e6)
    m = (256 if quick else 2048) if device.type == "cpu" else 8192
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(m, m, device=device, dtype=dtype), torch.randn(m, m, device=device, dtype=dtype)
        t = timing.timed(lambda: a @ b, device, reps=3 if quick else 5)
        out[f"matmul_{name}_tflops"] = 2 * m**3 / t["ms_min"] / 1e9
    out["matmul_size"] = m
    return out


def max_error(method, x, g, tf32=False):
    """Largest |difference| to the loop of ema.traces(method): values and dL/dx (float32)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        fast, ref = ema.traces(xa, ALPHAS, method=method), ema.traces_ref(xb, ALPHAS)
        (gf,), (gr,) = torch.autograd.grad(fast, xa, g), torch.autograd.grad(ref, xb, g)
        return dict(value=(fast - ref).abs().max().item(), grad=(gf - gr).abs().max().item())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def bench_ema(device, quick, copy_gbs=None):
    """ema.traces (both methods) vs the copy floor and the loop; forward reads x and writes h,
    backward reads g and writes dx. Asserts the 1e-5 agreement with the loop in fp32. copy_gbs:
    the limits section's bandwidth, measured (small) here when it did not run first."""
    copy_gbs = copy_gbs or bench_limits(device, True)["copy_gbs"]
    B, C, S = (2, 64, 3) if quick else (8, 768, 3)
    Ts, reps = ((64, 256), 2) if quick else ((256, 1024, 4096), 5)
    rows = []
    for T in Ts:
        x = torch.randn(B, T, C, device=device)
        xg = x.clone().requires_grad_(True)
        g = torch.randn(B, T, S, C, device=device)
        nbytes = 4 * (B * T * C + B * T * S * C)  # one direction
        row = dict(T=T, B=B, C=C, S=S, floor_fwd_ms=nbytes / copy_gbs / 1e6, floor_fb_ms=2 * nbytes / copy_gbs / 1e6)
        for m in METHODS:
            fwd = timing.timed(lambda: ema.traces(x, ALPHAS, method=m), device, reps)
            fb = timing.timed(lambda: ema.traces(xg, ALPHAS, method=m).backward(g), device, reps)
            for t, floor in ((fwd, row["floor_fwd_ms"]), (fb, row["floor_fb_ms"])):
                t["x_floor"] = t["ms_min"] / floor
            err = max_error(m, x, g)
            if max(err.values()) > 1e-5:
                raise timing.BenchError(f"ema.traces(method={m!r}) differs from the loop by {max(err.values()):.2e} "
                                 f"at T={T} (fp32, TF32 off): more than 1e-5")
            row[m] = dict(fwd=fwd, fb=fb, max_err=err)
            if device.type == "cuda":
                row[m]["max_err_tf32"] = max_error(m, x, g, tf32=True)
        ref = dict(reps=1, warmup=1) if T >= 4096 and device.type == "cpu" else dict(reps=3)
        row["loop_fwd"] = timing.timed(lambda: ema.traces_ref(x, ALPHAS), device, **ref)
        row["loop_fb"] = timing.timed(lambda: ema.traces_ref(xg, ALPHAS).backward(g), device, **ref)
        rows.append(row)
    T = Ts[len(Ts) // 2]  # chunk length sweep at the middle T (forward + backward)
    xg = torch.randn(B, T, C, device=device, requires_grad=True)
    g = torch.randn(B, T, S, C, device=device)
    sweep = {m: {L: timing.timed(lambda: ema.traces(xg, ALPHAS, method=m, chunk=L).backward(g), device, reps)["ms_min"]
                 for L in (16, 32, 64, 128) if L <= T} for m in METHODS}
    P = 256 if quick else 1024  # streaming: one step of the (1, S, C) state vs recomputing a prefix
    h, x_t = torch.zeros(1, S, C, device=device), torch.randn(1, C, device=device)
    xp = torch.randn(1, P, C, device=device)
    step_us = 1e3 * timing.timed(lambda: ema.step(x_t, h, ALPHAS), device, reps=200)["ms"]
    prefix_ms = timing.timed(lambda: ema.traces(xp, ALPHAS), device, reps)["ms"]
    return dict(rows=rows, chunk_sweep=dict(T=T, ms=sweep),
                stream=dict(C=C, P=P, step_us=step_us, recompute_prefix_ms=prefix_ms))


def bench_chunk(device, quick):
    """The write readers' chunk length: writes.ema_kv_chunked and delta_rule_chunked at each L of
    CHUNK_LENS against their loops (ema_kv_ref, delta_rule_ref), forward (no grad) and
    forward+backward, at each (H, D, T, B) of CHUNK_CASES, fp32. ratio = loop ms / chunked ms
    (> 1: the chunked form is faster)."""
    cases, reps = (((2, 4, 16, 2),), 2) if quick else (CHUNK_CASES, 15)
    torch.manual_seed(0)
    rows = []
    for H, D, T, B in cases:
        def rand(*shape, unit=False):
            x = torch.randn(*shape, device=device)
            return writes.l2norm(x) if unit else x
        inputs = dict(ema_kv=(rand(B, H, len(ALPHAS), T, D), rand(B, H, T, D, unit=True), rand(B, H, T, D)),  # q, k, v
                      delta=(rand(B, H, T, D, unit=True), rand(B, H, T, D, unit=True), rand(B, H, T, D),
                             torch.rand(B, H, T, device=device)))  # q, k, v (B, H, T, D); beta (B, H, T) in (0, 1)
        inputs["gated_delta"] = inputs["delta"] + (-torch.rand(B, H, T, device=device),)  # log decays in (-1, 0)
        run = dict(ema_kv=lambda a, L: (writes.ema_kv_ref(*a, ALPHAS) if L == "loop"
                                        else writes.ema_kv_chunked(*a, ALPHAS, chunk=L)),
                   delta=lambda a, L: (writes.delta_rule_ref(*a) if L == "loop"
                                       else writes.delta_rule_chunked(*a, chunk=L)),
                   gated_delta=lambda a, L: (writes.gated_delta_ref(*a) if L == "loop"
                                             else writes.gated_delta_chunked(*a, chunk=L)))
        for reader, args in inputs.items():
            grad_args = [x.clone().requires_grad_(True) for x in args]
            gy = torch.randn(B, H, T, D, device=device)
            Ls = ("loop",) + tuple(L for L in CHUNK_LENS if L <= T)

            def fwd(L):
                with torch.no_grad():
                    run[reader](args, L)

            def fb(L):
                torch.autograd.grad(run[reader](grad_args, L), grad_args, gy)
            for mode, fn in (("fwd", fwd), ("fwd+bwd", fb)):
                ms = timing.interleaved({str(L): (lambda L=L: fn(L)) for L in Ls}, device, reps)
                ratio = {L: ms["loop"] / v for L, v in ms.items() if L != "loop"}
                rows.append(dict(reader=reader, H=H, D=D, T=T, B=B, mode=mode, ms=ms, ratio=ratio,
                                 best_L=int(max(ratio, key=ratio.get))))
    return dict(reps=reps, rows=rows)


def bench_readers(device, quick):
    """A training step (forward + backward, fp32, no optimizer) of each model of MAP_MODELS at
    scaling.py's shape, every one built from its registry entry, timed in interleaved rounds:
    ms, the ratio to delta's (> 1: slower than delta) and the model FLOP/s (flops_per_token) as a
    fraction of the fp32 matmul peak measured here, in this thread count (a square matmul of the
    step's largest size). Checks the chunked forms' cost where the curves run them (results/map)."""
    shape = dict(tokenizer="bytes", n_layer=2, n_embd=32, block_size=48) if quick else \
        dict(tokenizer="bytes", n_layer=4, n_embd=128, block_size=256)
    B, reps = (2, 2) if quick else (16, 5)
    steps = {}
    for name in MAP_MODELS:
        overrides = dict(registry.MODELS[name].overrides)
        blocks = registry.MODELS[name].blocks()
        if quick and len(blocks) > 1:  # a per-block model, cut to the quick depth: its last two blocks
            overrides.update(predictor=",".join(map(variants.spec, blocks[-2:])), reads="state")
        cfg = train.make_config("cpu_bytes", **{**overrides, **shape, "device": device.type})
        model = train.build_model(cfg).to(device)
        idx = torch.randint(256, (B, cfg.block_size), device=device)
        steps[name] = (model, lambda model=model, idx=idx: timing.train_step(model, idx))
    ms = timing.interleaved({k: fn for k, (_, fn) in steps.items()}, device, reps)
    n = 64 if quick else 1024  # the peak: a square fp32 matmul (the step's largest are 4,096 x 128 x 512)
    peak = timing.matmul_peak(device, n, reps=3 if quick else 10)  # FLOP/s
    tokens = B * shape["block_size"]
    return dict(B=B, T=shape["block_size"], C=shape["n_embd"], reps=reps, threads=torch.get_num_threads(),
                matmul_fp32_flops=peak,
                models={k: dict(ms=ms[k], ratio_to_delta=ms[k] / ms["delta"], params=m.num_params(),
                                state_floats=m.state_floats(shape["block_size"]),
                                flops_per_token=m.flops_per_token(shape["block_size"]),
                                fraction_of_peak=m.flops_per_token(shape["block_size"]) * tokens / (ms[k] / 1e3) / peak)
                        for k, (m, _) in steps.items()})


def bench_gen(device, quick, model_name):
    """ms per generated token and peak memory at each context P (batch 1, no grad)."""
    contexts = (64, 256) if quick else (256, 1024, 4096, 16384)
    small = dict(vocab_size=512, n_layer=2, n_embd=64, n_head=4) if quick else {}
    torch.manual_seed(0)
    if model_name == "spen":
        model = spen.SPEN(spen.SPENConfig(**small))
    else:
        model = gpt.GPT(gpt.GPTConfig(**small, block_size=max(contexts) + 64))
    model = model.to(device).eval()
    cfg = model.config
    rss_model = timing.proc_status("VmRSS")
    token = torch.zeros(1, dtype=torch.long, device=device)
    rows = []
    for P in contexts:
        if model_name == "spen":  # the state after P tokens: same size for every P
            state = model.init_state(1, device)
            for s in state:
                s["h"].normal_()
        else:  # a KV cache of P past tokens per layer, (1, H, P, D) each
            D = cfg.n_embd // cfg.n_head
            state = dict(kv=[(torch.randn(1, cfg.n_head, P, D, device=device),
                              torch.randn(1, cfg.n_head, P, D, device=device)) for _ in range(cfg.n_layer)], pos=P)
        state_mib = sum(t.numel() * t.element_size() for t in timing.tensors(state)) / 2**20
        reset = timing.reset_peak(device)
        with torch.no_grad():
            holder = [state]

            def one():
                _, holder[0] = model.step(token, holder[0])
            t = timing.timed(one, device, reps=2 if quick else 3)
        rows.append(dict(P=P, ms=t["ms"], ms_min=t["ms_min"], state_mib=state_mib,
                         peak_mib=timing.peak_mib(device), peak_reset=reset))
        del state, holder
    return dict(model=model_name, params=model.num_params(), rss_model_mib=rss_model, rows=rows)


# ---------------------------------------------------------------------------------------------
# Sections: what training costs (one block, one short run; one step's memory, compile and speed:
# plumbing/timing.py)


def bench_blocks(device, quick):
    """One SPEN block vs one GPT block (same width), forward + backward, B * T = const tokens."""
    C, H = (64, 4) if quick else (256, 4)
    Ts, tokens, reps = ((64, 256), 512, 2) if quick else ((256, 1024, 4096, 8192), 8192, 3)
    scfg = spen.SPENConfig(n_embd=C, n_head=H)
    sb = spen.Block(scfg)
    spen.init_weights(sb, scfg)  # a Block does not initialise itself
    sb = sb.to(device)
    gb = gpt.Block(gpt.GPTConfig(n_embd=C, n_head=H, block_size=max(Ts))).to(device)
    mixers = dict(spen=lambda u: sb.pred(u, spen.shift_right(sb.ctx(u))), gpt=lambda u: gb.attn(u))
    rows = []
    for T in Ts:
        B = max(1, tokens // T)
        x = torch.randn(B, T, C, device=device, requires_grad=True)
        row = dict(T=T, B=B)
        for name, fn in (("spen", sb), ("gpt", gb), ("spen_mixer", mixers["spen"]), ("gpt_mixer", mixers["gpt"])):
            t = timing.timed(lambda: fn(x).sum().backward(), device, reps, warmup=2)
            row[name] = dict(ms=t["ms_min"], tok_s=B * T / t["ms_min"] * 1e3)
        row["ratio_block"] = row["gpt"]["ms"] / row["spen"]["ms"]
        row["ratio_mixer"] = row["gpt_mixer"]["ms"] / row["spen_mixer"]["ms"]
        rows.append(row)
    return dict(C=C, n_head=H, tokens_per_batch=tokens, rows=rows)


def bench_ops(device, quick):
    """Operators of one training forward + backward (batch 1) per model, width and T."""
    kw = dict(n_layer=2, vocab_size=512) if quick else dict(n_layer=12)
    Ts = (64, 256) if quick else (256, 1024, 4096)
    if quick:
        plan = [(64, Ts)]
    elif device.type == "cuda":
        plan = [(768, Ts)]
    else:  # width 768 is ~10 s per step per model at T=256 on a CPU; the count does not depend on it
        plan = [(768, Ts[:1]), (64, Ts)]
    models = dict(spen_matmul=lambda C: spen.SPEN(spen.SPENConfig(trace_method="matmul", n_embd=C, **kw)),
                  spen_scan=lambda C: spen.SPEN(spen.SPENConfig(trace_method="scan", n_embd=C, **kw)),
                  gpt=lambda C: gpt.GPT(gpt.GPTConfig(n_embd=C, block_size=max(Ts), **kw)))
    rows = []
    for C, Ts_at_C in plan:
        for name, build in models.items():
            torch.manual_seed(0)
            model = build(C).to(device)
            for T in Ts_at_C:
                idx = torch.randint(model.config.vocab_size, (1, T), device=device)
                timing.train_step(model, idx)  # first call: lazy inits and cached constants
                rows.append(dict(model=name, C=C, n_layer=kw["n_layer"], T=T,
                                 ops=timing.count_ops(lambda: timing.train_step(model, idx))))
            del model
    count = {(r["model"], r["C"], r["T"]): r["ops"] for r in rows}
    C = plan[-1][0]
    mid, long = Ts[-2], Ts[-1]
    checks = dict(width=C, T_mid=mid, T_long=long,
                  spen_over_gpt_at_T_mid=count["spen_matmul", C, mid] / count["gpt", C, mid],
                  spen_long_over_mid=count["spen_matmul", C, long] / count["spen_matmul", C, mid],
                  scan_long_over_mid=count["spen_scan", C, long] / count["spen_scan", C, mid])
    checks["pass"] = checks["spen_over_gpt_at_T_mid"] <= 2 and abs(checks["spen_long_over_mid"] - 1) <= 0.1
    return dict(rows=rows, checks=checks)


def bench_train_run(device, quick):
    """train.main with the paper's preset (130m: micro-batch 32 x 1024, 16 micro-batches a step,
    bf16, compile, fused AdamW) for TRAIN_RUN_STEPS steps on random tokens: the real loop end to end, no data
    and no network; its ms/step, MFU and peak memory leave out the warm-up steps. The loss on
    uniform random tokens stays near ln V (nothing to learn): a check that the run is sane."""
    out_dir = tempfile.mkdtemp(prefix="bench_train_")
    over = dict(max_iters=TRAIN_RUN_STEPS, eval_interval=TRAIN_RUN_STEPS, eval_iters=2, log_interval=5,
                warmup_iters=5)
    if quick:
        over.update(max_iters=2, eval_interval=2, eval_iters=1, log_interval=1, warmup_iters=1, n_layer=1,
                    n_embd=64, block_size=32, batch_size=2, grad_accum=1, compile=False)
    cfg = train.make_config("130m", device=str(device), out_dir=out_dir, **over)
    rng = np.random.default_rng(0)
    V = train.model_config(cfg).vocab_size
    train_tokens, val = (rng.integers(0, V, size=n).astype(np.uint16) for n in (8_000_000, 200_000))
    t0 = time.perf_counter()
    res = train.main(cfg, tokens=(train_tokens, val))
    keep = {k: res.get(k) for k in ("val_loss", "params", "tokens", "step", "ms_per_step", "tok_s", "mfu",
                                     "peak_mem_gib")}
    try:  # the first and last training losses, and whether compile fell back to eager
        with open(os.path.join(out_dir, "metrics.jsonl")) as f:
            losses = [r["train_loss"] for r in map(json.loads, f) if "train_loss" in r]
        keep.update(first_loss=losses[0], last_loss=losses[-1])
        with open(os.path.join(out_dir, "log.txt")) as f:
            keep["compile_fell_back"] = "warning: torch.compile failed" in f.read()
    except (OSError, ValueError, KeyError, IndexError):
        pass
    shutil.rmtree(out_dir, ignore_errors=True)  # its numbers are in this JSON now
    return dict(config={k: v for k, v in asdict(cfg).items() if k in over or k in ("device", "compile", "dtype")},
                gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None, ln_V=math.log(V),
                seconds=time.perf_counter() - t0, **keep)


# One function per section: (device, quick) -> dict.
RUN = dict(limits=bench_limits, ema=bench_ema, chunk=bench_chunk, readers=bench_readers,
           seed=lambda device, quick: timing.bench_seed(device, quick, scaling.ScalingConfig()), blocks=bench_blocks,
           gen_spen=functools.partial(bench_gen, model_name="spen"),
           gen_gpt=functools.partial(bench_gen, model_name="gpt"), ops=bench_ops, memory=timing.bench_memory,
           compile=timing.bench_compile, train=timing.bench_train_steps, train_run=bench_train_run)
assert tuple(RUN) == SECTIONS


# ---------------------------------------------------------------------------------------------
# Worker (one process) and driver


def run_worker(cfg):
    """Run cfg's sections with RUN[section](device, quick) and write their JSON."""
    device = torch.device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    on = os.environ.get("BENCH_ALLOCATOR", "on") == "on" and runtime.configure_allocator()
    res = dict(allocator=on, threads=torch.get_num_threads(), seconds={})
    for sec in cfg.section_list():
        t0 = time.time()
        if sec in CUDA_ONLY and device.type != "cuda" and not cfg.quick:
            res[sec] = dict(skipped="needs CUDA")
        else:
            kw = dict(copy_gbs=res["limits"]["copy_gbs"]) if sec == "ema" and "limits" in res else {}
            res[sec] = RUN[sec](device, cfg.quick, **kw)
        res["seconds"][sec] = time.time() - t0
    with open(cfg.worker_out, "w") as f:
        json.dump(res, f)
    return res


def spawn(cfg, sections, allocator):
    """Run sections in a fresh Python process (the worker protocol, see the docstring). A failed
    worker's stderr, traceback included, is shown before the timing.BenchError."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # no env override
    env["BENCH_ALLOCATOR"] = allocator
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "w.json")
        cmd = [sys.executable, "-m", "bench", "--worker", ",".join(sections), "--worker_out", out,
               "--device", cfg.device, "--threads", str(cfg.threads)] + (["--quick"] if cfg.quick else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            raise timing.BenchError(f"worker {'+'.join(sections)} (allocator {allocator}) failed with "
                             f"status {r.returncode}; its output is above")
        with open(out) as f:
            return json.load(f)


def main(cfg):
    """Run the chosen sections (each job in a fresh worker process), print tables, write JSON."""
    t0 = time.time()
    device = torch.device(runtime.resolve_device(cfg.device, auto=("cuda",))[0])
    cfg.device = str(device)
    folder = os.path.dirname(os.path.abspath(cfg.out))
    checkpoint.make_out_dir(folder, f"--out {cfg.out}: its folder")  # before any measurement
    wanted = cfg.section_list() or [s for s in SECTIONS if s not in CUDA_ONLY or device.type == "cuda" or cfg.quick]
    if cfg.quick and not cfg.section_list():
        wanted.remove("compile")  # compiling even a tiny model takes minutes on a small CPU
    jobs = [tuple(wanted)] if cfg.quick else [j for j in (tuple(s for s in job if s in wanted) for job in JOBS) if j]
    settings = ("on", "off") if cfg.allocator == "both" else (cfg.allocator,)
    load_start = os.getloadavg()  # 1, 5, 15 min: how busy the machine was (other jobs slow every section)
    by_setting = {s: dict(seconds={}) for s in settings}
    for sections in jobs:
        for s in settings:
            print(f"running {'+'.join(sections)} (allocator {s}) ...", flush=True)
            out = spawn(cfg, sections, s)
            by_setting[s]["seconds"].update(out.pop("seconds"))
            by_setting[s].update(out)
    res = dict(machine=dict(**timing.machine(device), load_start=load_start, load_end=os.getloadavg()),
               quick=cfg.quick, runs=by_setting, seconds=time.time() - t0)
    timing.print_tables(res)
    res = tables.save_json(res, cfg.out, "bench.py", cfg)  # a failed write leaves no half file
    secs = ", ".join(f"{k} {v:.0f}" for k, v in by_setting[settings[0]]["seconds"].items())
    print(f"\nwrote {cfg.out} ({res['seconds']:.0f} s; per section: {secs} s)")
    return res


def cli_main(argv=None):
    """`python bench.py ...`, the driver or (with --worker) one worker."""
    cfg = cli.parse(BenchConfig, get_parser(), argv)
    return cli.main_guard(lambda: run_worker(cfg) if cfg.worker else main(cfg), prog="bench.py")


if __name__ == "__main__":
    cli_main()

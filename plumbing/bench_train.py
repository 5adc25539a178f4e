"""bench_train.py: what training costs, one block, one step and one short run: bench.py's sections.

Paper section "Large scale: SPEN": an EMA context is linear in T to train, and the paper trains
its 130M SPEN at micro-batch 32 x 1024 on one H200. These sections (JSON keys of bench.py's
output, run in its worker processes) measure what that training costs:
  blocks     one SPEN block vs one GPT block (C=256), forward+backward tokens/s at
             T in {256, 1024, 4096, 8192}, B = 8192 / T; the mixers alone beside them
  ops        aten operators (torch.profiler) in one training forward+backward, batch 1, of the
             12-layer SPEN (linear predictor; trace method "matmul" and "scan") and GPT-2 at
             T in {256, 1024, 4096}; on a CPU at width 768 for T=256 and width 64 for every T
             (the count does not depend on the width: both are given at T=256), on CUDA at 768
  memory     activation memory of one 130M SPEN training step (fp32, AdamW) per token: the
             growth of peak memory between micro-batches of 256 and 1024 tokens (and, beside it,
             the bytes autograd saves), extrapolated to the paper's micro-batch (32 x 1024) and
             set against 80 GB (H100) / 141 GB (H200)
  compile    torch.compile against eager on one training step: loss and gradients equal within
             tolerance, compile seconds, step ms, on a 2-layer width-128 SPEN (the train section
             compiles the full-size models on CUDA)
  train      CUDA only: 130M SPEN and GPT-2 124M train steps at the paper's micro-batch
             (32 x 1024, halved until it fits), bf16 autocast, fused AdamW, eager and compiled:
             tokens/s, MFU (runtime.estimate_mfu at runtime.peak_flops), peak memory
  train_run  CUDA only: `train.main` with the 130m preset (compile, bf16) for 100 steps on random
             tokens (no data, no network): ms/step, MFU, peak memory, losses near ln V

Shape glossary: B batch, T time, C width.

Run through bench.py (timing helpers, the worker protocol, the tables and the JSON live there;
bench.py starts `python bench_train.py --worker ...` for these sections):
      python bench.py --sections blocks,ops,memory,compile   # the CPU ones
      python bench.py --device cuda --out results/bench/bench_cuda.json   # with train, train_run
Their numbers are in results/bench/bench.json (CPU) and results/bench/bench_cuda.json (GPU).
"""

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict

import numpy as np
import torch

import bench
import gpt
import lm
from plumbing import runtime
import spen
import train

PAPER_MICRO_BATCH = (32, 1024)  # B x T of one micro-batch in train.py's 130m preset


def count_ops(fn):
    """aten operators fn() dispatches (forward and backward), counted by torch.profiler; on a
    GPU each one is at least one kernel launch."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))


def train_step(model, idx, opt=None, autocast=None):
    """One forward + backward (+ optimizer step when opt is given) on idx as its own targets."""
    with autocast if autocast is not None else torch.autocast(idx.device.type, enabled=False):
        _, loss = model(idx, idx)
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss


def bench_blocks(device, quick):
    """One SPEN block vs one GPT block (same width), forward + backward, B * T = const tokens."""
    C, H = (64, 4) if quick else (256, 4)
    Ts, tokens, reps = ((64, 256), 512, 2) if quick else ((256, 1024, 4096, 8192), 8192, 3)
    scfg = bench.spen_config(n_embd=C, n_head=H)
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
            t = bench.timed(lambda: fn(x).sum().backward(), device, reps, warmup=min(bench.WARMUP, 2))
            row[name] = dict(ms=t["ms_min"], tok_s=B * T / t["ms_min"] * 1e3)
        row["ratio_block"] = row["gpt"]["ms"] / row["spen"]["ms"]
        row["ratio_mixer"] = row["gpt_mixer"]["ms"] / row["spen_mixer"]["ms"]
        rows.append(row)
    return dict(C=C, n_head=H, tokens_per_batch=tokens, rows=rows)


def bench_ops(device, quick):
    """Operators of one training forward + backward (batch 1) per model, width and T."""
    n_layer = 2 if quick else 12
    small = dict(vocab_size=512) if quick else {}
    Ts = (64, 256) if quick else (256, 1024, 4096)
    if quick:
        plan = [(64, Ts)]
    elif device.type == "cuda":
        plan = [(768, Ts)]
    else:  # width 768 is ~10 s per step per model at T=256 on a CPU; the count does not depend on it
        plan = [(768, Ts[:1]), (64, Ts)]
    models = dict(spen_matmul=lambda C: spen.SPEN(bench.spen_config("matmul", n_layer=n_layer, n_embd=C, **small)),
                  spen_scan=lambda C: spen.SPEN(bench.spen_config("scan", n_layer=n_layer, n_embd=C, **small)),
                  gpt=lambda C: gpt.GPT(gpt.GPTConfig(n_layer=n_layer, n_embd=C, block_size=max(Ts), **small)))
    rows = []
    for C, Ts_at_C in plan:
        for name, build in models.items():
            torch.manual_seed(0)
            model = build(C).to(device)
            for T in Ts_at_C:
                idx = torch.randint(model.config.vocab_size, (1, T), device=device)
                train_step(model, idx)  # first call: lazy inits and cached constants
                rows.append(dict(model=name, C=C, n_layer=n_layer, T=T,
                                 ops=count_ops(lambda: train_step(model, idx))))
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


def saved_bytes(model, idx):
    """Bytes autograd keeps for the backward of one forward on idx: unique storages of the
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


def bench_memory(device, quick):
    """Peak memory growth per token of one SPEN training step (forward, backward, AdamW step)."""
    kw = dict(vocab_size=512, n_layer=2, n_embd=64) if quick else {}
    T = 64 if quick else 256
    out = dict(T=T, fp32=True, rows=[])
    method = "matmul"  # the accelerator path; the scan saves the same tensors (see saved_bytes)
    torch.manual_seed(0)
    model = spen.SPEN(bench.spen_config(method, **kw)).to(device)
    opt = lm.configure_optimizers(model, 0.1, 6e-4, (0.9, 0.95), device.type)
    peaks = {}
    for B in (1, 1, 4):  # the first step allocates AdamW's state: measured again after it
        idx = torch.randint(model.config.vocab_size, (B, T), device=device)
        bench.sync(device)
        bench.reset_peak(device)
        train_step(model, idx, opt)
        bench.sync(device)
        peaks[B] = bench.peak_mib(device)
    per_token_mib = (peaks[4] - peaks[1]) / (3 * T)
    saved_per_token_mib = saved_bytes(model, idx) / (4 * T) / 2**20
    static_mib = sum(p.numel() for p in model.parameters()) * 4 * 4 / 2**20  # weights, grads, 2 Adam moments
    Bp, Tp = PAPER_MICRO_BATCH
    need_gb = (static_mib + per_token_mib * Bp * Tp) * 2**20 / 1e9
    out["rows"].append(dict(method=method, params=model.num_params(), peak_mib_B1=peaks[1],
                            peak_mib_B4=peaks[4], per_token_mib=per_token_mib,
                            saved_per_token_mib=saved_per_token_mib, static_mib=static_mib,
                            paper_micro_batch=list(PAPER_MICRO_BATCH), paper_need_gb=need_gb,
                            fits_gb={k: need_gb <= v for k, v in bench.GPU_MEMORY_GB.items()}))
    return out


def bench_compile(device, quick):
    """torch.compile vs eager on one training forward + backward: same loss and gradients."""
    cfg = bench.spen_config("matmul", vocab_size=512, n_layer=2, n_embd=128, block_size=128)
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
        bench.sync(device)
        first_s = time.perf_counter() - t0
        grads = [p.grad.clone() for p in model.parameters()]
        def again():
            model.zero_grad(set_to_none=True)
            train_step(m, idx)
        step = bench.timed(again, device, reps=3, warmup=1)
        res[name] = dict(loss=loss.item(), first_call_s=first_s, step_ms=step["ms"], grads=grads)
    gerr = max((a - b).abs().max().item() / (b.abs().max().item() + 1e-12)
               for a, b in zip(res["compiled"].pop("grads"), res["eager"].pop("grads")))
    lerr = abs(res["compiled"]["loss"] - res["eager"]["loss"])
    return dict(n_layer=cfg.n_layer, n_embd=cfg.n_embd, B=B, T=T, eager=res["eager"], compiled=res["compiled"],
                loss_diff=lerr, max_grad_rel_diff=gerr, equal=lerr <= 1e-4 and gerr <= 1e-3)


def bench_train_steps(device, quick):
    """130M SPEN and GPT-2 124M train steps: bf16 autocast, fused AdamW, eager and compiled."""
    small = dict(vocab_size=512, n_layer=2, n_embd=64)
    builds = dict(spen=lambda: spen.SPEN(bench.spen_config(**(small if quick else {}))),
                  gpt=lambda: gpt.GPT(gpt.GPTConfig(**(small if quick else {}))))
    B, T = (2, 64) if quick else PAPER_MICRO_BATCH
    peak = runtime.peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    dtype = torch.bfloat16 if device.type == "cuda" or quick else torch.float32
    out = dict(T=T, dtype=str(dtype), peak_flops=peak, models={})
    for name, build in builds.items():
        for compiled in (False, True) if device.type == "cuda" else (False,):
            b, res = B, None
            while res is None:
                try:
                    res = _train_steps(build, device, b, T, compiled, dtype, peak, steps=2 if quick else 10)
                except torch.OutOfMemoryError:
                    if b == 1:
                        raise bench.BenchError(f"{name}: one sequence of {T} tokens does not fit") from None
                    b //= 2
                torch.cuda.empty_cache()  # after the except block, when the failed step's tensors are gone
            out["models"][f"{name}_{'compiled' if compiled else 'eager'}"] = res
    return out


def _train_steps(build, device, B, T, compiled, dtype, peak, steps):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True  # as train.py sets it
    model = build().to(device)
    opt = lm.configure_optimizers(model, 0.1, 6e-4, (0.9, 0.95), device.type)
    run = torch.compile(model) if compiled else model
    idx = torch.randint(model.config.vocab_size, (B, T), device=device)
    ac = torch.autocast(device.type, dtype=dtype)
    t0 = time.perf_counter()
    train_step(run, idx, opt, ac)
    bench.sync(device)
    first_s = time.perf_counter() - t0
    bench.reset_peak(device)
    t = bench.timed(lambda: train_step(run, idx, opt, ac), device, reps=steps, warmup=2)
    tok_s = B * T / t["ms"] * 1e3
    return dict(B=B, params=model.num_params(), first_call_s=first_s, ms=t["ms"], tok_s=tok_s,
                mfu=runtime.estimate_mfu(model, T, tok_s, peak), peak_mib=bench.peak_mib(device))


def bench_train_run(device, quick):
    """train.main with the paper's preset (130m: micro-batch 32 x 1024, 16 micro-batches a step,
    bf16, compile, fused AdamW) for 100 steps on random tokens: the real loop end to end, no data
    and no network; its ms/step, MFU and peak memory leave out the warm-up steps. The loss on
    uniform random tokens stays near ln V (nothing to learn): a check that the run is sane."""
    out_dir = tempfile.mkdtemp(prefix="bench_train_")
    over = dict(max_iters=100, eval_interval=100, eval_iters=2, log_interval=10, warmup_iters=10)
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


# The sections of this file for bench.run_worker: (device, quick, earlier results) -> dict.
RUN_HERE = dict(
    blocks=lambda device, quick, earlier: bench_blocks(device, quick),
    ops=lambda device, quick, earlier: bench_ops(device, quick),
    memory=lambda device, quick, earlier: bench_memory(device, quick),
    compile=lambda device, quick, earlier: bench_compile(device, quick),
    train=lambda device, quick, earlier: bench_train_steps(device, quick),
    train_run=lambda device, quick, earlier: bench_train_run(device, quick))
assert tuple(RUN_HERE) == bench.TRAIN_SECTIONS


if __name__ == "__main__":
    bench.cli_main(RUN_HERE)

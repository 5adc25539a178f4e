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
             tokens/s, MFU (lm.estimate_mfu at lm.peak_flops), peak memory
  train_run  CUDA only: a 200-step `train.main` run of the cpu preset on `builtin`, its losses

Shape glossary: B batch, T time, C width.

Run through bench.py (timing helpers, worker processes and the JSON live there):
      python bench.py --sections blocks,ops,memory,compile   # the CPU ones
      python bench.py --device cuda --out results/bench/bench_cuda.json   # with train, train_run
Their numbers are in results/bench/bench.json (CPU) and results/bench/bench_cuda.json (GPU).
"""

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict

import torch

import bench

GPU_MEMORY_GB = {"H100": 80, "H200": 141}  # the GPUs the paper's scale implies (H200: the paper's)
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
    import gpt
    import spen
    C, H = (64, 4) if quick else (256, 4)
    Ts, tokens, reps = ((64, 256), 512, 2) if quick else ((256, 1024, 4096, 8192), 8192, 3)
    sb = spen.Block(bench.spen_config(n_embd=C, n_head=H)).to(device)
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
    import gpt
    import spen
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
    import lm
    import spen
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
                            fits_gb={k: need_gb <= v for k, v in GPU_MEMORY_GB.items()}))
    return out


def bench_compile(device, quick):
    """torch.compile vs eager on one training forward + backward: same loss and gradients."""
    import spen
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


def bench_train(device, quick):
    """130M SPEN and GPT-2 124M train steps: bf16 autocast, fused AdamW, eager and compiled."""
    import gpt
    import lm
    import spen
    small = dict(vocab_size=512, n_layer=2, n_embd=64)
    builds = dict(spen=lambda: spen.SPEN(bench.spen_config(**(small if quick else {}))),
                  gpt=lambda: gpt.GPT(gpt.GPTConfig(**(small if quick else {}))))
    B, T = (2, 64) if quick else PAPER_MICRO_BATCH
    peak = lm.peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
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
    import lm
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
                mfu=lm.estimate_mfu(model, T, tok_s, peak), peak_mib=bench.peak_mib(device))


def bench_train_run(device, quick):
    """train.main on the cpu preset and `builtin`: a short real run and its losses."""
    import train
    out_dir = tempfile.mkdtemp(prefix="bench_train_")
    over = dict(max_iters=2, eval_interval=2, eval_iters=1, n_layer=1, n_embd=64, block_size=32, batch_size=2,
                grad_accum=1) if quick \
        else dict(max_iters=200)
    cfg = train.make_config("cpu", device=str(device), data="builtin", out_dir=out_dir, **over)
    t0 = time.perf_counter()
    res = train.main(cfg)
    keep = {k: res[k] for k in ("val_loss", "best_val", "params", "tokens", "step") if k in res}
    try:  # the first and last logged training losses
        with open(os.path.join(out_dir, "metrics.jsonl")) as f:
            losses = [r["train_loss"] for r in map(json.loads, f) if "train_loss" in r]
        keep.update(first_loss=losses[0], last_loss=losses[-1])
    except (OSError, ValueError, KeyError, IndexError):
        pass
    shutil.rmtree(out_dir, ignore_errors=True)  # its numbers are in this JSON now
    return dict(config={k: v for k, v in asdict(cfg).items() if k in over or k in ("device", "data")},
                seconds=time.perf_counter() - t0, **keep)


def print_blocks(base, cells):
    """The blocks table of one worker result; cells(get) gives bench.print_tables' on | off | off/on
    figures."""
    if "blocks" in base:
        bl = base["blocks"]
        print(f"\nSPEN block vs GPT block, C={bl['C']}, fwd+bwd, B*T={bl['tokens_per_batch']}: tokens/s, "
              "ratio = GPT ms / SPEN ms")
        for i, row in enumerate(bl["rows"]):
            print(f" T={row['T']:5d}: SPEN {row['spen']['tok_s']:9.0f}  GPT {row['gpt']['tok_s']:9.0f}  block ratio "
                  f"{cells(lambda r: r['blocks']['rows'][i]['ratio_block'])}  mixer ratio "
                  f"{cells(lambda r: r['blocks']['rows'][i]['ratio_mixer'])}")


def print_tables(base):
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
            fits = ", ".join(f"{k} {GPU_MEMORY_GB[k]} GB: {'fits' if v else 'does not fit'}"
                             for k, v in r["fits_gb"].items())
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
        print(f"\ntrain steps, T={tr['T']}, {tr['dtype']}:")
        for k, r in tr["models"].items():
            mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a (no peak for this device)"
            print(f" {k:15s} B={r['B']:3d}: {r['tok_s']:10.0f} tokens/s, {r['ms']:8.1f} ms/step, MFU {mfu}, "
                  f"peak {r['peak_mib']:.0f} MiB, first call {r['first_call_s']:.1f} s")
    run = base.get("train_run")
    if run and "skipped" not in run:
        print(f"\ntrain.main, cpu preset on builtin, {run['config']}: train loss {run.get('first_loss')} -> "
              f"{run.get('last_loss')}, val loss {run.get('val_loss')}, {run['seconds']:.0f} s")

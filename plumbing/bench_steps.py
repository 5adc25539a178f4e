"""bench.py's sections on one training step: its memory per token (against the GPUs the paper's
scale implies), torch.compile against eager, and its speed in the paper's shape on CUDA. Each
section is (device, quick) -> a JSON-able dict, run by bench.py's workers (its RUN table); what
they measure and how to run them is in bench.py's docstring, the timers in plumbing/timing.py.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": a 130M SPEN
trained at 32 x 1024 tokens a micro-batch in bf16 on one H200.

Shape glossary: B batch (micro-batch), T time, C width.

Run: nothing to run; `python bench.py --sections memory,compile,train` (tests/test_bench.py runs
memory and train through --quick).
"""

import time

import torch

from plumbing import runtime, timing
import gpt
import lm
import spen
import writes

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
        timing.sync(device)
        timing.reset_peak(device)
        timing.train_step(model, idx, opt)
        timing.sync(device)
        peaks[B] = timing.peak_mib(device)
    per_token_mib = (peaks[4] - peaks[1]) / (3 * T)
    saved_per_token_mib = timing.saved_bytes(model, idx) / (4 * T) / 2**20
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
        loss = timing.train_step(m, idx)
        timing.sync(device)
        first_s = time.perf_counter() - t0
        grads = [p.grad.clone() for p in model.parameters()]
        def again():
            model.zero_grad(set_to_none=True)
            timing.train_step(m, idx)
        step = timing.timed(again, device, reps=3, warmup=1)
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
                    raise timing.BenchError(f"{name}: one sequence of {T} tokens does not fit") from None
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
    timing.train_step(model, idx, opt, ac)
    timing.sync(device)
    first_s = time.perf_counter() - t0
    timing.reset_peak(device)
    t = timing.timed(lambda: timing.train_step(model, idx, opt, ac), device, reps=steps, warmup=2)
    tok_s = B * T / t["ms"] * 1e3
    return dict(B=B, params=model.num_params(), flops_per_token=model.flops_per_token(T), first_call_s=first_s,
                ms=t["ms"], tok_s=tok_s, mfu=runtime.estimate_mfu(model, T, tok_s, peak),
                peak_mib=timing.peak_mib(device))

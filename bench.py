"""bench.py: how fast the EMA context runs, against the machine's limits and against attention.

Issue 5 / paper section "Large scale: SPEN" (the cost argument: linear in T to train, constant
memory per generated token). One run measures, on the device it is given:
  limits   copy bandwidth (GB/s, bytes read + written) and fp32 / bf16 matmul TFLOP/s
  ema      ema.traces forward and forward+backward, B=8, C=768, S=3, T in {256, 1024, 4096}:
           ms, effective GB/s, ratio to the copy floor (bytes that must move / copy bandwidth),
           the reference loop beside it, the chunk length L swept at T=1024, one streaming
           step vs recomputing a 1024-token prefix
  blocks   one SPEN block vs one GPT block of the same width (C=256, as the pre-measured facts
           of issue 5), forward+backward tokens/s at T in {256, 1024, 4096, 8192} with
           B = 8192 / T; also the mixers alone (EMA traces + predictor vs self-attention)
  gen      ms per generated token and peak memory at context P in {256, 1024, 4096, 16384}:
           SPEN.step (state independent of P) vs GPT.step with a KV cache of P tokens, full
           size models (130M / GPT-2 small), batch 1, one subprocess per model
  train    CUDA only: tokens/s and MFU of the 130M SPEN training step (bf16 autocast, AdamW),
           eager and torch.compile
Every section runs twice, in fresh subprocesses, with and without ema.configure_allocator()
(glibc keeps freed large blocks instead of unmapping them); the table shows both and their ratio.
Speed claims are ratios within this one run: the machine may be shared.

Shape glossary: B batch, T time, C width, S traces, P context already seen, L chunk length.

Departures: generation states are synthetic (random KV cache of P tokens, random EMA state):
a step's cost does not depend on the values, and building a 16384-token prefix would take
minutes. Peak memory on CPU is the process's peak RSS (VmHWM, reset before each context via
/proc/self/clear_refs where the kernel allows it), which includes the model's weights.

Run:  python bench.py                 # writes results/bench/bench.json; 12 min on the shared,
                                      # loaded 2-core CPU (load ~7), a few minutes when quiet
      python bench.py --threads 1     # on a busy machine: 2-thread ops stall on every fork/join
      python bench.py --quick         # smoke run, ~15 s (tests/test_bench.py)
      python bench.py --device cuda   # on a GPU: adds the 130M training step
Expected output: one table per section (see the README "Performance" section for numbers).
Internal: `--worker SECTIONS --worker_out F` runs sections in this process (BENCH_ALLOCATOR=on
applies the allocator setting); this is how the driver runs each measurement subprocess.
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

import torch

import ema

ALPHAS = (0.5, 0.1, 0.02)  # SPEN's decays (paper); S = 3
JOBS = (("limits", "ema", "blocks"), ("gen_spen",), ("gen_gpt",), ("train",))  # one subprocess each
WARMUP = 3  # calls before timing (1 with --quick); see timed()


def get_parser():
    p = argparse.ArgumentParser(description="Speed of EMA traces, SPEN vs GPT blocks, generation.")
    g = p.add_argument_group("I/O")
    g.add_argument("--out", default="results/bench/bench.json", help="where to write the JSON results")
    g = p.add_argument_group("system")
    g.add_argument("--device", default="auto", help="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ...")
    g.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: torch's default)")
    g.add_argument("--quick", action="store_true", help="tiny sizes, one worker per allocator setting, < 30 s")
    g.add_argument("--allocator", default="both", choices=("both", "on", "off"),
                   help="run with ema.configure_allocator() 'on', 'off', or 'both' (and compare)")
    g = p.add_argument_group("internal (used by bench.py to run one measurement subprocess)")
    g.add_argument("--worker", default=None, help="comma-separated sections to run in this process")
    g.add_argument("--worker_out", default=None, help="JSON file the worker writes")
    return p


# ---------------------------------------------------------------------------------------------
# Timing helpers


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps, warmup=None):
    """Median and min wall time of fn() in ms over reps calls, after warmup calls, and the
    minor page faults per call (getrusage): ~0 once freed blocks are reused. Three warmup calls:
    glibc reuses a freed block for posix_memalign only once neighbouring free blocks have
    coalesced (strace showed the heap growing for the first 3-4 calls, then steady)."""
    for _ in range(WARMUP if warmup is None else warmup):
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
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return proc_status("VmHWM")


# ---------------------------------------------------------------------------------------------
# Sections (each returns a JSON-able dict)


def bench_limits(device, quick):
    """Copy bandwidth (2 * bytes / time: one read, one write) and dense matmul throughput."""
    n = (4 if quick else 64) * 2**20 if device.type == "cpu" else 256 * 2**20  # floats
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), device, reps=5 if quick else 20)
    out = dict(copy_mib=n * 4 / 2**20, copy_ms=t["ms_min"], copy_gbs=2 * n * 4 / t["ms_min"] / 1e6)
    m = (256 if quick else 2048) if device.type == "cpu" else 8192
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(m, m, device=device, dtype=dtype), torch.randn(m, m, device=device, dtype=dtype)
        t = timed(lambda: a @ b, device, reps=3 if quick else 5)
        out[f"matmul_{name}_tflops"] = 2 * m**3 / t["ms_min"] / 1e9
    out["matmul_size"] = m
    return out


def bench_ema(device, quick, copy_gbs):
    """ema.traces vs the loop; bytes: forward reads x, writes h; backward reads g, writes dx."""
    B, C, S = (2, 64, 3) if quick else (8, 768, 3)
    Ts, reps = ((64, 256), 2) if quick else ((256, 1024, 4096), 5)
    rows = []
    for T in Ts:
        x = torch.randn(B, T, C, device=device)
        xg = x.clone().requires_grad_(True)
        g = torch.randn(B, T, S, C, device=device)
        w = torch.tensor(ALPHAS, device=device).view(S, 1)
        y = torch.empty(B, T, S, C, device=device)
        nbytes = 4 * (B * T * C + B * T * S * C)  # one direction
        row = dict(T=T, B=B, C=C, S=S, L=ema.chunk_len(T), floor_fwd_ms=nbytes / copy_gbs / 1e6,
                   floor_fb_ms=2 * nbytes / copy_gbs / 1e6)
        # the cheapest possible PyTorch op producing h: one broadcast multiply x -> (B, T, S, C)
        row["one_op"] = timed(lambda: torch.mul(x[:, :, None], w, out=y), device, reps)
        row["fwd"] = timed(lambda: ema.traces(x, ALPHAS), device, reps)
        row["fb"] = timed(lambda: ema.traces(xg, ALPHAS).backward(g), device, reps)
        ref = dict(reps=1, warmup=1) if T >= 4096 else dict(reps=3)  # the loop takes ~1 s at T=4096
        row["ref_fwd"] = timed(lambda: ema.traces_ref(x, ALPHAS), device, **ref)
        row["ref_fb"] = timed(lambda: ema.traces_ref(xg, ALPHAS).backward(g), device, **ref)
        for k in ("fwd", "fb"):
            row[k]["gbs"] = (1 if k == "fwd" else 2) * nbytes / row[k]["ms_min"] / 1e6
            row[k]["x_floor"] = row[k]["ms_min"] / row[f"floor_{k}_ms"]
        rows.append(row)
    # chunk length sweep at the middle T (forward + backward)
    T = Ts[len(Ts) // 2]
    xg = torch.randn(B, T, C, device=device, requires_grad=True)
    g = torch.randn(B, T, S, C, device=device)
    sweep = {L: timed(lambda: ema.traces(xg, ALPHAS, chunk=L).backward(g), device, reps)["ms_min"]
             for L in (16, 32, 64, 128, 256) if L <= T}
    # streaming: one step of the (1, S, C) state vs recomputing the traces of a 1024-token prefix
    P = 256 if quick else 1024
    h, x_t, xp = torch.zeros(1, S, C, device=device), torch.randn(1, C, device=device), torch.randn(1, P, C, device=device)
    step_us = 1e3 * timed(lambda: ema.step(x_t, h, ALPHAS), device, reps=200)["ms"]
    prefix_ms = timed(lambda: ema.traces(xp, ALPHAS), device, reps)["ms"]
    return dict(rows=rows, chunk_sweep=dict(T=T, ms=sweep),
                stream=dict(C=C, P=P, step_us=step_us, recompute_prefix_ms=prefix_ms))


def bench_blocks(device, quick):
    """One SPEN block vs one GPT block (same width), forward + backward, B * T = const tokens."""
    import gpt
    import spen
    C, H = (64, 4) if quick else (256, 4)
    Ts, tokens, reps = ((64, 256), 512, 2) if quick else ((256, 1024, 4096, 8192), 8192, 3)
    scfg = spen.SPENConfig(n_embd=C, n_head=H, ffn_hidden=4 * C, ffn_topk=max(1, round(0.06 * 4 * C)))
    gcfg = gpt.GPTConfig(n_embd=C, n_head=H, block_size=max(Ts))
    sb, gb = spen.Block(scfg).to(device), gpt.Block(gcfg).to(device)
    mixers = dict(spen=lambda u: sb.pred(u, spen.shift_right(sb.ctx(u))), gpt=lambda u: gb.attn(u))
    rows = []
    for T in Ts:
        B = max(1, tokens // T)
        x = torch.randn(B, T, C, device=device, requires_grad=True)
        row = dict(T=T, B=B)
        for name, fn in (("spen", sb), ("gpt", gb), ("spen_mixer", mixers["spen"]), ("gpt_mixer", mixers["gpt"])):
            t = timed(lambda: fn(x).sum().backward(), device, reps, warmup=min(WARMUP, 2))  # ~3 s a call at T=8192
            row[name] = dict(ms=t["ms_min"], tok_s=B * T / t["ms_min"] * 1e3)
        row["ratio_block"] = row["gpt"]["ms"] / row["spen"]["ms"]
        row["ratio_mixer"] = row["gpt_mixer"]["ms"] / row["spen_mixer"]["ms"]
        rows.append(row)
    return dict(C=C, n_head=H, tokens_per_batch=tokens, rows=rows)


def bench_gen(device, quick, model_name):
    """ms per generated token and peak memory at each context P (batch 1, no grad)."""
    import gpt
    import spen
    contexts = (64, 256) if quick else (256, 1024, 4096, 16384)
    small = dict(vocab_size=512, n_layer=2, n_embd=64, n_head=4) if quick else {}
    torch.manual_seed(0)
    if model_name == "spen":
        extra = dict(ffn_hidden=256, ffn_topk=16) if quick else {}
        model = spen.SPEN(spen.SPENConfig(**small, **extra))
    else:
        model = gpt.GPT(gpt.GPTConfig(**small, block_size=max(contexts) + 64))
    model = model.to(device).eval()
    cfg = model.config
    rss_model = proc_status("VmRSS")
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
        state_mib = sum(t.numel() * t.element_size() for t in _tensors(state)) / 2**20
        reset = reset_peak(device)
        with torch.no_grad():
            holder = [state]

            def one():
                _, holder[0] = model.step(token, holder[0])
            t = timed(one, device, reps=2 if quick else 3)
        rows.append(dict(P=P, ms=t["ms"], ms_min=t["ms_min"], state_mib=state_mib,
                         peak_mib=peak_mib(device), peak_reset=reset))
        del state, holder
    return dict(model=model_name, params=model.num_params(), rss_model_mib=rss_model, rows=rows)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def bench_train(device, quick):
    """CUDA: tokens/s and MFU of the 130M SPEN training step, bf16 autocast, eager vs compile."""
    if device.type != "cuda":
        return dict(skipped="needs CUDA")
    import spen
    cfg = spen.SPENConfig(n_layer=2, n_embd=128, n_head=4, ffn_hidden=512, ffn_topk=31) if quick else spen.SPENConfig()
    B, T, steps = (2, 128, 3) if quick else (16, 1024, 10)
    out = dict(B=B, T=T, params=None)
    for compiled in (False, True):
        torch.manual_seed(0)
        model = spen.SPEN(cfg).to(device)
        out["params"] = model.num_params()
        opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), "cuda")
        run = torch.compile(model) if compiled else model
        idx = torch.randint(cfg.vocab_size, (B, T), device=device)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss = run(idx, idx)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        t = timed(step, device, reps=steps, warmup=3)
        out["compile" if compiled else "eager"] = dict(
            ms=t["ms"], tok_s=B * T / t["ms"] * 1e3,
            mfu=model.estimate_mfu(B, t["ms"] / 1e3) if hasattr(model, "estimate_mfu") else None)
    return out


# ---------------------------------------------------------------------------------------------
# Worker (one subprocess) and driver


def run_worker(args):
    global WARMUP
    WARMUP = 1 if args.quick else WARMUP
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    on = os.environ.get("BENCH_ALLOCATOR") == "on"
    res = dict(allocator=on and ema.configure_allocator(), threads=torch.get_num_threads())
    for sec in args.worker.split(","):
        t0 = time.time()
        if sec == "limits":
            res["limits"] = bench_limits(device, args.quick)
        elif sec == "ema":
            gbs = res["limits"]["copy_gbs"] if "limits" in res else bench_limits(device, True)["copy_gbs"]
            res["ema"] = bench_ema(device, args.quick, gbs)
        elif sec == "blocks":
            res["blocks"] = bench_blocks(device, args.quick)
        elif sec in ("gen_spen", "gen_gpt"):
            res[sec] = bench_gen(device, args.quick, sec[4:])
        elif sec == "train":
            res["train"] = bench_train(device, args.quick)
        res.setdefault("seconds", {})[sec] = time.time() - t0
    with open(args.worker_out, "w") as f:
        json.dump(res, f)


def spawn(args, sections, allocator):
    """Run sections in a fresh Python process; the allocator setting is per process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # no env override
    env["BENCH_ALLOCATOR"] = allocator
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "w.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", ",".join(sections), "--worker_out", out,
               "--device", args.device, "--threads", str(args.threads)] + (["--quick"] if args.quick else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bench worker {sections} (allocator {allocator}) failed:\n{r.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def machine(device):
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    out = dict(cpu=cpu, cores=os.cpu_count(), python=platform.python_version(), torch=torch.__version__,
               platform=platform.platform(), device=str(device))
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def print_tables(res):
    """Tables: each figure with the allocator on, off, and off/on (slowdown without it)."""
    on, off = res["runs"].get("on"), res["runs"].get("off")
    base = on or off

    def both(get, fmt="{:9.2f}", ratio=True):
        vals = [get(r) if r else None for r in (on, off)]
        cells = [fmt.format(v) if v is not None else " " * 9 for v in vals]
        if ratio:
            cells.append(f"{vals[1] / vals[0]:6.2f}x" if None not in vals and vals[0] else " " * 7)
        return " ".join(cells)

    lim = base["limits"]
    print(f"\nmachine: {res['machine']['cpu']} ({res['machine']['cores']} cores), torch {res['machine']['torch']}, "
          f"device {res['machine']['device']}, {base['threads']} threads")
    print(f"limits (allocator on | off): copy {both(lambda r: r['limits']['copy_gbs'])} GB/s, "
          f"fp32 matmul {lim['matmul_fp32_tflops']:.3f} TFLOP/s, bf16 matmul {lim['matmul_bf16_tflops']:.3f} TFLOP/s")
    print("\nema.traces, ms (best of repeats)   columns: allocator on | off | off/on")
    for i, row in enumerate(base["ema"]["rows"]):
        print(f" B={row['B']} T={row['T']:5d} C={row['C']} S={row['S']} L={row['L']}: copy floor "
              f"{row['floor_fwd_ms']:.2f} fwd / {row['floor_fb_ms']:.2f} fwd+bwd")
        for k, name in (("one_op", "one op x->h (floor in ops)"), ("fwd", "traces fwd"), ("fb", "traces fwd+bwd"),
                        ("ref_fwd", "loop fwd"), ("ref_fb", "loop fwd+bwd")):
            extra = ""
            if k in ("fwd", "fb"):
                extra = f"   {row[k]['x_floor']:.1f}x floor, {row[k]['gbs']:.0f} GB/s"
            print(f"   {name:28s} {both(lambda r: r['ema']['rows'][i][k]['ms_min'])}{extra}"
                  f"   faults/call {both(lambda r: r['ema']['rows'][i][k]['faults'], '{:7.0f}', False)}")
    sw = base["ema"]["chunk_sweep"]
    print(f" chunk sweep T={sw['T']} fwd+bwd ms: " + ", ".join(f"L={L} {v:.1f}" for L, v in sw["ms"].items()))
    st = base["ema"]["stream"]
    print(f" streaming: one step {st['step_us']:.1f} us vs recomputing a {st['P']}-token prefix "
          f"{st['recompute_prefix_ms']:.2f} ms (C={st['C']})")
    bl = base["blocks"]
    print(f"\nSPEN block vs GPT block, C={bl['C']}, fwd+bwd, B*T={bl['tokens_per_batch']}, tokens/s   "
          "ratio = GPT ms / SPEN ms (allocator on | off)")
    for i, row in enumerate(bl["rows"]):
        print(f" T={row['T']:5d}: SPEN {row['spen']['tok_s']:9.0f}  GPT {row['gpt']['tok_s']:9.0f}  block ratio "
              f"{both(lambda r: r['blocks']['rows'][i]['ratio_block'])}  mixer ratio "
              f"{both(lambda r: r['blocks']['rows'][i]['ratio_mixer'])}")
    for name in ("gen_spen", "gen_gpt"):
        if name not in base:
            continue
        gen = base[name]
        print(f"\ngeneration {gen['model']} ({gen['params'] / 1e6:.1f}M params), batch 1: ms/token "
              f"(on | off | off/on), state MiB, peak RSS MiB (on)")
        for i, row in enumerate(gen["rows"]):
            print(f" P={row['P']:6d}: {both(lambda r: r[name]['rows'][i]['ms'])}  state {row['state_mib']:8.1f}  "
                  f"peak {row['peak_mib'] or 0:8.0f}")
    tr = base.get("train")
    if tr and "skipped" not in tr:
        for k in ("eager", "compile"):
            print(f"\n130M SPEN train step {k}: {tr[k]['tok_s']:.0f} tokens/s, MFU {tr[k]['mfu'] or 0:.1%}")
    elif tr:
        print(f"\ntrain step: skipped ({tr['skipped']}); run: python bench.py --device cuda")


def main(args):
    if args.worker:
        return run_worker(args)
    t0 = time.time()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    jobs = [sum(JOBS, ())] if args.quick else [j for j in JOBS if j != ("train",) or device.type == "cuda"]
    settings = ("on", "off") if args.allocator == "both" else (args.allocator,)
    runs = {s: {} for s in settings}
    for sections in jobs:
        for s in settings:
            print(f"running {'+'.join(sections)} with allocator {s} ...", flush=True)
            out = spawn(args, sections, s)
            seconds = {**runs[s].get("seconds", {}), **out.pop("seconds")}
            runs[s].update(out, seconds=seconds)
    res = dict(argv=sys.argv, machine=machine(device), quick=args.quick, runs=runs, seconds=time.time() - t0)
    print_tables(res)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, args.out)
    secs = ", ".join(f"{k} {sum(r['seconds'].get(k, 0) for r in runs.values()):.0f}" for k in runs[settings[0]]["seconds"])
    print(f"\nwrote {args.out} ({res['seconds']:.0f} s; per section, all settings: {secs} s)")
    return res


if __name__ == "__main__":
    main(get_parser().parse_args())

"""bench.py: what the EMA context costs, against the machine's limits and against attention.

Paper section "Large scale: SPEN": an EMA context is linear in T to train and holds a constant
state per generated token, and the paper trains its 130M SPEN on one H200. Each section below
measures one part of that claim on the device it is given (JSON keys = section names):
  limits     copy bandwidth (bytes read + written) and fp32 / bf16 matmul FLOP/s
  ema        ema.traces, method "scan" and "matmul", forward and forward+backward, B=8, C=768,
             S=3, T in {256, 1024, 4096}: ms and ratio to the bandwidth floor (bytes that must
             move / copy bandwidth); the reference loop beside them and the largest difference
             to it (fp32; on CUDA with TF32 off, must be <= 1e-5, and with TF32 on, reported);
             the chunk length L swept at T=1024; one streaming step vs recomputing a prefix
  gen_spen   ms per generated token and peak memory at context P in {256, 1024, 4096, 16384},
  gen_gpt    full-size models, batch 1 (SPEN.step: state independent of P; GPT: KV cache of P)
What training costs is measured in plumbing/bench_train.py (run as a worker of the same protocol; it
imports this file's timing helpers, this file never imports it): blocks (one SPEN block vs one
GPT block, tokens/s), ops (operators per training step), memory (activation memory per token),
compile (torch.compile equals eager), and on CUDA train (130M train steps, MFU) and train_run (100 steps
of train.py's 130m preset on random tokens).
This file drives both and prints every table.

Shape glossary: B batch, T time, C width, S traces, P context already seen, L chunk length.

Run:  python bench.py                        # every CPU section -> out/bench/bench.json
      python bench.py --threads 1            # one thread per op: steadier on a shared machine
      python bench.py --sections ops,memory  # some sections only
      python bench.py --quick                # tiny sizes, all but compile, CUDA-only ones too (tests/test_bench.py)
      python bench.py --allocator both       # each section with and without the allocator tweak
      python bench.py --device cuda --out results/bench/bench_cuda.json   # the GPU check
The committed references: results/bench/bench.json (CPU), results/bench/bench_cuda.json (GPU),
shown in results/bench/README.md. Speed claims are ratios within one (shared) run.

Worker protocol: the driver (this script without --worker) runs each job of JOBS in a fresh
Python process, `python -m MODULE --worker SECTIONS --worker_out OUT [--device ... --threads ...
--quick]` where MODULE is bench (SECTIONS_HERE) or plumbing.bench_train (TRAIN_SECTIONS), with
BENCH_ALLOCATOR=on|off in its environment, and reads OUT: a JSON object {section name: result,
"allocator": bool, "threads": int, "seconds": {section: s}}. A fresh process per job keeps
peak-memory readings and the allocator setting from leaking between sections; --quick runs
every section of a file in one worker.

Departures: generation states are synthetic (random KV cache of P tokens, random EMA state):
a step's cost does not depend on the values. Peak memory on CPU is the process's peak RSS
(VmHWM, reset via /proc/self/clear_refs where the kernel allows it), weights included.
"""

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import torch

from plumbing import checkpoint, cli, runs, runtime
import ema
import gpt
import spen

ALPHAS = spen.SPENConfig().alphas  # SPEN's decays (paper); S = 3
METHODS = tuple(m for m in ema.METHODS if m != "auto")  # the ema.traces methods timed: scan, matmul
SECTIONS_HERE = ("limits", "ema", "gen_spen", "gen_gpt")  # measured in this file
TRAIN_SECTIONS = ("blocks", "ops", "memory", "compile", "train", "train_run")  # in plumbing/bench_train.py
SECTIONS = SECTIONS_HERE + TRAIN_SECTIONS
CUDA_ONLY = ("train", "train_run")
JOBS = (("limits", "ema"), ("blocks",), ("gen_spen",), ("gen_gpt",), ("ops",), ("memory",), ("compile",),
        ("train",), ("train_run",))  # one worker process each
WARMUP = 3  # calls before timing (1 with --quick); see timed()
GPU_MEMORY_GB = {"H100": 80, "H200": 141}  # the GPUs the paper's scale implies (H200: the paper's)


class BenchError(RuntimeError):
    """A measurement could not be made or a checked property failed (a finding, not a user's
    mistake: it keeps its traceback)."""


@dataclass
class BenchConfig:
    out: str = cli.arg("out/bench/bench.json", "JSON results file (the committed references: "
                       "results/bench/bench.json, results/bench/bench_cuda.json)", group="I/O")
    sections: str = cli.arg("", "comma-separated sections (default: every one the device runs): "
                            + ", ".join(SECTIONS), group="what")
    quick: bool = cli.arg(False, "tiny sizes, the sections of each file in one worker: exercises every code path",
                          group="what")
    device: str = cli.arg("auto", "auto (cuda if available, else cpu) | cpu | cuda | cuda:N", group="system")
    threads: int = cli.arg(0, "torch threads per worker (0: torch's default)", group="system")
    allocator: str = cli.arg("on", "runtime.configure_allocator() in each worker: on | off | both (every "
                             "job twice, the tables show both and their ratio)", choices=("on", "off", "both"),
                             group="system")
    worker: str = cli.arg("", "worker protocol (see the docstring): run these comma-separated sections in "
                          "this process and write their JSON to --worker_out", group="worker protocol")
    worker_out: str = cli.arg("", "worker protocol: the JSON file the worker writes", group="worker protocol")

    def __post_init__(self):
        names = self.section_list()
        unknown = [s for s in names if s not in SECTIONS]
        cli.require(not unknown, "--sections: unknown section(s) {}; choose from {}", ", ".join(unknown),
                    ", ".join(SECTIONS))
        cli.require(isinstance(self.threads, int) and self.threads >= 0, "--threads must be an int >= 0, got {}",
                    self.threads)
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
# Timing and memory helpers


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps, warmup=None):
    """Median and min wall time of fn() in ms over reps calls, after warmup calls, and the
    minor page faults per call (getrusage): ~0 once freed blocks are reused. Three warmup calls:
    glibc reuses a freed block for posix_memalign only once neighbouring free blocks have
    coalesced (the heap grows for the first 3-4 calls, then stays)."""
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


def spen_config(method="auto", **kw):
    return spen.SPENConfig(trace_method=method, **kw)


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


def bench_ema(device, quick, copy_gbs):
    """ema.traces (both methods) vs the copy floor and the loop; forward reads x and writes h,
    backward reads g and writes dx. Asserts the 1e-5 agreement with the loop in fp32."""
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
            fwd = timed(lambda: ema.traces(x, ALPHAS, method=m), device, reps)
            fb = timed(lambda: ema.traces(xg, ALPHAS, method=m).backward(g), device, reps)
            for t, floor in ((fwd, row["floor_fwd_ms"]), (fb, row["floor_fb_ms"])):
                t["x_floor"] = t["ms_min"] / floor
            err = max_error(m, x, g)
            if max(err.values()) > 1e-5:
                raise BenchError(f"ema.traces(method={m!r}) differs from the loop by {max(err.values()):.2e} "
                                 f"at T={T} (fp32, TF32 off): more than 1e-5")
            row[m] = dict(fwd=fwd, fb=fb, max_err=err)
            if device.type == "cuda":
                row[m]["max_err_tf32"] = max_error(m, x, g, tf32=True)
        ref = dict(reps=1, warmup=1) if T >= 4096 and device.type == "cpu" else dict(reps=3)
        row["loop_fwd"] = timed(lambda: ema.traces_ref(x, ALPHAS), device, **ref)
        row["loop_fb"] = timed(lambda: ema.traces_ref(xg, ALPHAS).backward(g), device, **ref)
        rows.append(row)
    T = Ts[len(Ts) // 2]  # chunk length sweep at the middle T (forward + backward)
    xg = torch.randn(B, T, C, device=device, requires_grad=True)
    g = torch.randn(B, T, S, C, device=device)
    sweep = {m: {L: timed(lambda: ema.traces(xg, ALPHAS, method=m, chunk=L).backward(g), device, reps)["ms_min"]
                 for L in (16, 32, 64, 128) if L <= T} for m in METHODS}
    P = 256 if quick else 1024  # streaming: one step of the (1, S, C) state vs recomputing a prefix
    h, x_t, xp = torch.zeros(1, S, C, device=device), torch.randn(1, C, device=device), torch.randn(1, P, C, device=device)
    step_us = 1e3 * timed(lambda: ema.step(x_t, h, ALPHAS), device, reps=200)["ms"]
    prefix_ms = timed(lambda: ema.traces(xp, ALPHAS), device, reps)["ms"]
    return dict(rows=rows, chunk_sweep=dict(T=T, ms=sweep),
                stream=dict(C=C, P=P, step_us=step_us, recompute_prefix_ms=prefix_ms))


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def bench_gen(device, quick, model_name):
    """ms per generated token and peak memory at each context P (batch 1, no grad)."""
    contexts = (64, 256) if quick else (256, 1024, 4096, 16384)
    small = dict(vocab_size=512, n_layer=2, n_embd=64, n_head=4) if quick else {}
    torch.manual_seed(0)
    if model_name == "spen":
        model = spen.SPEN(spen_config(**small))
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


# ---------------------------------------------------------------------------------------------
# Worker (one process) and driver


# One function per section of this file: (device, quick, earlier results of this worker) -> dict.
RUN_HERE = dict(
    limits=lambda device, quick, earlier: bench_limits(device, quick),
    ema=lambda device, quick, earlier: bench_ema(device, quick, (earlier.get("limits") or
                                                                  bench_limits(device, True))["copy_gbs"]),
    gen_spen=lambda device, quick, earlier: bench_gen(device, quick, "spen"),
    gen_gpt=lambda device, quick, earlier: bench_gen(device, quick, "gpt"))


def run_worker(cfg, table):
    """Run cfg's sections with table[section](device, quick, earlier) and write their JSON."""
    global WARMUP
    WARMUP = 1 if cfg.quick else WARMUP
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
            res[sec] = table[sec](device, cfg.quick, res)
        res["seconds"][sec] = time.time() - t0
    with open(cfg.worker_out, "w") as f:
        json.dump(res, f)
    return res


def spawn(cfg, sections, allocator):
    """Run sections (all of one file) in a fresh Python process (the worker protocol, see the
    docstring). A failed worker's stderr, traceback included, is shown before the BenchError."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # no env override
    env["BENCH_ALLOCATOR"] = allocator
    module = "plumbing.bench_train" if sections[0] in TRAIN_SECTIONS else "bench"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "w.json")
        cmd = [sys.executable, "-m", module, "--worker", ",".join(sections), "--worker_out", out,
               "--device", cfg.device, "--threads", str(cfg.threads)] + (["--quick"] if cfg.quick else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            raise BenchError(f"worker {module} {'+'.join(sections)} (allocator {allocator}) failed with "
                             f"status {r.returncode}; its output is above")
        with open(out) as f:
            return json.load(f)


def machine(device):
    cpu = runtime.device_name("cpu").rsplit(", ", 1)[0]  # the CPU model, without the core count
    out = dict(cpu=cpu, cores=os.cpu_count(), python=platform.python_version(), torch=torch.__version__,
               platform=platform.platform(), device=str(device))
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
        out["gpu_memory_gb"] = torch.cuda.get_device_properties(device).total_memory / 1e9
    return out


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
        mfu = f"{run['mfu']:.1%}" if run.get("mfu") is not None else "n/a"
        ms = f"{run['ms_per_step']:.0f}" if run.get("ms_per_step") is not None else "n/a"
        print(f"\ntrain.main, 130m preset on random tokens ({run.get('gpu') or 'cpu'}), {run['config']}: {ms} ms/step, "
              f"MFU {mfu}, peak {run.get('peak_mem_gib') or 0:.1f} GiB, train loss {run.get('first_loss')} -> "
              f"{run.get('last_loss')} (ln V {run['ln_V']:.3f}), compile fell back: {run.get('compile_fell_back')}, "
              f"{run['seconds']:.0f} s")


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
          f"{base['threads']} threads, allocator {'on | off | off/on' if on and off else 'on' if on else 'off'}")
    if "limits" in base:
        lim = base["limits"]
        print(f"limits: copy {cells(lambda r: r['limits']['copy_gbs'])} GB/s, fp32 matmul "
              f"{lim['matmul_fp32_tflops']:.3f} TFLOP/s, bf16 matmul {lim['matmul_bf16_tflops']:.3f} TFLOP/s")
    if "ema" in base:
        print("\nema.traces, ms (best of repeats), x floor = ms / bandwidth floor, err = max |fast - loop| (fp32)")
        for i, row in enumerate(base["ema"]["rows"]):
            print(f" B={row['B']} T={row['T']:5d} C={row['C']} S={row['S']}: floor {row['floor_fwd_ms']:.2f} fwd / "
                  f"{row['floor_fb_ms']:.2f} fwd+bwd; loop {row['loop_fwd']['ms_min']:.2f} / {row['loop_fb']['ms_min']:.2f}")
            for meth in METHODS:
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
    skipped = [k for k in SECTIONS if isinstance(base.get(k), dict) and "skipped" in base[k]]
    if skipped:
        print(f"\nskipped ({', '.join(skipped)}): need CUDA; run: python bench.py --device cuda")


def main(cfg):
    """Run the chosen sections (each job in a fresh worker process), print tables, write JSON."""
    t0 = time.time()
    device = torch.device(runtime.resolve_device(cfg.device, auto=("cuda",))[0])
    cfg.device = str(device)
    folder = os.path.dirname(os.path.abspath(cfg.out))
    runs.make_out_dir(folder, f"--out {cfg.out}: its folder")  # before any measurement
    wanted = cfg.section_list() or [s for s in SECTIONS if s not in CUDA_ONLY or device.type == "cuda" or cfg.quick]
    if cfg.quick and not cfg.section_list():
        wanted.remove("compile")  # compiling even a tiny model takes minutes on a small CPU
    if cfg.quick:  # one worker per file
        jobs = [tuple(s for s in wanted if s in SECTIONS_HERE), tuple(s for s in wanted if s in TRAIN_SECTIONS)]
        jobs = [j for j in jobs if j]
    else:
        jobs = [tuple(s for s in job if s in wanted) for job in JOBS]
        jobs = [j for j in jobs if j]
    settings = ("on", "off") if cfg.allocator == "both" else (cfg.allocator,)
    by_setting = {s: dict(seconds={}) for s in settings}
    for sections in jobs:
        for s in settings:
            print(f"running {'+'.join(sections)} (allocator {s}) ...", flush=True)
            out = spawn(cfg, sections, s)
            by_setting[s]["seconds"].update(out.pop("seconds"))
            by_setting[s].update(out)
    res = dict(argv=sys.argv, config=asdict(cfg), machine=machine(device), quick=cfg.quick, runs=by_setting,
               seconds=time.time() - t0)
    print_tables(res)
    checkpoint.atomic_json(res, cfg.out)  # a failed write leaves no half file
    secs = ", ".join(f"{k} {v:.0f}" for k, v in by_setting[settings[0]]["seconds"].items())
    print(f"\nwrote {cfg.out} ({res['seconds']:.0f} s; per section: {secs} s)")
    return res


def cli_main(table, argv=None):
    """`python bench.py ...` (and, for its sections, `python bench_train.py --worker ...`)."""
    cfg = cli.parse(BenchConfig, get_parser(), argv)

    def run():
        if not cfg.worker:
            return main(cfg)
        cli.require(set(cfg.section_list()) <= set(table), "--worker {}: this file runs {}", cfg.worker,
                    ", ".join(table))
        return run_worker(cfg, table)
    return cli.main_guard(run, prog="bench.py")


if __name__ == "__main__":
    cli_main(RUN_HERE)

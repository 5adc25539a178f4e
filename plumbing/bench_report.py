"""The tables bench.py prints, read from its results JSON (the dict bench.main writes): one table
per section that ran; with `--allocator both`, each figure for allocator on | off | off/on.
What each section measures is in bench.py's docstring.

Shape glossary: B batch, T time, C width, S traces, P context already seen, L chunk length,
H heads, D head width.

Run: nothing to run; `python bench.py` prints these (tests/test_bench.py runs them at --quick).
"""

from plumbing import tables


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

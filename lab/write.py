"""The lab's sections 5 and 6, the write: the student's write rules run on MQAR at toy size, the
write points of results/frontier, and a byte-level SPEN trained on builtin beside the committed
curves of results/scaling. The notebook calls them as `W.` (lab/lab.py); every size, the output
folder and the smoke switch are read from lab/helpers.py (H.SIZES, H.OUT, H.SMOKE) when a
function runs, so one setting of the environment governs the whole lab.

Run: nothing to run; tests/test_lab_notebook.py runs it through the notebook and on its own.
"""
import json
import os
import time

import torch

import ema
import recall
from lab import helpers as H
from plumbing import batches, cli, corpus, grid, ngram, repeats
from spen import SPEN, SPENConfig


# ---- 5. the write ---------------------------------------------------------------------------------


def write_task(N, n_seq, D=8, C=64, K=8, M=64, seed=0):
    """n_seq MQAR sequences of N pairs (recall.mqar from data seed `seed`: T = 3N, the queries
    right after the pairs) and two fixed embedding tables of the K + M + 1 ids: `narrow` (D wide: the keys orthonormal, as a
    trained embedding can make K <= D of them, the values random unit vectors) for the write
    states, `wide` (C wide, random) for the additive EMA. -> dict(idx, targets (B, T), narrow,
    wide, K)."""
    idx, targets, _ = recall.mqar(H.positive("n_seq", n_seq), H.positive("N", N), 3 * N, K, M,
                                  torch.Generator().manual_seed(seed), span=N)
    g = torch.Generator().manual_seed(0)  # the tables are the model's: the same for every set of sequences
    keys = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=torch.float64))[0][:K]  # (K, D) orthonormal rows
    values = torch.randn(M, D, generator=g, dtype=torch.float64)
    narrow = torch.cat([keys, values / values.norm(dim=1, keepdim=True), torch.zeros(1, D, dtype=torch.float64)])
    wide = torch.randn(K + M + 1, C, generator=g, dtype=torch.float64)
    return dict(idx=idx, targets=targets, narrow=narrow, wide=wide, K=K)


def run_steps(step, rule, q, k, v, beta=1.0, alphas=H.ALPHAS):
    """The student's one-token step (exercise 6: ema_kv_step or delta_step, on one sequence's
    vectors) run over every token of every sequence from the empty state -> y (B, T, D), the reads.
    torch.func.vmap runs the B sequences at once; a step it cannot batch runs one sequence at a time."""
    B, T, D = q.shape
    M0 = q.new_zeros(len(alphas), D, D) if rule == "ema_kv" else q.new_zeros(D, D)  # (S, D, D) or (D, D)
    one = (lambda q, k, v, M: step(q, k, v, M, alphas)) if rule == "ema_kv" else \
        (lambda q, k, v, M: step(q, k, v, beta, M))

    def loop(f, q, k, v, M):
        ys = []
        for t in range(q.shape[-2]):
            y, M = f(q[..., t, :], k[..., t, :], v[..., t, :], M)
            ys.append(y)
        return torch.stack(ys, -2)  # (..., T, D)
    try:
        return loop(torch.func.vmap(one), q, k, v, M0.expand(B, *M0.shape).clone())  # a state of each sequence's own
    except Exception:  # a step vmap cannot trace (Python control flow on values, .item(), ...)
        return torch.stack([loop(one, q[b], k[b], v[b], M0.clone()) for b in range(B)])  # a fresh state each


def write_reads(task, step, rule, beta=1.0):
    """The write state of `rule` run over the task's sequences with the student's step (exercise
    6), as SPEN's write readers do (variants.py): the query and the value are the current token,
    the key the previous token when that is a key (a learned W_k can keep the rest H.out) -> the
    accuracy at the answer positions, the value id nearest to the read winning."""
    idx, targets, E, K = task["idx"], task["targets"], task["narrow"], task["K"]
    x = E[idx]  # (B, T, D)
    prev = torch.cat([torch.full_like(idx[:, :1], len(E) - 1), idx[:, :-1]], 1)  # (B, T) the previous token
    k = torch.where((prev < K)[..., None], E[prev], torch.zeros(()))  # (B, T, D) the key written at t
    y = run_steps(step, rule, x, k, x, beta)
    asked = targets >= 0
    guess = K + (y[asked] @ E[K:-1].T).argmax(1)  # (answers,) the value whose vector is nearest to the read
    return (guess == targets[asked]).double().mean().item()


def additive_features(task):
    """The additive EMA of the same tokens (ema.traces_ref of the wide embedding, SPEN's decays):
    at each answer position the state before it, h_{t-1} (S C numbers), beside the query's own
    embedding -> X (answers, S C + C), y (answers,) the value to answer."""
    idx, targets, E, K = task["idx"], task["targets"], task["wide"], task["K"]
    h = ema.traces_ref(E[idx], H.ALPHAS)  # (B, T, S, C)
    h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1).flatten(2)  # (B, T, S C) the state read at t
    asked = targets >= 0
    return torch.cat([h_prev, E[idx]], -1)[asked], targets[asked] - K


def write_table(ema_kv_step, delta_step, probe_accuracy, pairs=(2, 4, 8), D=8):
    """Recall of the untrained write states, run with the student's steps (ema_kv: S D^2
    numbers; delta: D^2) against the additive EMA of the same tokens read by the student's probe
    (S C numbers, C = D^2: as many as ema_kv's), per N: a H.table, and the numbers as {reader: {N: acc}}."""
    C, n_train, n_test = D * D, H.SIZES["write"]["n_train"], H.SIZES["write"]["n_test"]
    acc = {"ema_kv": {}, "delta": {}, "additive EMA + your probe": {}}
    for N in pairs:
        test = write_task(N, n_test, D, C, seed=1)
        for rule, step in (("ema_kv", ema_kv_step), ("delta", delta_step)):
            acc[rule][N] = write_reads(test, step, rule)
        X_train, y_train = additive_features(write_task(N, n_train, D, C, seed=0))
        X_test, y_test = additive_features(test)
        acc["additive EMA + your probe"][N] = probe_accuracy(X_train, y_train, X_test, y_test)
    numbers = {"ema_kv": len(H.ALPHAS) * D * D, "delta": D * D, "additive EMA + your probe": len(H.ALPHAS) * C}
    H.table(["reader", "state numbers"] + [f"N = {N} (1/N = {1 / N:.3f})" for N in pairs],
          [[r, numbers[r]] + [a[N] for N in pairs] for r, a in acc.items()])
    return acc


POINTS = (("linear", dict(S=3)), ("linear", dict(S=24)), ("ema_kv", dict(D=4)), ("delta", dict(D=4)))


def point_name(family, knobs):
    """The point's name in results/frontier: linear_C64_S3, ema_kv_D4."""
    return family + ("_C64" if "S" in knobs else "") + "".join(f"_{k}{v}" for k, v in knobs.items())


def train_point(job):
    """One point of recall.py's near task (its default) under its recipe (recall.train_and_test),
    a 2-layer SPEN (width 64 at full size): the additive EMA of S decays read by the paper's linear
    map, or the paper's 3 decays writing outer products per head of width D -> its test accuracy
    and state bytes (4 x spen.SPEN.state_floats: fp32 bytes per layer, results/frontier's count)."""
    family, knobs, sizes = job
    cfg = recall.RecallConfig(n_head=2, workers=1, **sizes)
    torch.manual_seed(0)
    C = cfg.n_embd
    model = SPEN(SPENConfig(vocab_size=cfg.n_keys + cfg.n_values + 1, block_size=cfg.block_size, n_layer=2,
                            n_embd=C, n_head=C // knobs.get("D", C // 2), alphas=ema.spread_decays(knobs.get("S", 3)),
                            predictor=family))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matmuls: one thread per run, one run per core
    try:
        r = recall.train_and_test(cfg, model, seed=0)
    finally:
        torch.set_num_threads(threads)
    return dict(point=point_name(family, knobs), acc=r["test"]["acc"], state_bytes=4 * model.state_floats(cfg.block_size),
                seconds=r["seconds"])


def train_points(points=POINTS, **overrides):
    """The write points, min(2, LAB_THREADS) at a time (plumbing.grid.run_jobs; one, in this
    process, in smoke mode) -> [result]."""
    if points is POINTS and not overrides:
        res = H.collect("points")
        if res is not None:
            return res
    sizes = {**H.SIZES["points"], **overrides}
    for k, v in sizes.items():
        H.positive(k, v) if k not in ("curriculum", "decay") else cli.require(
            isinstance(v, int) and v >= 0, "{} must be an integer >= 0, got {!r}", k, v)
    res = []
    for _, r in grid.run_jobs(train_point, [(f, k, sizes) for f, k in points], 1 if H.SMOKE else min(2, H.CORES)):
        print(f"{r['point']:16s} {r['state_bytes']:>6,} B | acc " + " ".join(f"N={N}: {a:.3f}" for N, a in
                                                                          r["acc"].items()) + f" | {r['seconds']:.0f} s")
        res.append(r)
    return sorted(res, key=lambda r: [point_name(*p) for p in points].index(r["point"]))


def plot_points(res, reference=os.path.join(H.ROOT, "results", "frontier", "frontier.json")):
    """Accuracy at the largest N against state bytes per layer: these runs (filled) beside the
    same points of the committed frontier grid (hollow: 1,500 steps, 2 seeds)."""
    plt = H.pyplot()
    with open(reference) as f:
        grid = json.load(f)["points"]["near"]
    N = max(res[0]["acc"], key=int)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, r in enumerate(res):
        color = f"C{i}"
        ax.plot(r["state_bytes"], r["acc"][N], "o", color=color, label=f"{r['point']} (this run)")
        ref = grid.get(r["point"])
        if ref:
            ax.plot(ref["state_bytes"], ref["acc"][N], "o", mfc="none", color=color, ms=10)
    ax.axhline(1 / int(N), color="k", ls=":", lw=0.8, label=f"1/N: knows which values, not which key")
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("recurrent state per layer (fp32 bytes)")
    ax.set_ylabel(f"MQAR accuracy at N = {N}")
    ax.set_title("the write, not the bytes (hollow: results/frontier, 1,500 steps, 2 seeds)")
    ax.legend(fontsize=7, loc="center right")
    return H.show(fig, "write_points")


# ---- 6. bytes --------------------------------------------------------------------------------------


def byte_data():
    """(train, val) of builtin as UTF-8 bytes (uint16 memmaps), tokenized once into the cache."""
    d = H.SIZES["data"]
    return tuple(corpus.load_split("builtin", s, tokenizer="bytes", **d) for s in ("train", "val"))


def yardsticks():
    """corpus.baselines of builtin bytes: unigram, bigram, trigram and zlib, bz2, lzma (nats/byte)."""
    y = corpus.baselines("builtin", tokenizer="bytes", **H.SIZES["data"])
    return {k: y[k] for k in ("unigram", "bigram", "trigram", *ngram.COMPRESSORS)}


def train_bytes(**overrides):
    """train.py's cpu_bytes preset (a 4 x 128 SPEN on builtin bytes) for H.SIZES['bytes'] steps,
    in this process, under OUT/bytes -> train.main's result dict and the checkpoint path. Its
    log is printed without the argv and config lines (both stay in OUT/bytes/log.txt)."""
    import train
    if not overrides:
        res = H.collect("bytes")
        if res is not None:
            return res
    settings = {**dict(out_dir=os.path.join(H.OUT, "bytes"), device="cpu"), **H.SIZES["data"], **H.SIZES["bytes"],
                **overrides}
    settings = {k: v for k, v in settings.items() if v is not None}
    cfg = train.make_config("cpu_bytes", **settings)  # a bad setting: one ConfigError line
    t0, threads = time.time(), torch.get_num_threads()
    torch.set_num_threads(H.CORES)  # probe.py leaves one thread set
    try:
        with H.only_lines(lambda line: not line.startswith(("argv: ", "config: "))):
            result = train.main(cfg)
    finally:
        torch.set_num_threads(threads)
    return dict(result or {}, seconds=time.time() - t0, ckpt=os.path.join(cfg.out_dir, "ckpt_best.pt"),
                out_dir=cfg.out_dir, tokens_per_step=cfg.batch_size * cfg.block_size * cfg.grad_accum)


def plot_bytes(run, y):
    """The run's validation loss per step (its metrics.jsonl) against the yardsticks' lines."""
    plt = H.pyplot()
    with open(os.path.join(run["out_dir"], "metrics.jsonl")) as f:
        evals = [r for r in map(json.loads, f) if "val_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", color="k", label="SPEN, val")
    names = ("bigram", "trigram", "zlib", "bz2", "lzma")
    styles = dict(bigram=":", trigram=":", zlib="--", bz2=(0, (6, 2)), lzma=(0, (1, 1, 4, 1)))
    x_end = max([r["step"] for r in evals] + [1])
    ranked = sorted(names, key=lambda k: y[k])
    for i, k in enumerate(names):
        ax.axhline(y[k], color=f"C{i}", ls=styles[k], lw=1.2, label=f"{k} {y[k]:.3f}")
        # each line named at the right edge, the names of lines closer than the text pushed apart
        below = ranked.index(k) % 2 == 0 and any(abs(y[k] - y[o]) < 0.08 for o in names if o != k)
        ax.annotate(f"{k} {y[k]:.3f}", (1.0, y[k]), xycoords=("axes fraction", "data"), fontsize=7, color=f"C{i}",
                    xytext=(3, -7 if below else 1), textcoords="offset points", va="bottom")
    ax.set_xlim(0, x_end * 1.02)
    ax.set_ylim(1, 3.5)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("nats per byte")
    ax.set_title("byte loss against its yardsticks (dotted: n-grams, dashed: compressors)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=6, frameon=False)  # off the lines
    return H.show(fig, "bytes")


def loss_split(ckpt, windows=None, k=8):
    """Per-byte loss of a checkpoint on fixed val windows (ablate.py's, seed repeats.HIT_SEED),
    split into in-context copies (the byte and the k before it occurred earlier in the window:
    repeats.copy_distance) and all other bytes -> repeats.copy_split's dict."""
    import sample
    n = H.SIZES["split"]["windows"] if windows is None else windows
    H.positive("loss_split windows", n)
    cli.require(isinstance(ckpt, str) and os.path.isfile(ckpt), "loss_split needs the byte run's checkpoint file "
                "(run the training cell first), got {!r}", ckpt)
    model, _ = sample.load(ckpt, "cpu")
    x, y = batches.get_batch(byte_data()[1], n, model.config.block_size, step=0, seed=repeats.HIT_SEED)
    w = torch.cat([x, y[:, -1:]], 1)  # (n, T+1)
    return repeats.copy_split(repeats.token_nll(model, w), repeats.copy_distance(w, k))


SCALING = os.path.join(H.ROOT, "results", "scaling", "scaling.json")
SCALED = (("gpt_c128", "GPT"), ("linear_c128", "SPEN linear"), ("ema_kv_c128", "SPEN ema_kv (the write)"),
          ("delta_c128", "SPEN delta (the write)"))


def _far(split, lo=128):
    """The loss on copies whose earlier occurrence is `lo` or more bytes back (None: none)."""
    return next((b["loss"] for b in split.get("by_distance", []) if b["lo"] == lo), None)


def split_table(s, tokens, val_loss=None, scaling=SCALING):
    """This run's copy split beside the committed ones of results/scaling (GPT, SPEN linear and
    the write readers ema_kv and delta, 4 x 128 on the same bytes, 128 windows of 256): overall
    validation loss, loss on copies, on all other bytes, the gap, and on the far copies (128+
    bytes back); GPT and linear also at the first point past this run's bytes."""
    with open(scaling) as f:
        curves = json.load(f)["curves"]
    copies = "none in these windows" if s["loss_copy"] is None else s["loss_copy"]
    rows = [["this run (SPEN linear)", f"{tokens / 1e6:.1f}M", val_loss, f"{s['copy_fraction']:.1%}", copies,
             s["loss_other"], _far(s)]]
    for name, label in SCALED:
        if name not in curves:
            continue
        points, copy = curves[name]["points"], curves[name]["copy"]
        first = next((p for p in copy if p["tokens"] >= tokens), copy[-1])  # the first point past this run
        chosen = ([first] if name in ("gpt_c128", "linear_c128") and first is not copy[-1] else []) + [copy[-1]]
        for p in chosen:
            loss = next((q["val_loss"] for q in points if q["step"] == p["step"]), None)
            rows.append([f"results/scaling: {label}", f"{p['tokens'] / 1e6:.1f}M", loss, f"{p['copy_fraction']:.1%}",
                         p["loss_copy"], p["loss_other"], _far(p)])
    for r in rows:
        r.insert(6, r[5] - r[4] if isinstance(r[4], float) else None)
    H.table(["model", "bytes trained", "val loss", "copies", "loss on copies", "on all other bytes", "gap",
           "copies 128+ bytes back"], rows)


def split_words(scaling=SCALING):
    """split_table's committed rows in words, from the same file: which model is lowest on copies
    and on the far copies, whose gap is widest, and why these copy losses are not section 7's."""
    with open(scaling) as f:
        data = json.load(f)
    last = {label: data["curves"][name]["copy"][-1] for name, label in SCALED if name in data["curves"]}
    if not last:
        print(f"{os.path.relpath(scaling, H.ROOT)} holds none of these models' curves")
        return
    copies = min(last, key=lambda m: last[m]["loss_copy"])
    far = min((m for m in last if _far(last[m]) is not None), key=lambda m: _far(last[m]), default=None)
    gap = max(last, key=lambda m: last[m]["loss_other"] - last[m]["loss_copy"])
    s = data["settings"]
    print(f"results/scaling at its last points: lowest on copies {copies} ({last[copies]['loss_copy']:.3f} "
          "nats/byte)" + (f"; on copies 128+ bytes back {far} ({_far(last[far]):.3f})" if far else "")
          + f"; widest gap (all other bytes minus copies) {gap} ({last[gap]['loss_other'] - last[gap]['loss_copy']:.3f}).")
    print(f"Each row is one curve (seed {s['seed']}) read at its last point ({data['schedule']}) on {s['hit_seqs']} "
          f"windows of {s['block_size']} bytes, about {last[copies]['copy_fraction'] * s['hit_seqs'] * s['block_size']:,.0f}"
          " of them copies. Section 7's per-seed copy losses come from other runs, read after a short cooldown (which "
          "lowers every loss) on the whole validation split (far more copies): the numbers of one are not the "
          "other's. Compare models within one table, and read their gaps through section 7's tests.")


def generate(ckpt, start="The list", **overrides):
    """sample.py on the checkpoint: one sample (H.SIZES['sample'] bytes), its text."""
    import sample
    cfg = cli.build(sample.SampleConfig, **{**dict(init_from=ckpt, start=start, num_samples=1, device="cpu"),
                                            **H.SIZES["sample"], **overrides})
    return sample.main(cfg)["texts"][0]

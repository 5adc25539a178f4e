"""What the lab notebook calls: thin wrappers over the repository's own functions (ema, grammar,
spcn, probe, recall, train, sample, plumbing), so the notebook's cells stay short and run the
same code as the commands. Every size comes from SIZES: LAB_SMOKE=1 picks tiny ones (CI runs
the whole notebook so, in seconds, through the same code path). A bad argument (an unknown
variant, zero steps) is one cli.ConfigError line, printed without a traceback in the notebook
(`one_line_errors`).

Environment: LAB_SMOKE=1 tiny sizes; LAB_OUT where outputs go (default out/lab in the
repository); LAB_SOLUTIONS=1 the notebook uses solutions.py instead of exercises.py;
LAB_THREADS=N at most N cores (default all: the byte run's threads, recall's two workers).
"""
import importlib
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import ema  # noqa: E402
import grammar  # noqa: E402
import probe  # noqa: E402
import recall  # noqa: E402
import spcn  # noqa: E402
from plumbing import batches, cli, corpus, ngram, repeats  # noqa: E402

SMOKE = os.environ.get("LAB_SMOKE") == "1"
OUT = os.path.abspath(os.environ.get("LAB_OUT") or os.path.join(ROOT, "out", "lab"))
ALPHAS = (0.5, 0.1, 0.02)  # SPEN's decays (the paper's)
CORES = int(os.environ.get("LAB_THREADS") or 0) or os.cpu_count() or 1

FULL = dict(
    probe=dict(),  # probe.QUICK as it is: one seed, about a minute
    features=dict(n_sentences=600, spcn_epochs=1),
    recall=dict(),  # recall.QUICK as it is: four variants, about 3 minutes on 2 cores
    data=dict(max_tokens=None, cache_dir=None),  # the whole builtin corpus, the default cache
    bytes=dict(max_iters=500, eval_interval=100, log_interval=50),  # cpu_bytes, a third of its steps
    split=dict(windows=32), sample=dict(max_new_tokens=200))
SMOKE_SIZES = dict(
    probe=dict(n_train=60, n_val=20, n_test=30, spcn_epochs=1, probe_iters=5, gru_epochs=1, n_columns=4,
               column_size=16, k=2),
    features=dict(n_sentences=40, spcn_epochs=1),
    recall=dict(steps=4, eval_every=2, curriculum=1, decay=1, test_seqs=8, val_seqs=8, n_embd=16, workers=1),
    data=dict(max_tokens=20_000, cache_dir=os.path.join(OUT, "cache")),
    bytes=dict(max_iters=2, eval_interval=1, log_interval=1, n_layer=1, n_embd=16, block_size=32, batch_size=2,
               eval_iters=1, warmup_iters=0),
    split=dict(windows=2), sample=dict(max_new_tokens=8))
SIZES = SMOKE_SIZES if SMOKE else FULL


def exercises():
    """The student's module (lab/exercises.py, reloaded so that edits count), or solutions.py
    with LAB_SOLUTIONS=1."""
    name = "lab.solutions" if os.environ.get("LAB_SOLUTIONS") == "1" else "lab.exercises"
    return importlib.reload(importlib.import_module(name))


def one_line_errors():
    """In IPython, a cli.UserError (a bad flag or argument) prints its one line, no traceback."""
    try:
        ip = get_ipython()  # noqa: F821 (defined inside IPython only)
    except NameError:
        return
    ip.set_custom_exc((cli.UserError,), lambda shell, etype, value, tb, tb_offset=None:
                      print(f"error: {' '.join(str(value).split())}", file=sys.stderr))


def out(*parts):
    """A path under OUT (created)."""
    path = os.path.join(OUT, *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def show(fig_or_png, name=None):
    """Save a figure under OUT (or take a PNG path) and display it inline when in IPython."""
    path = fig_or_png
    if not isinstance(fig_or_png, str):
        path = out(f"{name}.png")
        fig_or_png.savefig(path, dpi=100, bbox_inches="tight")
        import matplotlib.pyplot as plt
        plt.close(fig_or_png)
    try:
        from IPython.display import Image, display
        if "IPython" in sys.modules and get_ipython() is not None:  # noqa: F821
            display(Image(filename=path))
    except (ImportError, NameError):
        pass
    return path


def pyplot():
    """matplotlib.pyplot, with the Agg backend outside IPython (figures go to files)."""
    import matplotlib
    if "IPython" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# ---- 1. the trace ------------------------------------------------------------------------------


def impulse_response(alphas=ALPHAS, T=80):
    """(T, S) float64: the traces after a single 1 at t = 0 (ema.traces_ref, the definition):
    column s is a_s (1 - a_s)^t, the weight the trace gives an input t steps back."""
    x = torch.zeros(1, T, 1, dtype=torch.float64)
    x[0, 0, 0] = 1.0
    return ema.traces_ref(x, alphas)[0, :, :, 0]


def plot_impulse(alphas=ALPHAS, T=80, windows=None):
    """The impulse response of each decay, with its effective window (if given) marked."""
    plt = pyplot()
    h = impulse_response(alphas, T)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for s, a in enumerate(alphas):
        line, = ax.plot(h[:, s], label=f"a = {a}")
        if windows:
            ax.axvline(windows[s] - 0.5, color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("steps back t")
    ax.set_ylabel("weight a (1 - a)^t")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 1)
    ax.set_title("EMA impulse response (dotted: the window holding 90% of the weight)")
    ax.legend()
    return show(fig, "impulse")


# ---- 2. two pasts, one state -------------------------------------------------------------------


def two_pasts(alphas=ALPHAS, T=2000, vocab=64, width=8, seed=0):
    """Two token sequences that differ in their first token only, embedded by one random table
    and traced in float32 (ema.traces_ref). Returns dict(first_equal={a: step}, final_gap) where
    first_equal[a] is the first step from which trace a of the two is bit-for-bit the same (None:
    never within T), final_gap the largest difference of the final states."""
    cli.require(T >= 2 and vocab >= 2 and width >= 1, "two_pasts needs T >= 2, vocab >= 2, width >= 1")
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(vocab, width, generator=g)
    ids = torch.randint(vocab, (T,), generator=g)
    other = ids.clone()
    other[0] = (ids[0] + 1) % vocab  # a different first token, the rest the same
    h = ema.traces_ref(emb[torch.stack([ids, other])], alphas)  # (2, T, S, C) float32
    same = (h[0] == h[1]).all(-1)  # (T, S)
    first = {}
    for s, a in enumerate(alphas):
        diff = (~same[:, s]).nonzero()
        last = int(diff[-1]) if len(diff) else -1
        first[a] = last + 1 if last + 1 < T else None
    return dict(first_equal=first, final_gap=float((h[0, -1] - h[1, -1]).abs().max()), T=T)


# ---- 3. structure --------------------------------------------------------------------------------


def probe_config(**overrides):
    """probe.py's quick mode (probe.QUICK) at this lab's size, writing under OUT/probe."""
    return cli.build(probe.ProbeConfig, {"quick": probe.QUICK}, "quick",
                     **{"out_dir": os.path.join(OUT, "probe"), **SIZES["probe"], **overrides})


def probe_features(n_sentences=None, spcn_epochs=None, seed=0):
    """An SPCN trained on Grammar A (no labels) and its per-word features on A-train and A-test:
    dict(instantaneous=(X_train, X_test), traces=(X_train, X_test), y=(y_train, y_test))."""
    n = n_sentences or SIZES["features"]["n_sentences"]
    epochs = SIZES["features"]["spcn_epochs"] if spcn_epochs is None else spcn_epochs
    cli.require(n >= 2 and epochs >= 0, "probe_features needs n_sentences >= 2 and spcn_epochs >= 0, got {} and {}",
                n, epochs)
    torch.manual_seed(seed)
    data = grammar.split(n, 0, n // 2, seed=seed)["A"]
    small = SMOKE_SIZES["probe"] if SMOKE else {}
    shape = {k: small[k] for k in ("n_columns", "column_size", "k") if k in small}
    model = spcn.SPCN(spcn.SPCNConfig(seed=seed, **shape))
    model.fit(data["train"], epochs=epochs, log=None)
    feats, ys = {}, []
    for part in ("train", "test"):
        ids, roles, _ = grammar.encode(data[part])
        f, _ = probe.features(model, ids)
        for kind, X in f.items():
            feats.setdefault(kind, []).append(X)
        ys.append(roles[roles >= 0])
    return dict(instantaneous=tuple(feats["instantaneous"]), traces=tuple(feats["traces"]), y=tuple(ys))


# ---- 4. content: MQAR -----------------------------------------------------------------------------


def recall_config(**overrides):
    """recall.py's quick mode (recall.QUICK) at this lab's size, writing under OUT/recall.
    A bad variant or step count is one cli.ConfigError line."""
    return cli.build(recall.RecallConfig, {"quick": recall.QUICK}, "quick",
                     **{"out_dir": os.path.join(OUT, "recall"), "workers": min(2, CORES), **SIZES["recall"],
                        **overrides})


def show_mqar(N=4, T=16, n_keys=8, n_values=16, seed=0):
    """One MQAR sequence (recall.mqar) written out: keys as k0.., values as v0.., '?' marks the
    answer due at each query, '.' the blank."""
    cli.require(1 <= N <= min(n_keys, n_values) and T >= 3 * N, "show_mqar needs 1 <= N <= n_keys, n_values and "
                "T >= 3N, got N = {}, T = {}", N, T)
    idx, targets, _ = recall.mqar(1, N, T, n_keys, n_values, torch.Generator().manual_seed(seed), span=N)
    name = lambda i: "." if i == n_keys + n_values else (f"k{i}" if i < n_keys else f"v{i - n_keys}")
    cells = [name(i) + (f"?(v{t - n_keys})" if t >= 0 else "") for i, t in zip(idx[0].tolist(), targets[0].tolist())]
    return " ".join(cells)


def recall_table(res, binding, recalled_pairs):
    """Rows of the MQAR result with the student's binding and recalled_pairs, per variant and N."""
    lines = []
    for v, r in res["variants"].items():
        cells = [f"N={N}: acc {a:.3f} binding {binding(a, int(N)):+.3f} pairs {recalled_pairs(a, int(N)):.2f}"
                 for N, a in r["acc"].items()]
        lines.append(f"{v:16s} state {r['state_floats']:>6,} floats | " + " | ".join(cells))
    return "\n".join(lines)


# ---- 5. bytes --------------------------------------------------------------------------------------


def byte_data():
    """(train, val) of builtin as UTF-8 bytes (uint16 memmaps), tokenized once into the cache."""
    d = SIZES["data"]
    return tuple(corpus.load_split("builtin", s, tokenizer="bytes", **d) for s in ("train", "val"))


def yardsticks():
    """corpus.baselines of builtin bytes: unigram, bigram, trigram and zlib, bz2, lzma (nats/byte)."""
    y = corpus.baselines("builtin", tokenizer="bytes", **SIZES["data"])
    return {k: y[k] for k in ("unigram", "bigram", "trigram", *ngram.COMPRESSORS)}


def train_bytes(**overrides):
    """train.py's cpu_bytes preset (a 4 x 128 SPEN on builtin bytes) for SIZES['bytes'] steps,
    in this process, under OUT/bytes -> train.main's result dict and the checkpoint path."""
    import train
    settings = {**dict(out_dir=os.path.join(OUT, "bytes"), device="cpu"), **SIZES["data"], **SIZES["bytes"],
                **overrides}
    settings = {k: v for k, v in settings.items() if v is not None}
    cfg = train.make_config("cpu_bytes", **settings)  # a bad setting: one ConfigError line
    t0, threads = time.time(), torch.get_num_threads()
    torch.set_num_threads(CORES)  # probe.py leaves one thread set
    try:
        result = train.main(cfg)
    finally:
        torch.set_num_threads(threads)
    return dict(result or {}, seconds=time.time() - t0, ckpt=os.path.join(cfg.out_dir, "ckpt_best.pt"),
                block_size=cfg.block_size)


def loss_split(ckpt, windows=None, k=8):
    """Per-byte loss of a checkpoint on fixed val windows (ablate.py's, seed ablate.HIT_SEED),
    split into in-context copies (the byte and the k before it occurred earlier in the window:
    repeats.copy_distance) and all other bytes -> repeats.copy_split's dict."""
    import ablate
    import sample
    n = SIZES["split"]["windows"] if windows is None else windows
    cli.require(n >= 1, "loss_split needs windows >= 1, got {}", n)
    model, _ = sample.load(ckpt, "cpu")
    x, y = batches.get_batch(byte_data()[1], n, model.config.block_size, step=0, seed=ablate.HIT_SEED)
    w = torch.cat([x, y[:, -1:]], 1)  # (n, T+1)
    return repeats.copy_split(repeats.token_nll(model, w), repeats.copy_distance(w, k))


def split_line(s):
    """loss_split's result in one line."""
    copies = "none in these windows" if s["loss_copy"] is None else f"{s['loss_copy']:.3f}"
    return (f"copies ({s['copy_fraction']:.1%} of the bytes): {copies} | all other bytes: {s['loss_other']:.3f} "
            "nats/byte")


def generate(ckpt, start="The list", **overrides):
    """sample.py on the checkpoint: one sample (SIZES['sample'] bytes), its text."""
    import sample
    cfg = cli.build(sample.SampleConfig, **{**dict(init_from=ckpt, start=start, num_samples=1, device="cpu"),
                                            **SIZES["sample"], **overrides})
    return sample.main(cfg)["texts"][0]

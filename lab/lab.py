# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab: where an EMA trace keeps structure and loses content
#
# A 90-minute lab on "EMA Is Not All You Need" (arXiv 2604.08556), on a laptop CPU or Colab.
# An exponential moving average trace, `h_t = (1 - a) h_{t-1} + a x_t`, is the simplest recurrent
# context. The paper finds a boundary: its traces keep the **structure** of a sentence (which
# grammatical role a word plays) and lose its **content** (which token sat next to which).
# You will see both halves in a few minutes of training each, and write six small functions
# that explain why.
#
# | section | you run | you write | minutes |
# |---|---|---|---|
# | 1. the trace and its window | the impulse response | `effective_window` | 10 |
# | 2. two pasts, one state | two sequences, one state | `same_state` | 15 |
# | 3. structure: the role probe | `probe.py --quick` (~1 min) | `probe_accuracy` | 20 |
# | 4. content: associative recall | `recall.py --quick` (~3 min) | `mqar_sequence`, `binding`, `recalled_pairs` | 30 |
# | 5. bytes: loss, yardsticks, a sample | a 500-step SPEN on bytes (~3 min) | `compressor_nats_per_byte` | 15 |
#
# **How to work.** Each exercise is a function in `lab/exercises.py` whose body raises
# `NotImplementedError`. Write it there (on Colab: the file browser on the left, double-click
# the file), then re-run the cell that calls `check(...)`: it prints `[pass]` or one line saying
# what is still wrong. The answers are in `lab/solutions.py` (try first). Every cell runs even
# while an exercise is unfinished.
#
# Plain-text twin: `lab/lab.py` (jupytext percent format) is the source of this notebook;
# `lab/README.md` says how to regenerate it.

# %%
# Setup: run this cell first. Locally it finds the repository around this notebook; on Colab
# (or anywhere without it) it clones REPO_URL, then installs what Colab lacks.
import os
import subprocess
import sys

REPO_URL = "https://github.com/REPLACE-ME/ema-is-not-all-you-need.git"  # <- PLACEHOLDER: the repository's clone URL
SMOKE = os.environ.get("LAB_SMOKE") == "1"  # CI's smoke mode: every size tiny, the same code path


def find_root():
    for d in (os.getcwd(), os.path.dirname(os.getcwd())):
        if os.path.isfile(os.path.join(d, "ema.py")) and os.path.isdir(os.path.join(d, "lab")):
            return d
    return None


ROOT = find_root()
if ROOT is None:  # Colab, or a notebook copied out of the repository
    ROOT = os.path.abspath("ema-is-not-all-you-need")
    if not os.path.isdir(ROOT):
        subprocess.run(["git", "clone", "--depth", "1", REPO_URL, ROOT], check=True)
for package in ("torch", "numpy", "matplotlib", "tiktoken"):  # the lab's needs (Colab ships all but tiktoken)
    try:
        __import__(package)
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
os.chdir(ROOT)
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import ema  # noqa: E402
import probe  # noqa: E402
import recall  # noqa: E402
from lab import helpers as H  # noqa: E402
from lab.checks import check  # noqa: E402
from plumbing import ngram  # noqa: E402

H.one_line_errors()  # a bad argument prints one line, as the commands do
ex = H.exercises()  # lab/exercises.py (LAB_SOLUTIONS=1: lab/solutions.py)
print(f"repository {ROOT} | torch {torch.__version__} | {'SMOKE sizes' if SMOKE else 'full lab sizes'} | "
      f"outputs under {H.OUT}")

# %% [markdown]
# ## 1. The trace and its window
#
# `ema.traces_ref` is the definition, a plain loop over time, for S decays at once. Feed it a
# single 1 at t = 0 and the trace at step t is the weight it gives an input t steps back:
# `a (1 - a)^t`. SPEN uses a = 0.5, 0.1, 0.02.

# %%
print(H.impulse_response(H.ALPHAS, T=6))  # rows: t = 0..5 steps back; columns: a = 0.5, 0.1, 0.02

# %% [markdown]
# **Exercise 1** (`effective_window`, ~10 min). How many of the most recent inputs hold 90% of a
# trace's weight? That is its *effective window*: a fast trace (0.5) is a few tokens wide, the
# slowest (0.02) about a hundred. Read the docstring in `lab/exercises.py`, write it, run:

# %%
ex = H.exercises()
if check("effective_window", ex.effective_window):
    windows = [ex.effective_window(a) for a in H.ALPHAS]
    print({a: w for a, w in zip(H.ALPHAS, windows)}, "inputs hold 90% of each trace's weight")
else:
    windows = None
H.plot_impulse(H.ALPHAS, T=150, windows=windows);

# %% [markdown]
# ## 2. Two pasts, one state
#
# After T inputs, one channel's S traces are `V @ x` with `V = ema.trace_map(alphas, T)`, an
# S x T matrix. Its rank is at most S, so for T > S it has a null space: different pasts map to
# the same state, and nothing that reads only the state can tell them apart.

# %%
V = ema.trace_map(H.ALPHAS, 6)
print(V)
print("rank", int(torch.linalg.matrix_rank(V)), "of", V.shape[1], "inputs")

# %% [markdown]
# **Exercise 2** (`same_state`, ~15 min). Construct a second past with exactly the same state.

# %%
ex = H.exercises()
if check("same_state", ex.same_state):
    x = torch.randn(24, dtype=torch.float64)
    x2 = ex.same_state(H.ALPHAS, x)
    print("the two pasts differ by", float((x2 - x).norm()), "; final states:")
    print(torch.stack([ema.trace_map(H.ALPHAS, 24) @ x, ema.trace_map(H.ALPHAS, 24) @ x2]))

# %% [markdown]
# With tokens the same happens in float32 without any construction: two sequences that differ in
# their first token only. Each trace shrinks the difference by (1 - a) per step, until rounding
# makes the two states bit-for-bit equal. From then on the first token is gone from that trace.

# %%
r = H.two_pasts(H.ALPHAS, T=60 if SMOKE else 3000)
for a, t in r["first_equal"].items():
    print(f"a = {a}: the two states are identical from step {t} on" if t is not None else
          f"a = {a}: still different after {r['T']} steps")
print("largest difference of the final states:", r["final_gap"])

# %% [markdown]
# ## 3. Structure survives: the role probe
#
# Two small grammars (`grammar.py`, 147 words, 20 roles) and SPCN (`spcn.py`), a Hebbian column
# network whose only context is multi-timescale traces. A linear probe reads each word's role from
# the network's activity alone (*instantaneous*) or from activity plus its traces. The quick run
# below (`python probe.py --quick`, about a minute) ends with a verdict line; the full run
# (3 seeds) gives 0.527 -> 0.998.

# %%
res_probe = probe.main(H.probe_config())

# %% [markdown]
# **Exercise 3** (`probe_accuracy`, ~15 min). Write a linear probe (ridge regression onto one-hot
# labels), then use it on an SPCN's features: does your probe see the same lift?

# %%
ex = H.exercises()
if check("probe_accuracy", ex.probe_accuracy):
    F = H.probe_features()
    (y_train, y_test) = F["y"]
    for kind in ("instantaneous", "traces"):
        X_train, X_test = F[kind]
        print(f"{kind:14s} {X_train.shape[1]:5d} features: role accuracy "
              f"{ex.probe_accuracy(X_train, y_train, X_test, y_test):.3f}")

# %% [markdown]
# ## 4. Content dies: multi-query associative recall (MQAR)
#
# A sequence lists N key-value pairs, then asks each key once; the answer is the value that sat
# next to it. Below, `k` are keys, `v` values, `?(v..)` the answer due at a query, `.` a blank.

# %%
print(H.show_mqar(N=4, T=16))

# %% [markdown]
# **Exercise 4** (`mqar_sequence`, ~15 min). Build one such sequence from its keys, values and
# query positions; the check compares yours with `recall.mqar`'s.

# %%
ex = H.exercises()
check("mqar_sequence", ex.mqar_sequence);

# %% [markdown]
# Now the experiment (`python recall.py --quick`, about 3 minutes on 2 cores): GPT, softmax
# attention over the trace *history* (`softmax_history`), the paper's linear reader of the trace
# *state* (`linear`) and softmax attention over the state (`softmax_state`), one recipe for all.

# %%
res_recall = recall.main(H.recall_config())

# %% [markdown]
# **Exercise 5** (`binding` and `recalled_pairs`, ~10 min). An accuracy of 1/N is what a reader
# scores that knows *which* values occurred but not which key each belongs to. Score how far
# above that each reader is, and how many pairs that is worth. `softmax_state` keeps
# S x C = 192 numbers, room for about 1.5 pairs of C = 64 wide keys and values: what does it hold?
# (The full run, 1,500 steps: 0.511 at N = 4 and 0.203 at N = 8, about one pair and 0.6 of one.)

# %%
ex = H.exercises()
if check("binding", ex.binding) & check("recalled_pairs", ex.recalled_pairs):
    print(H.recall_table(res_recall, ex.binding, ex.recalled_pairs))
print(recall.verdict(res_recall)[0])

# %% [markdown]
# ## 5. Bytes: a loss, its yardsticks, a sample
#
# On text read as bytes (vocabulary 256) a small model learns fast on a CPU. A loss in nats per
# byte means little alone, so it is read against yardsticks on the same validation bytes:
# count models fit on the training split (unigram, bigram, trigram), and general-purpose
# compressors that nobody tuned (zlib, bz2, lzma), which see the whole validation split as their
# context and pay for what they learn inside their own output.
#
# **Exercise 6** (`compressor_nats_per_byte`, ~10 min).

# %%
ex = H.exercises()
train_bytes, val_bytes = H.byte_data()
y = H.yardsticks()
print("yardsticks (nats/byte):", {k: round(v, 3) for k, v in y.items()})
if check("compressor_nats_per_byte", ex.compressor_nats_per_byte):
    print("yours on the val bytes:", {k: round(v, 3) for k, v in
                                      ex.compressor_nats_per_byte(ngram.as_bytes(val_bytes)).items()})

# %% [markdown]
# Train a 4 x 128 SPEN on the bytes (`train.py --preset cpu_bytes`, a third of its steps: 3 to 5
# minutes). Where does it end against the yardsticks? After 500 steps expect about 1.67 nats/byte
# (below zlib, not yet bz2); the full preset (1,500 steps, 7.8 min) reaches 1.42, below all three.

# %%
run = H.train_bytes()
print(f"val loss {run['val_loss']:.3f} nats/byte after {run['step']} steps ({run['seconds']:.0f} s) | bigram "
      f"{y['bigram']:.3f}, trigram {y['trigram']:.3f}, zlib {y['zlib']:.3f}, bz2 {y['bz2']:.3f}, lzma {y['lzma']:.3f}")

# %% [markdown]
# Where the loss goes: bytes that an in-context copy predicts (the byte and the 8 before it
# occurred earlier in the window) against all the others. Content lives in the copies; a reader
# of the trace state can only learn them as statistics, not look them up.

# %%
s = H.loss_split(run["ckpt"])
print(H.split_line(s))
text = H.generate(run["ckpt"], start="The list")  # sample.py prints the sample and the size of SPEN's state

# %% [markdown]
# ## What you saw, and where to go next
#
# - The traces keep structure: a linear probe of activity plus traces labels roles far better
#   than activity alone (section 3), with no learning needed for it (the untrained SPCN).
# - The state forgets content: S traces are a rank-S map of the past (section 2), so a reader of
#   the state binds at most about S/2 pairs (section 4), while readers of the whole history, and
#   GPT, recall every pair.
# - The full runs behind every committed number: `python probe.py` (3 seeds), `python recall.py`
#   (7 variants), `python train.py --preset cpu_bytes`, `python ablate.py --preset cpu_bytes`; their
#   READMEs under `results/` hold the numbers, hardware and times.

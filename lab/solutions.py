"""Answers to exercises.py, one function each (same names, same contracts). For instructors, and
for students once they have tried: `LAB_SOLUTIONS=1` makes the notebook use these."""
import bz2
import lzma
import math
import zlib

import torch

import ema  # the repository root is on sys.path (the notebook's first cell, or tests/conftest.py)


def effective_window(alpha, mass=0.9):
    if not (0 < alpha <= 1 and 0 < mass < 1):
        raise ValueError(f"need 0 < alpha <= 1 and 0 < mass < 1, got alpha={alpha}, mass={mass}")
    # the k most recent inputs carry 1 - (1 - a)^k of the weight: k = log(1 - mass) / log(1 - a)
    # rounded up (log1p: exact for a tiny a, where a loop would take ~2.3 / a steps), then moved
    # one step if the sum a loop would test disagrees: rounding at a boundary is off by one at most
    carried = lambda k: 1 - math.exp(k * math.log1p(-alpha)) if alpha < 1 else 1.0
    k = 1 if alpha == 1 else max(1, math.ceil(math.log1p(-mass) / math.log1p(-alpha)))
    if carried(k) < mass - 1e-12:
        return k + 1
    return k - 1 if k > 1 and carried(k - 1) >= mass - 1e-12 else k


def same_state(alphas, x):
    T, S = len(x), len(alphas)
    if T <= S:
        raise ValueError(f"T = {T} inputs and S = {S} decays: V is one-to-one, no second past exists")
    V = ema.trace_map(alphas, T)  # (S, T), rank S < T
    null = torch.linalg.svd(V, full_matrices=True).Vh[-1]  # (T,) a unit vector V maps to 0
    return x.double() + null


def probe_accuracy(X_train, y_train, X_test, y_test, l2=1e-3):
    mu, sd = X_train.mean(0), X_train.std(0) + 1e-3
    z = lambda X: torch.cat([(X - mu) / sd, torch.ones(len(X), 1)], 1).double()
    Z, R = z(X_train), int(max(y_train.max(), y_test.max())) + 1
    Y = torch.nn.functional.one_hot(y_train.long(), R).double()  # (N, R)
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ Y)
    return (z(X_test) @ W).argmax(1).eq(y_test).double().mean().item()


def mqar_sequence(keys, values, slots, T, blank):
    N = len(keys)
    if len(set(slots.tolist())) != N or slots.min() < 2 * N or slots.max() >= T:
        raise ValueError(f"slots must be {N} distinct positions in [{2 * N}, {T}), got {slots.tolist()}")
    idx = torch.full((T,), blank, dtype=torch.long)
    idx[0:2 * N:2], idx[1:2 * N:2] = keys, values
    idx[slots] = keys
    targets = torch.full((T,), -1, dtype=torch.long)
    targets[slots] = values
    return idx, targets


def binding(acc, N):
    if N < 2:
        raise ValueError(f"binding needs N >= 2 pairs (at N = 1 every reader is right), got {N}")
    return (acc - 1 / N) / (1 - 1 / N)


def recalled_pairs(acc, N):
    if N < 2:
        raise ValueError(f"recalled_pairs needs N >= 2 pairs, got {N}")
    return N * acc - 1  # acc = (r + 1) / N; also binding(acc, N) * (N - 1)


ANSWER_5C = """softmax_state reads h_{t-1}: S vectors of C numbers, each the additive EMA sum_j a_s (1 - a_s)^(t-1-j) u_j
of every past input. Keys and values were added into the same C numbers before any query was known,
so which value followed which key survives only in the ages of the two tokens; softmax over the S
slots picks an age profile, not a key, so the reader learns which values occurred (1/N) and at best
the last pair or two. More decays add more age profiles of the same sums, not a binding: at S = 24 = T
the map of section 2 is even invertible, and still softmax_state answers 0.211, 0.168, 0.154, 0.166 at
N = 8 for S = 3, 6, 12, 24 (results/frontier). Room is not what it lacks either: 192 float32 numbers are
6,144 bits against the 48 that 8 pairs of 64 values need. The write is what is short (section 5)."""


def ema_kv_step(q, k, v, M, alphas):
    a = torch.tensor(alphas, dtype=M.dtype).view(-1, 1, 1)  # (S, 1, 1)
    y = (M.transpose(-1, -2) @ q).sum(0)  # (D,) read M_{t-1} first: sum_s M[s]^T q
    return y, (1 - a) * M + a * torch.outer(k, v)  # then decay and write k v^T


def delta_step(q, k, v, beta, M):
    y = M @ q  # (D,) read M_{t-1} first
    return y, M + beta * torch.outer(v - M @ k, k)  # then correct what M holds at k toward v


def compressor_nats_per_byte(data):
    if not data:
        raise ValueError("no data: a compression ratio needs at least one byte")
    sizes = dict(zlib=len(zlib.compress(data, 9)), bz2=len(bz2.compress(data, 9)),
                 lzma=len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)))
    return {k: 8 * math.log(2) * c / len(data) for k, c in sizes.items()}


def seed_verdict(a, b, paired, alpha=0.01):
    import scipy.stats
    a, b = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    if min(len(a), len(b)) < 2 or paired and len(a) != len(b):
        raise ValueError(f"a verdict needs 2+ seeds a side (paired: as many), got {len(a)} and {len(b)}")
    if paired:
        se, test = float((a - b).std() / len(a) ** 0.5), scipy.stats.ttest_rel(a, b)
    else:
        se, test = float((a.var() / len(a) + b.var() / len(b)) ** 0.5), scipy.stats.ttest_ind(a, b, equal_var=False)
    # the two-sided p says whether there is a gap at alpha, the sign of the difference which way
    verdict = ("below" if a.mean() < b.mean() else "above") if test.pvalue < alpha else "tie"
    return float(a.mean() - b.mean()), se, verdict

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
    # the k most recent inputs carry 1 - (1 - a)^k of the weight; count rather than take
    # ceil(log(1 - mass) / log(1 - a)), which rounding can push one step too far at a boundary
    k, left = 1, 1 - alpha  # left: the weight beyond the k most recent inputs, (1 - a)^k
    while 1 - left < mass - 1e-12:
        k, left = k + 1, left * (1 - alpha)
    return k


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


def compressor_nats_per_byte(data):
    if not data:
        raise ValueError("no data: a compression ratio needs at least one byte")
    sizes = dict(zlib=len(zlib.compress(data, 9)), bz2=len(bz2.compress(data, 9)),
                 lzma=len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)))
    return {k: 8 * math.log(2) * c / len(data) for k, c in sizes.items()}

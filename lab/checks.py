"""One check per exercise of exercises.py. Each tests a property that a wrong answer fails (not
only shapes), against the repository's own code where it has one (ema.traces_ref, ema.trace_map,
recall.mqar, recall.binding, writes.ema_kv_step and ema_kv_ref, writes.delta_rule_step and
delta_rule_ref), or else against the docstring's formula on a fixed data set. Where a wrong
answer is a known mistake (WRONG_ANSWERS below: an l2 ignored, a state read after its write, ...)
the message names it. tests/test_lab.py holds every check to failing on the stub and on each of
those mistakes, and passing on solutions.py.

    check("effective_window", my_function)   # prints one line: passed, or what is wrong; returns True/False

Every call of the student's function runs under a time limit (LIMIT_S seconds; on a platform
without SIGALRM, or off the main thread, without one): a hang is one line naming the call, as a
crash is (`effective_window(1.0, 0.5) raised ValueError: ...`).

Autograding, outside the notebook (every exercise of a student's file, one line each, exit status
0 only when all pass):

    python -m lab.checks                      # lab/exercises.py
    python -m lab.checks FILE                 # a student's copy of exercises.py

LAB_STRICT=1 makes a failed check raise (CI executes the notebook so, with the solutions).
"""
from plumbing import cli  # first and cheap (no torch): a Ctrl-C is one line (exit_on_ctrl_c: grading writes nothing)
cli.exit_on_ctrl_c(__name__, "lab.checks")
import bz2
import importlib.util
import lzma
import math
import os
import random
import signal
import sys
import threading
import zlib

import torch

import ema
import recall
import writes

LIMIT_S = 10.0  # per call of the student's function: the solutions take milliseconds, a loaded CPU 100x that


def _close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(b))


class Crashed(Exception):
    """The student's function raised: the message names the call, the cause is the exception."""


class TimedOut(BaseException):
    """The student's function ran past LIMIT_S (a BaseException: a student's `except Exception`
    cannot swallow it)."""


def _brief(x):
    """An argument as a message shows it: a tensor of up to 8 elements in full, a larger one and
    bytes by their size only."""
    if isinstance(x, torch.Tensor):
        return f"tensor({x.tolist()})" if x.numel() <= 8 else f"<tensor {tuple(x.shape)}>"
    return f"<{len(x):,} bytes>" if isinstance(x, bytes) else repr(x)


def _limited(call, seconds):
    """call() under a wall-clock limit (SIGALRM): TimedOut past it."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return call()  # Windows, or a worker thread: no alarm to set

    def expire(signum, frame):
        raise TimedOut()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return call()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _named(fn, name):
    """fn, run under LIMIT_S, with any exception but NotImplementedError (the stub) re-raised as
    Crashed naming the call, and a hang as Crashed too."""
    def call(*args):
        said = f"{name}({', '.join(map(_brief, args))})"
        try:
            return _limited(lambda: fn(*args), LIMIT_S)
        except NotImplementedError:
            raise
        except TimedOut:
            raise Crashed(f"{said} did not return within {LIMIT_S:g} s (stopped): a loop that never ends for "
                          "these arguments? (check the arguments before looping)") from None
        except Exception as e:
            raise Crashed(f"{said} raised {type(e).__name__}: {' '.join(str(e).split())}") from e
    return call


def _raises(fn, *args):
    """Whether fn(*args) refuses with ValueError (as the docstrings ask of a bad argument)."""
    try:
        fn(*args)
    except ValueError:
        return True
    except Crashed as e:
        if isinstance(e.__cause__, ValueError):
            return True
        if "did not return" in str(e):
            raise Crashed(f"{str(e).split(' did not')[0]} should raise ValueError (a bad argument) but did not "
                          f"return within {LIMIT_S:g} s: check the arguments first") from None
        raise
    return False


def _diagnose(got, want, mistakes, tol=1e-9):
    """The message of the first known mistake whose value `got` matches (None if got == want or
    none matches). mistakes: [(message, value)]."""
    same = lambda a, b: torch.is_tensor(a) and a.shape == b.shape and torch.allclose(a.double(), b.double(),
                                                                                      rtol=tol, atol=tol)
    if same(got, want):
        return None
    return next((message for message, value in mistakes if same(got, value)), None)


# ---- 1, 2: the trace ---------------------------------------------------------------------------


def check_effective_window(fn):
    for a in (0.5, 0.1, 0.02, 0.3, 1.0):
        # the impulse response from the definition: h_t after a single 1 at t = 0 is a (1 - a)^t
        T = 400  # enough for the slowest: 0.99 of a = 0.02's weight lies in its 228 most recent inputs
        x = torch.zeros(1, T, 1, dtype=torch.float64)
        x[0, 0, 0] = 1.0
        w = ema.traces_ref(x, (a,))[0, :, 0, 0]  # (T,) the weight of the input t steps back
        cum = w.cumsum(0)
        for mass in (0.5, 0.75, 0.9, 0.99):
            want = int((cum >= mass - 1e-12).nonzero()[0]) + 1
            got = fn(a, mass)
            assert isinstance(got, int) or (hasattr(got, "__index__") and not isinstance(got, bool)), \
                f"effective_window({a}, {mass}) should be an int, got {got!r}"
            assert got != want - 1, f"effective_window({a}, {mass}) = {got}: one short (rounded down?): the " \
                                    f"{got} most recent inputs carry less than {mass}; the fewest that carry it are {want}"
            assert got == want, f"effective_window({a}, {mass}) = {got}, but the {want} most recent inputs are the " \
                                f"fewest that carry {mass} of the weight"
    assert fn(0.1) == fn(0.1, 0.9), "mass defaults to 0.9"
    for bad in ((0.0, 0.9), (1.5, 0.9), (0.1, 1.0), (0.1, 0.0)):
        assert _raises(fn, *bad), f"effective_window{bad} should raise ValueError"


def check_same_state(fn):
    g = torch.Generator().manual_seed(0)
    for alphas, T in (((0.5, 0.1, 0.02), 4), ((0.5, 0.1, 0.02), 24), ((0.3,), 2), (ema.spread_decays(5), 40)):
        x = torch.randn(T, generator=g, dtype=torch.float64)
        x2 = fn(alphas, x.clone())
        assert isinstance(x2, torch.Tensor) and x2.shape == (T,), f"same_state should return a tensor of shape ({T},)"
        x2 = x2.double()
        assert _close(float((x2 - x).norm()), 1.0, 1e-6), f"||x2 - x|| should be 1, got {float((x2 - x).norm()):.4g}"
        h = ema.traces_ref(torch.stack([x, x2])[:, :, None], alphas)[:, -1, :, 0]  # (2, S) the final states
        assert torch.allclose(h[0], h[1], rtol=0, atol=1e-10), \
            f"the final states differ by {float((h[0] - h[1]).abs().max()):.3g} (alphas {alphas}, T = {T}): " \
            "x2 - x must lie in the null space of ema.trace_map(alphas, T)"
    assert _raises(fn, (0.5, 0.1, 0.02), torch.randn(3, dtype=torch.float64)), \
        "T <= S: V is one-to-one, same_state should raise ValueError"


# ---- 3: the probe -----------------------------------------------------------------------------------


def _blobs(n, F, R, g, informative=True):
    """n rows of F Gaussian features; labels = argmax of a random linear map (or random labels)."""
    X = torch.randn(n, F, generator=g) * torch.logspace(-2, 2, F)  # scales from 0.01 to 100
    if not informative:
        return X, torch.randint(R, (n,), generator=g)
    A = torch.randn(F, R, generator=g) / torch.logspace(-2, 2, F)[:, None]
    return X, (X @ A).argmax(1)


def ridge_probe(X_train, y_train, X_test, y_test, l2=1e-3, *, standardise="train", intercept=True,
                ridge="l2 N I", fit_on="train", std_eps=1e-3):
    """The docstring's probe, and (through the keywords) each mistake that the check names:
    standardise 'train' (the docstring), 'none', 'own' (each split with its own statistics), 'all'
    (train and test rows together); ridge 'l2 N I' (the docstring), 'l2 I', 'none' (plain least
    squares, pinv), 'default' (l2 ignored: always 1e-3), 'unpenalised intercept'; fit_on 'test'."""
    Xtr, Xte = X_train.double(), X_test.double()
    if fit_on == "test":
        Xtr, y_train = Xte, y_test
    stats = {"train": Xtr, "all": torch.cat([Xtr, Xte])}.get(standardise)
    if standardise == "none":
        scale = lambda X: X
    elif standardise == "own":
        scale = lambda X: (X - X.mean(0)) / (X.std(0) + std_eps)
    else:
        mu, sd = stats.mean(0), stats.std(0) + std_eps
        scale = lambda X: (X - mu) / sd
    z = (lambda X: torch.cat([scale(X), torch.ones(len(X), 1, dtype=X.dtype)], 1)) if intercept else scale
    Z, R = z(Xtr), int(max(y_train.max(), y_test.max())) + 1
    Y = torch.nn.functional.one_hot(y_train.long(), R).to(Z.dtype)  # (N, R)
    eye = torch.eye(Z.shape[1], dtype=Z.dtype)
    if ridge == "unpenalised intercept":
        eye[-1, -1] = 0
    if ridge == "none":
        W = torch.linalg.pinv(Z) @ Y
    else:
        lam = {"l2 I": l2, "default": 1e-3 * len(Z)}.get(ridge, l2 * len(Z))
        W = torch.linalg.solve(Z.T @ Z + lam * eye, Z.T @ Y)
    return (z(Xte) @ W).argmax(1).eq(y_test).double().mean().item()


def _correlated(n_train=100, n_test=1000, F=60, R=3, rank=6, seed=0):
    """The fixed data set of the probe's fingerprint, built so that each mistake scores differently:
    few training rows for many correlated features (60 features of 6 hidden factors plus noise:
    without the ridge, or with one N times too weak, the probe overfits, as on SPCN's trace
    features), features far from 0 in unequal units (standardising and the intercept matter),
    unequal classes, and test rows shifted against the training rows (statistics taken from the
    test rows move them)."""
    g, D = torch.Generator().manual_seed(seed), torch.float64
    mix = torch.randn(rank, F, generator=g, dtype=D)  # (rank, F) the features' hidden factors
    read = torch.randn(rank, R, generator=torch.Generator().manual_seed(1), dtype=D)
    prior = torch.tensor([1.0, 0.0, -0.7], dtype=D)[:R]
    units = torch.logspace(-1, 1, F, dtype=D)
    rows = []
    for n, shift in ((n_train, 0.0), (n_test, torch.linspace(-0.5, 1.0, F, dtype=D) * units)):
        h = torch.randn(n, rank, generator=g, dtype=D)
        X = (h @ mix + 0.3 * torch.randn(n, F, generator=g, dtype=D)) * units + 5 + shift
        rows += [X, (h @ read + prior + torch.randn(n, R, generator=g, dtype=D)).argmax(1)]
    return rows


PROBE_L2 = (1e-3, 0.03, 1.0)  # the fingerprint's settings: the default, and two where the ridge decides
PROBE_MISTAKES = (  # (keywords of ridge_probe, what the message says): the first that matches is named
    (dict(fit_on="test"), "it matches a probe fit on the test rows: fit W on X_train, y_train only"),
    (dict(ridge="none"), "it matches plain least squares (no ridge): add l2 N I to Z^T Z; without it the probe "
                         "overfits correlated features (on SPCN's traces it scores below activity alone)"),
    (dict(ridge="default"), "it matches a probe that ignores its l2 argument (always 1e-3): use the l2 passed in"),
    (dict(ridge="l2 I"), "it matches l2 I in place of l2 N I: scale the ridge by N, the number of training rows"),
    (dict(ridge="unpenalised intercept"), "it matches a ridge that leaves the constant column out: the docstring's "
                                          "l2 N I penalises every column of Z, the constant 1 too"),
    (dict(intercept=False), "it matches a probe without an intercept: append a constant 1 to the standardised "
                            "features"),
    (dict(standardise="none"), "it matches a probe on raw units: standardise with the training mean and std"),
    (dict(standardise="own"), "it matches test rows standardised with their own mean and std: use the "
                              "training rows' statistics for both splits"),
    (dict(standardise="all"), "it matches statistics taken over the training and test rows together: use the "
                              "training rows' only"),
)


def check_probe_accuracy(fn):
    g = torch.Generator().manual_seed(0)
    X, y = _blobs(3000, 20, 4, g)
    acc = fn(X[:2000], y[:2000], X[2000:], y[2000:])
    assert isinstance(acc, float) and 0 <= acc <= 1, f"probe_accuracy should return a float in [0, 1], got {acc!r}"
    # the fingerprint: the accuracy at each l2 against the docstring's probe and each known mistake's,
    # to 5 rows of 1,000 (the population std, float32 or lstsq change 0-2 rows; a mistake 12 or more)
    data, tol = _correlated(), 0.005
    got = [fn(*data, l2) for l2 in PROBE_L2]
    want = [ridge_probe(*data, l2) for l2 in PROBE_L2]
    if not all(abs(a - b) <= tol for a, b in zip(got, want)):
        for keywords, message in PROBE_MISTAKES:
            if all(abs(a - ridge_probe(*data, l2, **keywords)) <= tol for a, l2 in zip(got, PROBE_L2)):
                raise AssertionError(f"probe_accuracy: {message}")
        l2, a, b = next((l2, a, b) for l2, a, b in zip(PROBE_L2, got, want) if abs(a - b) > tol)
        raise AssertionError(f"on a fixed data set (100 training rows, 60 correlated features) at l2 = {l2} the "
                             f"probe of the docstring scores {b:.3f}, yours {a:.3f}: standardise with the training "
                             "rows' mean and std (+ 1e-3), append a constant 1, and solve with l2 N I")
    assert acc >= 0.85, f"labels that a linear map of the features decides: the probe reads {acc:.3f} of them, " \
                        "expected >= 0.85"
    X, y = _blobs(500, 60, 4, g, informative=False)
    acc = fn(X[:300], y[:300], X[300:], y[300:])
    assert acc <= 0.25 + 0.12, f"random labels: a probe fit on the training rows only scores near chance 0.25 " \
                               f"on test, got {acc:.3f} (is it fit on the test rows?)"


# ---- 4, 5: MQAR --------------------------------------------------------------------------------------


def check_mqar_sequence(fn):
    K, M, T = 8, 16, 40
    blank = K + M
    for N, span in ((1, 0), (4, 4), (8, 0), (8, 8)):
        idx, targets, _ = recall.mqar(16, N, T, K, M, torch.Generator().manual_seed(N + span), span)
        for b in range(len(idx)):
            keys, values = idx[b, 0:2 * N:2], idx[b, 1:2 * N:2]
            asked = (targets[b] >= 0).nonzero()[:, 0]  # query positions, in position order
            slots = torch.empty(N, dtype=torch.long)
            for p in asked.tolist():  # which pair each query asks
                slots[(keys == idx[b, p]).nonzero()[0, 0]] = p
            got = fn(keys, values, slots, T, blank)
            assert len(got) == 2, "mqar_sequence returns (idx, targets)"
            gi, gt = (torch.as_tensor(t) for t in got)
            assert gi.shape == gt.shape == (T,), f"idx and targets should have shape ({T},)"
            swapped = idx[b].clone()
            swapped[0:2 * N:2], swapped[1:2 * N:2] = values, keys
            assert torch.equal(swapped, idx[b]) or not torch.equal(gi.long(), swapped), \
                f"N = {N}: the pairs are written value first: key i at position 2i, its value at 2i + 1"
            assert torch.equal(gi.long(), idx[b]), f"N = {N}: idx differs from recall.mqar's at positions " \
                                                   f"{(gi != idx[b]).nonzero()[:, 0].tolist()}"
            assert torch.equal(gt.long(), targets[b]), f"N = {N}: targets differ from recall.mqar's at positions " \
                                                       f"{(gt != targets[b]).nonzero()[:, 0].tolist()}"
    keys, values = torch.tensor([0, 1]), torch.tensor([8, 9])
    for bad in ((3, 5), (4, 4), (4, 40)):
        assert _raises(fn, keys, values, torch.tensor(bad), T, blank), \
            f"slots {bad} should raise ValueError (N = 2, T = {T})"


def check_binding(fn):
    for N in (2, 4, 8, 16):
        assert _close(fn(1 / N, N), 0.0), f"binding(1/N, N) should be 0 (N = {N}), got {fn(1 / N, N)}"
        assert _close(fn(1.0, N), 1.0), f"binding(1, N) should be 1 (N = {N}), got {fn(1.0, N)}: rescale by 1 - 1/N"
        for acc in (0.0, 0.203, 0.5, 0.9):
            assert _close(fn(acc, N), recall.binding(acc, N)), f"binding({acc}, {N}) = {fn(acc, N)}: linear in acc, " \
                                                                 f"0 at 1/N and 1 at 1"
    assert _raises(fn, 1.0, 1), "binding at N = 1 should raise ValueError"


def check_recalled_pairs(fn):
    got = fn(0.3, 8)  # r = 8 x 0.3 - 1 = 1.4: an average over sequences, not a whole number
    got = float(got) if isinstance(got, (int, float)) or torch.is_tensor(got) and got.numel() == 1 else got
    assert isinstance(got, float), f"recalled_pairs(0.3, 8) should be a number, got {got!r}"
    assert not _close(got, 2.4), "recalled_pairs(0.3, 8) = 2.4: N acc counts the free guess too: r = N acc - 1"
    assert _close(got, 1.4) or got != round(got), \
        f"recalled_pairs(0.3, 8) = {got:g}: a whole number? r is an average over sequences (1.4 here): do not round"
    assert _close(got, 1.4), f"recalled_pairs(0.3, 8) should be 8 x 0.3 - 1 = 1.4, got {got:g}"
    rng = random.Random(0)
    for N, r in ((8, 0), (8, 2), (4, 1), (16, 5)):
        # simulate the reader of the docstring: r pairs known, the others guessed among the N - r values left
        right = sum(1 if q < r else rng.randrange(N - r) == 0 for _ in range(2000) for q in range(N))
        est = fn(right / (2000 * N), N)
        assert abs(est - r) < 0.15, f"a reader that knows {r} of {N} pairs: recalled_pairs gives {est:.3f}"
        assert _close(fn((r + 1) / N, N), r), f"recalled_pairs((r + 1) / N, N) should be r = {r} (N = {N})"
    assert _raises(fn, 1.0, 1), "recalled_pairs at N = 1 should raise ValueError"


# ---- 6: the write --------------------------------------------------------------------------------------


def _pair(out, name, shapes):
    """The student's (y, M_new), its shapes checked; the message says what came back instead."""
    y_shape, m_shape = shapes
    assert isinstance(out, (tuple, list)) and len(out) == 2, f"{name} returns a pair (y, M_new), got {type(out).__name__}"
    y, M = out
    assert torch.is_tensor(y) and torch.is_tensor(M), f"{name} returns two tensors (y, M_new)"
    assert not (tuple(y.shape) == m_shape and tuple(M.shape) == y_shape), \
        f"{name} returns (M_new, y): return the read first, (y, M_new)"
    assert tuple(y.shape) == y_shape and tuple(M.shape) == m_shape, \
        f"{name}: y should have shape {y_shape} and M_new {m_shape}, got {tuple(y.shape)} and {tuple(M.shape)}"
    return y.double(), M.double()


def check_ema_kv_step(fn):
    g = torch.Generator().manual_seed(0)
    D = 4
    for alphas in ((0.5, 0.1, 0.02), (0.3,)):
        S = len(alphas)
        a = torch.tensor(alphas, dtype=torch.float64).view(S, 1, 1)  # (S, 1, 1)
        q, k, v = (torch.randn(D, generator=g, dtype=torch.float64) for _ in range(3))
        M = torch.randn(S, D, D, generator=g, dtype=torch.float64)
        y, M2 = _pair(fn(q, k, v, M.clone(), alphas), "ema_kv_step", ((D,), (S, D, D)))
        want_y, want_M = (t[0, 0] for t in writes.ema_kv_step(q.expand(1, 1, S, D), k[None, None], v[None, None],
                                                                  M[None, None], alphas))
        kv = torch.outer(k, v)  # (D, D) key index first
        read = lambda M: (M.transpose(-1, -2) @ q).sum(0)  # (D,) sum_s M[s]^T q
        said = _diagnose(y, want_y, [
            ("reads the state after writing: y is read from M as it came in (M_{t-1}), then M is written", read(want_M)),
            ("reads M q: the key index comes first (M[s] holds k v^T), so read M[s]^T q", (M @ q).sum(0)),
            ("averages over the decays: y is the sum over s of M[s]^T q", read(M) / S)])
        assert not said, f"ema_kv_step {said}"
        assert torch.allclose(y, want_y, rtol=1e-9, atol=1e-9), \
            f"ema_kv_step (decays {alphas}): y differs from writes.ema_kv_step's read, y = sum_s M[s]^T q"
        said = _diagnose(M2, want_M, [
            ("never decays the state: M[s] <- (1 - a_s) M[s] + a_s k v^T", M + a * kv),
            ("writes v k^T: the key index comes first, write a_s k v^T (torch.outer(k, v))", (1 - a) * M + a * kv.T),
            ("swaps a_s and 1 - a_s: keep (1 - a_s) of the state, write a_s of the pair", a * M + (1 - a) * kv),
            ("writes k v^T without its weight a_s", (1 - a) * M + kv)])
        assert not said, f"ema_kv_step {said}"
        assert torch.allclose(M2, want_M, rtol=1e-9, atol=1e-9), \
            f"ema_kv_step (decays {alphas}): M_new differs from writes.ema_kv_step's, (1 - a_s) M[s] + a_s k v^T"
    # the loop of the steps from the empty state against the repository's (writes.ema_kv_ref)
    alphas, T = (0.5, 0.1, 0.02), 10
    q, k, v = (torch.randn(T, D, generator=g, dtype=torch.float64) for _ in range(3))
    want = writes.ema_kv_ref(q[None, None, None].expand(1, 1, 3, T, D), k[None, None], v[None, None], alphas)[0, 0]
    M, ys = torch.zeros(3, D, D, dtype=torch.float64), []
    for t in range(T):
        y, M = _pair(fn(q[t], k[t], v[t], M, alphas), "ema_kv_step", ((D,), (3, D, D)))
        ys.append(y)
    bad = (torch.stack(ys) - want).abs().amax(1) > 1e-9  # (T,)
    assert not bad.any(), f"ema_kv_step run over {T} tokens from M = 0 differs from writes.ema_kv_ref from " \
                          f"token {int(bad.nonzero()[0])} on (does it change its inputs in place?)"


def check_delta_step(fn):
    g = torch.Generator().manual_seed(1)
    D = 4
    unit = lambda x: x / x.norm()
    for beta in (0.7, 0.25):
        q, k = (unit(torch.randn(D, generator=g, dtype=torch.float64)) for _ in range(2))
        v, M = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, D, generator=g, dtype=torch.float64)
        y, M2 = _pair(fn(q, k, v, beta, M.clone()), "delta_step", ((D,), (D, D)))
        want_y, want_M = (t[0, 0] for t in writes.delta_rule_step(q[None, None], k[None, None], v[None, None],
                                                                      torch.tensor([[beta]], dtype=torch.float64),
                                                                      M[None, None]))
        err = v - M @ k  # (D,) what the state gets wrong at k
        said = _diagnose(y, want_y, [
            ("reads the state after writing: y is read from M as it came in (M_{t-1}), then M is corrected",
             want_M @ q),
            ("reads M^T q: here the value index comes first (M k is the value stored at k), so read M q", M.T @ q)])
        assert not said, f"delta_step {said}"
        assert torch.allclose(y, want_y, rtol=1e-9, atol=1e-9), \
            "delta_step: y differs from writes.delta_rule_step's read, y = M q"
        said = _diagnose(M2, want_M, [
            ("ignores beta: the correction is beta (v - M k) k^T", M + torch.outer(err, k)),
            ("writes k (v - M k)^T: the value index comes first, add beta (v - M k) k^T", M + beta * torch.outer(k, err)),
            ("corrects away from v: the error is v - M k", M - beta * torch.outer(err, k)),
            ("adds beta v k^T without removing what k held: the error is v - M k", M + beta * torch.outer(v, k)),
            ("decays the state: the delta rule has no decay, M + beta (v - M k) k^T", (1 - beta) * M + beta *
             torch.outer(v, k))])
        assert not said, f"delta_step {said}"
        assert torch.allclose(M2, want_M, rtol=1e-9, atol=1e-9), \
            "delta_step: M_new differs from writes.delta_rule_step's, M + beta (v - M k) k^T"
    T = 10
    q, k = (torch.nn.functional.normalize(torch.randn(T, D, generator=g, dtype=torch.float64), dim=1) for _ in range(2))
    v, beta = torch.randn(T, D, generator=g, dtype=torch.float64), torch.rand(T, generator=g, dtype=torch.float64)
    want = writes.delta_rule_ref(q[None, None], k[None, None], v[None, None], beta[None, None])[0, 0]  # (T, D)
    M, ys = torch.zeros(D, D, dtype=torch.float64), []
    for t in range(T):
        y, M = _pair(fn(q[t], k[t], v[t], float(beta[t]), M), "delta_step", ((D,), (D, D)))
        ys.append(y)
    bad = (torch.stack(ys) - want).abs().amax(1) > 1e-9
    assert not bad.any(), f"delta_step run over {T} tokens from M = 0 differs from writes.delta_rule_ref from " \
                          f"token {int(bad.nonzero()[0])} on (does it change its inputs in place?)"


# ---- 7: bytes --------------------------------------------------------------------------------------------


def _text(n):
    """n bytes of real English and code (Python's own pydoc topics): long enough that the
    compressors' settings change their output (zlib 6 vs 9, bz2 1 vs 9, lzma 6 vs 9e)."""
    import pydoc_data.topics
    return "\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)).encode()[:n]


def check_compressor_nats_per_byte(fn):
    for data in (_text(120_000), random.Random(1).randbytes(5000), b"abc" * 1000):
        got = fn(data)
        assert isinstance(got, dict) and set(got) == {"zlib", "bz2", "lzma"}, \
            "compressor_nats_per_byte returns a dict with the keys zlib, bz2, lzma"
        want = dict(zlib=len(zlib.compress(data, 9)), bz2=len(bz2.compress(data, 9)),
                    lzma=len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)))
        for k, c in want.items():
            assert not _close(got[k], 8 * math.log(2) * c / len(data) / 8), \
                f"{k}: {got[k]:.5f} is in bytes, not bits, per byte: multiply by 8 ln 2 for nats"
            assert _close(got[k], 8 * math.log(2) * c / len(data)), \
                f"{k} on {len(data):,} bytes: {got[k]:.5f} nats/byte, expected {8 * math.log(2) * c / len(data):.5f} " \
                "(the strongest setting; 8 ln 2 x compressed / raw)"
    assert _raises(fn, b""), "empty data should raise ValueError"


CHECKS = {"effective_window": check_effective_window, "same_state": check_same_state,
          "probe_accuracy": check_probe_accuracy, "mqar_sequence": check_mqar_sequence, "binding": check_binding,
          "recalled_pairs": check_recalled_pairs, "ema_kv_step": check_ema_kv_step, "delta_step": check_delta_step,
          "compressor_nats_per_byte": check_compressor_nats_per_byte}


def verdict(name, fn):
    """(passed, message) of exercise `name`'s check on fn; message is '' when it passed."""
    if name not in CHECKS:  # the caller's mistake, not the student's code
        return None, f"{name!r} is not one of {', '.join(CHECKS)}"
    try:
        CHECKS[name](_named(fn, name))
    except NotImplementedError:
        return False, "not written yet (the stub raises NotImplementedError)"
    except AssertionError as e:
        return False, " ".join((str(e) or "a check failed").split())
    except Crashed as e:  # the student's code crashed or hung: the call and the error, in one line
        return False, str(e)
    return True, ""


def check(name, fn):
    """Run the check of exercise `name` on fn; print one line and return whether it passed
    (raise AssertionError instead of returning False when LAB_STRICT=1)."""
    passed, message = verdict(name, fn)
    if passed:
        print(f"[pass] {name}")
        return True
    print(f"[{'no such exercise' if passed is None else 'not yet'}] {name}: {message}")
    if os.environ.get("LAB_STRICT") == "1":
        raise AssertionError(f"{name}: {message}")
    return False


def grade(path):
    """Every check on the functions of the file at `path` (a student's exercises.py), one line
    each, and the written answer's length -> the number of exercises that did not pass."""
    spec = importlib.util.spec_from_file_location("student_exercises", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # a syntax error or an import that fails: the whole file, one line
        print(f"[not yet] {path}: the file does not import: {type(e).__name__}: {' '.join(str(e).split())}")
        return len(CHECKS)
    failed = 0
    for name in CHECKS:
        fn = getattr(module, name, None)
        passed, message = verdict(name, fn) if callable(fn) else (False, "missing from the file")
        failed += not passed
        print(f"[pass] {name}" if passed else f"[FAIL] {name}: {message}")
    answer = " ".join(str(getattr(module, "ANSWER_5C", "")).split())
    words = len(answer.split())
    stub = answer.startswith("Exercise 5c (written")
    print(f"[read] ANSWER_5C: {'the stub, not written yet' if stub or not words else f'{words} words'} "
          "(graded by hand: lab/INSTRUCTOR.md has the rubric)")
    print(f"{len(CHECKS) - failed} of {len(CHECKS)} exercises pass")
    return failed


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if len(sys.argv) > 2 or sys.argv[1:] and sys.argv[1].startswith("-"):
        print("usage: python -m lab.checks [path/to/exercises.py]", file=sys.stderr)
        sys.exit(2)
    target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "lab", "exercises.py")
    if not os.path.isfile(target):
        print(f"error: {target} is not a file", file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if grade(target) else 0)

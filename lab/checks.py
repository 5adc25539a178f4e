"""One check per exercise of exercises.py. Each tests a property that a wrong answer fails (not
only shapes), against the definition of the trace (ema.traces_ref, ema.trace_map), stored answers
(expected.json: the probe, MQAR's sequences, binding and the write steps, computed from the
repository's reference implementations, which the checks never call) or the standard library and
scipy (the compressors; the seeds' verdict, lab/ttests.py). A known mistake is named in its message.

    check("effective_window", my_function)   # prints one line: passed, or what is wrong; returns True/False

Every call of the student's function runs under LIMIT_S (SIGALRM; main thread only): a hang is
one line naming the call, as a crash is (`effective_window(1.0, 0.5) raised ValueError: ...`).
Autograding is lab/grader.py's: `python -m lab.grader [FILE] [--json out.json]` (one line per
exercise, exit status 0 only when all pass); `python -m lab.checks ...`, its command in older
notes, hands over to it with one line on stderr saying so. LAB_STRICT=1 makes a failed check raise.
"""
import os
import signal
import sys

if __name__ == "__main__":  # the old command: hand over before torch's import (the grader makes its own)
    print("lab.checks: the autograder is now python -m lab.grader (run as such)", file=sys.stderr, flush=True)
    # exec, not a child: a Ctrl-C, the exit status and a timeout's kill reach the grader itself; a Ctrl-C while
    # the new interpreter starts is held (the mask survives exec) until lab.grader's exit_on_ctrl_c lifts it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    os.execv(sys.executable, [sys.executable, "-m", "lab.grader", *sys.argv[1:]])

import bz2  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import threading  # noqa: E402
import zlib  # noqa: E402

import torch  # noqa: E402

import ema  # noqa: E402
from lab import ttests  # noqa: E402

LIMIT_S = 10.0  # per call of the student's function: a right answer takes milliseconds, a loaded CPU 100x that
_close = lambda a, b, tol=1e-9: abs(a - b) <= tol * max(1.0, abs(b))  # noqa: E731 (to tol, relative past 1)


class Crashed(Exception):
    """The student's function raised: the message names the call, the cause is the exception."""


class TimedOut(BaseException):
    """The student's function ran past LIMIT_S (a BaseException: `except Exception` cannot swallow it)."""


def _brief(x):
    """An argument as a message shows it: a tensor of up to 8 elements in full, more, or bytes, by size."""
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


def check_effective_window(fn, stored=None):
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
            assert got != want + 1, f"effective_window({a}, {mass}) = {got}: one too many (rounded up past an " \
                                    f"exact boundary?): the {want} most recent inputs already carry {mass}"
            assert got == want, f"effective_window({a}, {mass}) = {got}, but the {want} most recent inputs are the " \
                                f"fewest that carry {mass} of the weight"
    assert fn(0.1) == fn(0.1, 0.9), "mass defaults to 0.9"
    for bad in ((0.0, 0.9), (1.5, 0.9), (0.1, 1.0), (0.1, 0.0)):
        assert _raises(fn, *bad), f"effective_window{bad} should raise ValueError"


def check_same_state(fn, stored=None):
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
    assert _raises(fn, (0.5, 0.1, 0.02), torch.randn(3, generator=g, dtype=torch.float64)), \
        "T <= S: V is one-to-one, same_state should raise ValueError"


# ---- 3: the probe -----------------------------------------------------------------------------------


def _blobs(n, F, R, g, informative=True):
    """n rows of F Gaussian features; labels = argmax of a random linear map (or random labels)."""
    X = torch.randn(n, F, generator=g) * torch.logspace(-2, 2, F)  # scales from 0.01 to 100
    if not informative:
        return X, torch.randint(R, (n,), generator=g)
    A = torch.randn(F, R, generator=g) / torch.logspace(-2, 2, F)[:, None]
    return X, (X @ A).argmax(1)


def _correlated(n_train=100, n_test=1000, F=60, R=3, rank=6, seed=0, constant=0):
    """The fixed data set of the probe's fingerprint, built so that each mistake scores differently:
    few training rows for many correlated features (60 features of 6 hidden factors plus noise:
    without the ridge, or with one N times too weak, the probe overfits, as on SPCN's trace
    features), features far from 0 in unequal units (standardising and the intercept matter),
    unequal classes, test rows shifted against the training rows (statistics taken from the
    test rows move them), and `constant` features that never vary in the training rows but do in
    the test rows (as 80 of SPCN's 4,096 trace features in section 3: a std without its + 1e-3
    divides by zero there)."""
    g, D = torch.Generator().manual_seed(seed), torch.float64
    mix = torch.randn(rank, F, generator=g, dtype=D)  # (rank, F) the features' hidden factors
    read = torch.randn(rank, R, generator=torch.Generator().manual_seed(1), dtype=D)
    prior = torch.tensor([1.0, 0.0, -0.7], dtype=D)[:R]
    units = torch.logspace(-1, 1, F, dtype=D)
    rows = []
    for n, shift in ((n_train, 0.0), (n_test, torch.linspace(-0.5, 1.0, F, dtype=D) * units)):
        h = torch.randn(n, rank, generator=g, dtype=D)
        X = (h @ mix + 0.3 * torch.randn(n, F, generator=g, dtype=D)) * units + 5 + shift
        y = (h @ read + prior + torch.randn(n, R, generator=g, dtype=D)).argmax(1)
        fixed = torch.full((n, constant), 2.0, dtype=D) if n == n_train else 2 + torch.randn(n, constant, generator=g,
                                                                                              dtype=D)
        rows += [torch.cat([X, fixed], 1), y]
    return rows


EXPECTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected.json")
PROBE_MISTAKES = (  # (the mistake's name in EXPECTED, what the message says): the first that matches is named
    ("fit on test", "it matches a probe fit on the test rows: fit W on X_train, y_train only"),
    ("no ridge", "it matches plain least squares (no ridge): add l2 N I to Z^T Z; without it the probe "
                 "overfits correlated features (on SPCN's traces it scores below activity alone)"),
    ("l2 ignored", "it matches a probe that ignores its l2 argument (always 1e-3): use the l2 passed in"),
    ("l2 I", "it matches l2 I in place of l2 N I: scale the ridge by N, the number of training rows"),
    ("no intercept", "it matches a probe without an intercept, or one-hot targets centred (minus their mean: "
                     "the same scores): append a constant 1 to the standardised features and regress onto the "
                     "one-hot Y itself, 0s and 1s"),
    ("raw units", "it matches a probe on raw units: standardise with the training mean and std"),
    ("own statistics", "it matches test rows standardised with their own mean and std: use the training rows' "
                       "statistics for both splits"),
    ("all statistics", "it matches statistics taken over the training and test rows together: use the training "
                       "rows' only"),
)


def expected():
    """The stored answers (lab/expected.json, computed from the repository's reference implementations
    on the notebook's inputs; the autograder compares with answers on other inputs)."""
    with open(EXPECTED) as f:
        return json.load(f)


def check_probe_accuracy(fn, stored=None):
    g = torch.Generator().manual_seed(0)
    X, y = _blobs(3000, 20, 4, g)
    acc = fn(X[:2000], y[:2000], X[2000:], y[2000:])
    assert isinstance(acc, float) and 0 <= acc <= 1, f"probe_accuracy should return a float in [0, 1], got {acc!r}"
    # the fingerprint: the accuracy at each l2 against the docstring's probe and each known mistake's,
    # to 5 rows of 1,000 (the population std, float32 or lstsq change 0-2 rows; a mistake 12 or more)
    stored = (stored or expected())["probe"]
    data, tol = _correlated(seed=stored["seed"]), 0.005
    got = [fn(*data, l2) for l2 in stored["l2"]]
    assert all(isinstance(a, float) and a == a for a in got), f"probe_accuracy returned {got} on a data set with " \
        "features constant in the training rows: a std without its + 1e-3 divides by zero (use X_train.std(0) + 1e-3)"
    close = lambda accs: all(abs(a - b) <= tol for a, b in zip(got, accs))
    if not any(close(accs) for accs in stored["right"].values()):  # the docstring's, or a free intercept
        want = stored["right"]["docstring"]
        for mistake, message in PROBE_MISTAKES:
            if close(stored["mistakes"][mistake]):
                raise AssertionError(f"probe_accuracy: {message}")
        l2, a, b = next((l2, a, b) for l2, a, b in zip(stored["l2"], got, want) if abs(a - b) > tol)
        raise AssertionError(f"on a fixed data set (100 training rows, 60 correlated features) at l2 = {l2} the "
                             f"probe of the docstring scores {b:.3f}, yours {a:.3f}: standardise with the training "
                             "rows' mean and std (+ 1e-3), append a constant 1, and solve with l2 N I")
    # the same data with 4 features constant in the training rows (varying in the test rows): the
    # docstring's probe gives them weight 0 (their column of Z is 0, the ridge does the rest): same accuracy
    fixed = [fn(*_correlated(seed=stored["seed"], constant=4), l2) for l2 in stored["l2"]]
    assert all(abs(a - b) <= tol for a, b in zip(fixed, got)), \
        f"probe_accuracy: 4 features constant in the training rows move the accuracy from {got} to {fixed}: their std " \
        "is 0 (80 of SPCN's 4,096 trace features in section 3), so divide by X_train.std(0) + 1e-3, never the bare std"
    assert acc >= 0.85, f"labels that a linear map of the features decides: the probe reads {acc:.3f} of them, " \
                        "expected >= 0.85"
    X, y = _blobs(500, 60, 4, g, informative=False)
    acc = fn(X[:300], y[:300], X[300:], y[300:])
    assert acc <= 0.25 + 0.12, f"random labels: a probe fit on the training rows only scores near chance 0.25 " \
                               f"on test, got {acc:.3f} (is it fit on the test rows?)"


# ---- 4, 5: MQAR --------------------------------------------------------------------------------------


def _tensors(case, *names, dtype=torch.float64):
    """The stored case's entries as tensors (expected.json holds them as nested lists)."""
    return [torch.tensor(case[n], dtype=dtype) for n in names]


def check_mqar_sequence(fn, stored=None):
    for case in (stored or expected())["mqar_sequence"]:  # recall.mqar's sequences, with the pairs and slots they ask
        N, T, blank = case["N"], case["T"], case["blank"]
        keys, values, slots, idx, targets = _tensors(case, "keys", "values", "slots", "idx", "targets",
                                                     dtype=torch.long)
        got = fn(keys, values, slots, T, blank)
        assert len(got) == 2, "mqar_sequence returns (idx, targets)"
        gi, gt = (torch.as_tensor(t) for t in got)
        assert gi.shape == gt.shape == (T,), f"idx and targets should have shape ({T},)"
        swapped = idx.clone()
        swapped[0:2 * N:2], swapped[1:2 * N:2] = values, keys
        assert torch.equal(swapped, idx) or not torch.equal(gi.long(), swapped), \
            f"N = {N}: the pairs are written value first: key i at position 2i, its value at 2i + 1"
        assert torch.equal(gi.long(), idx), f"N = {N}: idx differs from recall.mqar's sequence at positions " \
                                            f"{(gi != idx).nonzero()[:, 0].tolist()}"
        assert torch.equal(gt.long(), targets), f"N = {N}: targets differ from recall.mqar's at positions " \
                                                f"{(gt != targets).nonzero()[:, 0].tolist()}"
    keys, values = torch.tensor([0, 1]), torch.tensor([8, 9])
    for bad in ((3, 5), (4, 4), (4, 40)):
        assert _raises(fn, keys, values, torch.tensor(bad), 40, 24), f"slots {bad} should raise ValueError (N = 2, T = 40)"


def check_binding(fn, stored=None):
    stored = (stored or expected())["binding"]  # recall.binding at each N and accuracy
    for N, row in zip(stored["N"], stored["values"]):
        assert _close(fn(1 / N, N), 0.0), f"binding(1/N, N) should be 0 (N = {N}), got {fn(1 / N, N)}"
        assert _close(fn(1.0, N), 1.0), f"binding(1, N) should be 1 (N = {N}), got {fn(1.0, N)}: rescale by 1 - 1/N"
        for acc, want in zip(stored["acc"], row):
            assert _close(fn(acc, N), want), f"binding({acc}, {N}) = {fn(acc, N)}: linear in acc, 0 at 1/N and 1 at 1"
    assert _raises(fn, 1.0, 1), "binding at N = 1 should raise ValueError"


def check_recalled_pairs(fn, stored=None):
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
    """The student's (y, M_new) as float64, and the dtype it came in (float64, or the other one of the
    two), its shapes checked; the message says what came back instead."""
    y_shape, m_shape = shapes
    assert isinstance(out, (tuple, list)) and len(out) == 2, f"{name} returns a pair (y, M_new), got {type(out).__name__}"
    y, M = out
    assert torch.is_tensor(y) and torch.is_tensor(M), f"{name} returns two tensors (y, M_new)"
    assert not (tuple(y.shape) == m_shape and tuple(M.shape) == y_shape), \
        f"{name} returns (M_new, y): return the read first, (y, M_new)"
    assert tuple(y.shape) == y_shape and tuple(M.shape) == m_shape, \
        f"{name}: y should have shape {y_shape} and M_new {m_shape}, got {tuple(y.shape)} and {tuple(M.shape)}"
    return y.double(), M.double(), next((t.dtype for t in (y, M) if t.dtype != torch.float64), torch.float64)


def _unchanged(name, *pairs):
    """The arguments as the step got them (each pair: the tensor passed, a copy taken before)."""
    for passed, before in pairs:
        assert torch.equal(passed, before), f"{name} changes the state M it was given (in place): section 5 runs " \
            "one M for many sequences, so each would start where the last ended; return a new tensor, M_new"


def _float32(name, what, got, want, dtype, inside):
    """A difference of float32's size (the inputs are float64) names the dtype: the one returned when it
    is not float64, else `inside`, where float32 slips in on the way."""
    if not torch.allclose(got, want, rtol=1e-9, atol=1e-9) and torch.allclose(got, want, rtol=1e-5, atol=1e-6):
        raise AssertionError(f"{name} returns {what} as {str(dtype)[6:]}: return float64, the inputs' dtype (no .float(), "
                             "and dtype= on a new tensor)" if dtype != torch.float64 else f"{name}: {what} is off by "
                             f"{float((got - want).abs().max()):.1g}, float32 rounding: keep the inputs' float64 ({inside})")


def check_ema_kv_step(fn, stored=None):
    stored = (stored or expected())["ema_kv_step"]  # writes.ema_kv_step's, on random inputs; writes.ema_kv_ref's loop
    for case in stored["steps"]:
        alphas = tuple(case["alphas"])
        q, k, v, M, want_y, want_M = _tensors(case, "q", "k", "v", "M", "y", "M_new")
        S, D = M.shape[:2]
        a = torch.tensor(alphas, dtype=torch.float64).view(S, 1, 1)  # (S, 1, 1)
        M_in = M.clone()
        y, M2, dtype = _pair(fn(q, k, v, M_in, alphas), "ema_kv_step", ((D,), (S, D, D)))
        _unchanged("ema_kv_step", (M_in, M))
        kv = torch.outer(k, v)  # (D, D) key index first
        read = lambda M: (M.transpose(-1, -2) @ q).sum(0)  # (D,) sum_s M[s]^T q
        said = _diagnose(y, want_y, tol=1e-9 if dtype == torch.float64 else 1e-5, mistakes=[
            ("reads the state after writing: y is read from M as it came in (M_{t-1}), then M is written", read(want_M)),
            ("reads M q: the key index comes first (M[s] holds k v^T), so read M[s]^T q", (M @ q).sum(0)),
            ("averages over the decays: y is the sum over s of M[s]^T q", read(M) / S)])
        assert not said, f"ema_kv_step {said}"
        _float32("ema_kv_step", "y", y, want_y, dtype, "torch.tensor(alphas, dtype=M.dtype), not torch.tensor(alphas)")
        assert torch.allclose(y, want_y, rtol=1e-9, atol=1e-9), \
            f"ema_kv_step (decays {alphas}): y differs from the reference's read, y = sum_s M[s]^T q"
        said = _diagnose(M2, want_M, tol=1e-9 if dtype == torch.float64 else 1e-5, mistakes=[
            ("never decays the state: M[s] <- (1 - a_s) M[s] + a_s k v^T", M + a * kv),
            ("writes v k^T: the key index comes first, write a_s k v^T (torch.outer(k, v))", (1 - a) * M + a * kv.T),
            ("swaps a_s and 1 - a_s: keep (1 - a_s) of the state, write a_s of the pair", a * M + (1 - a) * kv),
            ("writes k v^T without its weight a_s", (1 - a) * M + kv)])
        assert not said, f"ema_kv_step {said}"
        _float32("ema_kv_step", "M_new", M2, want_M, dtype, "torch.tensor(alphas, dtype=M.dtype), not torch.tensor(alphas)")
        assert torch.allclose(M2, want_M, rtol=1e-9, atol=1e-9), \
            f"ema_kv_step (decays {alphas}): M_new differs from the reference's, (1 - a_s) M[s] + a_s k v^T"
    # the loop of the steps from the empty state against the reference loop's reads (writes.ema_kv_ref)
    alphas = tuple(stored["loop"]["alphas"])
    q, k, v, want = _tensors(stored["loop"], "q", "k", "v", "y")
    (T, D), S = q.shape, len(alphas)
    M, ys = torch.zeros(S, D, D, dtype=torch.float64), []
    for t in range(T):
        y, M, _ = _pair(fn(q[t], k[t], v[t], M, alphas), "ema_kv_step", ((D,), (S, D, D)))
        ys.append(y)
    bad = (torch.stack(ys) - want).abs().amax(1) > 1e-9  # (T,)
    assert not bad.any(), f"ema_kv_step run over {T} tokens from M = 0 differs from the reference loop from " \
                          f"token {int(bad.nonzero()[0])} on (does it change its inputs in place?)"


def check_delta_step(fn, stored=None):
    stored = (stored or expected())["delta_step"]  # writes.delta_rule_step's, on random inputs (unit q, k); delta_rule_ref's loop
    for case in stored["steps"]:
        beta, (q, k, v, M, want_y, want_M) = case["beta"], _tensors(case, "q", "k", "v", "M", "y", "M_new")
        D = len(q)
        M_in = M.clone()
        y, M2, dtype = _pair(fn(q, k, v, beta, M_in), "delta_step", ((D,), (D, D)))
        _unchanged("delta_step", (M_in, M))
        err = v - M @ k  # (D,) what the state gets wrong at k
        said = _diagnose(y, want_y, tol=1e-9 if dtype == torch.float64 else 1e-5, mistakes=[
            ("reads the state after writing: y is read from M as it came in (M_{t-1}), then M is corrected",
             want_M @ q),
            ("reads M^T q: here the value index comes first (M k is the value stored at k), so read M q", M.T @ q)])
        assert not said, f"delta_step {said}"
        _float32("delta_step", "y", y, want_y, dtype, "every tensor made on the way: dtype=M.dtype")
        assert torch.allclose(y, want_y, rtol=1e-9, atol=1e-9), \
            "delta_step: y differs from the reference's read, y = M q"
        said = _diagnose(M2, want_M, tol=1e-9 if dtype == torch.float64 else 1e-5, mistakes=[
            ("ignores beta: the correction is beta (v - M k) k^T", M + torch.outer(err, k)),
            ("writes k (v - M k)^T: the value index comes first, add beta (v - M k) k^T", M + beta * torch.outer(k, err)),
            ("corrects away from v: the error is v - M k", M - beta * torch.outer(err, k)),
            ("adds beta v k^T without removing what k held: the error is v - M k", M + beta * torch.outer(v, k)),
            ("decays the state: the delta rule has no decay, M + beta (v - M k) k^T", (1 - beta) * M + beta *
             torch.outer(v, k))])
        assert not said, f"delta_step {said}"
        _float32("delta_step", "M_new", M2, want_M, dtype, "every tensor made on the way: dtype=M.dtype")
        assert torch.allclose(M2, want_M, rtol=1e-9, atol=1e-9), \
            "delta_step: M_new differs from the reference's, M + beta (v - M k) k^T"
    q, k, v, beta, want = _tensors(stored["loop"], "q", "k", "v", "beta", "y")  # (T, D) each, beta (T,)
    T, D = q.shape
    M, ys = torch.zeros(D, D, dtype=torch.float64), []
    for t in range(T):
        y, M, _ = _pair(fn(q[t], k[t], v[t], float(beta[t]), M), "delta_step", ((D,), (D, D)))
        ys.append(y)
    bad = (torch.stack(ys) - want).abs().amax(1) > 1e-9
    assert not bad.any(), f"delta_step run over {T} tokens from M = 0 differs from the reference loop from " \
                          f"token {int(bad.nonzero()[0])} on (does it change its inputs in place?)"


# ---- 7: bytes --------------------------------------------------------------------------------------------


def _text(n):
    """n bytes of real English and code (Python's own pydoc topics): long enough that the
    compressors' settings change their output (zlib 6 vs 9, bz2 1 vs 9, lzma 6 vs 9e)."""
    import pydoc_data.topics
    return "\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)).encode()[:n]


def check_compressor_nats_per_byte(fn, stored=None):
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


# ---- 8: the noise ---------------------------------------------------------------------------------


SEED_CASES = (  # (a, b, paired, alpha): seeds spread by 0.2 as the map's copies; each case catches a known wrong test
    ([0.79, 0.81, 0.80, 0.82], [0.85, 0.86, 0.84, 0.88], False, 0.01), ([0.79, 0.80], [0.84, 0.86], False, 0.01),
    ([0.80, 0.90, 0.85], [0.84, 0.80, 0.95, 0.88, 0.90], False, 0.01),
    ([0.79, 0.938, 0.86, 1.008, 0.90], [0.80, 0.95, 0.87, 1.02, 0.91], True, 0.01),  # the pairs differ by ~0.011
    ([0.80, 0.95, 0.87, 1.02], [1.00, 0.92, 1.07, 0.96], True, 0.01),
    ([0.795, 0.937, 0.865, 1.007, 0.905], [0.80, 0.95, 0.87, 1.02, 0.91], True, 0.01),  # two-sided p 0.014: a tie
    ([0.85, 0.86, 0.84, 0.88], [0.79, 0.81, 0.80, 0.82], False, 0.01),  # A clearly above B
    ([0.70, 0.71, 0.72], [0.71, 0.82, 0.74, 0.81, 0.77, 0.72, 0.83, 0.76], False, 0.01),  # Welch's df 8.4, not 2
    ([0.80, 0.84, 0.82, 0.86], [0.85, 0.91, 0.87, 0.89], False, 0.05))  # p 0.034: below at 0.05, a tie at 0.01


def check_seed_verdict(fn, stored=None):
    calls = [fn(list(a), list(b), paired, alpha) if alpha != 0.01 else fn(list(a), list(b), paired)
             for a, b, paired, alpha in SEED_CASES]
    for got in calls:
        assert isinstance(got, (tuple, list)) and len(got) == 3, "seed_verdict returns (diff, se, verdict)"
    tests = [ttests.verdicts(*case) for case in SEED_CASES]
    # the mistake named is one whose verdicts are the student's on every case, not only on the first that fails
    same = [message for name, message in ttests.MISTAKES if all(t[name][1] == got[2] for t, got in zip(tests, calls))]
    for (a, b, paired, alpha), got, test in zip(SEED_CASES, calls, tests):
        (se_right, right), call = test["right"], f"seed_verdict({a}, {b}, paired={paired}" + (
            f", alpha={alpha})" if alpha != 0.01 else ")")
        diff, se, said = float(got[0]), float(got[1]), got[2]
        want = sum(a) / len(a) - sum(b) / len(b)
        assert _close(diff, want, 1e-9), f"{call}: diff = {diff:.4g}, expected mean(a) - mean(b) = {want:.4g}"
        wrong = [message for name, message in ttests.MISTAKES if not _close(test[name][0], se_right, 1e-6) and
                 _close(se, test[name][0], 1e-6)]
        assert _close(se, se_right, 1e-6), f"{call}: se = {se:.4g}: " + (wrong[0] if wrong else f"expected "
                                                                          f"{se_right:.4g} (std and var with n - 1)")
        assert said == right, f"{call}: {said!r}, but the two-sided {'paired' if paired else 'Welch'} t-test " \
            f"gives {right!r}" + (f": {same[0]}" if same else " ('below', 'above' or 'tie')")
    assert _raises(fn, [0.796], [0.815], False), "seed_verdict([0.796], [0.815]): a verdict from one seed each: no " \
        "spread, no standard error: raise ValueError"
    assert _raises(fn, [0.8], [0.85, 0.86, 0.84], False), "seed_verdict([0.8], [0.85, 0.86, 0.84]): one seed on a " \
        "side has no spread: raise ValueError"
    assert _raises(fn, [0.8, 0.9], [0.8, 0.85, 0.9], True), "paired with 2 and 3 seeds should raise ValueError"


CHECKS = {"effective_window": check_effective_window, "same_state": check_same_state,
          "probe_accuracy": check_probe_accuracy, "mqar_sequence": check_mqar_sequence, "binding": check_binding,
          "recalled_pairs": check_recalled_pairs, "ema_kv_step": check_ema_kv_step, "delta_step": check_delta_step,
          "compressor_nats_per_byte": check_compressor_nats_per_byte, "seed_verdict": check_seed_verdict}


def verdict(name, fn, stored=None):
    """(passed, message) of exercise `name`'s check on fn, against the stored answers `stored`
    (default: lab/expected.json's); message is '' when it passed."""
    if name not in CHECKS:  # the caller's mistake, not the student's code
        return None, f"{name!r} is not one of {', '.join(CHECKS)}"
    try:
        CHECKS[name](_named(fn, name), stored)
    except NotImplementedError:
        return False, "not written yet (the stub raises NotImplementedError)"
    except AssertionError as e:
        return False, " ".join((str(e) or "a check failed").split())
    except Crashed as e:  # the student's code crashed or hung: the call and the error, in one line
        return False, str(e)
    return True, ""


def said(name, passed, message, failed="FAIL"):
    """A verdict's one line, the exercise's name in it once: `[pass] name`, `[FAIL] name: message`, or
    `[FAIL] name(0.5, 0.5) = 3: ...` when the message opens with a call of it."""
    if passed:
        return f"[pass] {name}"
    tag = failed if passed is not None else "no such exercise"
    rest = message[len(name):]
    if not (message.startswith(name) and rest[:1] in (" ", ":", "(")):
        return f"[{tag}] {name}: {message}"
    return f"[{tag}] {name}{rest}" if rest.startswith("(") else f"[{tag}] {name}: {rest.lstrip(': ')}"


def check(name, fn):
    """Run the check of exercise `name` on fn; print one line and return whether it passed
    (raise AssertionError instead of returning False when LAB_STRICT=1)."""
    passed, message = verdict(name, fn)
    print(said(name, passed, message, failed="not yet"))
    if passed:
        return True
    if os.environ.get("LAB_STRICT") == "1":
        raise AssertionError(f"{name}: {message}")
    return False

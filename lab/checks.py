"""One check per exercise of exercises.py. Each tests a property that a wrong answer fails (not
only shapes), against the repository's own code where it has one (ema.traces_ref, ema.trace_map,
recall.mqar, recall.binding, variants.ema_kv_ref, variants.delta_rule_ref), or else against the
docstring's formula on a fixed data set. tests/test_lab.py holds every check to failing on the
stub and on plausible wrong answers, and passing on solutions.py.

    check("effective_window", my_function)   # prints one line: passed, or what is wrong; returns True/False

A crash inside the student's function is named with its call: `effective_window(1.0, 0.5) raised
ValueError: ...`.

LAB_STRICT=1 makes a failed check raise (CI executes the notebook so, with the solutions).
"""
import bz2
import lzma
import math
import os
import random
import zlib

import torch

import ema
import recall
import variants


def _close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(b))


class Crashed(Exception):
    """The student's function raised: the message names the call, the cause is the exception."""


def _brief(x):
    """An argument as the crash message shows it: tensors and bytes by their size only."""
    if isinstance(x, torch.Tensor):
        return f"<tensor {tuple(x.shape)}>"
    return f"<{len(x):,} bytes>" if isinstance(x, bytes) else repr(x)


def _named(fn, name):
    """fn, with any exception but NotImplementedError (the stub) re-raised as Crashed naming the call."""
    def call(*args):
        try:
            return fn(*args)
        except NotImplementedError:
            raise
        except Exception as e:
            raise Crashed(f"{name}({', '.join(map(_brief, args))}) raised {type(e).__name__}: "
                          f"{' '.join(str(e).split())}") from e
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
        raise
    return False


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
            f"the final states differ by {float((h[0] - h[1]).abs().max()):.3g} (alphas {alphas}, T = {T})"
    assert _raises(fn, (0.5, 0.1, 0.02), torch.randn(3, dtype=torch.float64)), \
        "T <= S: V is one-to-one, same_state should raise ValueError"


def _blobs(n, F, R, g, informative=True):
    """n rows of F Gaussian features; labels = argmax of a random linear map (or random labels)."""
    X = torch.randn(n, F, generator=g) * torch.logspace(-2, 2, F)  # scales from 0.01 to 100
    if not informative:
        return X, torch.randint(R, (n,), generator=g)
    A = torch.randn(F, R, generator=g) / torch.logspace(-2, 2, F)[:, None]
    return X, (X @ A).argmax(1)


def _ridge(X_train, y_train, X_test, y_test, l2):
    """The docstring's probe, written out: the reference value of check_probe_accuracy."""
    mu, sd = X_train.mean(0), X_train.std(0) + 1e-3
    z = lambda X: torch.cat([(X - mu) / sd, torch.ones(len(X), 1, dtype=X.dtype)], 1)
    Z, R = z(X_train), int(max(y_train.max(), y_test.max())) + 1
    Y = torch.nn.functional.one_hot(y_train, R).to(Z.dtype)
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ Y)
    return (z(X_test) @ W).argmax(1).eq(y_test).double().mean().item()


def _shifted(n=600, F=8, R=3):
    """A fixed data set that each mistake scores differently on: features far from 0 and unequal
    in scale (an intercept and standardising matter), unequal classes, and test rows shifted
    against the training rows (standardising with the test rows' own statistics moves them)."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(F, R, generator=g, dtype=torch.float64)
    rows = []
    for shift in (torch.zeros(F, dtype=torch.float64), torch.linspace(-1, 1, F, dtype=torch.float64)):
        X = torch.randn(n, F, generator=g, dtype=torch.float64) * torch.linspace(0.5, 3, F, dtype=torch.float64) + 2
        logits = 0.3 * X @ A + torch.tensor([1.5, 0.0, -0.5], dtype=torch.float64)  # (n, R) unequal priors
        rows += [X + shift, (logits + torch.randn(n, R, generator=g, dtype=torch.float64)).argmax(1)]
    return rows


def check_probe_accuracy(fn):
    g = torch.Generator().manual_seed(0)
    X, y = _blobs(3000, 20, 4, g)
    acc = fn(X[:2000], y[:2000], X[2000:], y[2000:])
    assert isinstance(acc, float) and 0 <= acc <= 1, f"probe_accuracy should return a float in [0, 1], got {acc!r}"
    assert acc >= 0.85, f"labels that a linear map of the features decides: the probe reads {acc:.3f} of them, " \
                        "expected >= 0.85"
    X, y = _blobs(500, 60, 4, g, informative=False)
    acc = fn(X[:300], y[:300], X[300:], y[300:])
    assert acc <= 0.25 + 0.12, f"random labels: a probe fit on the training rows only scores near chance 0.25 " \
                               f"on test, got {acc:.3f} (is it fit on the test rows?)"
    X, y = _blobs(3000, 20, 4, g)
    far = fn(X[:2000] * 1e3 + 5, y[:2000], X[2000:] * 1e3 + 5, y[2000:])
    assert far >= 0.85, f"the same data in other units scores {far:.3f}: standardise with the training statistics"
    data = _shifted()
    for l2 in (1e-3, 1e-2):
        want, got = _ridge(*data, l2), fn(*data, l2)
        assert abs(got - want) <= 1.5 / len(data[3]), \
            f"on a fixed data set at l2 = {l2} the probe of the docstring scores {want:.4f}, yours {got:.4f}: " \
            "standardise with the training rows' mean and std (+ 1e-3), append a constant 1, and use l2 N I"


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
        assert _close(fn(1.0, N), 1.0), f"binding(1, N) should be 1 (N = {N})"
        for acc in (0.0, 0.203, 0.5, 0.9):
            assert _close(fn(acc, N), recall.binding(acc, N)), f"binding({acc}, {N}) = {fn(acc, N)}: linear in acc, " \
                                                                 f"0 at 1/N and 1 at 1"
    assert _raises(fn, 1.0, 1), "binding at N = 1 should raise ValueError"


def check_recalled_pairs(fn):
    rng = random.Random(0)
    for N, r in ((8, 0), (8, 2), (4, 1), (16, 5)):
        # simulate the reader of the docstring: r pairs known, the others guessed among the N - r values left
        right = sum(1 if q < r else rng.randrange(N - r) == 0 for _ in range(2000) for q in range(N))
        est = fn(right / (2000 * N), N)
        assert abs(est - r) < 0.15, f"a reader that knows {r} of {N} pairs: recalled_pairs gives {est:.3f}"
        assert _close(fn((r + 1) / N, N), r), f"recalled_pairs((r + 1) / N, N) should be r = {r} (N = {N})"
    assert _raises(fn, 1.0, 1), "recalled_pairs at N = 1 should raise ValueError"


def check_write_and_read(fn):
    g = torch.Generator().manual_seed(0)
    B, T, D = 3, 10, 4
    unit = lambda x: x / x.norm(dim=-1, keepdim=True)
    for alphas in ((0.5, 0.1, 0.02), (0.3,)):
        q, k, v = (torch.randn(B, T, D, generator=g, dtype=torch.float64) for _ in range(3))
        want = variants.ema_kv_ref(q[:, None, None].expand(B, 1, len(alphas), T, D), k[:, None], v[:, None],
                                   alphas)[:, 0]  # (B, T, D): the loop of ema_kv_step, the definition
        got = fn("ema_kv", q, k, v, None, alphas)
        assert isinstance(got, torch.Tensor) and got.shape == (B, T, D), f"ema_kv: y should have shape {(B, T, D)}"
        assert got[:, 0].abs().max() == 0, "ema_kv: y_0 reads the empty state (before token 0's write): it is 0"
        bad = (got - want).abs().amax((0, 2)) > 1e-9  # (T,)
        assert not bad.any(), f"ema_kv (decays {alphas}): y_t differs from variants.ema_kv_ref from token " \
                              f"{int(bad.nonzero()[0])} on: decay each state by (1 - a_s) and write a_s k_t v_t^T"
    q, k = (unit(torch.randn(B, T, D, generator=g, dtype=torch.float64)) for _ in range(2))
    v, beta = torch.randn(B, T, D, generator=g, dtype=torch.float64), torch.rand(B, T, generator=g, dtype=torch.float64)
    want = variants.delta_rule_ref(q[:, None], k[:, None], v[:, None], beta[:, None])[:, 0]  # (B, T, D)
    got = fn("delta", q, k, v, beta)
    assert isinstance(got, torch.Tensor) and got.shape == (B, T, D), f"delta: y should have shape {(B, T, D)}"
    assert got[:, 0].abs().max() == 0, "delta: y_0 reads the empty state (before token 0's write): it is 0"
    bad = (got - want).abs().amax((0, 2)) > 1e-9
    assert not bad.any(), f"delta: y_t differs from variants.delta_rule_ref from token {int(bad.nonzero()[0])} on: " \
                          "write beta_t (v_t - M k_t) k_t^T with this token's beta"
    assert _raises(fn, "delta", q, k, v, None), "delta without beta should raise ValueError"
    assert _raises(fn, "additive", q, k, v, None), "an unknown rule should raise ValueError"


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
            assert _close(got[k], 8 * math.log(2) * c / len(data)), \
                f"{k} on {len(data):,} bytes: {got[k]:.5f} nats/byte, expected {8 * math.log(2) * c / len(data):.5f} " \
                "(the strongest setting; 8 ln 2 x compressed / raw)"
    assert _raises(fn, b""), "empty data should raise ValueError"


CHECKS = {"effective_window": check_effective_window, "same_state": check_same_state,
          "probe_accuracy": check_probe_accuracy, "mqar_sequence": check_mqar_sequence, "binding": check_binding,
          "recalled_pairs": check_recalled_pairs, "write_and_read": check_write_and_read,
          "compressor_nats_per_byte": check_compressor_nats_per_byte}


def check(name, fn):
    """Run the check of exercise `name` on fn; print one line and return whether it passed
    (raise AssertionError instead of returning False when LAB_STRICT=1)."""
    tag = "not yet"
    if name not in CHECKS:  # the caller's mistake, not the student's code
        tag, message = "no such exercise", f"{name!r} is not one of {', '.join(CHECKS)}"
    else:
        try:
            CHECKS[name](_named(fn, name))
        except NotImplementedError:
            message = "not written yet (the stub raises NotImplementedError)"
        except AssertionError as e:
            message = str(e) or "a check failed"
        except Crashed as e:  # the student's code crashed: the call and the error, in one line
            message = str(e)
        else:
            print(f"[pass] {name}")
            return True
    print(f"[{tag}] {name}: {message}")
    if os.environ.get("LAB_STRICT") == "1":
        raise AssertionError(f"{name}: {message}")
    return False

"""One check per exercise of exercises.py. Each tests a property that a wrong answer fails (not
only shapes), against the repository's own code where it has one (ema.traces_ref, ema.trace_map,
recall.mqar, recall.binding, plumbing.ngram). tests/test_lab.py holds every check to failing on
the stub and passing on solutions.py.

    check("effective_window", my_function)   # prints one line: passed, or what is wrong; returns True/False

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


def _close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(b))


def _raises(fn, *args):
    try:
        fn(*args)
    except ValueError:
        return True
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
          "recalled_pairs": check_recalled_pairs, "compressor_nats_per_byte": check_compressor_nats_per_byte}


def check(name, fn):
    """Run the check of exercise `name` on fn; print one line and return whether it passed
    (raise AssertionError instead of returning False when LAB_STRICT=1)."""
    try:
        CHECKS[name](fn)
    except NotImplementedError:
        message = "not written yet (the stub raises NotImplementedError)"
    except AssertionError as e:
        message = str(e) or "a check failed"
    except Exception as e:  # the student's code crashed: say how, in one line
        message = f"{type(e).__name__}: {e}"
    else:
        print(f"[pass] {name}")
        return True
    print(f"[not yet] {name}: {message}")
    if os.environ.get("LAB_STRICT") == "1":
        raise AssertionError(f"{name}: {message}")
    return False

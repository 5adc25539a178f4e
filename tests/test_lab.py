"""The lab's checks (lab/checks.py): every exercise's check fails on its stub, on plausible wrong
answers, and passes on its solution, and names a crash by its call; the autograder passes the
solutions and fails the stubs. The notebook itself: tests/test_lab_notebook.py; grading and
section 7: tests/test_lab_grading.py."""
import json
import math
import os
import pathlib
import sys
import time
import zlib

import pytest
import torch

from lab import checks, exercises, solutions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab")


@pytest.mark.parametrize("name", sorted(checks.CHECKS))
def test_each_check_fails_on_the_stub_and_passes_on_the_solution(name, monkeypatch, capsys):
    with pytest.raises(NotImplementedError):
        checks.CHECKS[name](getattr(exercises, name))
    checks.CHECKS[name](getattr(solutions, name))  # raises if the solution is wrong
    monkeypatch.delenv("LAB_STRICT", raising=False)
    assert checks.check(name, getattr(exercises, name)) is False
    assert checks.check(name, getattr(solutions, name)) is True
    out = capsys.readouterr().out.splitlines()
    assert out == [f"[not yet] {name}: not written yet (the stub raises NotImplementedError)", f"[pass] {name}"]
    monkeypatch.setenv("LAB_STRICT", "1")
    with pytest.raises(AssertionError, match=name):
        checks.check(name, getattr(exercises, name))


def _standardise(X_train, *Xs, pop=False):
    mu, sd = X_train.mean(0), X_train.std(0, unbiased=not pop) + 1e-3
    return [(X - mu) / sd for X in (X_train, *Xs)]


def _with_one(X):
    return torch.cat([X, torch.ones(len(X), 1, dtype=X.dtype)], 1)


def _score(W, Z_test, y_test):
    return (Z_test @ W).argmax(1).eq(y_test).double().mean().item()


def _onehot(y_train, y_test):
    return torch.nn.functional.one_hot(y_train.long(), int(max(y_train.max(), y_test.max())) + 1).double()


def _probe_least_squares(X_train, y_train, X_test, y_test, l2=1e-3):
    """Plain least squares: the l2 argument never used (it reverses section 3 on SPCN's features)."""
    Z, Zt = (_with_one(X).double() for X in _standardise(X_train, X_test))
    return _score(torch.linalg.lstsq(Z, _onehot(y_train, y_test)).solution, Zt, y_test)


def _probe_l2_unscaled(X_train, y_train, X_test, y_test, l2=1e-3):
    """l2 I in place of l2 N I."""
    Z, Zt = (_with_one(X).double() for X in _standardise(X_train, X_test))
    W = torch.linalg.solve(Z.T @ Z + l2 * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ _onehot(y_train, y_test))
    return _score(W, Zt, y_test)


def _probe_fixed_l2(X_train, y_train, X_test, y_test, l2=1e-3):
    """The l2 argument ignored: the default's ridge at every l2."""
    return solutions.probe_accuracy(X_train, y_train, X_test, y_test)


def _no_standardising(X_train, y_train, X_test, y_test, l2=1e-3):
    Z, Zt = _with_one(X_train.double()), _with_one(X_test.double())
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ _onehot(y_train, y_test))
    return _score(W, Zt, y_test)


def _probe_without_intercept(X_train, y_train, X_test, y_test, l2=1e-3):
    Z, Zt = (X.double() for X in _standardise(X_train, X_test))
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ _onehot(y_train, y_test))
    return _score(W, Zt, y_test)


def _probe_test_statistics(X_train, y_train, X_test, y_test, l2=1e-3):
    """Each split standardised with its own mean and std: the test rows' statistics leak in."""
    own = lambda X: (X - X.mean(0)) / (X.std(0) + 1e-3) * (X_train.std(0) + 1e-3) + X_train.mean(0)
    return solutions.probe_accuracy(X_train, y_train, own(X_test), y_test, l2)


def _probe_all_statistics(X_train, y_train, X_test, y_test, l2=1e-3):
    """Mean and std over the training and test rows together."""
    X = torch.cat([X_train, X_test]).double()
    mu, sd = X.mean(0), X.std(0) + 1e-3
    Z, Zt = _with_one((X_train - mu) / sd), _with_one((X_test - mu) / sd)
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ _onehot(y_train, y_test))
    return _score(W, Zt, y_test)


def _probe_free_intercept(X_train, y_train, X_test, y_test, l2=1e-3):
    """The constant column left out of the ridge (as sklearn's Ridge does)."""
    Z, Zt = (_with_one(X).double() for X in _standardise(X_train, X_test))
    eye = torch.eye(Z.shape[1], dtype=Z.dtype)
    eye[-1, -1] = 0
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * eye, Z.T @ _onehot(y_train, y_test))
    return _score(W, Zt, y_test)


def _probe_std_without_eps(X_train, y_train, X_test, y_test, l2=1e-3):
    """X_train.std(0) without the + 1e-3: a feature constant in the training rows divides by zero."""
    mu, sd = X_train.mean(0), X_train.std(0)
    Z, Zt = (_with_one((X - mu) / sd).double() for X in (X_train, X_test))
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ _onehot(y_train, y_test))
    return _score(W, Zt, y_test)


def _probe_centred_targets(X_train, y_train, X_test, y_test, l2=1e-3):
    """One-hot targets minus their mean: each class's score lowered by its frequency."""
    Z, Zt = (_with_one(X).double() for X in _standardise(X_train, X_test))
    Y = _onehot(y_train, y_test)
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ (Y - Y.mean(0)))
    return _score(W, Zt, y_test)


def _probe_harmless(X_train, y_train, X_test, y_test, l2=1e-3):
    """Right, written otherwise: the population std, float32, the ridge as an augmented lstsq."""
    Z, Zt = (_with_one(X).float() for X in _standardise(X_train.float(), X_test.float(), pop=True))
    A = torch.cat([Z, math.sqrt(l2 * len(Z)) * torch.eye(Z.shape[1])])
    Y = torch.cat([_onehot(y_train, y_test).float(), torch.zeros(Z.shape[1], _onehot(y_train, y_test).shape[1])])
    return _score(torch.linalg.lstsq(A, Y).solution, Zt, y_test)


def _mqar_values_first(keys, values, slots, T, blank):
    idx, targets = solutions.mqar_sequence(keys, values, slots, T, blank)
    idx[0:2 * len(keys):2], idx[1:2 * len(keys):2] = values, keys  # v k instead of k v
    return idx, targets


def _window_loop(alpha, mass=0.9):
    """A loop without the argument checks: at alpha = 0 it never ends."""
    k, carried = 0, 0.0
    while carried < mass - 1e-12:
        carried += alpha * (1 - alpha) ** k
        k += 1
    return k


def _ema_kv(read_after=False, read="MT", decay=True, outer="kv", order="yM", in_place=False, float32=False):
    def step(q, k, v, M, alphas):
        a = torch.tensor(alphas, dtype=torch.float32 if float32 else M.dtype).view(-1, 1, 1)
        kv = torch.outer(k, v) if outer == "kv" else torch.outer(v, k)
        new = ((1 - a) * M if decay else M) + a * kv
        if in_place:
            new = M.copy_(new)
        src = new if read_after else M
        y = (src.transpose(-1, -2) @ q).sum(0) if read == "MT" else (src @ q).sum(0)
        return (y, new) if order == "yM" else (new, y)
    return step


def _delta(read_after=False, use_beta=True, outer="vk", sign=1, in_place=False):
    def step(q, k, v, beta, M):
        b = beta if use_beta else 1.0
        err = v - M @ k
        y = M @ q
        new = M + sign * b * (torch.outer(err, k) if outer == "vk" else torch.outer(k, err))
        if in_place:
            new = M.copy_(new)
        return new @ q if read_after else y, new
    return step


def _verdict(se="right", one_seed=False, p="t"):
    """seed_verdict's wrong answers, each a student's own: the std for the SE, Welch's SE on paired data,
    the population SD, a pooled variance, a one-seed verdict; p from a normal, one-sided each way (a
    two-sided test at 2 alpha), two-sided without its sign, one-sided from |t| (the sign lost), with
    min(n) - 1 degrees of freedom, or at 0.01 whatever alpha."""
    import scipy.stats

    def fn(a, b, paired, alpha=0.01):
        if one_seed and min(len(a), len(b)) < 2:
            return a[0] - b[0], 0.0, "below" if a[0] < b[0] else "tie"
        A, B = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
        n, m, diff = len(a), len(b), float(A.mean() - B.mean())
        if paired and se != "welch":
            err, df = float((A - B).std(unbiased=se != "population") / n ** 0.5), n - 1
        elif se == "pooled":
            err = float((((n - 1) * A.var() + (m - 1) * B.var()) / (n + m - 2) * (1 / n + 1 / m)) ** 0.5)
            df = n + m - 2
        else:
            u = se != "population"
            va, vb = A.var(unbiased=u) / n, B.var(unbiased=u) / m
            err, df = float((va + vb) ** 0.5), float((va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (m - 1)))
        t = diff / err
        if se == "std":
            err = float((A - B).std()) if paired else float((A.var() + B.var()) ** 0.5)
        df = min(n, m) - 1 if p == "min df" else df
        cdf = scipy.stats.norm.cdf if p == "normal" else lambda x: scipy.stats.t.cdf(x, df)
        level = 0.01 if p == "alpha" else alpha
        if p == "each way":  # the one-sided t-tests below and above, each at alpha
            return diff, err, "below" if cdf(t) < level else "above" if cdf(-t) < level else "tie"
        if p == "blind":  # the two-sided p, its sign dropped
            return diff, err, "below" if 2 * cdf(-abs(t)) < level else "tie"
        if p == "|t|":
            return diff, err, "below" if cdf(-abs(t)) < level else "tie"
        return diff, err, ("below" if t < 0 else "above") if 2 * cdf(-abs(t)) < level else "tie"
    return fn


WRONG = [  # plausible mistakes, each of which its check must catch with a message naming it (a key word)
    ("effective_window", lambda a, mass=0.9: 1 if a == 1 else max(1, int(math.log(1 - mass) / math.log(1 - a))),
     "one short"),
    ("same_state", lambda alphas, x: x + torch.linalg.svd(torch.randn(len(alphas), len(x), dtype=torch.float64),
                                                          full_matrices=True).Vh[-1], "null space"),  # another matrix's
    ("probe_accuracy", lambda X, y, Xt, yt, l2=1e-3: solutions.probe_accuracy(Xt, yt, Xt, yt, l2), "test rows"),
    ("probe_accuracy", _probe_least_squares, "no ridge"),
    ("probe_accuracy", _probe_fixed_l2, "ignores its l2"),
    ("probe_accuracy", _probe_l2_unscaled, "l2 I in place of l2 N I"),
    ("probe_accuracy", _no_standardising, "raw units"),
    ("probe_accuracy", _probe_without_intercept, "without an intercept"),
    ("probe_accuracy", _probe_test_statistics, "their own mean"),
    ("probe_accuracy", _probe_all_statistics, "together"),
    ("probe_accuracy", _probe_std_without_eps, "+ 1e-3"),
    ("probe_accuracy", _probe_centred_targets, "centred"),  # divides by zero on a feature constant in training
    ("mqar_sequence", _mqar_values_first, "value first"),
    ("binding", lambda acc, N: acc - 1 / N, "rescale"),  # not rescaled
    ("recalled_pairs", lambda acc, N: acc * N, "free guess"),
    ("recalled_pairs", lambda acc, N: round(N * acc - 1), "do not round"),  # an integer answer
    ("recalled_pairs", lambda acc, N: float(int(N * acc - 1)), "do not round"),
    ("ema_kv_step", _ema_kv(read_after=True), "after writing"),
    ("ema_kv_step", _ema_kv(read="M"), "reads M q"),
    ("ema_kv_step", _ema_kv(decay=False), "never decays"),
    ("ema_kv_step", _ema_kv(outer="vk"), "writes v k^T"),
    ("ema_kv_step", _ema_kv(order="My"), "returns (M_new, y)"),
    ("ema_kv_step", _ema_kv(in_place=True), "in place"),  # section 5's runner would carry one state over
    ("ema_kv_step", _ema_kv(float32=True), "torch.tensor(alphas, dtype=M.dtype)"),  # float64 out, float32 inside
    ("ema_kv_step", lambda *a: tuple(t.float() for t in solutions.ema_kv_step(*a)), "returns y as float32"),
    ("delta_step", lambda *a: tuple(t.float() for t in solutions.delta_step(*a)), "returns y as float32"),
    ("delta_step", lambda q, k, v, beta, M: solutions.delta_step(q, k, v, torch.tensor(beta), M), "float32 rounding"),
    ("effective_window", lambda a, mass=0.9: max(1, math.floor(math.log(1 - mass) / math.log(1 - a)) + 1),
     "one too many"),  # floor + 1: right except at an exact boundary (0.75 at a = 0.5: 3, not 2)
    ("delta_step", _delta(read_after=True), "after writing"),
    ("delta_step", _delta(use_beta=False), "ignores beta"),
    ("delta_step", _delta(outer="kv"), "writes k (v - M k)^T"),
    ("delta_step", _delta(sign=-1), "away from v"),
    ("delta_step", _delta(in_place=True), "in place"),
    ("seed_verdict", _verdict(se="std"), "standard deviation"),
    ("seed_verdict", _verdict(se="welch"), "ignores the pairing"),
    ("seed_verdict", _verdict(se="population"), "population SD"),
    ("seed_verdict", _verdict(se="pooled"), "pooled variance"),
    ("seed_verdict", _verdict(one_seed=True), "one seed"),
    ("seed_verdict", _verdict(p="normal"), "a normal p"),
    ("seed_verdict", _verdict(p="each way"), "twice the level"),
    ("seed_verdict", _verdict(p="blind"), "ignores the sign"),
    ("seed_verdict", _verdict(p="|t|"), "one-sided p from |t|"),
    ("seed_verdict", _verdict(p="min df"), "min(n) - 1 degrees"),
    ("seed_verdict", _verdict(p="alpha"), "not at the alpha passed in"),
    ("compressor_nats_per_byte", lambda data: solutions.compressor_nats_per_byte(data)
     | {"zlib": 8 * math.log(2) * len(zlib.compress(data)) / len(data)}, "strongest setting"),  # zlib's default level
]


WITHHELD = ("solutions", "snapshot", "INSTRUCTOR", "reference.ipynb", "tests/")  # what the handout leaves out


@pytest.mark.parametrize("name, wrong, says", WRONG, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(WRONG)])
def test_each_check_names_a_wrong_answer(name, wrong, says):
    """One line naming the mistake, and the exercise's name in it once."""
    passed, message = checks.verdict(name, wrong)
    assert passed is False and says in message and "\n" not in message
    assert checks.said(name, passed, message).count(name) == 1, checks.said(name, passed, message)
    assert not [w for w in WITHHELD if w in message]  # a student's copy lacks them


def _same(a, b):
    """Equal, floats to 1e-12 (another BLAS may round a float64 matmul's last bit otherwise)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12) if isinstance(a, float) else a == b


def test_the_stored_answers_are_the_reference_implementations_own():
    """lab/expected.json is what `python -m lab.snapshot` computes now (the checks compare with it)."""
    from lab import snapshot
    with open(checks.EXPECTED) as f:
        text = f.read()
    assert _same(json.loads(text), snapshot.snapshot()), "lab/expected.json is stale: run python -m lab.snapshot"
    assert json.loads(snapshot.dumps(json.loads(text))) == json.loads(text)  # the compact writer loses nothing


def test_the_checks_call_no_reference_implementation(monkeypatch):
    """The handout's checks need only lab/expected.json: with every answer of the repository that the
    grader guards made to raise (writes' steps and loops, recall.binding, recall.mqar), each check still
    passes the solution and fails the stub, and lab/checks.py imports neither module."""
    import recall
    import writes
    from lab import serve

    def refuse(*args, **kwargs):
        raise RuntimeError("a check called the reference")
    for file, attr in serve.GUARDED:
        if file in ("writes.py", "recall.py"):  # the exercises' answers (the checks' own t-tests are lab/ttests.py)
            monkeypatch.setattr({"writes.py": writes, "recall.py": recall}[file], attr, refuse)
    for name in checks.CHECKS:
        assert checks.verdict(name, getattr(solutions, name)) == (True, ""), name
        assert checks.verdict(name, getattr(exercises, name)) == (False, "not written yet (the stub raises "
                                                                         "NotImplementedError)"), name
    source = pathlib.Path(checks.__file__).read_text(encoding="utf-8")
    assert "import recall" not in source and "import writes" not in source


@pytest.mark.parametrize("right", [_probe_harmless, _probe_free_intercept])
def test_a_right_probe_written_otherwise_passes(right):
    """The population std, float32, an lstsq solve, or sklearn's unpenalised intercept: all right."""
    assert checks.verdict("probe_accuracy", right) == (True, "")


@pytest.mark.slow
def test_a_hang_is_one_line_naming_the_call(monkeypatch):
    """effective_window as a loop without argument checks never returns at alpha = 0."""
    monkeypatch.setattr(checks, "LIMIT_S", 0.5)
    t0 = time.time()
    passed, message = checks.verdict("effective_window", _window_loop)
    assert passed is False and "effective_window(0.0, 0.9)" in message and "did not return" in message
    passed, message = checks.verdict("binding", lambda acc, N: [time.sleep(0.01) for _ in iter(int, 1)])
    assert passed is False and "binding(" in message and "did not return" in message and time.time() - t0 < 10


def test_a_small_tensor_is_shown_in_full_in_a_crash(monkeypatch):
    def crash(keys, values, slots, T, blank):
        raise IndexError("no")
    passed, message = checks.verdict("mqar_sequence", crash)
    assert "tensor([" in message and "raised IndexError: no" in message
    assert checks._brief(torch.arange(8)) == "tensor([0, 1, 2, 3, 4, 5, 6, 7])"
    assert checks._brief(torch.zeros(3, 3)) == "<tensor (3, 3)>"


@pytest.mark.slow
def test_the_autograder_passes_the_solutions_and_fails_the_stubs_one_line_each():
    """python -m lab.grader FILE: one line per exercise, exit status 0 only when all pass. The solutions
    go through every exercise's process; the stubs through the first, a middle and the last (each stub's
    failure is checked in-process above: here, that a failing child becomes one [FAIL] line in order)."""
    import subprocess
    run = lambda path, *a: subprocess.run([sys.executable, "-m", "lab.grader", path, *a], cwd=ROOT,
                                          capture_output=True, text=True, timeout=300)
    names = list(checks.CHECKS)
    some = [names[0], names[len(names) // 2], names[-1]]
    good, bad = run(os.path.join(LAB, "solutions.py")), run(os.path.join(LAB, "exercises.py"), "--exercises", *some)
    assert good.returncode == 0 and bad.returncode == 1, good.stderr + bad.stderr
    for r, tag, graded in ((good, "[pass]", names), (bad, "[FAIL]", some)):
        lines = [line for line in r.stdout.splitlines() if line.startswith("[")]
        assert [line.split()[1].rstrip(":") for line in lines[:len(graded)]] == graded
        assert all(line.startswith(tag) for line in lines[:len(graded)])
        assert lines[-1].startswith("[read] ANSWER_5C")
    assert "10 of 10 exercises pass" in good.stdout and "0 of 3 exercises pass" in bad.stdout
    assert "not written yet" in bad.stdout and "the stub" in bad.stdout.splitlines()[-2]
    assert not [w for w in WITHHELD if w in good.stdout + bad.stdout]  # every line a student sees
    assert run(os.path.join(LAB, "nowhere.py")).returncode == 2


def test_the_written_answer_counts_bits_right():
    """192 float32 numbers are 6,144 bits (not 3,072: bits are 32 per number)."""
    assert "6,144 bits" in solutions.ANSWER_5C and "3,072" not in solutions.ANSWER_5C
    import jupytext
    text = "\n".join(c.source for c in jupytext.read(os.path.join(LAB, "lab.py")).cells)
    assert "6,144 bits" in text and "3,072" not in text


def test_every_exercise_has_a_solution_and_a_check():
    names = {n for n in vars(exercises) if callable(getattr(exercises, n)) and not n.startswith("_")} - {"torch"}
    assert names == set(checks.CHECKS) <= set(vars(solutions)) and len(names) == 10
    written = [n for n in vars(exercises) if n.startswith("ANSWER_")]
    assert written and all(len(getattr(solutions, n)) > 2 * len(getattr(exercises, n)) for n in written)


def test_a_crash_is_named_by_its_call_and_an_unknown_name_is_not_a_crash(monkeypatch, capsys):
    monkeypatch.delenv("LAB_STRICT", raising=False)
    assert checks.check("effective_window", lambda alpha, mass=0.9: math.log(alpha - alpha)) is False
    assert checks.check("nope", solutions.binding) is False
    crash, unknown = capsys.readouterr().out.splitlines()
    assert crash == "[not yet] effective_window(0.5, 0.5) raised ValueError: math domain error"  # the name once
    assert unknown.startswith("[no such exercise] nope: 'nope' is not one of effective_window, ")


def test_the_solution_window_returns_for_any_decay():
    t0 = time.time()
    assert solutions.effective_window(1e-9) == math.ceil(math.log(0.1) / math.log1p(-1e-9))
    assert solutions.effective_window(1e-300) > 1e300 and time.time() - t0 < 1

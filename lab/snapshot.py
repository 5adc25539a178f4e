"""The stored answers the checks compare with (lab/expected.json), computed here from the
reference implementations, which stay with the instructor: lab.handout leaves this file out, so
the students' copy of checks.py compares with stored numbers and never calls a reference.

    python -m lab.snapshot          # rewrites lab/expected.json (tests/test_lab.py: it is current)

What it stores: the probe's fingerprint (the reference probe's test accuracy on checks._correlated's
fixed data at three ridge strengths, for the docstring's probe, the right alternative (sklearn's
free intercept) and each mistake that checks.PROBE_MISTAKES names); MQAR sequences of recall.mqar
with the keys, values and query slots they hold (exercise 4); recall.binding on a grid (5a); and
random inputs with writes.ema_kv_step's and writes.delta_rule_step's outputs, one step and a
10-token loop from the empty state (writes.ema_kv_ref, writes.delta_rule_ref; exercise 6). Number
lists are written one to a line.
"""
import argparse
import json
import re
import sys

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "lab.snapshot")

import torch

import recall
import writes
from lab import checks

L2 = (1e-3, 0.03, 1.0)  # the fingerprint's settings: the default, and two where the ridge decides
RIGHT = {"docstring": {}, "free intercept": dict(ridge="unpenalised intercept")}
MISTAKES = {"fit on test": dict(fit_on="test"), "no ridge": dict(ridge="none"),
            "l2 ignored": dict(ridge="default"), "l2 I": dict(ridge="l2 I"), "no intercept": dict(intercept=False),
            "raw units": dict(standardise="none"), "own statistics": dict(standardise="own"),
            "all statistics": dict(standardise="all")}


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


def mqar_cases(per_setting=3, K=8, M=16, T=40, seed=0):
    """recall.mqar's sequences at N = 1, 4, 8 (queries right after the pairs or spread), each with
    the keys and values it writes and the position where each pair is asked (its slot)."""
    cases = []
    for N, span in ((1, 0), (4, 4), (8, 0), (8, 8)):
        idx, targets, _ = recall.mqar(per_setting, N, T, K, M, torch.Generator().manual_seed(N + span + 100 * seed),
                                      span)
        for b in range(per_setting):
            keys, values = idx[b, 0:2 * N:2], idx[b, 1:2 * N:2]
            slots = torch.empty(N, dtype=torch.long)
            for p in (targets[b] >= 0).nonzero()[:, 0].tolist():  # which pair each query asks
                slots[(keys == idx[b, p]).nonzero()[0, 0]] = p
            cases.append(dict(N=N, T=T, blank=K + M, keys=keys.tolist(), values=values.tolist(), slots=slots.tolist(),
                              idx=idx[b].tolist(), targets=targets[b].tolist()))
    return cases


def write_cases(D=4, T=10, seed=0):
    """Random inputs (float64) and the reference's outputs: a step of each rule from a random state,
    and the reads of a T-token loop from the empty state."""
    g, f64 = torch.Generator().manual_seed(seed), dict(dtype=torch.float64)
    randn = lambda *shape: torch.randn(*shape, generator=g, **f64)
    ema_steps = []
    for alphas in ((0.5, 0.1, 0.02), (0.3,)):
        S = len(alphas)
        q, k, v, M = randn(D), randn(D), randn(D), randn(S, D, D)
        y, M_new = (t[0, 0] for t in writes.ema_kv_step(q.expand(1, 1, S, D), k[None, None], v[None, None],
                                                        M[None, None], alphas))
        ema_steps.append(dict(alphas=list(alphas), q=q, k=k, v=v, M=M, y=y, M_new=M_new))
    alphas, (q, k, v) = (0.5, 0.1, 0.02), (randn(T, D) for _ in range(3))
    ys = writes.ema_kv_ref(q[None, None, None].expand(1, 1, 3, T, D), k[None, None], v[None, None], alphas)[0, 0]
    ema = dict(steps=ema_steps, loop=dict(alphas=list(alphas), q=q, k=k, v=v, y=ys))
    unit = lambda x: x / x.norm(dim=-1, keepdim=True)
    delta_steps = []
    for beta in (0.7, 0.25):
        q, k, v, M = unit(randn(D)), unit(randn(D)), randn(D), randn(D, D)
        y, M_new = (t[0, 0] for t in writes.delta_rule_step(q[None, None], k[None, None], v[None, None],
                                                            torch.tensor([[beta]], **f64), M[None, None]))
        delta_steps.append(dict(beta=beta, q=q, k=k, v=v, M=M, y=y, M_new=M_new))
    q, k, v, beta = unit(randn(T, D)), unit(randn(T, D)), randn(T, D), torch.rand(T, generator=g, **f64)
    ys = writes.delta_rule_ref(q[None, None], k[None, None], v[None, None], beta[None, None])[0, 0]  # (T, D)
    delta = dict(steps=delta_steps, loop=dict(q=q, k=k, v=v, beta=beta, y=ys))
    lists = lambda x: x.tolist() if torch.is_tensor(x) else {k: lists(v) for k, v in x.items()} if isinstance(
        x, dict) else [lists(v) for v in x] if isinstance(x, list) else x
    return lists(ema), lists(delta)


def snapshot(seed=0):
    """The stored answers as lab/expected.json holds them (seed 0: the notebook's inputs; lab.grader
    computes another seed's, on inputs no file of the handout holds)."""
    data = checks._correlated(seed=seed)
    accs = lambda keywords: [round(ridge_probe(*data, l2, **keywords), 6) for l2 in L2]
    assert [m for m, _ in checks.PROBE_MISTAKES] == list(MISTAKES), "checks.PROBE_MISTAKES and MISTAKES differ"
    acc, pairs = (0.0, 0.203, 0.5, 0.9), (2, 4, 8, 16)
    if seed:
        acc = (0.0, *(round(float(a), 4) for a in torch.rand(3, generator=torch.Generator().manual_seed(seed))))
        pairs = (3, 5, 8, 13)
    ema_kv, delta = write_cases(seed=seed)
    return dict(probe=dict(seed=seed, l2=list(L2), right={k: accs(v) for k, v in RIGHT.items()},
                           mistakes={k: accs(v) for k, v in MISTAKES.items()}),
                mqar_sequence=mqar_cases(seed=seed),
                binding=dict(acc=list(acc), N=list(pairs), values=[[recall.binding(a, N) for a in acc] for N in pairs]),
                ema_kv_step=ema_kv, delta_step=delta)


def dumps(stored):
    """JSON with every innermost list of numbers on one line (a matrix: a line per row)."""
    text = json.dumps(stored, indent=1)
    return re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def main():
    argparse.ArgumentParser(description="Rewrite lab/expected.json from the reference implementations.").parse_args()
    text = dumps(snapshot())  # computed before the file is opened: a Ctrl-C leaves the old one whole
    with open(checks.EXPECTED, "w") as f:
        f.write(text)
    print(f"wrote {checks.EXPECTED}", file=sys.stderr)


if __name__ == "__main__":
    cli.main_guard(main, prog="lab.snapshot")

"""The stored answers the checks compare with (lab/expected.json), computed here from the
reference implementations, which stay with the instructor: lab.handout leaves this file out, so
the students' copy of checks.py compares with stored numbers and holds no reference to call.

    python -m lab.snapshot          # rewrites lab/expected.json (tests/test_lab.py: it is current)

The probe's fingerprint: the reference probe's test accuracy on checks._correlated's fixed data
at three ridge strengths, for the docstring's probe, the right alternative (sklearn's free
intercept) and each mistake that checks.PROBE_MISTAKES names.
"""
import json
import sys

import torch

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


def snapshot():
    """The stored answers as lab/expected.json holds them."""
    data = checks._correlated()
    accs = lambda keywords: [round(ridge_probe(*data, l2, **keywords), 6) for l2 in L2]
    assert [m for m, _ in checks.PROBE_MISTAKES] == list(MISTAKES), "checks.PROBE_MISTAKES and MISTAKES differ"
    return dict(probe=dict(l2=list(L2), right={k: accs(v) for k, v in RIGHT.items()},
                           mistakes={k: accs(v) for k, v in MISTAKES.items()}))


if __name__ == "__main__":
    with open(checks.EXPECTED, "w") as f:
        json.dump(snapshot(), f, indent=1)
        f.write("\n")
    print(f"wrote {checks.EXPECTED}", file=sys.stderr)

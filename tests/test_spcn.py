"""spcn.py: PGHU lowers the prediction error, no autograd anywhere, sparse codes, save/load."""
import pytest
import torch

import grammar
import spcn


pytestmark = pytest.mark.usefixtures("one_thread")


def test_prediction_error_falls_without_autograd(tmp_path):
    model = spcn.SPCN(spcn.SPCNConfig(n_columns=8, column_size=16, k=2))
    assert not any(p.requires_grad for p in model.parameters())
    P0 = model.P.clone()
    errs = model.fit(grammar.sample("A", 400, seed=0), epochs=3, batch_size=32, log=None)
    assert errs[-1] < errs[0] * 0.99, errs
    assert not torch.equal(model.P, P0)  # the feedback weights learned
    assert not any(p.requires_grad for p in model.parameters())
    # held-out error after training is below the untrained model's (zero prediction)
    ids, _, _ = grammar.encode(grammar.sample("A", 100, seed=99))
    fresh = spcn.SPCN(model.cfg)
    assert model.run(ids)[3] < fresh.run(ids)[3]
    with torch.enable_grad():  # even with autograd on, nothing is recorded
        _, r, h, _ = model.run(ids)
    assert not r.requires_grad and not h.requires_grad and model.P.grad is None
    path = str(tmp_path / "spcn.pt")
    spcn.save(model, path)
    again = spcn.load(path)
    a1, r1, h1, _ = model.run(ids)
    a2, r2, h2, _ = again.run(ids)
    assert torch.equal(r1, r2) and torch.equal(h1, h2)


def test_shapes_and_sparsity():
    cfg = spcn.SPCNConfig(n_columns=4, column_size=8, k=3)
    model = spcn.SPCN(cfg)
    ids, _, lengths = grammar.encode(grammar.sample("B", 6, seed=1))
    a, r, h, _ = model.run(ids)
    B, T = ids.shape
    assert a.shape == (B, T, 32) and r.shape == (B, T, 64) and h.shape == (B, T, 3, 64)
    real = ids >= 0
    per_col = a[real].reshape(-1, 4, 8).sum(-1)  # (N, K)
    assert (per_col == 3).all()  # exactly k winners in every column
    assert (a[~real] == 0).all()

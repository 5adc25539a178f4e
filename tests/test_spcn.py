"""spcn.py: PGHU lowers the prediction error, no autograd anywhere, sparse codes, save/load,
bad settings and bad checkpoint files refused with one line, and its training script
(`python probe.py fit`: 0 epochs = untrained)."""
import pathlib
import re
import runpy
import sys

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


@pytest.mark.parametrize("kw,message", [
    (dict(k=9, column_size=8), "--k must be an integer in 1..column_size (8)"),
    (dict(k=0), "--k must be"),
    (dict(n_columns=0), "--n_columns must be"),
    (dict(column_size=-2), "--column_size must be"),
    (dict(alphas=()), "--alphas must be"),
    (dict(alphas=(0.5, 0.0)), "--alphas must be"),
    (dict(alphas=(1.2,)), "--alphas must be"),
    (dict(lr=-1.0), "--lr must be >= 0"),
    (dict(feedback_gain=-1.0), "--feedback_gain must be"),
    (dict(var_rate=0.0), "--var_rate must be")])
def test_bad_config_is_one_line(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        spcn.SPCNConfig(**kw)
    assert "\n" not in str(e.value)


class Pickled:
    """An arbitrary object: torch.load(weights_only=True) refuses to unpickle it."""


def test_load_refuses_missing_corrupt_and_foreign_files(tmp_path):
    with pytest.raises(spcn.LoadError, match="no SPCN checkpoint at"):
        spcn.load(str(tmp_path / "none.pt"))
    (tmp_path / "bad.pt").write_bytes(b"\x00garbage")
    torch.save({"state_dict": {}, "config": {"n_columns": 4, "bogus": 1}}, tmp_path / "foreign.pt")
    small = spcn.SPCN(spcn.SPCNConfig(n_columns=2, column_size=4, k=1))
    ck = {"config": spcn.asdict(spcn.SPCNConfig()), "state_dict": small.state_dict()}
    torch.save(ck, tmp_path / "mismatch.pt")  # weights of another size
    torch.save({"config": Pickled(), "state_dict": {}}, tmp_path / "code.pt")  # unpickling would run code
    for name in ("bad.pt", "foreign.pt", "mismatch.pt", "code.pt"):
        with pytest.raises(spcn.LoadError, match="is not an SPCN checkpoint") as e:
            spcn.load(str(tmp_path / name))
        assert "\n" not in str(e.value)


@pytest.mark.slow
def test_cli_zero_epochs_saves_the_untrained_net_and_bad_flags_write_nothing(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sp"
    monkeypatch.setattr(sys, "argv", ["probe.py", "fit", "--out_dir", str(out), "--n_train", "20", "--epochs", "0",
                                      "--n_columns", "2", "--column_size", "8", "--k", "2"])
    runpy.run_module("probe", run_name="__main__")
    model = spcn.load(str(out / "spcn.pt"))
    assert not model.P.any()  # no PGHU update
    for argv in (["--k", "40"], ["--epochs", "-1"], ["--n_train", "0"], ["--alphas", "0.5", "2"],
                 ["--batch_size", "0"]):
        monkeypatch.setattr(sys, "argv", ["probe.py", "fit", "--out_dir", str(tmp_path / "bad")] + argv)
        with pytest.raises(SystemExit) as e:
            runpy.run_module("probe", run_name="__main__")
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and argv[0] in err[0], (argv, err)
        assert not (tmp_path / "bad").exists()


def test_spcn_is_a_library_that_imports_no_command_line_machinery():
    import ast
    tree = ast.parse(pathlib.Path(spcn.__file__).read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not names & {"cli", "probe", "argparse"}, names

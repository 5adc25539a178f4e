"""probe.py: end to end on a small setting (outputs, JSON keys, traces beat activity), the
untrained control, the fast feature path against its reference, a causal tagger that is
causal, and bad inputs refused with one line before anything is written."""
import json
import os
import runpy
import sys

import pytest
import torch

from plumbing import cli
import grammar
import probe
import spcn


pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--n_train", "120", "--n_val", "40", "--n_test", "60", "--seeds", "1", "--spcn_epochs", "1",
        "--probe_iters", "25", "--gru_epochs", "2", "--n_columns", "4", "--column_size", "16", "--k", "2"]
WHO = ("spcn", "untrained", "gru", "bigru")


def config(tmp_path, *extra):
    return cli.parse(probe.ProbeConfig, probe.get_parser(), ["--out_dir", str(tmp_path)] + TINY + list(extra))


def test_probe_small_run(tmp_path):
    res = probe.main(config(tmp_path))
    for f in ("results.json", "results.md", "roles.png"):
        assert os.path.getsize(tmp_path / f) > 0
    saved = json.load(open(tmp_path / "results.json"))
    assert saved["seeds"] == 1 and saved["seconds"] > 0
    assert list(saved)[:2] == ["command", "settings"] and saved["settings"]["n_train"] == 120  # as its siblings
    assert set(saved["within"]) == {"instantaneous", "traces", "untrained", "gru", "bigru"}
    for group in ("transfer", "deep_embedded", "deep_embedded_within", "content_transfer"):
        assert set(saved[group]) == set(WHO), group
    assert len(saved["roles"]) == 20
    cols = [f"{s}_{w}" for s in ("within", "transfer") for w in WHO]
    for d in saved["roles"].values():
        assert d["kind"] in ("structural", "content")
        assert all(0 <= d[k] <= 1 for k in cols if d[k] == d[k])  # nan: role absent from test
    pe = saved["prediction_error"]
    assert pe["untrained"]["within"] == pytest.approx(2 / 16)  # no prediction: error k / U
    assert pe["spcn"]["within"] < pe["untrained"]["within"]  # PGHU learned to predict
    assert saved["params"]["gru"] < saved["params"]["bigru"]
    assert saved["per_seed"][0]["transfer_gru"]["overall"] == saved["transfer"]["gru"]  # one seed
    md = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert all(name in md for name in probe.WHO.values()) and "rc_verb" in md
    # the point of the experiment: context from traces beats instantaneous activity
    assert res["within"]["traces"] > res["within"]["instantaneous"] + 0.15


def test_zero_epochs_is_the_untrained_control(tmp_path):
    res = probe.main(config(tmp_path, "--spcn_epochs", "0", "--gru_epochs", "1"))
    assert res["within"]["traces"] == res["within"]["untrained"]
    assert res["transfer"]["spcn"] == res["transfer"]["untrained"]
    assert res["prediction_error"]["spcn"]["within"] == pytest.approx(2 / 16)


def test_features_match_the_padded_reference():
    model = spcn.SPCN(spcn.SPCNConfig(n_columns=4, column_size=8, k=2))
    model.fit(grammar.sample("A", 60, seed=0), epochs=1, batch_size=16, log=None)
    ids, roles, _ = grammar.encode(grammar.sample("B", 37, seed=5))
    ref, err_ref = probe.representations(model, ids)
    fast, err = probe.features(model, ids, batch_size=8)
    for kind in ("instantaneous", "traces"):
        x, _ = probe.tokens(ref[kind], roles)
        assert fast[kind].shape == x.shape and torch.allclose(fast[kind], x, atol=1e-6), kind
    assert err == pytest.approx(err_ref, rel=1e-5)


def test_dropping_constant_features_gives_the_same_probe():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 12, generator=g)
    X[:, 3] = 0.0
    X[:, 7] = 2.5  # constant columns
    y = (X[:, 0] + X[:, 1] > 0).long() + 2 * (X[:, 2] > 0.5).long()
    Xt = torch.randn(100, 12, generator=g)  # test rows where the constant columns are not
    fast = probe.fit_probe(X, y, 1e-2, 30, n_classes=4)(Xt)
    ref = probe.fit_probe(X, y, 1e-2, 30, n_classes=4, drop_constant=False)(Xt)
    assert torch.equal(fast, ref)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_causal_tagger_reads_only_the_left_context(bidirectional):
    torch.manual_seed(0)
    tagger = probe.GRUTagger(len(grammar.VOCAB), 8, 8, len(grammar.ROLES), bidirectional)
    ids = torch.randint(0, len(grammar.VOCAB), (2, 9))
    lengths = torch.tensor([9, 9])
    later = ids.clone()
    later[:, 6] = (later[:, 6] + 1) % len(grammar.VOCAB)  # change word 6 only
    with torch.no_grad():
        a, b = tagger(ids, lengths), tagger(later, lengths)
    assert torch.equal(a[:, :6], b[:, :6]) != bidirectional  # causal: words 0..5 unchanged
    assert not torch.equal(a[:, 6:], b[:, 6:])


BAD = [(["--seeds", "0"], "--seeds must be"),
       (["--n_train", "-5"], "--n_train must be"),
       (["--n_test", "0"], "--n_test must be"),
       (["--spcn_epochs", "-1"], "--spcn_epochs must be"),
       (["--k", "33"], "--k must be an integer in 1..column_size (32)"),
       (["--column_size", "-4"], "--column_size must be"),
       (["--n_columns", "0"], "--n_columns must be"),
       (["--alphas", "0.5", "0"], "--alphas must be"),
       (["--alphas", "1.5"], "--alphas must be"),
       (["--alphas", "x"], "--alphas"),
       (["--lr", "-0.1"], "--lr must be"),
       (["--gru_lr", "0"], "--gru_lr must be > 0"),
       (["--l2", "-1"], "--l2 must be"),
       (["--threads", "0"], "--threads must be"),
       (["--load_spcn", "no/such/spcn.pt"], "--load_spcn: no file at no/such/spcn.pt"),
       (["--out_dir", __file__], "is a file; name a folder"),
       (["--quick", "--n_train", "0"], "--n_train must be"),
       (["--quick", "--gru_epochs", "0"], "--gru_epochs must be")]


@pytest.mark.parametrize("argv,message", BAD)
@pytest.mark.slow
def test_bad_flags_one_line_nothing_written(tmp_path, monkeypatch, capsys, argv, message):
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["probe.py", "--out_dir", str(out)] + argv)
    with pytest.raises(SystemExit) as e:
        runpy.run_module("probe", run_name="__main__")
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and message in err[0], err
    assert not out.exists()


@pytest.mark.slow
def test_corrupt_spcn_file_one_line_nothing_written(tmp_path, monkeypatch, capsys):
    bad, out = tmp_path / "spcn.pt", tmp_path / "out"
    bad.write_bytes(b"not a checkpoint")
    monkeypatch.setattr(sys, "argv", ["probe.py", "--out_dir", str(out), "--load_spcn", str(bad)])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("probe", run_name="__main__")
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code not in (0, None) and len(err) == 1, err
    assert f"{bad} is not an SPCN checkpoint" in err[0]
    assert not out.exists()


def test_quick_mode_is_a_preset_under_the_typed_flags_and_the_full_run_stays_the_default():
    assert probe.parse([]) == probe.ProbeConfig()  # the full command is unchanged: 3 seeds, 2000 sentences
    quick = probe.parse(["--quick"])
    assert all(getattr(quick, k) == v for k, v in probe.QUICK.items()) and quick.seeds == 1
    assert probe.parse(["--quick", "--seeds", "2"]).seeds == 2  # a typed flag wins over the preset


def test_quick_mode_says_what_it_trades_and_prints_its_verdict(tmp_path, capsys):
    res = probe.main(config(tmp_path, "--quick"))
    out = capsys.readouterr().out
    assert out.startswith(probe.QUICK_TRADES) and "verdict: within A, instantaneous" in out
    line, holds = probe.verdict(res)
    assert line in out and holds == (res["within"]["traces"] - res["within"]["instantaneous"] >= probe.LIFT)
    fake = {"within": {"instantaneous": 0.527, "traces": 0.998, "untrained": 0.998}}
    assert probe.verdict(fake)[1] and not probe.verdict({"within": dict(fake["within"], traces=0.8)})[1]

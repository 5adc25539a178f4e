"""Tests for ngram.py: the n-gram yardsticks against a hand computation and the plain-loop
reference (values, the held-out lam, chunked counting), and their baselines.json cache behind
`python data.py --baselines`. CPU, offline."""
import functools
import json
import math
import os

import numpy as np
import pytest

import cli
import data
import ngram


def _cli(argv):
    """data.py's command line, in-process: parse (bad flags exit 2) and run (bad data exit 1)."""
    return data.main(cli.parse(data.DataConfig, data.get_parser(), argv))


def test_yardsticks_by_hand():
    # V = 5, add-one: train 0 1 0 1 2 has c = (2, 2, 1, 0, 0), N = 5, p_uni = (c + 1) / 10;
    # bigrams (0,1) x2, (1,0), (1,2): c(0) = 2, c(1) = 2, c(2) = c(3) = 0.
    counts = ngram.ngram_counts(np.array([0, 1, 0, 1, 2]), vocab_size=5)
    assert counts["unigram"].tolist() == [2, 2, 1, 0, 0] and counts["context"].tolist() == [2, 2, 0, 0, 0]
    assert counts["keys"].tolist() == [0 * 5 + 1, 1 * 5 + 0, 1 * 5 + 2]  # v * V + w, sorted
    assert counts["pairs"].tolist() == [2, 1, 1]
    p_uni, p_ml = ngram.token_probs(counts, np.array([0, 1, 3, 2]))
    assert np.allclose(p_uni, [0.3, 0.3, 0.1, 0.2])
    # 0: first token, unigram; 1|0: 2/2; 3|1: 0/2; 2|3: c(3) = 0, so the unigram alone
    assert np.allclose(p_ml, [0.3, 1.0, 0.0, 0.2])
    lam = 0.5
    by_hand = -(math.log(0.3) + math.log(0.5 * 1 + 0.5 * 0.3) + math.log(0.5 * 0 + 0.5 * 0.1)
                + math.log(0.2)) / 4
    assert ngram.mixture_nll(p_uni, p_ml, lam) == pytest.approx(by_hand, rel=1e-12)
    assert ngram.mixture_nll(p_uni, p_ml, 0.0) == pytest.approx(
        -(2 * math.log(0.3) + math.log(0.1) + math.log(0.2)) / 4, rel=1e-12)
    assert ngram.bigram_nll_reference([0, 1, 0, 1, 2], [0, 1, 3, 2], lam, vocab_size=5) == pytest.approx(by_hand)
    # lam on a held-out slice with two bigram terms (a_i = p_ml, b_i = p_uni): the minimum of
    # -log(lam a1 + (1-lam) b1) - log(lam a2 + (1-lam) b2) is lam = -(d1 b2 + d2 b1) / (2 d1 d2), d = a - b
    pu, pm = np.array([0.2, 0.1, 0.4]), np.array([0.2, 0.9, 0.05])
    d1, d2, b1, b2 = 0.8, -0.35, 0.1, 0.4
    assert ngram.best_lambda(pu, pm) == pytest.approx(-(d1 * b2 + d2 * b1) / (2 * d1 * d2), abs=1e-5)


def test_yardsticks_match_the_reference_and_never_fit_on_val(monkeypatch):
    rng = np.random.default_rng(0)
    V = 7
    walk = np.cumsum(rng.integers(0, 3, size=400)) % V  # a bigram-friendly stream
    train, val = walk[:300].astype(np.uint16), walk[300:].astype(np.uint16)
    val[5] = 6 if val[4] != 6 else 5  # a few bigrams unseen in train
    r = ngram.ngram_yardsticks(train, val, vocab_size=V)
    lam = r["bigram_lambda"]
    ref = functools.partial(ngram.bigram_nll_reference, train.tolist(), val.tolist(), vocab_size=V)
    assert r["bigram"] == pytest.approx(ref(lam), rel=1e-10)
    assert r["unigram"] == pytest.approx(ref(0.0), rel=1e-10)
    assert 0 < lam < 1 and r["bigram"] < r["unigram"]
    # lam is the held-out minimum: counts on the first 270 train tokens, scored on the last 30
    held = [ngram.bigram_nll_reference(train[:270].tolist(), train[270:].tolist(), g, V)
            for g in np.linspace(0, 1, 1001)]
    assert lam == pytest.approx(np.argmin(held) / 1000, abs=2e-3)
    # val is never looked at for lam
    assert ngram.ngram_yardsticks(train, val[::-1].copy(), vocab_size=V)["bigram_lambda"] == lam
    # chunked counting (pairs across chunk seams included) equals one pass
    monkeypatch.setattr(ngram, "COUNT_CHUNK", 7)
    chunked, whole = ngram.ngram_counts(train, V), None
    monkeypatch.setattr(ngram, "COUNT_CHUNK", 1 << 24)
    whole = ngram.ngram_counts(train, V)
    assert all(np.array_equal(chunked[k], whole[k]) for k in ("unigram", "context", "keys", "pairs"))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ngram.ngram_counts(np.array([0, 9]), vocab_size=V)
    with pytest.raises(ValueError, match="give more text"):
        ngram.ngram_yardsticks(train[:5], val, vocab_size=V)


def test_baselines_cli_json_and_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"text": f"the cat sat on mat {i % 3} and the dog sat"}) + "\n"
                           for i in range(40)))
    argv = ["--dataset", f"files:{src}", "--cache_dir", str(tmp_path / "c"), "--baselines"]
    out = _cli(argv)
    printed = json.loads(capsys.readouterr().out)  # stdout holds only the JSON
    assert printed == out["baselines"]
    assert {"unigram", "bigram", "bigram_lambda", "train_tokens", "val_tokens"} <= set(printed)
    assert printed["vocab"] == 50257 and printed["bigram"] < printed["unigram"]
    train = np.fromfile(os.path.join(out["folder"], "train.bin"), dtype=np.uint16)
    val = np.fromfile(os.path.join(out["folder"], "val.bin"), dtype=np.uint16)
    expect = ngram.ngram_yardsticks(train, val)
    assert printed["bigram"] == expect["bigram"] and printed["train_tokens"] == len(train)
    # a second call reads baselines.json; a rebuilt cache recomputes
    real = ngram.ngram_yardsticks
    monkeypatch.setattr(ngram, "ngram_yardsticks", lambda *a: pytest.fail("recomputed a cached yardstick"))
    assert ngram.baselines(f"files:{src}", str(tmp_path / "c")) == printed
    calls = []
    monkeypatch.setattr(ngram, "ngram_yardsticks", lambda *a: calls.append(1) or real(*a))
    data.prepare(f"files:{src}", cache_dir=str(tmp_path / "c"), force=True)
    assert ngram.baselines(f"files:{src}", str(tmp_path / "c"))["bigram"] == printed["bigram"] and calls == [1]
    with pytest.raises(ValueError, match="no 'train' split"):
        ngram.baselines("c4", str(tmp_path / "c"))
    with pytest.raises(SystemExit):  # checked before the (offline) hub is asked for c4
        _cli(["--dataset", "c4", "--baselines", "--cache_dir", str(tmp_path)])
    assert "no 'train' split" in capsys.readouterr().err

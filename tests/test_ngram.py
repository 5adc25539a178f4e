"""Tests for plumbing/ngram.py: the n-gram yardsticks against a hand computation and the plain-loop
reference (values, the held-out lam, chunked counting), and their baselines.json cache behind
`python data.py --baselines`. CPU, offline."""
import functools
import json
import math
import os

import numpy as np
import pytest

from plumbing import cli, corpus, ngram, sources
import data


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
    assert ngram.ngram_nll_reference([0, 1, 0, 1, 2], [0, 1, 3, 2], lam, vocab_size=5) == pytest.approx(by_hand)
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
    ref = functools.partial(ngram.ngram_nll_reference, train.tolist(), val.tolist(), vocab_size=V)
    assert r["bigram"] == pytest.approx(ref(lam), rel=1e-10)
    assert r["trigram"] == pytest.approx(ref(lam, r["trigram_mu"]), rel=1e-10)
    assert r["unigram"] == pytest.approx(ref(0.0), rel=1e-10)
    assert 0 < lam < 1 and r["bigram"] < r["unigram"]
    # lam is the held-out minimum: counts on the first 270 train tokens, scored on the last 30
    held = [ngram.ngram_nll_reference(train[:270].tolist(), train[270:].tolist(), g, 0.0, V)
            for g in np.linspace(0, 1, 1001)]
    assert lam == pytest.approx(np.argmin(held) / 1000, abs=2e-3)
    # val is never looked at for lam
    flipped = ngram.ngram_yardsticks(train, val[::-1].copy(), vocab_size=V)
    assert (flipped["bigram_lambda"], flipped["trigram_mu"]) == (lam, r["trigram_mu"])
    # chunked counting (pairs across chunk seams included) equals one pass
    monkeypatch.setattr(ngram, "COUNT_CHUNK", 7)
    chunked = ngram.ngram_counts(train, V, order=3)
    monkeypatch.setattr(ngram, "COUNT_CHUNK", 1 << 24)
    whole = ngram.ngram_counts(train, V, order=3)
    assert set(chunked) == set(whole) and all(np.array_equal(chunked[k], whole[k]) for k in whole if k != "n")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ngram.ngram_counts(np.array([0, 9]), vocab_size=V)
    with pytest.raises(cli.UserError, match="give more text"):
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
    assert corpus.baselines(f"files:{src}", str(tmp_path / "c")) == printed
    calls = []
    monkeypatch.setattr(ngram, "ngram_yardsticks", lambda *a: calls.append(1) or real(*a))
    corpus.prepare(f"files:{src}", cache_dir=str(tmp_path / "c"), force=True)
    assert corpus.baselines(f"files:{src}", str(tmp_path / "c"))["bigram"] == printed["bigram"] and calls == [1]
    with pytest.raises(sources.DataUnavailable, match="no 'train' split"):
        corpus.baselines("c4", str(tmp_path / "c"))
    with pytest.raises(SystemExit):  # checked before the (offline) hub is asked for c4
        _cli(["--dataset", "c4", "--baselines", "--cache_dir", str(tmp_path)])
    assert "no 'train' split" in capsys.readouterr().err


def test_trigram_by_hand():
    # V = 5: train 0 1 0 1 2 has trigrams (0,1,0), (1,0,1), (0,1,2), so c(0,1) = 2, c(1,0) = 1
    counts = ngram.ngram_counts(np.array([0, 1, 0, 1, 2]), vocab_size=5, order=3)
    assert counts["tri_keys"].tolist() == [0 * 25 + 1 * 5 + 0, 0 * 25 + 1 * 5 + 2, 1 * 25 + 0 * 5 + 1]
    assert counts["triples"].tolist() == [1, 1, 1]
    assert counts["tri_context_keys"].tolist() == [0 * 5 + 1, 1 * 5 + 0] and counts["tri_context"].tolist() == [2, 1]
    val = np.array([0, 1, 2, 1, 0])
    p_uni, p_ml = ngram.token_probs(counts, val)
    assert np.allclose(p_uni, [0.3, 0.3, 0.2, 0.3, 0.3]) and np.allclose(p_ml, [0.3, 1.0, 0.5, 0.3, 0.5])
    p_bi = 0.5 * p_ml + 0.5 * p_uni                           # 0.3, 0.65, 0.35, 0.3, 0.4
    # 2|(0,1): c(0,1,2) / c(0,1) = 1/2; (1,2) and (2,1) open no trigram: the bigram alone
    assert np.allclose(ngram.trigram_probs(counts, val, p_bi), [0.3, 0.65, 0.5, 0.3, 0.4])
    by_hand = -(math.log(0.3) + math.log(0.65) + math.log(0.5 * 0.5 + 0.5 * 0.35) + math.log(0.3)
                + math.log(0.4)) / 5
    assert ngram.mixture_nll(p_bi, ngram.trigram_probs(counts, val, p_bi), 0.5) == pytest.approx(by_hand)
    assert ngram.ngram_nll_reference([0, 1, 0, 1, 2], val.tolist(), 0.5, 0.5, vocab_size=5) == pytest.approx(by_hand)


def _counted(train, V):
    """Plain dictionaries of n-gram counts, counted one position at a time."""
    c = [dict(), dict(), dict()]
    for i in range(len(train)):
        for n in (1, 2, 3):
            if i + n <= len(train):
                gram = tuple(train[i:i + n])
                c[n - 1][gram] = c[n - 1].get(gram, 0) + 1
    ctx2, ctx3 = {}, {}  # c(v) and c(u, v) as the number of bigrams / trigrams they open
    for (v, _), k in c[1].items():
        ctx2[v] = ctx2.get(v, 0) + k
    for (u, v, _), k in c[2].items():
        ctx3[u, v] = ctx3.get((u, v), 0) + k
    return c, ctx2, ctx3, len(train), V


def _losses(counted, seq, lam, mu):
    """Per-token -log p of seq under the unigram, bigram and trigram, by explicit loops."""
    (c1, c2, c3), ctx2, ctx3, N, V = counted
    out = [[], [], []]
    for i, w in enumerate(seq):
        p1 = (c1.get((w,), 0) + 1) / (N + V)
        p2 = p1
        if i >= 1 and ctx2.get(seq[i - 1], 0):
            p2 = lam * c2.get((seq[i - 1], w), 0) / ctx2[seq[i - 1]] + (1 - lam) * p1
        p3 = p2
        if i >= 2 and ctx3.get((seq[i - 2], seq[i - 1]), 0):
            p3 = mu * c3.get((seq[i - 2], seq[i - 1], w), 0) / ctx3[seq[i - 2], seq[i - 1]] + (1 - mu) * p2
        for j, p in enumerate((p1, p2, p3)):
            out[j].append(-math.log(p))
    return [sum(x) / len(x) for x in out]


def test_bytes_baselines_cli_match_a_hand_count(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "café"]
    rng = np.random.default_rng(1)
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"text": " ".join(rng.choice(words, 12))}) + "\n" for _ in range(30)))
    out = _cli(["--dataset", f"files:{src}", "--cache_dir", str(tmp_path / "c"), "--tokenizer", "bytes",
                "--baselines"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out["baselines"] and printed["vocab"] == 256 and printed["tokenizer"] == "bytes"
    train = np.fromfile(os.path.join(out["folder"], "train.bin"), dtype=np.uint16).tolist()
    val = np.fromfile(os.path.join(out["folder"], "val.bin"), dtype=np.uint16).tolist()
    # the bytes of the rows, each followed by NUL, rows 0, 10, 20 in val
    rows = [json.loads(line)["text"].encode() + b"\0" for line in src.read_text().splitlines()]
    assert bytes(val) == rows[0] + rows[10] + rows[20] and len(train) == sum(map(len, rows)) - len(val)
    # lam then mu: grid minima of the held-out loss (counts on the first 90% of train)
    cut = round(len(train) * 0.9)
    held = _counted(train[:cut], 256)
    grid = np.linspace(0, 1, 501)
    lam = grid[np.argmin([_losses(held, train[cut:], g, 0.0)[1] for g in grid])]
    mu = grid[np.argmin([_losses(held, train[cut:], lam, g)[2] for g in grid])]
    assert printed["bigram_lambda"] == pytest.approx(lam, abs=3e-3)
    assert printed["trigram_mu"] == pytest.approx(mu, abs=3e-3)
    # the three val losses, counted on all of train, at the printed weights
    uni, bi, tri = _losses(_counted(train, 256), val, printed["bigram_lambda"], printed["trigram_mu"])
    assert (printed["unigram"], printed["bigram"], printed["trigram"]) == pytest.approx((uni, bi, tri), rel=1e-9)
    assert printed["trigram"] < printed["bigram"] < printed["unigram"] < math.log(256)


def test_compressor_yardsticks_by_hand():
    import bz2
    import lzma
    import zlib
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes()
    text = b"the cat sat on the mat and the dog sat on the log\0" * 400
    for data in (noise, text):
        y = ngram.compressor_yardsticks(data)
        sizes = dict(zlib=len(zlib.compress(data, 9)), bz2=len(bz2.compress(data, 9)),
                     lzma=len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)))
        assert y["compressed_bytes"] == sizes and y["compressed_of"] == len(data)
        for k, n in sizes.items():
            assert y[k] == pytest.approx(8 * math.log(2) * n / len(data), rel=1e-12)
    # random bytes cannot be compressed below ln 256 nats/byte; repeated text goes far below the unigram
    assert all(ngram.compressor_yardsticks(noise)[k] > math.log(256) for k in ngram.COMPRESSORS)
    assert all(ngram.compressor_yardsticks(text)[k] < 0.1 for k in ngram.COMPRESSORS)
    # a byte split (uint16 ids, as the cache stores them) is read as the same bytes
    assert ngram.compressor_yardsticks(np.frombuffer(text, dtype=np.uint8).astype(np.uint16)) == \
        ngram.compressor_yardsticks(text)
    assert ngram.nats_per_byte(1, 8) == pytest.approx(math.log(2))
    for bad in (lambda: ngram.compressor_yardsticks(b""), lambda: ngram.as_bytes(np.array([300])),
                lambda: ngram.nats_per_byte(5, 0)):
        with pytest.raises(cli.UserError):
            bad()
    assert ngram.compressor_line({"zlib": 1.5, "lzma": 1.25}) == "zlib 1.500, lzma 1.250 nats/byte"
    assert ngram.compressor_line({"bigram": 2.0}) == ""


def test_bytes_baselines_hold_the_compressors_of_the_val_bytes_and_an_old_cache_is_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"text": f"row {i}: the cat sat on the mat"}) + "\n" for i in range(30)))
    name, cache = f"files:{src}", str(tmp_path / "c")
    y = corpus.baselines(name, cache, tokenizer="bytes")
    folder = corpus.cache_folder(name, cache_dir=cache, tokenizer="bytes")
    val = np.fromfile(os.path.join(folder, "val.bin"), dtype=np.uint16)
    assert y["compressed_of"] == len(val) and bytes(val.astype(np.uint8)).count(b"\0") == 3  # NULs counted
    assert {k: y[k] for k in ngram.COMPRESSORS} == \
        {k: v for k, v in ngram.compressor_yardsticks(bytes(val.astype(np.uint8))).items() if k in ngram.COMPRESSORS}
    assert "zlib" not in corpus.baselines(name, cache)  # gpt2 ids are not bytes: n-grams only
    # a baselines.json written before the compressors (no 'compressors' in its key) is recomputed
    path = os.path.join(folder, "baselines.json")
    old = json.load(open(path))
    del old["key"]["compressors"]
    old["result"] = {k: v for k, v in old["result"].items() if k not in ngram.COMPRESSORS}
    json.dump(old, open(path, "w"))
    assert corpus.baselines(name, cache, tokenizer="bytes") == y

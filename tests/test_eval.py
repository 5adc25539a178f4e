"""train.py --eval_only: the protocol of the reported perplexities (contiguous non-overlapping
windows, each token counted once) for every corpus of a comma list, and yardsticks only from
caches that exist. Tiny SPEN (1 block, width 32, T=16), one training step on builtin.
Run: python -m pytest tests/test_eval.py
"""
import json
import math

import numpy as np
import pytest
import torch

from plumbing import checkpoint, corpus, evaluate
import train

TINY = ["--preset", "cpu", "--device", "cpu", "--dtype", "fp32", "--n_layer", "1", "--n_embd", "32",
        "--block_size", "16", "--batch_size", "2", "--eval_iters", "1", "--warmup_iters", "1"]


def write_corpus(folder, words):
    folder.mkdir()
    for i in range(12):  # documents 0 and 10 go to val
        (folder / f"{i}.txt").write_text(" ".join(f"w{i}x{j}" for j in range(words)))
    return f"files:{folder}"


@torch.no_grad()
def reference_loss(model, val, T, n):
    """Mean next-token loss over windows [kT, kT + L] of the first n tokens, one window at a time."""
    total = 0.0
    for s in range(0, n - 1, T):
        L = min(T, n - 1 - s)
        w = torch.from_numpy(np.asarray(val[s:s + L + 1], dtype=np.int64))[None]
        total += model(w[:, :-1], w[:, 1:])[1].item() * L
    return total / (n - 1)


def test_eval_only_scores_each_corpus_over_every_token_once(tmp_path, forget_cache):
    train.main(train.parse_args(TINY + ["--out_dir", str(tmp_path / "run"), "--max_iters", "1",
                                        "--eval_interval", "1"]))
    ck = str(tmp_path / "run" / "ckpt_last.pt")
    files = write_corpus(tmp_path / "docs", 20)
    forget_cache(files)
    cap = 300  # builtin's val holds 47k tokens: its first 300; the small corpus's val is read whole
    train.cli_main(["--eval_only", "--init_from", ck, "--eval_data", f"builtin,{files}", "--eval_tokens",
                    str(cap), "--batch_size", "4", "--out_dir", str(tmp_path / "ev")])
    saved = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert list(saved["results"]) == ["builtin", files] and saved["init_from"] == ck
    model, _ = checkpoint.load_model(ck)
    for name, r in saved["results"].items():
        val = corpus.load_split(name, "val")
        n = min(len(val), cap)
        p = r["protocol"]
        assert p["tokens_counted"] == n - 1 and p["windows"] == math.ceil((n - 1) / 16) and p["block_size"] == 16
        assert p["split_tokens"] == len(val) and p["eval_tokens"] == cap
        assert r["val_loss"] == pytest.approx(reference_loss(model, val, 16, n), rel=1e-5)
        assert r["perplexity"] == pytest.approx(math.exp(r["val_loss"]))
        assert r["yardsticks"]["bigram"] < r["yardsticks"]["unigram"]  # both caches exist and are small
    assert len(corpus.load_split(files, "val")) < cap  # so the small corpus was scored whole: n - 1


def test_yardsticks_come_only_from_caches_that_exist(tmp_path):
    name = write_corpus(tmp_path / "fresh", 5)
    cfg = train.make_config("cpu", data=name, cache_dir=str(tmp_path / "cache"))
    folder = corpus.cache_folder(name, cache_dir=str(tmp_path / "cache"))
    assert evaluate.count_yardsticks(cfg, name) is None  # auto: no cache, nothing built or counted
    assert not (tmp_path / "cache").exists()
    got = evaluate.count_yardsticks(train.make_config("cpu", data=name, cache_dir=str(tmp_path / "cache"),
                                                      yardsticks="count"), name)
    assert got["bigram"] < got["unigram"] and (tmp_path / "cache").exists()  # asked for: prepared and counted
    assert evaluate.count_yardsticks(cfg, name) == got  # auto now: the cache exists
    assert evaluate.count_yardsticks(train.make_config("cpu", data=name, yardsticks="off"), name) is None
    assert folder.startswith(str(tmp_path / "cache"))


def test_cache_dir_and_max_tokens_read_data_py_s_cache_and_ids_are_checked_on_entry(tmp_path):
    name, cache = write_corpus(tmp_path / "docs", 40), str(tmp_path / "cache")
    built = corpus.prepare(name, max_tokens=500, cache_dir=cache, num_proc=1, progress=0)  # python data.py ...
    cfg = train.make_config("cpu", data=name, cache_dir=cache, max_tokens=500, block_size=16)
    tokens, vals = evaluate.load_data(cfg, vocab=50257)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [built.rsplit("/", 1)[-1]]  # no second build
    assert len(tokens) == 500 and list(vals) == [name]
    with pytest.raises(train.cli.UserError, match="vocabulary"):
        evaluate.load_data(cfg, vocab=256)  # a BPE cache for a byte model: refused where data enters

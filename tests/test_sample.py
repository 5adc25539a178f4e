"""sample.py as a specification: it prints text and tokens/s, the same seed gives the same text,
SPEN's state is constant per generated token (state readers) while caches grow, bad inputs are
one line and a non-zero exit, and nothing is written.

Tiny checkpoints (1 block, width 32, T=16, 2 steps on the offline 'builtin' corpus) are made
once with train.main; sample.py runs in-process through sample.cli_main(argv).
Run: python -m pytest tests/test_sample.py
"""
import os
import re

import pytest
import torch

import sample
import train
from spen import SPEN, SPENConfig

TINY = dict(device="cpu", dtype="fp32", n_layer=1, n_embd=32, block_size=16, batch_size=2, eval_iters=2,
            max_iters=2, eval_interval=2, log_interval=1, warmup_iters=1)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """{'spen': path, 'gpt': path} of two tiny train.py checkpoints."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for kind in ("spen", "gpt"):
        train.main(train.make_config("cpu", model=kind, out_dir=str(root / kind), **TINY))
        out[kind] = str(root / kind / "ckpt_best.pt")
    return out


def run(ckpt, *flags):
    return sample.cli_main(["--init_from", ckpt, "--device", "cpu", *map(str, flags)])


def test_prints_text_and_speed_and_the_same_seed_gives_the_same_text(ckpts, capsys):
    a = run(ckpts["spen"], "--start", "The function", "--num_samples", 2, "--max_new_tokens", 12, "--seed", 7)
    out = capsys.readouterr().out
    assert "tokens/s" in out and a["tokens_per_second"] > 0
    assert all(t.startswith("The function") and t in out for t in a["texts"])
    assert [len(s) for s in a["samples"]] == [len(a["prompt"]) + 12] * 2
    assert a["samples"][0] != a["samples"][1]  # one generator across samples: each draw differs
    b = run(ckpts["spen"], "--start", "The function", "--num_samples", 2, "--max_new_tokens", 12, "--seed", 7)
    c = run(ckpts["spen"], "--start", "The function", "--num_samples", 2, "--max_new_tokens", 12, "--seed", 8)
    assert b["samples"] == a["samples"] and c["samples"] != a["samples"]


def test_a_byte_level_checkpoint_reads_and_writes_utf8(ckpts, tmp_path, capsys):
    train.main(train.make_config("cpu", model="spen", tokenizer="bytes", out_dir=str(tmp_path / "b"), **TINY))
    ck = str(tmp_path / "b" / "ckpt_best.pt")
    r = run(ck, "--start", "<|endoftext|>déf", "--max_new_tokens", 30, "--num_samples", 2, "--seed", 3)
    assert r["prompt"] == [0, *"déf".encode("utf-8")]  # the separator is NUL; é is two bytes
    assert all(0 <= i < 256 for s in r["samples"] for i in s)
    for ids, text in zip(r["samples"], r["texts"]):  # invalid UTF-8 (likely from 2 training steps) -> U+FFFD
        assert text == bytes(ids).decode("utf-8", errors="replace") and text.startswith("\0déf")
    assert r["texts"][0] in capsys.readouterr().out
    assert sample.ByteCodec().decode([0xC3, 0xA9, 0xFF]) == "é\ufffd"


def test_greedy_sampling_is_the_argmax_continuation(ckpts):
    r = run(ckpts["spen"], "--start", "IDS:50256,464", "--temperature", 0, "--num_samples", 2, "--max_new_tokens", 5)
    assert r["samples"][0] == r["samples"][1]  # temperature 0 ignores the generator
    model, _ = sample.checkpoint.load_model(ckpts["spen"])
    ids = list(r["prompt"])
    for _ in range(5):  # the full forward pass, re-run on the growing sequence
        ids.append(int(model(torch.tensor([ids]))[0][0, -1].argmax()))
    assert r["samples"][0] == ids


def test_spen_state_is_constant_per_generated_token_and_caches_grow(ckpts, capsys):
    r = run(ckpts["spen"], "--start", "IDS:50256,464,2163", "--max_new_tokens", 20, "--num_samples", 1)
    assert r["state_sizes"] == [1 * 3 * 32] * 20  # n_layer x S traces x C, whatever the position
    assert "constant over 20 generated tokens" in capsys.readouterr().out
    # the measurement can fail: a history reader's cache and GPT's KV cache grow every token
    torch.manual_seed(0)
    hist = SPEN(SPENConfig(n_layer=2, n_embd=32, predictor="softmax_attn", reads="history")).eval()
    sizes = sample.state_sizes(hist, torch.tensor([50256, 464, 2163, 11]))
    assert [b - a for a, b in zip(sizes, sizes[1:])] == [2 * 2 * 3 * 32] * 3  # k, v of S slots per layer
    g = run(ckpts["gpt"], "--start", "IDS:50256", "--max_new_tokens", 6, "--num_samples", 1)
    assert [b - a for a, b in zip(g["state_sizes"], g["state_sizes"][1:])] == [2 * 1 * 32] * 5
    assert "GPT KV cache: grows" in capsys.readouterr().out


def test_gpt_generates_past_its_block_size(ckpts):
    r = run(ckpts["gpt"], "--max_new_tokens", 24, "--num_samples", 1)  # block_size 16: the cache is rebuilt
    assert len(r["samples"][0]) == 1 + 24


def test_writes_nothing(ckpts, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Return the")
    before = sorted(os.listdir(tmp_path))
    run(ckpts["spen"], "--start", f"FILE:{prompt}", "--max_new_tokens", 3, "--num_samples", 1)
    assert sorted(os.listdir(tmp_path)) == before


# Each row: the flags, a fragment of the one-line error, the exit status. {tmp} is tmp_path.
BAD_INPUTS = [
    (["--temperature", "-1"], "--temperature must be", 2),
    (["--temperature", "nan"], "--temperature must be", 2),
    (["--top_k", "-1"], "--top_k must be", 2),
    (["--top_k", "2.5"], "invalid int value", 2),
    (["--max_new_tokens", "0"], "--max_new_tokens must be", 2),
    (["--num_samples", "0"], "--num_samples must be", 2),
    (["--start", ""], "--start is empty", 2),
    (["--device", "tpu"], "--device must be auto, cpu, cuda, cuda:N or mps", 2),
    (["--dtype", "int8"], "invalid choice", 2),
    (["--start", "FILE:{tmp}/missing.txt"], "cannot read it as UTF-8 text", 1),
    (["--start", "FILE:{tmp}/empty.txt"], "the file is empty", 1),
    (["--start", "FILE:{tmp}/latin1.txt"], "cannot read it as UTF-8 text", 1),
    (["--start", "IDS:50300"], "outside [0, 50257)", 1),
    (["--start", "IDS:-1"], "outside [0, 50257)", 1),
    (["--start", "IDS:1,,2"], "IDS: takes comma-separated integers", 1),
    (["--init_from", "{tmp}/missing.pt"], "not found", 1),
    (["--init_from", "{tmp}/corrupt.pt"], "is corrupt or not a train.py checkpoint", 1),
]
if not torch.cuda.is_available():
    BAD_INPUTS.append((["--device", "cuda"], "sees no CUDA GPU", 2))
if not torch.backends.mps.is_available():
    BAD_INPUTS.append((["--device", "mps"], "MPS (Apple GPU) is not available", 2))


@pytest.mark.parametrize("flags,message,status", BAD_INPUTS, ids=[" ".join(r[0]) for r in BAD_INPUTS])
def test_bad_input_is_one_line_and_a_non_zero_exit(ckpts, tmp_path, capsys, flags, message, status):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "corrupt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit) as exc:
        sample.cli_main(["--init_from", ckpts["spen"], "--device", "cpu", "--max_new_tokens", "2"]
                        + [f.format(tmp=tmp_path) for f in flags])
    cap = capsys.readouterr()
    assert exc.value.code == status, cap.err
    assert message in cap.err and cap.err.count("\n") == 1 and "Traceback" not in cap.err, cap.err
    assert cap.out == ""  # nothing printed (or generated) before the inputs are checked


def test_gpt2_offline_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        sample.cli_main(["--init_from", "gpt2", "--device", "cpu", "--max_new_tokens", "1", "--num_samples", "1"])
    except SystemExit as exc:
        err = capsys.readouterr().err
        assert exc.code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "--init_from gpt2" in err and "HF_HUB_OFFLINE=1 is set" in err
    else:
        pytest.skip("GPT-2 is in the local Hugging Face cache: it loads offline")


@pytest.mark.parametrize("predictor, reads", [("ema_kv", "state"), ("delta", "state"), ("linear_attn", "history"),
                                              ("linear", "state")])
def test_the_state_line_splits_the_number_it_prints(predictor, reads):
    """The write readers and linear_attn's history sums hold a state of their own beyond the traces:
    the split printed adds it, so it multiplies out to the number printed and measured."""
    torch.manual_seed(0)
    model = SPEN(SPENConfig(n_layer=2, n_embd=32, predictor=predictor, reads=reads)).eval()
    sizes = sample.state_sizes(model, torch.tensor([50256, 464, 2163]))
    line = sample.describe_state(model, sizes)
    m = re.search(r"([\d,]+) numbers per sequence \((\d+) x \(?(\d+) x (\d+)(?: \+ ([\d,]+)\))?:", line)
    total, L, S, C, own = (int((g or "0").replace(",", "")) for g in m.groups())
    assert total == sizes[0] == L * (S * C + own) and (own > 0) == (predictor != "linear"), line


def test_a_checkpoint_is_read_once(ckpts, monkeypatch):
    """The tokenizer lookup and the model share one torch.load of the checkpoint."""
    loads, real_load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: loads.append(str(f)) or real_load(f, *a, **k))
    run(ckpts["spen"], "--start", "IDS:50256", "--max_new_tokens", 2, "--num_samples", 1)
    assert loads == [ckpts["spen"]]

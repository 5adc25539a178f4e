"""train.py: CLI smoke, exact resume, NaN guard, bad checkpoints, the 130m guard, eval_only, DDP.

Tiny SPEN (1 block, width 32, T=16) on the offline 'builtin' corpus, in-process through
main(get_parser().parse_args([...])), except the two-process gloo DDP run (a subprocess).
Run: python -m pytest tests/test_train.py   (~30-60 s on 2 CPU cores; the first run also
tokenizes the builtin corpus into .cache/data)
"""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import train
from spen import SPEN, SPENConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--preset", "cpu", "--device", "cpu", "--dtype", "fp32", "--n_layer", "1", "--n_embd", "32",
        "--block_size", "16", "--batch_size", "2", "--eval_iters", "2", "--log_interval", "1",
        "--warmup_iters", "2", "--lr", "3e-3"]


def run(out_dir, *extra):
    return train.main(train.get_parser().parse_args(TINY + ["--out_dir", str(out_dir), *map(str, extra)]))


def records(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_presets_and_flags_resolve_in_order():
    p = train.get_parser()
    a, _ = train.resolve(p.parse_args([]))
    assert a.preset == "130m" and a.n_embd == 768 and a.eval_data == "c4" and a.max_iters == 15259
    assert a.batch_size * a.block_size * a.grad_accum == 524288  # ~0.5M tokens per step
    assert a.max_iters * 524288 >= 8e9 > (a.max_iters - 1) * 524288  # 8B tokens
    a, _ = train.resolve(p.parse_args(["--preset", "cpu", "--n_layer", "2", "--no-compile"]))
    assert (a.data, a.n_layer, a.n_embd, a.compile) == ("builtin", 2, 128, False)  # flag > preset > default
    a, _ = train.resolve(p.parse_args(["--preset", "cpu"]), saved={"n_layer": 7, "lr": 1.0})
    assert (a.n_layer, a.lr) == (7, 1.0)  # a resumed run keeps its own settings
    lrs = [train.get_lr(s, a) for s in range(a.max_iters + 1)]
    assert max(lrs) == pytest.approx(a.lr) and lrs[-1] == pytest.approx(a.min_lr)


def test_cli_smoke_writes_outputs_and_eval_only_agrees(tmp_path):
    out = tmp_path / "run"
    res = run(out, "--max_iters", 4, "--eval_interval", 2)
    assert {"val_loss", "params", "tokens", "seconds", "out_dir"} <= set(res)
    assert res["tokens"] == 4 * 2 * 16 and res["params"] > 50304 * 32
    for name in ("log.txt", "metrics.jsonl", "ckpt_last.pt", "ckpt_best.pt"):
        assert (out / name).exists(), name
    log = (out / "log.txt").read_text()
    assert "argv:" in log and "git:" in log and f"params: {res['params']:,}" in log and "tok/s" in log
    recs = records(out)
    assert [r["step"] for r in recs if "train_loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in recs if "val_loss" in r] == [0, 2, 4]
    assert all(math.isfinite(r["train_loss"]) for r in recs if "train_loss" in r)
    assert recs[0]["val_loss"] == pytest.approx(math.log(50304), abs=0.5)  # untrained: ~uniform
    assert recs[-1]["val_loss"] < recs[0]["val_loss"] - 0.02  # 4 updates already lower it (by 0.03)
    ck = torch.load(out / "ckpt_last.pt", weights_only=True)
    assert ck["step"] == 4 and ck["kind"] == "spen" and SPENConfig(**ck["config"]).n_embd == 32
    assert not list(out.glob("*.tmp"))  # atomic writes leave no temp files

    # --eval_only on the checkpoint: same fixed validation batches -> the same loss as training's last eval
    ev = train.main(train.get_parser().parse_args(
        ["--eval_only", "--init_from", str(out / "ckpt_last.pt"), "--out_dir", str(tmp_path / "ev")]))
    saved = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert saved["val_loss"] == pytest.approx(res["val_loss"], rel=1e-6) == pytest.approx(ev["val_loss"])
    assert saved["perplexity"] == pytest.approx(math.exp(saved["val_loss"]))


def test_resume_is_exact(tmp_path):
    # Dropout on, so the restored RNG state matters too; the cosine spans 6 steps in both runs.
    common = ["--dropout", 0.1, "--eval_interval", 3, "--lr_decay_iters", 6]
    straight = run(tmp_path / "a", *common, "--max_iters", 6)
    run(tmp_path / "b", *common, "--max_iters", 3)
    resumed = run(tmp_path / "b", *common, "--max_iters", 6, "--resume")
    la = [r["train_loss"] for r in records(tmp_path / "a") if "train_loss" in r]
    lb = [r["train_loss"] for r in records(tmp_path / "b") if "train_loss" in r]
    assert len(la) == 6 and la == lb  # bit-identical, not merely close
    assert resumed["val_loss"] == straight["val_loss"] and resumed["tokens"] == straight["tokens"]
    sa = torch.load(tmp_path / "a" / "ckpt_last.pt", weights_only=True)["model"]
    sb = torch.load(tmp_path / "b" / "ckpt_last.pt", weights_only=True)["model"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # resuming a finished run with the same --max_iters does nothing and keeps its numbers
    again = run(tmp_path / "b", *common, "--max_iters", 6, "--resume")
    assert again["val_loss"] == straight["val_loss"] and len(records(tmp_path / "b")) == len(records(tmp_path / "a"))


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    class NaNAfter(SPEN):
        """SPEN whose training loss turns NaN from the 5th training forward on."""
        calls = 0

        def forward(self, idx, targets=None):
            logits, loss = super().forward(idx, targets)
            if self.training:
                NaNAfter.calls += 1
                if NaNAfter.calls >= 5:
                    loss = loss * float("nan")
            return logits, loss

    monkeypatch.setitem(train.MODELS, "spen", (SPENConfig, NaNAfter))
    with pytest.raises(SystemExit, match="non-finite loss") as exc:
        run(tmp_path, "--max_iters", 10, "--eval_interval", 3)
    assert "\n" not in str(exc.value) and "ckpt_last.pt" in str(exc.value)
    ck = torch.load(tmp_path / "ckpt_last.pt", weights_only=True)
    assert ck["step"] == 3  # the checkpoint from the last eval before the NaN, intact
    assert all(torch.isfinite(v).all() for v in ck["model"].values())
    assert max(r["step"] for r in records(tmp_path)) == 4  # iteration 5 was not recorded or applied


def test_bad_checkpoints_give_one_line_errors(tmp_path):
    run(tmp_path, "--max_iters", 1, "--eval_interval", 1)
    with pytest.raises(SystemExit, match="differs from the checkpoint"):
        run(tmp_path, "--max_iters", 2, "--resume", "--n_embd", 64)
    (tmp_path / "ckpt_last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit, match="corrupt") as exc:
        run(tmp_path, "--max_iters", 2, "--resume")
    assert "\n" not in str(exc.value)
    ck = torch.load(tmp_path / "ckpt_best.pt", weights_only=True)
    ck["config"]["n_embd"] = 64  # weights of width 32 under a width-64 config
    torch.save(ck, tmp_path / "mismatch.pt")
    with pytest.raises(SystemExit, match="does not match") as exc:
        run(tmp_path, "--eval_only", "--init_from", tmp_path / "mismatch.pt")
    assert "\n" not in str(exc.value)
    with pytest.raises(SystemExit, match="not found"):
        run(tmp_path, "--eval_only", "--init_from", tmp_path / "missing.pt")


def test_eval_only_gpt2_path_and_gpt_training(tmp_path, monkeypatch):
    # The hub is offline here: stand a tiny random GPT in for GPT.from_pretrained('gpt2').
    from gpt import GPT, GPTConfig
    tiny = GPT(GPTConfig(block_size=8, n_layer=1, n_head=1, n_embd=16, vocab_size=50257))
    monkeypatch.setattr(train.GPT, "from_pretrained", classmethod(lambda cls, name: tiny))
    ev = run(tmp_path / "g2", "--eval_only", "--init_from", "gpt2", "--eval_data", "builtin")
    saved = json.loads((tmp_path / "g2" / "eval.json").read_text())
    assert saved["kind"] == "gpt" and saved["val_loss"] == ev["val_loss"]
    assert saved["tokens"] == 2 * 2 * 8  # eval_iters x batch x block, block capped at the model's 8
    assert abs(saved["val_loss"] - math.log(50257)) < 0.5
    res = run(tmp_path / "gpt", "--model", "gpt", "--max_iters", 2, "--eval_interval", 2)
    assert res["kind"] == "gpt" and math.isfinite(res["val_loss"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_130m_preset_without_cuda_points_to_cpu_preset():
    with pytest.raises(SystemExit, match="--preset cpu"):
        train.main(train.get_parser().parse_args([]))


def test_ddp_two_process_gloo_smoke(tmp_path):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", "train.py",
           *TINY, "--grad_accum", "2", "--max_iters", "3", "--eval_interval", "3", "--out_dir", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    recs = records(out)
    assert [r["step"] for r in recs if "train_loss" in r] == [1, 2, 3]
    assert "x 2 process" in (out / "log.txt").read_text()
    assert (out / "log.txt").read_text().count("argv:") == 1  # only rank 0 logs
    assert torch.load(out / "ckpt_last.pt", weights_only=True)["step"] == 3


def test_bad_dataset_is_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="unknown dataset 'nope'; choose one of builtin") as exc:
        run(tmp_path / "a", "--data", "nope")
    assert "\n" not in str(exc.value)
    with pytest.raises(SystemExit, match="'c4' has no split 'train'"):  # c4 is validation-only
        run(tmp_path / "b", "--data", "c4")

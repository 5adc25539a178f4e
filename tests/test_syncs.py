"""train.py's step waits for the device once: the host-sync count (every forward checks its ids,
without a read), and a failed torch.compile that falls back to eager with one warning line.

Syncs are counted by patching the Tensor methods that read a value back to the host (item,
__int__, __float__, __bool__, __index__, tolist) during tiny CPU runs (1 block, width 32, T=16).
Run: python -m pytest tests/test_syncs.py
"""
import collections
import json
import os
import sys

import torch

import lm
from plumbing import runtime
import train

TINY = ["--preset", "cpu", "--device", "cpu", "--dtype", "fp32", "--n_layer", "1", "--n_embd", "32",
        "--block_size", "16", "--batch_size", "2", "--eval_iters", "2", "--log_interval", "1",
        "--warmup_iters", "2", "--lr", "3e-3", "--grad_accum", "2", "--eval_interval", "100"]
READS = ("item", "__int__", "__float__", "__bool__", "__index__", "tolist")


def counted_run(out_dir, steps, monkeypatch):
    """train.main for `steps` steps; (host reads of tensor values by caller, token checks)."""
    calls, checks = collections.Counter(), []
    for name in READS:
        orig = getattr(torch.Tensor, name)

        def read(self, *a, _orig=orig, _name=name, **k):
            f = sys._getframe(1)
            # AdamW keeps its step counters on the CPU by design (no device sync) and reads them here
            if not (f.f_code.co_name == "_get_value" and "optim" in f.f_code.co_filename):
                calls[(_name, os.path.basename(f.f_code.co_filename), f.f_code.co_name)] += 1
            return _orig(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, read)
    real_check = lm.check_tokens
    monkeypatch.setattr(lm, "check_tokens", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    train.main(train.parse_args(TINY + ["--out_dir", str(out_dir), "--max_iters", str(steps)]))
    monkeypatch.undo()
    return calls, len(checks)


def test_one_host_sync_per_step_though_every_forward_checks_its_ids(tmp_path, monkeypatch):
    short, checks_short = counted_run(tmp_path / "a", 2, monkeypatch)
    long, checks_long = counted_run(tmp_path / "b", 5, monkeypatch)
    extra = long - short  # the same setup and two evaluations in both: 3 more steps of 2 micro-batches
    assert sum(extra.values()) == 3, extra  # one read per step, logging every step included
    assert set(extra) == {("tolist", "train.py", "train")}, extra
    assert checks_long - checks_short == 3 * 2  # every micro-batch's forward checked its ids, with no read


def test_a_failing_compile_warns_once_and_trains_eagerly(tmp_path, monkeypatch):
    def broken_compile(model, *a, **k):
        def call(*args, **kw):
            raise RuntimeError("InductorError: CppCompileError: C compiler not found\nsecond line")
        return call
    monkeypatch.setattr(torch, "compile", broken_compile)
    out = tmp_path / "c"
    res = train.main(train.parse_args(TINY + ["--out_dir", str(out), "--max_iters", "2", "--compile"]))
    log = (out / "log.txt").read_text()
    warnings = [ln for ln in log.splitlines() if ln.startswith("warning: torch.compile failed")]
    assert len(warnings) == 1 and "C compiler not found second line" in warnings[0], log
    assert res["step"] == 2
    steps = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]
    eager = train.main(train.parse_args(TINY + ["--out_dir", str(tmp_path / "e"), "--max_iters", "2"]))
    assert eager["val_loss"] == res["val_loss"]  # the probe step left no trace (gradients, RNG)


def test_rates_skip_the_warm_up_steps():
    speed = runtime.Speed(start=10)
    for s in range(11, 11 + runtime.WARMUP_STEPS):
        assert speed.tick(s) >= 0  # the step's own time is always returned
    assert speed.avg is None and speed.timed_steps == 0  # compile / warm-up steps are not timed
    speed.tick(11 + runtime.WARMUP_STEPS)
    assert speed.timed_steps == 1 and speed.avg is not None

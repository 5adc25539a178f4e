"""A stop within seconds, whatever --grad_accum or --eval_iters is: SIGTERM (what `timeout` and a
scheduler send; Ctrl-C is the same runtime.StopFlag) is honoured between micro-batches and between
evaluation batches, so a tiny model with 100,000 micro-batches per step, or 100,000 evaluation
batches, ends within a few seconds at the last consistent state: ckpt_last at the last completed
step (an interrupted evaluation pending in it), and the folder resumes (--resume evaluates the
pending step first: its record comes once, with its val_loss). Real processes."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

pytestmark = pytest.mark.slow  # process-level: outside the `-m "not slow"` loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--preset", "cpu_bytes", "--n_layer", "1", "--n_embd", "16", "--batch_size", "2", "--block_size", "32",
        "--device", "cpu", "--out_dir", "out"]
SLOW = {  # what makes one unit of the loop last hours, and the line in log.txt after which the signal comes
    "a step of 100,000 micro-batches": (["--grad_accum", "100000", "--eval_iters", "1", "--max_iters", "2"],
                                        "val loss"),
    "an evaluation of 100,000 batches": (["--grad_accum", "1", "--eval_iters", "100000", "--max_iters", "2"],
                                         "spen: "),
}


def run(tmp_path, *argv, wait=True):
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *TINY, *argv], cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    if wait:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    return p


def logged(tmp_path, text, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if text in (tmp_path / "out" / "log.txt").read_text():
                return
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in log.txt after {timeout} s")


@pytest.mark.parametrize("slow", list(SLOW))
def test_sigterm_ends_a_slow_run_within_seconds_and_it_resumes(slow, tmp_path):
    argv, after = SLOW[slow]
    p = run(tmp_path, *argv, wait=False)
    logged(tmp_path, after)
    time.sleep(1.0)  # inside the slow unit
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    took = time.time() - t0
    assert p.returncode == 130 and "Traceback" not in err and "interrupted: saved" in out, (out, err)
    assert took < 10, took
    ckpt = torch.load(tmp_path / "out" / "ckpt_last.pt", weights_only=True)
    assert ckpt["step"] == 0  # the last completed step; the half step (or evaluation) is dropped
    run(tmp_path, "--resume", "--grad_accum", "1", "--eval_iters", "1", "--max_iters", "1", "--eval_interval", "1")
    recs = [json.loads(ln) for ln in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1] and all("val_loss" in r for r in recs), recs

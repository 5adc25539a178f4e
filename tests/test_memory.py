"""Sizes that cannot fit are refused before the run (plumbing/runtime.py check_memory): `--n_embd 65536` (an
embedding and blocks of hundreds of GiB) and `--batch_size 1048576` (terabytes of logits and
activations) are one line with the estimate, exit 2, before any allocation or write; the estimate
is a floor (below what a small run really takes), and `--no-memory_check` lets a user who knows
better run anyway."""

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

import train
from plumbing import cli, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENS = (np.arange(4000) % 256, np.arange(2000) % 256)
TOO_BIG = {"--n_embd 65536": dict(n_embd=65536), "--batch_size 1048576": dict(batch_size=1048576)}


@pytest.mark.parametrize("what", list(TOO_BIG))
def test_a_size_that_cannot_fit_is_refused_before_anything_is_allocated(what, tmp_path):
    out = tmp_path / "o"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux: the peak so far
    with pytest.raises(cli.ConfigError) as e:
        train.main(train.make_config("cpu_bytes", out_dir=str(out), **TOO_BIG[what]), tokens=TOKENS)
    msg = str(e.value)
    assert "\n" not in msg and "GiB" in msg and "--no-memory_check" in msg, msg
    assert not out.exists()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 512 * 1024  # no GiB-sized allocation


def test_the_estimate_is_a_floor_and_the_flag_overrides_it(tmp_path, monkeypatch):
    cfg = train.make_config("cpu_bytes", n_layer=1, n_embd=16, max_iters=2, eval_interval=2, eval_iters=1,
                            out_dir=str(tmp_path / "a"))
    est = runtime.check_memory(train.model_config(cfg), cfg.batch_size, cfg.block_size, "cpu")
    assert 0 < est["total"] < 2 ** 30 and est["total"] == sum(v for k, v in est.items() if k != "total")
    monkeypatch.setattr(runtime, "memory_capacity", lambda device: (est["total"] - 1, "a small machine"))
    with pytest.raises(cli.ConfigError, match="a small machine"):
        train.main(cfg, tokens=TOKENS)
    res = train.main(train.make_config("cpu_bytes", n_layer=1, n_embd=16, max_iters=2, eval_interval=2, eval_iters=1,
                                       out_dir=str(tmp_path / "b"), memory_check=False), tokens=TOKENS)
    assert res["step"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("what", list(TOO_BIG))
def test_a_size_that_cannot_fit_as_a_command(what, tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--preset", "cpu_bytes", *what.split(),
                        "--out_dir", "out"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "GiB" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_an_address_space_limit_is_the_capacity(tmp_path):
    """Under `ulimit -v` (RLIMIT_AS) a size the machine could hold but the limit cannot is one line and exit 2,
    not the allocator's traceback from inside the model's constructor."""
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2 ** 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--preset", "cpu_bytes", "--n_embd", "4096",
                        "--out_dir", "out"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT), preexec_fn=limited)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "ulimit -v" in r.stderr, r.stderr[-500:]
    assert os.listdir(tmp_path) == []

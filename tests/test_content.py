"""Tests for content.py: the probe of tiny trained runs writes content.json and content.png and
decodes the current token far better than the token 64 steps back from the fast (a = 0.5)
trace; the ridge probe decodes a linear code and not noise; no runs is a one-line error."""
import json
import os
import subprocess
import sys

import pytest
import torch

from plumbing import cli
import content
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, kw in (("linear", dict(model="spen")), ("gpt", dict(model="gpt"))):
            train.main(train.make_config("cpu", out_dir=str(runs / f"{name}_s0"), max_iters=2, n_layer=1,
                                         n_embd=32, block_size=80, batch_size=2, eval_iters=1, eval_interval=2,
                                         **kw))
    finally:
        torch.set_num_threads(n)
    return runs


def test_content_probe_on_tiny_runs(tiny_runs, tmp_path):
    out = tmp_path / "content"
    cfg = cli.build(content.ContentConfig, runs=str(tiny_runs), out_dir=str(out), probe_seqs=24, top_k=8,
                    probe_json="does/not/exist.json")
    content.main(cfg)
    res = json.loads((out / "content.json").read_text())
    assert res["lags"] == list(range(65)) and set(res["raw"]) == {"0.5", "0.1", "0.02", "all"}
    fast = res["raw"]["0.5"]
    assert fast[0] > fast[64] + 0.3, (fast[0], fast[64])  # a(1-a)^64 ~ 3e-20: nothing left
    assert set(res["models"]) == {"linear", "gpt"} and res["embedding"].startswith("linear")
    assert len(res["models"]["gpt"]["layers"]) == 2  # embedding + 1 block
    assert "absent" in res["role_accuracy_note"]
    assert os.path.getsize(out / "content.png") > 1000


def test_ridge_probe_recovers_a_linear_code():
    """Classes written as orthogonal one-hot features are decoded perfectly; noise is not."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 5, (400, 1), generator=g)
    X = torch.nn.functional.one_hot(y[:, 0], 5).float() + 0.01 * torch.randn(400, 5, generator=g)
    rows = torch.arange(400) < 300
    acc, chance = content.ridge_probe(X, torch.cat([y, torch.randint(0, 5, (400, 1), generator=g)], 1), rows)
    assert acc[0] == 1.0 and acc[1] < 0.5 and 0.15 < chance[0] < 0.45


@pytest.mark.slow
def test_no_runs_is_one_line_naming_the_command(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "content.py", "--runs", str(tmp_path / "none" / "runs"),
                        "--out_dir", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "python ablate.py --out_dir" in p.stderr
    assert not out.exists()

"""The way to the first step is short: one `python train.py` run builds its model once and runs the model's
config checks (spen.check, which the model's constructor calls) once, however many places need the model's
sizes (the memory check, the header) or its settings (the flags, --resume's identity). Counted in-process by
wrapping the model class and its check; results/bench/path_to_backward.txt holds the path's length."""

import numpy as np

import spen
import train
from plumbing import checkpoint

TINY = ["--preset", "cpu_bytes", "--device", "cpu", "--n_layer", "1", "--n_embd", "16", "--block_size", "16",
        "--batch_size", "2", "--max_iters", "1", "--eval_iters", "1", "--yardsticks", "off"]


def test_one_run_builds_and_checks_its_model_once(tmp_path, monkeypatch):
    calls = {"built": 0, "checked": 0}

    class Counted(spen.SPEN):
        def __init__(self, cfg):
            calls["built"] += 1
            super().__init__(cfg)

    def check(cfg, real=spen.check):
        calls["checked"] += 1
        return real(cfg)

    monkeypatch.setitem(checkpoint.MODELS, "spen", (spen.SPENConfig, Counted))
    monkeypatch.setattr(spen, "check", check)
    tokens = np.arange(4000) % 256, np.arange(2000) % 256
    res = train.main(train.parse_args(TINY + ["--out_dir", str(tmp_path / "run")]), tokens=tokens)
    assert res["step"] == 1 and calls == {"built": 1, "checked": 1}

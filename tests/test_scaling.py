"""Tests for scaling.py: log-spaced evaluation steps; a curve trained in segments is the run
trained in one go (constant lr, exact resume); a rerun reuses the finished points; the
crossover and the gap extrapolation on curves whose answer is known; scaling.json keeps a
recorded curve whose run folder is gone, and refuses a record of other settings or a corrupt one;
bad settings are one line."""
import json
import math
import os

import pytest
import torch

from plumbing import cli
import scaling
import train

TINY = dict(models=("gpt", "linear"), widths=(32,), n_layer=1, block_size=32, batch_size=2, max_tokens=64 * 6,
            first_tokens=64 * 2, points=3, eval_iters=1, warmup_iters=2)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("scaling"))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=out, **TINY))
    finally:
        torch.set_num_threads(n)
    return out, res


def test_eval_steps_are_log_spaced_and_distinct():
    cfg = cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu")
    steps = scaling.eval_steps(cfg)
    assert steps == sorted(set(steps)) and steps[-1] * scaling.tokens_per_step(cfg) == pytest.approx(1e7, rel=1e-3)
    ratios = [b / a for a, b in zip(steps, steps[1:])]
    assert max(ratios) / min(ratios) < 1.3  # equal steps in log D, up to rounding


@pytest.mark.slow
def test_outputs_and_segments_equal_one_run(tiny_run, tmp_path):
    out, res = tiny_run
    saved = json.load(open(os.path.join(out, "scaling.json")))
    assert set(saved["curves"]) == {"gpt_c32", "linear_c32"} and saved["eval_steps"] == [2, 3, 6]
    for c in saved["curves"].values():
        assert [p["step"] for p in c["points"]] == [0, 2, 3, 6] and c["params"] > 0
        assert c["points"][-1]["tokens"] == 6 * 64 and c["points"][-1]["train_loss"] > 0
        assert [r["step"] for r in c["copy"]] == [2, 3, 6]  # the copy split at every point after step 0
        assert all(r["loss_other"] > 0 and 0 <= r["copy_fraction"] < 1 for r in c["copy"])
    assert "gpt - linear at width 32" in saved["crossovers"]
    for f in ("scaling.md", "scaling.png"):
        assert os.path.getsize(os.path.join(out, f)) > 500
    # the same run in one go (no segments) ends at the same validation loss: the lr is constant
    cfg = cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=str(tmp_path), **TINY)
    once = train.main(scaling.run_config(cfg, "linear", 32, 6))
    assert once["val_loss"] == pytest.approx(saved["curves"]["linear_c32"]["points"][-1]["val_loss"], abs=1e-6)


def test_rerun_reuses_the_finished_points(tiny_run, capsys):
    out, first = tiny_run
    again = scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=out, **TINY))
    assert " step " not in capsys.readouterr().out.split("# Where")[0]  # no segment was trained
    assert again["curves"] == first["curves"]
    # --no-train with a larger budget only reports the runs as they are
    report = scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=out,
                                    **dict(TINY, max_tokens=64 * 60), train=False))
    assert " step " not in capsys.readouterr().out.split("# Where")[0] and report["curves"] == first["curves"]


def test_scaling_json_keeps_curves_whose_run_folders_are_gone(tiny_run, tmp_path):
    out, first = tiny_run
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "scaling.json").write_text(json.dumps(first))  # as committed, on a fresh clone: no runs/
    report = scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=str(copy),
                                    **dict(TINY, models=("linear",)), train=False))
    assert report["curves"] == first["curves"] and report["crossovers"] == first["crossovers"]
    before = (copy / "scaling.json").read_text()
    with pytest.raises(cli.UserError, match="--lr"):
        scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=str(copy), **dict(TINY, lr=1e-2)))
    assert (copy / "scaling.json").read_text() == before and not (copy / "runs").exists()  # nothing mixed or trained
    (copy / "scaling.json").write_text('{"settings": {}')  # cut short
    with pytest.raises(cli.UserError, match="is not a scaling record"):
        scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=str(copy), **TINY))


def test_crossover_and_extrapolation_on_known_curves():
    d = [1e3, 1e4, 1e5, 1e6]
    spen = [3.0, 2.5, 2.2, 2.0]
    gpt = [3.2, 2.6, 2.1, 1.8]  # above, above, below: crosses between 1e4 and 1e5
    x = scaling.crossover(list(zip(d, gpt)), list(zip(d, spen)))
    # gap +0.1 at 1e4, -0.1 at 1e5: zero halfway in log D
    assert x == pytest.approx(10 ** 4.5, rel=1e-6)
    assert scaling.crossover(list(zip(d, spen)), list(zip(d, gpt))) is None  # the other way: the gap only opens
    early = [2.9, 2.6, 2.1, 1.8]  # below at 1e3 (noise at init), above at 1e4, below from then on
    assert scaling.crossover(list(zip(d, early)), list(zip(d, spen))) == pytest.approx(10 ** 4.5, rel=1e-6)
    assert scaling.crossover(list(zip(d, [3.2, 2.6, 2.1, 2.1])), list(zip(d, spen))) is None  # above at the end
    gap = [0.4, 0.3, 0.2, 0.1]  # closes 0.1 per decade: zero at 1e7
    e = scaling.extrapolate_gap(list(zip(d, [2 + g for g in gap])), list(zip(d, [2.0] * 4)), frac=1.0)
    assert e["tokens_at_zero"] == pytest.approx(1e7, rel=1e-6)
    assert e["slope_per_efold"] == pytest.approx(-0.1 / math.log(10)) and e["gap_last"] == pytest.approx(0.1)
    wide = scaling.extrapolate_gap(list(zip(d, [2 + 0.1 * i for i in range(4)])), list(zip(d, [2.0] * 4)))
    assert wide["tokens_at_zero"] is None  # a widening gap points nowhere


@pytest.mark.parametrize("overrides, message", [
    (dict(models=("gpt", "lstm")), "--models must be names from"),
    (dict(first_tokens=2e7), "need 0 < --first_tokens < --max_tokens"),
    (dict(points=1), r"--points must be an integer in \[2, "),
    (dict(block_size=1), r"--block_size must be an integer in \[2, "),
])
def test_bad_settings_are_config_errors(overrides, message, tmp_path):
    with pytest.raises(cli.ConfigError, match=message):
        cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=str(tmp_path / "o"), **overrides)
    assert not (tmp_path / "o").exists()


def test_gpu_presets_build_the_runs_they_name():
    for name in ("gpu_130m", "gpu_sweep"):
        cfg = cli.build(scaling.ScalingConfig, scaling.PRESETS, name)
        tc = scaling.run_config(cfg, "linear", cfg.widths[-1], scaling.eval_steps(cfg)[-1])
        assert tc.min_lr == tc.lr and tc.tokenizer == "gpt2" and tc.device == "cuda"
        assert scaling.eval_steps(cfg)[-1] * scaling.tokens_per_step(cfg) == pytest.approx(cfg.max_tokens, rel=0.01)
    cfg = cli.build(scaling.ScalingConfig, scaling.PRESETS, "gpu_130m")
    assert scaling.tokens_per_step(cfg) == 524288 and cfg.widths == (768,) and cfg.n_layer == 12

"""Tests for scaling.py: log-spaced evaluation steps; a curve trained in segments is the run
trained in one go (constant lr, exact resume); a rerun reuses the finished points; the
crossover and the gap extrapolation on curves whose answer is known; scaling.json keeps a
recorded curve whose run folder is gone, and refuses a record of other settings or a corrupt one;
bad settings are one line."""
import dataclasses
import json
import math
import os

import pytest
import torch

from plumbing import cli, corpus
import scaling
import train

TINY = dict(models=("gpt", "linear"), widths=(32,), n_layer=1, block_size=32, batch_size=2, max_tokens=64 * 6,
            first_tokens=64 * 2, points=3, eval_iters=1, warmup_iters=2, cooldown=0.5)  # the branch: steps 3 -> 6


@pytest.fixture(scope="module", autouse=True)
def small_data(small_corpus):
    TINY["data"] = small_corpus  # every run of this module trains and scores on conftest's small corpus


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
    curve = saved["curves"]["linear_c32"]
    assert once["val_loss"] == pytest.approx(curve["points"][-1]["val_loss"], abs=1e-6)
    # the whole val split scored at every point; the cooldown branch leaves the trunk at step 3
    assert [r["step"] for r in curve["scores"]] == [2, 3, 6] and len(curve["machines"]) == 1
    val_bytes = len(corpus.load_split(TINY["data"], "val", tokenizer="bytes"))
    assert all(r["targets"] == val_bytes - 1 and r["windows"] == -(-(val_bytes - 1) // 32) for r in curve["scores"])
    cool = curve["cooldown"]
    assert cool["start_step"] == 3 and [p["step"] for p in cool["points"]] == [6] and cool["scores"][0]["step"] == 6
    # the branch is the run trained in one go with the lr falling linearly to 0 over steps 3..5
    annealed = train.main(dataclasses.replace(scaling.run_config(cfg, "linear", 32, 6), cooldown_iters=3,
                                              out_dir=str(tmp_path / "annealed")))
    assert annealed["val_loss"] == pytest.approx(cool["points"][0]["val_loss"], abs=1e-6) != once["val_loss"]
    windows = json.load(open(os.path.join(out, "windows.json")))["linear_c32"]
    assert windows["trunk"]["step"] == 6 and windows["cooldown"]["step"] == 6
    assert sum(windows["cooldown"]["loss"]) / sum(windows["cooldown"]["n"]) == pytest.approx(cool["scores"][0]["all"])


def test_rerun_reuses_the_finished_points(tiny_run, capsys):
    out, first = tiny_run
    again = scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=out, **TINY))
    assert " step " not in capsys.readouterr().out.split("# Where")[0].replace("its step", "")  # no segment trained
    assert again["curves"] == first["curves"]
    # --no-train with a larger budget only reports the runs as they are
    report = scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=out,
                                    **dict(TINY, max_tokens=64 * 60), train=False))
    trunks = lambda res: {k: {f: v for f, v in c.items() if f != "cooldown"} for k, c in res["curves"].items()}
    assert " step " not in capsys.readouterr().out.split("# Where")[0] and trunks(report) == trunks(first)
    assert not any("cooldown" in c for c in report["curves"].values())  # the branch of a 6-step budget is not this one's


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


def test_window_scores_equal_a_per_byte_loop():
    """The whole split, target by target: each predicted from its window's earlier tokens alone,
    a copy when the k tokens before it and it occurred earlier in its window, binned by distance."""
    import numpy as np
    import torch.nn.functional as F
    from plumbing import repeats
    from spen import SPEN, SPENConfig
    torch.manual_seed(0)
    model = SPEN(SPENConfig(vocab_size=5, block_size=8, n_layer=1, n_embd=16, n_head=2, ffn_hidden=32, ffn_topk=4))
    val = np.random.default_rng(0).integers(0, 2, size=45).astype(np.uint16)  # 2 symbols: many copies
    T, k, bins = 8, 2, (2, 4)
    s = repeats.window_scores(model, val, T, k, bins=bins)
    want = dict(n=[0] * 6, loss=[0.0] * 6, copy_n=[0] * 6, copy_loss=[0.0] * 6)
    want_bins = [([0] * 6, [0.0] * 6) for _ in range(3)]  # distances 1, 2-3, 4+
    for i in range(1, len(val)):  # every token but the first is a target once
        w, w0 = (i - 1) // T, (i - 1) // T * T
        with torch.no_grad():
            logits, _ = model(torch.tensor(val[w0:i].astype(np.int64))[None])
        nll = -F.log_softmax(logits[0, -1].double(), -1)[int(val[i])].item()
        js = [j for j in range(i - 1, w0 + k - 1, -1) if i - k >= w0 and list(val[j - k:j + 1]) == list(val[i - k:i + 1])]
        want["n"][w] += 1
        want["loss"][w] += nll
        if js:
            d = i - js[0]
            want["copy_n"][w] += 1
            want["copy_loss"][w] += nll
            b = 0 if d < 2 else 1 if d < 4 else 2
            want_bins[b][0][w] += 1
            want_bins[b][1][w] += nll
    assert s["n"] == want["n"] and s["copy_n"] == want["copy_n"] and sum(want["copy_n"]) > 5
    assert s["loss"] == pytest.approx(want["loss"], abs=1e-3) and s["copy_loss"] == pytest.approx(want["copy_loss"], abs=1e-3)
    assert s["bin_n"] == [n for n, _ in want_bins] and s["bins"] == [[1, 2], [2, 4], [4, None]]
    assert s["bin_loss"] == [pytest.approx(l, abs=1e-3) for _, l in want_bins]
    t = repeats.score_totals(s)
    assert t["targets"] == 44 and t["windows"] == 6 and t["all"] == pytest.approx(sum(want["loss"]) / 44, abs=1e-4)


def test_relay_passes_a_step_line_a_minute_with_an_eta(monkeypatch, capsys):
    clock = iter([0.0, 0.0, 30.0, 61.0, 62.0])  # the Relay's start, then one time per step line
    monkeypatch.setattr(scaling.time, "time", lambda: next(clock))
    relay = scaling.Relay("delta C=128", last=1010)
    relay.write("eval line\nstep     10 | loss 2.5000 | lr 2.00e-03\nstep     20 | loss 2.4")  # a line in two writes
    relay.write("000 | lr 2.00e-03\nstep     30 | loss 2.3000 | lr\nstep     40 | loss 2.2000 | lr\n")
    out = capsys.readouterr().out.splitlines()
    assert out == ["  delta C=128 step 30/1,010 | loss 2.3000 | eta 49.8 min"]  # 20 steps in 61 s: 980 x 3.05 s

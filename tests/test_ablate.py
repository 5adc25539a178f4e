"""Tests for ablate.py: a tiny ablation writes ablate.json with both reader families, the
yardsticks and the recall-hit split, plus ablate.md, curves.png and hits.png; reruns reuse the
finished runs; the hit mask equals its loop definition; bad settings are one-line errors."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import ablate
from plumbing import cli, repeats

MODELS = ("linear", "softmax_state", "softmax_history", "gpt")  # both reader families, a pair, GPT
TINY = dict(models=MODELS, tokenizer="bytes", max_iters=2, seeds=2, n_layer=1, n_embd=32, block_size=80, batch_size=2,
            eval_iters=1, eval_interval=2, hit_seqs=4, warmup_iters=1, workers=1, content=False)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ablate"))
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second thread only spins when the cores are shared
    try:
        res = ablate.main(cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=out, **TINY))
    finally:
        torch.set_num_threads(n)
    return out, res


@pytest.mark.slow
def test_ablate_json_has_both_families_yardsticks_and_hit_split(tiny_run):
    out, _ = tiny_run
    res = json.load(open(os.path.join(out, "ablate.json")))
    assert list(res["variants"]) == list(MODELS)
    families = {v["family"] for v in res["variants"].values()}
    assert {"state", "history"} <= families
    y = res["yardsticks"]
    assert y["dataset"] == "builtin" and 0 < y["bigram"] < y["unigram"]
    for name, v in res["variants"].items():
        assert len(v["val_loss"]) == 2 and all(x > 0 for x in v["val_loss"]), name
        assert abs(v["val_loss_mean"] - sum(v["val_loss"]) / 2) < 1e-9
        assert abs(v["minus_bigram"] - (v["val_loss_mean"] - y["bigram"])) < 1e-9
        assert 0 < v["hit_fraction"] < 1 and v["loss_hit"] > 0 and v["loss_other"] > 0
        assert v["tokens"] == 2 * 2 * 80 and v["params"] > 0
        assert (v["vs_linear"] is None) == (name == "linear")
    assert list(res["history_vs_state"]) == ["softmax_history - softmax_state"]
    # the yardsticks' split is over the same tokens as every model's
    ys = res["yardstick_split"]
    assert ys["bigram"]["hit_fraction"] == res["variants"]["gpt"]["hit_fraction"]
    assert ys["bigram"]["loss_hit"] < ys["bigram"]["loss_other"]  # a seen bigram is a likely one
    lin = res["variants"]["linear"]["val_loss"]
    assert lin[0] != lin[1]  # seeds differ in init and data order
    md = open(os.path.join(out, "ablate.md")).read()
    assert "bigram" in md and "loss on hits" in md and "History reader" in md
    for png in ("curves.png", "hits.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000


@pytest.mark.slow
def test_rerun_in_worker_processes_reuses_finished_runs(tiny_run, capsys):
    out, first = tiny_run
    again = ablate.main(cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=out,
                                  **dict(TINY, models=("linear", "gpt"), seeds=1, workers=2)))
    assert "elapsed" not in capsys.readouterr().out  # no run trained: both came from the grid's saved runs
    for name in ("linear", "gpt"):
        assert again["variants"][name]["val_loss"] == first["variants"][name]["val_loss"][:1]


def test_recall_hits_match_the_loop_and_count_repeats():
    g = torch.Generator().manual_seed(0)
    w = torch.randint(0, 5, (6, 41), generator=g)
    assert torch.equal(repeats.recall_hits(w), repeats.recall_hits_loop(w))
    w = torch.tensor([[7, 8, 9, 7, 8, 7, 9]])  # targets 8 9 7 8 7 9
    assert repeats.recall_hits(w).tolist() == [[False, False, False, True, False, False]]


def test_copy_distance_matches_the_loop():
    g = torch.Generator().manual_seed(0)
    for k in (1, 3, 8):
        w = torch.randint(0, 3, (5, 30), generator=g)  # 3 symbols: short repeats by chance ...
        w = torch.cat([w, w[:, 5:20], torch.randint(0, 3, (5, 15), generator=g)], 1)  # ... and a long copy
        d = repeats.copy_distance(w, k)
        assert torch.equal(d, repeats.copy_distance_loop(w, k)) and d.shape == (5, 59)
        assert (d > 0).any() and (d == 0).any()
        assert d[:, :k - 1].eq(0).all()  # fewer than k tokens before the target: never a copy


def test_copy_distance_by_hand():
    # targets w[1:] = 2 3 9 1 2 3 8 1 2 3; with k = 2 the string "1 2 3" repeats: the target 3 at
    # i = 6 continues "1 2" as at j = 2 (distance 4), and at i = 10 the nearest is j = 6 (again 4)
    w = torch.tensor([[1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 3]])
    assert repeats.copy_distance(w, 2).tolist() == [[0, 0, 0, 0, 0, 4, 0, 0, 0, 4]]
    assert repeats.copy_distance(w, 3).tolist() == [[0] * 10]  # "9 1 2 3" and "8 1 2 3" differ
    assert repeats.copy_distance(torch.tensor([[5, 5, 5, 5, 5]]), 2).tolist() == [[0, 0, 1, 1]]  # a run overlaps


def test_copy_split_by_hand():
    nll = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    dist = torch.tensor([[0, 3, 0, 10, 200, 0]])
    s = repeats.copy_split(nll, dist, bins=(8, 128))
    assert s["loss_copy"] == pytest.approx(11 / 3) and s["loss_other"] == pytest.approx(10 / 3)
    assert s["copy_fraction"] == pytest.approx(0.5)
    assert [(b["lo"], b["hi"], b["loss"], b["fraction"]) for b in s["by_distance"]] == [
        (1, 8, 2.0, pytest.approx(1 / 6)), (8, 128, 4.0, pytest.approx(1 / 6)), (128, None, 5.0, pytest.approx(1 / 6))]


def test_split_weights_hits_and_others():
    nll = torch.tensor([[1.0, 3.0, 5.0, 7.0]])
    hits = torch.tensor([[True, False, False, True]])
    s = repeats.split(nll, hits)
    assert s == dict(loss_hit=4.0, loss_other=4.0, hit_fraction=0.5, loss_all=4.0)


@pytest.mark.parametrize("overrides, message", [
    (dict(models=("linear", "lstm")), "--models must be names from"),
    (dict(seeds=0), "--seeds must be"),
    (dict(max_iters=0), "--max_iters must be"),  # train.py's own check
    (dict(block_size=1), "--block_size must be"),
    (dict(tokenizer="bytes"), "--content probes BPE runs only"),
    (dict(copy_k=0), "--copy_k must be"),
])
def test_bad_settings_are_config_errors(overrides, message, tmp_path):
    with pytest.raises(cli.ConfigError, match=message):
        cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=str(tmp_path / "o"), **overrides)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_content_only_without_runs_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "fresh"
    p = subprocess.run([sys.executable, "ablate.py", "--content_only", "--out_dir", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "python ablate.py --out_dir" in p.stderr
    assert not out.exists()


@pytest.mark.slow
def test_an_interrupted_run_continues_from_its_checkpoint_even_after_a_resume(tmp_path, monkeypatch):
    cfg = cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=str(tmp_path),
                    **dict(TINY, models=("linear",), seeds=1))
    ablate.run_one((cfg, "linear", 0))
    run = ablate.run_dir(cfg, "linear", 0)
    os.remove(os.path.join(run, "result.json"))  # as if stopped before the end ...
    ck = torch.load(os.path.join(run, "ckpt_last.pt"), weights_only=True)
    ck["train"]["resume"] = True  # ... of a run that had already been resumed once
    torch.save(ck, os.path.join(run, "ckpt_last.pt"))
    seen = []

    def fake_main(tcfg):
        seen.append(tcfg)
        raise SystemExit(130)
    monkeypatch.setattr(ablate.train, "main", fake_main)
    with pytest.raises(KeyboardInterrupt):
        ablate.run_one((cfg, "linear", 0))
    assert seen and seen[0].resume  # continued, not started over
    ck["train"]["lr"] = 1.0  # another run's checkpoint: started over
    torch.save(ck, os.path.join(run, "ckpt_last.pt"))
    with pytest.raises(KeyboardInterrupt):
        ablate.run_one((cfg, "linear", 0))
    assert not seen[1].resume


def test_same_run_tolerates_a_new_field_at_its_default_only():
    key = {k: v for k, v in ablate.dataclasses.asdict(ablate.train.make_config("cpu")).items()}
    old = {k: v for k, v in key.items() if k != "dropout"}  # a run saved before `dropout` existed
    assert ablate.same_run(key, key) and ablate.same_run(old, key)
    assert not ablate.same_run(old, dict(key, dropout=0.1))
    assert not ablate.same_run(dict(key, lr=1.0), key) and not ablate.same_run(None, key)
    assert ablate.same_run(dict(key, out_dir="results/elsewhere"), key)  # a moved run folder is the same run


def test_a_failed_run_stops_the_ablation_with_one_line_naming_it(tmp_path, monkeypatch):
    cfg = cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=str(tmp_path), **dict(TINY, seeds=1))

    def failing(fn, jobs, workers, **kw):  # a worker that exited with an error (grid.run_jobs's JobFailed)
        raise ablate.grid.JobFailed(f"job {jobs[1]!r} exited with status 1; its output above says why")
        yield
    monkeypatch.setattr(ablate.grid, "run_jobs", failing)
    with pytest.raises(ablate.RunInterrupted) as err:
        ablate.run_all(cfg, [(cfg, name, 0) for name in cfg.models])
    assert isinstance(err.value, cli.UserError)  # main_guard: one line, no traceback
    assert "softmax_state seed 0" in str(err.value) and "reused" in str(err.value)


@pytest.mark.slow
def test_each_running_run_prints_its_step_loss_and_eta_while_it_trains(tmp_path, monkeypatch, capsys):
    """Two runs in two workers (the default pool), progress every 0.5 s instead of a minute: the parent
    reads each run's metrics.jsonl and prints `[running M:SS] NAME seed S | step s/N | loss L | ... | eta`."""
    monkeypatch.setattr(ablate.grid, "PROGRESS_S", 0.5)
    over = dict(TINY, models=("linear", "gpt"), seeds=1, workers=2, max_iters=20, eval_interval=20)
    cfg = cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=str(tmp_path), **over)
    ablate.run_all(cfg, [(cfg, name, 0) for name in cfg.models])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[running ")]
    steps = [ln for ln in lines if re.fullmatch(r"\[running \d+:\d\d\] (linear|gpt) seed 0 \| step \d+/20 \| loss "
                                                r"\d+\.\d{4} \| \d+ ms/step \| eta \d+\.\d (min|h)", ln)]
    assert steps, lines  # at least one reading mid-run, with its ETA


@pytest.mark.slow
def test_a_second_invocation_keeps_the_first_ones_rows_and_adds_the_write_readers(tiny_run, tmp_path):
    """Running other variants into the same folder adds their rows and keeps the earlier ones (whose
    run folders may be gone: a fresh clone has only ablate.json), in the registry's order, each with
    its recurrent state per layer."""
    out, _ = tiny_run
    folder = str(tmp_path / "again")
    os.makedirs(folder)
    first = json.load(open(os.path.join(out, "ablate.json")))
    with open(os.path.join(folder, "ablate.json"), "w") as f:
        json.dump(first, f)  # the record, without its run folders
    cfg = cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=folder, **dict(TINY, models=("ema_kv", "delta")))
    res = ablate.main(cfg)
    vs = res["variants"]
    assert list(vs) == ["linear", "softmax_state", "softmax_history", "ema_kv", "delta", "gpt"]
    for name in MODELS:  # carried as they were, compared again against linear
        assert vs[name]["val_loss"] == first["variants"][name]["val_loss"] and vs[name]["carried"]
    C, S, T, H = 32, 3, 80, 1  # n_head = max(1, C // 64)
    D = C // H
    assert vs["linear"]["state_floats"] == S * C and vs["gpt"]["state_floats"] == 2 * T * C
    assert vs["ema_kv"]["state_floats"] == S * C + S * C * D and vs["delta"]["state_floats"] == S * C + C * D
    assert vs["ema_kv"]["vs_linear"]["verdict"] and len(vs["delta"]["curves"]) == 2
    md = open(os.path.join(folder, "ablate.md")).read()
    assert "| ema_kv | write" in md and "state floats / layer" in md


@pytest.mark.slow
def test_an_ablation_of_other_settings_in_the_folder_is_refused_before_training(tiny_run, monkeypatch):
    out, _ = tiny_run
    monkeypatch.setattr(ablate, "run_all", lambda *a: pytest.fail("trained"))
    cfg = cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=out, **dict(TINY, lr=1e-2))
    with pytest.raises(cli.UserError, match="--lr"):
        ablate.main(cfg)


def test_a_corrupt_ablate_json_is_one_line(tmp_path):
    (tmp_path / "ablate.json").write_text("[1, 2]")
    cfg = cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=str(tmp_path), **TINY)
    with pytest.raises(cli.UserError, match="ablate.json"):
        ablate.earlier_rows(cfg)

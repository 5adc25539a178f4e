"""Records read back are validated like flags (plumbing/records.py): a hand-damaged record (NaN, a
string step, a list where an object belongs, a missing field) in metrics.jsonl, copy.jsonl, a grid's
runs/NAME.json, ablate.py's result.json or a checkpoint's metadata is one line naming the file (and
the line) and what to do, and no table is written with the damaged value: train.py --resume,
scaling.py, ablate.py, frontier.py's and recall.py's grid files."""

import json
import os
import shutil

import numpy as np
import pytest
import torch

import ablate
import frontier
import scaling
import train
from plumbing import checkpoint, cli, grid, records

DAMAGES = {  # a good record -> the damaged one, as a line of a .jsonl file
    "NaN": lambda r: json.dumps({**r, next(k for k in r if k != "step" and isinstance(r[k], float)): float("nan")}),
    "a string step": lambda r: json.dumps({**r, "step": str(r["step"])}),
    "a list": lambda r: json.dumps(list(r.values())),
    "a missing field": lambda r: json.dumps({k: v for k, v in r.items() if k != "step"}),
    "a negative step": lambda r: json.dumps({**r, "step": -1 - r["step"]}),
    "a negative loss": lambda r: json.dumps({**r, next(k for k in r if k != "step" and isinstance(r[k], float)): -1.0}),
}


def damage(path, line, how):
    """Replace line `line` (1-based) of the .jsonl file at path by its damaged copy."""
    lines = path.read_text().splitlines()
    lines[line - 1] = DAMAGES[how](json.loads(lines[line - 1]))
    path.write_text("\n".join(lines) + "\n")


def one_line(e, *names):
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in names), msg


# ---- the shapes --------------------------------------------------------------------------------


def test_a_number_is_finite_and_of_its_type():
    N = records.NUMBER
    assert records.shape_error({"a": 1, "b": 0.5}, {"a": int, "b": N}) is None
    for bad in (float("nan"), float("inf"), "1", True, None, [1]):
        assert records.shape_error({"b": bad}, {"b": N}), bad
    assert records.shape_error({"b": float("inf")}, {"b": float}) is None  # float alone: inf and NaN allowed
    assert records.shape_error({}, {"b": records.Opt(N)}) is None
    assert "x.b" in records.shape_error({"b": float("nan")}, {"b": records.Opt(N)}, "x")
    # a range: a step, a loss and a fraction are checked for range by the one checker, NaN in none
    for bad, shape in ((-1, records.STEP), (-1.0, records.LOSS), (1.5, records.FRACTION), (float("nan"),
                                                                                     records.Range(float, 0))):
        assert "not" in records.shape_error({"b": bad}, {"b": shape}), (bad, shape)
    assert records.shape_error({"b": None, "c": float("inf")}, {"b": records.MAYBE_LOSS, "c": records.Range(float, 0)}) is None


def test_read_jsonl_names_the_line_and_skips_only_a_last_line_cut_short(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "val_loss": 5.0}\n{"step": 1, "train_loss": 4.0}\n{"step": 2, "tr')
    assert [r["step"] for r in records.read_jsonl(str(path))] == [0, 1]  # the shape by the file's name
    for how in DAMAGES:
        path.write_text('{"step": 0, "val_loss": 5.0}\n{"step": 1, "train_loss": 4.0}\n')
        damage(path, 2, how)
        with pytest.raises(cli.UserError) as e:
            records.read_jsonl(str(path))
        one_line(e, "metrics.jsonl line 2")
    path.write_text('{"step": 0}\n{"step": 1, "tr\n{"step": 2}\n')  # cut short, then written after: damaged
    with pytest.raises(cli.UserError, match="line 2"):
        records.read_jsonl(str(path))


def test_a_checkpoint_with_damaged_metadata_is_one_line(tmp_path):
    path = tmp_path / "ckpt.pt"
    good = dict(model={}, kind="spen", config={}, train={}, step=3, best_val=float("inf"), val_loss=float("nan"))
    for bad in (dict(step="3"), dict(step=-1), dict(config=[1]), dict(best_val="low"), dict(best_val=float("nan")),
                dict(model={"w": [1.0]})):
        torch.save({**good, **bad}, path)
        with pytest.raises(checkpoint.CheckpointError) as e:
            checkpoint.load(str(path))
        one_line(e, str(path), "damaged")


@pytest.mark.parametrize("saved", ["frontier", "ablate"])
def test_a_grid_run_file_with_nan_is_one_line_and_kept(saved, tmp_path):
    shape = {"frontier": frontier.SAVED, "ablate": ablate.SAVED}[saved]
    run = {"frontier": dict(setting="near", point="gpt", seed=0, test={"acc": {"4": float("nan")}}, state_bytes=8,
                            params=10, seconds=1.0),
           "ablate": dict(result=dict(val_loss=float("nan"), best_val=1.0, params=1, tokens=1, seconds=1.0),
                          split=dict(loss_hit=1.0, loss_other=1.0, hit_fraction=0.1))}[saved]
    (tmp_path / "runs").mkdir()
    text = json.dumps(dict(run, config={"k": 1}))
    (tmp_path / "runs" / "a.json").write_text(text)
    with pytest.raises(grid.GridError) as e:
        with grid.Grid(str(tmp_path), [grid.Job("a", {"k": 1}, None)], "x.py", needs=shape):
            pass
    one_line(e, "a.json", "not a finite number")
    assert (tmp_path / "runs" / "a.json").read_text() == text


def test_a_negative_loss_in_an_ablate_run_file_is_one_line(tmp_path):
    """A loss below zero is no cross-entropy: the grid refuses the run file rather than table it."""
    (tmp_path / "runs").mkdir()
    run = dict(result=dict(val_loss=-1.0, best_val=1.0, params=1, tokens=1, seconds=1.0),
               split=dict(loss_hit=1.0, loss_other=1.0, hit_fraction=0.1), config={"k": 1})
    (tmp_path / "runs" / "a.json").write_text(json.dumps(run))
    with pytest.raises(grid.GridError) as e:
        with grid.Grid(str(tmp_path), [grid.Job("a", {"k": 1}, None)], "x.py", needs=ablate.SAVED):
            pass
    one_line(e, "a.json", "val_loss is -1.0")


# ---- through the commands ----------------------------------------------------------------------


@pytest.mark.parametrize("how", list(DAMAGES))
def test_resume_over_a_damaged_metrics_line_names_the_line(how, tmp_path):
    cfg = dict(n_layer=1, n_embd=16, max_iters=2, eval_interval=1, eval_iters=1, out_dir=str(tmp_path))
    tokens = (np.arange(4000) % 256, np.arange(2000) % 256)
    train.main(train.make_config("cpu_bytes", **cfg), tokens=tokens)
    damage(tmp_path / "metrics.jsonl", 2, how)
    kept = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(cli.UserError) as e:
        train.main(train.make_config("cpu_bytes", **dict(cfg, max_iters=3), resume=True), tokens=tokens)
    one_line(e, "metrics.jsonl line 2")
    assert (tmp_path / "metrics.jsonl").read_text() == kept


@pytest.fixture(scope="module")
def scaling_run(tmp_path_factory, small_corpus):
    out = tmp_path_factory.mktemp("scaling") / "out"
    tiny = dict(models=("linear",), widths=(16,), n_layer=1, block_size=32, batch_size=2, max_tokens=64 * 4,
                first_tokens=64 * 2, points=2, eval_iters=1, warmup_iters=1, data=small_corpus)
    scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=str(out), **tiny))
    return out, tiny


@pytest.mark.slow
@pytest.mark.parametrize("name, line", [("metrics.jsonl", 2), ("copy.jsonl", 1)])
@pytest.mark.parametrize("how", list(DAMAGES))
def test_scaling_over_a_damaged_record_writes_no_table(scaling_run, name, line, how, tmp_path):
    """scaling.py reads metrics.jsonl and copy.jsonl through checkpoint.read_jsonl: their shapes by name."""
    src, tiny = scaling_run
    out = tmp_path / "out"
    shutil.copytree(src, out)
    damage(out / "runs" / "linear_c16" / name, line, how)
    table = (out / "scaling.md").read_text()
    with pytest.raises(cli.UserError) as e:
        scaling.main(cli.build(scaling.ScalingConfig, scaling.PRESETS, "cpu", out_dir=str(out), **tiny, train=False))
    one_line(e, f"{name} line {line}")
    assert (out / "scaling.md").read_text() == table


@pytest.fixture(scope="module")
def ablate_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ablate") / "out"
    tiny = dict(models=("linear",), tokenizer="bytes", max_iters=2, seeds=1, n_layer=1, n_embd=16, block_size=80,
                batch_size=2, eval_iters=1, eval_interval=1, hit_seqs=4, warmup_iters=1, workers=1, content=False)
    ablate.main(cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=str(out), **tiny))
    return out, tiny


@pytest.mark.slow
@pytest.mark.parametrize("where", ["runs/linear_s0.json", "runs/linear_s0/result.json",
                                   "runs/linear_s0/metrics.jsonl"])
def test_ablate_over_a_damaged_record_writes_no_table(ablate_run, where, tmp_path):
    src, tiny = ablate_run
    out = tmp_path / "out"
    shutil.copytree(src, out)
    saved = out / "runs" / "linear_s0.json"
    saved.write_text(saved.read_text().replace(str(src), str(out)))  # the run folder it names: the copy's
    path = out / where
    if where.endswith(".jsonl"):
        damage(path, 2, "NaN")
    else:
        rec = json.loads(path.read_text())
        rec["result"]["val_loss"] = float("nan")
        path.write_text(json.dumps(rec))
        if "result.json" in where:
            os.remove(out / "runs" / "linear_s0.json")  # the grid's copy gone: run_one reads result.json again
    table = (out / "ablate.md").read_text()
    with pytest.raises(cli.UserError) as e:
        ablate.main(cli.build(ablate.AblateConfig, ablate.PRESETS, "cpu", out_dir=str(out), **tiny))
    one_line(e, os.path.basename(where))
    assert (out / "ablate.md").read_text() == table


def test_a_damaged_scores_line_is_one_line_naming_it(tmp_path):
    """scaling.py's scores.jsonl: a NaN in a window's sum, or a string step, names the file and line."""
    from plumbing import cli, records
    good = dict(step=4, tokens=64, machine="cpu", windows=dict(n=[3, 2], loss=[2.5, 1.0], copy_n=[1, 0],
                                                               copy_loss=[0.5, 0.0], bin_n=[[1, 0]], bin_loss=[[0.5, 0.0]]))
    path = tmp_path / "scores.jsonl"
    for bad in (dict(good, windows=dict(good["windows"], loss=[float("nan"), 1.0])), dict(good, step="4")):
        path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(cli.UserError) as e:
            records.read_jsonl(str(path))
        assert "\n" not in str(e.value) and "scores.jsonl line 2" in str(e.value)
    path.write_text(json.dumps(good) + "\n")
    assert records.read_jsonl(str(path))[0]["step"] == 4

"""Results files read back are checked for shape, not only JSON: a truncated file or a field of the
wrong type is one line naming the file and the way out (scaling.json, ablate.json, a frontier run
file); every committed results file passes the same checks, and the command it holds still parses
to its settings; no wrong number is tabled (a diverged run is marked, in no mean); the report paths
that crashed once (scaling.py with no copy, --no-train on a folder with no run, a Ctrl-C's
checkpoint between two points, a checkpoint path that is a folder)."""

import dataclasses
import glob
import json
import os

import pytest
import torch

import ablate
import frontier
import recall
import sample
import scaling
from plumbing import checkpoint, cli, grid, tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALING = dict(models=("linear",), widths=(16,), n_layer=1, block_size=16, batch_size=2, max_tokens=32 * 4,
               first_tokens=32, points=3, eval_iters=1, warmup_iters=1, hit_seqs=4)


def one_line(e, *words):
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_committed_results_pass_the_checks():
    """Every scaling.json and ablate.json under results/ (results/map's, written now, included) and every
    saved grid run; read only."""
    for path in glob.glob(os.path.join(ROOT, "results", "**", "scaling.json"), recursive=True):
        assert tables.shape_error(json.load(open(path)), {"settings": dict, "curves": tables.Each(scaling.CURVE)}) \
            is None, path
    for path in glob.glob(os.path.join(ROOT, "results", "**", "ablate.json"), recursive=True):
        assert tables.shape_error(json.load(open(path)), {"settings": dict, "variants": tables.Each(ablate.ROW)}) \
            is None, path
    for pattern, shape in (("frontier/runs/**/*.json", frontier.SAVED), ("recall*/runs/*.json", recall.SAVED),
                           ("ablate*/**/runs/*.json", ablate.SAVED)):
        for path in glob.glob(os.path.join(ROOT, "results", pattern), recursive=True):
            assert tables.shape_error(json.load(open(path)), {"config": dict, **shape}) is None, path


def test_committed_commands_still_run_as_written(capsys):
    """The command a committed results JSON holds (some typed --variants, before it became --models)
    still parses, to the config its saved settings rebuild (read under today's names: current_names)."""
    from test_flags import COMMANDS
    as_json = lambda cfg: json.loads(json.dumps(dataclasses.asdict(cfg)))
    checked = []
    for path in glob.glob(os.path.join(ROOT, "results", "**", "*.json"), recursive=True):
        res = json.load(open(path))
        argv = str(res.get("command", "")).split() if isinstance(res, dict) else []
        if len(argv) < 2 or argv[1] not in COMMANDS:
            continue
        Config, parse, _ = COMMANDS[argv[1]][0]
        saved = cli.current_names(Config, res["settings"])
        saved = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()
                 if k in Config.__dataclass_fields__}  # a field newer than the file: at its default there
        assert as_json(parse(argv[2:])) == as_json(Config(**saved)), path
        checked.append(argv[1])
    assert {"recall.py", "frontier.py", "bench.py"} <= set(checked)
    assert "--variants is now --models" in capsys.readouterr().err  # results/recall/two_seeds' command


@pytest.mark.parametrize("text, word", [
    ('{"settings": {}, "curv', "JSONDecodeError"),
    ('{"settings": [], "curves": {}}', "settings"),
    ('{"settings": {}, "curves": []}', "curves"),
    ('{"settings": {}, "curves": {"gpt_c16": {"model": "gpt", "width": 16, "params": 1, "train_seconds": 1, '
     '"points": [{"step": 0, "tokens": 0, "val_loss": null}], "copy": []}}}', "val_loss"),
])
def test_a_bad_scaling_json_is_one_line(tmp_path, text, word):
    (tmp_path / "scaling.json").write_text(text)
    with pytest.raises(cli.UserError) as e:
        scaling.recorded_curves(cli.build(scaling.ScalingConfig, out_dir=str(tmp_path), **SCALING))
    one_line(e, "scaling.json", word, "--out_dir")


@pytest.mark.parametrize("text, word", [
    ('{"settings": {}, "variants": {"linear": {"val_loss": [1.0', "JSONDecodeError"),
    ('{"settings": {}, "variants": {"linear": {"family": "state", "val_loss": "1.2"}}}', "val_loss"),
    ('{"settings": {}, "variants": ["linear"]}', "variants"),
])
def test_a_bad_ablate_json_is_one_line(tmp_path, text, word):
    (tmp_path / "ablate.json").write_text(text)
    cfg = ablate.AblateConfig(out_dir=str(tmp_path), models=("linear",), content=False, tokenizer="bytes")
    with pytest.raises(cli.UserError) as e:
        ablate.earlier_rows(cfg)
    one_line(e, "ablate.json", word)


@pytest.mark.parametrize("acc", ['{"2": null}', '[0.5]', '"high"'])
def test_a_frontier_run_file_of_another_shape_is_one_line(tmp_path, acc):
    cfg = frontier.FrontierConfig(out_dir=str(tmp_path), quick=True, report=True)
    name = frontier.jobs(cfg)[0].name
    path = tmp_path / "runs" / f"{name}.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"config": {}, "setting": "near", "point": "x", "seed": 0, "state_bytes": 1, "params": 1, '
                    f'"seconds": 1, "test": {{"acc": {acc}}}}}')
    with pytest.raises(grid.GridError) as e:
        frontier.main(cfg)
    one_line(e, name, "test.acc", "delete it")


class NaNAfter(torch.nn.Module):
    """A model whose training loss turns NaN after `after` calls (what --lr 1e9 did)."""

    def __init__(self, model, after=3):
        super().__init__()
        self.model, self.after, self.calls = model, after, 0

    def forward(self, idx, targets=None):
        logits, loss = self.model(idx, targets)
        if targets is not None:
            self.calls += 1
            loss = loss * float("nan") if self.calls > self.after else loss
        return logits, loss

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)


def test_a_diverged_run_is_marked_and_never_averaged(tmp_path, monkeypatch, capsys):
    build = recall.build_model
    monkeypatch.setattr(recall, "build_model", lambda cfg, kind, o: NaNAfter(build(cfg, kind, o))
                        if kind == "spen" else build(cfg, kind, o))
    cfg = recall.RecallConfig(out_dir=str(tmp_path), models=("linear", "gpt"), steps=12, curriculum=0, decay=0,
                              eval_every=6, test_seqs=8, val_seqs=8, workers=1, n_embd=16)
    res = recall.main(cfg)
    assert res["diverged"] == {"linear seed 0": 3} and list(res["variants"]) == ["gpt"]
    assert json.load(open(tmp_path / "runs" / "linear_s0.json"))["diverged"] == 3
    md = (tmp_path / "recall.md").read_text(encoding="utf-8")
    assert "Diverged" in md and "linear seed 0 at step 3" in md and "| linear" not in md
    assert "DIVERGED" in capsys.readouterr().out


def test_scaling_no_train_on_a_folder_with_no_run(tmp_path):
    out = tmp_path / "typo"
    with pytest.raises(cli.UserError) as e:
        scaling.main(cli.build(scaling.ScalingConfig, out_dir=str(out), train=False, **SCALING))
    one_line(e, "--no-train", str(out))
    assert not out.exists()


def test_scaling_report_with_no_copy_and_no_point_between_points(tmp_path, monkeypatch):
    """block_size 16 with copy_k 12: no target is a copy. A checkpoint a Ctrl-C left between two points
    (step 3 of the points 1, 2, 4) gains the curve no copy split there."""
    cfg = cli.build(scaling.ScalingConfig, out_dir=str(tmp_path), copy_k=12, cooldown=0, **SCALING)  # step 3: no stop
    assert scaling.eval_steps(cfg) == [1, 2, 4]
    torch.manual_seed(0)
    run = scaling.run_dir(cfg, "linear", 16)
    scaling.train.main(scaling.run_config(cfg, "linear", 16, 3))  # as if stopped at step 3
    res = scaling.main(cfg)
    copy = res["curves"]["linear_c16"]["copy"]
    assert [r["step"] for r in copy] == [4] and copy[0]["loss_copy"] is None
    assert "linear_c16" in (tmp_path / "scaling.md").read_text(encoding="utf-8")
    assert 3 not in [r["step"] for r in scaling.read_copy(run)]


def test_scaling_removes_the_temp_files_a_kill_left(tmp_path, capsys, monkeypatch):
    """On entry, under its lock, before any curve trains (the curves are stubbed out here)."""
    cfg = cli.build(scaling.ScalingConfig, out_dir=str(tmp_path), **SCALING)
    (tmp_path / "scaling.png.tmp12345").write_bytes(b"half a figure")
    monkeypatch.setattr(scaling, "run_curves", lambda cfg, recorded: {})
    scaling.main(cfg)
    assert not (tmp_path / "scaling.png.tmp12345").exists() and "removed 1 temporary file" in capsys.readouterr().out


def test_a_checkpoint_path_that_is_a_folder_says_so(tmp_path):
    (tmp_path / "ckpt_best.pt").write_bytes(b"")
    with pytest.raises(checkpoint.CheckpointError) as e:
        sample.load(str(tmp_path), "cpu")
    one_line(e, "is a folder", "ckpt_best.pt")


def test_scaling_says_where_a_ctrl_c_stopped_it(tmp_path, monkeypatch):
    def stopped(cfg):  # train.py's Ctrl-C inside a segment: ckpt_last saved, then SystemExit(130)
        raise SystemExit(130)
    monkeypatch.setattr(scaling.train, "main", stopped)
    with pytest.raises(grid.Interrupted) as e:
        scaling.main(cli.build(scaling.ScalingConfig, out_dir=str(tmp_path), **SCALING))
    assert e.value.status == 130
    one_line(e, "interrupted", "linear C=16", "continues: python scaling.py")


def test_results_hold_results_only():
    """The scripts that made committed results live in dev/ (run as modules); results/ holds what they made."""
    scripts = [os.path.relpath(os.path.join(d, n), ROOT) for d, _, ns in os.walk(os.path.join(ROOT, "results"))
               for n in ns if n.endswith((".py", ".sh"))]
    assert scripts == []


def test_the_map_tables_every_committed_curve(tmp_path, monkeypatch):
    """dev/map.py from the committed records: a row per earlier curve (the references and every map
    folder, second seeds included), a model per seeded folder that finished; a curve trained at other
    settings refused in one line."""
    from dev import map as M
    monkeypatch.chdir(ROOT)
    M.main(str(tmp_path))
    res = json.load(open(tmp_path / "map.json"))
    curves = glob.glob(os.path.join(ROOT, "results", "map", "*", "scaling.json")) + \
        glob.glob(os.path.join(ROOT, "results", "map", "seed1", "*", "scaling.json"))
    assert len(res["rows"]) == len(M.REFS) + len(curves) - (os.path.isdir(os.path.join(ROOT, M.SEEDS)) and 0)
    assert sum(m["n"] for m in res["models"].values()) == len(res["seeds"])
    other = tmp_path / "repo"
    (other / "results" / "map" / "x").mkdir(parents=True)
    (other / "results" / "scaling").mkdir()
    ref = json.load(open(os.path.join(ROOT, M.REFERENCE)))
    (other / M.REFERENCE).write_text(json.dumps(ref))
    moved = dict(ref, settings=dict(ref["settings"], lr=1e-3))  # a curve at another learning rate
    (other / "results" / "map" / "x" / "scaling.json").write_text(json.dumps(moved))
    with pytest.raises(cli.UserError) as e:
        M.collect(str(other))
    one_line(e, "other settings", "lr")

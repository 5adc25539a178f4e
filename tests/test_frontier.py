"""frontier.py: the one state-bytes count against hand-counted cases, one-line errors for a bad
grid before anything trains, and a tiny grid that writes its table, figure and runs, reuses every
finished run when called again, and retrains only what a killed grid had not saved; the committed report
re-renders row for row on any CPU (its capacity table prints no digit the CPU's BLAS decides)."""
import dataclasses
import json
import os
import runpy
import sys

import pytest

import frontier
from plumbing import grid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C, T = 64, 24


def model(family, **knobs):
    return frontier.build_model(frontier.FrontierConfig(), "near", family, knobs)


@pytest.mark.parametrize("family,knobs,floats", [
    ("gpt", {}, 2 * T * C),                                    # the KV cache at T
    ("swa", dict(w=8), 2 * 7 * C),                             # the w - 1 keys and values a later query sees
    ("linear", dict(S=3, C=C), 3 * C),                         # the paper's state: S x C traces
    ("linear", dict(S=12, C=32), 12 * 32),
    ("softmax_state", dict(S=6, C=C), 6 * C),
    ("selective", dict(S=3, C=C), 3 * C),
    ("ema_kv", dict(D=16), 3 * C + 3 * (C // 16) * 16 * 16),    # traces + S decays x H heads x D x D
    ("delta", dict(D=16), 3 * C + (C // 16) * 16 * 16),         # traces + H heads x D x D
    ("linear_attn_history", dict(D=32), 3 * C + C * 32 + C),    # traces + sum phi(k) v^T + sum phi(k)
    ("softmax_history", {}, 3 * C + 2 * T * 3 * C),            # traces + keys and values of T x S slots
])
def test_state_bytes_are_fp32_bytes_per_layer_of_what_step_holds(family, knobs, floats):
    assert frontier.state_bytes(model(family, **knobs), T) == 4 * floats


def cli_run(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["frontier.py", *argv])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(os.path.join(ROOT, "frontier.py"), run_name="__main__")
    return e.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("argv,message", [
    (["--decays", "0", "3"], "--decays must be an integer in [1, "),
    (["--windows", "4", "100"], "--windows 100 is longer than every sequence"),
    (["--settings", "near", "--windows", "32"], "--windows 32 is longer than every sequence (T <= 24)"),
    (["--models", "linear", "mamba"], "--models must be names from"),
    (["--head_widths", "8", "24"], "--head_widths 24 do not divide --width 64"),
    (["--settings", "far"], "--settings must be names from"),
    (["--models", "linear", "hybrid_ema_kv"], "--models hybrid_ema_kv has 4 blocks; the map's models have 2"),
])
def test_a_bad_grid_is_one_line_before_anything_trains(argv, message, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    code, err = cli_run(["--out_dir", str(out), *argv], monkeypatch, capsys)
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not out.exists()


def tiny_grid(tmp_path, monkeypatch):
    monkeypatch.setattr(frontier, "QUICK_POINTS", [("linear", dict(S=3, C=64)), ("swa", dict(w=4)), ("delta", dict(D=32))])
    return frontier.parse(["--quick", "--out_dir", str(tmp_path / "f"), "--steps", "3", "--curriculum", "1",
                           "--decay", "1", "--workers", "1"])


def test_quick_is_a_preset_under_the_typed_flags():
    quick = frontier.parse(["--quick"])
    assert (quick.settings, quick.seeds, quick.steps) == (("near",), 1, 400) and frontier.parse([]).seeds == 2
    assert frontier.parse(["--quick", "--seeds", "2"]).seeds == 2


@pytest.mark.slow
def test_a_tiny_grid_writes_its_outputs_and_a_killed_grid_continues(tmp_path, monkeypatch):
    cfg = tiny_grid(tmp_path, monkeypatch)
    res = frontier.main(cfg)
    pts = res["points"]["near"]
    assert set(pts) == {"linear_C64_S3", "swa_w4", "delta_D32"}
    for name in ("frontier.json", "frontier.md", "frontier.png"):
        assert (tmp_path / "f" / name).stat().st_size > 0
    saved = sorted(os.listdir(tmp_path / "f" / "runs" / "near"))
    assert saved == ["delta_D32_s0.json", "linear_C64_S3_s0.json", "swa_w4_s0.json"]
    run = json.loads((tmp_path / "f" / "runs" / "near" / "swa_w4_s0.json").read_text())
    assert run["config"]["knobs"] == {"w": 4} and run["config"]["recall"]["steps"] == 3  # the config beside the number
    # a killed grid: one run never saved; the next call trains that one only, and reuses the others
    os.remove(tmp_path / "f" / "runs" / "near" / "swa_w4_s0.json")
    trained = []
    real = frontier.run_point
    monkeypatch.setattr(frontier, "run_point", lambda job: trained.append(frontier.label(*job[2:4])) or real(job))
    again = frontier.main(cfg)
    assert trained == ["swa_w4"]
    assert again["points"]["near"]["linear_C64_S3"] == pts["linear_C64_S3"]
    # --report trains nothing: the table of what is saved, a point missing from it left out, but never
    # over a report with more points
    os.remove(tmp_path / "f" / "runs" / "near" / "delta_D32_s0.json")
    with pytest.raises(grid.GridError, match="frontier.json"):
        frontier.main(dataclasses.replace(cfg, report=True))
    os.remove(tmp_path / "f" / "frontier.json")
    report = frontier.main(dataclasses.replace(cfg, report=True))
    assert trained == ["swa_w4"] and set(report["points"]["near"]) == {"linear_C64_S3", "swa_w4"}


def test_capacity_table_holds_the_arguments_numbers():
    """Steps 1-2 of the argument as frontier.json records them: S = 3 decays keep their full
    rank and capacity; as S grows V's condition number grows, the numerical rank stops short of
    S (fp32) and bf16 holds no more than fp32."""
    table = frontier.capacity_table(frontier.parse(["--settings", "near", "--windows", "4"]))
    near = {int(S): row["near"] for S, row in table.items()}
    assert sorted(near) == [3, 6, 12, 24]
    assert (near[3]["rank_fp32"], near[3]["rank_bf16"], near[3]["fp32"]) == (3, 3, 3.0)
    conds = [near[S]["cond"] for S in (3, 6, 12, 24)]
    assert conds == sorted(conds) and conds[-1] > 1e12
    assert near[24]["rank_fp32"] < 24 and near[24]["fp32"] < 12
    assert all(r["rank_bf16"] <= r["rank_fp32"] and r["bf16"] <= r["fp32"] for r in near.values())


def test_family_summary_finds_the_knee_and_the_best_point():
    pt = lambda family, nbytes, acc: dict(family=family, state_bytes=nbytes, acc={"8": acc})
    pts = {"a": pt("delta", 4096, 1.0), "b": pt("delta", 1024, 0.5), "c": pt("delta", 2048, 0.95),
           "d": pt("linear", 768, 0.13), "e": pt("linear", 384, 0.12)}
    (f1, best1, knee1), (f2, best2, knee2) = frontier.family_summary(pts, "8")  # FAMILIES order: linear first
    assert (f1, best1["state_bytes"], knee1) == ("linear", 768, None)
    assert (f2, best2["state_bytes"], knee2["state_bytes"]) == ("delta", 4096, 2048)


def test_the_recorded_quick_command_runs_and_reproduces_its_config():
    """frontier.json's command is a line a reader can paste: the --quick preset empties --windows,
    which no command line can spell, so the line leaves it to --quick."""
    cfg = frontier.parse(["--quick", "--out_dir", "out/q"])
    line = frontier.cli.command_line("frontier.py", cfg)
    assert "--windows" not in line and "--quick" in line
    assert frontier.parse(line.split()[2:]) == cfg


def test_the_committed_grid_reports_from_its_saved_runs(tmp_path):
    """`frontier.py --report` on a copy of results/frontier finds every committed run under the
    current code (a model field added since, at its default, does not orphan them) and renders the
    committed table rows."""
    import shutil
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "frontier")
    shutil.copytree(root, tmp_path / "frontier")
    frontier.main(frontier.parse(["--out_dir", str(tmp_path / "frontier"), "--report"]))
    rows = lambda p: [line for line in open(p) if line.startswith("| ")]
    assert rows(tmp_path / "frontier" / "frontier.md") == rows(os.path.join(root, "frontier.md"))


@pytest.mark.parametrize("shift", [-4, 4])
def test_the_capacity_table_prints_no_digit_the_blas_decides(shift, monkeypatch):
    """Another CPU's LAPACK kernel moves each computed singular value by up to a few u sigma_1 (u = 2^-53,
    the SVD's error bound): the table's rows do not move with them (a condition number that float64 does
    not resolve is printed as its lower bound, the same everywhere)."""
    import torch
    cfg = frontier.parse(["--windows", "4"])
    T = {s: frontier.SETTINGS[s]["block_size"] for s in cfg.settings}
    here = frontier.capacity_lines(frontier.capacity_table(cfg), T)
    svdvals = torch.linalg.svdvals
    monkeypatch.setattr(torch.linalg, "svdvals", lambda A: (lambda sv: (sv + shift * 2.0 ** -53 * sv[..., :1]).abs())(
        svdvals(A)))
    assert frontier.capacity_lines(frontier.capacity_table(cfg), T) == here

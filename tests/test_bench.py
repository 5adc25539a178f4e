"""bench.py --quick runs every section but compile end to end (the CUDA-only ones, the GPU check's
train steps of the write readers included, on the CPU at tiny sizes), writes its JSON where it
is told, and shows the operator-count property. No timing asserts: the numbers depend on the
machine. torch.compile is left to the bench (compiling even a tiny SPEN takes minutes on a
2-core CPU); its equality check is bench.py's `compile` section."""
import dataclasses
import json

import pytest
import torch

import bench
from plumbing import cli, timing


def parse(argv):
    return cli.parse(bench.BenchConfig, bench.get_parser(), argv)


@pytest.mark.slow
def test_quick_run_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    res = bench.main(parse(["--quick", "--device", "cpu", "--threads", "1", "--out", str(out)]))
    saved = json.loads(out.read_text())
    assert saved["quick"] and set(saved["runs"]) == {"on"}  # the allocator comparison is opt-in
    assert dataclasses.asdict(parse(saved["command"].split()[2:])) == saved["settings"]  # the command reruns it
    run = saved["runs"]["on"]
    assert run["allocator"] is True and run["limits"]["copy_gbs"] > 0
    rows = run["ema"]["rows"]
    assert [r["T"] for r in rows] == [64, 256]
    assert all(r[m]["fwd"]["ms"] > 0 and max(r[m]["max_err"].values()) <= 1e-5 for r in rows for m in ("scan", "matmul"))
    assert all(r["ratio_block"] > 0 for r in run["blocks"]["rows"])
    # the KV cache grows with the context, the SPEN state does not
    gpt_state = [r["state_mib"] for r in run["gen_gpt"]["rows"]]
    spen_state = [r["state_mib"] for r in run["gen_spen"]["rows"]]
    assert gpt_state[1] > gpt_state[0] and spen_state[1] == spen_state[0]
    # operators per training step: the matmul traces keep SPEN's count flat in T and near GPT's
    ops = {(r["model"], r["T"]): r["ops"] for r in run["ops"]["rows"]}
    assert abs(ops["spen_matmul", 256] / ops["spen_matmul", 64] - 1) <= 0.1
    assert ops["gpt", 256] == ops["gpt", 64]
    assert ops["spen_scan", 256] > ops["spen_matmul", 256]
    assert run["ops"]["checks"]["pass"]
    assert run["memory"]["rows"][0]["paper_need_gb"] > 0
    # the GPU check's train steps, run on the CPU: SPEN's paper reader and write readers beside GPT
    models = run["train"]["models"]
    import writes  # every write reader is timed: the list follows the readers' table, not a copy of it
    assert list(models) == ["spen_linear"] + [f"spen_{p}" for p, _ in writes.WRITE_READERS] + ["gpt"]
    assert all(r["ms"] > 0 and r["tok_s"] > 0 and r["mfu"] is None for r in models.values())  # no CPU peak
    # the write readers' recurrence costs FLOPs the linear predictor does not (variants' attn_flops)
    assert models["spen_ema_kv"]["flops_per_token"] > models["spen_linear"]["flops_per_token"] > 0
    assert models["spen_delta"]["flops_per_token"] > models["spen_linear"]["flops_per_token"]
    chunk = run["chunk"]["rows"]  # every reader x pass, the loop and each L <= T timed
    assert {(r["reader"], r["mode"]) for r in chunk} == {(a, b) for a in ("ema_kv", "delta", "gated_delta")
                                                          for b in ("fwd", "fwd+bwd")}
    readers = run["readers"]["models"]  # every map candidate timed beside delta, from its registry entry
    assert readers["delta"]["ratio_to_delta"] == 1 and all(r["ms"] > 0 for r in readers.values())
    assert readers["hybrid_ema_kv"]["state_floats"] > readers["ema_kv"]["state_floats"]  # one growing cache of four
    # the cost figure: model FLOP/s against the matmul peak measured in the same run, a fraction in (0, 1)
    assert run["readers"]["matmul_fp32_flops"] > 0 and all(0 < r["fraction_of_peak"] < 1 for r in readers.values())
    assert all(set(r["ms"]) == {"loop", "8", "16"} and str(r["best_L"]) in r["ratio"] for r in chunk)
    seed = run["seed"]  # one seed's cost from its parts: the steps and points of scaling.py's curve
    assert seed["eager"]["step_s"] > 0 and "compiled" not in seed and "bf16" not in seed  # --quick: eager only
    assert seed["eager"]["curve_s"] == pytest.approx(seed["curve_steps"] * seed["eager"]["step_s"]
                                                     + seed["points"] * sum(seed["point_s"].values()))
    assert 0 < seed["eager"]["scoring_share"] < 1 and len(seed["eager"]["losses"]) == seed["short_curve_steps"]
    assert seed["at_peak"]["fraction_of_peak"] == pytest.approx(1) and seed["at_peak"]["curve_s"] < seed["eager"]["curve_s"]
    tr = run["train_run"]  # train.main through the 130m preset's path on random tokens
    assert tr["step"] == 2 and abs(tr["val_loss"] - tr["ln_V"]) < 0.5 and tr["config"]["max_iters"] == 2
    assert "compile" not in run
    assert res["runs"]["on"]["ema"]["stream"]["step_us"] > 0


def test_the_seed_sections_curve_is_scaling_pys():
    """bench.py's seed section projects a curve from timing.MAP_CURVE's counts: they are scaling.py's at the
    map's settings (the trunk's steps and the cooldown's, the points scored, the train.main segments)."""
    import scaling
    from plumbing import timing
    cfg = scaling.ScalingConfig(models=("delta",), widths=(128,))
    last, start = scaling.eval_steps(cfg)[-1], scaling.cooldown_start(cfg)
    assert timing.MAP_CURVE == dict(curve_steps=last + last - start, points=len(scaling.eval_steps(cfg)) + 1,
                                    segments=len(scaling.stops(cfg)) + 1)


def test_default_output_is_not_committed():
    cfg = parse(["--quick"])
    assert cfg.out.startswith("out/") and cfg.allocator == "on"


BAD_FLAGS = [
    (["--sections", "ema,warp"], "--sections: unknown section(s) warp"),
    (["--threads", "-1"], "--threads"),
    (["--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N"),
    (["--out", "."], "--out must name a file"),
]
if not torch.cuda.is_available():
    BAD_FLAGS.append((["--device", "cuda"], "sees no CUDA GPU"))


@pytest.mark.parametrize("argv,message", BAD_FLAGS)
def test_bad_flags_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and len(err.splitlines()) == 1


def test_out_inside_a_file_is_one_line_before_any_measurement(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as e:
        bench.cli_main(["--quick", "--out", str(tmp_path / "f" / "bench.json")])
    err = capsys.readouterr()
    assert e.value.code == 2 and "its folder" in err.err and "is a file" in err.err and "running" not in err.out


def test_interleaved_times_every_function_in_rotated_rounds():
    calls = []
    ms = timing.interleaved({k: (lambda k=k: calls.append(k)) for k in "abc"}, torch.device("cpu"), reps=3)
    assert set(ms) == set("abc") and all(v >= 0 for v in ms.values())
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")  # warmup, then rotated rounds

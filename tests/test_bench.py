"""bench.py --quick runs every section but compile end to end (bench.py's and bench_train.py's;
the CUDA-only ones on the CPU at tiny sizes), writes its JSON where it is told, and shows the
operator-count property. No timing asserts: the numbers depend on the machine. torch.compile is
left to the bench (compiling even a tiny SPEN takes minutes on a 2-core CPU); its equality check
is bench_train.py's `compile` section."""
import json

import pytest
import torch

import bench
from plumbing import cli


def parse(argv):
    return cli.parse(bench.BenchConfig, bench.get_parser(), argv)


def test_quick_run_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    res = bench.main(parse(["--quick", "--device", "cpu", "--threads", "1", "--out", str(out)]))
    saved = json.loads(out.read_text())
    assert saved["quick"] and set(saved["runs"]) == {"on"}  # the allocator comparison is opt-in
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
    assert set(run["train"]["models"]) == {"spen_eager", "gpt_eager"}  # the CUDA step, run on the CPU
    tr = run["train_run"]  # train.main through the 130m preset's path on random tokens
    assert tr["step"] == 2 and abs(tr["val_loss"] - tr["ln_V"]) < 0.5 and tr["config"]["max_iters"] == 2
    assert "compile" not in run
    assert res["runs"]["on"]["ema"]["stream"]["step_us"] > 0


def test_default_output_is_not_committed():
    cfg = parse(["--quick"])
    assert cfg.out.startswith("out/") and cfg.allocator == "on"


BAD_FLAGS = [
    (["--sections", "ema,warp"], "--sections: unknown section(s) warp"),
    (["--threads", "-1"], "--threads must be an int >= 0"),
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
        bench.cli_main(bench.RUN_HERE, ["--quick", "--out", str(tmp_path / "f" / "bench.json")])
    err = capsys.readouterr()
    assert e.value.code == 2 and "its folder" in err.err and "is a file" in err.err and "running" not in err.out


def test_each_section_is_measured_in_one_file():
    from plumbing import bench_train
    assert set(bench.RUN_HERE) == set(bench.SECTIONS_HERE) and set(bench_train.RUN_HERE) == set(bench.TRAIN_SECTIONS)

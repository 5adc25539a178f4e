"""Every numeric flag of every command, fuzzed from the config dataclasses themselves (cli.arg's
bounds): 0, -1, nan, inf, a huge value and the type's edge. Each is a config or one line and
exit 2 before anything is built, trained or written; a value outside the field's bounds is refused
naming the flag. A field added without bounds fails here the day it lands; a command added without
an entry in COMMANDS fails too. In-process (the parsers' own parse functions); the few cases of
the cases found by hand before the fuzz existed run once more as real commands at the end."""

import dataclasses
import glob
import os
import pathlib
import subprocess
import sys

import pytest

import ablate
import bench
import content
import data
import frontier
import probe
import recall
import sample
import scaling
import train
from plumbing import cli, registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# command -> [(config class, parse(argv), argv every fuzzed call starts with)]
COMMANDS = {
    "train.py": [(train.TrainConfig, train.parse_args, ["--preset", "cpu"])],
    "recall.py": [(recall.RecallConfig, recall.parse, [])],
    "frontier.py": [(frontier.FrontierConfig, frontier.parse, [])],
    "scaling.py": [(scaling.ScalingConfig, lambda a: cli.parse(scaling.ScalingConfig, scaling.get_parser(), a,
                                                             scaling.PRESETS), [])],
    "ablate.py": [(ablate.AblateConfig, lambda a: cli.parse(ablate.AblateConfig, ablate.get_parser(), a,
                                                          ablate.PRESETS), ["--models", "linear"])],
    "probe.py": [(probe.ProbeConfig, probe.parse, []),
                 (probe.FitConfig, lambda a: cli.parse(probe.FitConfig, probe.get_fit_parser(), a), [])],
    "sample.py": [(sample.SampleConfig, lambda a: cli.parse(sample.SampleConfig, sample.get_parser(), a), [])],
    "content.py": [(content.ContentConfig, lambda a: cli.parse(content.ContentConfig, content.get_parser(), a), [])],
    "data.py": [(data.DataConfig, lambda a: cli.parse(data.DataConfig, data.get_parser(), a), [])],
    "bench.py": [(bench.BenchConfig, lambda a: cli.parse(bench.BenchConfig, bench.get_parser(), a), [])],
}
NOT_HERE = {}
FUZZ = {int: ["0", "-1", "nan", "inf", str(10 ** 15), str(2 ** 63)],
        float: ["0", "-1", "nan", "inf", "-inf", "1e15", "1.7976931348623157e308"]}


def numeric_fields():
    for script, configs in COMMANDS.items():
        for Config, parse, base in configs:
            for f in dataclasses.fields(Config):
                if "help" in f.metadata and cli.number_type(f):
                    yield pytest.param(script, Config, parse, base, f, id=f"{script}:{Config.__name__}.{f.name}")


def test_every_command_is_fuzzed():
    scripts = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.py"))
               if "cli.parser(" in pathlib.Path(p).read_text(encoding="utf-8")}
    assert scripts == set(COMMANDS) | set(NOT_HERE)


@pytest.mark.parametrize("script, Config, parse, base, f", list(numeric_fields()))
def test_numeric_flag_fuzzed(script, Config, parse, base, f, capsys):
    bounds = f.metadata["bounds"]
    assert bounds is not None, f"{script}: give --{f.name} its bounds=(lo, hi) in cli.arg"
    lo, hi = bounds
    for value in FUZZ[cli.number_type(f)]:
        capsys.readouterr()
        try:
            cfg = parse(base + [f"--{f.name}", value])
        except SystemExit as e:
            err = capsys.readouterr().err
            assert e.code == 2 and err.count("\n") == 1 and "Traceback" not in err, (value, err)
            outside = not (lo <= float(value) <= hi)
            assert not outside or f"--{f.name}" in err, (value, err)
            continue
        got = getattr(cfg, f.name)
        assert all(lo <= x <= hi for x in (got if isinstance(got, tuple) else [got])), (value, got)


@pytest.mark.parametrize("argv, flag", [
    (["ablate.py", "--models", "linear", "linear"], "--models"),
    (["recall.py", "--lr", "inf"], "--lr"),
    (["recall.py", "--lr", "1e9"], "--lr"),
    (["recall.py", "--pairs", "8", "8"], "--pairs"),
    (["scaling.py", "--batch_size", "0"], "--batch_size"),
    (["scaling.py", "--block_size", "0"], "--block_size"),
    (["scaling.py", "--grad_accum", "0"], "--grad_accum"),
    (["scaling.py", "--max_tokens", "inf"], "--max_tokens"),
    (["scaling.py", "--seed", "-1"], "--seed"),
    (["train.py", "--seed", "-1"], "--seed"),
    (["probe.py", "--threads", "99999"], "--threads"),
    (["frontier.py", "--report", "--seeds", "100000"], "--seeds"),
])
def test_hand_found_cases_are_one_line(argv, flag, capsys):
    parse = COMMANDS[argv[0]][0][1]
    with pytest.raises(SystemExit) as e:
        parse(argv[1:])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and flag in err


def renamed_flags():
    for script, configs in COMMANDS.items():
        for Config, parse, base in configs:
            for f in dataclasses.fields(Config):
                for old in f.metadata.get("was", ()):
                    yield pytest.param(parse, base, f, old, id=f"{script}:--{old}")


@pytest.mark.parametrize("parse, base, f, old", list(renamed_flags()))
def test_a_renamed_flag_is_read_as_its_new_name_with_one_line(parse, base, f, old, capsys):
    """An old command (in notes, in a committed result) still runs: its old flag is read as the new
    one, and one line says so; the new name says nothing."""
    value = f.default[-1:] if isinstance(f.default, tuple) else f.default  # not what base gives
    argv = [str(v) for v in (value if isinstance(value, tuple) else [value])]
    new = parse(base + [f"--{f.name}", *argv])
    assert getattr(new, f.name) == value and capsys.readouterr().err == ""
    assert parse(base + [f"--{old}", *argv]) == new
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--{old} is now --{f.name}" in err, err


def test_which_models_is_one_flag_everywhere():
    """Every command whose flag names models of plumbing/registry.py spells it --models (the old
    spellings, --variants and --families, are its former names)."""
    naming = {script: f.name for script, configs in COMMANDS.items() for Config, _, _ in configs
              for f in dataclasses.fields(Config)
              if isinstance(f.default, tuple) and any(v in registry.MODELS for v in f.default)}
    assert set(naming) == {"ablate.py", "recall.py", "frontier.py", "scaling.py"}, naming
    assert set(naming.values()) == {"models"}, naming


@pytest.mark.parametrize("argv", [["train.py", "--preset", "cpu", "--seed", "-1"],
                                  ["probe.py", "--threads", "99999"]])
@pytest.mark.slow
def test_bad_flag_as_a_command(argv, tmp_path):
    """The whole path: one line, exit 2, nothing written in the folder it runs in."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, os.path.join(ROOT, argv[0]), *argv[1:]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and argv[-2] in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("flag", train.SPEN_ONLY)
def test_a_spen_option_is_refused_for_gpt(flag, capsys):
    """--model gpt with any SPEN-only option off its default is one line naming it, as a SPEN reader
    refuses an option it does not use; the value is the first other choice the parser takes."""
    f = next(f for f in dataclasses.fields(train.TrainConfig) if f.name == flag)
    other = {"predictor": ["delta"], "reads": ["history"], "write_alphas": ["0.5"], "conv": ["4"], "window": ["8"],
             "read_norm": [], "context": ["selective"], "trace_method": ["scan"]}[flag]
    assert f.default not in other
    with pytest.raises(SystemExit) as e:
        train.parse_args(["--model", "gpt", f"--{flag}", *other])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and f"--{flag}" in err, err
    assert train.parse_args(["--model", "gpt"]).model == "gpt"  # at their defaults: a GPT

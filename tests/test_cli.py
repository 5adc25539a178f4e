"""cli.py: a parser generated from a config dataclass, precedence, one-line errors."""
from dataclasses import dataclass

import pytest

import cli


@dataclass
class Config:
    lr: float = cli.arg(1e-3, "peak learning rate (100% of it at the top)", group="optimization")
    model: str = cli.arg("spen", "which model", choices=("spen", "gpt"), group="model")
    compile: bool = cli.arg(False, "compile the model", group="system")
    alphas: tuple = cli.arg((0.5, 0.1), "trace decays", group="model")
    steps: int = cli.arg(3, "steps", group="optimization")

    def __post_init__(self):
        cli.require(self.lr > 0, "--lr must be > 0, got {}", self.lr)


PRESETS = {"small": dict(lr=1e-2, steps=7)}


def test_precedence_default_preset_flags():
    p = cli.parser(Config, "test", presets=PRESETS)
    assert cli.parse(Config, p, [], PRESETS) == Config()
    cfg = cli.parse(Config, p, ["--preset", "small", "--steps", "9", "--alphas", "0.3", "0.2", "--compile"], PRESETS)
    assert cfg == Config(lr=1e-2, model="spen", compile=True, alphas=(0.3, 0.2), steps=9)
    assert cli.given(p, ["--lr", "0.5"]) == {"lr": 0.5}  # only what was typed
    assert "100%" in p.format_help() and "--no-compile" in p.format_help()


@pytest.mark.parametrize("argv,message", [(["--lr", "-1"], "--lr must be > 0, got -1.0"),
                                          (["--lr", "x"], "invalid float value"),
                                          (["--model", "rnn"], "invalid choice"),
                                          (["--preset", "big"], "invalid choice")])
def test_bad_values_are_one_line(argv, message, capsys):
    p = cli.parser(Config, "test", presets=PRESETS)
    with pytest.raises(SystemExit) as exc:
        cli.parse(Config, p, argv, PRESETS)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1


def test_build_rejects_unknown_names_and_main_guard_exits_one(capsys):
    with pytest.raises(cli.ConfigError, match="unknown setting"):
        cli.build(Config, PRESETS, None, learning_rate=1.0)
    with pytest.raises(SystemExit) as exc:
        cli.main_guard(lambda: cli.build(Config, lr=-2.0), cli.ConfigError, prog="x.py")
    assert exc.value.code == 1 and capsys.readouterr().err == "x.py: error: --lr must be > 0, got -2.0\n"

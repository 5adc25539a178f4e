"""plumbing/cli.py: a parser generated from a config dataclass, precedence, one-line errors for a user's
mistakes and tracebacks for bugs, the command line that reproduces a config."""
from dataclasses import dataclass

import pytest

from plumbing import cli


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


@dataclass
class Renamed:
    models: tuple = cli.arg(("a",), "which models", was=("variants", "families"))


def test_a_former_flag_name_is_read_as_the_new_one_with_one_line(capsys):
    p = cli.parser(Renamed, "test")
    p.prog = "x.py"
    assert cli.parse(Renamed, p, ["--variants", "b", "c"]) == Renamed(models=("b", "c"))
    assert capsys.readouterr().err == "x.py: --variants is now --models (read as --models)\n"
    assert cli.parse(Renamed, p, ["--models", "b"]) == Renamed(models=("b",)) and capsys.readouterr().err == ""
    assert "--variants" not in p.format_help() and "--families" not in p.format_help()  # the new name only
    assert cli.command_line("x.py", cli.parse(Renamed, p, ["--families", "b"])) == "python x.py --models b"
    assert cli.current_names(Renamed, {"families": ["b"], "seed": 1}) == {"models": ["b"], "seed": 1}  # a saved one


def test_build_rejects_unknown_names_and_main_guard_prints_user_errors_as_one_line(capsys):
    with pytest.raises(cli.ConfigError, match="unknown setting"):
        cli.build(Config, PRESETS, None, learning_rate=1.0)
    with pytest.raises(SystemExit) as exc:  # a bad flag: argparse's usage status
        cli.main_guard(lambda: cli.build(Config, lr=-2.0), prog="x.py")
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("x.py: error: --lr") and err.count("\n") == 1, err

    def missing_file():
        raise cli.UserError("data.txt not found;\n  give another file")
    with pytest.raises(SystemExit) as exc:
        cli.main_guard(missing_file, prog="x.py")
    assert exc.value.code == 1 and capsys.readouterr().err == "x.py: error: data.txt not found; give another file\n"


def test_main_guard_ends_a_ctrl_c_with_one_line_and_status_130(capsys):
    def interrupted():
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as exc:
        cli.main_guard(interrupted, prog="x.py")
    assert exc.value.code == 130 and capsys.readouterr().err == "x.py: interrupted (Ctrl-C)\n"
    with pytest.raises(SystemExit):
        cli.main_guard(interrupted, prog="x.py", interrupted="interrupted; the same command continues")
    assert capsys.readouterr().err == "x.py: interrupted; the same command continues\n"


def test_main_guard_keeps_the_traceback_of_a_bug():
    """A ValueError from inside torch (a shape bug) is not a user's mistake: it propagates."""
    import torch

    def shape_bug():
        return torch.zeros(2, 3) @ torch.zeros(2, 3)
    with pytest.raises(RuntimeError):
        cli.main_guard(shape_bug, prog="x.py")
    with pytest.raises(ValueError, match="a bug"):
        cli.main_guard(lambda: (_ for _ in ()).throw(ValueError("a bug")), prog="x.py")


def test_command_line_reproduces_the_config():
    p = cli.parser(Config, "test")
    cfg = Config(lr=0.5, compile=True, alphas=(0.3, 0.2))
    line = cli.command_line("x.py", cfg)
    assert line == "python x.py --lr 0.5 --compile --alphas 0.3 0.2"
    assert cli.parse(Config, p, line.split()[2:]) == cfg
    assert cli.command_line("x.py", Config()) == "python x.py"

    @dataclass
    class On:
        compile: bool = cli.arg(True, "compile")
    assert cli.command_line("x.py", On(compile=False)) == "python x.py --no-compile"


@pytest.mark.parametrize("taker", ["main", "other"])
def test_sigint_held_delivers_a_ctrl_c_on_leaving_whichever_thread_took_it(taker):
    """A Ctrl-C while workers start is held, then delivered once: also when another thread, whose
    mask does not block it (torch's pool, say), is the one the kernel hands it to."""
    import signal
    import threading
    import time
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    reached = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with cli.sigint_held():
                signal.pthread_kill(threading.main_thread().ident if taker == "main" else other.ident, signal.SIGINT)
                time.sleep(0.05)
                sum(range(1000))  # bytecodes at which a pending handler would run
                reached = True
    finally:
        stop.set()
        other.join()
    assert reached and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_require_names_lists_the_strays_and_refuses_none():
    cli.require_names("models", ("gpt", "delta"), ("gpt", "delta", "linear"))  # all known: no error
    with pytest.raises(cli.ConfigError, match=r"^--models must be names from gpt delta, got lstm rnn$"):
        cli.require_names("models", ("gpt", "lstm", "rnn"), ("gpt", "delta"))
    with pytest.raises(cli.ConfigError, match=r"got none$"):
        cli.require_names("models", (), ("gpt", "delta"))


def test_a_whole_number_is_ascii_digits_only():
    """str.isdigit() then int() was the pattern: '²' passed the test and int() raised (a traceback), '٣' read as 3."""
    assert [cli.whole(t) for t in ("0", "12", "007", "²", "٣", "", "-1", "1.0", " 1")] == [0, 12, 7] + [None] * 6
    cli.check_device("device", "cuda:1")
    for bad in ("cuda:²", "cuda:٣", "cuda:", "cpu:0"):
        with pytest.raises(cli.ConfigError, match="--device must be"):
            cli.check_device("device", bad)

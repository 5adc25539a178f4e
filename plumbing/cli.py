"""Dataclass configs as command lines: each script's settings are one dataclass, and its
argparse parser is generated from the fields, so every setting is named, defaulted, documented
and validated exactly once.

    @dataclass
    class RunConfig:
        lr: float = cli.arg(6e-4, "peak learning rate", group="optimization", bounds=(0, 10))
        model: str = cli.arg("spen", "which model", choices=("spen", "gpt"))
        def __post_init__(self):
            cli.check_fields(self)  # every flag against its field: type, bounds, no repeated entry
            cli.require(self.lr > 0, "--lr must be > 0, got {}", self.lr)

    parser = cli.parser(RunConfig, "what the script does", presets=PRESETS)
    cfg = cli.parse(RunConfig, parser, argv, presets=PRESETS)   # ConfigError -> one line, exit 2
    cli.main_guard(lambda: main(cfg), prog="run.py")            # UserError -> one line; a bug keeps its traceback

Precedence: a field's default < the preset's value (--preset NAME) < the command line. Only
flags the user typed override the preset (parser defaults are SUPPRESSed), so
`cli.given(parser, argv)` tells what was typed (train.py's --resume uses it to refuse flags that
contradict a checkpoint).

Numbers: every int or float field (and every tuple of them) carries its valid range,
`bounds=(lo, hi)`, both ends included, in the one place it is declared; `check_fields`, the
first line of each config's __post_init__, refuses a value of the wrong type, a non-finite
float or one outside the bounds in one line naming the flag, before anything is built, trained
or written; it also refuses a list flag that names an entry twice. tests/test_flags.py fuzzes
every numeric field of every command from these declarations (0, -1, nan, inf, huge, the
type's edge), so a field added without bounds fails it the day it lands. A count read from text
(an environment variable, a part of a flag's value) goes through `whole`: ASCII digits or None.

Booleans are `--flag` / `--no-flag`; tuples take several values (`--alphas 0.5 0.1 0.02`);
`command_line` writes a config back as the command that reproduces it.

Renamed flags: a field keeps its former names, `cli.arg(..., was=("variants",))`, so the commands
in notes and in committed results still run: the old flag is read as the field's, with one line on
stderr (`ablate.py: --variants is now --models (read as --models)`), and is left out of --help;
`current_names` reads a saved config (a results JSON's "settings") under today's names.

Ctrl-C: `exit_on_ctrl_c(__name__, "x.py")`, called before a command's heavy imports, makes a Ctrl-C
from the first second one line and exit 130; main_guard then takes it over (KeyboardInterrupt),
and ignores it once the work is done (the interpreter's teardown). `sigint_held()` holds a Ctrl-C
back while worker processes start (plumbing/grid.py, plumbing/corpus.py) and delivers it after.

Errors: `UserError` is THE exception for a mistake the user can fix (a flag, a file, a
checkpoint, the data): its message is one line saying what to do, and `main_guard` prints it
without a traceback and exits with its `status` (1; 2 for `ConfigError`, a bad flag: argparse's
usage status). Any other exception is a bug and keeps its traceback, a ValueError from inside
torch included.
Run: nothing to run; tests/test_cli.py checks this file.
"""

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import typing


class UserError(Exception):
    """A mistake the user can fix (flag, file, checkpoint, data); the message is one line saying
    what to do. main_guard prints it without a traceback, after `label`, and exits with `status`."""
    status = 1
    label = "error: "


class ConfigError(UserError):
    """A setting is out of range or contradicts another; the message is one line naming the flag."""
    status = 2  # argparse's status for a usage error


SEED = (0, 2 ** 32 - 1)  # numpy's seeds; torch takes these too
THREADS = (1, 256)  # torch CPU threads (99,999 of them crash OpenMP: a segmentation fault, no message)
WORKERS = (1, 64)  # processes of a grid, one run each


def arg(default, help, choices=None, group="settings", bounds=None, was=()):
    """A config field with its help text, allowed values, parser group and, for a number or a
    tuple of numbers, its valid range: bounds=(lo, hi), both included (check_fields); `was`: the
    flag's former names, still read (the module docstring)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple default for several values")
    if was and isinstance(default, bool):
        raise TypeError("a renamed flag takes values; a boolean's --no- form has no former name here")
    return dataclasses.field(default=default, metadata=dict(help=help, choices=choices, group=group, bounds=bounds,
                                                            was=tuple(was)))


def current_names(Config, settings):
    """A saved config (a dict of field values, e.g. a results JSON's "settings") under Config's
    field names of today: a value saved under a field's former name (`was`) is read as the field's."""
    former = {old: f.name for f in dataclasses.fields(Config) for old in f.metadata.get("was", ())}
    return {former.get(k, k): v for k, v in settings.items()}


def number_type(f):
    """int or float when field f holds a number or a tuple of them (from its annotation, else its
    default), None otherwise (a bool is not a number here)."""
    t = f.type
    if t is tuple or typing.get_origin(t) is tuple:
        args = typing.get_args(f.type)
        t = args[0] if args else type(f.default[0]) if f.default else None
    return t if t in (int, float) else None


def check_fields(cfg):
    """One ConfigError line unless every flag of cfg fits its field: a number of the field's type,
    finite and within its bounds (each entry of a tuple), None only where None is the default; and
    no entry named twice in a list flag (`--models linear linear` would count one run as two)."""
    for f in dataclasses.fields(cfg):
        v, kind, bounds = getattr(cfg, f.name), number_type(f), f.metadata.get("bounds")
        if "help" not in f.metadata or (v is None and f.default is None):
            continue
        several = isinstance(v, (tuple, list))
        if several:
            repeated = sorted({str(x) for i, x in enumerate(v) if x in v[:i]})
            require(not repeated, "--{} names {} more than once; give each once", f.name, " ".join(repeated))
        if kind is None or bounds is None:
            continue
        lo, hi = bounds
        for x in (v if several else [v]):
            typed = isinstance(x, (int, float) if kind is float else int) and not isinstance(x, bool)
            require(typed and lo <= x <= hi, "--{} must be {} in [{}, {}], got {!r}", f.name,
                    "an integer" if kind is int else "a finite number", lo, hi, x)


def require(ok, message, *values):
    """Raise ConfigError(message.format(*values)) unless ok."""
    if not ok:
        raise ConfigError(message.format(*values))


def require_names(name, given, allowed):
    """--NAME, a list flag, must be non-empty and name only entries of allowed: one line listing both."""
    bad = [g for g in given if g not in allowed]
    require(given and not bad, "--{} must be names from {}, got {}", name, " ".join(allowed),
            " ".join(bad) or "none")


def check_device(name, value):
    """--NAME must spell a torch device this project runs on: auto | cpu | cuda | cuda:N | mps."""
    kind, colon, index = value.partition(":")
    require(kind in ("auto", "cpu", "cuda", "mps") and (not colon or (kind == "cuda" and whole(index) is not None)),
            "--{} must be auto, cpu, cuda, cuda:N or mps, got {!r}", name, value)


def whole(text):
    """int(text) when text is a whole number in ASCII digits (what a flag or an environment variable means by a
    count), else None. str.isdigit() alone is no such test: it is true of '²', which int() refuses (a
    traceback), and of '٣', which int() reads as 3."""
    return int(text) if text.isascii() and text.isdigit() else None


class Renamed(argparse.Action):
    """A flag's former name (arg's `was`): its values go to the field's flag, and one line on stderr
    says the new name."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is now --{self.dest} (read as --{self.dest})", file=sys.stderr)
        setattr(namespace, self.dest, values)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (no usage block): `prog: error: ... (see --help)`."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser(Config, description, presets=None, epilog=None):
    """An ArgumentParser with one flag per field of Config, grouped by each field's `group`."""
    p = OneLineParser(description=description, epilog=epilog, argument_default=argparse.SUPPRESS)
    if presets:
        p.add_argument("--preset", choices=sorted(presets),
                       help="bundle of overrides: " + "; ".join(
                           f"{k}: {', '.join(f'{a}={b}' for a, b in v.items()) or 'the defaults'}"
                           for k, v in presets.items()))
    groups = {}
    for f in dataclasses.fields(Config):
        meta = f.metadata
        if "help" not in meta:
            continue  # internal field, not a flag
        g = groups.get(meta["group"]) or groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
        t = f.type
        text = f"{meta['help']} (default: {f.default!r})".replace("%", "%%")  # argparse formats help with %
        if t is bool:
            g.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, help=text)
            continue
        if t is tuple or typing.get_origin(f.type) is tuple:
            kind = dict(type=number_type(f) or (type(f.default[0]) if f.default else str), nargs="+")
        else:
            kind = dict(type=t, choices=meta["choices"])
        g.add_argument(f"--{f.name}", help=text, **kind)
        for old in meta.get("was", ()):  # read as this flag, with its line; not in --help
            g.add_argument(f"--{old}", dest=f.name, action=Renamed, help=argparse.SUPPRESS, **kind)
    return p


def given(p, argv):
    """The settings typed on the command line (not defaults, not the preset): {name: value}."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in vars(p.parse_args(argv)).items()}


def build(Config, presets=None, preset=None, **overrides):
    """Config(defaults < presets[preset] < overrides); ConfigError for unknown names or presets."""
    if preset is not None and preset not in (presets or {}):
        raise ConfigError(f"--preset must be one of {', '.join(sorted(presets or {}))}, got {preset!r}")
    names = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(overrides) - names)
    require(not unknown, "unknown setting(s) {}; see --help", ", ".join(unknown))
    values = {**((presets or {}).get(preset) or {}), **overrides}
    return Config(**values)


def parse(Config, p, argv=None, presets=None):
    """Parse argv into a validated Config; a bad value prints one line and exits with status 2.
    A typed `--quick` (a bool field named quick) selects presets['quick'], under the typed flags."""
    typed = given(p, argv)
    preset = typed.pop("preset", None)
    if preset is None and typed.get("quick") and "quick" in (presets or {}):
        preset = "quick"
    try:
        return build(Config, presets, preset, **typed)
    except ConfigError as e:
        p.exit(2, f"{p.prog}: error: {e}\n")


def command_line(script, cfg):
    """The command that reproduces cfg: `python SCRIPT` and every setting that is not its field's
    default, spelled as the parser reads it (`--flag` / `--no-flag`, tuples as several values).
    An empty tuple is left out: the parser takes no empty list, so only a preset sets one, and
    the preset's own flag (`--quick`) is in the line."""
    flags = []
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if "help" not in f.metadata or v == f.default or v == ():
            continue
        if isinstance(v, bool):
            flags.append(f"--{f.name}" if v else f"--no-{f.name}")
        else:
            flags.append(f"--{f.name} " + (" ".join(map(str, v)) if isinstance(v, tuple) else str(v)))
    return " ".join([f"python {script}"] + flags)


def exit_on_ctrl_c(name, prog):
    """From the first second of a command (`name` == "__main__": run as a script, not imported),
    until main_guard takes over: a Ctrl-C (while torch imports, or the flags are read) is one line
    and exit 130, not a traceback from inside an import. Called before a command's heavy imports;
    nothing is written before main_guard, so there is nothing to save."""
    def stop(signum, frame):
        os.write(2, f"{prog}: interrupted (Ctrl-C) while starting; nothing was written\n".encode())
        os._exit(130)
    global _script
    if name == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored (nohup): stays so
        signal.signal(signal.SIGINT, stop)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held by whoever exec'd us (lab.checks): now one line
        _script = True


_script = False  # a command run as a script (exit_on_ctrl_c): main_guard then ignores Ctrl-C once its work is done


@contextlib.contextmanager
def sigint_held():
    """A Ctrl-C (SIGINT) held back inside and delivered on leaving: for starting worker processes,
    which a Ctrl-C in mid-start would leave half-made (a child that never gets its job prints a
    traceback). Two layers, because the kernel hands a signal to any thread that does not block
    it while Python runs its handler in the main thread: the main thread's mask blocks it (a
    process started here inherits the block, through fork and exec, until it lifts it), and a
    handler that only notes it holds one another thread (torch's, say) took. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    old = signal.signal(signal.SIGINT, lambda *_: noted.append(True))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one blocked meanwhile is noted now
        signal.signal(signal.SIGINT, old)
        if noted:
            signal.raise_signal(signal.SIGINT)  # to the handler there was before


def main_guard(run, prog=None, interrupted="interrupted (Ctrl-C)"):
    """Call run(); a UserError becomes one line on stderr and exit status e.status, a Ctrl-C the
    line `interrupted` and status 130 (the shell's, 128 + SIGINT). Every other exception
    propagates with its traceback (a bug, or an error this code did not foresee)."""
    prog = prog or sys.argv[0].rsplit('/', 1)[-1]
    if signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.default_int_handler):
        signal.signal(signal.SIGINT, signal.default_int_handler)  # exit_on_ctrl_c's: from here, KeyboardInterrupt
    try:
        result = run()
        if _script and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # done: a Ctrl-C while the interpreter shuts down (torch's
            # teardown takes a moment) would end it by the signal, without a line, after the work was saved
        return result
    except UserError as e:
        print(f"{prog}: {e.label}{' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(e.status)
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr)
        sys.exit(130)

"""Records read back from a run folder, validated like flags: every value a command reads from a
file it or an earlier run wrote (metrics.jsonl, copy.jsonl, a grid's runs/NAME.json, ablate.py's
result.json, a results JSON, a checkpoint's metadata) is checked here for type, finiteness and range
where it is read, against the shape its reader needs; a damaged record (NaN, a string step, a negative
step or loss, a list where an object belongs, a missing field) is one line (cli.UserError) naming the file, the line and what
to do, never a NaN in a table and never a crash later in a figure.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) draws its claims from tables and curves built
from these records; cli.check_fields is the same care for the flags.

Shapes (`shape_error`):
    a type or a tuple of types    isinstance (a bool is no number); NUMBER = (int, float) is a
                                  finite number (NaN and inf refused); `float` alone admits them
                                  (a checkpoint's best_val is inf before its first evaluation)
    {key: shape}                  an object holding at least these keys (Opt(shape): may be absent)
    [shape]                       a list of such items
    Each(shape)                   an object whose every value has the shape
    Range(types, lo, hi)          a value of types that is None or a number in [lo, hi] (NaN is in no
                                  range): STEP an integer >= 0, LOSS a finite number >= 0, FRACTION in [0, 1]
    None                          anything

    recs = records.read_jsonl(path, records.METRICS)   # [] when there is none; one line when damaged
    run = records.read_json(path, SHAPE, fix="delete it and run the same command again")
    rows = records.load_record(path, cfg, "variants", "an ablation")  # a results JSON a command adds to
                                                       # (ablate.py's rows, scaling.py's curves): its settings too

Run: nothing to run; tests/test_records.py damages each kind of record by hand.
"""

import json
import math
import os
import dataclasses
from dataclasses import dataclass

from plumbing import cli

NUMBER = (int, float)  # a finite JSON number (bool aside)
NULL = type(None)


@dataclass(frozen=True)
class Each:
    """A shape: a dict (JSON object) whose every value has `shape`."""
    shape: object


@dataclass(frozen=True)
class Opt:
    """A shape inside {key: shape}: the key may be absent; when present its value has `shape`."""
    shape: object


@dataclass(frozen=True)
class Range:
    """A shape: a value of `types` (a type or a tuple, as above) that, unless None, lies in [lo, hi]."""
    types: object
    lo: float
    hi: float = math.inf


STEP = Range(int, 0)  # a step or a count
LOSS = Range(NUMBER, 0)  # a loss in nats (a cross-entropy is never negative)
FRACTION = Range(NUMBER, 0, 1)  # an accuracy, a share of tokens
MAYBE_LOSS = Range((*NUMBER, NULL), 0)  # a loss where none may be measured (an empty split)


def shape_error(value, shape, where="it"):
    """Where value departs from shape, in words ('curves.gpt_c32.points[3].val_loss is NaN, not a
    finite number'), or None when it fits (the shapes: see the module docstring)."""
    if shape is None:
        return None
    if isinstance(shape, Opt):
        return shape_error(value, shape.shape, where)
    if isinstance(shape, Range):
        wrong = shape_error(value, shape.types, where)
        if wrong or value is None or shape.lo <= value <= shape.hi:
            return wrong
        return f"{where} is {value}, not in [{shape.lo}, {shape.hi}]"
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} is {_kind(value)}, not an object"
        missing = [k for k, sub in shape.items() if k not in value and not isinstance(sub, Opt)]
        if missing:
            return f"{where} has no {', '.join(missing)}"
        return next((e for k, sub in shape.items() if k in value and (e := shape_error(value[k], sub, f"{where}.{k}"))),
                    None)
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is {_kind(value)}, not a list"
        return next((e for i, x in enumerate(value) if (e := shape_error(x, shape[0], f"{where}[{i}]"))), None)
    if isinstance(shape, Each):
        if not isinstance(value, dict):
            return f"{where} is {_kind(value)}, not an object"
        return next((e for k, x in value.items() if (e := shape_error(x, shape.shape, f"{where}.{k}"))), None)
    types = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        return f"{where} is {_kind(value)}, not " + " or ".join(_kind(t, float in types) for t in types if t is not float
                                                                  or int not in types)
    if isinstance(value, float) and int in types and not math.isfinite(value):  # NUMBER: finite
        return f"{where} is {value}, not a finite number"
    return None


def _kind(x, real=True):
    """x (a value or a type) in words; a value's own, if a number or a short string. real: int, where
    a float is welcome too, reads 'a number' (else 'an integer')."""
    if not isinstance(x, type):
        return json.dumps(x) if isinstance(x, (int, float, str)) and len(str(x)) < 40 else _kind(type(x))
    return {NULL: "null", bool: "true/false", int: "a number" if real else "an integer", float: "a number",
            str: "a string", list: "a list", dict: "an object"}.get(x, x.__name__)


# ---- the record files of a run folder ---------------------------------------------------------

# train.py's metrics.jsonl: one record per step (grad_norm is not read back: fp16 may log inf there)
METRICS = dict(step=STEP, train_loss=Opt(LOSS), lr=Opt(Range(NUMBER, 0)), ms=Opt(Range(NUMBER, 0)),
               val_loss=Opt(LOSS))
# scaling.py's copy.jsonl: the copy split of one point of a curve (plumbing/repeats.py copy_split)
COPY = dict(step=STEP, tokens=Range(NUMBER, 0), loss_copy=MAYBE_LOSS, loss_other=MAYBE_LOSS,
            copy_fraction=Opt(FRACTION), by_distance=[dict(loss=MAYBE_LOSS, fraction=Opt(FRACTION))])
# scaling.py's scores.jsonl: one point scored on the whole val split, per-window sums (repeats.window_scores)
SCORES = dict(step=STEP, tokens=Range(NUMBER, 0), machine=str, windows=dict(n=[STEP], loss=[LOSS], copy_n=[STEP],
                                                                           copy_loss=[LOSS], bin_n=[[STEP]],
                                                                           bin_loss=[[LOSS]]))
RUN_RECORDS = {"metrics.jsonl": METRICS, "copy.jsonl": COPY, "scores.jsonl": SCORES}  # read_jsonl's shape by file name
FIXES = {"metrics.jsonl": "fix or delete that line, or train the run anew in another --out_dir",
         "copy.jsonl": "delete copy.jsonl: the same command measures its points again from the checkpoints",
         "scores.jsonl": "delete that line: the same command scores the run's last checkpoint again (earlier "
                         "points, whose checkpoints are gone, stay unscored)"}


def read_jsonl(path, shape=None, fix=None):
    """The complete records of a .jsonl file, each checked against shape (None: RUN_RECORDS' shape
    for the file's name, else any JSON object); [] if there is none. A last line cut short by a
    stop (no newline, not JSON) is skipped; any other line that is not JSON or has not the shape is
    one cli.UserError line naming the file, the line number, what is wrong and `fix`."""
    if not os.path.exists(path):
        return []
    name = os.path.basename(path)
    shape = RUN_RECORDS.get(name, dict) if shape is None else shape
    fix = fix or FIXES.get(name, "move it away")
    try:
        with open(path) as f:
            lines = f.read().split("\n")  # the last: "" after a complete line, else a line cut short
    except (OSError, ValueError) as e:  # a folder, unreadable, not UTF-8
        raise cli.UserError(f"{path} is not a readable record of a run ({' '.join(str(e).split())}); {fix}") from None
    recs = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            if n == len(lines):
                continue  # cut short by a stop or a crash: the run writes it again
            raise cli.UserError(f"{path} line {n} is not JSON ({e}); {fix}") from None
        wrong = shape_error(rec, shape, "the record")
        if wrong:
            raise cli.UserError(f"{path} line {n} is not a record of this file ({wrong}); {fix}")
        recs.append(rec)
    return recs


def read_json(path, shape, fix, what="a saved run"):
    """The JSON object at path, checked against shape; a file that is not JSON, or of another shape,
    is one cli.UserError line naming it, what is wrong and `fix`."""
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError) as e:  # truncated, empty, not UTF-8, a folder, unreadable
        raise cli.UserError(f"{path} is not readable as {what} ({' '.join(str(e).split())}); {fix}") from None
    wrong = shape_error(value, shape, "the file")
    if wrong:
        raise cli.UserError(f"{path} is not {what} ({wrong}); {fix}")
    return value


def load_record(path, cfg, part, what, same=(), shape=dict):
    """res[part] of the results JSON at path ({} when there is none), written by an earlier
    invocation of the same command with cfg's settings, the keys in `same` aside. A corrupt file, one
    whose part has not the `shape` its reader needs (shape_error), or one of other settings is one
    line (cli.UserError) naming it: its rows would not compare with this invocation's, and
    rewriting it would lose them. what: how to call it ('an ablation')."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError) as e:  # truncated, empty, not UTF-8, a folder
        raise cli.UserError(f"{path} is not {what} ({type(e).__name__}: {' '.join(str(e).split())}); move it away "
                            "or use another --out_dir") from None
    wrong = shape_error(old, {"settings": dict, part: shape}, "the file")
    if wrong:
        raise cli.UserError(f"{path} is not {what} ({wrong}); move it away or use another --out_dir")
    settings, body = cli.current_names(type(cfg), old["settings"]), old[part]  # a renamed field read as it is now
    now = json.loads(json.dumps(dataclasses.asdict(cfg)))  # tuples as JSON lists, as saved
    differ = [f"--{k} {now[k]} (there: {settings.get(k)})" for k in now if k not in same and settings.get(k) != now[k]]
    cli.require(not differ, "{} holds {} with other settings: {}; use another --out_dir (or move it away)", path,
                what, ", ".join(differ))
    return body

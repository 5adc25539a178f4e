"""Results as files, one way for every command: markdown tables, figures and the results JSON,
and the mean ± std of a variant's seeds that they show.

`md_table` is the one builder of the GitHub tables in the commands' .md reports; `save_json` is
the one writer of their results JSON: the command that reproduces the run and its settings first,
then the results, written atomically (checkpoint.atomic_json: a full disk is one line, a crash
leaves the old file whole); `save_text` and `save_figure` write the .md and .png the same way (`pyplot`: matplotlib drawing
into files, imported only when a figure is made).
`load_record` reads such a JSON back for a command that adds to it (ablate.py's rows, scaling.py's
curves), refusing one of other settings in one line. `shape_error` says where a JSON read back
departs from the shape its reader needs (a list where a number should be, a null accuracy, a
truncated record, a NaN): every results file a command reads is checked so, and refused in one
line naming it, instead of a traceback from deep inside a table (plumbing/records.py holds the
shapes and the readers of a run folder's records).

Run: nothing to run; tests/test_tables.py.
"""

import dataclasses
import json
import os
import statistics

from plumbing import checkpoint, cli
from plumbing.records import NUMBER, Each, shape_error  # the shapes of what is read back (plumbing/records.py)


def cell(x, fmt=".3f"):
    """One table cell: None -> '—', a float with fmt, anything else as str."""
    if x is None:
        return "—"
    return format(x, fmt) if isinstance(x, float) else str(x)


def md_table(header, rows, fmt=".3f"):
    """GitHub markdown lines: the header, the rule, one line per row (cells through `cell`).
    header: list of column names; rows: iterables of the same length."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        r = list(r)
        if len(r) != len(header):
            raise ValueError(f"a row of {len(r)} cells under {len(header)} columns: {r}")
        lines.append("| " + " | ".join(cell(x, fmt) for x in r) + " |")
    return lines


def diverged_runs(results):
    """{name: step} of a grid's runs whose loss was not finite (recall.py's variants, frontier.py's points)."""
    return {f"{r.get('variant') or r.get('point')} seed {r['seed']}": r["diverged"] for r in results
            if r.get("diverged") is not None}


def diverged_lines(res):
    """A report's lines on diverged runs (none when none did): they are out of every table."""
    if not res.get("diverged"):
        return []
    return ["", "**Diverged** (the training loss was not finite; lower --lr): " + ", ".join(
        f"{k} at step {v}" for k, v in res["diverged"].items()) + ". These runs are in no mean and no table above."]


def mean_std(values):
    """(mean, sample standard deviation) of a list of numbers; the std of one value is 0."""
    values = [float(v) for v in values]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def save_json(res, path, script, cfg):
    """Write {command, settings, **res} to path atomically; returns the dict written.
    script: the command's file name ('recall.py'); cfg: its config dataclass."""
    out = dict(command=cli.command_line(script, cfg), settings=dataclasses.asdict(cfg))
    out.update({k: v for k, v in res.items() if k not in out})
    checkpoint.atomic_json(out, path)
    return out


def save_text(text, path):
    """Write text to path atomically (a report's .md)."""
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
            checkpoint.durable(f)
    checkpoint.atomic_write(path, write)


def pyplot():
    """matplotlib.pyplot drawing into files only (the Agg backend: no screen), imported when a
    figure is made, so a command that draws nothing never imports matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, dpi=120):
    """Save a matplotlib figure as a PNG at path atomically."""
    checkpoint.atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))


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

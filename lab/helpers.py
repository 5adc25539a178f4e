"""What the lab notebook calls for sections 1 to 4 (lab/write.py: 5 and 6), and the lab's own
plumbing (sizes, output folder, background runs, figures, tables, answers, the hand-in): thin
wrappers over the repository's own functions, so the notebook's cells stay short and run the same
code as the commands. Every size comes from SIZES (LAB_SMOKE=1: tiny ones, CI's). A bad argument or
environment value is one cli.ConfigError line, no traceback in the notebook (`one_line_errors`).

Environment (`environment`): LAB_SMOKE=1 tiny sizes; LAB_OUT where outputs go (default out/lab
in the repository; a folder this process can write in); LAB_SOLUTIONS=1 the notebook uses
solutions.py instead of exercises.py; LAB_THREADS=N at most N cores (default all: the byte run's
threads, recall's and the write points' two workers).

Shape glossary: B sequences, T tokens, N key-value pairs, D head width of a write state, C width
of a token's embedding, S decays (traces), K key ids, M value ids.
"""
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import time
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import ema  # noqa: E402
import grammar  # noqa: E402
import probe  # noqa: E402
import recall  # noqa: E402
import spcn  # noqa: E402
from plumbing import checkpoint, cli, tables  # noqa: E402

ALPHAS = (0.5, 0.1, 0.02)  # SPEN's decays (the paper's)


def one_line_errors():
    """In IPython, a cli.UserError (a bad flag, argument or environment value) prints its one
    line, no traceback; in a script (`python lab/lab.py`) it is the one line and exit status 2."""
    try:
        ip = get_ipython()  # noqa: F821 (defined inside IPython only)
    except NameError:
        previous = sys.excepthook

        def hook(etype, value, tb):
            if not issubclass(etype, cli.UserError):
                return previous(etype, value, tb)
            print(f"error: {' '.join(str(value).split())}", file=sys.stderr)
            sys.exit(2)
        sys.excepthook = hook
        return
    ip.set_custom_exc((cli.UserError,), lambda shell, etype, value, tb, tb_offset=None:
                      print(f"error: {' '.join(str(value).split())}", file=sys.stderr))


def environment(env):
    """(smoke, out, cores) from the LAB_* variables of `env`; a bad value is one cli.ConfigError
    line: LAB_THREADS a whole number >= 1 (unset or empty: every core), LAB_OUT a folder this
    process can write in (checkpoint.check_out_dir: not a file, not read-only)."""
    threads = env.get("LAB_THREADS") or ""
    cli.require(threads.isascii() and threads.isdigit() and 1 <= int(threads) <= 1024 or not threads,  # '²' is a
                # digit to isdigit() but not to int(); 99999 threads: torch segfaults
                "LAB_THREADS must be a whole number of cores from 1 to 1024 (or unset: all), got {!r}", threads)
    out = os.path.abspath(env.get("LAB_OUT") or os.path.join(ROOT, "out", "lab"))
    checkpoint.check_out_dir(out, flag="LAB_OUT")
    cores = os.cpu_count() or 1
    return env.get("LAB_SMOKE") == "1", out, min(int(threads), cores) if threads else cores  # no more than there are


one_line_errors()  # before `environment`: in the notebook its error is one line too
SMOKE, OUT, CORES = environment(os.environ)

FULL = dict(
    probe=dict(),  # probe.QUICK as it is: one seed, about a minute
    features=dict(n_sentences=600, spcn_epochs=1),
    recall=dict(),  # recall.QUICK as it is: four variants, about 3 minutes on 2 cores
    write=dict(n_train=1000, n_test=500),  # sequences per pair count of the untrained write and its probe
    points=dict(steps=400, curriculum=150, decay=50, eval_every=100, test_seqs=128, n_embd=64),  # frontier --quick's
    data=dict(max_tokens=None, cache_dir=None),  # the whole builtin corpus, the default cache
    bytes=dict(max_iters=500, eval_interval=100, log_interval=50),  # cpu_bytes, a third of its steps
    split=dict(windows=32), sample=dict(max_new_tokens=200))
SMOKE_SIZES = dict(
    probe=dict(n_train=60, n_val=20, n_test=30, spcn_epochs=1, probe_iters=5, gru_epochs=1, n_columns=4,
               column_size=16, k=2),
    features=dict(n_sentences=40, spcn_epochs=1),
    recall=dict(steps=4, eval_every=2, curriculum=1, decay=1, test_seqs=8, val_seqs=8, n_embd=16, workers=1),
    write=dict(n_train=40, n_test=20),
    points=dict(steps=2, curriculum=1, decay=1, eval_every=1, test_seqs=8, val_seqs=8, n_embd=8),
    data=dict(max_tokens=20_000, cache_dir=os.path.join(OUT, "cache")),
    bytes=dict(max_iters=2, eval_interval=1, log_interval=1, n_layer=1, n_embd=16, block_size=32, batch_size=2,
               eval_iters=1, warmup_iters=0),
    split=dict(windows=2), sample=dict(max_new_tokens=8))
SIZES = SMOKE_SIZES if SMOKE else FULL


def positive(name, value):
    """value if it is an integer >= 1, else one cli.ConfigError line naming `name`."""
    cli.require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                "{} must be an integer >= 1, got {!r}", name, value)
    return value


_ANSWERS = {}  # what the notebook's cells registered with `answer`: survives every reload of exercises.py


def answer(fn=None, **written):
    """Register an answer written in a notebook cell, so that every later `exercises()` (each
    check cell reloads the file) uses it instead of exercises.py's: `@H.answer` above a function
    named as its exercise, or `H.answer(ANSWER_5C="...")` for the written one. -> fn."""
    public = {n for n in vars(importlib.import_module("lab.exercises")) if not n.startswith("_")} - {"torch"}
    named = {**({fn.__name__: fn} if fn is not None else {}), **written}
    for name in named:
        cli.require(name in public, "answer: {!r} is not an exercise's name (one of {})", name,
                    ", ".join(sorted(public)))
    _ANSWERS.update(named)
    print(f"{', '.join(named)}: the checks now use this cell's answer (it lasts while the kernel runs; copy it into "
          "lab/exercises.py to keep it)")
    return fn


def exercises():
    """The student's module (lab/exercises.py, reloaded so that edits count), or solutions.py
    with LAB_SOLUTIONS=1, with the answers registered from notebook cells (`answer`) on top."""
    name = "lab.solutions" if os.environ.get("LAB_SOLUTIONS") == "1" else "lab.exercises"
    cli.require(name == "lab.exercises" or os.path.isfile(os.path.join(ROOT, "lab", "solutions.py")),
                "LAB_SOLUTIONS=1, but lab/solutions.py is not in this copy (a student handout): unset it")
    module = importlib.reload(importlib.import_module(name))
    if not _ANSWERS:
        return module
    return types.SimpleNamespace(**{**{k: v for k, v in vars(module).items() if not k.startswith("__")}, **_ANSWERS})


def hand_in():
    """What to hand in and how: lab/exercises.py, the one file the grader reads (no `@H.answer` cell is
    in it), and the exercises a cell answers while the file still holds their stub. -> their names."""
    path = os.path.join(ROOT, "lab", "exercises.py")
    spec = importlib.util.spec_from_file_location("_handed_in", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the file as the grader imports it: no cell's answer on top
    stub = lambda v: str(v).startswith("Exercise 5c (written") or callable(v) and "NotImplementedError" in \
        inspect.getsource(v)
    missing = sorted(n for n in _ANSWERS if stub(getattr(module, n, None)))
    print(f"Hand in {path}: the grader reads this file only (every function, and ANSWER_5C as its text), never the "
          "notebook. Check it as the grader will: !python -m lab.grader lab/exercises.py")
    if missing:
        print(f"Answered in a notebook cell but still the stub in the file: {', '.join(missing)}: copy each cell's "
              "function (or text) into lab/exercises.py, or it is graded as not written.")
    return missing


# ---- long runs in the background ----------------------------------------------------------------------

JOBS = ("recall", "points", "bytes")  # the three long cells, in the order the notebook needs them
_BACKGROUND = {}  # proc, jobs, t0: the background run this kernel started (start_background)


def background_key():
    """What the background results are computed with (the smoke switch and every size), as a short
    hash: a finished run's file is read, by this kernel or a restarted one, only under the same key,
    so a file of other settings is never taken for this run's."""
    settings = json.dumps(dict(smoke=SMOKE, sizes=SIZES), sort_keys=True, default=str)
    return hashlib.sha256(settings.encode()).hexdigest()[:16]


def finished(job, key=None):
    """The record of `job` in OUT/background/<job>.json if it was written under `key` (default:
    this kernel's settings), else None. A record: dict(key, result, output) or dict(key, error, output)."""
    path = os.path.join(OUT, "background", f"{job}.json")
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if record.get("key") == (key or background_key()) else None


def start_background():
    """Start the long runs (recall.py's quick run, the write points, the byte run) that have not
    finished yet in one background process, one after another, so that they train while the
    student reads and writes; the cells that need them (run_recall, train_points, train_bytes)
    pick their results up, or wait for them. Keyed on their files, not on this kernel: after a
    restart this starts only what is missing. Its output: OUT/background/log.txt. -> the process
    (None when every run had finished)."""
    if _BACKGROUND and _BACKGROUND["proc"].poll() is None:
        print(f"the background run is already going (pid {_BACKGROUND['proc'].pid})")
        return _BACKGROUND["proc"]
    key = background_key()
    done = [j for j in JOBS if (finished(j, key) or {}).get("result") is not None]
    todo = [j for j in JOBS if j not in done]
    if done:
        print(f"finished before, read from {os.path.join(OUT, 'background')}: {', '.join(done)}")
    if not todo:
        _BACKGROUND.clear()
        return None
    for job in todo:  # a failed record of these settings would pass for the new run's
        with contextlib.suppress(FileNotFoundError):
            os.remove(out("background", f"{job}.json"))
    log = open(out("background", "log.txt"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "lab.background", key, *todo], cwd=ROOT, stdout=log, stderr=log,
                            env={**os.environ, "LAB_OUT": OUT, "LAB_SMOKE": "1" if SMOKE else "0"})
    _BACKGROUND.update(proc=proc, jobs=todo, t0=time.time())
    print(f"started in the background (pid {proc.pid}): {', '.join(todo)}, one after another; their cells will "
          f"pick the results up (output: {os.path.join(OUT, 'background')})")
    return proc


def collect(job):
    """The background run's result of `job` (waiting for it if this kernel's run is still on it),
    its output printed -> the result, or None when no finished file of these settings holds it and
    no background run of this kernel will write it (the caller then runs the job here)."""
    key, proc, said = background_key(), _BACKGROUND.get("proc"), False
    ours = proc is not None and job in _BACKGROUND["jobs"]
    while (record := finished(job, key)) is None:
        if not ours:
            return None
        if proc.poll() is not None:
            print(f"the background run stopped before {job} was done (see {os.path.join(OUT, 'background', 'log.txt')}):"
                  f" running it here")
            return None
        if not said:
            print(f"waiting for the background run of {job} ({time.time() - _BACKGROUND['t0']:.0f} s since it "
                  "started) ...")
            said = True
        time.sleep(0.5)
    if ours and job == _BACKGROUND["jobs"][-1]:
        proc.wait()  # reap it (its CPU time then counts as this process's children's)
    if "error" in record:
        print(f"the background run of {job} failed: {record['error']}: running it here")
        return None
    print(record["output"], end="")
    return record["result"]


def out(*parts):
    """A path under OUT (created)."""
    path = os.path.join(OUT, *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def _ipython():
    """Whether this runs inside IPython (a notebook), where figures and tables are displayed."""
    try:
        return get_ipython() is not None  # noqa: F821
    except NameError:
        return False


def show(fig_or_png, name=None):
    """Save a figure under OUT (or take a PNG path) and display it inline in IPython; -> its path."""
    path = fig_or_png
    if not isinstance(fig_or_png, str):
        path = out(f"{name}.png")
        fig_or_png.savefig(path, dpi=100, bbox_inches="tight")
        pyplot().close(fig_or_png)
    if _ipython():
        from IPython.display import Image, display
        display(Image(filename=path))
    else:
        print(f"figure: {path}")
    return path


def table(header, rows, fmt=".3f"):
    """A table (tables.md_table) rendered as one in IPython, printed as text elsewhere."""
    text = "\n".join(tables.md_table(header, rows, fmt))
    if _ipython():
        from IPython.display import Markdown, display
        display(Markdown(text))
    else:
        print(text)


def pyplot():
    """matplotlib.pyplot, with the Agg backend outside IPython (figures go to files)."""
    import matplotlib
    if not _ipython():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


class _Lines:
    """A stdout that passes through the lines `keep` accepts (the commands' progress) and drops
    the rest (a config dump, a markdown report the notebook renders as a table instead)."""

    def __init__(self, stream, keep):
        self.stream, self.keep, self.part = stream, keep, ""

    def write(self, text):
        self.part += text
        *lines, self.part = self.part.split("\n")
        for line in lines:
            if self.keep(line):
                self.stream.write(line + "\n")
        return len(text)

    def flush(self):
        self.stream.flush()


@contextlib.contextmanager
def only_lines(keep):
    """Within the block, print only the lines that keep(line) accepts."""
    lines = _Lines(sys.stdout, keep)
    with contextlib.redirect_stdout(lines):
        yield
    if lines.part and keep(lines.part):
        lines.stream.write(lines.part + "\n")


# ---- 1. the trace ------------------------------------------------------------------------------


def impulse_response(alphas=ALPHAS, T=80):
    """(T, S) float64: the traces after a single 1 at t = 0 (ema.traces_ref, the definition):
    column s is a_s (1 - a_s)^t, the weight the trace gives an input t steps back."""
    x = torch.zeros(1, positive("T", T), 1, dtype=torch.float64)
    x[0, 0, 0] = 1.0
    return ema.traces_ref(x, alphas)[0, :, :, 0]


def plot_impulse(alphas=ALPHAS, T=80, windows=None):
    """The impulse response of each decay, with its effective window (if given) dotted."""
    cli.require(windows is None or len(windows) == len(alphas), "plot_impulse: windows needs one window per decay "
                "({} of them), got {!r}", len(alphas), windows)
    plt = pyplot()
    h = impulse_response(alphas, T)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for s, a in enumerate(alphas):
        line, = ax.plot(h[:, s], label=f"a = {a}")
        if windows:
            ax.axvline(windows[s] - 0.5, color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("steps back t")
    ax.set_ylabel("weight a (1 - a)^t")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 1)
    ax.set_title("EMA impulse response" + (" (dotted: the window holding 90% of the weight)" if windows else
                                           " (exercise 1 adds each trace's window)"))
    ax.legend()
    return show(fig, "impulse")


# ---- 2. two pasts, one state -------------------------------------------------------------------


def two_pasts(alphas=ALPHAS, T=2000, vocab=64, width=8, seed=0):
    """Two token sequences that differ in their first token only, embedded by one random table
    and traced in float32 (ema.traces_ref). Returns dict(first_equal={a: step}, final_gap) where
    first_equal[a] is the first step from which trace a of the two is bit-for-bit the same (None:
    never within T), final_gap the largest difference of the final states."""
    cli.require(isinstance(T, int) and T >= 2 and isinstance(vocab, int) and vocab >= 2, "two_pasts needs integers "
                "T >= 2 and vocab >= 2, got T = {!r}, vocab = {!r}", T, vocab)
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(vocab, positive("width", width), generator=g)
    ids = torch.randint(vocab, (T,), generator=g)
    other = ids.clone()
    other[0] = (ids[0] + 1) % vocab  # a different first token, the rest the same
    h = ema.traces_ref(emb[torch.stack([ids, other])], alphas)  # (2, T, S, C) float32
    same = (h[0] == h[1]).all(-1)  # (T, S)
    first = {}
    for s, a in enumerate(alphas):
        diff = (~same[:, s]).nonzero()
        last = int(diff[-1]) if len(diff) else -1
        first[a] = last + 1 if last + 1 < T else None
    return dict(first_equal=first, final_gap=float((h[0, -1] - h[1, -1]).abs().max()), T=T)


# ---- 3. structure --------------------------------------------------------------------------------


def probe_config(**overrides):
    """probe.py's quick mode (probe.QUICK) at this lab's size, writing under OUT/probe."""
    return cli.build(probe.ProbeConfig, {"quick": probe.QUICK}, "quick",
                     **{"out_dir": os.path.join(OUT, "probe"), **SIZES["probe"], **overrides})


def run_probe(cfg):
    """probe.main(cfg) with its progress lines (the long summary line left to results.md), then
    roles.png inline -> the results dict."""
    with only_lines(lambda line: not line.split("] ")[-1].startswith("wrote ")):
        res = probe.main(cfg)
    acc = role_accuracy(res)
    w, t = acc["within"], acc["transfer"]["spcn"]
    print(f"within A: activity only {w['instantaneous']['overall']:.3f} -> with traces {w['spcn']['overall']:.3f} "
          f"(untrained {w['untrained']['overall']:.3f}); transferred to B (SPCN): content roles {t['content']:.3f}, "
          f"structural roles {t['structural']:.3f}")
    plot_roles(res)
    return res


READERS = (("instantaneous", "activity only (no traces)", "0.75"), ("spcn", "SPCN: activity + traces", "tab:blue"),
           ("untrained", "SPCN untrained: + traces", "lightsteelblue"), ("gru", "causal GRU (supervised)", "tab:green"),
           ("bigru", "BiGRU (supervised, both sides)", "tab:orange"))


def role_accuracy(res):
    """{split: {reader: {part: accuracy}}} from probe.main's result, averaged over its seeds:
    split 'within' (A -> A) or 'transfer' (A -> B), reader as READERS, part 'overall', 'content'
    (the content words' roles) or 'structural' (the function words' and positions')."""
    seeds = res["per_seed"]
    return {split: {who: {part: sum(s[f"{split}_{who}"][part] for s in seeds) / len(seeds)
                          for part in ("overall", "content", "structural")}
                    for who, _, _ in READERS if f"{split}_{who}" in seeds[0]}
            for split in ("within", "transfer")}


def plot_roles(res):
    """The probe's result as the lab reads it: role accuracy of each reader, overall and on content
    and structural roles, within Grammar A and transferred to Grammar B, the activity-only probe
    beside the traces' (the lift of section 3)."""
    plt = pyplot()
    acc = role_accuracy(res)
    parts = ("overall", "content", "structural")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, split in zip(axes, ("within", "transfer")):
        for i, (who, label, color) in enumerate(READERS):
            if who not in acc[split]:
                continue
            xs = [j + 0.16 * (i - 2) for j in range(len(parts))]
            bars = ax.bar(xs, [acc[split][who][p] for p in parts], width=0.16, color=color, label=label)
            ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
        ax.set_xticks(range(len(parts)), [f"{p} roles" if p != "overall" else p for p in parts])
        ax.set_ylim(0, 1.1)
        ax.set_title("within Grammar A (held-out sentences)" if split == "within" else
                     "transfer: probes fit on A, tested on B (other content words)", fontsize=10)
    axes[0].set_ylabel("role accuracy")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    return show(fig, "roles")


def probe_features(n_sentences=None, spcn_epochs=None, seed=0):
    """An SPCN trained on Grammar A (no labels) and its per-word features on A-train and A-test:
    dict(instantaneous=(X_train, X_test), traces=(X_train, X_test), y=(y_train, y_test))."""
    n = SIZES["features"]["n_sentences"] if n_sentences is None else n_sentences
    epochs = SIZES["features"]["spcn_epochs"] if spcn_epochs is None else spcn_epochs
    cli.require(isinstance(n, int) and n >= 2 and isinstance(epochs, int) and epochs >= 0,
                "probe_features needs n_sentences >= 2 and spcn_epochs >= 0, got {!r} and {!r}", n, epochs)
    torch.manual_seed(seed)
    data = grammar.split(n, 0, n // 2, seed=seed)["A"]
    small = SMOKE_SIZES["probe"] if SMOKE else {}
    shape = {k: small[k] for k in ("n_columns", "column_size", "k") if k in small}
    model = spcn.SPCN(spcn.SPCNConfig(seed=seed, **shape))
    model.fit(data["train"], epochs=epochs, log=None)
    feats, ys = {}, []
    for part in ("train", "test"):
        ids, roles, _ = grammar.encode(data[part])
        f, _ = probe.features(model, ids)
        for kind, X in f.items():
            feats.setdefault(kind, []).append(X)
        ys.append(roles[roles >= 0])
    return dict(instantaneous=tuple(feats["instantaneous"]), traces=tuple(feats["traces"]), y=tuple(ys))


# ---- 4. content: MQAR -----------------------------------------------------------------------------


def recall_config(**overrides):
    """recall.py's quick mode (recall.QUICK) at this lab's size, writing under OUT/recall.
    A bad variant or step count is one cli.ConfigError line."""
    return cli.build(recall.RecallConfig, {"quick": recall.QUICK}, "quick",
                     **{"out_dir": os.path.join(OUT, "recall"), "workers": min(2, CORES), **SIZES["recall"],
                        **overrides})


def recall_quiet(cfg):
    """recall.main(cfg) printing only its progress and verdict lines (its markdown report stays
    in recall.md: the notebook shows the accuracies as a table in exercise 5) -> the results dict."""
    with only_lines(lambda line: line.startswith(("[", "quick mode", "verdict"))):
        return recall.main(cfg)


def run_recall(cfg):
    """recall.py's run (the background's, when start_background ran it with these settings), then
    the lab's recall figure inline (plot_recall) -> the results dict."""
    res = collect("recall") if cfg == recall_config() else None
    if res is None:
        res = recall_quiet(cfg)
    plot_recall(res)
    return res


def plot_recall(res):
    """The MQAR result, drawn so that no reader hides another: accuracy per N and per key-to-query
    distance, GPT as large open circles under the others' small filled markers, the legend outside."""
    plt = pyplot()
    pairs = list(res["settings"]["pairs"])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, (v, r) in enumerate(res["variants"].items()):
        gpt = v == "gpt"
        style = dict(marker="o", ms=13 if gpt else 5, mfc="none" if gpt else None, mew=2 if gpt else 1,
                     lw=5 if gpt else 1.5, alpha=0.45 if gpt else 1, zorder=1 if gpt else 2 + i, color=f"C{i}",
                     ls="--" if recall.state_kind(v) in recall.FIXED else "-", label=v + (" (open circles)" if gpt else ""))
        a1.plot(pairs, [r["acc"][str(N)] for N in pairs], **style)
        d = sorted(int(k) for k in r["acc_distance"])
        a2.plot(d, [r["acc_distance"][str(k)] for k in d], **style)
    a1.plot(pairs, [1 / N for N in pairs], "k:", label="1/N: knows which values, not which key")
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_ylim(-0.03, 1.08)
        a.set_ylabel("MQAR accuracy")
    a1.set_xlabel("key-value pairs N")
    a2.set_xlabel("key-to-query distance (bin start, all N pooled)")
    a1.set_title("recall per N (dashed: a state of fixed size)", fontsize=10)
    a2.set_title("recall per distance", fontsize=10)
    handles, labels = a1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    return show(fig, "recall")


def show_mqar(N=4, T=16, n_keys=8, n_values=16, seed=0):
    """One MQAR sequence (recall.mqar) written out: keys as k0.., values as v0.., '?' marks the
    answer due at each query, '.' the blank."""
    cli.require(all(isinstance(x, int) for x in (N, T, n_keys, n_values)) and 1 <= N <= min(n_keys, n_values)
                and T >= 3 * N, "show_mqar needs integers 1 <= N <= n_keys, n_values and T >= 3N, got N = {!r}, "
                "T = {!r}", N, T)
    idx, targets, _ = recall.mqar(1, N, T, n_keys, n_values, torch.Generator().manual_seed(seed), span=N)
    name = lambda i: "." if i == n_keys + n_values else (f"k{i}" if i < n_keys else f"v{i - n_keys}")
    cells = [name(i) + (f"?(v{t - n_keys})" if t >= 0 else "") for i, t in zip(idx[0].tolist(), targets[0].tolist())]
    return " ".join(cells)


def recall_table(res, binding, recalled_pairs):
    """The MQAR result with the student's binding and recalled_pairs, one row per variant."""
    cli.require(isinstance(res, dict) and "variants" in res, "recall_table needs the recall results (the dict "
                "run_recall returns); run that cell first, got {!r}", type(res).__name__)
    pairs = list(res["settings"]["pairs"])
    rows = [[v, f"{r['state_floats']:,}"] + [f"{r['acc'][str(N)]:.3f} / {binding(r['acc'][str(N)], N):+.3f} / "
                                             f"{recalled_pairs(r['acc'][str(N)], N):.2f}" for N in pairs]
            for v, r in res["variants"].items()]
    table(["variant", "state floats / layer"] + [f"N = {N}: acc / binding / pairs" for N in pairs], rows)

"""Every entry point a user runs, under the same guards, by construction. The list is derived from
the tree: each top-level file with `if __name__ == "__main__"` (the commands, and the demos of the
model files spen.py and grammar.py) and every dev/ and lab/ module run as `python -m`. Each must be in
ENTRY_POINTS below (how to run it long, and the flag naming where it writes), so a new one fails
here until it is, and each passes the generic cases:
    - its source calls cli.exit_on_ctrl_c before its heavy imports, and cli.main_guard (a model file's
      demo, which imports no plumbing: signal.signal before its imports);
    - `--help`: exit 0 and a usage (a demo takes no flags);
    - `--out_dir` (or its output flag) that is a file or a folder it may not write in: one line,
      a non-zero exit, nothing written;
    - Ctrl-C (SIGINT to its process group, as a terminal sends it) the moment it can take one
      (`ctrl_c_first`: within READY_CPU s of its own CPU time), at 0.3 s (while it imports) and at 2 s
      (at work, for a command that runs that long), each once it is ready (tests/test_ctrl_c.py: a
      signal inside the interpreter's own start-up is not the project's to answer): one line, exit
      130, no process of it left, no temporary file; nothing at all where the line says nothing was
      written.
The help and folder cases run in this process (runpy, as `python X` would); the Ctrl-C cases are
processes, run a few at a time. GAPS lists what another engineer owns this round (lab/, dev/map.py)
and the cases that do not apply to an entry point: a static case there is a strict xfail, so the day
it is mended the test says to drop the entry."""

import concurrent.futures
import glob
import os
import pathlib
import runpy
import signal
import sys
import tempfile
import time

import pytest

from plumbing import cli
from test_ctrl_c import ended, session, start_held, strays, until_ready  # processes, signals: its docstring

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("import torch", "import numpy", "from plumbing import checkpoint", "import train")  # seconds to import


def derived():
    """{entry point: source file} from the tree: each top-level command file, and each module of dev/ and lab/."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "*.py"))):
        text = pathlib.Path(path).read_text(encoding="utf-8")
        if 'if __name__ == "__main__"' in text:
            found[os.path.basename(path)] = path
    for folder in ("dev", "lab"):
        for path in sorted(glob.glob(os.path.join(ROOT, folder, "*.py"))):
            if 'if __name__ == "__main__"' in pathlib.Path(path).read_text(encoding="utf-8"):
                found[f"{folder}.{os.path.basename(path)[:-3]}"] = path
    return found


# entry point -> run: argv of a run that lasts (OUT: a fresh folder for it), out: the flag naming where it
# writes (None: it writes nothing of its own), late: it still runs at 2 s (a Ctrl-C then is one at work),
# notice: lines it writes to stderr first, whatever follows (an old command's pointer to the new one), demo:
# a model file's demo (no flags, no plumbing)
TRAIN = ["--preset", "cpu_bytes", "--max_iters", "5000", "--eval_interval", "5000", "--eval_iters", "1",
         "--n_layer", "1", "--n_embd", "16", "--device", "cpu", "--out_dir", "OUT"]
ENTRY_POINTS = {
    "train.py": dict(run=TRAIN, out="--out_dir", late=True),
    "recall.py": dict(run=["--models", "linear", "--steps", "5000", "--curriculum", "10", "--decay", "10",
                           "--workers", "1", "--out_dir", "OUT"], out="--out_dir", late=True),
    "frontier.py": dict(run=["--quick", "--workers", "1", "--out_dir", "OUT"], out="--out_dir", late=True),
    "ablate.py": dict(run=["--preset", "cpu_bytes", "--models", "linear", "--max_iters", "5000", "--seeds", "1",
                           "--workers", "1", "--out_dir", "OUT"], out="--out_dir", late=True),
    "scaling.py": dict(run=["--models", "linear", "--widths", "16", "--out_dir", "OUT"], out="--out_dir", late=True),
    "probe.py": dict(run=["--out_dir", "OUT"], out="--out_dir", late=True),
    "bench.py": dict(run=["--quick", "--sections", "ema", "--out", "OUT/bench.json"], out="--out", late=True),
    "content.py": dict(run=["--runs", "OUT/runs", "--out_dir", "OUT"], out="--out_dir", late=False),  # no runs: ends
    "data.py": dict(run=["--dataset", "builtin", "--tokenizer", "gpt2", "--force", "--cache_dir", "OUT"],
                    out="--cache_dir", late=False),
    "sample.py": dict(run=["--init_from", "OUT/none.pt"], out=None, late=False),  # reads a checkpoint, writes none
    "dev.kill_grid": dict(run=["--out_dir", "OUT"], out="--out_dir", late=True),
    "dev.kill_loop": dict(run=["--kills", "20", "--out_dir", "OUT/run"], out="--out_dir", late=True),
    "dev.lr_sweep": dict(run=["--results", os.path.join(ROOT, "results", "ablate_bytes"), "--out_dir", "OUT"],
                         out="--out_dir", late=False),
    "dev.map": dict(run=["--out_dir", "OUT"], out="--out_dir", late=False),
    "lab.checks": dict(run=[os.path.join(ROOT, "lab", "exercises.py")], out=None, late=True,
                       notice=1),  # the old command: it becomes lab.grader's run below (os.execv, one process)
    "lab.handout": dict(run=["--out_dir", "OUT"], out="--out_dir", late=False),
    "lab.reference": dict(run=["--out", "OUT/ref.ipynb"], out="--out", late=False),
    "lab.background": dict(run=["TOKEN"], out=None, late=False),
    "lab.grader": dict(run=[os.path.join(ROOT, "lab", "exercises.py")], out=None, late=True),  # 10 processes
    "lab.seeds": dict(run=[], out=None, late=False),
    "lab.snapshot": dict(run=[], out=None, late=False),
    "dev.install_size": dict(run=["--out_dir", "OUT"], out="--out_dir", late=False),
    "dev.suite_time": dict(run=["--tests", "tests/test_lm.py", "--out_dir", "OUT"], out="--out_dir", late=True),
    "dev.seeds": dict(run=["--plan", "linear:0", "--out_dir", "OUT"], out="--out_dir", late=True),
    "dev.halflife": dict(run=["--seeds", "OUT/none", "--out_dir", "OUT"], out="--out_dir", late=False),  # no seeds: ends
    # a model file's demo: it imports no plumbing (tests/test_imports.py) and takes no flags; its guard is the
    # standard library's signal.signal above its imports
    "spen.py": dict(run=[], out=None, late=False, demo=True),  # the readers' sizes on the meta device, printed
    "grammar.py": dict(run=[], out=None, late=False, demo=True),
}
GAPS = {  # (entry point, case) -> why it is not mended here; a static case mended flips its strict xfail
    ("lab.checks", "guards"): "the autograder's old command: before any heavy import it becomes python -m lab.grader "
                              "(os.execv, the same process), whose guards then hold",
    ("lab.checks", "help"): "its --help is lab.grader's, after an os.execv that would replace this test's process",
    ("lab.background", "guards"): "started by the notebook with its kernel's token, not by a user",
    ("lab.background", "help"): "its argument is a token, not flags",
    ("lab.background", "ctrl_c_early"): "started by the notebook, not by a user at a terminal",
    ("lab.background", "ctrl_c_first"): "started by the notebook, not by a user at a terminal",
    ("lab.seeds", "ctrl_c_early"): "it prints a paragraph from a JSON file and ends within 0.3 s: nothing to interrupt",
}


UNSAFE = {("lab.background", "help"), ("lab.seeds", "ctrl_c_early"),  # gaps that would start real work,
          ("lab.checks", "help")}  # or exec over this test's process: not run


def cases(case, where=lambda e: True):
    """pytest params of every entry point for `case`; a gap is an xfail (a static one strict, a
    process-level one not run)."""
    out = []
    for e in ENTRY_POINTS:
        if not where(ENTRY_POINTS[e]):
            continue
        gap = GAPS.get((e, case))
        marks = [pytest.mark.xfail(reason=gap, strict=True, run=(e, case) not in UNSAFE)] if gap else []
        out.append(pytest.param(e, marks=marks, id=e))
    return out


def test_every_entry_point_is_listed():
    found = derived()
    print(f"{len(found)} entry points: {', '.join(found)}")
    assert set(found) == set(ENTRY_POINTS), f"add {sorted(set(found) - set(ENTRY_POINTS))} to ENTRY_POINTS (how " \
        f"it runs long, where it writes); drop {sorted(set(ENTRY_POINTS) - set(found))}"
    assert not {e for e, _ in GAPS} - set(found)


@pytest.mark.parametrize("entry", cases("guards"))
def test_the_guards_are_in_its_source(entry):
    """exit_on_ctrl_c(__name__, ...) before the first heavy import; main_guard around the work. A model file's
    demo (DEMO) installs its SIGINT handler with the standard library, before its imports."""
    text = pathlib.Path(derived()[entry]).read_text(encoding="utf-8")
    guard = text.find("signal.signal(signal.SIGINT" if ENTRY_POINTS[entry].get("demo") else "cli.exit_on_ctrl_c(__name__")
    heavy = min((i for i in (text.find("\n" + h) for h in HEAVY) if i >= 0), default=len(text))
    assert 0 <= guard < heavy, f"{entry}: call cli.exit_on_ctrl_c(__name__, ...) before its heavy imports"
    assert ENTRY_POINTS[entry].get("demo") or "cli.main_guard(" in text, f"{entry}: run its work through cli.main_guard"


@pytest.fixture
def in_process(monkeypatch, tmp_path):
    """run(entry, argv) as `python ENTRY argv` in this process -> (exit status, stdout, stderr); the
    SIGINT handler and cli's state put back after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(ROOT)
    handler, script = signal.getsignal(signal.SIGINT), cli._script

    def run(entry, argv, capsys):
        monkeypatch.setattr(sys, "argv", [derived()[entry], *argv])
        try:
            with pytest.raises(SystemExit) as e:
                if entry.endswith(".py"):
                    runpy.run_path(derived()[entry], run_name="__main__")
                else:  # as `python -m`: the module not yet imported (another test's import put back after)
                    monkeypatch.delitem(sys.modules, entry, raising=False)
                    runpy.run_module(entry, run_name="__main__", alter_sys=True)
        finally:
            signal.signal(signal.SIGINT, handler)
            cli._script = script
        got = capsys.readouterr()
        return e.value.code, got.out, got.err
    return run


@pytest.mark.slow
@pytest.mark.parametrize("entry", cases("help", lambda e: not e.get("demo")))  # a demo takes no flags
def test_help(entry, in_process, capsys):
    code, out, err = in_process(entry, ["--help"], capsys)
    assert code in (0, None) and out.startswith("usage:"), (code, out[:200], err[-300:])


@pytest.mark.slow
@pytest.mark.parametrize("entry", cases("out", lambda e: e["out"]))
def test_a_bad_output_folder_is_one_line(entry, in_process, capsys, tmp_path):
    flag = ENTRY_POINTS[entry]["out"]
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for folder in (str(a_file), "/proc/self/ema_out"):  # a file; a folder no one may write in
        argv = [a.replace("OUT", folder) for a in ENTRY_POINTS[entry]["run"]]  # its long run, there
        code, out, err = in_process(entry, argv, capsys)
        lines = err.strip().splitlines()
        assert code not in (0, None) and len(lines) == 1 and "Traceback" not in err, (folder, code, err[-500:])
        assert sorted(os.listdir(tmp_path)) == ["a_file"] and a_file.read_text() == "x", folder


# ---- Ctrl-C: real processes, a few at a time --------------------------------------------------------

AT = {"ctrl_c_first": 0.0, "ctrl_c_early": 0.3, "ctrl_c_late": 2.0}  # seconds after the start, once it is ready
READY_CPU = 1.0  # CPU seconds (its own, which load stretches far less than wall time) a command may run before it
# takes a Ctrl-C: the interpreter's start and plumbing.cli take a fraction of it, torch's import (a guard after it) more
PARALLEL = 4  # processes at once: each spends most of its life importing torch, on 2 shared cores


def ctrl_c(entry, at, folder):
    """Start entry in folder (test_ctrl_c.start_held: a session of its own, SIGINT held until its handler is
    in place) and Ctrl-C its group `at` s after the start, or once it is ready if that is later (at 0: at
    once, the signal pending until it is ready) -> dict(alive, ready: s from the start to ready (None at 0),
    status, out, err, cpu: the CPU seconds it ran, left: pids still alive after the grace below, temps:
    temporary files in folder, files: everything in it)."""
    argv = [a.replace("OUT", os.path.join(folder, "out")) for a in ENTRY_POINTS[entry]["run"]]
    head = [derived()[entry]] if entry.endswith(".py") else ["-m", entry]
    logs = folder + ".out", folder + ".err"  # beside folder, whose files are the command's own
    with open(logs[0], "w") as out, open(logs[1], "w") as err:
        t0 = time.time()
        p = start_held([*head, *argv], folder, stdout=out, stderr=err)
    took = until_ready(p, at, t0) if at else None
    alive = not ended(p)
    if alive:
        os.killpg(p.pid, signal.SIGINT)
    cpu = reap(p, 90)
    deadline = time.time() + 10
    while (session(p.pid) or strays(folder)) and time.time() < deadline:
        time.sleep(0.1)
    left = sorted(set(session(p.pid)) | set(strays(folder)))  # its session's, and a worker of a session of its own
    for pid in left:  # this test's own leftovers: end them, by pid
        os.kill(pid, signal.SIGKILL)
    files = [os.path.relpath(os.path.join(d, n), folder) for d, _, ns in os.walk(folder) for n in ns]
    out, err = (pathlib.Path(f).read_text() for f in logs)
    return dict(alive=alive, ready=took, status=p.returncode, out=out, err=err, cpu=cpu, left=left, files=files,
                temps=[f for f in files if ".tmp" in os.path.basename(f) or f.endswith(".partial")])


def reap(p, limit):
    """Wait for p to exit (SIGKILL to its group after limit s) and reap it -> the CPU seconds it ran (os.wait4's
    rusage: user and system); p.returncode set."""
    deadline = time.time() + limit
    while not (got := os.wait4(p.pid, os.WNOHANG))[0]:
        if time.time() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
        time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(got[1])
    return got[2].ru_utime + got[2].ru_stime


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """Every Ctrl-C case that runs, PARALLEL at a time -> {(entry, case): ctrl_c's dict}."""
    todo = [(e, c) for c in AT for e in ENTRY_POINTS if (c != "ctrl_c_late" or ENTRY_POINTS[e]["late"])
            and (e, c) not in GAPS]
    root = tmp_path_factory.mktemp("ctrl_c")
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        jobs = {k: pool.submit(ctrl_c, k[0], AT[k[1]], tempfile.mkdtemp(dir=root)) for k in todo}
        return {k: j.result() for k, j in jobs.items()}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
@pytest.mark.parametrize("entry, case", [pytest.param(e, c, id=f"{e}-{c}") for c in AT for e in ENTRY_POINTS
                                         if c != "ctrl_c_late" or ENTRY_POINTS[e]["late"]])  # late: still at work at 2 s
def test_ctrl_c_is_one_line_130_and_leaves_nothing(entry, case, interrupted):
    if (entry, case) in GAPS:
        pytest.xfail(GAPS[entry, case])
    r = interrupted[entry, case]
    assert r["alive"], f"{entry} ended before the Ctrl-C at {AT[case]} s: give it a longer run in ENTRY_POINTS"
    assert r["ready"] is not None or not AT[case], f"{entry} never took SIGINT itself (not caught, or still " \
        f"blocked): call cli.exit_on_ctrl_c(__name__, ...) first thing"
    if case == "ctrl_c_first":  # how early a Ctrl-C is the project's: in its own CPU time, whatever the load
        print(f"{entry} takes a Ctrl-C after {r['cpu']:.3f} s of its CPU time")  # pytest -rP shows it
        assert r["cpu"] < READY_CPU, f"{entry} ran {r['cpu']:.2f} s of CPU before it could take a Ctrl-C"
    said = r["err"] or (r["out"].splitlines() or [""])[-1] + "\n"  # train.py in its loop logs it (stdout)
    lines = 1 + ENTRY_POINTS[entry].get("notice", 0)
    assert r["status"] == 130 and said.count("\n") == lines and "Traceback" not in r["out"] + r["err"], r
    assert "interrupted" in said, said
    assert not r["left"] and not r["temps"], r
    if "nothing was written" in said:
        assert not r["files"], r["files"]

"""A Ctrl-C at any moment of a command, its imports included, is one line and exit 130 within a few
seconds, with no worker left: train.py and a grid command (recall.py, two workers) at 0.5 s and
2.5 s, and the grid once more while its workers start (they import torch with SIGINT ignored: the
parent stops them itself instead of waiting for them). Real processes, each in its own session;
a terminal's Ctrl-C is a SIGINT to the whole foreground group, so that is what they get.

A Ctrl-C is sent once the command can take it, never earlier: Python catches SIGINT itself from a few
ms after exec (its KeyboardInterrupt, with a traceback from wherever it lands), and until the command's
first line has run (`cli.exit_on_ctrl_c`) no code of the project exists to answer it; on a loaded machine
0.3 s can still be inside the interpreter's own start-up. Since /proc's SigCgt shows the interpreter's
handler as well as the project's, each command starts with SIGINT blocked (as lab.checks passes it on
through its os.execv) and exit_on_ctrl_c unblocks it once its handler is in place: `ready` reads that
from /proc/PID/status. How early that is, in the command's own CPU time (which load does not stretch),
is tests/test_entry_points.py's `ctrl_c_first` case."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow  # process-level: outside the `-m "not slow"` loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = {
    # long enough that no Ctrl-C comes after the end, even on an idle machine (the Ctrl-C stops them at once)
    "train": ["train.py", "--preset", "cpu_bytes", "--max_iters", "5000", "--eval_interval", "5000", "--eval_iters", "1",
              "--n_layer", "1", "--n_embd", "16", "--out_dir", "out"],
    "grid": ["recall.py", "--models", "linear", "gpt", "--steps", "5000", "--curriculum", "10", "--decay", "10",
             "--eval_every", "1000", "--test_seqs", "8", "--val_seqs", "8", "--workers", "2", "--out_dir", "out"],
}


def session(sid):
    """pids of the live processes of session sid (a command and the workers it started)."""
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(name))
    return pids


def strays(folder):
    """pids of the live processes whose command line names folder: a worker a command started in a
    session of its own (dev.seeds' curves) is out of its session, not out of its folder."""
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                line = f.read().decode(errors="replace")
            with open(f"/proc/{name}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except (FileNotFoundError, ProcessLookupError):
            continue
        if folder in line and not zombie and int(name) != os.getpid():
            pids.append(int(name))
    return pids


SIGINT_BIT = 1 << (signal.SIGINT - 1)  # its bit in /proc/PID/status's signal masks


def start_held(argv, cwd, **kw):
    """Popen([python, *argv]) in a session of its own (a terminal's foreground group), SIGINT blocked from its
    exec until its own handler unblocks it (module docstring); the output to pipes unless kw says otherwise."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # this thread's mask, which the child inherits
    try:
        return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=dict(os.environ, PYTHONPATH=ROOT), text=True,
                                start_new_session=True, **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw})
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def ready(pid):
    """Does pid take a Ctrl-C with its own handler now: SIGINT caught (SigCgt) and no longer blocked (SigBlk)?"""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = {k: int(v, 16) for k, v in (line.split(":", 1) for line in f) if k in ("SigCgt", "SigBlk")}
    except (FileNotFoundError, ProcessLookupError):
        return False
    return bool(masks["SigCgt"] & SIGINT_BIT) and not masks["SigBlk"] & SIGINT_BIT


def until_ready(p, at, t0, limit=120):
    """Wait until p is ready and at least `at` s have passed since t0 (its start) -> seconds from t0 to ready,
    or None when p ended first or was not ready within limit s (its handler never came: no Ctrl-C it can take)."""
    while not ready(p.pid):
        if ended(p) or time.time() > t0 + limit:
            return None
        time.sleep(0.005)
    took = time.time() - t0
    time.sleep(max(0.0, t0 + at - time.time()))
    return took


def ended(p):
    """Has p exited? (Its status left for whoever reaps it: its rusage, tests/test_entry_points.py's reap.)"""
    return os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def start(what, tmp_path):
    return start_held([os.path.join(ROOT, COMMANDS[what][0]), *COMMANDS[what][1:]], tmp_path)


def ctrl_c(p):
    """Ctrl-C to p's group -> (its one line about it, seconds until it exited), once no process of it is
    left. The line is on stderr; train.py in its loop logs it (stdout and log.txt), stderr empty."""
    t0 = time.time()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert "Traceback" not in out + err and err.count("\n") <= 1, err
    err = err or out.splitlines()[-1] + "\n"
    took = time.time() - t0
    deadline = time.time() + 10
    while session(p.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not session(p.pid), "a worker outlived its command"
    return err, took


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
@pytest.mark.parametrize("what", ["train", "grid"])
@pytest.mark.parametrize("after", [0.5, 2.5])
def test_ctrl_c_is_one_line_and_130(what, after, tmp_path):
    t0, p = time.time(), start(what, tmp_path)
    assert until_ready(p, after, t0) is not None, f"{what} never took SIGINT (not caught, or still blocked)"
    err, took = ctrl_c(p)
    assert p.returncode == 130 and err.count("\n") == 1 and "Traceback" not in err and "interrupted" in err, err
    assert took < 15, took


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_ctrl_c_while_grid_workers_start(tmp_path):
    p = start("grid", tmp_path)
    deadline = time.time() + 60
    while len(session(p.pid)) < 3 and time.time() < deadline:  # the parent and its two workers
        time.sleep(0.05)
    assert p.poll() is None and len(session(p.pid)) >= 3
    err, took = ctrl_c(p)
    assert p.returncode == 130 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "interrupted" in err and "continues: python recall.py" in err, err
    assert took < 15, took  # not the 30 s grace a started run gets

"""Ctrl-C, kill -9 and a second grid against a real two-worker frontier.py grid, then check it.

The grid is frontier.py --quick with a short budget (6 points, 2 workers). In turn:
  1. the grid runs uninterrupted in a folder of its own: the reference numbers;
  2. life 1 is Ctrl-C'd (SIGINT to its process group, as a terminal does) after its first saved
     run: exit status 130, one stderr line (runs saved, the command that continues), no
     traceback from any process, no worker alive 15 s later;
  3. life 2 is SIGKILLed after its next saved run: no worker alive 15 s later; a half-written
     run file (what a kill inside the parent's atomic write leaves: NAME.json.tmp<pid>, cut
     short) is planted beside the saved runs;
  4. while life 3 runs, a second grid in the folder is refused in one line, and so is the grid
     with other settings (--steps); life 3 removes the planted temp file, saying so, and ends;
  5. every saved run equals the reference run of the same point, bit for bit (one thread per
     run), frontier.json holds the 6 points, and no temp file is left.

    python -m dev.kill_grid | tee results/frontier/kill_grid.log      # --out_dir DIR: where (default: a temporary folder)
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line
cli.exit_on_ctrl_c(__name__, "dev/kill_grid.py")  # until main_guard; checkpoint imports torch
from plumbing import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root: frontier.py runs there
ARGS = ["--quick", "--steps", "40", "--curriculum", "10", "--decay", "5", "--workers", "2"]


STARTED = []  # the grids started: a Ctrl-C of this harness stops them too (each is a session of its own)


def grid(out, *extra):
    """A frontier.py grid in its own process group (a terminal's foreground job)."""
    STARTED.append(subprocess.Popen([sys.executable, "frontier.py", *ARGS, "--out_dir", out, *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True))
    return STARTED[-1]


def workers(pid):
    """The pids of pid's workers (its spawned children; not multiprocessing's resource tracker), from /proc."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        kids = [int(c) for c in f.read().split()]
    found = []
    for c in kids:
        try:
            with open(f"/proc/{c}/cmdline", "rb") as f:
                found += [c] if b"spawn_main" in f.read() else []
        except FileNotFoundError:
            pass
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie waits for its reaper only
    except FileNotFoundError:
        return False


def saved(out):
    folder = os.path.join(out, "runs", "near")
    return sorted(n for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []


def wait_for_saved(p, out, n):
    """Wait until n runs are saved in out and two workers are busy -> the workers' pids."""
    while len(saved(out)) < n or len(workers(p.pid)) < 2:
        assert p.poll() is None, p.communicate()
        time.sleep(0.05)
    return workers(p.pid)


def gone(pids, seconds=15):
    """Wait up to `seconds` for every pid to end -> how long it took, or None if one lives."""
    t0 = time.time()
    while time.time() - t0 < seconds:
        if not any(alive(pid) for pid in pids):
            return time.time() - t0
        time.sleep(0.1)
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default=None, help="holds the grids ref/ and killed/ (default: a new temporary folder)")
    root = p.parse_args(argv).out_dir or tempfile.mkdtemp(prefix="kill_grid-")
    checkpoint.make_out_dir(root)  # a file, a read-only folder: one line before any grid starts
    ref, out = os.path.join(root, "ref"), os.path.join(root, "killed")
    for d in (ref, out):
        shutil.rmtree(d, ignore_errors=True)
    print(f"$ python -m dev.kill_grid\neach life: python frontier.py {' '.join(ARGS)} --out_dir {out}")
    t0 = time.time()
    p = grid(ref)
    p.communicate()
    assert p.returncode == 0
    print(f"1. uninterrupted: {len(saved(ref))} runs in {time.time() - t0:.0f} s")

    p = grid(out)
    pids = wait_for_saved(p, out, 1)
    os.killpg(p.pid, signal.SIGINT)
    o, e = p.communicate()
    print(f"2. Ctrl-C after {len(saved(out))} saved run(s): exit {p.returncode}, stderr {len(e.splitlines())} "
          f"line(s), traceback: {'Traceback' in o + e}; workers {pids} all gone after {gone(pids):.1f} s\n"
          f"   stderr: {e.strip()}")
    assert p.returncode == 130 and len(e.splitlines()) == 1 and "Traceback" not in o + e

    p = grid(out)
    n = len(saved(out))
    pids = wait_for_saved(p, out, n + 1)
    p.kill()
    p.communicate()
    took = gone(pids)
    half = os.path.join(out, "runs", "near", f"{saved(out)[0]}.tmp{p.pid}")
    with open(os.path.join(out, "runs", "near", saved(out)[0])) as f:
        with open(half, "w") as g:
            g.write(f.read()[:100])  # cut short, as a kill inside the write leaves it
    print(f"3. kill -9 after {len(saved(out))} saved runs: workers {pids} all gone after "
          + (f"{took:.1f} s" if took is not None else "MORE THAN 15 s") + f"; planted {os.path.basename(half)}")
    assert took is not None

    p = grid(out)
    while os.path.exists(half):  # life 3 holds the folder
        time.sleep(0.1)
    second = subprocess.run([sys.executable, "frontier.py", *ARGS, "--out_dir", out], cwd=ROOT, capture_output=True,
                            text=True)
    running = p.poll() is None
    o, e = p.communicate()
    other = subprocess.run([sys.executable, "frontier.py", *ARGS[:1], "--steps", "301", *ARGS[3:], "--out_dir", out],
                           cwd=ROOT, capture_output=True, text=True)
    print(f"4. a second grid while life 3 runs (still running after it: {running}): exit {second.returncode}, "
          f"{second.stderr.strip()}\n   life 3: exit {p.returncode}; "
          f"{[ln for ln in o.splitlines() if ln.startswith('removed')]}\n"
          f"   then --steps 301 in the folder: exit {other.returncode}, {other.stderr.strip()}")
    assert running and second.returncode == 1 and other.returncode == 1 and p.returncode == 0

    def run_record(folder, n):  # a saved run's record, all but its seconds
        with open(os.path.join(folder, "runs", "near", n)) as f:
            return {k: v for k, v in json.load(f).items() if k != "seconds"}
    differ = [n for n in saved(ref) if run_record(ref, n) != run_record(out, n)]
    temps = [n for d, _, ns in os.walk(out) for n in ns if ".tmp" in n]
    with open(os.path.join(out, "frontier.json")) as f:
        points = sum(len(v) for v in json.load(f)["points"].values())
    print(f"5. {len(saved(out))} saved runs, differing from the uninterrupted ones (all but their seconds): "
          f"{differ}; frontier.json points: {points}; temp files left: {temps}")
    assert not differ and points == 6 and not temps


def stop_grids():
    """SIGKILL every grid this harness started that still lives (their own sessions miss its Ctrl-C)."""
    for p in STARTED:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


if __name__ == "__main__":
    try:
        cli.main_guard(main, prog="dev/kill_grid.py")
    finally:
        stop_grids()

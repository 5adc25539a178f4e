"""What the test suite costs: runs the README's two test commands (the whole suite, and the student's
loop without the `slow` tests) once each, in a process of its own, and records each summary line
(passed, xfailed, failed), its wall time, and the machine it ran on with the load beside it (the
1-minute load average before and after: a loaded machine is slower). With --busy N, N processes that
keep a core busy each (a Python loop) run beside the suite, as a machine shared with other work has:
the suite's verdict must not depend on them.

Run (from the repository root)
    python -m dev.suite_time                          # -> out/suite/suite.json
    python -m dev.suite_time --out_dir results/bench  # the committed number (README's Tests section)
    python -m dev.suite_time --busy 3 --runs all --out_dir results/bench   # the whole suite on a loaded machine
Writes suite.json (suite_busy3.json with --busy 3): per command its counts, seconds and load before and
after; the busy processes, the cpu (runtime.machine_line), cores, Python, date and the commit.
results/bench/README.md and the README quote it; tests/test_requirements.py checks that they do.
"""

import datetime
import os
import platform
import re
import subprocess
import sys
import time

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "dev.suite_time")

from plumbing import checkpoint, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = re.compile(r"(\d+) (passed|failed|xfailed|skipped|errors?|warnings?)")


def commit():
    """The checked-out commit, with '+changes' when the tree differs from it (None outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


RUNS = {"all": ["-n", "auto"], "not_slow": ["-n", "auto", "-m", "not slow"]}  # the README's two test commands' options
BUSY = "while True: pass"  # one busy process: a core's worth of work, as another job's


def main(argv=None):
    p = cli.OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default="out/suite", help="folder for suite.json")
    p.add_argument("--tests", default="tests", help="what pytest runs (the README's command: tests)")
    p.add_argument("--busy", type=int, default=0, metavar="N", help="processes that keep a core busy each, beside "
                   "the suite (0 to 64; default 0)")
    p.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS), help="which test commands to time")
    a = p.parse_args(argv)
    cli.require(0 <= a.busy <= 64, "--busy must be an integer in [0, 64], got {}", a.busy)
    checkpoint.check_out_dir(a.out_dir)
    path = os.path.join(a.out_dir, f"suite_busy{a.busy}.json" if a.busy else "suite.json")
    out = dict(runs={}, busy=dict(processes=a.busy, each=f"python -c {BUSY!r}"), cpu=runtime.machine_line(),
               cores=os.cpu_count(), python=platform.python_version(), date=datetime.date.today().isoformat(),
               commit=commit())
    busy = [subprocess.Popen([sys.executable, "-c", BUSY, "dev.suite_time", str(os.getpid())],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(a.busy)]
    try:
        for name in dict.fromkeys(a.runs):
            out["runs"][name] = run(RUNS[name], a.tests)
    finally:  # the busy processes end with the command: done, an error or a Ctrl-C
        for b in busy:
            b.kill()
            b.wait()
    checkpoint.make_out_dir(a.out_dir)
    checkpoint.atomic_json(out, path)
    print(f"wrote {path}")


def run(marker, tests):
    """One pytest command, timed -> its record; one line if it does not pass."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *marker, tests]
    shown = "python -m pytest -q " + " ".join(f'"{m}"' if " " in m else m for m in marker + [tests])
    load0, t0 = os.getloadavg()[0], time.time()
    print(f"{shown} (load {load0:.1f}) ...", flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds, load1 = time.time() - t0, os.getloadavg()[0]
    last = (done.stdout.strip().splitlines() or [""])[-1]
    counts = {k.rstrip("s") if k.startswith(("error", "warning")) else k: int(n) for n, k in SUMMARY.findall(last)}
    if done.returncode != 0 or not counts.get("passed"):
        failed = [ln.split()[1] for ln in done.stdout.splitlines() if ln.startswith("FAILED ")]
        raise cli.UserError(f"{shown} did not pass (exit {done.returncode}): {last or done.stderr.strip()[-300:]}"
                            + (f"; first failures: {', '.join(failed[:5])}" if failed else "") + "; nothing recorded")
    print(f"  {last} | {seconds:.0f} s wall, load {load0:.1f} -> {load1:.1f}", flush=True)
    return dict(command=shown, counts=counts, summary=last, seconds=round(seconds), load_before=round(load0, 1),
                load_after=round(load1, 1))

if __name__ == "__main__":
    cli.main_guard(main, prog="dev.suite_time")

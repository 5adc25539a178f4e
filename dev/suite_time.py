"""What the test suite costs: runs the README's test command once, in a process of its own, and
records its summary line (passed, xfailed, failed), its wall time, and the machine it ran on with
the load beside it (the 1-minute load average before and after: a loaded machine is slower).

Run (from the repository root)
    python -m dev.suite_time                          # -> out/suite/suite.json
    python -m dev.suite_time --out_dir results/bench  # the committed number (README's Tests section)
Writes suite.json: command, counts, seconds, cpu (runtime.machine_line), cores, load before and
after, Python, date, the commit. results/bench/README.md and the README quote it; tests/test_requirements.py
checks that they do.
"""

import argparse
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default="out/suite", help="folder for suite.json")
    p.add_argument("--tests", default="tests", help="what pytest runs (the README's command: tests)")
    a = p.parse_args(argv)
    checkpoint.check_out_dir(a.out_dir)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", a.tests]
    load0, t0 = os.getloadavg()[0], time.time()
    print(f"running {' '.join(command[1:])} (load {load0:.1f}) ...", flush=True)
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds, load1 = time.time() - t0, os.getloadavg()[0]
    last = (run.stdout.strip().splitlines() or [""])[-1]
    counts = {k.rstrip("s") if k.startswith(("error", "warning")) else k: int(n) for n, k in SUMMARY.findall(last)}
    if run.returncode != 0 or not counts.get("passed"):
        raise cli.UserError(f"the suite did not pass (exit {run.returncode}): {last or run.stderr.strip()[-300:]}; "
                            "nothing recorded")
    out = dict(command=f"python -m pytest -q {a.tests}", counts=counts, seconds=round(seconds), summary=last,
               cpu=runtime.machine_line(), cores=os.cpu_count(), load_before=round(load0, 1), load_after=round(load1, 1),
               python=platform.python_version(), date=datetime.date.today().isoformat(), commit=commit())
    checkpoint.make_out_dir(a.out_dir)
    checkpoint.atomic_json(out, os.path.join(a.out_dir, "suite.json"))
    print(f"{last} | {seconds:.0f} s wall on {os.cpu_count()} cores, load {load0:.1f} -> {load1:.1f} | "
          f"wrote {os.path.join(a.out_dir, 'suite.json')}")


if __name__ == "__main__":
    cli.main_guard(main, prog="dev.suite_time")

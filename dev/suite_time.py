"""What the test suite costs: runs the README's two test commands (the whole suite, and the student's
loop without the `slow` tests) once each, in a process of its own, and records each summary line
(passed, xfailed, failed), its wall time, and the machine it ran on with the load beside it (the
1-minute load average before and after: a loaded machine is slower).

Run (from the repository root)
    python -m dev.suite_time                          # -> out/suite/suite.json
    python -m dev.suite_time --out_dir results/bench  # the committed number (README's Tests section)
Writes suite.json: per command its counts, seconds and load before and after; the cpu
(runtime.machine_line), cores, Python, date and the commit. results/bench/README.md and the README quote
it; tests/test_requirements.py checks that they do.
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
    out = dict(runs={}, cpu=runtime.machine_line(), cores=os.cpu_count(), python=platform.python_version(),
               date=datetime.date.today().isoformat(), commit=commit())
    for name, marker in (("all", []), ("not_slow", ["-m", "not slow"])):
        out["runs"][name] = run(marker, a.tests)
    checkpoint.make_out_dir(a.out_dir)
    checkpoint.atomic_json(out, os.path.join(a.out_dir, "suite.json"))
    print(f"wrote {os.path.join(a.out_dir, 'suite.json')}")


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

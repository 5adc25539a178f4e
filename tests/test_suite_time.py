"""dev.suite_time: the suite timed with N busy processes beside it (a machine shared with other work):
they run while the tests do and end with the command, when the suite passes (its record written, the
number of busy processes in it) and when it fails (one line, nothing recorded)."""

import json
import os
import time

import pytest

from dev import suite_time
from plumbing import cli


def busy():
    """pids of the live busy processes this test's suite_time started (their command line names its pid)."""
    mark = f"{suite_time.BUSY}\0dev.suite_time\0{os.getpid()}\0"
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/cmdline") as f:
                pids += [int(name)] if mark in f.read() else []
        except (FileNotFoundError, ProcessLookupError):
            continue
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_busy_processes_run_beside_the_suite_and_end_with_it(tmp_path, monkeypatch):
    tiny = tmp_path / "test_tiny.py"
    tiny.write_text("def test_one():\n    assert True\n")
    seen, real = [], suite_time.run
    # a sleeping stand-in for the busy loop: this test is of the processes' lives (started with the suite, ended
    # with it), and a loop would take a core from the rest of the suite for as long as the two runs below last
    monkeypatch.setattr(suite_time, "BUSY", "import time; time.sleep(600)")

    def run(*a):  # the busy process as the suite starts, once it has exec'd (a loaded machine is slow to)
        end = time.monotonic() + 30
        while len(busy()) < 1 and time.monotonic() < end:
            time.sleep(0.05)
        seen.append(busy())
        return real(*a)
    monkeypatch.setattr(suite_time, "run", run)
    argv = ["--busy", "1", "--runs", "all", "--tests", str(tiny), "--out_dir"]  # one: each spins a core away
    suite_time.main(argv + [str(tmp_path / "out")])
    rec = json.loads((tmp_path / "out" / "suite_busy1.json").read_text())
    assert rec["busy"]["processes"] == 1 and list(rec["runs"]) == ["all"] and rec["runs"]["all"]["counts"] == {"passed": 1}
    assert len(seen[0]) == 1 and not busy()  # one beside the suite while it ran; none after
    tiny.write_text("def test_one():\n    assert False\n")
    with pytest.raises(cli.UserError, match="did not pass"):
        suite_time.main(argv + [str(tmp_path / "failed")])
    assert not busy() and not (tmp_path / "failed").exists()
    with pytest.raises(cli.ConfigError, match="--busy must be"):
        suite_time.main(["--busy", "-1", "--out_dir", str(tmp_path / "bad")])

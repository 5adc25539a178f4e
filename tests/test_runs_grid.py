"""plumbing/grid.py, the run cache of the grid commands, and the lives of run_jobs' workers: a run
saved under other settings is refused, never replaced; a corrupt saved run or a `runs` file is
one line before anything trains; one grid per folder; a killed writer's temp files go at the next
start; a report is not replaced by a smaller one; Ctrl-C to a two-worker grid is one line and
status 130 from every process; kill -9 of the parent leaves no worker alive. The last two start
a parent interpreter and two spawned workers each (a few seconds)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from plumbing import cli, grid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = {"recall": {"steps": 5, "lr": 0.001}, "model": {"n_embd": 16}}


def double(job):
    """A grid job: job is a number; the result says what it was."""
    if job == "stop":
        raise KeyboardInterrupt
    return {"twice": 2 * job}


def nap(job):
    """A worker's job: write this worker's pid into a file in the folder, then sleep."""
    folder, seconds = job
    with open(os.path.join(folder, f"{os.getpid()}.pid"), "w") as f:
        f.write("")
    time.sleep(seconds)
    return {"slept": seconds}


def jobs(*names, key=KEY):
    return [grid.Job(name, key, i + 1) for i, name in enumerate(names)]


def run(out, js, workers=1):
    with grid.Grid(str(out), js, "python grid.py", flags=("steps", "lr"), needs=("twice",)) as g:
        return g.run(double, workers, lambda r, done, todo, s: f"[{done}/{todo}]")


def test_a_saved_run_is_reused_under_its_config_and_never_replaced_by_another(tmp_path, capsys):
    first = run(tmp_path, jobs("a_s0", "near/b_s0"))
    assert [r["twice"] for r in first] == [2, 4] and (tmp_path / "runs" / "near" / "b_s0.json").exists()
    assert json.loads((tmp_path / "runs" / "a_s0.json").read_text()) == dict(twice=2, config=KEY)
    again = run(tmp_path, [grid.Job("a_s0", KEY, "stop"), grid.Job("c_s0", KEY, 3)])  # "stop" would raise
    assert [r["twice"] for r in again] == [2, 6] and again[0]["reused"]
    before = (tmp_path / "runs" / "a_s0.json").read_bytes()
    other = {"recall": {"steps": 20, "lr": 0.001}, "model": {"n_embd": 32}}
    with pytest.raises(grid.GridError) as e:
        run(tmp_path, jobs("a_s0", "near/b_s0", key=other))
    msg = str(e.value)
    assert "a_s0.json" in msg and "--steps" in msg and "model.n_embd" in msg
    assert "another --out_dir" in msg and "delete it" in msg and "(2 saved runs differ)" in msg
    assert (tmp_path / "runs" / "a_s0.json").read_bytes() == before


def test_a_field_newer_than_the_saved_runs_keeps_them_valid_only_at_its_default(tmp_path):
    """A key path a saved run lacks reads as `absent` says (the behaviour before the field existed)."""
    run(tmp_path, jobs("a_s0"))  # saved without model.conv
    newer = {**KEY, "model": {"n_embd": 16, "conv": 0}}

    def again(key, absent):
        with grid.Grid(str(tmp_path), jobs("a_s0", key=key), "python grid.py", needs=("twice",), absent=absent) as g:
            return g.run(double, 1, lambda r, done, todo, s: "")
    assert again(newer, {"model.conv": 0, "model.window": 0})[0]["reused"]  # a path neither key has: no matter
    for key, absent in ((newer, None), ({**KEY, "model": {"n_embd": 16, "conv": 4}}, {"model.conv": 0})):
        with pytest.raises(grid.GridError, match="model.conv"):
            again(key, absent)


@pytest.mark.parametrize("text, says", [('{"twice": 2, "conf', "not a readable saved run"),
                                        ("", "not a readable saved run"),
                                        ("[1, 2]", "a JSON list, not an object"),
                                        ('{"twice": 2}', "no config"),
                                        (json.dumps({"config": KEY}), "no twice")])
def test_a_corrupt_saved_run_is_one_line_before_anything_trains(tmp_path, text, says):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "b_s0.json").write_text(text)
    with pytest.raises(grid.GridError, match=says) as e:
        run(tmp_path, [grid.Job("a_s0", KEY, "stop"), grid.Job("b_s0", KEY, 2)])  # "stop" would raise if trained
    assert "b_s0.json" in str(e.value) and "delete it" in str(e.value) and "\n" not in str(e.value)


def test_runs_being_a_file_is_one_line(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(grid.GridError, match="runs is a file"):
        run(tmp_path, jobs("a_s0"))


def test_one_grid_per_folder_and_a_killed_writers_temp_files_go(tmp_path, capsys):
    (tmp_path / "runs" / "near").mkdir(parents=True)
    for name in ("runs/near/a_s0.json.tmp4242", "recall.json.tmp17"):  # what a kill mid-write leaves
        (tmp_path / name).write_text("{half")
    (tmp_path / "runs" / "near" / "keep.json.tmp").write_text("")  # not a temp file of atomic_write
    with grid.Grid(str(tmp_path), jobs("near/a_s0"), "python grid.py"):
        assert sorted(os.listdir(tmp_path / "runs" / "near")) == ["keep.json.tmp"]
        assert not (tmp_path / "recall.json.tmp17").exists()
        with pytest.raises(grid.GridError, match="in use by another grid"):
            grid.Grid(str(tmp_path), jobs("near/a_s0"), "python grid.py").__enter__()
        with grid.Grid(str(tmp_path), jobs("near/a_s0"), "python grid.py", lock=False):
            pass  # a report reads while the grid runs
    assert "removed 2 temporary file(s)" in capsys.readouterr().out
    run(tmp_path, jobs("near/a_s0"))  # the lock went with the grid


def test_ctrl_c_in_process_is_one_line_with_the_runs_saved_and_the_command(tmp_path):
    with pytest.raises(grid.Interrupted) as e:
        run(tmp_path, [grid.Job("a_s0", KEY, 1), grid.Job("b_s0", KEY, "stop")])
    msg = str(e.value)  # one line: how many are saved, where, and the command that continues
    assert e.value.status == 130 and "\n" not in msg and "1 of this grid's 2" in msg
    assert str(tmp_path / "runs") in msg and msg.endswith("python grid.py")


def test_a_report_is_never_replaced_by_a_smaller_one(tmp_path):
    path = tmp_path / "r.json"
    count = lambda r: len(r["points"])
    grid.refuse_emptier(str(path), count, 1, "points")  # nothing there: nothing to keep
    path.write_text(json.dumps({"points": [1, 2, 3]}))
    grid.refuse_emptier(str(path), count, 3, "points")
    with pytest.raises(grid.GridError, match="holds 3 points"):
        grid.refuse_emptier(str(path), count, 2, "points")
    path.write_text("[broken")
    grid.refuse_emptier(str(path), count, 0, "points")  # unreadable: nothing to keep


PARENT = """
import sys
from plumbing import cli, grid
import test_runs_grid as t
folder = sys.argv[1]
jobs = [grid.Job("fast", {}, (folder, 0)), grid.Job("slow1", {}, (folder, 60)), grid.Job("slow2", {}, (folder, 60))]
def main():
    with grid.Grid(folder, jobs, "python again.py") as g:
        g.run(t.nap, 2, lambda r, done, todo, s: f"[{done}/{todo}] slept {r['slept']}")
cli.main_guard(main, prog="grid")
"""


def alive(pid):
    """Is pid a live process (not gone, not a zombie waiting for its reaper)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def start_grid(tmp_path):
    """The PARENT grid in its own process group (its fast run already saved), once both slow jobs
    run in workers -> (process, the two workers' pids)."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "fast.json").write_text(json.dumps({"slept": 0, "config": {}}))  # saved: reused
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    p = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len([n for n in os.listdir(tmp_path) if n.endswith(".pid")]) < 2:
        time.sleep(0.2)
    pids = [int(n[:-4]) for n in os.listdir(tmp_path) if n.endswith(".pid")]
    assert len(pids) == 2 and all(alive(pid) for pid in pids), p.communicate(timeout=30)
    return p, pids


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
@pytest.mark.slow
def test_ctrl_c_to_a_two_worker_grid_is_one_line_and_status_130(tmp_path):
    p, workers = start_grid(tmp_path)
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in out + err and err.count("\n") == 1, err
    assert "interrupted" in err and "error" not in err  # no "error:": a Ctrl-C is not one
    assert "(0 by this command)" in err and "continues: python again.py" in err
    assert not any(alive(pid) for pid in workers)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
@pytest.mark.slow
def test_kill_9_of_the_parent_leaves_no_worker_alive(tmp_path):
    p, workers = start_grid(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    deadline = time.time() + 15
    while time.time() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers)

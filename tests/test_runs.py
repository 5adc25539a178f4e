"""tables.mean_std: mean ± std over seeds; grid.run_jobs (the worker pool) runs every job once, in worker processes (one torch
thread each) or in this one, turns a failed or interrupted worker into an exception, and says where each
running job stands (grid.watching).
Each worker is a fresh interpreter that imports torch: the tests start four."""
import os
import re
import statistics
import time

import pytest

from plumbing import cli, grid, tables


def describe(job):
    """None for job 0 (a result too), else (job squared, the worker's pid, its torch threads)."""
    import torch
    return None if job == 0 else (job * job, os.getpid(), torch.get_num_threads())


def fail_or_stop(job):
    if job == 2:
        raise cli.UserError("job 2 has a bad setting")
    raise KeyboardInterrupt


def nap(job):
    time.sleep(0.35)
    return job


def test_run_jobs_says_where_each_running_job_stands(monkeypatch, capsys):
    """watch(job) for the job at work, every PROGRESS_S (the first after half of it), one plain line each
    with the time since the start; a watch that fails is one line for its job, and the jobs go on."""
    monkeypatch.setattr(grid, "PROGRESS_S", 0.1)
    done = dict(grid.run_jobs(nap, [1, 2], workers=1, watch=lambda j: f"job {j} at work" if j == 1 else 1 / 0))
    lines = capsys.readouterr().out.splitlines()
    assert done == {1: 1, 2: 2}
    assert "[running 0:00] job 1 at work" in lines and "[running 0:00] 2: no reading (division by zero)" in lines
    assert all(re.fullmatch(r"\[running 0:00\] (job 1 at work|2: no reading \(division by zero\))", ln) for ln in lines)
    assert list(grid.run_jobs(nap, [3], workers=1)) == [(3, 3)] and capsys.readouterr().out == ""  # no watch


def test_mean_std():
    assert tables.mean_std([1.0, 2.0, 4.0]) == pytest.approx((7 / 3, statistics.stdev([1, 2, 4])))
    assert tables.mean_std([3]) == (3.0, 0.0)


@pytest.mark.slow
def test_run_jobs_in_workers_and_in_process():
    out = dict(grid.run_jobs(describe, [0, 3], workers=2))
    assert out[0] is None and out[3][0] == 9
    assert out[3][1] != os.getpid() and out[3][2] == 1  # another process, one thread
    here = dict(grid.run_jobs(describe, [0, 3], workers=1))
    assert here[0] is None and here[3][:2] == (9, os.getpid())


@pytest.mark.slow
def test_a_failed_or_interrupted_worker_raises(capfd):
    with pytest.raises(grid.JobFailed, match="job 2 exited with status 1"):
        list(grid.run_jobs(fail_or_stop, [2], workers=2))
    assert "error: job 2 has a bad setting" in capfd.readouterr().err  # the worker's one line
    with pytest.raises(KeyboardInterrupt):
        list(grid.run_jobs(fail_or_stop, [3], workers=2, grace=1))

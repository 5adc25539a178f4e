"""Experiments made of many small runs (variants x seeds): run them a few at a time in worker
processes, and summarise the seeds of each variant as mean ± sample standard deviation.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) compares readers and models on small
tasks; ablate.py (the LM ablation), recall.py (MQAR) and probe.py (SPCN role probes) train
several seeds of each variant and report mean ± std, through this file.

    for job, result in runs.run_jobs(train_one, jobs, workers=2):   # as each run finishes
        ...
    mean, std = runs.mean_std([r["loss"] for r in seeds])

Workers: each job runs in a fresh interpreter (multiprocessing "spawn": no forked thread
pools) with one torch thread (small models: one run per core is fastest), at most `workers` at
a time; workers=1 runs the jobs in this process, one after the other. `fn` must be a
module-level function (it is pickled by name). Ctrl-C reaches every worker too: a worker that
stops on it exits 130 and run_jobs raises KeyboardInterrupt once the others have had up to
`grace` seconds to save and stop (train.py saves a checkpoint on Ctrl-C and on SIGTERM),
then SIGTERM, then SIGKILL. A worker that fails prints its own traceback (or, for a
cli.UserError, its one line) and run_jobs raises JobFailed naming the job.

Run: nothing to run; tests/test_runs.py checks this file.
"""

import multiprocessing as mp
import statistics
import sys
from multiprocessing.connection import wait

from plumbing import cli


def mean_std(values):
    """(mean, sample standard deviation) of a list of numbers; the std of one value is 0."""
    values = [float(v) for v in values]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


class JobFailed(RuntimeError):
    """A worker exited with an error; its own output above says why."""


def _worker(fn, job, conn):
    import torch  # here: importing this file does not import torch
    torch.set_num_threads(1)
    try:
        conn.send((fn(job),))  # a 1-tuple: a result of None is still a result
    except KeyboardInterrupt:
        sys.exit(130)
    except cli.UserError as e:  # a user's mistake (or a run's expected stop): one line, no traceback
        sys.exit(f"error: {' '.join(str(e).split())}")


def run_jobs(fn, jobs, workers, grace=30):
    """Yield (job, fn(job)) for every job, in the order they finish; see the docstring."""
    jobs = list(jobs)
    if workers <= 1:
        for job in jobs:
            yield job, fn(job)
        return
    ctx = mp.get_context("spawn")
    pending, running = list(jobs), {}  # process -> (job, receiving end of its pipe)
    try:
        while pending or running:
            while pending and len(running) < workers:
                recv, send = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_worker, args=(fn, pending[0], send))
                p.start()
                send.close()  # the child holds its own copy: EOF here once it exits
                running[p] = (pending.pop(0), recv)
            ready = wait([conn for _, conn in running.values()])
            for p in [p for p, (_, conn) in running.items() if conn in ready]:
                job, conn = running.pop(p)
                try:
                    sent = conn.recv()  # read before join: a large result fills the pipe
                except EOFError:
                    sent = None  # exited without a result
                conn.close()
                p.join()
                if p.exitcode == 130:
                    raise KeyboardInterrupt
                if p.exitcode != 0 or sent is None:
                    raise JobFailed(f"job {job!r} exited with status {p.exitcode}; its output above says why")
                yield job, sent[0]
    except KeyboardInterrupt:
        stop(running, grace)
        raise
    finally:
        stop(running, 0)  # a failure or an early exit: the rest is not needed


def stop(running, grace):
    """Stop the workers still running: wait up to `grace` s for each (after Ctrl-C each got it
    too and saves at its next step), then SIGTERM (train.py saves on it as well) and wait up to
    30 s, then SIGKILL."""
    for p in running:
        p.join(timeout=grace)
    for p in running:
        if p.is_alive():
            p.terminate()
    for p in running:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    running.clear()

"""What every command's run shares: the output-folder check, figures drawn to files, and, for
experiments made of many small runs (variants x seeds), the job runner that trains a few at a
time in worker processes and the mean ± sample standard deviation of each variant's seeds.

Output folders: `make_out_dir(cfg.out_dir)` is the first thing each command does, before any
training: an existing file, a path inside a file, a read-only or uncreatable folder is one
cli.ConfigError line naming the flag (`check_out_dir` alone leaves nothing behind: train.py and
content.py call it before they read any input, and create their folder once the inputs are good).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) compares readers and models on small
tasks; ablate.py (the LM ablation), recall.py (MQAR) and probe.py (SPCN role probes) train
several seeds of each variant and report mean ± std, through this file.

    for job, result in runs.run_jobs(train_one, jobs, workers=2):   # as each run finishes
        ...
    mean, std = runs.mean_std([r["loss"] for r in seeds])

Workers: each job runs in a fresh interpreter (multiprocessing "spawn": no forked thread
pools) with one torch thread (small models: one run per core is fastest), at most `workers` at
a time; workers=1 runs the jobs in this process, one after the other. `fn` must be a
module-level function (it is pickled by name). A worker lives and dies with this process:
    - it starts with SIGINT blocked (a Ctrl-C while it imports is no traceback, and is not lost:
      it arrives once the worker unblocks it, before fn), then takes Ctrl-C as KeyboardInterrupt
      inside fn (train.py installs its own handler and saves); a job stopped by it exits 130,
      quietly. The parent blocks SIGINT too while it starts a worker (a Ctrl-C then arrives just
      after). On a Ctrl-C, run_jobs stops at once the workers still starting (nothing to save),
      says after 5 s how many it waits for, gives
      the others up to `grace` seconds to save and stop (then SIGTERM, then SIGKILL), yields the
      results of those that finished their job meanwhile (a grid saves them), then raises
      KeyboardInterrupt;
    - a thread in it polls its parent's pid and ends it within a second of the parent's death
      (a SIGKILL of the parent included: no worker trains on for nobody).
A worker that fails prints its own traceback (or, for a cli.UserError, its one line) and
run_jobs raises JobFailed naming the job.

Run: nothing to run; tests/test_runs.py checks this file.
"""

import contextlib
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from multiprocessing.connection import wait

from plumbing import cli


def check_out_dir(out_dir, flag="--out_dir"):
    """A one-line cli.ConfigError unless out_dir is a folder this process can write in, or can
    be created as one. It tries: an empty folder is made in the deepest existing part of the path
    and removed at once, so a read-only mount or a pseudo-filesystem is caught and nothing stays."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise cli.ConfigError(f"{flag} {out_dir} is a file; name a folder (it is created if missing)")
    parent = os.path.abspath(out_dir)
    while not os.path.exists(parent):  # the deepest part of the path that is there
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise cli.ConfigError(f"{flag} {out_dir} lies inside the file {parent}; name a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=parent))
    except OSError as e:
        raise cli.ConfigError(f"{flag} {out_dir}: {parent} is not writable ({e.strerror}); name a folder you "
                              f"can write in") from None


def make_out_dir(out_dir, flag="--out_dir"):
    """check_out_dir, then create the folder; what the check cannot foresee is one line too."""
    check_out_dir(out_dir, flag)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise cli.ConfigError(f"{flag} {out_dir}: cannot create it ({e.strerror}); name another folder") from None
    return out_dir


def pyplot():
    """matplotlib.pyplot drawing into files only (the Agg backend: no screen), imported when a
    figure is made, so a command that draws nothing never imports matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def mean_std(values):
    """(mean, sample standard deviation) of a list of numbers; the std of one value is 0."""
    values = [float(v) for v in values]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


class JobFailed(RuntimeError):
    """A worker exited with an error; its own output above says why."""


PARENT_POLL_S = 1.0  # how often a worker checks that its parent lives


def _exit_with(parent):
    """End this worker when its parent is gone (its pid changes: reparented to init or a reaper)."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _worker(fn, job, conn, parent, started):
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked until now: see the docstring
        started.set()  # from here a Ctrl-C reaches fn; before, the parent stops this worker itself
        import torch  # here: importing this file does not import torch
        torch.set_num_threads(1)
        result = (fn(job),)  # a 1-tuple: a result of None is still a result
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the job is done: send it whatever comes
        conn.send(result)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while exiting: no traceback
        sys.exit(130)
    except cli.UserError as e:  # a user's mistake (or a run's expected stop): one line, no traceback
        sys.exit(f"error: {' '.join(str(e).split())}")


@contextlib.contextmanager
def _sigint_blocked():
    """SIGINT blocked inside (not ignored: one sent meanwhile arrives on leaving); a worker started here
    inherits the block, through exec, until _worker lifts it. Only the main thread sets it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored inside: a second Ctrl-C while the workers stop is no traceback. Only the main
    thread sets handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def run_jobs(fn, jobs, workers, grace=30):
    """Yield (job, fn(job)) for every job, in the order they finish; see the docstring."""
    jobs = list(jobs)
    if workers <= 1:
        for job in jobs:
            yield job, fn(job)
        return
    ctx = mp.get_context("spawn")
    pending, running = list(jobs), {}  # process -> (job, receiving end of its pipe, its started Event)
    try:
        while pending or running:
            while pending and len(running) < workers:
                recv, send = ctx.Pipe(duplex=False)
                started = ctx.Event()
                p = ctx.Process(target=_worker, args=(fn, pending[0], send, os.getpid(), started))
                with _sigint_blocked():  # a Ctrl-C arrives once p is in running, where stop() finds it
                    p.start()
                    send.close()  # the child holds its own copy: EOF here once it exits
                    running[p] = (pending.pop(0), recv, started)
            ready = wait([conn for _, conn, _ in running.values()])
            for p in [p for p, (_, conn, _) in running.items() if conn in ready]:
                job, conn, _ = running.pop(p)
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
        with _sigint_ignored():
            finished = stop(running, grace, say=True)
        yield from finished  # jobs done while the others stopped: their work is kept
        raise
    finally:
        stop(running, 0)  # a failure or an early exit: the rest is not needed


def stop(running, grace, say=False):
    """Stop the workers still running -> [(job, result)] of those that sent one meanwhile. A worker
    still starting is stopped at once (SIGTERM: it has not begun its job); the others get up to
    `grace` s (after Ctrl-C each got it too and saves at its next step; say: print how many are
    waited for, after 5 s), then SIGTERM (train.py saves on it as well) and up to 30 s, then SIGKILL."""
    for p, (_, _, started) in running.items():
        if not started.is_set():
            p.terminate()
    finished, t0 = [], time.time()
    while any(p.is_alive() for p in running) and time.time() < t0 + grace:
        finished += _results(running)  # read as they come: a large result would block its worker's exit
        time.sleep(0.05)
        if say and time.time() > t0 + 5:  # not stopped within 5 s (exiting takes a second or two): say so, once
            say = False
            busy = sum(p.is_alive() for p in running)
            print(f"interrupted: waiting up to {grace} s for {busy} running job(s) to stop (a run at a step saves "
                  "its checkpoint)", file=sys.stderr, flush=True)
    for p in running:
        if p.is_alive():
            p.terminate()
    for p in running:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    finished += _results(running)
    for _, conn, _ in running.values():
        conn.close()
    running.clear()
    return finished


def _results(running):
    """[(job, result)] of the workers in running whose result waits in their pipe (each read once)."""
    out = []
    for p, (job, conn, started) in list(running.items()):
        try:
            if not conn.closed and conn.poll():
                out.append((job, conn.recv()[0]))
                conn.close()
        except (EOFError, OSError):
            pass  # it exited without a result
    return out

"""The run cache of the grid commands: many small runs, each saved as one JSON file beside the
config that made it, reused only under that config, never replaced by a run of other settings.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) draws its claims from small runs compared
side by side; recall.py (variants x seeds) and frontier.py (points x settings x seeds) train
them through this file, so a killed or interrupted grid continues where it stopped.

A grid is a list of `Job(name, key, job)`: the run is saved as OUT/runs/NAME.json (NAME may hold
a folder: 'near/gpt_s0'), `key` is everything its numbers depend on (JSON: the run's settings
and the model's config), `job` is what `fn` receives (run_jobs: fn module-level, job
picklable).

    jobs = [grid.Job(f"{variant}_s{seed}", key(cfg, variant), (cfg, variant, seed)) for ...]
    with grid.Grid(cfg.out_dir, jobs, cli.command_line("x.py", cfg), flags, needs) as g:
        grid.refuse_emptier(report_path, count, new_count, "variants")   # before anything trains
        results = g.run(fn, cfg.workers, progress)   # every job's saved dict, in job order
        g.save(name, result)                          # or save runs trained some other way
    with grid.Grid(..., lock=False) as g: g.saved   # a report: read what is saved, train nothing

Guarantees (tests/test_runs_grid.py; a Ctrl-C and kill -9 of a real grid: python -m dev.kill_grid)
    - a saved run is reused only when its 'config' equals the job's key; one saved under other
      settings stops the grid before anything trains, in one GridError line naming the file,
      the first setting that differs (as its --flag when the command has one) and the ways out
      (another --out_dir keeps both; deleting the file trains it anew); nothing replaces it;
    - one grid per folder: the flock of checkpoint.run_lock on OUT/.lock while the grid lives
      (the kernel drops it when the process dies: no stale lock); a second grid there is one line;
    - every file is written atomically (checkpoint.atomic_write: NAME.tmp<pid>, then renamed);
      the temp files a kill left in OUT and under OUT/runs are removed once the lock is ours;
    - a corrupt saved run (truncated, empty, not a JSON object, missing keys), or OUT/runs being
      a file, is one line naming the file and what to do, before anything trains;
    - Ctrl-C (in this process or a worker) is one `Interrupted` line: how many runs are saved and
      the command that continues; exit status 130;
    - `refuse_emptier`: a report is never replaced by one holding fewer entries.

    for job, result in grid.run_jobs(train_one, jobs, workers=2):   # as each run finishes, no cache

The worker pool (`run_jobs`, which Grid.run trains through; ablate.py and probe.py call it
directly): each job runs in a fresh interpreter (multiprocessing "spawn": no forked thread
pools) with one torch thread (small models: one run per core is fastest), at most `workers` at
a time; workers=1 runs the jobs in this process, one after the other. `fn` must be a
module-level function (it is pickled by name). A worker lives and dies with this process:
    - it starts with SIGINT blocked (a Ctrl-C while it imports is no traceback, and is not lost:
      it arrives once the worker unblocks it, before fn), then takes Ctrl-C as KeyboardInterrupt
      inside fn (train.py installs its own handler and saves); a job stopped by it exits 130,
      quietly. The parent holds a Ctrl-C back while it starts a worker (cli.sigint_held: it
      arrives just after, when the worker is whole and in the list stop() reads). On a Ctrl-C,
      run_jobs stops at once the workers still starting (nothing to save), says after 5 s how
      many it waits for, gives the others up to `grace` seconds to save and stop (then SIGTERM,
      then SIGKILL), yields the results of those that finished their job meanwhile (a grid
      saves them), then raises KeyboardInterrupt;
    - a thread in it polls its parent's pid and ends it within a second of the parent's death
      (a SIGKILL of the parent included: no worker trains on for nobody).
Progress while they run (`watch`): a thread of the parent prints watch(job) for every running job
within the first PROGRESS_S and every PROGRESS_S after (`watching`); ablate.py's reads each run's
metrics.jsonl. A worker writes its own files; the parent only reads them.
A worker that fails prints its own traceback (or, for a cli.UserError, its one line) and
run_jobs raises JobFailed naming the job.

Run: nothing to run; recall.py and frontier.py use it; tests/test_runs_grid.py and tests/test_runs.py.
"""

import collections
import contextlib
import json
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
import time
from multiprocessing.connection import wait

from plumbing import checkpoint, cli, tables

Job = collections.namedtuple("Job", "name key job")
TEMP = re.compile(r".+\.tmp\d+")  # checkpoint.atomic_write's temp files: NAME.tmp<pid>
ABSENT = object()


class GridError(cli.UserError):
    """A grid's folder or saved runs cannot be used as they are; one line saying what to do."""


class Interrupted(cli.UserError):
    """Ctrl-C: the runs finished so far are saved; the same command continues."""
    status = 130  # 128 + SIGINT, the shell's status for a Ctrl-C
    label = ""  # not an error: the message says "interrupted: ..."


def leaves(d, prefix=""):
    """{dotted path: value} of a nested dict: {'a': {'b': 5}} -> {'a.b': 5}."""
    out = {}
    for k, v in d.items():
        out.update(leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def remove_temps(out_dir):
    """Remove the temp files a killed writer left in out_dir and under out_dir/runs -> [paths].
    Call it only while holding out_dir's lock: then no live process is writing them."""
    found = [os.path.join(out_dir, n) for n in os.listdir(out_dir)]
    for folder, _, names in os.walk(os.path.join(out_dir, "runs")):
        found += [os.path.join(folder, n) for n in names]
    removed = [p for p in sorted(found) if TEMP.fullmatch(os.path.basename(p)) and os.path.isfile(p)]
    for p in removed:
        os.remove(p)
    return removed


@contextlib.contextmanager
def locked(out_dir):
    """out_dir's lock (checkpoint.run_lock) held inside, and the temp files a killed writer left there
    and under out_dir/runs removed first (a line says so): for a command that writes its reports
    into one folder without a grid (probe.py, content.py, scaling.py). out_dir must exist."""
    with checkpoint.run_lock(out_dir):
        removed = remove_temps(out_dir)
        if removed:
            print(f"removed {len(removed)} temporary file(s) a killed run left: {', '.join(removed)}", flush=True)
        yield


def refuse_emptier(path, count, new, what):
    """One GridError line, before anything is written, if the report at path holds more entries
    (count(its JSON)) than the `new` one would: a subset grid or a typo'd flag never replaces a
    fuller report silently. An absent or unreadable report has nothing to keep."""
    try:
        with open(path) as f:
            old = count(json.load(f))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return
    if new < old:
        raise GridError(f"{path} holds {old} {what}, this command's report would hold {new}: it is not replaced "
                        f"by a smaller one; pass the flags that made it (its command is in {path}), write to "
                        f"another --out_dir, or delete {path} first")


class Grid:
    """OUT/runs as one grid command sees it (a context manager); see the module docstring.
    flags: the command's flag names (a differing setting is named --flag); needs: the keys the
    command reads from a saved run, or {key: shape} (tables.shape_error: a saved run of another shape is
    one line too); lock=False only reads (a report while a grid runs); absent: {dotted key path:
    value}, what a path a saved key lacks stood for (a config field newer than the saved runs: its
    default, the behaviour before it existed), so those runs stay valid while the field is at it."""

    def __init__(self, out_dir, jobs, command, flags=(), needs=(), lock=True, absent=None):
        self.out_dir, self.folder, self.command = out_dir, os.path.join(out_dir, "runs"), command
        needs = needs if isinstance(needs, dict) else dict.fromkeys(needs)
        self.jobs, self.flags, self.needs, self.lock = list(jobs), set(flags), {"config": dict, **needs}, lock
        self.absent = json.loads(json.dumps(absent or {}))  # as a saved file reads back
        self.keys = {j.name: json.loads(json.dumps(j.key)) for j in self.jobs}  # as a saved file reads back
        self.saved, self.stack = {}, contextlib.ExitStack()

    def path(self, name):
        return os.path.join(self.folder, name + ".json")

    def __enter__(self):
        checkpoint.check_out_dir(self.out_dir)
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise GridError(f"{self.folder} is a file, where the grid keeps its runs (one JSON per run): move it "
                            f"away or choose another --out_dir")
        if self.lock:
            checkpoint.make_out_dir(self.out_dir)
            try:
                self.stack.enter_context(checkpoint.run_lock(self.out_dir))
            except checkpoint.LockHeld:
                raise GridError(f"{self.out_dir} is in use by another grid (pid in {self.out_dir}/.lock): one grid "
                                f"per folder; wait for it to finish or choose another --out_dir") from None
            removed = remove_temps(self.out_dir)
            if removed:
                print(f"removed {len(removed)} temporary file(s) a killed grid left: {', '.join(removed)}", flush=True)
        differ = []
        for job in self.jobs:
            saved = self.load(job.name)
            if saved is not None and self.differing(saved["config"], self.keys[job.name]):
                differ.append((job.name, saved["config"]))
            elif saved is not None:
                self.saved[job.name] = dict(saved, reused=True)
        if differ:
            self.stack.close()
            raise GridError(self.mismatch(*differ[0]) + (f" ({len(differ)} saved runs differ)" if len(differ) > 1
                                                          else ""))
        self.before = len(self.saved)
        return self

    def __exit__(self, kind, value, tb):
        self.stack.close()
        if kind is KeyboardInterrupt:
            raise Interrupted(f"interrupted: {len(self.saved)} of this grid's {len(self.jobs)} runs are saved in "
                              f"{self.folder} ({len(self.saved) - self.before} by this command); the same command "
                              f"continues: {self.command}") from None

    def load(self, name):
        """The run saved as NAME.json (None if there is none); one GridError line if it is corrupt."""
        path = self.path(name)
        if not os.path.exists(path):
            return None
        redo = f"delete it and run the same command again to train that run anew"
        try:
            with open(path) as f:
                saved = json.load(f)
        except (OSError, ValueError) as e:  # truncated, empty, not UTF-8, a folder, unreadable
            raise GridError(f"{path} is not a readable saved run ({' '.join(str(e).split())}); {redo}") from None
        if not isinstance(saved, dict):
            raise GridError(f"{path} is not a saved run (a JSON {type(saved).__name__}, not an object); {redo}")
        wrong = tables.shape_error(saved, self.needs, "the run")
        if wrong:
            raise GridError(f"{path} is not a saved run of this command ({wrong}); {redo}")
        return saved

    def differing(self, saved, key):
        """The dotted paths where a saved run's key and a job's differ, a path the saved one lacks
        read as `absent` says."""
        old, new = leaves(saved), leaves(key)
        old |= {k: self.absent[k] for k in new.keys() - old.keys() if k in self.absent}
        return sorted(k for k in old.keys() | new.keys() if old.get(k, ABSENT) != new.get(k, ABSENT))

    def mismatch(self, name, saved):
        """The one line for a run saved under other settings: the first that differs, and the ways out."""
        old, new = leaves(saved), leaves(self.keys[name])
        named = [("--" + k.rsplit(".", 1)[-1] if k.rsplit(".", 1)[-1] in self.flags else k, k) for k in
                 self.differing(saved, self.keys[name])]
        named.sort(key=lambda fk: not fk[0].startswith("--"))  # a flag first: what the user can change
        (flag, key), also = named[0], ", ".join(f for f, _ in named[1:])
        show = lambda d: "(absent)" if d.get(key, ABSENT) is ABSENT else json.dumps(d[key])
        return (f"{self.path(name)} was trained with {flag} {show(old)}, this command asks {show(new)}"
                + (f" (also differ: {also})" if also else "") + ": a saved run is never replaced by one of other "
                f"settings; to keep both, use another --out_dir; to train it anew, delete it")

    def save(self, name, result):
        """Save one finished run as NAME.json, its config beside its numbers -> the dict saved."""
        self.saved[name] = r = dict(result, config=self.keys[name])
        os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
        checkpoint.atomic_json(r, self.path(name))
        return r

    def run(self, fn, workers, progress, threads=1, watch=None):
        """Train every job not saved, `workers` at a time (run_jobs: each worker on one torch
        thread; this process on `threads` while it trains, None: as it is), save each as it
        finishes and print progress(result, done, to_do, seconds) -> every job's saved dict, in
        job order. One thread here too: a run's numbers do not depend on where it trained.
        watch(job) -> a line on where a running job stands, printed every PROGRESS_S (run_jobs)."""
        import torch  # here: importing this file does not import torch
        todo = [j for j in self.jobs if j.name not in self.saved]
        name_of = {id(j.job): j.name for j in todo}  # run_jobs yields the very object it was given
        t0, before = time.time(), torch.get_num_threads()
        torch.set_num_threads(threads or before)
        try:
            for done, (job, r) in enumerate(run_jobs(fn, [j.job for j in todo], workers, watch=watch), 1):
                print(progress(self.save(name_of[id(job)], r), done, len(todo), time.time() - t0), flush=True)
        finally:
            torch.set_num_threads(before)
        return [self.saved[j.name] for j in self.jobs]


# ---- the worker pool: a few runs at a time, each in a fresh interpreter ---------------------------


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


PROGRESS_S = 60  # seconds between run_jobs' lines on its running jobs (watch); the first after half of it


@contextlib.contextmanager
def watching(watch, running):
    """While inside, a thread prints `[running M:SS] ` + watch(job) for each job of running() (M:SS
    since it began), first after PROGRESS_S / 2, then every PROGRESS_S: a run's progress within its
    first minute, one flushed line each (no carriage returns: a terminal and a log file read the same).
    The lines go to stdout as it was on entry (a job may redirect it: ablate.py's train.main). A job
    watch cannot read is one line saying so; nothing here touches a job. watch None: nothing."""
    if watch is None:
        yield
        return
    out, every, t0, done = sys.stdout, PROGRESS_S, time.time(), threading.Event()

    def say():
        pause = every / 2
        while not done.wait(pause):
            pause, elapsed = every, int(time.time() - t0)
            for job in running():
                try:
                    line = watch(job)
                except Exception as e:  # a record being written, a folder not made yet: say so, go on
                    line = f"{job!r}: no reading ({' '.join(str(e).split())})"
                out.write(f"[running {elapsed // 60}:{elapsed % 60:02d}] {line}\n")
                out.flush()
    thread = threading.Thread(target=say, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


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


def run_jobs(fn, jobs, workers, grace=30, watch=None):
    """Yield (job, fn(job)) for every job, in the order they finish; see the docstring. watch(job):
    a line on a running job, printed for each every PROGRESS_S while they run (watching)."""
    jobs = list(jobs)
    if workers <= 1:
        current = []  # the job fn is running, for the watching thread
        with watching(watch, lambda: list(current)):
            for job in jobs:
                current[:] = [job]
                result = fn(job)
                current.clear()
                yield job, result
        return
    ctx = mp.get_context("spawn")
    pending, running = list(jobs), {}  # process -> (job, receiving end of its pipe, its started Event)
    try:
        with watching(watch, lambda: [job for job, _, _ in list(running.values())]):
            yield from _pool(fn, ctx, pending, running, workers)
    except KeyboardInterrupt:
        with _sigint_ignored():
            finished = stop(running, grace, say=True)
        yield from finished  # jobs done while the others stopped: their work is kept
        raise
    finally:
        stop(running, 0)  # a failure or an early exit: the rest is not needed


def _pool(fn, ctx, pending, running, workers):
    """run_jobs' loop: start workers while fewer than `workers` run, yield (job, result) as each
    ends; a Ctrl-C or a failure leaves `running` as it is, for run_jobs to stop."""
    while pending or running:
        while pending and len(running) < workers:
            recv, send = ctx.Pipe(duplex=False)
            started = ctx.Event()
            p = ctx.Process(target=_worker, args=(fn, pending[0], send, os.getpid(), started))
            with cli.sigint_held():  # a Ctrl-C arrives once p is in running, where stop() finds it
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

"""The autograder: every exercise of a student's exercises.py graded in a process of its own, the
verdict decided here, in the grader's process, which never imports the student's file.

    python -m lab.grader                    # lab/exercises.py
    python -m lab.grader FILE [--json summary.json] [--limit 120] [--exercises binding delta_step]

(`python -m lab.checks ...`, the command in older notes, hands over to this one with a line saying so.)

How a submission cannot change its grade. A child process (`python -m lab.grader --child NAME
FILE RECORD`) imports the file and runs the check of one exercise on it, recording each call of
the student's function: a digest of its arguments, what it returned (tensors, numbers, strings,
lists, tuples, dicts) or which exception it raised, and any argument it changed in place. This
process then runs the same check on a stand-in that returns those recorded answers, call by call,
so the check itself runs here, untouched: a submission that patches the check in its own process,
prints "[pass]", or hands back other calls than the check makes ("the calls differ") gains
nothing; one that exits, crashes or hangs (at import too: the limit covers the whole child) fails
that exercise in one line and the next is graded. The record is read with torch.load(weights_only=True):
no object of the student's is ever unpickled here. While the student's function runs, the
repository's own answers (writes.ema_kv_step, writes.delta_rule_step, their loops, recall.binding,
recall.mqar and lab.solutions) raise: a submission that calls them fails by name. It could still
undo that on purpose inside its own process; the instructor's copy of lab/solutions.py is not in
the handout (lab.handout), so there is nothing there to call.

Exit status 0 only when every graded exercise passes; 2 for a bad argument; 130 for a Ctrl-C, which
stops every exercise's process too (each has a session of its own); --json writes a summary
({"passed", "total", "exercises": {name: {"passed", "message", "seconds"}}, "answers"}).
"""
from plumbing import cli

cli.exit_on_ctrl_c(__name__, "lab.grader")  # before torch's import: a Ctrl-C from the first second is one line

import argparse  # noqa: E402
import concurrent.futures  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from lab import checks  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT_S = 120.0  # one exercise's child, torch's import included: far above a correct answer's time,
# so only a hang reaches it
GUARDED = (("writes", "ema_kv_step"), ("writes", "ema_kv_ref"), ("writes", "delta_rule_step"),
           ("writes", "delta_rule_ref"), ("recall", "binding"), ("recall", "mqar"))


def digest(x):
    """A stable fingerprint of a call's arguments (tensors by dtype, shape and bytes)."""
    h = hashlib.sha256()

    def feed(v):
        if torch.is_tensor(v):
            t = v.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode() + t.numpy().tobytes())
        elif isinstance(v, (tuple, list)):
            h.update(f"{type(v).__name__}{len(v)}(".encode())
            for u in v:
                feed(u)
            h.update(b")")
        elif isinstance(v, bytes):
            h.update(b"B" + hashlib.sha256(v).digest())
        else:
            h.update(f"{type(v).__name__}:{v!r}".encode())
    feed(x)
    return h.hexdigest()


def plain(x):
    """x as torch.load(weights_only=True) reads it back: tensors (detached copies), numbers (numpy's
    as Python's), strings, lists, tuples, dicts; anything else a string naming its type (on which
    the check then fails)."""
    if torch.is_tensor(x):
        return x.detach().cpu().clone()
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, float):
        return float(x)
    if isinstance(x, int) or hasattr(x, "__index__"):
        try:
            return int(x.__index__())
        except Exception:
            return f"<an object of type {type(x).__name__}>"
    if isinstance(x, (tuple, list)):
        return tuple(map(plain, x)) if isinstance(x, tuple) else list(map(plain, x))
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    return f"<an object of type {type(x).__name__}>"


def child(name, path, record):
    """In the child: import the file, run the check of `name` on its function, write every call
    to `record` (torch.save), whatever happens (an exit at import, a crash)."""
    import importlib.util
    sys.modules["lab.solutions"] = sys.modules["lab.snapshot"] = None  # importing them raises ImportError
    import recall
    import writes
    inside, used, calls, out = [False], [], [], dict(calls=[], answers={})

    def guard(module, attr):
        real = getattr(module, attr)

        def guarded(*a, **k):
            if inside[0]:
                used.append(f"{module.__name__}.{attr}")
                raise RuntimeError(f"calls {module.__name__}.{attr}, the repository's answer: write it yourself")
            return real(*a, **k)
        setattr(module, attr, guarded)
    for m, attr in GUARDED:
        guard({"writes": writes, "recall": recall}[m], attr)

    def recorded(*args):
        entry = dict(args=digest(args))
        before = [a.clone() if torch.is_tensor(a) else None for a in args]
        inside[0] = True
        try:
            entry["out"] = plain(fn(*args))
        except BaseException as e:
            entry.update(raised=("stub" if isinstance(e, NotImplementedError) else "value" if isinstance(e, ValueError)
                                 else "timeout" if isinstance(e, checks.TimedOut) else "error"),
                         type=type(e).__name__, message=" ".join(str(e).split())[:500])
            raise
        finally:
            inside[0] = False
            entry["after"] = {str(i): a.detach().clone() for i, (a, b) in enumerate(zip(args, before))
                              if b is not None and not (a.shape == b.shape and torch.equal(a, b))}
            out["calls"].append(entry)
        return entry["out"]
    try:
        spec = importlib.util.spec_from_file_location("student_exercises", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out["answers"] = {k: v for k, v in vars(module).items() if k.startswith("ANSWER_") and isinstance(v, str)}
        fn = getattr(module, name, None)
        if not callable(fn):
            out["missing"] = True
            return
        checks.verdict(name, recorded)  # this process's verdict is never read
    except BaseException as e:  # SystemExit and all: the record says what stopped the file
        out["stopped"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    finally:
        out["used"] = sorted(set(used))
        torch.save(out, record + ".tmp")
        os.replace(record + ".tmp", record)


class Tampered(BaseException):
    """The check's calls and the recorded ones differ (a BaseException: no check may catch it)."""


def replayer(calls):
    """A stand-in for the student's function that answers the check's calls from the record."""
    pending = iter(calls)

    def fn(*args):
        call = next(pending, None)
        if call is None or call["args"] != digest(args):
            raise Tampered()
        for i, value in call.get("after", {}).items():
            if torch.is_tensor(args[int(i)]) and args[int(i)].shape == value.shape:
                args[int(i)].copy_(value)  # the change the student's function made to its argument
        kind = call.get("raised")
        if kind == "stub":
            raise NotImplementedError(call["message"])
        if kind == "value":
            raise ValueError(call["message"])
        if kind == "timeout":
            raise checks.TimedOut()
        if kind:
            raise type(call["type"], (Exception,), {})(call["message"])
        return call["out"]
    return fn


def finished(p, limit, stop):
    """Whether process p ended within `limit` seconds (False past it, or as soon as `stop` is set)."""
    end = time.monotonic() + limit
    while not stop.is_set() and time.monotonic() < end:
        try:
            p.wait(timeout=min(0.2, max(0.0, end - time.monotonic())))
            return True
        except subprocess.TimeoutExpired:
            pass
    return p.poll() is not None


def grade_one(name, path, limit, stop=None):
    """(passed, message, answers) of exercise `name` in the file at `path`, run in a child process
    (killed, with all it started, past `limit` or once the threading.Event `stop` is set)."""
    with tempfile.TemporaryDirectory() as tmp:
        record, log = os.path.join(tmp, "record.pt"), os.path.join(tmp, "stderr.txt")
        with open(log, "w") as err:
            p = subprocess.Popen([sys.executable, "-m", "lab.grader", "--child", name, os.path.abspath(path), record],
                                 cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                 start_new_session=True)  # its own group: a timeout stops what it started too
            try:
                if not finished(p, limit, stop or threading.Event()):
                    return False, f"did not finish within {limit:g} s (the file's import included): a loop at " \
                                  "import, or a call that never returns", {}
            finally:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        try:
            rec = torch.load(record, weights_only=True)
        except Exception:
            with open(log, errors="replace") as f:
                last = ([line.strip() for line in f if line.strip()] or ["no message"])[-1]
            return False, f"its process ended (status {p.returncode}) before the check was done: {last[:200]}", {}
    answers = rec.get("answers", {})
    if rec.get("used"):
        return False, f"calls {', '.join(rec['used'])}, the repository's answer: write it yourself", answers
    if rec.get("missing"):
        return False, "missing from the file", answers
    if not rec["calls"] and rec.get("stopped"):
        return False, f"the file stopped the grader at import or before the first call ({rec['stopped']})", answers
    try:
        passed, message = checks.verdict(name, replayer(rec["calls"]))
    except Tampered:
        return False, "the calls recorded in the file's process differ from the check's (did the file change the " \
                      "check, or stop it?)", answers
    if passed and rec.get("stopped"):  # every call answered, yet the file's process ended abnormally
        return False, f"the file stopped the grader ({rec['stopped']})", answers
    return passed, message, answers


def grade(path, names=None, limit=LIMIT_S, jobs=None, summary=None):
    """Every exercise of the file at `path` (or `names`), one line each, the written answers'
    lengths, then the count; -> the number that did not pass."""
    names = list(names or checks.CHECKS)
    jobs = jobs or min(2, os.cpu_count() or 1)
    results, answers, stop = {}, {}, threading.Event()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        t0 = {n: time.time() for n in names}
        futures = {n: pool.submit(grade_one, n, path, limit, stop) for n in names}
        try:
            for n in names:  # in the exercises' order, each as soon as it and those before it are done
                passed, message, said = futures[n].result()
                answers.update(said)
                results[n] = dict(passed=bool(passed), message=message, seconds=round(time.time() - t0[n], 1))
                print(f"[pass] {n}" if passed else f"[FAIL] {n}: {message}", flush=True)
        except KeyboardInterrupt:  # only this process hears a Ctrl-C (each child has a session of its own):
            stop.set()  # the running children are killed within 0.2 s, the exercises not started never start
            pool.shutdown(cancel_futures=True)
            raise
    for key, text in sorted(answers.items()):
        words = len(text.split())
        stub = text.startswith("Exercise 5c (written")
        print(f"[read] {key}: {'the stub, not written yet' if stub or not words else f'{words} words'} "
              "(graded by hand: lab/INSTRUCTOR.md has the rubric)")
    passed = sum(r["passed"] for r in results.values())
    print(f"{passed} of {len(names)} exercises pass")
    if summary:
        with open(summary + ".tmp", "w") as f:
            json.dump(dict(file=os.path.abspath(path), passed=passed, total=len(names), exercises=results,
                           answers={k: len(v.split()) for k, v in answers.items()}), f, indent=1)
        os.replace(summary + ".tmp", summary)
    return len(names) - passed


def get_parser():
    p = argparse.ArgumentParser(prog="python -m lab.grader", description="grade a student's exercises.py, each "
                                "exercise in a process of its own")
    p.add_argument("file", nargs="?", default=os.path.join(ROOT, "lab", "exercises.py"), help="the exercises.py to grade")
    p.add_argument("--json", default=None, help="also write a machine-readable summary to this file")
    p.add_argument("--limit", type=float, default=LIMIT_S, help="seconds one exercise's process may run (import included)")
    p.add_argument("--exercises", nargs="+", choices=list(checks.CHECKS), default=None, help="grade only these")
    return p


def main(argv=None):
    args = get_parser().parse_args(argv)

    def run():
        cli.require(os.path.isfile(args.file), "{} is not a file", args.file)
        cli.require(args.limit > 0 and args.limit < 1e6, "--limit must be a number of seconds > 0, got {}", args.limit)
        cli.require(not args.json or os.path.isdir(os.path.dirname(os.path.abspath(args.json))),
                    "--json: the folder of {} does not exist", args.json)
        return grade(args.file, args.exercises, args.limit, summary=args.json)
    sys.exit(1 if cli.main_guard(run, prog="lab.grader") else 0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:5])
    else:
        main()

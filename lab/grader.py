"""The autograder: every exercise of a student's exercises.py graded in a sandbox, the verdict
decided here, in the grader's process, which never imports the student's file.

    python -m lab.grader                    # lab/exercises.py
    python -m lab.grader FILE [--json summary.json] [--limit 120] [--memory 2] [--exercises binding delta_step]

(`python -m lab.checks ...`, the command in older notes, hands over to this one with a line saying so.)

How a submission cannot change its grade. The file is graded in a throwaway copy of the students'
handout (lab.handout's files: no solutions, no snapshot tools, no instructor's file), in a temporary
folder that is deleted afterwards: the child is given nothing of the instructor's folder. The
expected answers are loaded here before any child starts (grading_set: computed by the instructor's
lab.snapshot on inputs the handout does not hold, so the handout's lab/expected.json is no table of
them). Each exercise gets a child process (lab/serve.py) that imports the file and answers calls:
this process runs the check and sends the child each call's arguments only; the child sends back
what the function returned, raised or changed in place (read with torch.load(weights_only=True):
no object of the student's is ever unpickled here), and which of the repository's answers it called
(lab/serve.py's GUARDED, seen by a profile hook however the module was loaded): a call of one fails
the exercise by name. A submission that patches the checks, prints "[pass]", rewrites a file of its
copy or reads the check's stack frame gains nothing: neither the checks nor the expected answers are
in its process or its folder.

The children: each in a session of its own, under a memory cap (RLIMIT_AS: --memory GiB beyond
what torch's import maps), killed with everything in its session when its exercise is done, past
--limit (the file's import included), on a Ctrl-C, SIGTERM or SIGHUP of this process, and by the kernel if this process dies
(PR_SET_PDEATHSIG); a grandchild that leaves its session is reparented here
(PR_SET_CHILD_SUBREAPER) and killed too (Linux). The first exercise's child imports the file
before the others start: a file that hangs or dies at import fails every exercise once, in one
limit. The instructor's kit says what this cannot stop.

Exit status 0 only when every graded exercise passes; 2 for a bad argument; 130 for a Ctrl-C, 143 for a
SIGTERM, 129 for a SIGHUP; --json writes a summary ({"passed", "total", "exercises": {name: {"passed",
"message", "seconds"}}, "answers"}).
"""
from plumbing import cli

cli.exit_on_ctrl_c(__name__, "lab.grader")  # before torch's import: a Ctrl-C from the first second is one line

import argparse  # noqa: E402
import concurrent.futures  # noqa: E402
import ctypes  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from lab import checks, handout  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT_S = 120.0  # one exercise's child, torch's import included: far above a correct answer's time,
# so only a hang reaches it
MEMORY_GB = 2.0  # one child's address space (RLIMIT_AS) beyond what torch's import maps; the checks take little
GRADE_SEED = 1  # the grading set's inputs (lab.snapshot); the notebook's, in lab/expected.json, are seed 0's
MESSAGE_MAX = 1 << 28  # bytes of one reply from a child: a bigger one is no answer of these exercises
CHILD = "import sys; from lab import serve; serve.main(*sys.argv[1:])"
LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
_live, _lock, _reaper = set(), threading.Lock(), [False]  # the children's pids; whether orphans come here


def grading_set():
    """The expected answers the checks compare with here: lab.snapshot's (the instructor's copy) on
    inputs of seed GRADE_SEED, which no file of the handout holds; in a students' copy (no
    lab/snapshot.py), lab/expected.json's, the notebook's own."""
    try:
        from lab import snapshot
    except ImportError:
        return checks.expected()
    return snapshot.snapshot(GRADE_SEED)


def sandbox(path, tmp):
    """The students' handout (lab.handout's files) written under tmp, with the file at `path` as its
    lab/exercises.py -> the copy's root, where each child runs."""
    root = os.path.join(tmp, handout.TOP)
    for rel, data in handout.contents(ROOT).items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    shutil.copyfile(path, os.path.join(root, "lab", "exercises.py"))
    return root


def confine(parent):
    """The child's first act, before exec: killed when this process dies. (Its memory cap comes after
    torch's import, in lab/serve.py: the CUDA build alone maps 3 GiB of address space.)"""
    def setup():
        if LIBC is not None:
            LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # this process died before the line above: too late to be told
            os._exit(1)
    return setup


def sweep():
    """Kill every child of this process that is none of the exercises' (the orphans that
    PR_SET_CHILD_SUBREAPER brings here: a grandchild that left its session), until none is left."""
    if not _reaper[0]:
        return
    for _ in range(100):
        orphans = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            with _lock:
                if ppid == os.getpid() and int(entry) not in _live:
                    orphans.append(int(entry))
        if not orphans:
            return
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


class Ended(BaseException):
    """The child ended, ran past the limit, or was stopped mid-check (a BaseException: no check may
    catch it); its message says which."""


class Child:
    """One exercise's child process in the sandbox at `root`, and this side of its two pipes."""

    def __init__(self, name, root, limit, stop, memory, log):
        down, up = os.pipe(), os.pipe()  # (read, write) each: calls go down, replies come up
        with _lock:  # no pid may die between its start and its entry in _live
            self.p = subprocess.Popen([sys.executable, "-c", CHILD, name, os.path.join("lab", "exercises.py"),
                                       str(down[0]), str(up[1]), str(memory)], cwd=root, pass_fds=(down[0], up[1]),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                      start_new_session=True, preexec_fn=confine(os.getpid()),
                                      env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
            _live.add(self.p.pid)
        os.close(down[0])
        os.close(up[1])
        self.rfd, self.wfd, self.log, self.limit, self.stop = up[0], down[1], log.name, limit, stop
        self.end, self.used, self.hung = time.monotonic() + limit, set(), False

    def ended(self):
        """Why the child is gone: its status and the last line it wrote to stderr."""
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with open(self.log, errors="replace") as f:
            last = ([line.strip() for line in f if line.strip()] or ["no message"])[-1]
        return f"its process ended (status {self.p.returncode}) before the check was done: {last[:200]}"

    def receive(self, seconds):
        """The child's next message, or None past `seconds`; Ended past the exercise's limit, at the
        child's end, or once the threading.Event `stop` is set."""
        until, buf = min(self.end, time.monotonic() + seconds), b""
        while True:
            now = time.monotonic()
            if self.stop.is_set():
                raise Ended("stopped before it was done")
            if now >= self.end:
                raise Ended(f"did not finish within {self.limit:g} s (the file's import included): a loop at "
                            "import, or a call that never returns")
            if now >= until:
                return None
            if not select.select([self.rfd], [], [], min(0.2, until - now))[0]:
                continue
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise Ended(self.ended())
            buf += chunk
            size = struct.unpack("<Q", buf[:8])[0] if len(buf) >= 8 else None
            if size is not None and size > MESSAGE_MAX:
                raise Ended(f"its process sent {size:,} bytes for one answer")
            if size is not None and len(buf) >= 8 + size:
                try:
                    return torch.load(io.BytesIO(buf[8:8 + size]), weights_only=True)
                except Exception as e:
                    raise Ended(f"its process sent what no answer is ({type(e).__name__})") from None

    def call(self, *args):
        """The student's function, called in the child: what it returned, or its exception raised here."""
        if self.hung:  # still busy with a call that timed out
            raise checks.TimedOut()
        data = pickle.dumps(args)
        try:
            os.write(self.wfd, struct.pack("<Q", len(data)))
            view = memoryview(data)
            while view:
                view = view[os.write(self.wfd, view):]
        except BrokenPipeError:
            raise Ended(self.ended()) from None
        reply = self.receive(checks.LIMIT_S)
        if reply is None:
            self.hung = True
            raise checks.TimedOut()
        try:
            self.used.update(map(str, reply.get("used", ())))
            for i, value in reply.get("after", {}).items():
                if torch.is_tensor(args[int(i)]) and torch.is_tensor(value) and args[int(i)].shape == value.shape:
                    args[int(i)].copy_(value)  # the change the student's function made to its argument
            kind, message = reply.get("raised"), str(reply.get("message", ""))
            out = reply["out"] if not kind else None
        except (AttributeError, KeyError, TypeError, ValueError, IndexError, RuntimeError):
            raise Ended("its process sent what no answer is") from None
        if kind == "stub":
            raise NotImplementedError(message)
        if kind == "value":
            raise ValueError(message)
        if kind:
            raise type(str(reply.get("type", "Error")), (Exception,), {})(message)
        return out

    def close(self):
        """Kill the child with everything in its session; close the pipes."""
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.p.wait()
        with _lock:
            _live.discard(self.p.pid)
        os.close(self.rfd)
        os.close(self.wfd)
        sweep()


def grade_one(name, root, stored, limit, stop, memory, imported=None):
    """(passed, message, answers) of exercise `name` of the sandbox at `root`, its check run here on
    its child's answers (killed, with all it started, past `limit` or once `stop` is set).
    `imported`, a dict with an Event "done": set once the file's import ended, "ok" saying how."""
    imported = imported or dict(done=threading.Event())
    with open(os.path.join(os.path.dirname(root), f"{name}.stderr"), "w") as log:
        child = Child(name, root, limit, stop, memory, log)
    try:
        hello = child.receive(limit)
        if not isinstance(hello, dict):
            raise Ended("its process sent what no answer is")
        imported["ok"] = not hello.get("stopped")
        imported["done"].set()
        if hello.get("stopped"):
            return False, f"the file stopped the grader at import ({hello['stopped']})", {}
        answers = {str(k): v for k, v in dict(hello.get("answers", {})).items() if isinstance(v, str)}
        if not hello.get("ready"):
            return False, "missing from the file", answers
        try:  # Ended (a BaseException) goes through to the line below
            passed, message = checks.verdict(name, child.call, stored)
        except Exception as e:  # the check could not read what came back
            passed, message = False, f"what it returned is not what the check reads ({type(e).__name__}: " \
                                     f"{' '.join(str(e).split())[:200]})"
        if child.used:
            return False, f"calls {', '.join(sorted(child.used))}, the repository's answer: write it yourself", answers
        return passed, message, answers
    except Ended as e:
        return False, str(e), {}
    finally:
        imported["done"].set()
        child.close()


def grade(path, names=None, limit=LIMIT_S, jobs=None, summary=None, memory=MEMORY_GB):
    """Every exercise of the file at `path` (or `names`), one line each, the written answers'
    lengths, then the count; -> the number that did not pass."""
    names = list(names or checks.CHECKS)
    jobs = jobs or min(2, os.cpu_count() or 1)
    stored = grading_set()  # before any child starts
    results, answers, stop, first = {}, {}, threading.Event(), dict(done=threading.Event())
    cap = int(memory * 2 ** 30)
    with tempfile.TemporaryDirectory(prefix="lab-grade-", ignore_cleanup_errors=True) as tmp, \
            concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        root = sandbox(path, tmp)
        t0 = {n: time.time() for n in names}
        try:
            futures = {names[0]: pool.submit(grade_one, names[0], root, stored, limit, stop, cap, first)}
            while not first["done"].wait(0.2):  # the file's import, once, before the other exercises start
                pass
            for n in names[1:]:
                futures[n] = pool.submit(grade_one, n, root, stored, limit, stop, cap) if first.get("ok") else None
            for n in names:  # in the exercises' order, each as soon as it and those before it are done
                passed, message, said = futures[n].result() if futures[n] else futures[names[0]].result()
                answers.update(said)
                results[n] = dict(passed=bool(passed), message=message, seconds=round(time.time() - t0[n], 1))
                print(checks.said(n, passed, message), flush=True)
        except BaseException:  # a Ctrl-C, SIGTERM or SIGHUP (only this process hears them: each child has a
            stop.set()  # session of its own): the running children are killed within 0.2 s, the rest never start
            pool.shutdown(cancel_futures=True)
            raise
    try:  # the instructor's copy: a written answer that is the model answer word for word is named so
        from lab import solutions
        model = {k: " ".join(v.split()) for k, v in vars(solutions).items() if k.startswith("ANSWER_")}
    except ImportError:
        model = {}
    for key, text in sorted(answers.items()):
        words = len(text.split())
        state = ("the stub, not written yet" if text.startswith("Exercise 5c (written") or not words else
                 "the model answer of the instructor's kit, word for word" if model.get(key) == " ".join(text.split())
                 else f"{words} words")
        print(f"[read] {key}: {state} (graded by hand)")
    passed = sum(r["passed"] for r in results.values())
    print(f"{passed} of {len(names)} exercises pass")
    if summary:
        with open(summary + ".tmp", "w") as f:
            json.dump(dict(file=os.path.abspath(path), passed=passed, total=len(names), exercises=results,
                           answers={k: len(v.split()) for k, v in answers.items()}), f, indent=1)
        os.replace(summary + ".tmp", summary)
    return len(names) - passed


class Signalled(KeyboardInterrupt):
    """A SIGTERM or SIGHUP, raised in the main thread as a Ctrl-C is, so that the same path ends every child."""


def get_parser():
    p = argparse.ArgumentParser(prog="python -m lab.grader", description="grade a student's exercises.py, each "
                                "exercise in a process of its own, in a throwaway copy of the students' handout")
    p.add_argument("file", nargs="?", default=os.path.join(ROOT, "lab", "exercises.py"), help="the exercises.py to grade")
    p.add_argument("--json", default=None, help="also write a machine-readable summary to this file")
    p.add_argument("--limit", type=float, default=LIMIT_S, help="seconds one exercise's process may run (import included)")
    p.add_argument("--memory", type=float, default=MEMORY_GB, help="GiB of address space one exercise's process may use beyond torch's import")
    p.add_argument("--exercises", nargs="+", choices=list(checks.CHECKS), default=None, help="grade only these")
    return p


def main(argv=None):
    args = get_parser().parse_args(argv)

    def stopped(signum, frame):
        raise Signalled(signum)

    def run():
        cli.require(os.path.isfile(args.file), "{} is not a file", args.file)
        cli.require(args.limit > 0 and args.limit < 1e6, "--limit must be a number of seconds > 0, got {}", args.limit)
        cli.require(args.memory >= 1 and args.memory < 1e6, "--memory must be a number of GiB >= 1, got {}",
                    args.memory)
        cli.require(not args.json or os.path.isdir(os.path.dirname(os.path.abspath(args.json))),
                    "--json: the folder of {} does not exist", args.json)
        try:
            return grade(args.file, args.exercises, args.limit, summary=args.json, memory=args.memory)
        except Signalled as e:
            print(f"lab.grader: stopped by {signal.Signals(e.args[0]).name}: every exercise's process ended",
                  file=sys.stderr)
            sys.exit(128 + e.args[0])
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stopped)
    if LIBC is not None:  # an orphaned grandchild of a child comes here, not to init: sweep() ends it
        _reaper[0] = LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    try:
        sys.exit(1 if cli.main_guard(run, prog="lab.grader") else 0)
    finally:
        sweep()


if __name__ == "__main__":
    main()

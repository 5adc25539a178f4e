"""The grader's child: lab/grader.py starts one per exercise, in the sandbox (a throwaway copy of
the students' handout), to import a student's exercises.py and answer the grader's calls of one
of its functions, one message each way per call over two pipes. The check itself runs in the
grader's process: this one is sent the arguments only, never an expected answer, and sends back
what the function returned (tensors, numbers, strings, lists, tuples, dicts), which exception it
raised, which argument it changed in place, and which of the repository's own answers it called.

    python -c "import sys; from lab import serve; serve.main(*sys.argv[1:])" NAME FILE READ_FD WRITE_FD MEMORY
    (lab.grader runs it so, in the sandbox; not a command)

The guard on the repository's answers is a profile hook, on while the student's function runs: it
notes every call of a function named as one of GUARDED in a file of that name (the rules' steps and
loops, recall.binding, recall.mqar, dev/map_stats.py's welch, lab/ttests.py's verdicts, plumbing's
compressor_yardsticks), whichever way the module was loaded (imported, reloaded, or loaded by its
path), and of any function of a file named as one the handout holds back. Code copied into the
student's file, or a file that turns the hook off, is not seen (the instructor's kit says what else
the sandbox cannot stop).
"""
import importlib.util
import io
import os
import pickle
import resource
import struct
import sys
import threading

import torch

GUARDED = {("rules.py", "ema_kv_step"), ("rules.py", "ema_kv_ref"), ("rules.py", "delta_rule_step"),
           ("rules.py", "delta_rule_ref"), ("recall.py", "binding"), ("recall.py", "mqar"), ("map_stats.py", "welch"),
           ("ttests.py", "verdicts"), ("ngram.py", "compressor_yardsticks")}
HELD_BACK = ("solutions.py", "snapshot.py")  # the instructor's files (lab.handout): any function of theirs


def send(fd, obj):
    """obj, torch.save'd, as one message (its length, then its bytes) on file descriptor fd."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = struct.pack("<Q", len(buf.getbuffer())) + buf.getvalue()
    while data:
        data = data[os.write(fd, data):]


def read_exactly(fd, n):
    """n bytes from fd, or None if it closes first."""
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


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


def cap(memory):
    """This process's address space capped at what it maps now (torch imported: 0.6 GiB for the CPU
    build, 3 GiB for the CUDA one) plus `memory` bytes, before the student's file is read (Linux;
    elsewhere the grader's limit in seconds still holds)."""
    try:
        with open("/proc/self/status") as f:
            now = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (now + memory, now + memory))
    except (OSError, StopIteration, ValueError):
        pass


def main(name, path, rfd, wfd, memory):
    rfd, wfd = int(rfd), int(wfd)
    cap(int(memory))
    sys.modules["lab.solutions"] = sys.modules["lab.snapshot"] = None  # importing them raises ImportError
    used = []

    def watch(frame, event, arg):
        if event == "call":
            code = frame.f_code
            base = os.path.basename(code.co_filename)
            if (base, code.co_name) in GUARDED or base in HELD_BACK:
                used.append(f"{base[:-3]}.{code.co_name}")
    try:
        spec = importlib.util.spec_from_file_location("student_exercises", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, name, None)
        hello = dict(ready=callable(fn), answers={k: v for k, v in vars(module).items()
                                                  if k.startswith("ANSWER_") and isinstance(v, str)})
    except BaseException as e:  # SystemExit and all: the grader says what stopped the file
        hello = dict(stopped=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    send(wfd, hello)
    while hello.get("ready"):
        head = read_exactly(rfd, 8)
        if head is None:  # the grader is done with this exercise
            return
        args = pickle.loads(read_exactly(rfd, struct.unpack("<Q", head)[0]))  # the grader's: trusted
        before = [a.clone() if torch.is_tensor(a) else None for a in args]
        reply = {}
        sys.setprofile(watch)
        threading.setprofile(watch)
        try:
            reply["out"] = plain(fn(*args))
        except BaseException as e:
            reply.update(raised="stub" if isinstance(e, NotImplementedError) else "value" if isinstance(e, ValueError)
                         else "error", type=type(e).__name__, message=" ".join(str(e).split())[:500])
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        reply["after"] = {str(i): a.detach().clone() for i, (a, b) in enumerate(zip(args, before))
                          if b is not None and not (a.shape == b.shape and torch.equal(a, b))}
        reply["used"] = sorted(set(used))
        send(wfd, reply)


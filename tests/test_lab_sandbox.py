"""The grader's sandbox (lab/grader.py, lab/serve.py): a tamper file of each kind a review of the grader found,
kept here as fixtures, scores nothing, leaves the grading folder (this repository and the folder of
the submission) byte for byte as it was, and leaves no process behind; a file that loops at import
costs one limit for all its exercises; a SIGTERM or SIGHUP to the grader ends every child.

Each fixture opens with MARK, which notes the pid of every process that runs the file (each
exercise's child, and any process it forks) in a folder of the test's, so that "no process left"
is checked on the very processes the submission made."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from lab import solutions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "import os as _os\nopen(_os.path.join(MARKS, str(_os.getpid())), 'w').close()\n"

TAMPER = {  # kind -> (the file, the exercises graded, a word every [FAIL] line holds (None: any reason))
    # lab/solutions.py loaded by its path, next to the file or in the grader's folder (found through /proc)
    "solutions_by_path": ('''
import importlib.util
for _dir in (_os.path.dirname(_os.path.abspath(__file__)), f"/proc/{_os.getppid()}/cwd/lab"):
    try:
        _spec = importlib.util.spec_from_file_location("_s", _os.path.join(_dir, "solutions.py"))
        _m = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_m)
        break
    except OSError:
        continue
globals().update({k: v for k, v in vars(_m).items() if not k.startswith("__")})
''', ["binding", "delta_step"], "solutions."),
    # lab/expected.json rewritten at import, to a never-decaying ema_kv_step's and a Hebbian delta_step's answers
    "forged_expected": ('''
import json
import torch
import lab.checks as _c

def ema_kv_step(q, k, v, M, alphas):
    a = torch.tensor(alphas, dtype=M.dtype).view(-1, 1, 1)
    return (M.transpose(-1, -2) @ q).sum(0), M + a * torch.outer(k, v)

def delta_step(q, k, v, beta, M):
    return M @ q, M + beta * torch.outer(v, k)

_t = lambda x: torch.tensor(x, dtype=torch.float64)
_e = json.load(open(_c.EXPECTED))
for _case in _e["ema_kv_step"]["steps"]:
    _y, _M = ema_kv_step(*map(_t, (_case["q"], _case["k"], _case["v"], _case["M"])), _case["alphas"])
    _case.update(y=_y.tolist(), M_new=_M.tolist())
for _case in _e["delta_step"]["steps"]:
    _y, _M = delta_step(*map(_t, (_case["q"], _case["k"], _case["v"])), _case["beta"], _t(_case["M"]))
    _case.update(y=_y.tolist(), M_new=_M.tolist())
for _name, _loop in (("ema_kv_step", _e["ema_kv_step"]["loop"]), ("delta_step", _e["delta_step"]["loop"])):
    _q, _k, _v = map(_t, (_loop["q"], _loop["k"], _loop["v"]))
    _M = torch.zeros(3, 4, 4, dtype=torch.float64) if _name == "ema_kv_step" else torch.zeros(4, 4, dtype=torch.float64)
    _ys = []
    for _i in range(len(_q)):
        _y, _M = (ema_kv_step(_q[_i], _k[_i], _v[_i], _M, _loop["alphas"]) if _name == "ema_kv_step"
                  else delta_step(_q[_i], _k[_i], _v[_i], _loop["beta"][_i], _M))
        _ys.append(_y.tolist())
    _loop["y"] = _ys
with open(_c.EXPECTED, "w") as _f:
    json.dump(_e, _f)
''', ["ema_kv_step", "delta_step"], None),
    # a verdict that passes everything appended to lab/checks.py (the stubs otherwise)
    "patched_checks": ('''
import lab.checks as _c
with open(_c.__file__, "a") as _f:
    _f.write("\\n\\ndef verdict(name, fn, stored=None):\\n    return True, ''\\n")
print("[pass] binding")

def binding(acc, N):
    raise NotImplementedError
''', ["binding", "delta_step"], None),
    # the expected values read from the check's stack frame
    "stack_frame": ('''
import sys

def _peek(name):
    f = sys._getframe(2)
    while f is not None:
        if name in f.f_locals:
            return f.f_locals[name]
        f = f.f_back
    raise LookupError(f"no {name} on the stack")

def binding(acc, N):
    return _peek("want")

def ema_kv_step(q, k, v, M, alphas):
    return _peek("want_y"), _peek("want_M")
''', ["binding", "ema_kv_step"], None),
    # the handout's lab/expected.json as a lookup table: no maths but the ends of binding's line
    "lookup_table": ('''
import json
import torch
import lab.checks as _c
_E = json.load(open(_c.EXPECTED))
_t = lambda x: torch.tensor(x, dtype=torch.float64)

def binding(acc, N):
    b = _E["binding"]
    return 0.0 if acc == 1 / N else 1.0 if acc == 1 else b["values"][b["N"].index(N)][b["acc"].index(acc)]

def mqar_sequence(keys, values, slots, T, blank):
    for c in _E["mqar_sequence"]:
        if c["keys"] == keys.tolist() and c["slots"] == slots.tolist():
            return torch.tensor(c["idx"]), torch.tensor(c["targets"])
    raise ValueError("not in the table")

def ema_kv_step(q, k, v, M, alphas):
    for c in _E["ema_kv_step"]["steps"]:
        if torch.allclose(_t(c["q"]), q):
            return _t(c["y"]), _t(c["M_new"])
    loop = _E["ema_kv_step"]["loop"]
    i = next(i for i, row in enumerate(loop["q"]) if torch.allclose(_t(row), q))
    return _t(loop["y"][i]), M
''', ["mqar_sequence", "binding", "ema_kv_step"], None),
    # the guard on the repository's answers undone by a reload, or by loading the module by its path
    "reload": ('''
import importlib
import importlib.util
import recall
import writes

def ema_kv_step(q, k, v, M, alphas):
    w = importlib.reload(writes)
    y, M2 = w.ema_kv_step(q.expand(1, 1, len(alphas), len(q)), k[None, None], v[None, None], M[None, None], alphas)
    return y[0, 0], M2[0, 0]

def binding(acc, N):
    spec = importlib.util.spec_from_file_location("_r", recall.__file__)
    r = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(r)
    return r.binding(acc, N)
''', ["ema_kv_step", "binding"], "the repository's answer"),
    # a grandchild that leaves its session and would outlive the grader
    "grandchild": ('''
import time
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        open(_os.path.join(MARKS, str(_os.getpid())), "w").close()
        time.sleep(600)
    _os._exit(0)

def binding(acc, N):
    raise NotImplementedError
''', ["binding"], None),
    # 3 GiB allocated, then the right answer
    "memory": ('''
import torch

def binding(acc, N):
    block = torch.ones(3 * 2 ** 30, dtype=torch.uint8)
    return (acc - 1 / N) / (1 - 1 / N) + float(block[0]) - 1
''', ["binding"], "allocat"),
}


def _tree(*tops):
    """{path: sha256} of every file under tops (.git, caches and out/ aside: the data cache, .cache/, is the
    other tests' too, which a parallel run of the suite fills while this one grades)."""
    out = {}
    for top in tops:
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", ".pytest_cache", ".cache", "out")]
            for name in files:
                with open(os.path.join(folder, name), "rb") as f:
                    out[os.path.join(folder, name)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _submission(tmp_path, text):
    """The file in its own folder, MARK first; -> (its path, the folder of marks, the folder of reports)."""
    marks, sub, report = (tmp_path / d for d in ("marks", "sub", "report"))
    for d in (marks, sub, report):
        d.mkdir()
    (sub / "exercises.py").write_text(f"MARKS = {str(marks)!r}\n" + MARK + text)
    return sub / "exercises.py", marks, report


def _grade(path, names, report, limit=60):
    return subprocess.run([sys.executable, "-m", "lab.grader", str(path), "--limit", str(limit), "--exercises", *names,
                           "--json", str(report / "grade.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(TAMPER))
def test_a_tamper_file_scores_nothing_changes_nothing_and_leaves_no_process(kind, tmp_path):
    text, names, says = TAMPER[kind]
    path, marks, report = _submission(tmp_path, text)
    before = _tree(ROOT, path.parent)
    r = _grade(path, names, report)
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    summary = json.load(open(report / "grade.json"))
    assert summary["passed"] == 0 and summary["total"] == len(names), r.stdout
    lines = [line for line in r.stdout.splitlines() if line.startswith("[FAIL]")]
    assert len(lines) == len(names) and all(says in line for line in lines if says), r.stdout
    assert _tree(ROOT, path.parent) == before
    assert os.listdir(marks) and not [p for p in os.listdir(marks) if _alive(int(p))]
    if kind == "solutions_by_path":  # the model answer it took is named, not counted as the student's
        assert "the model answer" in r.stdout and "ANSWER_5C" in r.stdout
    if kind == "patched_checks":  # and the next file graded, the untouched stubs, is graded as ever
        stubs = _grade(os.path.join(ROOT, "lab", "exercises.py"), names, report)
        assert "0 of 2 exercises pass" in stubs.stdout and "not written yet" in stubs.stdout


@pytest.mark.slow
def test_a_loop_at_import_fails_every_exercise_in_one_limit(tmp_path):
    path, marks, report = _submission(tmp_path, "while True:\n    pass\n" + open(solutions.__file__).read())
    t0 = time.time()
    r = _grade(path, ["effective_window", "binding", "delta_step", "seed_verdict"], report, limit=8)
    lines = [line for line in r.stdout.splitlines() if line.startswith("[FAIL]")]
    assert len(lines) == 4 and all("did not finish within 8 s" in line for line in lines), r.stdout
    assert time.time() - t0 < 8 + 25 and len(os.listdir(marks)) == 1  # one child imported it, once
    assert not [p for p in os.listdir(marks) if _alive(int(p))]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_grader_ends_every_child(signum, tmp_path):
    """A CI timeout's SIGTERM (or a closed terminal's SIGHUP) while a child runs: one line, the signal's
    status, the child and its grandchild (in a session of its own) gone, the sandbox deleted."""
    text = '''
import time
if _os.fork() == 0:
    _os.setsid()
    open(_os.path.join(MARKS, str(_os.getpid())), "w").close()
    time.sleep(600)
time.sleep(600)
'''
    path, marks, report = _submission(tmp_path, text)
    p = subprocess.Popen([sys.executable, "-m", "lab.grader", str(path), "--exercises", "binding"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(600):  # until the child and its grandchild have marked themselves
        if len(os.listdir(marks)) == 2:
            break
        time.sleep(0.1)
    assert len(os.listdir(marks)) == 2
    p.send_signal(signum)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signum and err.strip().splitlines() == [
        f"lab.grader: stopped by {signal.Signals(signum).name}: every exercise's process ended"], err
    time.sleep(0.5)
    assert not [pid for pid in os.listdir(marks) if _alive(int(pid))]


@pytest.mark.slow
def test_a_child_dies_with_a_killed_grader(tmp_path):
    """kill -9 of the grader, which no handler sees: its child dies too (PR_SET_PDEATHSIG); a grandchild that
    left its session would not (lab/INSTRUCTOR.md says so)."""
    path, marks, report = _submission(tmp_path, "import time\ntime.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-m", "lab.grader", str(path), "--exercises", "binding"], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if os.listdir(marks):
            break
        time.sleep(0.1)
    assert os.listdir(marks)
    p.kill()
    p.wait()
    time.sleep(1)
    assert not [pid for pid in os.listdir(marks) if _alive(int(pid))]

"""The lab's grading and delivery: `python -m lab.grader FILE` grades each exercise in a process of
its own and cannot be fooled by the file it grades (tests/test_lab.py holds the checks themselves),
and `python -m lab.checks FILE`, its command in older notes, is still it;
`python -m lab.handout` writes a students' copy that holds and names none of what it withholds, and
its --repo_url route clones a students' branch without history; finished background runs outlive
the kernel; section 7 and the kit's discussion answer say only what results/map/map.json says."""
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

import nbformat
import pytest

from lab import handout, helpers, seeds, solutions
from plumbing import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab")

SOLVED = open(os.path.join(LAB, "solutions.py")).read()
SUBMISSIONS = {  # a student's file -> what the grader must say of binding and delta_step, the two graded here
    "tamper": (SOLVED.replace("def binding(acc, N):\n", "def binding(acc, N):\n    raise NotImplementedError\n") + "\nimport lab.checks as _c\n_c.verdict = lambda name, fn: "
               "(True, '')\n_c.CHECKS = {}\nprint('[pass] binding')\n", ["not written yet", None]),  # its process's
    # checks are not the grader's: the stub fails, the solution passes
    "exit": ("import sys\nsys.exit(0)\n" + SOLVED, ["stopped the grader", "stopped the grader"]),
    "loop": ("while True:\n    pass\n" + SOLVED, ["did not finish within", "did not finish within"]),
    "mixed": (SOLVED.replace("    return y, M + beta", "    import os; os._exit(3)\n    return y, M + beta"),
              [None, "status 3"]),
    "reference": (SOLVED.replace("y = M @ q  #", "import writes; return tuple(t[0, 0] for t in writes.delta_rule_step("
                                 "q[None, None], k[None, None], v[None, None], torch.tensor([[beta]], dtype=M.dtype), "
                                 "M[None, None]))  #"), [None, "calls rules.delta_rule_step"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SUBMISSIONS))
def test_the_autograder_cannot_be_fooled_and_grades_each_exercise_alone(kind, tmp_path):
    """A file that patches the checks in its process and prints "[pass]", exits or loops at import, kills
    its process in one exercise or calls the repository's answer: each exercise failed by name, in time,
    the others still graded, a non-zero exit status, and a JSON summary that says so."""
    import subprocess
    text, says = SUBMISSIONS[kind]
    (tmp_path / "exercises.py").write_text(text)
    t0 = time.time()
    limit = "6" if kind == "loop" else "20"  # a hang waits out the whole limit; the others must finish in it
    r = subprocess.run([sys.executable, "-m", "lab.grader", str(tmp_path / "exercises.py"), "--limit", limit,
                        "--exercises", "binding", "delta_step", "--json", str(tmp_path / "grade.json")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and time.time() - t0 < 60, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(("[pass]", "[FAIL]"))]
    assert len(lines) == 2 and "Traceback" not in r.stdout + r.stderr
    summary = json.load(open(tmp_path / "grade.json"))
    assert summary["total"] == 2 and summary["passed"] == sum(s is None for s in says)
    for line, name, said in zip(lines, ("binding", "delta_step"), says):
        assert line == f"[pass] {name}" if said is None else line.startswith(f"[FAIL] {name}: ") and said in line, line
        assert summary["exercises"][name]["passed"] is (said is None)


@pytest.mark.slow
def test_the_old_command_is_the_new_one_with_a_line_naming_it(tmp_path):
    """python -m lab.checks (older notes) becomes python -m lab.grader: the same lines and exit status,
    a grade and a bad argument alike, and one line more on stderr, first, naming the new command."""
    for argv in ([os.path.join(LAB, "exercises.py"), "--exercises", "binding"], [str(tmp_path / "nowhere.py")]):
        new, old = (subprocess.run([sys.executable, "-m", m, *argv], cwd=ROOT, capture_output=True, text=True,
                                   timeout=120) for m in ("lab.grader", "lab.checks"))
        assert new.returncode in (1, 2) and (old.returncode, old.stdout) == (new.returncode, new.stdout), old
        first, *rest = old.stderr.splitlines()
        assert "python -m lab.grader" in first and rest == new.stderr.splitlines(), old.stderr


def _metrics(values):
    import statistics
    mean, se = statistics.mean(values), statistics.stdev(values) / len(values) ** 0.5
    return dict(mean=mean, se=se, ci95=[mean - 2 * se, mean + 2 * se], values=values)


_TEST = dict(n_a=3, n_b=3, perm_floor=0.1, family_size=3)  # dev.map's fields of one comparison, 3 vs 3 seeds
MAP = dict(alpha=0.01, min_seeds=3, n_comparisons=3, family_sizes=dict(map=3), models={  # a hand-made seeded map:
    "gpt": dict(n=3, seeds=[0, 1, 2], cpu="Xeon", point="cooldown", metrics=dict(  # delta and gpt, no hybrid_ema_kv
        all=_metrics([1.39, 1.40, 1.38]), copies=_metrics([0.815, 0.80, 0.83]))),
    "delta": dict(n=3, seeds=[0, 1, 2], cpu="Xeon", point="cooldown", metrics=dict(
        all=_metrics([1.30, 1.31, 1.29]), copies=_metrics([0.96, 0.796, 0.88])))},
    comparisons=[dict(_TEST, a="delta", b="gpt", metric="all", diff=-0.09, se=0.008, t=-11.0, df=4.0, p_welch=0.0004,
                      p_perm=0.004, p_holm=0.0012, ci99=[-0.13, -0.05], verdict="below", perm_floor=0.004),
                 dict(_TEST, a="delta", b="gpt", metric="copies", diff=0.0637, se=0.049, t=1.3, df=2.2, p_welch=0.32,
                      p_perm=0.3, p_holm=0.64, ci99=[-0.31, 0.44], verdict="tie", perm_floor=0.004),
                 dict(_TEST, a="delta", b="gpt", metric="other", diff=-0.02, se=0.004, t=-5.0, df=3.9, p_welch=0.0078,
                      p_perm=0.1, p_holm=0.016, ci99=[-0.041, -0.0006], verdict="no verdict")])


def test_section_6_says_the_seeded_maps_verdicts_and_only_those(tmp_path, capsys):
    """Every number and verdict of section 6 and of the discussion's answer comes from map.json: per test the
    difference ± SE, the two-sided Welch p, the permutation p, Holm's p and the family's size, the 99% interval
    (what a tie or no verdict leaves open), and why no verdict."""
    path = tmp_path / "map.json"
    path.write_text(json.dumps(MAP))
    rows, said = seeds.summary(seeds.load(str(path)))
    assert [r[:3] for r in rows] == [["gpt", 3, "0, 1, 2"], ["delta", 3, "0, 1, 2"]]
    assert rows[1][3] == f"{1.30:.3f} ± {MAP['models']['delta']['metrics']['all']['se']:.3f}" and rows[1][5] == "-"
    assert "delta is below gpt" in said[0] and "two-sided Welch p = 0.0004, permutation p = 0.004, Holm-adjusted " \
        "p = 0.0012 over the family's 3 comparisons; 99% interval [-0.130, -0.050]" in said[0]
    assert "+0.064 ± 0.049" in said[1] and "n = 3 and 3 seeds" in said[1]
    assert "a tie at 0.01: a gap between -0.310 and +0.440 is not ruled out" in said[1] and "excludes 0" not in said[1]
    assert "no verdict" in said[2] and "under 0.1, above 0.01: too few seeds" in said[2] and "below" not in said[2]
    assert "a gap between -0.041 and -0.001 is not ruled out (that interval, uncorrected" in said[2]
    assert said[-1] == "not in the map: delta_conv, hybrid_ema_kv"
    answer = seeds.discussion(str(path))
    assert "a tie at 0.01" in answer and "because" not in answer and "below gpt" not in answer
    assert "standard error of the difference" in answer and "within the seeds' spread" not in answer
    assert seeds.values(MAP, "delta") == [0.96, 0.796, 0.88]
    assert seeds.show(str(path)) == said and "cooldown point on the whole validation split" in capsys.readouterr().out
    old = tmp_path / "old.json"  # the file before the seeded map: its rows only
    old.write_text(json.dumps(dict(rows=[dict(model="gpt", seed=1, loss_copy=0.8), dict(model="gpt", seed=0,
                                                                                      loss_copy=0.815)])))
    assert seeds.show(str(old)) == [seeds.summary({})[1][0]] and len(capsys.readouterr().out.splitlines()) == 1
    assert seeds.values(seeds.load(str(old)), "gpt") == [0.815, 0.8]
    one_sided = {k: v for k, v in MAP.items() if k != "family_sizes"}  # the map before its two-sided statistics
    assert seeds.summary(one_sided) == ([], [seeds.summary({})[1][0]])


def test_section_7_prints_the_committed_maps_tests_and_the_seeds_correlation():
    """Each sentence of section 7 holds its comparison's numbers from results/map/map.json (two-sided Welch p,
    permutation p, Holm's p over the family, the 99% interval); the reading and the family are said; the
    correlation the notebook prints is Pearson's over the two models' shared seeds in the file."""
    import scipy.stats
    m = seeds.load(seeds.MAP)
    rows, said = seeds.summary(m)
    tests = [c for n in seeds.CORE[1:] for k, _ in seeds.METRICS for c in m["comparisons"]
             if (c["a"], c["b"], c["metric"]) == (n, "gpt", k)]
    assert len(said) == len(tests) > 0
    for c, line in zip(tests, said):
        for x in ("p_welch", "p_perm", "p_holm"):
            assert f"{c[x]:.2g}" in line, (x, line)
        assert f"{c['family_size']} comparisons" in line and f"[{c['ci99'][0]:+.3f}, {c['ci99'][1]:+.3f}]" in line
        assert ("below gpt" in line) == (c["verdict"] == "below") and c["verdict"] in line
    assert f"{m['models']['gpt']['point']} point on the whole validation split" in seeds.reading(m)
    assert f"map: {m['family_sizes']['map']} comparisons" in seeds.reading(m) and "Holm" in seeds.reading(m)
    r, p, n = seeds.correlation(m, "delta", "gpt", "copies")
    want = scipy.stats.pearsonr(seeds.values(m, "delta"), seeds.values(m, "gpt"))
    assert n == len(set(m["models"]["delta"]["seeds"]) & set(m["models"]["gpt"]["seeds"])) and abs(r - want.statistic) < 1e-12 and abs(p - want.pvalue) < 1e-12
    with open(os.path.join(LAB, "lab.py")) as f:
        notebook = f.read()
    assert "S.correlation(seeded, \"delta\", \"gpt\", \"copies\")" in notebook
    assert "independent draws" not in notebook and "one-sided t-test of" not in notebook


WITHHELD = [os.path.basename(p) for p in handout.HELD_BACK] + ["LAB_SOLUTIONS", "lab.reference", "lab.snapshot"]


def _setup_cell(nb_path):
    return nbformat.read(str(nb_path), as_version=4).cells[1].source


def test_the_handout_holds_and_names_none_of_what_it_withholds(tmp_path, monkeypatch):
    """The zip has no held-back file and no reference implementation; its student-facing files (lab/README.md,
    the notebook, lab/exercises.py, every .md) name no withheld file; the setup cell unpacks it on a bare machine."""
    archive = handout.main(["--out_dir", str(tmp_path / "handout")])
    with zipfile.ZipFile(archive) as z:
        files = {n.split("/", 1)[1]: z.read(n) for n in z.namelist()}
    assert "lab/exercises.py" in files and "ema.py" in files and not set(handout.HELD_BACK) & set(files)
    solved = [line.strip() for line in open(os.path.join(LAB, "solutions.py")) if line.startswith("    return ")]
    for name, data in files.items():  # no reference implementation of an exercise in any file of lab/
        if name.startswith("lab/") and name.endswith(".py"):
            assert "def ridge_probe" not in data.decode() and not any(x in data.decode() for x in solved if len(x) > 20)
    students = [n for n in files if n.startswith("lab/") and n.endswith(".md")] + ["lab/lab.ipynb", "lab/exercises.py"]
    texts = {n: files[n].decode() for n in students} | {"lab.ipynb": (tmp_path / "handout" / "lab.ipynb").read_text()}
    for name, text in texts.items():
        assert not [w for w in WITHHELD if w in text] and "<!-- instructor -->" not in text, name
    assert all(w in open(os.path.join(LAB, "README.md")).read() for w in ("INSTRUCTOR.md", "LAB_SOLUTIONS"))
    assert "## Running it" in texts["lab/README.md"] and "LAB_THREADS" in texts["lab/README.md"]
    student = tmp_path / "colab"
    student.mkdir()
    os.link(archive, student / "ema-is-not-all-you-need.zip")
    monkeypatch.chdir(student)
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(_setup_cell(tmp_path / "handout" / "lab.ipynb"), "setup", "exec"), {"__name__": "__main__"})
    assert os.getcwd() == str(student / "ema-is-not-all-you-need")
    assert os.path.isfile("lab/exercises.py") and not os.path.exists("lab/solutions.py")


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_the_repo_url_route_makes_a_students_branch_without_history(tmp_path, monkeypatch):
    """--repo_url needs --branch; a remote of this repository or an existing branch's name is refused in one
    line; the branch made holds exactly the zip's files in one commit without parents, and the setup cell
    written by the handout clones it: no solutions, no history that holds them."""
    repo = tmp_path / "teacher"
    for path in ("ema.py", "lab/__init__.py", "lab/lab.ipynb", "lab/README.md", "lab/exercises.py",
                 "lab/solutions.py", "lab/INSTRUCTOR.md"):
        os.makedirs(repo / os.path.dirname(path), exist_ok=True)
        shutil.copy(os.path.join(ROOT, path), repo / path)
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "the instructor's copy")
    _git(repo, "remote", "add", "origin", "https://example.org/teacher.git")
    monkeypatch.setattr(handout, "ROOT", str(repo))
    url, out = (tmp_path / "students").as_uri(), str(tmp_path / "handout")
    teacher = "https://example.org/teacher.git/"
    for argv, says in (([url], "--branch"), ([teacher, "--branch", "b"], "remote of this repository"),
                       ([url, "--branch", "main"], "a branch of this history"),
                       ([url, "--branch", "a..b"], "not a name git takes"),
                       ([url, "--branch", "students.lock"], "not a name git takes"),  # git's refusals, which once came
                       ([url, "--branch", "students/"], "not a name git takes"),  # as a traceback after the zip
                       ([url, "--branch", "a/.b"], "not a name git takes"), ([url, "--branch", "a//b"], "not a name"),
                       (["", "--branch", "students"], "give --repo_url too")):
        with pytest.raises(cli.UserError, match=says) as e:
            handout.main(["--out_dir", out, "--repo_url", *argv])  # nothing written, the zip neither
        assert "\n" not in str(e.value) and not os.path.exists(out)
    archive = handout.main(["--out_dir", out, "--repo_url", url, "--branch", "students"])
    handout.main(["--out_dir", out, "--repo_url", url, "--branch", "students"])  # made again: refused never
    tree = _git(repo, "ls-tree", "-r", "--name-only", "students").splitlines()
    assert sorted(tree) == sorted(n.split("/", 1)[1] for n in zipfile.ZipFile(archive).namelist())
    assert "lab/solutions.py" not in tree and "lab/INSTRUCTOR.md" not in tree and "lab/exercises.py" in tree
    assert _git(repo, "rev-list", "--parents", "students").split() == [_git(repo, "rev-parse", "students")]
    assert "INSTRUCTOR.md" not in _git(repo, "show", "students:lab/README.md")
    _git(tmp_path, "clone", "-q", "--bare", "--branch", "students", str(repo), str(tmp_path / "students"))
    setup = _setup_cell(os.path.join(out, "lab.ipynb"))
    assert f'REPO_URL = "{url}"' in setup and 'REPO_BRANCH = "students"' in setup
    student = tmp_path / "colab"
    student.mkdir()
    monkeypatch.chdir(student)
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(setup, "setup", "exec"), {"__name__": "__main__"})
    assert os.getcwd() == str(student / "ema-is-not-all-you-need") and os.path.isfile("lab/exercises.py")
    assert not os.path.exists("lab/solutions.py") and _git(".", "rev-list", "--all", "--count") == "1"


def test_the_handout_checks_its_out_dir_and_leaves_no_half_zip(tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(cli.UserError, match="--out_dir"):
        handout.main(["--out_dir", str(tmp_path / "a_file")])

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(handout.zipfile.ZipFile, "writestr", full)
    with pytest.raises(cli.UserError, match="No space left") as e:
        handout.main(["--out_dir", str(tmp_path / "h")])
    assert "\n" not in str(e.value) and os.listdir(tmp_path / "h") == []

    def ctrl_c(*args, **kwargs):  # mid-zip, where tests/test_entry_points.py's Ctrl-C lands on a fast machine
        raise KeyboardInterrupt
    monkeypatch.setattr(handout.zipfile.ZipFile, "writestr", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        handout.main(["--out_dir", str(tmp_path / "h")])
    assert os.listdir(tmp_path / "h") == []


def test_finished_background_runs_survive_a_kernel_restart(tmp_path, monkeypatch, capsys):
    """A restarted kernel re-running the setup cell and start_background reads the runs that finished from
    their files (lab.background's records), starts only the rest, and none when all are done; a file of
    other settings is not taken for this run's."""
    from lab import background, write
    monkeypatch.setattr(helpers, "OUT", str(tmp_path))
    monkeypatch.setattr(helpers, "SIZES", helpers.SMOKE_SIZES)
    monkeypatch.setattr(helpers, "recall_quiet", lambda cfg: print("recall trained") or {"acc": 0.5})
    monkeypatch.setattr(write, "train_points", lambda: {"points": 4})
    started = []

    class Exited:  # the background process of the fake Popen: already gone
        pid = 0
        poll = wait = staticmethod(lambda: 0)
    monkeypatch.setattr(helpers.subprocess, "Popen", lambda argv, **kw: started.append(argv[4:]) or Exited())
    background.main(helpers.background_key(), ["recall", "points"])  # what the dead kernel's run finished
    monkeypatch.setattr(helpers, "_BACKGROUND", {})  # the restarted kernel knows of no run
    capsys.readouterr()
    helpers.start_background()
    assert started == [["bytes"]] and "finished before" in capsys.readouterr().out
    assert helpers.collect("recall") == {"acc": 0.5} and capsys.readouterr().out == "recall trained\n"
    assert helpers.collect("bytes") is None  # its process ended without it: the cell runs it in place
    monkeypatch.setattr(write, "train_bytes", lambda: {"loss": 1.7})
    background.main(helpers.background_key(), ["bytes"])
    monkeypatch.setattr(helpers, "_BACKGROUND", {})
    assert helpers.start_background() is None and started == [["bytes"]]  # all done: nothing started
    monkeypatch.setattr(helpers, "SIZES", {**helpers.SMOKE_SIZES, "recall": {**helpers.SMOKE_SIZES["recall"],
                                                                             "steps": 5}})
    helpers.start_background()  # other sizes: no file is theirs
    assert started[-1] == list(helpers.JOBS) and helpers.finished("recall") is None


def test_section_7_names_the_maps_seed_rule_where_a_model_has_no_test():
    """A model with too few seeds for the map's test (map.json's min_seeds) gets one sentence, no verdict."""
    stat = lambda v: dict(mean=v, se=0.01, ci95=[v - 0.03, v + 0.03], values=[v, v])
    m = dict(alpha=0.01, min_seeds=3, n_comparisons=0, comparisons=[], family_sizes={},
             models={n: dict(n=k, seeds=list(range(k)), metrics={key: stat(0.7) for key, _ in seeds.METRICS})
                     for n, k in (("gpt", 6), ("delta", 2))})
    rows, said = seeds.summary(m, models=("gpt", "delta"))
    assert [r[:2] for r in rows] == [["gpt", 6], ["delta", 2]]
    assert said == ["no test yet for delta against gpt (fewer than 3 seeds a side): no verdict"]


def test_the_reference_runs_seed_numbers_are_the_committed_maps():
    """lab/README.md's and the kit's reference run state section 7's per-seed copy losses, their correlation and exercise 8's
    verdict as the notebook prints them from results/map/map.json: a seed added to the map without them
    updated fails here."""
    m = seeds.load(seeds.MAP)
    a, b = seeds.values(m, "delta"), seeds.values(m, "gpt")
    diff, se, said = solutions.seed_verdict(a, b, paired=False)
    r = seeds.correlation(m, "delta", "gpt", "copies")[0]
    for doc in ("README.md", "INSTRUCTOR.md"):
        with open(os.path.join(LAB, doc)) as f:
            text = " ".join(f.read().split())  # line breaks as spaces
        for stated in (f"delta {[round(x, 3) for x in a]}", f"gpt {[round(x, 3) for x in b]}",
                       f"{diff:+.3f} ± {se:.3f} nats/byte, a {said}", f"correlation across seeds r = {r:+.2f}"):
            assert stated in text, (doc, stated)


def test_one_set_of_minutes_everywhere():
    """The exercises' labels (lab/exercises.py, the notebook), the plan's tables (the notebook, lab/README.md, the kit)
    and the sentences under them give the same minutes: 67 of writing in 90."""
    import re
    import jupytext
    labels = [int(m) for m in re.findall(r"about (\d+) min", open(os.path.join(LAB, "exercises.py")).read())]
    notebook = "\n".join(c.source for c in jupytext.read(os.path.join(LAB, "lab.py")).cells)
    assert sum(labels) == 67 and sum(int(m) for m in re.findall(r"~(\d+) min", notebook)) == 67, labels
    for name, text in (("lab.py", notebook), ("README.md", open(os.path.join(LAB, "README.md")).read()),
                       ("INSTRUCTOR.md", open(os.path.join(LAB, "INSTRUCTOR.md")).read())):
        rows = [line for line in text.splitlines() if re.match(r"(# )?\| \d+-\d+ \|", line)]
        spans = [int(b) - int(a) for a, b in (re.match(r"(?:# )?\| (\d+)-(\d+)", r).groups() for r in rows)]
        writing = [int(m) for r in rows for m in re.findall(r"\((\d+)\)", r)]
        assert sum(spans) == 90 and sum(writing) == 67, (name, spans, writing)
        assert "5 + 7 + 9 + 11 + 18 + 12 + 8 + 10 + 10 = 90 minutes" in " ".join(text.split()), name


def test_the_hand_in_cell_names_an_answer_that_is_only_in_a_cell(monkeypatch, capsys):
    """H.hand_in() says the file is what the grader reads, and names an exercise answered in an @H.answer cell
    while lab/exercises.py still holds its stub (the grader would fail it as not written)."""
    monkeypatch.setattr(helpers, "_ANSWERS", {})
    assert helpers.hand_in() == [] and "lab.grader lab/exercises.py" in capsys.readouterr().out
    helpers.answer(solutions.binding)
    helpers.answer(ANSWER_5C=solutions.ANSWER_5C)
    assert helpers.hand_in() == ["ANSWER_5C", "binding"] and "still the stub in the file" in capsys.readouterr().out


def test_section_6_says_its_rows_in_words_and_why_they_are_not_section_7s(capsys):
    """The cell after the copy-split table exists (lab/lab.py) and says, from results/scaling's file, the lowest copy
    loss and why its 128-window, constant-lr numbers differ from section 7's cooldown ones on the whole split."""
    import jupytext
    from lab import write
    cells = [c.source for c in jupytext.read(os.path.join(LAB, "lab.py")).cells]
    table = next(i for i, c in enumerate(cells) if c.startswith("W.split_table("))
    assert cells[table + 1].startswith("W.split_words()")
    write.split_words()
    out = capsys.readouterr().out
    scaling = json.load(open(write.SCALING))
    gpt = scaling["curves"]["gpt_c128"]["copy"][-1]["loss_copy"]
    assert f"({gpt:.3f} nats/byte)" in out and f"{scaling['settings']['hit_seqs']} windows" in out
    assert "cooldown" in out and "whole validation split" in out and scaling["schedule"] in out

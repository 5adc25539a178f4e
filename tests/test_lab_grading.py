"""The lab's grading and its seeded section: `python -m lab.checks FILE` grades each exercise in a
process of its own and cannot be fooled by the file it grades (tests/test_lab.py holds the checks
themselves); section 7 and the kit's discussion answer say only what results/map/map.json says."""
import json
import os
import sys
import time

import pytest

from lab import seeds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab")

SOLVED = open(os.path.join(LAB, "solutions.py")).read()
SUBMISSIONS = {  # a student's file -> what the grader must say of binding and delta_step, the two graded here
    "tamper": (SOLVED.replace("def binding(acc, N):\n", "def binding(acc, N):\n    raise NotImplementedError\n") + "\nimport lab.checks as _c\n_c.verdict = lambda name, fn: "
               "(True, '')\n_c.CHECKS = {}\nprint('[pass] binding')\n", ["calls recorded", "calls recorded"]),
    "exit": ("import sys\nsys.exit(0)\n" + SOLVED, ["stopped the grader", "stopped the grader"]),
    "loop": ("while True:\n    pass\n" + SOLVED, ["did not finish within", "did not finish within"]),
    "mixed": (SOLVED.replace("    return y, M + beta", "    import os; os._exit(3)\n    return y, M + beta"),
              [None, "status 3"]),
    "reference": (SOLVED.replace("y = M @ q  #", "import writes; return tuple(t[0, 0] for t in writes.delta_rule_step("
                                 "q[None, None], k[None, None], v[None, None], torch.tensor([[beta]], dtype=M.dtype), "
                                 "M[None, None]))  #"), [None, "calls writes.delta_rule_step"]),
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
    r = subprocess.run([sys.executable, "-m", "lab.checks", str(tmp_path / "exercises.py"), "--limit", "20",
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


def _metrics(values):
    import statistics
    mean, se = statistics.mean(values), statistics.stdev(values) / len(values) ** 0.5
    return dict(mean=mean, se=se, ci95=[mean - 2 * se, mean + 2 * se], values=values)


MAP = dict(alpha=0.01, n_comparisons=2, models={  # a hand-made seeded map: delta and gpt, no hybrid_ema_kv
    "gpt": dict(n=3, seeds=[0, 1, 2], cpu="Xeon", point="cooldown", metrics=dict(
        all=_metrics([1.39, 1.40, 1.38]), copies=_metrics([0.815, 0.80, 0.83]))),
    "delta": dict(n=3, seeds=[0, 1, 2], cpu="Xeon", point="cooldown", metrics=dict(
        all=_metrics([1.30, 1.31, 1.29]), copies=_metrics([0.96, 0.796, 0.88])))},
    comparisons=[dict(a="delta", b="gpt", metric="all", diff=-0.09, se=0.008, t=-11.0, df=4.0, p_below=0.0002,
                      p_above=0.9998, verdict="below", n_a=3, n_b=3),
                 dict(a="delta", b="gpt", metric="copies", diff=0.0637, se=0.049, t=1.3, df=2.2, p_below=0.84,
                      p_above=0.16, verdict="tie", n_a=3, n_b=3)])


def test_section_6_says_the_seeded_maps_verdicts_and_only_those(tmp_path, capsys):
    """Every number and verdict of section 6 and of the discussion's answer comes from map.json."""
    path = tmp_path / "map.json"
    path.write_text(json.dumps(MAP))
    rows, said = seeds.summary(seeds.load(str(path)))
    assert [r[:3] for r in rows] == [["gpt", 3, "0, 1, 2"], ["delta", 3, "0, 1, 2"]]
    assert rows[1][3] == f"{1.30:.3f} ± {MAP['models']['delta']['metrics']['all']['se']:.3f}" and rows[1][5] == "-"
    assert "delta is below gpt (one-sided p = 0.0002 < 0.01)" in said[0] and "+0.064 ± 0.049" in said[1]
    assert "a tie at 0.01" in said[1] and "n = 3 and 3 seeds" in said[1]
    assert said[-1] == "not in the map: delta_conv, hybrid_ema_kv"
    answer = seeds.discussion(str(path))
    assert "a tie at 0.01" in answer and "because" not in answer and "below gpt" not in answer
    assert seeds.values(MAP, "delta") == [0.96, 0.796, 0.88]
    old = tmp_path / "old.json"  # the file before the seeded map: its rows only
    old.write_text(json.dumps(dict(rows=[dict(model="gpt", seed=1, loss_copy=0.8), dict(model="gpt", seed=0,
                                                                                      loss_copy=0.815)])))
    assert seeds.show(str(old)) == [seeds.summary({})[1][0]] and len(capsys.readouterr().out.splitlines()) == 1
    assert seeds.values(seeds.load(str(old)), "gpt") == [0.815, 0.8]

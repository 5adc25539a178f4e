"""dev/map.py's statistics on hand-made seeds: each model's mean, standard error and interval, Welch's
test and its verdict against the formulas; a duplicate seed, a damaged value and a curve at other
settings refused in one line; the copy onset interpolated; the figure and tables written."""

import json
import math
import os
import shutil
import time

import pytest
from scipy import stats

from dev import map as M
from plumbing import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPIES = {"gpt": [0.80, 0.85, 0.90, 0.82], "delta": [1.10, 1.00, 1.05, 1.12], "delta_conv": [0.88, 0.95, 0.83, 1.02]}


def reference():
    with open(os.path.join(ROOT, M.REFERENCE)) as f:
        return json.load(f)


def curve(model, copies, shift=0.0):
    """A finished seeded curve: the trunk's whole-split scores at three points and the cooldown's."""
    last = reference()["curves"]["gpt_c128"]["points"][-1]
    score = lambda step, tokens, c: dict(step=step, tokens=tokens, all=1.3 + shift, copies=c, copies_far=c + 0.05,
                                         other=1.32 + shift, targets=100, copy_targets=10, far_targets=2, windows=5)
    return dict(model=model, width=128, params=1000, state_floats=8576, train_seconds=60.0, machines=["cpu A"],
                points=[dict(step=0, tokens=0, val_loss=5.5), dict(step=last["step"], tokens=last["tokens"], val_loss=1.3)],
                copy=[], scores=[score(10, 40960, 2.0), score(100, 409600, 1.0), score(last["step"], last["tokens"],
                                                                                         copies + 0.05)],
                cooldown=dict(scores=[score(last["step"], last["tokens"], copies)]))


def repo(tmp_path, table=COPIES):
    """A repository holding the committed reference and one seeded folder per (model, seed)."""
    root = tmp_path / "repo"
    (root / "results" / "scaling").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, M.REFERENCE), root / M.REFERENCE)
    settings = reference()["settings"]
    for model, values in table.items():
        for seed, v in enumerate(values):
            d = root / M.SEEDS / f"{model}_s{seed}"
            d.mkdir(parents=True)
            (d / "scaling.json").write_text(json.dumps(dict(settings=dict(settings, seed=seed),
                                                            curves={f"{model}_c128": curve(model, v)})))
    return root


def test_statistics_match_the_formulas(tmp_path):
    res, _ = M.analyse(str(repo(tmp_path)))
    for model, values in COPIES.items():
        s = res["models"][model]["metrics"]["copies"]
        n, mean = len(values), sum(values) / len(values)
        se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
        assert s["n"] == n and s["mean"] == pytest.approx(mean) and s["se"] == pytest.approx(se)
        assert s["ci95"] == pytest.approx([mean - stats.t.ppf(0.975, n - 1) * se, mean + stats.t.ppf(0.975, n - 1) * se])
        assert res["models_trunk"][model]["metrics"]["copies"]["mean"] == pytest.approx(mean + 0.05)
    tests = {(c["a"], c["b"], c["metric"]): c for c in res["comparisons"]}
    for a, verdict in (("delta", "above"), ("delta_conv", "tie")):  # delta far above GPT; delta_conv overlaps it
        c, x, y = tests[(a, "gpt", "copies")], COPIES[a], COPIES["gpt"]
        va, vb = stats.tvar(x) / len(x), stats.tvar(y) / len(y)
        t = (sum(x) / len(x) - sum(y) / len(y)) / math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1))  # Welch-Satterthwaite
        assert c["t"] == pytest.approx(t) and c["df"] == pytest.approx(df) and c["se"] == pytest.approx(math.sqrt(va + vb))
        assert c["p_below"] == pytest.approx(stats.t.cdf(t, df)) and c["p_above"] == pytest.approx(stats.t.sf(t, df))
        assert c["verdict"] == verdict
        # the resolvable gap: at it, a one-sided test at 0.01 rejects with probability 0.8 (simulated)
        rng = __import__("numpy").random.default_rng(0)
        n = 200_000  # t statistics when the gap is real: (Z + gap / se) / sqrt(chi2_df / df), a noncentral t
        z = (rng.standard_normal(n) + c["resolvable"] / c["se"]) / (rng.chisquare(c["df"], n) / c["df"]) ** 0.5
        assert abs((z > stats.t.ppf(0.99, c["df"])).mean() - 0.8) < 0.01
    assert tests[("delta_conv", "delta", "copies")]["what"] == "the convolution"
    assert res["n_comparisons"] == len(res["comparisons"]) == 3 * len(M.METRICS)  # 2 against GPT, 1 ingredient
    assert tests[("delta", "gpt", "all")]["verdict"] == "tie"  # equal values on every seed: no difference


def test_no_test_below_three_seeds_a_side(tmp_path):
    """Two close seeds would make Welch's test confident (one side's variance from one difference): a model
    with two seeds is in the tables, in no comparison."""
    res, _ = M.analyse(str(repo(tmp_path, dict(COPIES, delta_conv=[0.60, 0.601]))))
    assert res["models"]["delta_conv"]["n"] == 2
    assert {c["a"] for c in res["comparisons"]} == {"delta"} and res["n_comparisons"] == len(M.METRICS)


def test_onset_is_log_interpolated():
    pts = [dict(tokens=1e5, copies=2.5), dict(tokens=1e6, copies=0.5)]
    assert M.onset(pts, 1.5) == pytest.approx(10 ** 5.5)  # half way down, half way in log bytes
    assert M.onset(pts, 0.1) is None and M.onset(pts[1:], 1.5) == 1e6


def test_duplicates_damage_and_other_settings_are_one_line(tmp_path):
    root = repo(tmp_path, {"gpt": [0.8, 0.9]})
    shutil.copytree(root / M.SEEDS / "gpt_s1", root / M.SEEDS / "gpt_s1_again")  # the same seed twice
    with pytest.raises(cli.UserError, match="gpt seed 1 is in both") as e:
        M.analyse(str(root))
    assert "\n" not in str(e.value)
    shutil.rmtree(root / M.SEEDS / "gpt_s1_again")
    path = root / M.SEEDS / "gpt_s0" / "scaling.json"
    rec = json.loads(path.read_text())
    rec["curves"]["gpt_c128"]["cooldown"]["scores"][0]["copies"] = float("nan")
    path.write_text(json.dumps(rec))
    with pytest.raises(cli.UserError, match="not a finite number") as e:
        M.analyse(str(root))
    assert "copies" in str(e.value) and "gpt_s0" in str(e.value)
    rec["curves"]["gpt_c128"]["cooldown"]["scores"][0]["copies"] = 0.8
    rec["settings"]["lr"] = 1e-3
    path.write_text(json.dumps(rec))
    with pytest.raises(cli.UserError, match="other settings") as e:
        M.analyse(str(root))


def test_main_writes_the_tested_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(repo(tmp_path))
    M.main(str(tmp_path / "out"))
    md = (tmp_path / "out" / "map.md").read_text()
    assert "| `delta` | `gpt` | against GPT | copies |" in md and "**above**" in md and "**tie**" in md
    assert os.path.getsize(tmp_path / "out" / "map.png") > 10_000


def test_the_readmes_map_numbers_are_the_maps():
    """Every 'mean ± SE' the README's and results/map's prose state is a model's (or a difference's) in the
    committed map.json: a stated number that drifts from its source fails here."""
    import re
    with open(os.path.join(ROOT, "results", "map", "map.json")) as f:
        m = json.load(f)
    known = {f"{s['mean']:.3f} ± {s['se']:.3f}" for part in ("models", "models_trunk") for v in m[part].values()
             for s in v["metrics"].values() if s["se"] is not None}
    known |= {f"{abs(c['diff']):.3f} ± {c['se']:.3f}" for c in m["comparisons"]}  # a difference, its sign in words
    for path in ("README.md", os.path.join("results", "map", "README.md")):
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
        text = text[text.index("map on text" if path == "README.md" else "What the seeds show"):][:6000]
        stated = set(re.findall(r"\d\.\d{3} ± \d\.\d{3}", text))
        assert stated and stated <= known, (path, stated - known)

"""dev/map.py and dev/map_stats.py on hand-made seeds: each arm's mean, standard error and interval; Welch's
two-sided test, the permutation test and its floor, Holm's correction, the 99% interval and the
verdict against scipy and brute force; the seeds-by-documents bootstrap; arms at their own rate,
two CPUs kept apart, the screening's families and stage 2; every damaged record refused in one line
(a negative or null loss, a string step, a missing field, a NaN, one curve twice, a folder named for
another seed, other settings), an unfinished folder said; map.json written last."""

import itertools
import json
import math
import os
import shutil
import statistics

import numpy as np
import pytest
from scipy import stats

from dev import map as M
from dev import seeds
from plumbing import cli
from dev import map_stats as S

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPIES = {"gpt": [0.80, 0.85, 0.90, 0.82, 0.86], "delta": [1.10, 1.00, 1.05, 1.12, 1.08],
          "delta_conv": [0.88, 0.95, 0.83, 1.02, 0.90]}
CPU = "Intel(R) Xeon(R) Processor (family 6, model 167; avx2), torch 2.13.0+cpu, 1 thread(s)"
AMD = "AMD EPYC (family 25, model 1; avx2), torch 2.13.0+cpu, 1 thread(s)"


def reference():
    with open(os.path.join(ROOT, M.REFERENCE)) as f:
        return json.load(f)


def curve(model, copies, machine=CPU, shift=0.0):
    """A finished seeded curve: the trunk's whole-split scores at three points and the cooldown's."""
    last = reference()["curves"]["gpt_c128"]["points"][-1]
    score = lambda step, tokens, c: dict(step=step, tokens=tokens, all=1.3 + shift, copies=c, copies_far=c + 0.05,
                                         other=1.32 + shift, targets=100, copy_targets=10, far_targets=2, windows=5)
    return dict(model=model, width=128, params=1000, state_floats=8576, train_seconds=60.0, machines=[machine],
                points=[dict(step=0, tokens=0, val_loss=5.5), dict(step=last["step"], tokens=last["tokens"], val_loss=1.3)],
                copy=[], scores=[score(10, 40960, 2.0), score(100, 409600, 1.0), score(last["step"], last["tokens"],
                                                                                         copies + 0.05)],
                cooldown=dict(scores=[score(last["step"], last["tokens"], copies)], machines=[machine]))


def write_seed(root, arm, seed, value, folder=M.SEEDS, machine=CPU, **settings):
    model, lr = seeds.split_arm(arm)
    d = root / folder / seeds.folder(arm, seed)
    d.mkdir(parents=True)
    rec = dict(settings=dict(reference()["settings"], seed=seed, cooldown=0.2, lr=lr or 2e-3, **settings),
               curves={f"{model}_c128": curve(model, value, machine)})
    (d / "scaling.json").write_text(json.dumps(rec))
    return d / "scaling.json"


def repo(tmp_path, table=COPIES, folder=M.SEEDS, machine=CPU):
    """A repository holding the committed reference and one seeded folder per (arm, seed)."""
    root = tmp_path / "repo"
    (root / "results" / "scaling").mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.join(ROOT, M.REFERENCE), root / M.REFERENCE)
    for arm, values in table.items():
        for seed, v in enumerate(values):
            write_seed(root, arm, seed, v, folder, machine)
    return root


def one_line(e, *words):
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


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
    for a in ("delta", "delta_conv"):
        c, x, y = tests[(a, "gpt", "copies")], COPIES[a], COPIES["gpt"]
        va, vb = stats.tvar(x) / len(x), stats.tvar(y) / len(y)
        t = (sum(x) / len(x) - sum(y) / len(y)) / math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1))  # Welch-Satterthwaite
        assert c["t"] == pytest.approx(t) and c["df"] == pytest.approx(df) and c["se"] == pytest.approx(math.sqrt(va + vb))
        assert c["p_welch"] == pytest.approx(2 * stats.t.sf(abs(t), df))  # two-sided
        assert c["p_below"] == pytest.approx(stats.t.cdf(t, df)) and c["p_above"] == pytest.approx(stats.t.sf(t, df))
        half = stats.t.ppf(0.995, df) * math.sqrt(va + vb)
        assert c["ci99"] == pytest.approx([c["diff"] - half, c["diff"] + half])
        assert c["perm_floor"] == pytest.approx(2 / 252) and c["perm_exact"]
    assert tests[("delta", "gpt", "copies")]["verdict"] == "above"  # every delta seed above every GPT seed
    assert tests[("delta_conv", "gpt", "copies")]["verdict"] == "tie"
    assert tests[("delta_conv", "delta", "copies")]["what"] == "the convolution"
    assert res["n_comparisons"] == len(res["comparisons"]) == 3 * len(M.METRICS)  # 2 against GPT, 1 ingredient
    assert res["family_sizes"] == {"map": 3 * len(M.METRICS)}
    assert tests[("delta", "gpt", "all")]["verdict"] == "tie"  # equal values on every seed: no difference


def test_two_sided_where_the_one_sided_reading_differs():
    """A one-sided p between 0.005 and 0.01: the old reading (the side picked by the data, each side at
    0.01) called it 'below'; two-sided it is 0.014, a tie."""
    x, y = [0.80, 0.85, 0.90, 0.82, 0.86], [0.924, 0.864, 0.964, 0.914, 0.934]
    c = S.welch(x, y, 0.01)
    assert 0.005 < c["p_below"] < 0.01
    assert c["p_welch"] == pytest.approx(stats.ttest_ind(x, y, equal_var=False).pvalue) == pytest.approx(2 * c["p_below"])
    c = dict(c, p_holm=S.holm([c["p_welch"]])[0])
    assert S.verdict(c, 0.01) == "tie" and c["ci99"][0] < 0 < c["ci99"][1]


def brute_permutation(x, y):
    """Every assignment of the pooled values to the two sides (as index sets), by bitmask."""
    pool, n, hits, total = x + y, len(x), 0, 0
    obs = abs(sum(x) / len(x) - sum(y) / len(y))
    for mask in range(2 ** len(pool)):
        a = [v for i, v in enumerate(pool) if mask >> i & 1]
        if len(a) == n:
            b = [v for i, v in enumerate(pool) if not mask >> i & 1]
            total += 1
            hits += abs(sum(a) / len(a) - sum(b) / len(b)) >= obs - 1e-12
    return hits / total


@pytest.mark.parametrize("x,y", [([0.80, 0.85, 0.90], [0.92, 0.86, 0.96]), ([1.0, 1.1, 0.9, 1.3], [1.2, 0.95, 1.4]),
                                 ([0.1, 0.2, 0.3, 0.4, 0.5], [0.6, 0.7, 0.8, 0.9, 1.0]),
                                 ([0.5, 0.7, 0.2, 0.9], [0.4, 0.6, 0.3, 0.8, 0.1, 0.55])])
def test_permutation_p_is_every_relabelling(x, y):
    p, exact = S.permutation(x, y)
    assert exact and p == pytest.approx(brute_permutation(x, y))


def test_permutation_samples_past_its_limit():
    """Past `limit` relabellings, `limit` random ones: close to the exact p (10 vs 10: 184,756 in all)."""
    rng = np.random.default_rng(1)
    x, y = list(rng.normal(0, 1, 10)), list(rng.normal(0.8, 1, 10))
    p, exact = S.permutation(x, y)
    sampled, approx = S.permutation(x, y, limit=20_000)
    assert exact and not approx and 0.01 < p < 0.5 and abs(sampled - p) < 0.01


def test_permutation_floor():
    """Perfectly separated sides reach the floor: 2 / C(n_a + n_b, n_a) with equal sides, 0.1 at 3 vs 3 and
    2/252 at 5 vs 5; 1 / C with unequal ones, 1/84 at 3 vs 6; under 0.01 only at 5 vs 5, so the others reach
    no verdict however far apart the means."""
    for n, m, floor, said in ((3, 3, 0.1, "no verdict"), (5, 5, 2 / 252, "above"), (3, 6, 1 / 84, "no verdict")):
        x, y = [1.0 + i / 100 for i in range(n)], [0.5 + i / 100 for i in range(m)]
        c = S.welch(x, y, 0.01)
        assert c["p_perm"] == pytest.approx(floor) and c["perm_floor"] == pytest.approx(floor)
        assert S.verdict(dict(c, p_holm=c["p_welch"]), 0.01) == said


def test_holm_is_the_step_down_definition():
    rng = np.random.default_rng(0)
    for _ in range(50):
        ps = list(rng.uniform(0, 0.05, rng.integers(1, 8)))
        m, order = len(ps), sorted(range(len(ps)), key=lambda i: ps[i])
        want = {i: min(1, max((m - j) * ps[order[j]] for j in range(order.index(i) + 1))) for i in range(m)}
        assert S.holm(ps) == pytest.approx([want[i] for i in range(m)])
    assert S.holm([0.004, None, 0.002]) == pytest.approx([0.008, None, 0.006])  # a test not run keeps m = 3


def test_verdict_needs_both_holm_and_the_permutation(tmp_path):
    """The family's Holm p decides with the permutation p: in a family of two, a Welch p of 0.006 is a tie."""
    table = {"gpt": COPIES["gpt"], "delta": [v - 0.07 for v in [0.84, 0.78, 0.88, 0.83, 0.85]],
             "delta_conv": COPIES["delta_conv"]}
    res, _ = M.analyse(str(repo(tmp_path, table)))
    c = next(c for c in res["comparisons"] if (c["a"], c["b"], c["metric"]) == ("delta", "gpt", "copies"))
    assert c["p_holm"] >= c["p_welch"] and c["family_size"] == res["family_sizes"]["map"]
    assert c["verdict"] == ("below" if c["p_holm"] < 0.01 and c["p_perm"] < 0.01 else "tie")


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


def test_documents_hold_each_windows_first_target():
    tokens = [5] * 300 + [0] + [6] * 100 + [0] + [7] * 400 + [0]  # three documents, each followed by 0
    # windows start at 0, 256, 512, 768 (T = 256): first targets 1, 257, 513, 769
    assert list(S.documents(tokens, 0, 256)) == [0, 0, 2, 2]


def windows(losses, ns):
    return dict(n=ns, loss=losses, copy_n=ns, copy_loss=losses, bin_n=[ns], bin_loss=[losses])


def test_bootstrap_splits_seeds_from_documents():
    docs = np.array([0, 0, 1, 2, 2, 3])
    # seeds that differ by a constant, on documents of equal loss per target: all the noise is the seeds'
    ws = [windows([v * 10] * 6, [10] * 6) for v in (1.0, 1.2, 0.9)]
    b = S.bootstrap(ws, docs, "copies")
    assert b["se"]["documents"] == pytest.approx(0, abs=1e-12) and b["seed_share"] == pytest.approx(1)
    assert b["se"]["seeds"] == pytest.approx(b["se"]["both"]) and b["n_documents"] == 4 and b["n_seeds"] == 3
    # every seed the same: all the noise is the documents'; a document's windows move together
    w = windows([5.0, 7.0, 30.0, 2.0, 1.0, 12.0], [10, 10, 10, 10, 10, 10])
    b = S.bootstrap([w, w, w], docs, "copies", B=20_000)
    assert b["se"]["seeds"] == pytest.approx(0, abs=1e-12) and b["seed_share"] == pytest.approx(0, abs=1e-12)
    loss, n = np.bincount(docs, w["loss"]), np.bincount(docs, w["n"])  # the ratio estimator's SE over documents
    r = loss.sum() / n.sum()
    assert b["se"]["documents"] == pytest.approx(math.sqrt(((loss - r * n) ** 2).sum()) / n.sum(), rel=0.15)


def test_noise_reads_each_seeds_windows(tmp_path):
    root = repo(tmp_path, {"gpt": [0.8, 0.9, 0.85]})
    for seed, scale in enumerate((1.0, 1.1, 0.95)):
        w = windows([scale * v for v in (10.0, 20.0, 15.0, 5.0)], [10, 10, 10, 10])
        (root / M.SEEDS / f"gpt_s{seed}" / "windows.json").write_text(json.dumps({"gpt_c128": {"cooldown": w}}))
    split = lambda *a, **k: np.array([3] * 300 + [0] + [4] * 500 + [0] + [5] * 100)  # 4 windows of 256 (902 tokens)
    res, _ = M.analyse(str(root), read_split=split)
    b = res["noise"]["gpt"]["copies"]
    assert b["n_seeds"] == 3 and b["n_documents"] == 2 and 0 < b["seed_share"] < 1


def test_arms_at_their_own_rate_and_two_cpus(tmp_path):
    """delta at 4e-3 is the arm delta@0.004; GPT's seeds on another CPU are a row of their own, and a test
    compares arms of one CPU only."""
    root = repo(tmp_path, {"gpt": COPIES["gpt"], "delta@0.004": COPIES["delta"]})
    for seed, v in enumerate(COPIES["gpt"]):
        write_seed(root, "gpt", seed + 10, v + 0.13, machine=AMD)
    res, _ = M.analyse(str(root))
    rows = {(v["arm"], v["cpu"].split(" (")[0]): v["n"] for v in res["models"].values()}
    assert rows == {("gpt", "Intel(R) Xeon(R) Processor"): 5, ("gpt", "AMD EPYC"): 5, ("delta@0.004", "Intel(R) Xeon(R) "
                                                                                               "Processor"): 5}
    assert res["comparisons"] and all(c["cpu"].startswith("Intel") and c["a"] == "delta@0.004"
                                      for c in res["comparisons"])
    assert all(c["n_b"] == 5 for c in res["comparisons"])  # never the ten GPT seeds pooled


def test_screen_families_on_partial_data(tmp_path, monkeypatch, capsys):
    """The screening: PLAN.md's families P (9), S (9) and G (7) with their labels; arms at 3 seeds tested
    (no verdict: the permutation floor is 0.1), one at 2 tabled only, an unfinished folder said; stage 2
    lists H1 (its 99% interval excludes 0) and not H2a."""
    table = {"gpt": [0.80, 0.82, 0.81], "gated_delta": [0.90, 0.91, 0.905], "gated_delta_ret": [0.70, 0.71, 0.705],
             "delta": [0.85, 0.95, 0.90], "delta_k128_v32": [0.86, 0.96, 0.91], "delta_k128_v64": [0.8, 0.85],
             "delta@0.001": [0.9, 0.91, 0.92]}
    root = repo(tmp_path, table, folder=M.CAMPAIGNS["screen"], machine=AMD)
    path = write_seed(root, "delta_product", 0, 0.8, folder=M.CAMPAIGNS["screen"], machine=AMD)
    rec = json.loads(path.read_text())
    del rec["curves"]["delta_product_c128"]["cooldown"]  # still training its cooldown
    path.write_text(json.dumps(rec))
    (root / M.CAMPAIGNS["screen"] / "delta_wide_s0").mkdir()  # started, nothing written yet
    monkeypatch.chdir(root)
    M.main(str(tmp_path / "out"), "screen")
    res = json.loads((tmp_path / "out" / "map.json").read_text())
    assert res["family_sizes"] == {"P": 9, "S": 9, "G": 7}
    got = {(c["family"], c["what"], c["a"], c["b"], c["metric"]) for c in res["comparisons"]}
    assert got == {("P", "H1", "gated_delta_ret", "gated_delta", "copies"), ("S", "H1", "gated_delta_ret", "gated_delta", "all"),
                   ("P", "H2a", "delta_k128_v32", "delta", "copies"), ("S", "H2a", "delta_k128_v32", "delta", "all"),
                   ("P", "H3a", "delta@0.001", "delta", "copies"), ("S", "H3a", "delta@0.001", "delta", "all"),
                   *(("G", "G", a, "gpt", "copies") for a in ("delta", "gated_delta", "gated_delta_ret",
                                                               "delta_k128_v32"))}
    assert {c["verdict"] for c in res["comparisons"]} == {"no verdict"}
    assert res["models"]["delta_k128_v64"]["n"] == 2 and "delta_product" not in res["models"]
    assert {s["what"] for s in res["stage2"] if s["extend"]} == {"H1"}
    assert {s["what"] for s in res["stage2"]} == {"H1", "H2a", "H3a"}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "delta_product_s0" in err[0] and "delta_wide_s0" in err[1]
    md = (tmp_path / "out" / "map.md").read_text()
    assert "2 seed folder(s)" in md and "| P | `gated_delta_ret` | `gated_delta` | H1 |" in md and "Stage 2" in md
    assert '--plan "gated_delta_ret:3-4,gated_delta:3-4"' in md and seeds.parse_plan("gated_delta_ret:3-4,gated_delta:3-4")


def test_another_cpus_screen_is_read_from_its_own_folder(tmp_path, monkeypatch):
    """--seeds: the screening's curves on another CPU, a folder of their own (PLAN.md's amendment), are the
    map's seeds, said in map.json and map.md with the command that read them; the screen's own folder is not
    read; a --seeds that is not a folder is one line."""
    root = repo(tmp_path, {"gpt": [0.80, 0.82, 0.81]}, folder=M.CAMPAIGNS["screen"], machine=AMD)
    other = {"gpt": [0.70, 0.72], "gated_delta": [0.90, 0.91, 0.905], "gated_delta_ret": [0.70, 0.71, 0.705]}
    for arm, losses in other.items():
        for seed, loss in enumerate(losses):
            write_seed(root, arm, seed, loss, folder="results/map/screen_f26", machine=AMD.replace("25", "26"))
    monkeypatch.chdir(root)
    M.main(str(tmp_path / "out"), "screen", seeds="results/map/screen_f26")
    res = json.loads((tmp_path / "out" / "map.json").read_text())
    assert res["folder"] == "results/map/screen_f26" and res["models"]["gpt"]["n"] == 2
    assert res["command"] == f"python -m dev.map --campaign screen --seeds results/map/screen_f26 --out_dir {tmp_path / 'out'}"
    md = (tmp_path / "out" / "map.md").read_text()  # stage 2's seeds go to the folder read, H1 its comparison
    assert "from the records under results/map/screen_f26" in md
    assert '--out_dir results/map/screen_f26 --plan "gated_delta_ret:3-4,gated_delta:3-4"' in md
    with pytest.raises(cli.ConfigError, match="--seeds nowhere is not a folder"):
        M.main(str(tmp_path / "out"), "screen", seeds="nowhere")


def test_confirmation_pick_rate_and_n(tmp_path):
    """PLAN.md's pick: the bounded arm at 2e-3 with the lowest mean copies (delta_k128_v32; delta@0.004, lower still,
    is a rate, not an arm to pick), at delta's best rate (4e-3), against GPT at its best (1e-3); n by the normal
    formula from the spreads, capped at 16, with the gap 16 a side find; provisional while planned arms are short."""
    table = {"gpt": [0.80, 0.90, 0.85], "gpt@0.001": [0.70, 0.80, 0.75], "delta": [0.85, 0.95, 0.90],
             "delta@0.004": [0.60, 0.70, 0.65], "delta_k128_v32": [0.76, 0.84, 0.80], "gated_delta": [0.9, 0.95, 0.92]}
    res, _ = M.analyse(str(repo(tmp_path, table, folder=M.CAMPAIGNS["screen"], machine=AMD)), "screen")
    (c,) = res["confirmation"]
    assert (c["pick"], c["a"], c["b"]) == ("delta_k128_v32", "delta_k128_v32@0.004", "gpt@0.001")
    var = statistics.variance(table["delta_k128_v32"]) + statistics.variance(table["gpt@0.001"])
    z = stats.norm.ppf(0.995) + stats.norm.ppf(0.8)
    assert c["need"] == math.ceil(z * z * var / 0.05 ** 2) == 20 and c["n"] == 16
    assert c["gap"] == pytest.approx(z * math.sqrt(var / 16))
    need, n, gap = S.n_for_power(0.089, 0.050, 0.05, 0.01, 0.8, 16)  # PLAN.md's worked case: the Intel map's spreads
    assert (need, n, round(gap, 3)) == (49, 16, 0.087)
    assert c["plan"] == "delta_k128_v32@0.004:100-115,gpt@0.001:100-115"
    assert seeds.parse_plan(c["plan"])[-1] == ("gpt@0.001", 115)
    assert "delta_product" in c["short"] and "gpt" not in c["short"]
    md = "\n".join(M.seed_lines(res))
    assert "provisional: " + str(len(c["short"])) in md and 'capped at 16' in md and c["plan"] in md
    table["gpt"] = [0.80, 0.81]  # GPT short of 3 seeds: no pick yet
    del table["gpt@0.001"]
    res, _ = M.analyse(str(repo(tmp_path / "b", table, folder=M.CAMPAIGNS["screen"], machine=AMD)), "screen")
    assert res["confirmation"] == [] and "not yet" in "\n".join(M.seed_lines(res))


@pytest.mark.parametrize("damage,words", [
    (lambda c: c["cooldown"]["scores"][0].update(copies=-0.1), ("not in [0", "copies")),
    (lambda c: c["scores"][1].update(all=-1.0), ("not in [0", "all")),
    (lambda c: c["points"][1].update(val_loss=-1.0), ("not in [0", "val_loss")),
    (lambda c: c["cooldown"]["scores"][0].update(copies=None), ("copies",)),
    (lambda c: c["scores"][2].update(copies=None), ("copies",)),
    (lambda c: c["points"][1].update(step="2441"), ("step",)),
    (lambda c: c["cooldown"]["scores"][0].update(copies=float("nan")), ("copies",)),
    (lambda c: c.pop("machines"), ("machines",)),
    (lambda c: c.pop("scores"), ("scores",)),
    (lambda c: c.pop("train_seconds"), ("train_seconds",)),
    (lambda c: c.pop("state_floats"), ("state_floats",)),
    (lambda c: c["cooldown"].pop("machines"), ("machines",)),
    (lambda c: c.update(cooldown=[0.8]), ("cooldown",)),
    (lambda c: c.update(train_seconds=-5.0), ("train_seconds",))])
def test_a_damaged_seed_record_is_one_line(tmp_path, damage, words):
    root = repo(tmp_path, {"gpt": [0.8, 0.9, 0.85]})
    path = root / M.SEEDS / "gpt_s1" / "scaling.json"
    rec = json.loads(path.read_text())
    damage(rec["curves"]["gpt_c128"])
    path.write_text(json.dumps(rec))
    with pytest.raises(cli.UserError) as e:
        M.analyse(str(root))
    one_line(e, "gpt_s1", *words)


def test_one_curve_per_seed_and_the_same_settings(tmp_path, capsys):
    root = repo(tmp_path, {"gpt": [0.8, 0.9]})
    shutil.copytree(root / M.SEEDS / "gpt_s1", root / M.SEEDS / "gpt_s1_again")  # the same seed in another folder
    with pytest.raises(cli.UserError) as e:
        M.analyse(str(root))
    one_line(e, "gpt_s1_again", "gpt_s1")
    shutil.rmtree(root / M.SEEDS / "gpt_s1_again")
    path = write_seed(root, "gpt", 7, 0.9)  # seed 1's curve again, under seed 7
    rec = json.loads((root / M.SEEDS / "gpt_s1" / "scaling.json").read_text())
    path.write_text(json.dumps(dict(rec, settings=dict(rec["settings"], seed=7))))
    with pytest.raises(cli.UserError) as e:
        M.analyse(str(root))
    one_line(e, "the same curve", "gpt_s1", "gpt_s7")
    shutil.rmtree(path.parent)
    path = root / M.SEEDS / "gpt_s0" / "scaling.json"
    rec = json.loads(path.read_text())
    for key, value in (("cooldown", 0.1), ("eval_data", "tinystories"), ("block_size", 128)):
        path.write_text(json.dumps(dict(rec, settings=dict(rec["settings"], **{key: value}))))
        with pytest.raises(cli.UserError) as e:
            M.analyse(str(root))
        one_line(e, "other settings", key)
    path.write_text(json.dumps(dict(rec, settings=dict(rec["settings"], lr=4e-3))))  # delta@0.004 in gpt_s0
    with pytest.raises(cli.UserError) as e:
        M.analyse(str(root))
    one_line(e, "gpt@0.004", "gpt_lr0.004_s0")
    path.write_text(json.dumps(dict(rec, settings=dict(rec["settings"], seed=3))))  # seed 3 in gpt_s0
    with pytest.raises(cli.UserError) as e:
        M.analyse(str(root))
    one_line(e, "gpt_s3")
    path.write_text(json.dumps(dict(rec, settings={k: v for k, v in rec["settings"].items() if k != "lr"})))
    with pytest.raises(cli.UserError) as e:
        M.analyse(str(root))
    one_line(e, "gpt_s0", "lr")
    damaged = dict(rec, curves={"gpt_c128": dict(rec["curves"]["gpt_c128"], cooldown=dict(scores=[], machines=[]))})
    path.write_text(json.dumps(damaged))  # reads as unfinished: said, not silently out of n
    res, _ = M.analyse(str(root))
    assert res["models"]["gpt"]["n"] == 1 and len(res["unfinished"]) == 1
    assert "gpt_s0" in capsys.readouterr().err
    path.write_text(json.dumps(dict(rec, curves={"gpt_c128": dict(rec["curves"]["gpt_c128"], points=[])})))
    res, _ = M.analyse(str(root))  # nothing trained yet: said too
    assert res["models"]["gpt"]["n"] == 1 and len(res["unfinished"]) == 1 and "gpt_s0" in capsys.readouterr().err


def test_the_earlier_curves_are_read_with_care(tmp_path):
    root = repo(tmp_path, {})
    ref = reference()
    d = root / "results" / "map" / "gpt"
    d.mkdir(parents=True)
    (d / "scaling.json").write_text(json.dumps(dict(ref, curves={"gpt_c128": ref["curves"]["gpt_c128"]})))
    with pytest.raises(cli.UserError) as e:  # the reference's GPT, seed 0, again
        M.collect(str(root))
    one_line(e, "gpt seed 0", "results/map/gpt")
    c = json.loads(json.dumps(ref["curves"]["delta_c128"]))
    c["copy"][-1]["loss_copy"] = float("nan")
    (d / "scaling.json").write_text(json.dumps(dict(ref, curves={"delta_c128": c}, settings=dict(ref["settings"], seed=4))))
    with pytest.raises(cli.UserError) as e:
        M.collect(str(root))
    one_line(e, "loss_copy", "results/map/gpt")


def test_map_json_is_written_last(tmp_path, monkeypatch):
    """A failure while drawing leaves the old map.json beside the old map.md, never a new one."""
    monkeypatch.chdir(repo(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    (out / "map.json").write_text("old")
    monkeypatch.setattr(M, "plot", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        M.main(str(out))
    assert (out / "map.json").read_text() == "old"


def test_main_writes_the_tested_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(repo(tmp_path))
    M.main(str(tmp_path / "out"))
    md = (tmp_path / "out" / "map.md").read_text()
    assert "| map | `delta` | `gpt` | against GPT | copies | 5 vs 5 |" in md and "**above**" in md and "**tie**" in md
    assert os.path.getsize(tmp_path / "out" / "map.png") > 10_000
    assert json.loads((tmp_path / "out" / "map.json").read_text())["command"] == f"python -m dev.map --out_dir {tmp_path / 'out'}"


def test_the_readmes_map_numbers_are_the_maps():
    """Every 'mean ± SE', p and 99% interval the README's and results/map's prose state is a model's or a
    comparison's in the committed map.json: a stated number that drifts from its source fails here."""
    import re
    with open(os.path.join(ROOT, "results", "map", "map.json")) as f:
        m = json.load(f)
    known = {f"{s['mean']:.3f} ± {s['se']:.3f}" for part in ("models", "models_trunk") for v in m[part].values()
             for s in v["metrics"].values() if s["se"] is not None}
    known |= {f"{abs(c['diff']):.3f} ± {c['se']:.3f}" for c in m["comparisons"]}  # a difference, its sign in words
    intervals = {f"[{c['ci99'][0]:+.3f}, {c['ci99'][1]:+.3f}]" for c in m["comparisons"]}
    ps = {f"{c[k]:.2g}" for c in m["comparisons"] for k in ("p_welch", "p_holm", "p_perm") if c[k] is not None}
    ps |= {f"{t['p']:.2g}" for t in m["onset"].values()}  # the onset's Pearson tests
    for path in ("README.md", os.path.join("results", "map", "README.md")):
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
        rows = [line for line in text.splitlines() if line.startswith("| a different write on bytes")]
        text = text[text.index("map on text" if path == "README.md" else "What the seeds show"):][:9000] + "".join(rows)
        stated = set(re.findall(r"\d\.\d{3} ± \d\.\d{3}", text))
        assert stated and stated <= known, (path, stated - known)
        stated = set(re.findall(r"\[[+−-]\d\.\d{3}, [+−-]\d\.\d{3}\]", text.replace("−", "-")))
        assert stated <= intervals, (path, stated - intervals)
        stated = set(re.findall(r"\bp(?:_?\w+)? = (\d(?:\.\d+)?(?:e-\d+)?)", text))
        assert stated <= ps, (path, stated - ps)

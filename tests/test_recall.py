"""Tests for recall.py: the MQAR generator's properties (answers only at query positions,
distinct keys and values, nothing to copy in the query region, determinism per seed), the
recipe's pieces (the training batches are a pure function of the seed, smallest N first, the
warmup-stable-decay lr, the plateau-exit step on hand-made curves, saved runs reused only under
the same settings), the recall.json shape of a tiny run, one-line errors for bad settings, and
one learning property (a tiny history reader recalls far above the 1/N plateau). A few seconds
on 2 cores."""
import dataclasses
import json
import os

import pytest
import torch

from plumbing import cli, grid, tables
import recall

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

K, M, T = 12, 10, 40  # key ids, value ids, sequence length of the generator tests


def draw(n_seq=64, n_pairs=6, seed=0):
    return recall.mqar(n_seq, n_pairs, T, K, M, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n_pairs", [1, 6, 10])
def test_answers_only_at_queries_and_each_key_asked_once(n_pairs):
    idx, targets, distance = draw(n_pairs=n_pairs)
    N = n_pairs
    assert idx.shape == targets.shape == distance.shape == (64, T)
    keys, values = idx[:, 0:2 * N:2], idx[:, 1:2 * N:2]
    assert ((keys >= 0) & (keys < K)).all() and ((values >= K) & (values < K + M)).all()
    query = idx[:, 2 * N:]
    answered = targets >= 0
    assert not answered[:, :2 * N].any(), "no answer inside the key-value region"
    assert (answered[:, 2 * N:] == (query < K)).all(), "an answer exactly where a key is asked"
    assert ((query == K + M) | (query < K)).all(), "the query region holds keys and the blank only"
    for b in range(64):
        assert len(set(keys[b].tolist())) == N and len(set(values[b].tolist())) == N, "distinct keys and values"
        assert sorted(query[b][query[b] < K].tolist()) == sorted(keys[b].tolist()), "every key asked once"


def test_query_span_puts_the_queries_right_after_the_pairs():
    N = 4
    idx, targets, _ = recall.mqar(32, N, T, K, M, torch.Generator().manual_seed(0), span=N)
    assert (targets[:, 2 * N:3 * N] >= 0).all() and not (targets[:, 3 * N:] >= 0).any(), "span N: back to back"
    assert (idx[:, 3 * N:] == K + M).all(), "blank after the queries"
    idx, targets, _ = recall.mqar(256, N, T, K, M, torch.Generator().manual_seed(0), span=2 * N)
    answered = (targets >= 0).nonzero()[:, 1]
    assert answered.min() == 2 * N and answered.max() == 4 * N - 1, "span 2N: within the 2N positions after the pairs"


def test_gap_puts_distractor_values_between_the_pairs_and_the_queries():
    N, G = 4, 9
    idx, targets, distance = recall.mqar(64, N, T, K, M, torch.Generator().manual_seed(0), span=N, gap=G)
    noise = idx[:, 2 * N:2 * N + G]
    assert ((noise >= K) & (noise < K + M)).all(), "the gap holds value ids only: no key is ever repeated"
    assert len(noise.unique()) > M // 2, "noise is drawn, not constant"
    assert not (targets[:, :2 * N + G] >= 0).any() and (targets[:, 2 * N + G:3 * N + G] >= 0).all()
    assert distance[targets >= 0].min() >= G + 2
    assert (idx[:, 3 * N + G:] == K + M).all(), "blank after the queries"
    for b, p in (targets >= 0).nonzero().tolist():  # the answer is still the value right after the asked key
        j = (idx[b, :2 * N:2] == idx[b, p]).nonzero().item() * 2
        assert targets[b, p] == idx[b, j + 1] and (idx[b] == idx[b, p]).sum() == 2
    same = recall.mqar(64, N, T, K, M, torch.Generator().manual_seed(0), span=N)
    plain = recall.mqar(64, N, T, K, M, torch.Generator().manual_seed(0), span=N, gap=0)
    assert all(torch.equal(a, b) for a, b in zip(same, plain)), "gap 0 is the task without a gap"


def test_answer_is_the_pair_and_cannot_be_copied_from_the_query_region():
    N = 6
    idx, targets, distance = draw(n_pairs=N)
    for b, p in (targets >= 0).nonzero().tolist():
        k = idx[b, p].item()
        j = (idx[b, :2 * N:2] == k).nonzero().item() * 2  # where the key was given
        assert targets[b, p] == idx[b, j + 1], "the target is the value paired with the asked key"
        assert distance[b, p] == p - j >= 2
        assert (idx[b] == targets[b, p]).sum() == 1 and j + 1 < 2 * N, "the value occurs once, in its pair"
    assert (distance[targets < 0] == 0).all()


def test_generator_is_deterministic_per_seed():
    a, b, c = draw(seed=3), draw(seed=3), draw(seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    cfg = recall.RecallConfig(pairs=(2, 4), block_size=16, n_keys=8, n_values=8)
    assert torch.equal(recall.eval_set(cfg, 5, 7)[4][0], recall.eval_set(cfg, 5, 7)[4][0])
    assert not torch.equal(recall.eval_set(cfg, 5, recall.VAL_SEED)[4][0],
                           recall.eval_set(cfg, 5, recall.TEST_SEED)[4][0]), "validation and test differ"


TINY = dict(pairs=(2, 4), block_size=16, n_keys=8, n_values=8, query_span=0, test_seqs=4, val_seqs=4, n_layer=1,
            n_embd=16, n_head=1, steps=3, warmup=1, decay=0, curriculum=0, batch_size=4, eval_every=2, seeds=2,
            workers=1)


def test_training_batches_are_a_pure_function_of_the_seed_with_the_smallest_n_first():
    cfg = recall.RecallConfig(**{**TINY, "steps": 10, "curriculum": 3, "batch_size": 6})
    take = lambda seed: [b for _, b in zip(range(6), recall.batches(cfg, seed))]
    a, b, c = take(0), take(0), take(1)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b)), "same seed, same batches"
    assert not torch.equal(a[0][0], c[0][0])
    answers = [(t >= 0).sum(1).tolist() for _, t in a]  # pair count of each sequence
    assert all(n == [2] * 6 for n in answers[:3]), "curriculum steps: the smallest N only"
    assert all(sorted(n) == [2, 2, 2, 4, 4, 4] for n in answers[3:]), "then an even mixture"
    assert len({tuple(r) for x, _ in a for r in x.tolist()}) == 36, "fresh draws do not repeat"


def test_lr_is_warmup_then_constant_then_linear_decay_to_zero():
    cfg = recall.RecallConfig(**{**TINY, "steps": 100, "warmup": 10, "decay": 20, "lr": 1e-3})
    lrs = [recall.lr_at(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(x == 1e-3 for x in lrs[10:80])
    assert lrs[80] == pytest.approx(1e-3) and lrs[90] == pytest.approx(5e-4) and lrs[99] == pytest.approx(5e-5)
    assert all(a > b for a, b in zip(lrs[80:], lrs[81:]))
    assert [recall.lr_at(s, recall.RecallConfig(**{**TINY, "steps": 5, "warmup": 0})) for s in range(5)] == [1e-3] * 5


def test_plateau_exit_is_the_first_evaluation_above_halfway_from_one_over_n_to_one():
    assert recall.threshold(8) == pytest.approx(0.5625) and recall.threshold(2) == pytest.approx(0.75)
    curve = [(0, {"2": 0.0, "8": 0.0}), (100, {"2": 0.5, "8": 0.125}), (200, {"2": 0.76, "8": 0.5625}),
             (300, {"2": 0.9, "8": 0.57}), (400, {"2": 0.7, "8": 0.99})]
    assert recall.plateau_exit(curve, 2) == 200, "first step strictly above 0.75"
    assert recall.plateau_exit(curve, 8) == 300, "0.5625 is not above the threshold; 0.57 is"
    assert recall.plateau_exit(curve[:3], 8) is None, "never above: None"


def test_saved_runs_are_reused_only_under_the_same_settings(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "recall_plot", lambda res, path, dashed: None)  # the figure is another test's
    cfg = recall.RecallConfig(out_dir=str(tmp_path), **{**TINY, "models": ("linear",), "seeds": 1})
    first = recall.main(cfg)
    saved = tmp_path / "runs" / "linear_s0.json"
    assert json.loads(saved.read_text())["config"] == json.loads(json.dumps(recall.run_key(cfg, "linear")))
    monkeypatch.setattr(recall, "run", lambda job: pytest.fail("a saved run was trained again"))
    again = recall.main(cfg)
    assert again["variants"]["linear"]["acc"] == first["variants"]["linear"]["acc"]
    before = saved.read_bytes()
    with pytest.raises(grid.GridError, match=r"linear_s0.json.*--steps"):
        recall.main(dataclasses.replace(cfg, steps=4))  # refused before training: nothing replaced
    assert saved.read_bytes() == before


def test_tiny_run_writes_recall_json_in_the_issue_shape(tmp_path):
    res = recall.main(recall.RecallConfig(out_dir=str(tmp_path), **TINY))
    on_disk = json.load(open(tmp_path / "recall.json"))
    assert on_disk == json.loads(json.dumps(res))
    assert {"settings", "chance", "variants"} <= set(on_disk)
    assert on_disk["chance"] == 1 / 8 and on_disk["settings"]["steps"] == 3
    for name, v in on_disk["variants"].items():
        assert len(v["curves"]) == 2 and [s for s, _ in v["curves"][0]] == [0, 2, 3], "eval every 2 steps and at the end"
        assert set(v["exit_step"]) == {"2", "4"} and len(v["exit_step"]["2"]) == 2
    assert list(on_disk["variants"]) == list(recall.DEFAULT)
    for name, v in on_disk["variants"].items():
        assert {"acc", "acc_std", "params", "state_floats"} <= set(v), name
        assert set(v["acc"]) == set(v["acc_std"]) == set(v["binding"]) == {"2", "4"}
        assert v["binding"]["4"] == pytest.approx((v["acc"]["4"] - 1 / 4) / (1 - 1 / 4))
        assert all(0 <= a <= 1 for a in v["acc"].values()) and len(v["acc_per_seed"]["2"]) == 2
        assert isinstance(v["params"], int) and v["params"] > 0
    S, C = 3, 16
    assert on_disk["variants"]["linear"]["state_floats"] == S * C
    assert on_disk["variants"]["softmax_history"]["state_floats"] == S * C + 2 * 16 * S * C
    assert on_disk["variants"]["gpt"]["state_floats"] == 2 * 16 * C
    assert (tmp_path / "recall.md").stat().st_size > 0 and (tmp_path / "recall.png").stat().st_size > 0


@pytest.mark.parametrize("argv, flag", [(["--pairs", "8", "--block_size", "20"], "--block_size"),
                                        (["--pairs", "4", "--gap", "10", "--block_size", "20"], "--block_size"),
                                        (["--gap", "-1"], "--gap"),
                                        (["--models", "nope"], "--models"),
                                        (["--steps", "0"], "--steps"),
                                        (["--curriculum", "1501"], "--curriculum"),
                                        (["--query_span", "-1"], "--query_span"),
                                        (["--steps", "10", "--warmup", "5", "--decay", "6"], "--decay"),
                                        (["--models", "hybrid_ema_kv", "--n_layer", "2"], "--n_layer")])
def test_bad_settings_fail_with_one_line_and_write_nothing(tmp_path, capsys, argv, flag):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        cli.parse(recall.RecallConfig, recall.get_parser(), ["--out_dir", str(out)] + argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_tiny_history_reader_recalls_above_the_one_over_n_plateau(one_thread):
    """A 2-block softmax_history SPEN (no positions to learn: the fast trace already holds each
    value beside its key) must beat 1/N = 0.5 clearly at N = 2; a model that knows only which
    values occur, not which key each belongs to, cannot (chance is 1/8)."""
    cfg = recall.RecallConfig(**{**TINY, "pairs": (2,), "block_size": 8, "test_seqs": 64, "val_seqs": 64, "n_layer": 2,
                                 "n_embd": 32, "steps": 200, "warmup": 10, "batch_size": 32, "seeds": 1,
                                 "lr": 1e-2, "eval_every": 50})
    r = recall.run((cfg, "softmax_history", 0))
    assert r["test"]["acc"]["2"] > 0.8, r["test"]["acc"]
    assert r["exit_step"]["2"] is not None and r["exit_step"]["2"] <= 200


@pytest.mark.slow
def test_two_workers_give_the_numbers_of_one(tmp_path):
    """The default path trains runs in spawned worker processes; each run is a pure function of
    its (variant, seed, lr), so the parallel results equal the in-process ones."""
    cfg = dict(TINY, models=("linear", "softmax_history"), seeds=1)
    one = recall.main(recall.RecallConfig(out_dir=str(tmp_path / "one"), **cfg))
    two = recall.main(recall.RecallConfig(out_dir=str(tmp_path / "two"), **{**cfg, "workers": 2}))
    for v in cfg["models"]:
        assert one["variants"][v]["acc"] == two["variants"][v]["acc"]


def test_quick_mode_is_a_preset_under_the_typed_flags_and_the_full_run_stays_the_default():
    assert recall.parse([]) == recall.RecallConfig()  # the full command is unchanged
    quick = recall.parse(["--quick"])
    assert all(getattr(quick, k) == v for k, v in recall.QUICK.items()) and quick.quick
    assert recall.parse(["--quick", "--steps", "900"]).steps == 900  # a typed flag wins over the preset
    assert recall.run_key(quick, "gpt") == recall.run_key(dataclasses.replace(quick, quick=False), "gpt")  # settings only
    assert set(recall.QUICK["models"]) == {"gpt", "softmax_history", "linear", "softmax_state"}


@pytest.mark.parametrize("argv, flag", [(["--quick", "--steps", "0"], "--steps"),
                                        (["--quick", "--models", "gpt", "lstm"], "--models")])
def test_quick_mode_bad_input_is_one_line(capsys, argv, flag):
    with pytest.raises(SystemExit) as e:
        recall.parse(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag in err and len(err.strip().splitlines()) == 1


def _res(accs):
    return {"settings": {"pairs": [2, 8]}, "variants": {
        v: {"acc": {"2": a2, "8": a8}, "binding": {"2": recall.binding(a2, 2), "8": recall.binding(a8, 8)}}
        for v, (a2, a8) in accs.items()}}


def test_the_quick_verdict_reads_recall_and_binding_at_the_largest_n():
    ok = {"gpt": (1, 1), "softmax_history": (1, 0.95), "linear": (0.5, 0.121), "softmax_state": (0.95, 0.203)}
    line, holds = recall.verdict(_res(ok))
    assert holds and "N = 8" in line and "softmax_state +0.089" in line  # N = 2's 0.9 binding is not read
    assert recall.verdict(_res(dict(ok, softmax_state=(1, 0.3))))[1] is False  # a state reader that binds
    assert recall.verdict(_res(dict(ok, gpt=(1, 0.8))))[1] is False  # GPT on the plateau
    assert recall.verdict(_res({"gpt": (1, 1), "linear_attn_history": (1, 0.75)}))[1] is None  # no state reader
    assert not recall.verdict(_res(ok), N=2)[1]


def test_quick_mode_says_what_it_trades_and_prints_its_verdict(tmp_path, capsys):
    cfg = cli.build(recall.RecallConfig, {"quick": recall.QUICK}, "quick", out_dir=str(tmp_path),
                    **{k: v for k, v in TINY.items() if k not in ("seeds",)} | dict(models=("gpt", "linear")))
    recall.main(cfg)
    out = capsys.readouterr().out
    assert out.startswith(recall.QUICK_TRADES) and "verdict at N = 4: accuracy gpt" in out


@pytest.mark.parametrize("folder", ["", "far", "two_seeds"])
def test_committed_reports_render_the_same_numbers_under_the_registry_names(folder, tmp_path):
    """A recall.json written before selective_linear became the registry's `selective` (and before the
    binding column) reads back under the new names, and its tables re-render row for row."""
    src = os.path.join(ROOT, "results", "recall", folder, "recall.json")
    res = recall.read_report(src)
    assert "selective_linear" not in res["variants"] and set(res["variants"]) <= set(recall.names())
    tables.recall_md(res, str(tmp_path / "recall.md"), recall.VAL_SEED, recall.TEST_SEED)
    old = open(src[:-len("json")] + "md").read().split(tables.RECALL_NOTES)[0].replace("selective_linear", "selective")
    rows = [ln for ln in old.splitlines() if ln.startswith("| ")]
    assert rows and not [ln for ln in rows if ln not in (tmp_path / "recall.md").read_text()]


def test_state_kinds_come_from_the_models():
    kinds = {v: recall.state_kind(v) for v in recall.DEFAULT}
    assert kinds["gpt"] == kinds["softmax_history"] == "grows" and kinds["linear_attn_history"] == "bounded"
    assert {v for v, k in kinds.items() if k == "traces"} == {"linear", "softmax_state", "selective",
                                                               "selective_softmax_state"}
    assert recall.RecallConfig(models=("selective_linear",)).models == ("selective",)  # the old name still reads
    # a window's cache is bounded once T passes it; one growing block makes a hybrid grow (the map's column)
    assert recall.state_kind("softmax_window") == recall.state_kind("gated_delta") == "bounded"
    assert recall.state_kind("hybrid_ema_kv") == recall.state_kind("hybrid_gated_delta_1") == "grows"

"""dev/halflife.py: a gated head's half-life read from its parameters (init) and from its gates on
text (trained) agree when the gate ignores its input; a model without a gate has no heads to read;
a seed folder's name reads back as dev.seeds wrote it; a folder of no seeds is one line; an arm's median is
its heads' median."""
import math

import numpy as np
import pytest
import torch

import spen
from dev import halflife, seeds
from plumbing import cli


def tiny(predictor="gated_delta_ret"):
    torch.manual_seed(0)
    return spen.SPEN(spen.SPENConfig(vocab_size=256, block_size=64, n_layer=2, n_embd=32, n_head=4, conv=4,
                                     predictor=predictor)).eval()


def test_the_gates_on_text_are_the_init_rate_when_the_gate_ignores_its_input(monkeypatch):
    model = tiny()
    for p in halflife.heads(model):
        torch.nn.init.zeros_(p.decay.weight)  # W_a = 0: g_t = -A softplus(dt_bias) at every token
    monkeypatch.setattr(halflife, "WINDOWS", 2)
    tokens = np.random.default_rng(0).integers(0, 256, 200).astype(np.uint16)
    init, trained = halflife.init_lives(model), halflife.trained_lives(model, tokens, 64)
    assert len(init) == len(trained) == 8 and init == pytest.approx(trained, rel=1e-5)
    A, dt = halflife.heads(model)[0].A_log.exp()[0], torch.nn.functional.softplus(halflife.heads(model)[0].dt_bias[0])
    assert init[0] == pytest.approx(math.log(2) / (A * dt).item())


def test_only_gated_readers_have_half_lives():
    assert halflife.heads(tiny("delta")) == [] and len(halflife.heads(tiny("gated_delta"))) == 2
    import gpt
    assert halflife.heads(gpt.GPT(gpt.GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_embd=16, n_head=2))) == []


def test_a_folder_without_seeds_is_one_line(tmp_path):
    with pytest.raises(cli.UserError) as e:
        halflife.main(["--seeds", str(tmp_path), "--out_dir", str(tmp_path / "out")])
    assert "\n" not in str(e.value) and "dev.seeds" in str(e.value)


def test_a_seed_folder_reads_back_as_its_arm():
    for arm, seed in [("delta", 0), ("gated_delta_ret", 12), ("delta@0.004", 2), ("gpt@0.001", 1)]:
        assert halflife.arm_seed(seeds.folder(arm, seed)) == (arm, seed)
    assert halflife.arm_seed("runs") is None


def test_an_arms_median_half_life_is_the_median_of_its_heads():
    """Of an even number of heads, the mean of the middle two (not the upper one); the share past FAR strictly."""
    s = halflife.summary([10.0, 500.0, 20.0, 30.0, halflife.FAR])
    assert s == dict(median=30.0, past_far=0.2, heads=5)
    assert halflife.summary([10.0, 20.0, 30.0, 1000.0])["median"] == 25.0


def test_a_curve_still_training_is_left_out_and_said(tmp_path, capsys):
    """Its checkpoint is a point on the way, not the readout: like the map, the half-lives read finished curves only."""
    (tmp_path / "gated_delta_s0" / "runs" / "gated_delta_c128_cool").mkdir(parents=True)
    (tmp_path / "gated_delta_s0" / "runs" / "gated_delta_c128_cool" / "ckpt_last.pt").write_bytes(b"")
    with pytest.raises(cli.UserError):
        halflife.main(["--seeds", str(tmp_path), "--out_dir", str(tmp_path / "out")])
    assert "gated_delta_s0: not finished: left out" in capsys.readouterr().err


@pytest.mark.parametrize("reader", ["GatedDeltaState", "GatedDeltaRetention"])
def test_the_init_rules_half_lives_are_the_stated_rule(reader):
    """rule_lives draws from the reader's own gate_init; its share of heads past FAR is the rule's (A ~ U(1, 16),
    dt log-uniform in dt_range), integrated here over A in closed form for dt, and no head leaves the rule's range."""
    import writes
    cls = getattr(writes, reader)
    got = halflife.rule_lives(cls)
    lo, hi = map(math.log, cls.dt_range)
    A = np.linspace(1, 16, 200_001)
    share = np.clip((np.log(math.log(2) / halflife.FAR / A) - lo) / (hi - lo), 0, 1).mean()  # P(ln 2 / (A dt) > FAR)
    assert len(got) == halflife.RULE_HEADS and halflife.summary(got)["past_far"] == pytest.approx(share, abs=0.005)
    assert math.log(2) / (16 * cls.dt_range[1]) * 0.999 < min(got) and max(got) < math.log(2) / cls.dt_range[0] * 1.001

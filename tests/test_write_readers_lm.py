"""The write readers (ema_kv, delta, the gated rules) as language models: the paper-size (130m) config
of each, built on the meta device, against hand formulas for parameters, recurrent state and
training FLOPs; a few training steps of each reader and each option (write_alphas, read_norm,
conv, one reader per block) under bf16 autocast at a tiny size; train.py's flags for them, their
one-line errors, the header line that reports the sizes; a hybrid trained, resumed and sampled."""
import math

import pytest
import torch

import lm
import spen
import train
from plumbing import cli, runtime
from spen import SPEN, SPENConfig

Vp, C, L, S, F, H = 50304, 768, 12, 3, 3072, 12  # the paper's size: 130m preset
D = C // H
WRITERS = ("ema_kv", "delta")


def hand_sizes_gated(conv=4, delta=True):
    """The gated delta rule's reader at paper size by hand: W_q, W_v, W_gate (C^2 each), W_k (S C^2),
    W_beta and W_a (H C each), A_log and dt_bias (H each), the output norm's gain D, a convolution
    of K taps on each of q, k, v (3 K C, 2 FLOPs per tap and token, as a matrix's weight). State:
    the S C traces, C D and the convolution's last K - 1 inputs of q, k, v. FLOPs beyond the
    weights: the delta rule's chunked form, 8 x 64 C + 6 C D; without the correction (no solve,
    gated_ema_kv) ema_kv's at one decay, 4 x 64 C + 4 C D."""
    reader = 3 * C * C + S * C * C + 2 * H * C + 2 * H + D + 3 * conv * C
    params = Vp * C + 2 * C + L * (4 * C + 2 * C * C + 2 * C * F + reader)
    vectors = L * (4 * C + 2 * H + D) + 2 * C  # norms, A_log, dt_bias, the gain
    state = S * C + C * D + (conv - 1) * 3 * C
    extra = 8 * 64 * C + 6 * C * D if delta else 4 * 64 * C + 4 * C * D
    return params, state, 6 * (params - vectors) + 3 * L * extra


@pytest.mark.parametrize("predictor", ["gated_delta", "gated_ema_kv"])
def test_paper_size_gated_rules_match_hand_formulas(predictor):
    with torch.device("meta"):
        model = SPEN(train.model_config(train.make_config("130m", predictor=predictor, conv=4)))
    assert (model.num_params(), model.state_floats(1024), model.flops_per_token(1024)) == \
        hand_sizes_gated(delta=predictor == "gated_delta")


def hand_sizes(predictor, write_alphas=None, read_norm=False, T=1024):
    """(parameters, state floats per sequence and layer, training FLOPs per token) by hand.
    Per layer the paper's block holds LN1 and LN2 (4C), W_mix (2C^2) and the FFN (2CF), plus its
    reader: ema_kv W_q (S_w C^2), W_k (S C^2), W_v (C^2); delta W_q, W_v (C^2 each), W_k (S C^2),
    W_beta (H C); read_norm's gain D. Then the tied table Vp C and the final LayerNorm 2C.
    State: the S C traces, and ema_kv's S_w (D x D) per head = S_w C D, delta's C D.
    FLOPs: 6 x the matmul weights (all but the norms' vectors) + 3 L x the chunked forward's extra
    per token, chunk 64 = reader_chunk_len(64): ema_kv 2 (S_w + 1) 64 C + 4 S_w C D, delta
    8 x 64 C + 6 C D."""
    Sw = len(write_alphas or (0.5, 0.1, 0.02)) if predictor == "ema_kv" else 1
    reader = (Sw + S + 1) * C * C if predictor == "ema_kv" else (S + 2) * C * C + H * C
    gain = D if read_norm else 0
    params = Vp * C + 2 * C + L * (4 * C + 2 * C * C + 2 * C * F + reader + gain)
    state = S * C + Sw * C * D
    extra = 2 * (Sw + 1) * 64 * C + 4 * Sw * C * D if predictor == "ema_kv" else 8 * 64 * C + 6 * C * D
    vectors = L * (4 * C + gain) + 2 * C
    return params, state, 6 * (params - vectors) + 3 * L * extra


@pytest.mark.parametrize("kw", [dict(predictor="ema_kv"), dict(predictor="delta"),
                                dict(predictor="ema_kv", write_alphas=(0.03, 0.004, 0.0005), read_norm=True),
                                dict(predictor="ema_kv", write_alphas=(0.01,)),
                                dict(predictor="delta", write_alphas=(0.001,), read_norm=True)])
def test_paper_size_write_readers_match_hand_formulas(kw):
    cfg = train.model_config(train.make_config("130m", **kw))  # the 130m preset's model, as train.py builds it
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.ffn_hidden, cfg.block_size) == (L, C, H, F, 1024)
    with torch.device("meta"):
        model = SPEN(cfg)
    assert (model.num_params(), model.state_floats(1024), model.flops_per_token(1024)) == hand_sizes(**kw)
    assert model.state_floats(1) == model.state_floats(1024)  # a fixed-size state


def tiny(**kw):
    return SPENConfig(vocab_size=64, block_size=32, n_layer=2, n_embd=32, ffn_hidden=64, ffn_topk=8, n_head=4, **kw)


@pytest.mark.parametrize("kw", [dict(predictor="ema_kv"), dict(predictor="delta"),
                                dict(predictor="ema_kv", write_alphas=(0.03, 0.001)),
                                dict(predictor="delta", write_alphas=(0.1,)),
                                dict(predictor="ema_kv", read_norm=True), dict(predictor="delta", read_norm=True),
                                dict(predictor="gated_delta", conv=4), dict(predictor="delta", conv=4),
                                dict(predictor=("ema_kv", "softmax_attn"), reads=("state", "history"))])
def test_write_readers_train_under_bf16_autocast(kw):
    """Eight AdamW steps on one batch under CPU bf16 autocast: every loss finite, the last below the first."""
    torch.manual_seed(0)
    model = SPEN(tiny(**kw)).train()
    opt = lm.configure_optimizers(model, 0.1, 1e-2, (0.9, 0.95), "cpu")
    idx = torch.randint(0, 64, (4, 33), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(8):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(idx[:, :-1], idx[:, 1:])[1]
        opt.zero_grad()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters()), kw
        opt.step()
        losses.append(loss.item())
    assert all(map(math.isfinite, losses)) and losses[-1] < losses[0], (kw, losses)


def test_train_flags_reach_the_model():
    """--n_head --write_alphas --read_norm parse, are model fields (a checkpoint keeps them) and
    build the model they name; the typed decays arrive as floats."""
    cfg = train.parse_args(["--preset", "cpu", "--predictor", "delta", "--write_alphas", "0.05", "--read_norm",
                            "--n_head", "4"])
    m = train.model_config(cfg)
    assert (m.predictor, m.write_alphas, m.read_norm, m.n_head) == ("delta", (0.05,), True, 4)
    assert {"n_head", "write_alphas", "read_norm"} <= set(train.MODEL_FIELDS)
    default = train.model_config(train.make_config("cpu", predictor="ema_kv"))
    assert (default.write_alphas, default.read_norm, default.n_head) == (None, False, 128 // 64)


@pytest.mark.parametrize("kw,match", [
    (dict(predictor="delta", write_alphas=(0.1, 0.01)), "takes at most 1 decay"),
    (dict(predictor="ema_kv", write_alphas=(0.1, 1.5)), "--write_alphas"),
    (dict(predictor="linear", read_norm=True), "read_norm"),
    (dict(predictor="delta", n_head=3), r"divisible by n_head \(3\)")])
def test_train_refuses_bad_write_settings_in_one_line(kw, match):
    with pytest.raises(cli.ConfigError, match=match) as e:
        train.make_config("cpu", **kw)
    assert "\n" not in str(e.value)  # the flag's bounds (cli) or the model's own check (model settings: ...)


def test_header_reports_state_and_flops():
    """The log header's parameter line: the recurrent state (traces beside) and training FLOPs/token."""
    cfg = train.make_config("cpu", predictor="ema_kv", write_alphas=(0.1, 0.01))
    place = runtime.Placement(0, 1, False, "cpu", "cpu", "fp32", None)
    with torch.device("meta"):
        model = train.build_model(cfg)
    line = next(x for x in runtime.header(cfg, place, model, None, "builtin") if x.startswith("params:"))
    assert f"recurrent state {128 * 3 + 2 * 128 * 64:,} floats per sequence and layer at T = 128 (traces 384)" in line
    assert f"train FLOPs/token {model.flops_per_token(128):.4g}" in line


def test_a_hybrid_trains_resumes_and_samples(tmp_path, capsys):
    """One reader per block through the whole path: train.py with the older two comma lists, --resume
    to a later step by the one-list spelling of the same model, and sample.py, which reports a state
    that grows (the one attention block's cache)."""
    import sample
    flags = dict(n_layer=2, n_embd=32, block_size=32, batch_size=2, eval_interval=2, eval_iters=1, log_interval=1,
                 device="cpu", out_dir=str(tmp_path))
    train.main(train.make_config("cpu_bytes", max_iters=2, predictor="ema_kv,softmax_attn", reads="state,history",
                                 **flags))
    train.main(train.make_config("cpu_bytes", max_iters=3, resume=True, predictor="ema_kv,softmax_attn(reads=history)",
                                 **flags))
    ckpt = torch.load(tmp_path / "ckpt_last.pt", map_location="cpu", weights_only=False)
    assert ckpt["step"] == 3 and spen.check(spen.SPENConfig(**ckpt["config"])) == [
        ("ema_kv", "state", {}), ("softmax_attn", "history", {})]
    model, _ = sample.load(str(tmp_path / "ckpt_last.pt"), torch.device("cpu"))
    assert [type(b.pred).__name__ for b in model.blocks] == ["EMAKVState", "SoftmaxAttnHistory"]
    sizes = sample.state_sizes(model, torch.tensor([65, 66, 67]))
    assert sizes[-1] - sizes[-2] == 2 * 3 * 32  # one block's cache: 2 S C per token
    assert "grows" in sample.describe_state(model, sizes)


@pytest.mark.parametrize("kw,match", [
    (dict(predictor="ema_kv,softmax_attn", reads="state,history"), "one spec for all"),  # 2 names, 4 blocks
    (dict(predictor="ema_kv,ema_kv,ema_kv,lstm", reads="state"), "predictor"),
    (dict(predictor="softmax_attn", reads="history", window=256), "window"),  # w = T: not a window
    (dict(predictor="softmax_attn", reads="history", window=-1), "window"),
    (dict(predictor="delta", window=32), "window"),  # no block reads the history
    (dict(predictor="delta", conv=-1), "conv"), (dict(predictor="linear", conv=4), "conv")])
def test_the_maps_options_are_refused_in_one_line_before_anything_trains(kw, match, tmp_path):
    """A per-block list of the wrong length, an unknown reader, a window of T or more (or below 0),
    a window or a convolution on a model without the reader it applies to: one line, no folder made.
    (0 means none for both window and conv: their defaults.)"""
    with pytest.raises(cli.ConfigError, match=match) as e:
        train.make_config("cpu_bytes", out_dir=str(tmp_path / "run"), **kw)
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()

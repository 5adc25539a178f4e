"""spen.py: paper-size parameter count, strict causality, step == forward for every predictor x
reads x context, the reference-loop trace method == the fast paths (values and gradients), one
initialisation, no host sync in a training forward, autocast dtypes, checked inputs where they
enter (step, generate), learning, contract. The readers themselves: tests/test_variants.py."""
from dataclasses import asdict

import pytest
import torch

import lm
from plumbing import runtime
import spen
from spen import READERS, SPEN, VARIANTS, SparseFFN, SPENConfig

V = 60  # tiny vocabulary; the table is padded to 64 rows, so ids 60..63 are padding


def tiny(**kw):
    cfg = dict(vocab_size=V, block_size=32, n_layer=2, n_embd=32, ffn_hidden=64, ffn_topk=8, n_head=4)
    cfg.update(kw)
    return SPENConfig(**cfg)


def make(seed=0, **kw):
    torch.manual_seed(seed)
    model = SPEN(tiny(**kw))
    if kw.get("context") == "selective":  # W_a starts at 0 (= fixed EMA); make the gate matter
        for block in model.blocks:
            torch.nn.init.normal_(block.ctx.gate.weight, std=0.5)
    return model.eval()


def tokens(B, T, seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_paper_model_config_and_param_counts():
    cfg = SPENConfig()
    assert (cfg.vocab_size, cfg.ffn_hidden, cfg.ffn_topk, cfg.n_head) == (50257, 3072, 184, 12)
    assert (cfg.predictor, cfg.reads, cfg.context) == ("linear", "state", "ema")
    with torch.device("meta"):
        model = SPEN(cfg)
        attn = {r: SPEN(SPENConfig(predictor="softmax_attn", reads=r)).num_params() for r in ("state", "history")}
    assert model.num_params() == 130_684_416  # the paper model: unchanged
    assert attn == {"state": 130_712_064, "history": 130_712_064}  # readers differ by E_s only
    assert model.wte.weight.shape == (50304, 768) and model.lm_head.weight is model.wte.weight
    assert model.num_params(non_embedding=True) == 130_684_416 - 50304 * 768


@pytest.mark.parametrize("predictor,reads,context", VARIANTS)
def test_strictly_causal(predictor, reads, context):
    model = make(predictor=predictor, reads=reads, context=context)
    idx = tokens(2, 20, 1)
    for j in (0, 7, 19):
        idx2 = idx.clone()
        idx2[:, j] = (idx2[:, j] + 1) % V
        with torch.no_grad():
            a, b = model(idx)[0], model(idx2)[0]
        assert a.shape == (2, 20, V)
        assert torch.allclose(a[:, :j], b[:, :j], atol=1e-6, rtol=0), f"token {j} leaked backwards"
        assert not torch.allclose(a[:, j], b[:, j], atol=1e-4), "changed token had no effect"


def state_numel(state):
    flat = lambda x: x if isinstance(x, list) else [x]  # a convolution's caches: a list of tensors
    return sum(t.numel() for s in state for x in [s["h"], *(s["pred"] or {}).values()] for t in flat(x))


# the reader options and a per-block model, through the same model-level tests as every reader
OPTIONS = [dict(predictor="delta", conv=4), dict(predictor="ema_kv", conv=2), dict(predictor="gated_delta", conv=4),
           dict(predictor="gated_delta"), dict(predictor="softmax_attn", reads="history", window=4),
           dict(predictor=("ema_kv", "softmax_attn"), reads=("state", "history")),
           dict(predictor=("gated_delta", "delta"), conv=3)]


@pytest.mark.parametrize("kw", OPTIONS)
def test_options_are_causal_step_like_forward_and_train_under_autocast(kw):
    """Strict causality, step() == forward token by token with the state state_floats counts,
    the reference loops == the fast paths (values and gradients), bf16 autocast: for the short
    convolution, the gated delta rule, the sliding window and per-block readers."""
    model = make(**kw)
    idx = tokens(2, 20, 1)
    for j in (0, 7, 19):
        idx2 = idx.clone()
        idx2[:, j] = (idx2[:, j] + 1) % V
        with torch.no_grad():
            a, b = model(idx)[0], model(idx2)[0]
        assert torch.allclose(a[:, :j], b[:, :j], atol=1e-6, rtol=0) and not torch.allclose(a[:, j], b[:, j], atol=1e-4)
    with torch.no_grad():
        ref, state, out = model(idx[:, :13])[0], model.init_state(2), []
        for token in idx[:, :13].unbind(1):
            logits, state = model.step(token, state)
            out.append(logits)
    assert torch.allclose(torch.stack(out, 1), ref, atol=1e-4, rtol=0)
    assert state_numel(state) == 2 * model.config.n_layer * model.state_floats(13)
    runs = {}
    for method in ("auto", "loop"):
        m = make(trace_method=method, **kw)
        logits, loss = m(idx[:, :-1], idx[:, 1:])
        runs[method] = logits, torch.autograd.grad(loss, list(m.parameters()))
    assert torch.allclose(runs["auto"][0], runs["loop"][0], atol=1e-5, rtol=0)
    assert all(torch.allclose(x, y, atol=1e-6, rtol=1e-4) for x, y in zip(runs["auto"][1], runs["loop"][1]))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model.train()(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_window_bounds_the_cache_and_forgets_what_left_it():
    """A window of w keeps the slots of the last w positions: the cache stops growing at w, and the
    slot of position j (its trace state h_{j-1}) is read at t = j .. j + w - 1 and never after."""
    w = 4
    model = make(predictor="softmax_attn", reads="history", window=w)
    assert model.state_floats(w) == model.state_floats(30) < make(predictor="softmax_attn", reads="history").state_floats(30)
    pred = model.blocks[0].pred
    u, h_prev = torch.randn(1, 12, 32), torch.randn(1, 12, 3, 32)
    h2 = h_prev.clone()
    h2[:, 3] += 1.0  # the slots of position 3 only
    with torch.no_grad():
        d = (pred(u, h_prev) - pred(u, h2)).abs().amax(-1)[0]  # (T,)
    assert (d[:3] == 0).all() and (d[3:3 + w] > 0).all() and (d[3 + w:] == 0).all()

"""variants.py: what the state and history readers can and cannot tell apart, each attention
reader against its textbook definition (SDPA, the quadratic linear attention), the chunked linear
attention against its reference (values and gradients), the selective context starting as the
fixed EMA; and the one initialisation table."""
import pytest
import torch

import ema
from spen import READERS, Block, EMAContext, SPENConfig, init_weights, shift_right
from variants import LinearAttnHistory, SelectiveContext, linear_attention_ref


def tiny(**kw):
    cfg = dict(vocab_size=60, block_size=32, n_layer=2, n_embd=32, ffn_hidden=64, ffn_topk=8, n_head=4)
    cfg.update(kw)
    return SPENConfig(**cfg)


def block_of(**kw):
    """A standalone Block, initialised as SPEN initialises its blocks (one explicit call)."""
    cfg = tiny(**kw)
    block = Block(cfg)
    init_weights(block, cfg)
    return block.eval()


@pytest.mark.parametrize("predictor,reads", list(READERS))
def test_predictor_reads_only_past_traces(predictor, reads):
    """x̂_t must not depend on u_t through the values: perturb u_t only inside the traces' input."""
    block = block_of(predictor=predictor, reads=reads).eval()
    u = torch.randn(1, 10, 32)
    assert block(u).shape == u.shape  # usable standalone: (B, T, C) -> (B, T, C)
    h_prev = shift_right(block.ctx(u))  # (1, 10, S, C)
    u2 = u.clone()
    u2[:, 5] += 1.0
    h_prev2 = shift_right(block.ctx(u2))
    assert torch.equal(h_prev[:, :6], h_prev2[:, :6])  # h_{t-1} at t <= 5 does not contain u_5
    x1, x2 = block.pred(u, h_prev), block.pred(u, h_prev2)  # same query, traces differ only from t = 6
    assert torch.allclose(x1[:, :6], x2[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(x1[:, 6], x2[:, 6], atol=1e-5)


def test_state_readers_cannot_tell_pasts_with_equal_state_apart():
    """With S = 3 traces, 4 inputs u_0..u_3 map linearly to h_3 through a 3 x 4 matrix, which has
    a null space: two different pasts with the same state h_3. A state reader gives the same x̂_4
    for both; a history reader sees h_0..h_2 too and tells them apart."""
    a = torch.tensor(SPENConfig().alphas, dtype=torch.float64)[:, None]  # (S, 1)
    M = a * (1 - a) ** (3 - torch.arange(4, dtype=torch.float64))  # (S, 4): h_3 = M u_{0..3}
    null = torch.linalg.svd(M).Vh[-1]  # (4,), M @ null = 0
    torch.manual_seed(0)
    u = torch.randn(1, 5, 32)
    u2 = u.clone()
    u2[0, :4] += 3 * null.float()[:, None] * torch.randn(32)
    for predictor, reads in READERS:
        block = block_of(predictor=predictor, reads=reads).eval()
        for p in block.pred.parameters():  # away from the near-uniform attention of the init
            torch.nn.init.normal_(p, std=0.3)
        h_prev, h_prev2 = shift_right(block.ctx(u)), shift_right(block.ctx(u2))
        assert torch.allclose(h_prev[:, 4], h_prev2[:, 4], atol=1e-5) and not torch.allclose(h_prev[:, 3], h_prev2[:, 3], atol=0.1)
        with torch.no_grad():
            x1, x2 = block.pred(u, h_prev)[0, 4], block.pred(u, h_prev2)[0, 4]  # x̂_4, same query u_4
        diff, scale = (x1 - x2).abs().max(), x1.abs().max()
        if reads == "state":
            assert diff < 1e-4 * scale, (predictor, reads, diff / scale)
        else:
            assert diff > 1e-2 * scale, (predictor, reads, diff / scale)


def test_history_reader_is_lossless():
    """The inputs come back exactly from what the softmax history reader caches: its value slots
    v = W_v (h_{j-1}^s + E_s), inverted through W_v, give h, and u_j = (h_j - (1 - a) h_{j-1}) / a."""
    torch.manual_seed(0)
    cfg_kw = dict(predictor="softmax_attn", reads="history")
    cfg = tiny(**cfg_kw)
    block = block_of(**cfg_kw).double()
    T, C, S = 8, 32, 3
    u = torch.randn(1, T, C, dtype=torch.float64)
    h_prev = shift_right(block.ctx(u))  # (1, T, S, C)
    state = block.pred.init_state(1, None)
    state = {k: v.double() for k, v in state.items()}
    for t in range(T):
        _, state = block.pred.step(u[:, t], h_prev[:, t], state)
    v = state["v"].transpose(1, 2).reshape(1, T * S, C)  # (1, T*S, C), slots j*S + s
    z = torch.linalg.solve(block.pred.v.weight, v[0].t()).t().view(T, S, C)  # W_v^-1 v
    h = z - block.pred.trace_emb  # (T, S, C): h_{j-1}^s, j = 0..T-1
    for s, a_s in enumerate(cfg.alphas):
        rec = (h[1:, s] - (1 - a_s) * h[:-1, s]) / a_s  # (T-1, C) = u_0..u_{T-2}
        assert torch.allclose(rec, u[0, :T - 1], atol=1e-8), s


@pytest.mark.parametrize("predictor", ["linear_attn", "softmax_attn"])
def test_state_attention_is_attention_over_s_slots(predictor):
    """Each position's x̂_t equals textbook attention with one query (q_t) and S keys/values
    (h_{t-1}^s + E_s): SDPA for softmax, `linear_attention_ref` at T = 1 for linear."""
    torch.manual_seed(3)
    pred = block_of(predictor=predictor).pred
    u, h_prev = torch.randn(2, 5, 32), torch.randn(2, 5, 3, 32)
    z = h_prev + pred.trace_emb  # (B, T, S, C)
    q = pred.q(u).view(10, 1, 4, 8).transpose(1, 2)  # (B*T, H, 1, D)
    k, v = (lin(z).view(10, 3, 4, 8).transpose(1, 2) for lin in (pred.k, pred.v))  # (B*T, H, S, D)
    attend = torch.nn.functional.scaled_dot_product_attention if predictor == "softmax_attn" else linear_attention_ref
    ref = attend(q, k, v).transpose(1, 2).reshape(2, 5, 32)
    assert torch.allclose(pred(u, h_prev), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("T,chunk", [(1, 4), (13, 4), (16, 4), (20, 64)])
def test_chunked_linear_attention_equals_reference(T, chunk):
    pred = LinearAttnHistory(tiny(predictor="linear_attn", reads="history"))
    pred.chunk = chunk
    g = torch.Generator().manual_seed(T)
    q = torch.randn(2, 4, T, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 4, T * 3, 8, generator=g, requires_grad=True)
    v = torch.randn(2, 4, T * 3, 8, generator=g, requires_grad=True)
    fast, ref = pred.attend(q, k, v), linear_attention_ref(q, k, v)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    w = torch.randn(fast.shape, generator=g)
    for a, b in zip(torch.autograd.grad((fast * w).sum(), (q, k, v)), torch.autograd.grad((ref * w).sum(), (q, k, v))):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("trace_method", ["scan", "matmul", "loop"])
def test_selective_context_starts_as_the_fixed_ema(trace_method):
    """W_a = 0 and b_s = logit(a_s) at init: a_t^s = a_s, the paper's EMA, forward and step."""
    selective = block_of(context="selective", trace_method=trace_method).ctx
    fixed = EMAContext(tiny(trace_method=trace_method))
    assert isinstance(selective, SelectiveContext)
    u = torch.randn(2, 30, 32)
    assert torch.allclose(selective(u), fixed(u), atol=1e-6)
    h = torch.randn(2, 3, 32)
    assert torch.allclose(selective.step(u[:, 0], h), ema.step(u[:, 0], h, fixed.alphas), atol=1e-6)
    torch.nn.init.normal_(selective.gate.weight, std=0.5)  # an input-dependent decay: no longer the EMA
    assert not torch.allclose(selective(u), fixed(u), atol=1e-3)


def test_init_weights_refuses_a_parameter_it_has_no_rule_for():
    block = Block(tiny())
    block.extra = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="no rule for parameter 'extra'"):
        init_weights(block, tiny())

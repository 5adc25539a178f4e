"""writes.py: each write rule's chunked form against its loop (values and gradients, chunk
lengths that do and do not divide T), the gated delta rule as the delta rule when its gate is
constant and, without its correction, as ema_kv; a closed gate (alpha -> 0) without overflow; and ShortConv's fast path against
its loop. The readers built on them: tests/test_variants.py; the model: tests/test_spen.py."""
import math

import pytest
import torch

import writes
from writes import ShortConv


def gated_inputs(B=2, H=3, T=17, D=8, seed=0, low=-1.0):
    """Unit q, k; v; beta in (0, 1); log decays g in (low, 0), float64 and requiring grad."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    beta = torch.rand(B, H, T, generator=g, dtype=torch.float64)
    logd = low * torch.rand(B, H, T, generator=g, dtype=torch.float64)
    xs = [writes.l2norm(q), writes.l2norm(k), v, beta, logd]
    return [x.detach().requires_grad_() for x in xs]


@pytest.mark.parametrize("delta", [True, False])
@pytest.mark.parametrize("T,chunk", [(1, 4), (7, 4), (16, 4), (17, 5), (17, 64)])
def test_gated_delta_chunked_equals_its_loop_values_and_gradients(T, chunk, delta):
    xs = gated_inputs(T=T)
    ref = writes.gated_delta_ref(*xs, delta=delta)
    fast = writes.gated_delta_chunked(*xs, chunk=chunk, delta=delta)
    assert fast.shape == ref.shape == (2, 3, T, 8)
    assert torch.allclose(fast, ref, atol=1e-12, rtol=0)
    w = torch.randn_like(ref)
    g_ref = torch.autograd.grad((ref * w).sum(), xs, allow_unused=True)  # T = 1: no key is ever read
    g_fast = torch.autograd.grad((fast * w).sum(), xs, allow_unused=True)
    for x, a, b in zip(xs, g_ref, g_fast):
        a, b = (torch.zeros_like(x) if y is None else y for y in (a, b))
        assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_gated_delta_with_a_constant_gate_is_the_delta_rule():
    q, k, v, beta, _ = gated_inputs()
    for a in (0.0, 0.3):
        g = torch.full_like(beta, math.log(1 - a))
        assert torch.allclose(writes.gated_delta_ref(q, k, v, beta, g), writes.delta_rule_ref(q, k, v, beta, a),
                              atol=1e-12, rtol=0)


def test_the_gated_rule_without_its_correction_is_ema_kv_at_a_constant_gate():
    """gated_ema_kv's rule: alpha_t = 1 - a and beta_t = a make it ema_kv with the one decay a; and
    the correction matters: with it the reads differ."""
    q, k, v, beta, _ = (x.detach() for x in gated_inputs())
    a = 0.3
    g, b = torch.full_like(beta, math.log(1 - a)), torch.full_like(beta, a)
    plain = writes.gated_delta_ref(q, k, v, b, g, delta=False)
    assert torch.allclose(plain, writes.ema_kv_ref(q[:, :, None], k, v, (a,)), atol=1e-12, rtol=0)
    assert not torch.allclose(plain, writes.gated_delta_ref(q, k, v, b, g), atol=1e-3)


def test_gated_delta_chunked_survives_a_closed_gate_in_float32():
    """log alpha down to -60 per token (alpha ~ 1e-26): a chunk's cumulative decay underflows float32
    (exp(-60 * 64)); a form that divides by it would give inf or nan. Only differences of log
    decays are exponentiated, so the chunked form stays finite and equals the loop."""
    xs = [x.detach().float() for x in gated_inputs(T=64, low=-60.0)]
    fast, ref = writes.gated_delta_chunked(*xs, chunk=64), writes.gated_delta_ref(*xs)
    assert torch.isfinite(fast).all() and torch.allclose(fast, ref, atol=1e-5, rtol=0)


def test_gated_delta_reads_before_it_writes():
    """y_t = M_{t-1} q_t: the first read is of the empty state, and changing v_t first shows at t + 1."""
    q, k, v, beta, g = (x.detach() for x in gated_inputs(T=6))
    y = writes.gated_delta_ref(q, k, v, beta, g)
    assert torch.equal(y[:, :, 0], torch.zeros_like(y[:, :, 0]))
    v2 = v.clone()
    v2[:, :, 3] += 1.0
    y2 = writes.gated_delta_ref(q, k, v2, beta, g)
    assert torch.equal(y[:, :, :4], y2[:, :, :4]) and not torch.allclose(y[:, :, 4], y2[:, :, 4])


@pytest.mark.parametrize("K", [1, 2, 4])
def test_short_conv_fast_path_equals_its_loop_and_step(K):
    torch.manual_seed(K)
    fast, loop = ShortConv(6, K), ShortConv(6, K, loop=True)
    torch.nn.init.normal_(fast.weight)
    loop.load_state_dict(fast.state_dict())
    x = torch.randn(2, 9, 6, dtype=torch.float64, requires_grad=True)
    fast.double(), loop.double()
    a, b = fast(x), loop(x)
    assert torch.allclose(a, b, atol=1e-12, rtol=0)
    ga, gb = (torch.autograd.grad(y.sum(), [x, m.weight]) for y, m in ((a, fast), (b, loop)))
    assert all(torch.allclose(u, w, atol=1e-12, rtol=0) for u, w in zip(ga, gb))
    cache, out = torch.zeros(2, K - 1, 6, dtype=torch.float64), []
    for t in range(9):
        y, cache = fast.step(x[:, t].detach(), cache)
        out.append(y)
    assert torch.allclose(torch.stack(out, 1), a.detach(), atol=1e-12, rtol=0)
    x2 = x.detach().clone()
    x2[:, 4] += 1.0  # causal: output t sees x_{t-K+1..t} only
    d = (fast(x2) - a).abs().amax((0, 2))
    assert (d[:4] == 0).all() and (d[4:4 + K] > 0).all() and (d[4 + K:] == 0).all()


def product_inputs(B=2, H=2, T=19, D=6, n=2, seed=1):
    """Unit q and k (k: n_h a token), v, beta in (0, 1): DeltaProduct's inputs, float64, requiring grad."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, H, T, n, D, generator=g, dtype=torch.float64) for _ in range(2))
    beta = torch.rand(B, H, T, n, generator=g, dtype=torch.float64)
    return [x.detach().requires_grad_() for x in (writes.l2norm(q), writes.l2norm(k), v, beta)]


def fla_delta_product(q, k, v, beta):
    """fla's naive_recurrent_gated_delta_product with no gate, restated in this file's layout:
    S <- S + beta_j k_j (v_j - S^T k_j)^T for each of a token's n_h writes, THEN o_t = S^T q_t
    (S key index first: fla reads after the writes)."""
    B, H, T, D = q.shape
    S, out = q.new_zeros(B, H, D, D), []
    for t in range(T):
        for j in range(k.shape[3]):
            kj, vj, bj = k[:, :, t, j], v[:, :, t, j], beta[:, :, t, j]
            S = S + (bj[..., None] * kj)[..., None] * (vj - (S * kj[..., None]).sum(-2))[..., None, :]
        out.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, 2)


def test_delta_product_is_fla_reference_shifted_by_its_read_before_write():
    """Our y_t reads the state before token t's writes: it is fla's output at t - 1 with q_t as
    that token's query. Values and gradients to float64 round-off."""
    q, k, v, beta = product_inputs()
    ours = writes.delta_product_ref(q, k, v, beta)[:, :, 1:]
    theirs = fla_delta_product(q[:, :, 1:], k[:, :, :-1], v[:, :, :-1], beta[:, :, :-1])
    assert (ours - theirs).abs().max() < 1e-12
    w = torch.randn_like(ours)
    g1 = torch.autograd.grad((ours * w).sum(), (q, k, v, beta))
    g2 = torch.autograd.grad((theirs * w).sum(), (q, k, v, beta))
    assert max((a - b).abs().max().item() for a, b in zip(g1, g2)) < 1e-12
    assert writes.delta_product_ref(q, k, v, beta)[:, :, 0].abs().max() == 0  # nothing to read before the first write


@pytest.mark.parametrize("T,chunk", [(1, 4), (7, 4), (19, 5), (19, 64)])
def test_delta_product_chunked_equals_its_loop_values_and_gradients(T, chunk):
    xs = product_inputs(T=T)
    ref, fast = writes.delta_product_ref(*xs), writes.delta_product_chunked(*xs, chunk=chunk)
    assert fast.shape == ref.shape == (2, 2, T, 6)
    assert (fast - ref).abs().max() < 1e-10
    w = torch.randn_like(ref)
    grads = [torch.autograd.grad((y * w).sum(), xs, allow_unused=True, materialize_grads=True) for y in (ref, fast)]
    for a, b in zip(*grads):
        assert (a - b).abs().max() < 1e-10


def test_delta_product_with_one_step_a_token_is_the_delta_rule():
    q, k, v, beta = product_inputs(n=1)
    assert (writes.delta_product_ref(q, k, v, beta) - writes.delta_rule_ref(q, k[:, :, :, 0], v[:, :, :, 0],
                                                                           beta[..., 0])).abs().max() < 1e-12


@pytest.mark.parametrize("T,chunk", [(7, 4), (17, 5)])
def test_delta_rule_with_keys_wider_than_values_chunked_equals_its_loop(T, chunk):
    """key_dim != value_dim: a state of Dv x Dk matrices, the same rule in both forms, values and gradients."""
    g = torch.Generator().manual_seed(2)
    q, k = (writes.l2norm(torch.randn(2, 2, T, 9, generator=g, dtype=torch.float64)) for _ in range(2))
    v, beta = torch.randn(2, 2, T, 4, generator=g, dtype=torch.float64), torch.rand(2, 2, T, generator=g, dtype=torch.float64)
    xs = [x.requires_grad_() for x in (q, k, v, beta)]
    ref, fast = writes.delta_rule_ref(*xs, a=0.1), writes.delta_rule_chunked(*xs, a=0.1, chunk=chunk)
    assert fast.shape == ref.shape == (2, 2, T, 4) and (fast - ref).abs().max() < 1e-10
    w = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad((ref * w).sum(), xs), torch.autograd.grad((fast * w).sum(), xs)):
        assert (a - b).abs().max() < 1e-10


def test_a_head_with_keys_as_wide_as_the_sequence_recalls_every_pair_exactly():
    """The capacity H2 tests: with Dk >= T orthonormal keys and beta = 1, the delta rule stores T
    pairs exactly; with Dk < T keys it cannot (Schlag et al. 2021)."""
    T = 8
    for Dk, exact in ((8, True), (4, False)):
        keys = torch.linalg.qr(torch.randn(max(Dk, T), max(Dk, T), dtype=torch.float64))[0][:T, :Dk]
        k = writes.l2norm(keys)[None, None]  # (1, 1, T, Dk)
        v = torch.randn(1, 1, T, 3, dtype=torch.float64)
        beta = torch.ones(1, 1, T, dtype=torch.float64)
        M = torch.zeros(1, 1, 3, Dk, dtype=torch.float64)
        for t in range(T):
            _, M = writes.delta_rule_step(k[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], M)
        recalled = (M @ k[0, 0].T[None, None]).transpose(-1, -2)  # (1, 1, T, 3)
        assert torch.allclose(recalled, v, atol=1e-9) == exact


def test_the_retention_init_starts_most_heads_past_128_tokens_and_fla_s_most_under_it():
    """H1's mechanism at init (ignoring W_a u): a head's half-life ln 2 / (A softplus(dt_bias))."""
    import spen
    lives = {}
    for name in ("gated_delta", "gated_delta_ret"):
        torch.manual_seed(0)
        m = spen.SPEN(spen.SPENConfig(vocab_size=64, block_size=16, n_layer=50, n_embd=32, n_head=4, conv=4,
                                      predictor=name))
        lives[name] = torch.cat([math.log(2) / (b.pred.A_log.exp() * torch.nn.functional.softplus(b.pred.dt_bias))
                                 for b in m.blocks]).detach()  # 200 heads
    assert (lives["gated_delta"] > 128).float().mean() < 0.15
    assert (lives["gated_delta_ret"] > 128).float().mean() > 0.6

"""ema.py: the fast path, the reference loop and the streaming step agree, values and gradients."""
import pytest
import torch

import ema

ALPHAS = (0.5, 0.1, 0.01)


@pytest.mark.parametrize("T", [1, 7, 16, 33, 4096])
def test_fast_equals_loop_float32(T):
    g = torch.Generator().manual_seed(T)
    x = torch.randn(2, T, 5, generator=g, requires_grad=True)
    h0 = torch.randn(2, 3, 5, generator=g, requires_grad=True)
    fast, ref = ema.traces(x, ALPHAS, h0), ema.traces_ref(x, ALPHAS, h0)
    assert fast.shape == (2, T, 3, 5)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    w = torch.randn(fast.shape, generator=g)
    gf = torch.autograd.grad((fast * w).sum(), (x, h0))
    gr = torch.autograd.grad((ref * w).sum(), (x, h0))
    assert torch.allclose(gf[0], gr[0], atol=1e-5, rtol=0)  # dL/dx
    # dL/dh0 sums T cotangents (|.| ~ 16 at T=4096): float32 rounding of the loop itself is
    # ~1e-5 there (checked against float64), so compare relative to its size.
    assert torch.allclose(gf[1], gr[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("T,chunk", [(33, 1), (33, 8), (5, 64), (100, 7), (256, None)])
def test_chunk_lengths_and_tails(T, chunk):
    # T = N * L + R: whole chunks, a tail of R < L steps, or only a tail (L > T)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, T, 4, generator=g, requires_grad=True)
    h0 = torch.randn(3, 3, 4, generator=g, requires_grad=True)
    fast, ref = ema.traces(x, ALPHAS, h0, chunk=chunk), ema.traces_ref(x, ALPHAS, h0)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    w = torch.randn(fast.shape, generator=g)
    for u, v in zip(torch.autograd.grad((fast * w).sum(), (x, h0)), torch.autograd.grad((ref * w).sum(), (x, h0))):
        assert torch.allclose(u, v, atol=1e-5, rtol=1e-5)


def test_nothing_saved_for_backward_and_expanded_grad():
    x = torch.randn(2, 40, 3, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = ema.traces(x, ALPHAS)
    assert saved == []  # the backward recomputes nothing and stores nothing
    (gx,) = torch.autograd.grad(y.sum(), x)  # y.sum() hands backward an expanded gradient
    (gr,) = torch.autograd.grad(ema.traces_ref(x, ALPHAS).sum(), x)
    assert torch.allclose(gx, gr, atol=1e-5)


def test_bf16_and_noncontiguous_inputs():
    x = torch.randn(4, 2, 50)
    y = ema.traces(x.transpose(1, 2), ALPHAS)  # (2, 50, 4) non-contiguous view
    assert torch.allclose(y, ema.traces_ref(x.transpose(1, 2), ALPHAS), atol=1e-6)
    yb = ema.traces(x.transpose(1, 2).bfloat16(), ALPHAS)
    assert yb.dtype == torch.float32  # computed and returned in float32
    assert torch.allclose(yb, ema.traces_ref(x.transpose(1, 2).bfloat16().float(), ALPHAS), atol=1e-6)


def test_float64_gradcheck():
    x = torch.randn(1, 19, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, h: ema.traces(x, (0.3, 0.9), h, chunk=4), (x, h0))


def test_step_streams_the_same_traces():
    x = torch.randn(3, 20, 4)
    h = torch.zeros(3, 3, 4)
    states = []
    for x_t in x.unbind(1):
        h = ema.step(x_t, h, ALPHAS)
        states.append(h)
    assert torch.allclose(torch.stack(states, 1), ema.traces(x, ALPHAS), atol=1e-6)


def test_definition_by_hand():
    x = torch.tensor([[[1.0], [0.0], [2.0]]])  # (1, 3, 1)
    h = ema.traces(x, (0.5,))[0, :, 0, 0]
    assert torch.allclose(h, torch.tensor([0.5, 0.25, 1.125]))


@pytest.mark.parametrize("bad", [(0.0,), (1.5,), (-0.1, 0.5), ()])
def test_bad_alphas(bad):
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        ema.traces(torch.zeros(1, 2, 3), bad)


def test_bad_rank_and_h0():
    with pytest.raises(ValueError, match=r"\(B, T, C\)"):
        ema.traces(torch.zeros(2, 3), ALPHAS)
    with pytest.raises(ValueError, match=r"h0 must have shape"):
        ema.traces(torch.zeros(1, 2, 3), ALPHAS, h0=torch.zeros(1, 2, 3))


@pytest.mark.parametrize("T", [1, 16, 45, 300])
def test_selective_fast_equals_loop(T):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, T, 4, generator=g, requires_grad=True)
    logits = torch.randn(2, T, 4, generator=g, requires_grad=True)
    h0 = torch.randn(2, 4, generator=g)
    # sigmoid(3 z) gives decays near 0 and near 1; two graphs so each can be differentiated
    fast = ema.selective_traces(x, torch.sigmoid(3 * logits), h0)
    ref = ema.selective_traces_ref(x, torch.sigmoid(3 * logits), h0)
    assert torch.allclose(fast, ref, atol=1e-5)
    gf = torch.autograd.grad(fast.square().sum(), (x, logits))
    gr = torch.autograd.grad(ref.square().sum(), (x, logits))
    for u, v in zip(gf, gr):
        assert torch.allclose(u, v, atol=1e-4)


def test_selective_with_constant_decay_is_an_ema():
    x = torch.randn(1, 30, 2)
    a = torch.full_like(x, 0.1)
    assert torch.allclose(ema.selective_traces(x, a), ema.traces(x, (0.1,))[:, :, 0], atol=1e-6)


def test_selective_extreme_decays():
    # a = 1 forgets everything, a = 0 keeps the state, a = 0.01 is the slowest decay we use
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 70, 3, generator=g, requires_grad=True)
    a = torch.tensor([1.0, 0.0, 0.01]).repeat(2, 70, 1)
    a[:, ::7] = torch.rand(2, 10, 3, generator=g)
    a.requires_grad_(True)
    h0 = torch.randn(2, 3, generator=g)
    fast, ref = ema.selective_traces(x, a, h0, chunk=8), ema.selective_traces_ref(x, a, h0)
    assert torch.allclose(fast, ref, atol=1e-5)
    for u, v in zip(torch.autograd.grad(fast.sum(), (x, a)), torch.autograd.grad(ref.sum(), (x, a))):
        assert torch.allclose(u, v, atol=1e-4)


def test_single_decay_gradients():
    # S = 1 takes the copy branch of the backward's sum over traces
    x = torch.randn(2, 50, 4, requires_grad=True)
    h0 = torch.randn(2, 1, 4, requires_grad=True)
    fast, ref = ema.traces(x, (0.3,), h0, chunk=8), ema.traces_ref(x, (0.3,), h0)
    assert torch.allclose(fast, ref, atol=1e-6)
    for u, v in zip(torch.autograd.grad(fast.pow(2).sum(), (x, h0)), torch.autograd.grad(ref.pow(2).sum(), (x, h0))):
        assert torch.allclose(u, v, atol=1e-5)

"""ema.py: every fast method (scan, matmul) agrees with the reference loop, values and gradients,
in float32 and under bf16 autocast; the streaming step agrees too; the matrix forms launch a
number of operators that does not grow with T."""
import pytest
import torch

import ema

ALPHAS = (0.5, 0.1, 0.01)
METHODS = ("scan", "matmul")


def grads(y, w, inputs):
    return torch.autograd.grad((y * w).sum(), inputs)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("T", [1, 7, 16, 33, 100, 4096])
def test_fast_equals_loop_float32(method, T):
    # T = 1 and 7 are shorter than one chunk; 33 and 100 are no multiple of the default L
    g = torch.Generator().manual_seed(T)
    x = torch.randn(2, T, 5, generator=g, requires_grad=True)
    h0 = torch.randn(2, 3, 5, generator=g, requires_grad=True)
    fast, ref = ema.traces(x, ALPHAS, h0, method=method), ema.traces_ref(x, ALPHAS, h0)
    assert fast.shape == (2, T, 3, 5) and fast.dtype == torch.float32
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    w = torch.randn(fast.shape, generator=g)
    gf, gr = grads(fast, w, (x, h0)), grads(ref, w, (x, h0))
    assert torch.allclose(gf[0], gr[0], atol=1e-5, rtol=0)  # dL/dx
    # dL/dh0 sums T cotangents (|.| ~ 16 at T=4096): float32 rounding of the loop itself is
    # ~1e-5 there (checked against float64), so compare relative to its size.
    assert torch.allclose(gf[1], gr[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("T,chunk", [(33, 1), (33, 8), (5, 64), (100, 7), (256, None), (64, 16)])
def test_chunk_lengths_and_tails(method, T, chunk):
    # T = N * L + R: whole chunks, a remainder of R < L steps, or only a remainder (L > T)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, T, 4, generator=g, requires_grad=True)
    h0 = torch.randn(3, 3, 4, generator=g, requires_grad=True)
    fast, ref = ema.traces(x, ALPHAS, h0, method=method, chunk=chunk), ema.traces_ref(x, ALPHAS, h0)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    w = torch.randn(fast.shape, generator=g)
    for u, v in zip(grads(fast, w, (x, h0)), grads(ref, w, (x, h0))):
        assert torch.allclose(u, v, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("T", [5, 70])
def test_bf16_autocast(method, T):
    # a linear layer under autocast hands the traces a bf16 input; they must still run in float32
    g = torch.Generator().manual_seed(3)
    lin = torch.nn.Linear(6, 6)
    x = torch.randn(2, T, 6, generator=g, requires_grad=True)
    h0 = torch.randn(2, 3, 6, generator=g, requires_grad=True)
    w = torch.randn(2, T, 3, 6, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        u = lin(x)
        assert u.dtype == torch.bfloat16
        fast = ema.traces(u, ALPHAS, h0, method=method, chunk=16)
        loss = (fast * w).sum()
    assert fast.dtype == torch.float32
    gu, gh = torch.autograd.grad(loss, (u, h0))
    ub = u.detach().float().requires_grad_(True)  # the same bf16 values, outside autocast
    ref = ema.traces_ref(ub, ALPHAS, h0)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    gu_ref, gh_ref = grads(ref, w, (ub, h0))
    assert gu.dtype == torch.bfloat16  # autograd casts dL/du back to u's dtype: bf16 rounding
    assert torch.allclose(gu.float(), gu_ref, atol=1e-2, rtol=1e-2)
    assert torch.allclose(gh, gh_ref, atol=1e-5, rtol=1e-5)


def test_nothing_saved_for_backward_and_expanded_grad():
    x = torch.randn(2, 40, 3, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = ema.traces(x, ALPHAS, method="scan")
    assert saved == []  # the scan's backward recomputes nothing and stores nothing
    for method in METHODS:
        (gx,) = torch.autograd.grad(ema.traces(x, ALPHAS, method=method).sum(), x)  # expanded grad
        (gr,) = torch.autograd.grad(ema.traces_ref(x, ALPHAS).sum(), x)
        assert torch.allclose(gx, gr, atol=1e-5)
    assert y.shape == (2, 40, 3, 3)


@pytest.mark.parametrize("method", METHODS)
def test_bf16_and_noncontiguous_inputs(method):
    x = torch.randn(4, 2, 50)
    y = ema.traces(x.transpose(1, 2), ALPHAS, method=method)  # (2, 50, 4) non-contiguous view
    assert torch.allclose(y, ema.traces_ref(x.transpose(1, 2), ALPHAS), atol=1e-6)
    yb = ema.traces(x.transpose(1, 2).bfloat16(), ALPHAS, method=method)
    assert yb.dtype == torch.float32  # computed and returned in float32
    assert torch.allclose(yb, ema.traces_ref(x.transpose(1, 2).bfloat16().float(), ALPHAS), atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_float64_gradcheck(method):
    x = torch.randn(1, 19, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, h: ema.traces(x, (0.3, 0.9), h, method=method, chunk=4), (x, h0))


def test_auto_picks_scan_on_cpu_and_bad_method():
    x = torch.randn(1, 9, 2)
    assert torch.equal(ema.traces(x, ALPHAS), ema.traces(x, ALPHAS, method="scan"))
    with pytest.raises(ValueError, match="method must be one of"):
        ema.traces(x, ALPHAS, method="fft")
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        ema.traces(x, ALPHAS, chunk=0)


def test_step_streams_the_same_traces():
    x = torch.randn(3, 20, 4)
    h = torch.zeros(3, 3, 4)
    states = []
    for x_t in x.unbind(1):
        h = ema.step(x_t, h, ALPHAS)
        states.append(h)
    for method in METHODS:
        assert torch.allclose(torch.stack(states, 1), ema.traces(x, ALPHAS, method=method), atol=1e-6)


def test_definition_by_hand():
    x = torch.tensor([[[1.0], [0.0], [2.0]]])  # (1, 3, 1)
    for method in METHODS:
        h = ema.traces(x, (0.5,), method=method, chunk=2)[0, :, 0, 0]
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


def test_single_decay_gradients():
    # S = 1 takes the copy branch of the scan backward's sum over traces
    x = torch.randn(2, 50, 4, requires_grad=True)
    h0 = torch.randn(2, 1, 4, requires_grad=True)
    for method in METHODS:
        fast, ref = ema.traces(x, (0.3,), h0, method=method, chunk=8), ema.traces_ref(x, (0.3,), h0)
        assert torch.allclose(fast, ref, atol=1e-6)
        gf = torch.autograd.grad(fast.pow(2).sum(), (x, h0))
        gr = torch.autograd.grad(ref.pow(2).sum(), (x, h0))
        for u, v in zip(gf, gr):
            assert torch.allclose(u, v, atol=1e-5)


# ---- selective traces ---------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("T", [1, 16, 45, 300])
def test_selective_fast_equals_loop(method, T):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, T, 4, generator=g, requires_grad=True)
    logits = torch.randn(2, T, 4, generator=g, requires_grad=True)
    h0 = torch.randn(2, 4, generator=g, requires_grad=True)
    # sigmoid(3 z) gives decays near 0 and near 1; two graphs so each can be differentiated
    fast = ema.selective_traces(x, torch.sigmoid(3 * logits), h0, method=method)
    ref = ema.selective_traces_ref(x, torch.sigmoid(3 * logits), h0)
    assert torch.allclose(fast, ref, atol=1e-5)
    gf = torch.autograd.grad(fast.square().sum(), (x, logits, h0))
    gr = torch.autograd.grad(ref.square().sum(), (x, logits, h0))
    for u, v in zip(gf, gr):
        assert torch.allclose(u, v, atol=1e-4)


@pytest.mark.parametrize("method", METHODS)
def test_selective_with_constant_decay_is_an_ema(method):
    x = torch.randn(1, 30, 2)
    a = torch.full_like(x, 0.1)
    assert torch.allclose(ema.selective_traces(x, a, method=method), ema.traces(x, (0.1,))[:, :, 0], atol=1e-6)


@pytest.mark.parametrize("method,chunk", [("scan", 8), ("matmul", 2), ("matmul", 4), ("matmul", None)])
def test_selective_extreme_decays(method, chunk):
    # a = 1 forgets everything, a = 0 keeps the state, a = 0.01 is the slowest decay we use
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 70, 3, generator=g, requires_grad=True)
    a = torch.tensor([1.0, 0.0, 0.01]).repeat(2, 70, 1)
    a[:, ::7] = torch.rand(2, 10, 3, generator=g)
    a.requires_grad_(True)
    h0 = torch.randn(2, 3, generator=g, requires_grad=True)
    fast = ema.selective_traces(x, a, h0, method=method, chunk=chunk)
    ref = ema.selective_traces_ref(x, a, h0)
    assert torch.isfinite(fast).all() and torch.allclose(fast, ref, atol=1e-5)
    gf = torch.autograd.grad(fast.sum(), (x, a, h0))
    gr = torch.autograd.grad(ref.sum(), (x, a, h0))
    for u, v in zip(gf, gr):
        assert torch.isfinite(u).all() and torch.allclose(u, v, atol=1e-4)


@pytest.mark.parametrize("method", METHODS)
def test_selective_bf16_autocast(method):
    g = torch.Generator().manual_seed(4)
    lin = torch.nn.Linear(5, 5)
    x = torch.randn(3, 40, 5, generator=g, requires_grad=True)
    z = torch.randn(3, 40, 5, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        u = lin(x)  # bf16
        h = ema.selective_traces(u, torch.sigmoid(u + z), method=method)
    assert u.dtype == torch.bfloat16 and h.dtype == torch.float32
    ub = u.detach().float()
    assert torch.allclose(h, ema.selective_traces_ref(ub, torch.sigmoid(ub + z)), atol=1e-5)
    (gx,) = torch.autograd.grad(h.square().sum(), x)
    assert torch.isfinite(gx).all()


@pytest.mark.parametrize("method", METHODS)
def test_selective_float64_gradcheck(method):
    x = torch.randn(2, 11, 2, dtype=torch.float64, requires_grad=True)
    a = torch.rand(2, 11, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    fn = lambda x, a, h: ema.selective_traces(x, a, h, method=method, chunk=3)
    assert torch.autograd.gradcheck(fn, (x, a, h0), fast_mode=True)


def test_selective_chunk_len_nests_three_levels():
    for T in (1, 9, 28, 1000, 1024, 4096, 100_000):
        L = ema.selective_chunk_len(T)
        assert L >= 2 and L ** 3 >= T and (L == 2 or (L - 1) ** 3 < T)


# ---- operators per call ---------------------------------------------------------------------


def count_ops(fn):
    """aten operators launched by fn() (forward and backward), counted by torch.profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))


def test_matmul_operator_count_does_not_grow_with_T():
    def fwd_bwd(fn, T):
        x = torch.randn(1, T, 8, requires_grad=True)
        fn(x).square().sum().backward()  # first call builds the cached constants
        return count_ops(lambda: fn(x).square().sum().backward())

    ema_mm = lambda x: ema.traces(x, ALPHAS, method="matmul")
    sel_mm = lambda x: ema.selective_traces(x, torch.sigmoid(x), method="matmul")
    ema_scan = lambda x: ema.traces(x, ALPHAS, method="scan")
    for fn in (ema_mm, sel_mm):  # a few ops of slack: torch picks kernels by size
        short, long = fwd_bwd(fn, 128), fwd_bwd(fn, 2048)
        assert abs(long - short) <= 0.1 * short, (short, long)
    assert fwd_bwd(ema_scan, 2048) > 2 * fwd_bwd(ema_scan, 128)  # the scan's L + N steps do grow


# ---- what a state of S fixed decays can hold (ema.trace_map, memory_capacity) ------------------


def test_the_state_is_the_vandermonde_map_of_the_past():
    alphas, T = ema.spread_decays(5), 40
    x = torch.randn(3, T, 1, dtype=torch.float64)
    V = ema.trace_map(alphas, T)  # (S, T)
    assert torch.allclose(ema.traces_ref(x, alphas)[:, -1, :, 0], x[:, :, 0] @ V.T, atol=1e-12)
    assert ema.spread_decays(3) == pytest.approx((0.5, 0.1, 0.02)) and ema.spread_decays(1) == (0.5,)


def test_two_pasts_in_the_null_space_leave_the_same_state():
    """Exact rank: V (S, T) has rank S < T, so x and x + n with V n = 0 are different pasts with
    one state; the traces cannot tell them apart however they are read."""
    alphas, T = (0.5, 0.1, 0.02), 12
    V = ema.trace_map(alphas, T)
    n = torch.linalg.svd(V).Vh[-1]  # (T,) a direction V sends to zero
    x = torch.randn(T, dtype=torch.float64)
    h1, h2 = (ema.traces_ref(p.view(1, T, 1), alphas)[0, -1, :, 0] for p in (x, x + 3 * n))
    assert (x + 3 * n - x).abs().max() > 0.1 and torch.allclose(h1, h2, atol=1e-12)


def test_memory_capacity_levels_off_and_bf16_holds_less():
    T, fp32, bf16 = 64, 2.0 ** -24, 2.0 ** -8
    cap = {S: ema.memory_capacity(ema.spread_decays(S), T, fp32) for S in (3, 6, 12, 24, 48)}
    assert cap[3] == pytest.approx(3, abs=0.01) and cap[6] == pytest.approx(6, abs=0.05)  # few decays: all kept
    assert all(cap[S] <= S + 1e-9 for S in cap) and cap[48] - cap[24] < 1.5 < cap[12] - cap[6]  # levels off
    assert ema.memory_capacity(ema.spread_decays(24), T, bf16) < 8 < cap[24]
    with pytest.raises(ValueError, match="eps must be > 0"):
        ema.memory_capacity((0.5,), T, 0.0)


def empirical_capacity(alphas, T, dtype, n=20000, seed=0):
    """Sum over lags of the held-out R^2 of a least-squares read-out of x_j from the state the
    recurrence computed in `dtype` (every step rounded), for i.i.d. N(0, 1) inputs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, T, dtype=torch.float64, generator=g)
    a, h = torch.tensor(alphas, dtype=dtype), torch.zeros(n, len(alphas), dtype=dtype)
    for t in range(T):
        h = (1 - a) * h + a * x[:, t:t + 1].to(dtype)
    H = torch.cat([h.double(), torch.ones(n, 1, dtype=torch.float64)], 1)
    fit, test = slice(0, n // 2), slice(n // 2, n)
    pred = H[test] @ torch.linalg.lstsq(H[fit], x[fit]).solution
    return float((1 - ((pred - x[test]) ** 2).mean(0) / x[test].var(0)).clamp(min=0).sum())


@pytest.mark.parametrize("S,dtype,eps", [(12, torch.bfloat16, 2.0 ** -8), (24, torch.float32, 2.0 ** -24)])
def test_memory_capacity_predicts_the_rounded_recurrence(S, dtype, eps):
    """The noise model (rounding at every step, carried by the recurrence) against a measurement:
    the capacity of a state computed in bf16 / fp32 is what memory_capacity says, within 0.3."""
    alphas = ema.spread_decays(S)
    assert empirical_capacity(alphas, 64, dtype) == pytest.approx(ema.memory_capacity(alphas, 64, eps), abs=0.3)

"""EMA traces: the only temporal context in SPCN and SPEN.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), the trace h_t = (1 - a) h_{t-1} + a x_t
with a fixed decay a, used at several timescales at once (SPEN: a = 0.5, 0.1, 0.02).

Shape glossary
    B batch, T time, C channels (width), S number of traces (len(alphas)),
    L chunk length of the fast scan, N = T // L whole chunks (a shorter tail runs as a loop).

Code name -> paper symbol
    x[:, t]        x_t, the input at time t
    h[:, t, s]     h_t^(s), the trace at decay a_s after reading x_t
    alphas[s]      a_s (fixed, not learned)
    h0[:, s]       the state before t = 0 (zeros in the paper)

Public functions
    traces_ref(x, alphas, h0)  the plain loop over time: the readable definition.
    traces(x, alphas, h0)      the fast exact path (chunked scan + reversed-time backward).
    step(x_t, h, alphas)       one time step, O(1) memory, for streaming generation.
    selective_traces(_ref)     the positive control (not in the paper): a_t computed from the
                               input, h_t = (1 - a_t) * h_{t-1} + a_t * x_t, per channel.
    configure_allocator()      raise glibc's trim threshold / disable mmap so large freed
                               tensors are reused instead of page-faulted in again.

How the fast path works (see `_ChunkedTraces`), a two-level scan that writes h once:
  1. cut time into N chunks of L steps; one small matmul gives each chunk's end state from a
     zero start, E (S, L) @ x_chunk (L, C), E[s, j] = a_s (1 - a_s)^(L - 1 - j);
  2. a loop over the N chunks carries the state across them: h_in(n + 1) = end(n) + (1 - a)^L h_in(n);
  3. a loop over the L positions runs the recurrence itself, for all B * N chunks and S decays at
     once: one `torch.lerp(h_{i-1}, x_i, a)` (= (1 - a) h_{i-1} + a x_i) per position, written
     straight into the output with `out=`.
So there are L + N Python steps instead of T, the output is written once, and no intermediate
larger than (B, N, S, C) exists. Every operation is the recurrence or a sum of non-negative
powers (1 - a)^k <= 1: nothing overflows, and the rounding is that of the loop. The gradient of
an EMA is an EMA run backwards in time, lambda_t = g_t + (1 - a) lambda_{t+1},
dL/dx_t = sum_s a_s lambda_t^(s), dL/dh0 = (1 - a) lambda_0: the backward is the same two-level
scan in reverse, and nothing is saved for it. Memory traffic: forward reads x twice and writes h
once; backward reads g twice and writes dx once (bench.py measures the gap to a plain copy).

Run `python -m pytest tests/test_ema.py` for the agreement tests; `python bench.py` for speed.
"""

import ctypes
import functools
import sys

import torch
import torch.nn.functional as F


def chunk_len(T):
    """L for a sequence of T steps: about 16 chunks, L in [16, 256]. Any L >= 1 is exact; this
    trades the L + N Python steps against the size of one (B, N, S, C) slice, which should stay
    cache-sized (bench.py measures it: B=8, C=768 on a 2-core CPU)."""
    return max(16, min(256, T // 16))


def _check(x, alphas, h0):
    """Validate inputs; return alphas as a tuple of floats. Raises ValueError with the fix."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a tensor of shape (B, T, C), got {shape}")
    try:
        alphas = tuple(float(a) for a in alphas)
    except TypeError:
        raise ValueError(f"alphas must be a sequence of floats in (0, 1], got {alphas!r}") from None
    if len(alphas) == 0 or not all(0.0 < a <= 1.0 for a in alphas):
        raise ValueError(f"alphas must be a non-empty sequence of floats in (0, 1], got {alphas}")
    B, _, C = x.shape
    if h0 is not None and tuple(h0.shape) != (B, len(alphas), C):
        raise ValueError(f"h0 must have shape (B, S, C) = {(B, len(alphas), C)}, got {tuple(h0.shape)}")
    return alphas


def traces_ref(x, alphas, h0=None):
    """Reference loop. x (B, T, C) -> h (B, T, S, C); h_t = (1 - a) h_{t-1} + a x_t.

    `unbind` (not x[:, t]) keeps the autograd backward linear in T.
    """
    alphas = _check(x, alphas, h0)
    B, T, C = x.shape
    a = torch.tensor(alphas, dtype=x.dtype, device=x.device).view(1, -1, 1)  # (1, S, 1)
    h = x.new_zeros(B, len(alphas), C) if h0 is None else h0  # (B, S, C)
    out = []
    for x_t in x.unbind(1):  # x_t (B, C)
        h = (1 - a) * h + a * x_t.unsqueeze(1)  # (B, S, C)
        out.append(h)
    return torch.stack(out, dim=1) if out else x.new_zeros(B, 0, len(alphas), C)  # (B, T, S, C)


def step(x_t, h, alphas):
    """One time step: x_t (B, C), h (B, S, C) -> next h (B, S, C). Constant memory per token."""
    alphas = tuple(float(a) for a in alphas)
    if x_t.dim() != 2 or h.dim() != 3 or h.shape != (x_t.shape[0], len(alphas), x_t.shape[1]):
        raise ValueError(f"step expects x_t (B, C) and h (B, S={len(alphas)}, C); got "
                         f"{tuple(x_t.shape)} and {tuple(h.shape)}")
    a = torch.tensor(alphas, dtype=h.dtype, device=h.device).view(1, -1, 1)
    return torch.lerp(h, x_t.unsqueeze(1).to(h.dtype), a)  # h + a (x - h) = (1 - a) h + a x


@functools.lru_cache(maxsize=64)
def _operators(alphas, L, dtype, device):
    """Constants of the chunked scan, built in float64 then cast. S = len(alphas).

    w (S, 1):          a_s, the lerp weight
    rL (S, 1):         (1 - a_s)^L, decay across one chunk
    E (S, L):          a_s (1 - a_s)^(L - 1 - j), weight of x_j in its chunk's end state
    V (S, L):          a_s (1 - a_s)^j, weight of g_j in a_s * (adjoint at its chunk's start)
    r_over_a (S, 1):   (1 - a_s) / a_s, turns the scaled adjoint a lambda_0 into dL/dh0
    """
    f64 = dict(dtype=torch.float64, device=device)
    a = torch.tensor(alphas, **f64)  # (S,)
    r = 1 - a
    j = torch.arange(L, **f64)[:, None]  # (L, 1)
    out = dict(w=a[:, None], rL=(r ** L)[:, None], E=(a * r ** (L - 1 - j)).t(),
               V=(a * r ** j).t(), r_over_a=(r / a)[:, None])
    return {k: v.to(dtype).contiguous() for k, v in out.items()}


def _sum_traces(h, out):
    """out = sum over the S axis (-2) of h (..., S, C). Plain adds: torch.sum(out=) on a
    strided slice first zero-fills it, which cost as much as the sum itself here."""
    if h.shape[-2] == 1:
        return out.copy_(h[..., 0, :])
    torch.add(h[..., 0, :], h[..., 1, :], out=out)
    for s in range(2, h.shape[-2]):
        out.add_(h[..., s, :])
    return out


class _ChunkedTraces(torch.autograd.Function):
    """Forward: two-level scan (chunk ends by matmul, carry over chunks, lerp over positions).
    Backward: the same scan run backwards in time. T = N * L + R: the R < L tail steps after the
    last whole chunk run as a plain loop on (B, S, C)."""

    @staticmethod
    def forward(ctx, x, h0, alphas, L):
        B, T, C = x.shape
        S, N = len(alphas), T // L
        op = _operators(alphas, L, x.dtype, x.device)
        y = x.new_empty(B, T, S, C)
        h = x.new_zeros(B, S, C) if h0 is None else h0  # (B, S, C) state entering the chunk
        if N:
            xc = x[:, :N * L].view(B, N, L, C)
            yc = y[:, :N * L].view(B, N, L, S, C)
            hin = torch.matmul(op["E"], xc)  # (B, N, S, C) chunk ends from a zero state ...
            for n in range(N):  # ... overwritten in place by the state entering chunk n
                end = hin[:, n].clone()  # (B, S, C)
                hin[:, n] = h
                h = torch.addcmul(end, op["rL"], h)  # end(n) + (1 - a)^L h_in(n)
            prev = hin  # (B, N, S, C)
            for i in range(L):  # position i of every chunk: (1 - a) h_{i-1} + a x_i
                torch.lerp(prev, xc[:, :, i, None], op["w"], out=yc[:, :, i])
                prev = yc[:, :, i]
        for t in range(N * L, T):  # tail
            torch.lerp(h, x[:, t, None], op["w"], out=y[:, t])
            h = y[:, t]
        ctx.alphas, ctx.L, ctx.has_h0 = alphas, L, h0 is not None
        return y  # (B, T, S, C)

    @staticmethod
    def backward(ctx, g):
        # In terms of mu = a lambda (scaled adjoint): mu_t = (1 - a) mu_{t+1} + a g_t, which is
        # again a lerp, and dL/dx_t = sum_s mu_t^(s).
        alphas, L = ctx.alphas, ctx.L
        B, T, S, C = g.shape
        g = g.contiguous()  # autograd may hand in an expanded gradient
        N = T // L
        op = _operators(alphas, L, g.dtype, g.device)
        dx = g.new_empty(B, T, C)
        mu = g.new_zeros(B, S, C)  # (B, S, C) scaled adjoint entering from the future
        for t in range(T - 1, N * L - 1, -1):  # tail, backwards
            mu = torch.lerp(mu, g[:, t], op["w"])
            _sum_traces(mu, out=dx[:, t])
        if N:
            gc = g[:, :N * L].view(B, N, L, S, C)
            dxc = dx[:, :N * L].view(B, N, L, C)
            # a * (adjoint at each chunk's start from a zero future), one matmul per decay
            muin = torch.stack([torch.matmul(op["V"][s], gc[:, :, :, s]) for s in range(S)], 2)  # (B, N, S, C)
            for n in range(N - 1, -1, -1):  # carry backwards; overwrite with the entering value
                start = muin[:, n].clone()
                muin[:, n] = mu
                mu = torch.addcmul(start, op["rL"], mu)  # mu at the start of chunk n
            prev, bufs = muin, (torch.empty_like(muin), torch.empty_like(muin))
            for i in range(L - 1, -1, -1):  # mu never reaches memory: two cache-sized buffers
                cur = bufs[i % 2]
                torch.lerp(prev, gc[:, :, i], op["w"], out=cur)  # (B, N, S, C)
                _sum_traces(cur, out=dxc[:, :, i])  # (B, N, C)
                prev = cur
        dh0 = op["r_over_a"] * mu if ctx.has_h0 else None  # (1 - a) lambda_0
        return dx, dh0, None, None


def traces(x, alphas, h0=None, chunk=None):
    """Fast exact traces. Same contract as `traces_ref`: x (B, T, C) -> (B, T, S, C).

    chunk: L (default `chunk_len(T)`). Half-precision inputs are computed in float32 and
    returned in float32: the slow trace (a = 0.02) sums ~50 terms, which bf16's 8-bit mantissa
    would round visibly.
    """
    alphas = _check(x, alphas, h0)
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if h0 is not None:
        h0 = h0.to(x.dtype)
    if x.shape[1] == 0:
        return x.new_zeros(x.shape[0], 0, len(alphas), x.shape[2])
    L = int(chunk) if chunk is not None else chunk_len(x.shape[1])
    if L < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk}")
    return _ChunkedTraces.apply(x.contiguous(), h0, alphas, L)


# ---------------------------------------------------------------------------------------------
# Selective (input-dependent) traces: the positive control of the ablation, not in the paper.


def _check_selective(x, a, h0):
    if x.dim() != 3 or a.shape != x.shape:
        raise ValueError(f"selective traces expect x and a of the same shape (B, T, C); got "
                         f"{tuple(x.shape)} and {tuple(a.shape)}")
    if h0 is not None and tuple(h0.shape) != (x.shape[0], x.shape[2]):
        raise ValueError(f"h0 must have shape (B, C) = {(x.shape[0], x.shape[2])}, got {tuple(h0.shape)}")


def selective_traces_ref(x, a, h0=None):
    """Reference loop: h_t = (1 - a_t) h_{t-1} + a_t x_t, with a_t (B, C) from a (B, T, C)."""
    _check_selective(x, a, h0)
    h = x.new_zeros(x.shape[0], x.shape[2]) if h0 is None else h0  # (B, C)
    out = []
    for x_t, a_t in zip(x.unbind(1), a.unbind(1)):
        h = (1 - a_t) * h + a_t * x_t
        out.append(h)
    return torch.stack(out, dim=1)  # (B, T, C)


def selective_traces(x, a, h0=None, chunk=None):
    """Chunked selective traces, exact up to float rounding. x, a (B, T, C) -> h (B, T, C).

    The same two-level scan as `traces`, differentiated by autograd. In chunk n, from a zero
    state, y_i = lerp(y_{i-1}, x_i, a_i) and P_i = prod_{k<=i} (1 - a_k), for all chunks at once
    (L steps); then the state entering each chunk, h_in(n + 1) = y_{L-1}(n) + P_{L-1}(n) h_in(n)
    (N steps); then h_i = y_i + P_i h_in. Only products and lerps of numbers in [0, 1]: no
    logarithm, no division, nothing overflows; P may underflow to 0, its exact limit. Memory is a
    few (B, T, C) tensors (the previous version built a (B, N, L, L, C) one).
    """
    _check_selective(x, a, h0)
    B, T, C = x.shape
    L = int(chunk) if chunk is not None else chunk_len(T)
    pad = (-T) % L  # pad with a = 0: the state passes through unchanged
    xc = F.pad(x, (0, 0, 0, pad)).view(B, -1, L, C)  # (B, N, L, C)
    ac = F.pad(a, (0, 0, 0, pad)).view(B, -1, L, C)
    N = xc.shape[1]
    y = x.new_zeros(B, N, C)  # (B, N, C) position i of every chunk, zero start
    p = x.new_ones(B, N, C)  # decay of the entering state to position i
    ys, ps = [], []
    for x_i, a_i in zip(xc.unbind(2), ac.unbind(2)):  # unbind, not xc[:, :, i]: see traces_ref
        y = torch.lerp(y, x_i, a_i)  # (1 - a_i) y + a_i x_i
        p = p * (1 - a_i)
        ys.append(y)
        ps.append(p)
    h = x.new_zeros(B, C) if h0 is None else h0  # (B, C)
    hin = []
    for end, decay in zip(y.unbind(1), p.unbind(1)):  # chunk ends, (B, C) each
        hin.append(h)
        h = end + decay * h
    y, p = torch.stack(ys, 2), torch.stack(ps, 2)  # (B, N, L, C)
    h = y + p * torch.stack(hin, 1)[:, :, None]  # (B, N, L, C)
    return h.view(B, N * L, C)[:, :T]  # (B, T, C)


# ---------------------------------------------------------------------------------------------


def configure_allocator():
    """Keep freed large tensors in the heap instead of returning them to the OS (glibc only).

    glibc serves allocations above M_MMAP_THRESHOLD (at most 32 MiB) with mmap and unmaps them
    on free, so each new large tensor pays page faults (~0.7 ms per MiB measured on a 2-core
    CPU). M_MMAP_MAX = 0 serves everything from the heap, and a huge M_TRIM_THRESHOLD keeps
    freed memory for reuse. Returns True when applied. Safe to call more than once.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl or another libc: nothing to tune
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    ok = libc.mallopt(M_MMAP_MAX, 0) == 1
    ok &= libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
    return bool(ok)

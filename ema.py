"""EMA traces: the only temporal context in SPCN and SPEN.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), the trace h_t = (1 - a) h_{t-1} + a x_t
with a fixed decay a, used at several timescales at once (SPEN: a = 0.5, 0.1, 0.02).

Shape glossary
    B batch, T time, C channels (width), S number of traces (len(alphas)),
    L chunk length of the fast scan, N = ceil(T / L) chunks.

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

How the fast path works (see `_ChunkedTraces`): inside a chunk of L steps the trace is a
lower-triangular matrix product y = W x with W[i, j] = a (1 - a)^(i - j); the S decay matrices
are stacked into one (L*S, L) operand so one matmul produces all traces. The state entering
each chunk is a second, N-step EMA with decay (1 - a)^L over the chunk ends, done as a
triangular (N, N) matmul, so there is no Python loop over time at all. All powers are <= 1,
so nothing overflows (they may underflow to 0, which is the exact limit). The gradient of an
EMA is an EMA run backwards in time, lambda_t = g_t + (1 - a) lambda_{t+1},
dL/dx_t = sum_s a_s lambda_t^(s), computed the same way; nothing is saved for backward.

Run `python -m pytest tests/test_ema.py` for the agreement tests; `python bench.py` for speed.
"""

import ctypes
import functools
import sys

import torch

CHUNK = 16  # L: measured fastest on a 2-core CPU for C=768 (see bench.py); any L >= 1 is exact


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
def _operators(alphas, L, N, dtype, device):
    """Constant matrices of the chunked scan, built in float64 then cast.

    Wf (L*S, L): Wf[i*S + s, j] = a_s (1 - a_s)^(i - j) for j <= i   (in-chunk forward)
    Pf (L, S):   (1 - a_s)^(i + 1)   decay of the incoming state to position i
    K  (S, N, N): K[s, n, m] = (1 - a_s)^(L (n - 1 - m)) for m < n  (carry between chunks)
    Q  (S, N):   (1 - a_s)^(L n)     decay of h0 to the start of chunk n
    Wb (L, L*S): Wb[i, j*S + s] = a_s (1 - a_s)^(j - i) for j >= i   (in-chunk backward, summed over s)
    Vb (L, S):   (1 - a_s)^j         decay of position j's cotangent to the chunk start
    Pb (L, S):   a_s (1 - a_s)^(L - i)  weight of the next chunk's adjoint at position i
    """
    f64 = dict(dtype=torch.float64, device=device)
    a = torch.tensor(alphas, **f64)  # (S,)
    r = 1 - a
    i = torch.arange(L, **f64)
    d = i[:, None] - i[None, :]  # (L, L) i - j
    low = (d >= 0)
    pw = torch.where(low[..., None], r ** d.clamp(min=0)[..., None], 0)  # (L, L, S) (1-a)^(i-j)
    Wf = (a * pw).permute(0, 2, 1).reshape(L * len(a), L)  # (L*S, L)
    Wb = (a * pw).permute(1, 0, 2).reshape(L, L * len(a)).contiguous()  # (L, L*S): [i, j*S+s] = a r^(j-i)
    n = torch.arange(N, **f64)
    e = n[:, None] - 1 - n[None, :]  # (N, N)
    K = torch.where(e >= 0, r[:, None, None] ** (L * e.clamp(min=0)), 0)  # (S, N, N)
    out = dict(Wf=Wf, Pf=r ** (i[:, None] + 1), K=K, Q=r[:, None] ** (L * n), Wb=Wb,
               Vb=r ** i[:, None], Pb=a * r ** (L - i[:, None]), r=r)
    return {k: v.to(dtype) for k, v in out.items()}


def _pad_chunks(x, L):
    """(B, T, ...) -> (B, N, L, ...) with zero padding at the end of time."""
    T = x.shape[1]
    pad = (-T) % L
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], pad, *x.shape[2:])], dim=1)
    return x.view(x.shape[0], -1, L, *x.shape[2:])


class _ChunkedTraces(torch.autograd.Function):
    """Forward: chunked matmul scan. Backward: the same scan run backwards in time."""

    @staticmethod
    def forward(ctx, x, h0, alphas, L):
        B, T, C = x.shape
        S = len(alphas)
        xc = _pad_chunks(x, L)  # (B, N, L, C)
        N = xc.shape[1]
        op = _operators(alphas, L, N, x.dtype, x.device)
        y = torch.matmul(op["Wf"], xc).view(B, N, L, S, C)  # in-chunk traces from a zero state
        # state entering chunk n: an EMA over chunk ends with decay (1 - a)^L
        ends = y[:, :, L - 1]  # (B, N, S, C)
        hin = torch.einsum("snm,bmsc->bnsc", op["K"], ends)  # (B, N, S, C)
        if h0 is not None:
            hin = hin + op["Q"].t()[None, :, :, None] * h0[:, None]  # (B, N, S, C)
        y = y + op["Pf"][None, None, :, :, None] * hin[:, :, None]  # (B, N, L, S, C)
        ctx.alphas, ctx.L, ctx.T, ctx.has_h0 = alphas, L, T, h0 is not None
        return y.view(B, N * L, S, C)[:, :T]

    @staticmethod
    def backward(ctx, g):
        alphas, L, T = ctx.alphas, ctx.L, ctx.T
        B, _, S, C = g.shape
        gc = _pad_chunks(g.contiguous(), L)  # (B, N, L, S, C)
        N = gc.shape[1]
        op = _operators(alphas, L, N, g.dtype, g.device)
        # in-chunk part: dx_i = sum_{j >= i, s} a_s (1 - a_s)^(j - i) g_j^s
        dx = torch.matmul(op["Wb"], gc.view(B, N, L * S, C))  # (B, N, L, C)
        # adjoint at each chunk start, lambda_start(n) = G_n + (1 - a)^L lambda_start(n + 1)
        G = torch.einsum("js,bnjsc->bnsc", op["Vb"], gc)  # (B, N, S, C)
        lam = torch.einsum("smn,bmsc->bnsc", op["K"], G)  # (B, N, S, C) adjoint entering chunk n + 1
        dx = dx + torch.einsum("is,bnsc->bnic", op["Pb"], lam)  # (B, N, L, C)
        dh0 = None
        if ctx.has_h0:  # dL/dh0 = (1 - a) lambda_0, lambda_0 = G_0 + (1 - a)^L lambda_start(1)
            lam0 = G[:, 0] + (op["r"] ** L)[None, :, None] * lam[:, 0]  # (B, S, C)
            dh0 = op["r"][None, :, None] * lam0
        return dx.reshape(B, N * L, C)[:, :T], dh0, None, None


def traces(x, alphas, h0=None, chunk=CHUNK):
    """Fast exact traces. Same contract as `traces_ref`: x (B, T, C) -> (B, T, S, C).

    Half-precision inputs are computed in float32 and returned in float32: the slow trace
    (a = 0.02) sums ~50 terms, which bf16's 8-bit mantissa would round visibly.
    """
    alphas = _check(x, alphas, h0)
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
        h0 = None if h0 is None else h0.float()
    if h0 is not None:
        h0 = h0.to(x.dtype)
    if x.shape[1] == 0:
        return x.new_zeros(x.shape[0], 0, len(alphas), x.shape[2])
    return _ChunkedTraces.apply(x, h0, alphas, int(chunk))


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


def selective_traces(x, a, h0=None, chunk=CHUNK):
    """Chunked selective traces, exact up to float rounding. x, a (B, T, C) -> h (B, T, C).

    In chunk n with c_i = sum_{k<=i} log(1 - a_k) (cumulative within the chunk):
        h_i = exp(c_i) h_in + sum_{j<=i} exp(c_i - c_j) a_j x_j,
    every exponent <= 0, so nothing overflows. log(1 - a) is clamped at -30 (a decay of 1e-13
    instead of 0) so that a = 1 gives no -inf - -inf. The carry between chunks is a Python loop
    over N = T / L chunks, not over time. Autograd differentiates it directly.
    """
    _check_selective(x, a, h0)
    B, T, C = x.shape
    L = int(chunk)
    xc, ac = _pad_chunks(x, L), _pad_chunks(a, L)  # (B, N, L, C)
    logr = torch.log1p(-ac).clamp(min=-30.0)  # (B, N, L, C)
    c = logr.cumsum(2)  # (B, N, L, C)
    diff = c[:, :, :, None] - c[:, :, None]  # (B, N, L_i, L_j, C) c_i - c_j
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()[None, None, :, :, None]
    w = torch.where(mask, diff, float("-inf")).exp()  # (B, N, L, L, C), zero above the diagonal
    y = (w * (ac * xc)[:, :, None]).sum(3)  # (B, N, L, C) in-chunk traces from a zero state
    dec = c.exp()  # (B, N, L, C) decay of the incoming state to position i
    h = x.new_zeros(B, C) if h0 is None else h0
    out = []
    for n in range(xc.shape[1]):
        yn = y[:, n] + dec[:, n] * h[:, None]  # (B, L, C)
        out.append(yn)
        h = yn[:, -1]
    return torch.cat(out, dim=1)[:, :T]  # (B, T, C)


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

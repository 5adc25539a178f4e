"""EMA traces: the only temporal context in SPCN and SPEN.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556). The definition, at several fixed decays
at once (SPEN: a = 0.5, 0.1, 0.02):
    h_t^(s) = (1 - a_s) h_{t-1}^(s) + a_s x_t,     h_{-1}^(s) = h0 (zeros in the paper)
and, as the positive control of the ablation (not in the paper), a decay computed from the
input per step and channel:
    h_t = (1 - a_t) h_{t-1} + a_t x_t
The reference loops come first in this file (`traces_ref`, `step`, `selective_traces_ref`):
they are the definition, one step per token. The fast paths below them compute the same numbers.

Shape glossary
    B batch, T time, C channels (width), S number of traces (len(alphas)),
    L chunk length, N = ceil(T / L) chunks, R rows of a selective trace (any batch).

Code name -> paper symbol
    x[:, t]        x_t, the input at time t
    h[:, t, s]     h_t^(s), the trace at decay a_s after reading x_t
    alphas[s]      a_s (fixed, not learned)
    h0[:, s]       the state before t = 0 (zeros in the paper)

Public functions
    traces_ref(x, alphas, h0)            the plain loop over time: the readable definition.
    trace_map(alphas, T), memory_capacity(alphas, T, eps), spread_decays(S)
                                         what S decays can hold: the state is V x, V Vandermonde.
    step(x_t, h, alphas)                 one time step, O(1) memory, for streaming generation.
    selective_traces_ref(x, a, h0)       the loop of the selective trace.
    traces(x, alphas, h0, method=)       the fast exact paths, chosen by `method`:
        "scan"    chunked two-level scan with a reversed-time backward: L + N Python steps, the
                  fewest bytes moved; best on a CPU, where an operator costs little.
        "matmul"  chunked matrix form: a fixed number of operators per call, forward and
                  backward, whatever T is; for accelerators, where each operator is a kernel
                  launch of several microseconds.
        "auto"    matmul on CUDA, scan elsewhere.
    selective_traces(x, a, h0, method=)  the same three methods for the selective trace.

Precision: every method computes in the input's dtype, half-precision inputs in float32 (cast
up, returned in float32), with torch.autocast switched off inside: the slow trace (a = 0.02)
sums ~50 terms, which bf16's 8-bit mantissa would round visibly. Matmuls on CUDA follow torch's
TF32 setting: with `torch.backends.cuda.matmul.allow_tf32 = True` (train.py sets it) their inputs
are rounded to a 10-bit mantissa (relative error ~5e-4, accumulation still float32); bench.py
checks the 1e-5 agreement with the loop with TF32 off and reports the TF32 error beside it.

Run `python -m pytest tests/test_ema.py` for the agreement tests; `python bench.py` measures
speed and operator counts (results/bench/).
"""

import contextlib
import functools

import torch
import torch.nn.functional as F

METHODS = ("auto", "scan", "matmul")
HALF = (torch.float16, torch.bfloat16)  # computed and returned in float32


# ---------------------------------------------------------------------------------------------
# The definition: the reference loops, one step per token. The fast paths below compute the
# same numbers (tests/test_ema.py checks values and gradients).


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


def selective_traces_ref(x, a, h0=None):
    """Reference loop: h_t = (1 - a_t) h_{t-1} + a_t x_t, with a_t (B, C) from a (B, T, C)."""
    _check_selective(x, a, h0)
    h = x.new_zeros(x.shape[0], x.shape[2]) if h0 is None else h0  # (B, C)
    out = []
    for x_t, a_t in zip(x.unbind(1), a.unbind(1)):
        h = (1 - a_t) * h + a_t * x_t
        out.append(h)
    return torch.stack(out, dim=1) if out else x.new_zeros(x.shape)  # (B, T, C)


# ---------------------------------------------------------------------------------------------
# What a state of S fixed decays can hold. Per channel, after T inputs x_0 .. x_{T-1} (h_{-1} =
# 0), trace s is h^s = sum_j a_s (1 - a_s)^(T-1-j) x_j: the state is V x with V (S, T) a scaled
# Vandermonde matrix (rows: geometric sequences in 1 - a_s). Its rank is at most S, so two pasts
# that differ by a vector of V's null space leave the same state (exact rank). Real nodes in
# (0, 1) make V exponentially ill-conditioned (Beckermann and Townsend, SIAM Review 2019), so
# with rounding only a few of its S directions survive (numerical rank): `memory_capacity`.


def spread_decays(S, fast=0.5, slow=0.02):
    """S decays spread geometrically from `fast` to `slow`, the paper's extremes (S = 3 gives the
    paper's 0.5, 0.1, 0.02; S = 1 gives `fast`)."""
    if not isinstance(S, int) or S < 1:
        raise ValueError(f"the number of decays S must be an int >= 1, got {S!r}")
    return tuple(fast * (slow / fast) ** (s / (S - 1)) for s in range(S)) if S > 1 else (fast,)


def trace_map(alphas, T):
    """V (S, T) float64 with V[s, j] = a_s (1 - a_s)^(T-1-j): one channel's state after T inputs
    is V @ x (traces_ref's last step, exactly)."""
    a = torch.tensor(alphas, dtype=torch.float64)[:, None]  # (S, 1)
    age = torch.arange(T - 1, -1, -1, dtype=torch.float64)  # (T,) T-1-j
    return a * (1 - a) ** age  # (S, T)


def memory_capacity(alphas, T, eps):
    """The linear memory capacity of one channel's S-trace state: the sum over the T past inputs
    of R^2, the fraction of x_j's variance that the best linear read-out of the state recovers,
    for i.i.d. unit-variance inputs (Jaeger's capacity; it is at most the rank of V, <= S). eps is
    the unit roundoff of the state's dtype (fp32 2^-24, bf16 2^-8; 0: exact arithmetic, the
    capacity is then rank V): each step rounds every trace, an error of variance eps^2 h^2 / 3
    that the recurrence carries on, so trace s holds noise of variance
        n_s = (eps^2 / 3) E[(h^s)^2] / (1 - (1 - a_s)^2),   E[(h^s)^2] = ||V_s||^2,
    and the capacity is trace(V^T (V V^T + diag(n))^-1 V) = sum_i w_i^2 / (w_i^2 + 1), w_i the
    singular values of diag(n)^-1/2 V (computed so, float64 resolves every w_i that matters). A
    direction whose w_i is below 1 (the noise) recovers almost nothing, so the capacity levels
    off as decays are added. eps = 0 is refused: exactly, the capacity is the rank, S."""
    if not eps > 0:
        raise ValueError(f"eps must be > 0 (the unit roundoff: fp32 2**-24, bf16 2**-8), got {eps!r}")
    V = trace_map(alphas, T)  # (S, T)
    a = torch.tensor(alphas, dtype=torch.float64)
    noise = eps ** 2 / 3 * (V ** 2).sum(1) / (1 - (1 - a) ** 2)  # (S,) variance of trace s's error
    w = torch.linalg.svdvals(V / noise.sqrt()[:, None])  # (S,) signal over noise, per direction
    return float((w ** 2 / (w ** 2 + 1)).sum())


# ---------------------------------------------------------------------------------------------
# Input checks (one-line ValueErrors that say what to fix) and the precision switch.


def _method(method, chunk, device):
    """The fast path a call runs ("auto": matmul on CUDA, scan elsewhere), its chunk checked."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"chunk must be a positive int or None, got {chunk!r}")
    if method == "auto":
        return "matmul" if device.type == "cuda" else "scan"
    return method


def _no_autocast(device):
    """Switch autocast off (the traces run in float32); a no-op where autocast does not exist."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


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


def _check_selective(x, a, h0):
    if x.dim() != 3 or a.shape != x.shape:
        raise ValueError(f"selective traces expect x and a of the same shape (B, T, C); got "
                         f"{tuple(x.shape)} and {tuple(a.shape)}")
    if h0 is not None and tuple(h0.shape) != (x.shape[0], x.shape[2]):
        raise ValueError(f"h0 must have shape (B, C) = {(x.shape[0], x.shape[2])}, got {tuple(h0.shape)}")


# ---------------------------------------------------------------------------------------------
# Fast paths.
#
# The scan (`_ChunkedTraces`), a two-level scan that writes h once:
#   1. cut time into N chunks of L steps; one small matmul gives each chunk's end state from a
#      zero start, E (S, L) @ x_chunk (L, C), E[s, j] = a_s (1 - a_s)^(L - 1 - j);
#   2. a loop over the N chunks carries the state across them: h_in(n + 1) = end(n) + (1 - a)^L h_in(n);
#   3. a loop over the L positions runs the recurrence itself, for all B * N chunks and S decays at
#      once: one `torch.lerp(h_{i-1}, x_i, a)` (= (1 - a) h_{i-1} + a x_i) per position, written
#      straight into the output with `out=`.
# The gradient of an EMA is an EMA run backwards in time, lambda_t = g_t + (1 - a) lambda_{t+1},
# dL/dx_t = sum_s a_s lambda_t^(s), dL/dh0 = (1 - a) lambda_0: the backward is the same two-level
# scan in reverse, and nothing is saved for it.
#
# The matrix form (`_traces_matmul`), exact for any L, all chunks at once:
#   1. within each chunk from a zero state, y_i = sum_{j<=i} a (1 - a)^(i-j) x_j: ONE batched
#      matmul of the (L S x L) decay matrix M[(i, s), j] with every chunk of x;
#   2. the state entering chunk n, h_in(n) = sum_{k<=n} (1 - a)^(L (n-k)) z_k over
#      z = (h0, end(0), ..., end(N-2)): ONE matmul with an (N x N) lower-triangular matrix per decay;
#   3. h_i = y_i + (1 - a)^(i+1) h_in: ONE multiply-add.
# Autograd differentiates these few operators (the backward is their transposes), so the operator
# count per call is constant in T. Work is O(T L S C) for step 1 and O(T^2 / L^2 S C) for step 2.
#
# The selective traces use the same two ideas with per-step decays d_t = 1 - a_t: the scan is
# the two-level scan through autograd, the matrix form a chunked solver of h_t = d_t h_{t-1} + b_t
# (`_recurrence`) whose in-chunk decay matrix is a cumulative product, nested three levels deep,
# with a hand-written backward (see the comment above `_selective_scan` for why no logarithm).
#
# Numerics of the fixed-decay forms: every coefficient is a power (1 - a)^k <= 1 of a decay in
# [0, 1), built in float64 and cast: nothing overflows, and a power that underflows to 0 is its
# exact limit.


def chunk_len(T):
    """L of the scan for a sequence of T steps: about 16 chunks, L in [16, 256]. Any L >= 1 is
    exact; this trades the L + N Python steps against the size of one (B, N, S, C) slice, which
    should stay cache-sized."""
    return max(16, min(256, T // 16))


def matmul_chunk_len(T):
    """L of the matrix form: 32 (or T if shorter). Step 1 costs 2 L S flops per output element,
    step 2 costs 2 S T / L^2 of them: at L = 32 step 1 dominates up to T ~ 32k, and its flops
    per byte written stay near an accelerator's fp32 balance point."""
    return max(1, min(32, T))


# ---------------------------------------------------------------------------------------------
# method="scan"


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
    last whole chunk run as a plain loop on (B, S, C). Called with autocast off (see `traces`);
    the backward switches it off itself, since a backward may run inside an autocast region."""

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
            with _no_autocast(g.device):
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


# ---------------------------------------------------------------------------------------------
# method="matmul"


@functools.lru_cache(maxsize=64)
def _matmul_operators(alphas, L, N, dtype, device):
    """Constants of the matrix form, built in float64 then cast. S = len(alphas), r = 1 - a.

    M (L S, L):   M[(i, s), j] = a_s r_s^(i-j) for j <= i, else 0: the in-chunk trace from zero
    P (L, S, 1):  r_s^(i+1), how much of the state entering a chunk is left at position i
    K (S, N, N):  K[s, n, k] = r_s^(L (n-k)) for k <= n, else 0: the carry across chunks
    """
    f64 = dict(dtype=torch.float64, device=device)
    a = torch.tensor(alphas, **f64)  # (S,)
    r = 1 - a
    i = torch.arange(L, **f64)
    lag = i[:, None] - i[None, :]  # (L, L) i - j
    M = torch.where(lag[:, None] >= 0, a[:, None] * r[:, None] ** lag[:, None].clamp(min=0), 0.0)  # (L, S, L)
    n = torch.arange(N, **f64)
    gap = n[:, None] - n[None, :]  # (N, N) n - k
    K = torch.where(gap >= 0, r[:, None, None] ** (L * gap.clamp(min=0)), 0.0)  # (S, N, N)
    P = (r[None, :] ** (i[:, None] + 1))[:, :, None]  # (L, S, 1)
    out = dict(M=M.reshape(L * len(alphas), L), P=P, K=K)
    return {k: v.to(dtype).contiguous() for k, v in out.items()}


def _traces_matmul(x, alphas, h0, L):
    """The matrix form (module docstring): x (B, T, C) -> h (B, T, S, C), autograd through a
    fixed number of operators. x is zero-padded to N L steps: later inputs change nothing
    earlier, and the padded outputs are cut off."""
    B, T, C = x.shape
    S, N = len(alphas), -(-T // L)
    op = _matmul_operators(alphas, L, N, x.dtype, x.device)
    xc = F.pad(x, (0, 0, 0, N * L - T)).view(B * N, L, C)  # (B N, L, C)
    y = torch.bmm(op["M"].expand(B * N, L * S, L), xc).view(B, N, L, S, C)  # in-chunk, zero start
    first = x.new_zeros(B, 1, S, C) if h0 is None else h0[:, None]  # (B, 1, S, C)
    z = torch.cat([first, y[:, :-1, L - 1]], dim=1)  # (B, N, S, C): h0, end(0), ..., end(N-2)
    hin = torch.einsum("snk,bksc->bnsc", op["K"], z)  # (B, N, S, C) state entering each chunk
    h = torch.addcmul(y, op["P"], hin[:, :, None])  # (B, N, L, S, C)
    return h.view(B, N * L, S, C)[:, :T]  # (B, T, S, C)


def traces(x, alphas, h0=None, *, method="auto", chunk=None):
    """Fast exact traces. Same contract as `traces_ref`: x (B, T, C) -> (B, T, S, C), float32
    for half-precision x (and under autocast), else x's dtype.

    method: "scan" | "matmul" | "auto" (matmul on CUDA, scan elsewhere); see the module
    docstring. chunk: L (default `chunk_len(T)` for the scan, `matmul_chunk_len(T)` for the
    matrix form); every L >= 1 gives the same result.
    """
    alphas = _check(x, alphas, h0)
    method = _method(method, chunk, x.device)
    x = x.float() if x.dtype in HALF else x
    h0 = None if h0 is None else h0.to(x.dtype)
    B, T, C = x.shape
    if T == 0:
        return x.new_zeros(B, 0, len(alphas), C)
    with _no_autocast(x.device):
        if method == "matmul":
            return _traces_matmul(x, alphas, h0, chunk or matmul_chunk_len(T))
        return _ChunkedTraces.apply(x.contiguous(), h0, alphas, chunk or chunk_len(T))


# ---------------------------------------------------------------------------------------------
# Selective (input-dependent) traces: the positive control of the ablation, not in the paper.
#
# Numerics. A chunked selective trace needs the decay from step j to step i,
# prod_{j<k<=i} (1 - a_k). The usual shortcut, exp(cumsum(log(1 - a))_i - cumsum(...)_j) or the
# ratio of cumulative products P_i / P_j, fails here: a = 1 gives log 0 = -inf and -inf - -inf =
# NaN, P_j underflows to 0 after a few steps of large a (0 / 0), and the difference of two large
# cumulative sums cancels. Both methods below use only products and lerps of numbers in [0, 1]:
# no logarithm, no division, nothing overflows, and an underflow to 0 is the exact limit.


def _selective_scan(x, a, h0, L):
    """method="scan": a two-level scan differentiated by autograd (L + N Python steps). In
    chunk n, from a zero state, y_i = lerp(y_{i-1}, x_i, a_i) and P_i = prod_{k<=i} (1 - a_k),
    for all chunks at once (L steps); then the state entering each chunk,
    h_in(n + 1) = y_{L-1}(n) + P_{L-1}(n) h_in(n) (N steps); then h_i = y_i + P_i h_in."""
    B, T, C = x.shape
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


def selective_chunk_len(T):
    """L of the selective matrix form: the smallest L with L^3 >= T, so `_recurrence` always
    nests at most three levels (a constant operator count) and its largest temporary,
    (R, T, L, C), stays within T^(1/3) times the input."""
    L = max(2, round(T ** (1 / 3)))
    while L ** 3 < T:
        L += 1
    return L


def _decay_matrix(d):
    """d (R, L, C) -> D (R, L, L, C), D[:, i, j] = prod_{j<k<=i} d_k for j <= i, else 0:
    the cumulative product down i of Q[i, j] = d_i (i > j) or 1 (i <= j), masked."""
    L = d.shape[1]
    tri = torch.ones(L, L, dtype=torch.bool, device=d.device)
    Q = torch.where(tri.tril(-1)[:, :, None], d[:, :, None], 1.0)  # (R, L, L, C)
    return torch.where(tri.tril()[:, :, None], Q.cumprod(1), 0.0)  # (R, L, L, C)


def _recurrence(d, b, h0, L):
    """The linear recurrence h_t = d_t h_{t-1} + b_t with a fixed number of operators.
    d, b (R, T, C), h0 (R, C) or None -> h (R, T, C). T <= L: one decay matrix. Otherwise chunks
    of L (padded with d = 1, b = 0), each solved from a zero state at once; the states after each
    chunk obey the same recurrence over N = ceil(T / L) chunk ends (decay = the chunk's product of
    d), solved by a recursive call; then h_i = y_i + prod_{k<=i} d_k * h_in."""
    R, T, C = b.shape
    if T <= L:
        h = (_decay_matrix(d) * b[:, None]).sum(2)  # (R, T, C) sum_j D[i, j] b_j
        return h if h0 is None else torch.addcmul(h, d.cumprod(1), h0[:, None])
    N = -(-T // L)
    dc = F.pad(d, (0, 0, 0, N * L - T), value=1.0).view(R * N, L, C)  # (R N, L, C)
    bc = F.pad(b, (0, 0, 0, N * L - T)).view(R * N, L, C)
    y = _recurrence(dc, bc, None, L).view(R, N, L, C)  # in-chunk, zero start
    p = dc.cumprod(1).view(R, N, L, C)  # decay from the chunk's start to position i
    after = _recurrence(p[:, :, -1], y[:, :, -1], h0, L)  # (R, N, C) state after each chunk
    first = b.new_zeros(R, 1, C) if h0 is None else h0[:, None]
    hin = torch.cat([first, after[:, :-1]], dim=1)  # (R, N, C) state entering each chunk
    return torch.addcmul(y, p, hin[:, :, None]).view(R, N * L, C)[:, :T]  # (R, T, C)


class _SelectiveMatmul(torch.autograd.Function):
    """method="matmul": forward h = recurrence(1 - a, a x, h0). Backward, by hand: the adjoint
    lambda_t = g_t + (1 - a_{t+1}) lambda_{t+1} is the same recurrence run backwards in time,
    then dL/dx_t = a_t lambda_t, dL/da_t = lambda_t (x_t - h_{t-1}), dL/dh0 = (1 - a_0) lambda_0.
    Saves x, a, h0 and h; called with autocast off (see `selective_traces`)."""

    @staticmethod
    def forward(ctx, x, a, h0, L):
        h = _recurrence(1 - a, a * x, h0, L)  # (R, T, C)
        ctx.save_for_backward(x, a, h0, h)
        ctx.L = L
        return h

    @staticmethod
    def backward(ctx, g):
        x, a, h0, h = ctx.saved_tensors
        with _no_autocast(g.device):
            d_next = F.pad(1 - a[:, 1:], (0, 0, 0, 1))  # (R, T, C) 1 - a_{t+1}, 0 after the end
            lam = _recurrence(d_next.flip(1), g.flip(1), None, ctx.L).flip(1)  # (R, T, C)
            first = h.new_zeros(h.shape[0], 1, h.shape[2]) if h0 is None else h0[:, None]
            h_prev = torch.cat([first, h[:, :-1]], dim=1)  # h_{t-1}
            dh0 = None if h0 is None else (1 - a[:, 0]) * lam[:, 0]
            return a * lam, lam * (x - h_prev), dh0, None


def selective_traces(x, a, h0=None, *, method="auto", chunk=None):
    """Selective traces, exact up to float rounding. x, a (B, T, C) -> h (B, T, C), float32 for
    half-precision x (and under autocast), else x's dtype.

    method: "scan" (two-level scan through autograd, L + N steps; best on a CPU), "matmul"
    (a fixed number of operators for any T, forward and backward; for accelerators) or "auto"
    (matmul on CUDA, scan elsewhere). chunk: L (default `chunk_len(T)` for the scan,
    `selective_chunk_len(T)` for the matrix form, which needs L >= 2 and raises L = 1 to 2).
    Memory: the scan keeps a few (B, T, C) tensors for autograd; the matrix form saves x, a
    and h and builds transient (B, T, L, C) decay tensors (L = T^(1/3): 11 at T = 1024).
    """
    _check_selective(x, a, h0)
    method = _method(method, chunk, x.device)
    x = x.float() if x.dtype in HALF else x
    a, h0 = a.to(x.dtype), None if h0 is None else h0.to(x.dtype)
    T = x.shape[1]
    if T == 0:
        return x.new_zeros(x.shape)
    with _no_autocast(x.device):
        if method == "matmul":
            return _SelectiveMatmul.apply(x, a, h0, max(2, chunk or selective_chunk_len(T)))
        return _selective_scan(x, a, h0, chunk or chunk_len(T))

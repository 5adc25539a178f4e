"""The write rules and the readers that write: states of key-value outer products (SPEN's write
readers, `predictor` = ema_kv | delta | gated_delta | gated_ema_kv).

Each rule as ema.py writes the traces: the one-token step (the definition), the loop over time
(the reference, `trace_method='loop'` in the model), and the chunked form with its derivation
(the fast path: the same values and gradients, tests/test_writes.py). flash-linear-attention keeps
the same split as `fla/ops/<op>/naive.py` beside each kernel.

    ema_kv       M^s_t = (1 - a_s) M^s_{t-1} + a_s k_t v_t^T                  fixed decays (RetNet-like)
    delta        M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T         DeltaNet; g = 1 - a fixed
    gated delta  M_t = alpha_t M_{t-1} + beta_t (v_t - alpha_t M_{t-1} k_t) k_t^T   Gated DeltaNet:
                 alpha_t in (0, 1) from the input, passed as its log g_t = log alpha_t <= 0
    gated, no delta  M_t = alpha_t M_{t-1} + beta_t v_t k_t^T    the control (gated_ema_kv): the same gate,
                 no correction (delta=False in the gated rule's three forms; Mamba-2's scalar decay)

Every rule here READS BEFORE IT WRITES: y_t = M_{t-1} q_t, so SPEN's prediction x̂_t of u_t never
sees v_t = W_v u_t. fla's references read after the write (o_t = S_t q_t): the same recurrence,
outputs shifted by one token, so a comparison with fla gives different numbers by design.

The readers below the rules (EMAKVState, DeltaRuleState, GatedDeltaState; WRITE_READERS for
spen.READERS) read top to bottom: projections (k_t from the trace state h_{t-1}, q_t and v_t from
u_t; an optional short causal convolution on each, cfg.conv) -> the rule -> the read-out. Their
state is float32 under autocast; each declares the options it reads (ema_kv and delta: write_alphas,
read_norm, conv; the gated rules: conv). Parameters per block and state floats per layer (beyond the
S*C traces; K the convolution's kernel, X its channels):
  ema_kv       (S_w + S + 1) C^2            S_w C D (+ (K - 1) X)
  delta        (S + 2) C^2 + H C            C D (+ (K - 1) X)
  gated_delta  (S + 3) C^2 + 2 H C + ...    C D (+ (K - 1) X)      (gated_ema_kv: the same)

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) asks whether the EMA's decay or its write
(h += a (x - h): one vector, no key) loses content; these rules keep the decays and change the
write (results/scaling), then add what the field adds around it (results/map).

Shape glossary
    B batch, H heads, T time, C width, S traces, D = C / H head width, S_w write decays (ema_kv),
    L chunk length, N = ceil(T / L) chunks, M the state (D x D per head, and per decay for ema_kv).
Layouts: q (B, H, S_w, T, D) for ema_kv (a query per decay), (B, H, T, D) for the delta rules;
k, v (B, H, T, D); beta and g (B, H, T).

Run: nothing to run; tests/test_writes.py checks each chunked form against its loop,
tests/test_readers.py every reader's contract, tests/test_variants.py what the readers store.
"""

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import ema
from variants import Reader, check_heads, is_decays, reader_chunk_len, require


def l2norm(x, eps=1e-6):
    """x / sqrt(|x|^2 + eps) over the last dim (fla's DeltaNet form). Not F.normalize: SPEN's key
    at t = 0 is exactly zero (h_{-1} = 0), where x / max(|x|, 1e-12) has slope 1e12, which
    overflows an fp16 gradient; here the slope at 0 is eps^-1/2 = 1e3."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


# ------------------------------------------------------------------------------------------
# ema_kv: fixed-decay EMA of key-value outer products.


def ema_kv_step(q_t, k_t, v_t, M, alphas):
    """One token of the fixed-decay EMA of outer products: read the state, then write.
        y_t     = sum_s (M^s_{t-1})^T q^s_t            read the state BEFORE t's own write
        M^s_t   = (1 - a_s) M^s_{t-1} + a_s k_t v_t^T  write, per decay s
    q_t (B, H, S, D), k_t, v_t (B, H, D), M (B, H, S, D, D) (key index first) -> y_t (B, H, D), M_t."""
    a = torch.tensor(alphas, dtype=M.dtype, device=M.device).view(1, 1, -1, 1, 1)  # (1, 1, S, 1, 1)
    y = (q_t.unsqueeze(-2) @ M).squeeze(-2).sum(2)  # (B, H, S, 1, D) @ (B, H, S, D, D) -> sum over s
    kv = (k_t.unsqueeze(-1) * v_t.unsqueeze(-2)).unsqueeze(2)  # (B, H, 1, D, D) k_t v_t^T
    return y, (1 - a) * M + a * kv


def ema_kv_ref(q, k, v, alphas):
    """Reference: the plain loop over time of `ema_kv_step`, from M_{-1} = 0 (the definition).
    q (B, H, S, T, D), k, v (B, H, T, D) -> y (B, H, T, D).
    Unrolled: y_t = sum_s sum_{j<t} a_s (1 - a_s)^(t-1-j) (q^s_t . k_j) v_j."""
    B, H, S, T, D = q.shape
    M = q.new_zeros(B, H, S, D, D)
    out = []
    for q_t, k_t, v_t in zip(q.unbind(3), k.unbind(2), v.unbind(2)):  # unbind: a backward linear in T
        y_t, M = ema_kv_step(q_t, k_t, v_t, M, alphas)
        out.append(y_t)
    return torch.stack(out, 2) if out else v.new_zeros(B, H, 0, D)  # (B, H, T, D)


def _decay_tables(alphas, L, dtype, device, weight=True):
    """The chunked forms' constant tables, computed in float64: for position i (and write j) of a
    chunk of L, W[s, i, j] = a_s r_s^(i-1-j) for j < i (else 0), r_s = 1 - a_s, the weight of
    write j in the state read at i; start[s, i] = r_s^i, how much of the chunk's start state is
    left at i; end[s, j] = a_s r_s^(L-1-j), the weight of write j in the chunk's end state; and
    r_s^L (weight=False: without the factors a_s). No division: a = 1 (0^0 = 1) and long chunks are safe."""
    a = torch.tensor(alphas, dtype=torch.float64)[:, None, None]  # (S, 1, 1)
    r, i = 1 - a, torch.arange(L, dtype=torch.float64)
    a = a if weight else torch.ones_like(a)
    e = i[:, None] - 1 - i[None, :]  # (L, L) exponent i - 1 - j
    W = torch.where(e >= 0, a * r ** e.clamp(min=0), torch.zeros(()))  # (S, L, L), strictly causal
    start, end = r[:, :, 0] ** i, a[:, :, 0] * r[:, :, 0] ** (L - 1 - i)  # (S, L) each
    return [x.to(dtype=dtype, device=device) for x in (W, start, end, r[:, :, 0] ** L)]  # ..., r^L (S, 1)


def ema_kv_chunked(q, k, v, alphas, chunk=64):
    """Fast path of `ema_kv_ref` (the same values): chunks of L = min(chunk, T) positions. Inside
    a chunk the masked parallel form y_i = sum_s sum_{j<i} W[s,i,j] (q^s_i . k_j) v_j; across
    chunks the state M^s (D x D) of everything before the chunk, read decayed by r_s^i and carried
    over as M <- r_s^L M + sum_j a_s r_s^(L-1-j) k_j v_j^T: N = ceil(T / L) Python steps.
    q (B, H, S, T, D), k, v (B, H, T, D) -> y (B, H, T, D)."""
    B, H, S, T, D = q.shape
    L = max(1, min(chunk, T))
    pad = (-T) % L  # zero keys and values after the end write nothing; their outputs are cut off
    q = F.pad(q, (0, 0, 0, pad)).unflatten(3, (-1, L))  # (B, H, S, N, L, D)
    k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, L)) for x in (k, v))  # (B, H, N, L, D)
    W, start, end, rL = _decay_tables(alphas, L, q.dtype, q.device)
    M = q.new_zeros(B, H, S, D, D)  # the state before the chunk, key index first
    out = []
    for q_n, k_n, v_n in zip(q.unbind(3), k.unbind(2), v.unbind(2)):  # (B, H, S, L, D), (B, H, L, D)
        scores = (q_n @ k_n.unsqueeze(2).transpose(-1, -2)) * W  # (B, H, S, L, L), decayed and masked
        y = scores.sum(2) @ v_n + ((q_n * start[..., None]) @ M).sum(2)  # in-chunk + earlier chunks
        M = rL[..., None] * M + (k_n.unsqueeze(2) * end[..., None]).transpose(-1, -2) @ v_n.unsqueeze(2)
        out.append(y)  # (B, H, L, D)
    return torch.cat(out, 2)[:, :, :T] if out else v  # (B, H, T, D)


# ------------------------------------------------------------------------------------------
# delta: the delta rule (DeltaNet), no decay or a fixed one.


def delta_rule_step(q_t, k_t, v_t, beta_t, M, a=0.0):
    """One token of the delta rule with a fixed decay g = 1 - a (gated DeltaNet, Yang et al. 2025, with
    a constant gate; a = 0: DeltaNet): read the state, decay it, correct what it holds at k_t to v_t.
        y_t = M_{t-1} q_t                                         read the state BEFORE t's write
        M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T      the write
    q_t, k_t (B, H, Dk) (unit vectors), v_t (B, H, Dv), beta_t (B, H) in (0, 1), M (B, H, Dv, Dk)
    (value index first: M k is the value stored at key k; Dk = Dv = D but for key_dim, value_dim)
    -> y_t (B, H, Dv), M_t."""
    y = (M @ q_t.unsqueeze(-1)).squeeze(-1)  # (B, H, Dv)
    M = (1 - a) * M
    err = v_t - (M @ k_t.unsqueeze(-1)).squeeze(-1)  # (B, H, Dv) v_t - g M k_t: what the state gets wrong
    return y, M + (beta_t[..., None] * err).unsqueeze(-1) * k_t.unsqueeze(-2)


def delta_rule_ref(q, k, v, beta, a=0.0):
    """Reference: the plain loop over time of `delta_rule_step`, from M_{-1} = 0 (the definition).
    q, k (B, H, T, Dk), v (B, H, T, Dv), beta (B, H, T) -> y (B, H, T, Dv)."""
    B, H, T, Dk = q.shape
    M = q.new_zeros(B, H, v.shape[-1], Dk)
    out = []
    for q_t, k_t, v_t, b_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2)):
        y_t, M = delta_rule_step(q_t, k_t, v_t, b_t, M, a)
        out.append(y_t)
    return torch.stack(out, 2) if out else v  # (B, H, T, Dv)


def delta_rule_chunked(q, k, v, beta, a=0.0, chunk=64):
    """Fast path of `delta_rule_ref` (the same values): the chunked WY form of (gated) DeltaNet
    (Yang et al. 2024, 2025) in chunks of L = min(chunk, T), with g = 1 - a and the state kept
    transposed, P = M^T (key index first: P^T k is the value stored at key k). Derivation, for a
    chunk that starts from state P_0, local time i = 0..L-1:
      1. The state after i unrolls to P_i = g^(i+1) P_0 + sum_{j<=i} g^(i-j) k_j n_j^T, where
         n_i = beta_i (v_i - g P_{i-1}^T k_i) is the value write i actually adds (the correction).
      2. Put P_{i-1} from 1 into n_i: n_i + beta_i sum_{j<i} g^(i-j) (k_i . k_j) n_j
         = beta_i (v_i - g^(i+1) P_0^T k_i). Stacked as rows this is one unit lower-triangular
         system A N = U - W P_0, with A = I + tril_{-1}(diag(beta) (K K^T * G)), G_ij = g^(i-j),
         so N = u - w P_0 with u = A^-1 diag(beta) V and w = A^-1 diag(beta g^(i+1)) K
         (fla's u and w: the WY representation), one triangular solve for both.
      3. Read before each write: y_i = P_{i-1}^T q_i = g^i P_0^T q_i + sum_{j<i} g^(i-1-j) (q_i . k_j) n_j,
         and the chunk's end state P_L = g^L P_0 + sum_j g^(L-1-j) k_j n_j^T.
    Every factor is a power g^n <= 1 of local time, never g^-n: fast decays and long chunks lose
    nothing. N = ceil(T / L) Python steps. q, k (B, H, T, Dk), v (B, H, T, Dv), beta (B, H, T)
    -> y (B, H, T, Dv)."""
    B, H, T, Dv = v.shape
    L = max(1, min(chunk, T))
    pad = (-T) % L  # zero keys and beta after the end write nothing; their outputs are cut off
    q, k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, L)) for x in (q, k, v))  # (B, H, N, L, D)
    beta = F.pad(beta, (0, pad)).unflatten(2, (-1, L))[..., None]  # (B, H, N, L, 1)
    read, start, end, gL = (x[0] for x in _decay_tables((a,), L, q.dtype, q.device, weight=False))
    G = (1 - a) * read  # (L, L) g^(i-j) for j < i, else 0
    start, end, eye = start[:, None], end[:, None], torch.eye(L, dtype=q.dtype, device=q.device)  # (L, 1)
    P = q.new_zeros(B, H, q.shape[-1], Dv)  # the state before the chunk, P = M^T (Dk, Dv)
    out = []
    for q_n, k_n, v_n, b_n in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2)):  # (B, H, L, .)
        A = eye + ((b_n * k_n) @ k_n.transpose(-1, -2)) * G  # (B, H, L, L) unit lower triangular (step 2)
        u, w = torch.linalg.solve_triangular(A, torch.cat([b_n * v_n, b_n * (1 - a) * start * k_n], -1),
                                             upper=False, unitriangular=True).split((Dv, q.shape[-1]), -1)
        n = u - w @ P  # (B, H, L, Dv) the corrections n_i each write adds (u (B, H, L, Dv), w (B, H, L, Dk))
        out.append((start * q_n) @ P + ((q_n @ k_n.transpose(-1, -2)) * read) @ n)  # (B, H, L, Dv) (step 3)
        P = gL * P + (end * k_n).transpose(-1, -2) @ n
    return torch.cat(out, 2)[:, :, :T] if out else v  # (B, H, T, Dv)


# ------------------------------------------------------------------------------------------
# DeltaProduct (Siems et al. 2025, arXiv 2502.10297): n_h delta steps per token on one state, no gate.


def delta_product_step(q_t, k_t, v_t, beta_t, M):
    """One token of DeltaProduct: read the state, then n_h delta-rule writes in turn (a product of
    n_h generalised Householder transitions, where the delta rule makes one):
        y_t = M_{t-1} q_t                                             read BEFORE t's writes
        M <- M + beta_{t,j} (v_{t,j} - M k_{t,j}) k_{t,j}^T,  j = 1..n_h   M_t: the last
    q_t (B, H, D), k_t, v_t (B, H, n_h, D) (q, k unit vectors), beta_t (B, H, n_h), M (B, H, D, D)
    (value index first) -> y_t (B, H, D), M_t. (fla: naive_recurrent_gated_delta_product with no
    gate, which reads after the writes.)"""
    y = (M @ q_t.unsqueeze(-1)).squeeze(-1)  # (B, H, D)
    for k, v, b in zip(k_t.unbind(2), v_t.unbind(2), beta_t.unbind(2)):  # (B, H, D), (B, H, D), (B, H)
        M = M + (b[..., None] * (v - (M @ k.unsqueeze(-1)).squeeze(-1))).unsqueeze(-1) * k.unsqueeze(-2)
    return y, M


def delta_product_ref(q, k, v, beta):
    """Reference: the plain loop over time of `delta_product_step`, from M_{-1} = 0 (the definition).
    q (B, H, T, D), k, v (B, H, T, n_h, D), beta (B, H, T, n_h) -> y (B, H, T, D)."""
    B, H, T, D = q.shape
    M = q.new_zeros(B, H, D, D)
    out = []
    for q_t, k_t, v_t, b_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2)):
        y_t, M = delta_product_step(q_t, k_t, v_t, b_t, M)
        out.append(y_t)
    return torch.stack(out, 2) if out else q  # (B, H, T, D)


def delta_product_chunked(q, k, v, beta, chunk=64):
    """Fast path of `delta_product_ref` (the same values): DeltaProduct is the delta rule over the
    T n_h writes in their order (token t's j-th at position t n_h + j), read once per token, at
    t n_h, before its first write (fla's form, interleaved): `delta_rule_chunked` over that
    sequence, with q_t at t n_h and zero queries between, then every n_h-th output.
    q (B, H, T, D), k, v (B, H, T, n_h, D), beta (B, H, T, n_h) -> y (B, H, T, D)."""
    n = k.shape[3]
    q = F.pad(q.unsqueeze(3), (0, 0, 0, n - 1))  # (B, H, T, n_h, D) the query at each token's first write
    y = delta_rule_chunked(*(x.flatten(2, 3) for x in (q, k, v, beta)), chunk=chunk)  # (B, H, T n_h, D)
    return y[:, :, ::n]  # (B, H, T, D)


# ------------------------------------------------------------------------------------------
# The gated delta rule (Gated DeltaNet, Yang et al., ICLR 2025): the delta rule with a decay
# alpha_t = exp(g_t) computed from the input per token and head (GatedDeltaState below).


def gated_delta_step(q_t, k_t, v_t, beta_t, g_t, M, delta=True):
    """One token of the gated delta rule: read the state, decay it by alpha_t = exp(g_t), correct
    what it holds at k_t toward v_t (delta=False: add beta_t v_t k_t^T, no correction).
        y_t = M_{t-1} q_t                                                 read BEFORE t's write
        M_t = alpha_t M_{t-1} + beta_t (v_t - alpha_t M_{t-1} k_t) k_t^T  the write
    q_t, k_t, v_t (B, H, D) (q, k unit vectors), beta_t (B, H) in (0, 1), g_t (B, H) <= 0,
    M (B, H, D, D) (value index first) -> y_t (B, H, D), M_t. (fla: naive_recurrent_gated_delta_rule,
    which reads after the write.)"""
    y = (M @ q_t.unsqueeze(-1)).squeeze(-1)  # (B, H, D)
    M = g_t.exp()[..., None, None] * M
    err = v_t - (M @ k_t.unsqueeze(-1)).squeeze(-1) if delta else v_t  # (B, H, D) v_t - alpha_t M k_t
    return y, M + (beta_t[..., None] * err).unsqueeze(-1) * k_t.unsqueeze(-2)


def gated_delta_ref(q, k, v, beta, g, delta=True):
    """Reference: the plain loop over time of `gated_delta_step`, from M_{-1} = 0 (the definition).
    q, k, v (B, H, T, D), beta, g (B, H, T) -> y (B, H, T, D)."""
    B, H, T, D = q.shape
    M = q.new_zeros(B, H, D, D)
    out = []
    for q_t, k_t, v_t, b_t, g_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2), g.unbind(2)):
        y_t, M = gated_delta_step(q_t, k_t, v_t, b_t, g_t, M, delta)
        out.append(y_t)
    return torch.stack(out, 2) if out else v.new_zeros(B, H, 0, D)  # (B, H, T, D)


def gated_delta_chunked(q, k, v, beta, g, chunk=64, delta=True):
    """Fast path of `gated_delta_ref` (the same values): `delta_rule_chunked`'s derivation with the
    constant powers g^n replaced by products of the per-token decays. With b_i = sum_{m<=i} g_m
    (the log of the decay from the chunk's start through i), every factor is exp(b_x - b_y) with
    x >= y, a product of decays <= 1: never a division by a cumulative decay, which underflows
    when the gates close (fla's chunk form, in its log space):
        A  = I + tril_{-1}(diag(beta) (K K^T * exp(b_i - b_j)))
        u  = A^-1 diag(beta) V,   w = A^-1 diag(beta exp(b_i)) K,   n = u - w P_0
        y_i = exp(b_{i-1}) P_0^T q_i + sum_{j<i} exp(b_{i-1} - b_j) (q_i . k_j) n_j
        P_L = exp(b_{L-1}) P_0 + sum_j exp(b_{L-1} - b_j) k_j n_j^T
    (b_{-1} = 0). delta=False (no correction) is A = I and w = 0: n = diag(beta) V, no solve.
    q, k, v (B, H, T, D), beta, g (B, H, T) -> y (B, H, T, D)."""
    B, H, T, D = q.shape
    L = max(1, min(chunk, T))
    pad = (-T) % L  # zero keys and beta after the end write nothing; their outputs are cut off
    q, k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, L)) for x in (q, k, v))  # (B, H, N, L, D)
    beta, b = (F.pad(x, (0, pad)).unflatten(2, (-1, L))[..., None] for x in (beta, g))  # (B, H, N, L, 1)
    b = b.double().cumsum(3)  # (B, H, N, L, 1) b_i within each chunk, float64: closed gates sum to -1e3 and
    # more, where float32 would keep 3 digits of a difference b_i - b_j
    b_prev = F.pad(b, (0, 0, 1, 0))[..., :-1, :]  # (B, H, N, L, 1) b_{i-1}, b_{-1} = 0
    below = torch.ones(L, L, dtype=torch.bool, device=q.device).tril(-1)  # (L, L) j < i
    decay = lambda x, y, mask=below: torch.where(mask, x - y.transpose(-1, -2), -torch.inf).exp().to(q.dtype)
    P = q.new_zeros(B, H, D, D)  # the state before the chunk, P = M^T (key index first)
    out = []
    for q_n, k_n, v_n, b_n, bi, bp in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2), b.unbind(2),
                                           b_prev.unbind(2)):  # (B, H, L, .)
        G, R = decay(bi, bi), decay(bp, bi)  # (B, H, L, L) exp(b_i - b_j) and exp(b_{i-1} - b_j), j < i
        if delta:
            A = torch.eye(L, dtype=q.dtype, device=q.device) + ((b_n * k_n) @ k_n.transpose(-1, -2)) * G
            u, w = torch.linalg.solve_triangular(A, torch.cat([b_n * v_n, b_n * bi.exp().to(q.dtype) * k_n], -1),
                                                 upper=False, unitriangular=True).split(D, -1)  # (B, H, L, D) each
            n = u - w @ P  # (B, H, L, D) the corrections n_i each write adds
        else:
            n = b_n * v_n  # (B, H, L, D) the values written, uncorrected
        out.append((bp.exp().to(q.dtype) * q_n) @ P + ((q_n @ k_n.transpose(-1, -2)) * R) @ n)  # (B, H, L, D)
        last = bi[..., -1:, :]  # (B, H, 1, 1) b_{L-1}
        P = last.exp().to(q.dtype) * P + ((last - bi).exp().to(q.dtype) * k_n).transpose(-1, -2) @ n
    return torch.cat(out, 2)[:, :, :T] if out else v  # (B, H, T, D)


# ------------------------------------------------------------------------------------------
# The readers that write (WRITE_READERS, at the end): projections -> the rule above -> the read-out.


class ShortConv(nn.Module):
    """The short causal convolution the field puts on q, k and v (fla's ShortConvolution, Mamba's
    conv1d): depthwise over time, kernel K, then SiLU,
        y_t = SiLU(sum_{i<K} w_i * x_{t-K+1+i}),   x_{<0} = 0.
    forward (B, T, X) -> (B, T, X) is F.conv1d (the loop: the sum over the K shifted copies,
    `trace_method='loop'`); step keeps the last K - 1 inputs (B, K - 1, X)."""

    def __init__(self, X, K, loop=False):
        super().__init__()
        self.loop = loop
        self.weight = nn.Parameter(torch.zeros(X, K))  # w_i per channel, w[:, K - 1] weights x_t (init_weights)

    def forward(self, x):
        K = self.weight.shape[1]
        if self.loop:  # the definition: tap i sees x shifted K - 1 - i steps into the past
            y = sum(self.weight[:, i] * F.pad(x, (0, 0, K - 1 - i, 0))[:, :x.shape[1]] for i in range(K))
        else:
            y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), self.weight[:, None], groups=x.shape[-1]).transpose(1, 2)
        return F.silu(y)  # (B, T, X)

    def step(self, x_t, cache):
        """x_t (B, X), cache (B, K - 1, X) of the inputs before t -> y_t (B, X), the new cache."""
        window = torch.cat([cache.to(x_t.dtype), x_t[:, None]], 1)  # (B, K, X)
        return F.silu((window * self.weight.T).sum(1)), window[:, 1:]


class _WriteReader(Reader):
    """What the write readers share: the projections, the optional short convolution, the float32
    policy and the state. k_t = W_k [h_{t-1}^1 ; ... ; h_{t-1}^S] (S*C -> C: the trace state just
    before t, mostly the previous token), v_t = W_v u_t (C -> C, written after t's read), W_q of u_t
    (n_query * C outputs); the delta rules' write strength beta_t from W_beta u_t (C -> H, beta=True).
    No biases. With conv = K >= 1, each of q, k, v passes a ShortConv of kernel K over time (k's
    spans h_{t-K..t-1}: still u_{<t} only, so read-before-write holds). With read_norm (a reader
    that declares it), each head's read y leaves as RMSNorm(y) g (gain g (D,), 1 at init). The
    state and its arithmetic are float32 under autocast and for half-precision weights (the
    projections follow autocast; the rule runs with autocast off, as in ema.py): the slow decay
    sums ~50 writes and the delta rule corrects its state every token, which bf16 would round."""

    options = ("read_norm", "conv")  # what this class builds; a reader adds write_alphas if it reads them

    @classmethod
    def check(cls, cfg):  # the heads, the kernel, the read norm's switch and the write decays
        check_heads(cfg)
        require(type(cfg.conv) is int and 0 <= cfg.conv <= 64, f"conv must be an int kernel in 0..64 (0: none), got {cfg.conv!r}")
        require(type(cfg.read_norm) is bool, f"read_norm must be True or False, got {cfg.read_norm!r}")
        require(cfg.write_alphas is None or is_decays(cfg.write_alphas),
                f"write_alphas must be None or a non-empty tuple of decays in (0, 1], got {cfg.write_alphas!r}")
        for name in ("key_dim", "value_dim"):
            value = getattr(cfg, name)
            require(type(value) is int and 0 <= value <= 4096, f"{name} must be an int width in 0..4096 (0: C / "
                    f"n_head), got {value!r}")

    def __init__(self, cfg, n_query, state_shape, beta=False, n_write=1):
        super().__init__()
        C, S, H = cfg.n_embd, len(cfg.alphas), cfg.n_head
        Dk, Dv = cfg.key_dim or C // H, cfg.value_dim or C // H  # a head's key and value widths (D unless set)
        self.n_head, self.Dk, self.D, self.n_write, self.state_shape = H, Dk, Dv, n_write, state_shape
        self.chunk = reader_chunk_len(self.D)  # L: positions per chunk of the fast path (any L: the same values)
        self.loop = cfg.trace_method == "loop"  # run the reference (config's one switch for every reference)
        norm = cfg.read_norm and "read_norm" in self.options  # a reader without the option (its own norm): no gain
        self.gain = nn.Parameter(torch.ones(self.D)) if norm else None  # g, the read norm's gain
        self.q = nn.Linear(C, n_query * H * Dk, bias=False)  # W_q, reads the current u_t
        self.k = nn.Linear(S * C, n_write * H * Dk, bias=False)  # W_k, reads the trace state h_{t-1} only
        self.v = nn.Linear(C, n_write * H * Dv, bias=False)  # W_v, reads u_t (written into the state after t's read)
        self.convs = nn.ModuleList(ShortConv(m.out_features, cfg.conv, self.loop) for m in (self.q, self.k, self.v)) \
            if cfg.conv else None  # (a convolution's taps, like a matrix's weights, cost 2 FLOPs each per token)
        self.beta = nn.Linear(C, n_write * H, bias=False) if beta else None  # W_beta: the write strength per head
        self.out = nn.Linear(H * Dv, C, bias=False) if H * Dv != C else None  # W_o, only where the reads are not C wide

    def init_special(self, cfg):
        """The read norm's gain 1; a convolution's taps ~ U(-1/sqrt(K), 1/sqrt(K)), torch's Conv1d
        default (N(0, 0.02) taps would shrink q, k, v fifty-fold at init); the matrices: Reader's."""
        done = [self.gain.fill_(1.0)] if self.gain is not None else []
        return done + [m.weight.uniform_(-m.weight.shape[1] ** -0.5, m.weight.shape[1] ** -0.5) for m in self.convs or ()]

    def project(self, u, h_prev, conv=None):
        """q, k, v (B, T, n_query C), (B, T, C), (B, T, C) from u (B, T, C) and h_prev (B, T, S, C),
        through the short convolution if there is one (step: its caches `conv` -> the new ones)."""
        qkv = self.q(u), self.k(h_prev.flatten(-2)), self.v(u)
        if self.convs is None:
            return qkv, conv
        if conv is None:  # forward: the whole sequence
            return [c(x) for c, x in zip(self.convs, qkv)], None
        out = [c.step(x[:, 0], cache) for c, x, cache in zip(self.convs, qkv, conv)]  # T = 1
        return [y[:, None] for y, _ in out], [cache for _, cache in out]

    def qkvb(self, u, h_prev, conv=None):
        """The delta rules' inputs (beta=True): unit q (B, H, T, Dk) and k (B, H, T, Dk), v (B, H, T, Dv),
        beta (B, H, T) in (0, 1), float32, and the convolution's caches; with n_write > 1 writes a
        token, k and v (B, H, T, n_write, D.) and beta (B, H, T, n_write)."""
        (q, k, v), conv = self.project(u, h_prev, conv)
        beta = self.beta(u)  # (B, T, n_write H) logits, projected under autocast like q, k, v
        with ema._no_autocast(u.device):
            q = self.heads(q, self.Dk)[:, :, 0]  # (B, H, T, Dk)
            k, v = self.heads(k, self.Dk).transpose(2, 3), self.heads(v).transpose(2, 3)  # (B, H, T, n_write, D.)
            beta = torch.sigmoid(beta.float() if beta.dtype in ema.HALF else beta)
            beta = beta.unflatten(-1, (self.n_write, self.n_head)).permute(0, 3, 1, 2)  # (B, H, T, n_write)
            if self.n_write == 1:
                k, v, beta = k[..., 0, :], v[..., 0, :], beta[..., 0]  # (B, H, T, D.), (B, H, T)
            return l2norm(q), l2norm(k), v, beta, conv

    def heads(self, x, D=None):
        """(B, T, n*H*D) -> (B, H, n, T, D), float32 if x is half; D: the value width unless given."""
        (B, T, nHD), H, D = x.shape, self.n_head, D or self.D
        x = x.float() if x.dtype in ema.HALF else x
        return x.view(B, T, nHD // (H * D), H, D).permute(0, 3, 2, 1, 4)

    def read_out(self, y):
        """y (B, H, T, Dv) -> (B, T, C), RMSNorm(y) g per head with read_norm, through W_o if H Dv != C."""
        if self.gain is not None:
            y = F.rms_norm(y, self.gain.shape, self.gain.to(y.dtype), eps=1e-6)
        y = y.transpose(1, 2).flatten(2)  # (B, T, H Dv)
        return y if self.out is None else self.out(y.to(self.out.weight.dtype))  # (B, T, C)

    def init_state(self, batch_size, device):
        K = self.convs[0].weight.shape[1] if self.convs else 1
        conv = [torch.zeros(batch_size, K - 1, c.weight.shape[0], device=device) for c in self.convs] if self.convs else None
        return self.state(torch.zeros(batch_size, *self.state_shape, device=device), conv)  # float32

    def state(self, M, conv):
        """The step state: M and, with a convolution, its caches (one per projection)."""
        return dict(M=M) if conv is None else dict(M=M, conv=conv)

    def state_floats(self, T):
        conv = sum(c.weight.numel() - c.weight.shape[0] for c in self.convs) if self.convs else 0  # (K - 1) X each
        return math.prod(self.state_shape) + conv


class EMAKVState(_WriteReader):
    """('ema_kv', 'state'): linear attention with fixed decays (as RetNet, with one query per decay),
    a state of S_w (D x D) matrices per head of key-value outer products:
        M^s_t = (1 - a_s) M^s_{t-1} + a_s k_t v_t^T,   x̂_t = sum_s (M^s_{t-1})^T q^s_t,
    q^s_t = W_q^s u_t / sqrt(D); the decays a_s are cfg.write_alphas (S_w of them), by default the
    paper's trace decays. ema_kv_ref is the definition, ema_kv_chunked the fast path."""

    options = ("write_alphas", "read_norm", "conv")

    def __init__(self, cfg):
        alphas, D = cfg.write_alphas or cfg.alphas, cfg.n_embd // cfg.n_head  # the S_w write decays
        super().__init__(cfg, len(alphas), (cfg.n_head, len(alphas), D, D))  # W_q: C -> S_w*C; S_w*C*D floats
        self.alphas = alphas

    def forward(self, u, h_prev):
        (q, k, v), _ = self.project(u, h_prev)  # (B, T, S_w C), (B, T, C), (B, T, C)
        with ema._no_autocast(u.device):
            q = self.heads(q) * self.D ** -0.5  # (B, H, S_w, T, D) / sqrt(D)
            k, v = self.heads(k)[:, :, 0], self.heads(v)[:, :, 0]  # (B, H, T, D)
            rule = ema_kv_ref if self.loop else functools.partial(ema_kv_chunked, chunk=self.chunk)
            return self.read_out(rule(q, k, v, self.alphas))  # (B, T, C), float32

    def step(self, u_t, h_prev_t, state):
        (q, k, v), conv = self.project(u_t[:, None], h_prev_t[:, None], state.get("conv"))  # T = 1
        with ema._no_autocast(u_t.device):
            q = self.heads(q)[:, :, :, 0] * self.D ** -0.5  # (B, H, S_w, D)
            k, v = self.heads(k)[:, :, 0, 0], self.heads(v)[:, :, 0, 0]  # (B, H, D)
            y, M = ema_kv_step(q, k, v, state["M"].to(q.dtype), self.alphas)  # (B, H, D)
            return self.read_out(y[:, :, None])[:, 0], self.state(M, conv)  # (B, C)

    def attn_flops(self, T):  # chunked: in-chunk q^s.k per decay and their sum times v; per decay, read and carry M
        C, L, Sw = self.v.in_features, min(self.chunk, T), len(self.alphas)
        return 2 * (Sw + 1) * L * C + 4 * Sw * C * self.D


class DeltaRuleState(_WriteReader):
    """('delta', 'state'): the delta rule (DeltaNet: Schlag et al. 2021, Yang et al. 2024), one D x D
    matrix per head, with no decay (g = 1) or the fixed decay g = 1 - a of write_alphas = (a,):
        M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T,   x̂_t = M_{t-1} q_t,
    k_t and q_t = W_q u_t L2-normalised per head, beta_t = sigmoid(W_beta u_t) per head (W_beta:
    C -> H). delta_rule_ref is the definition, delta_rule_chunked the fast path. key_dim and
    value_dim set a head's key width Dk and value width Dv (D each by default): the state is H
    Dv x Dk matrices, a head stores at most Dk independent keys exactly (Schlag et al. 2021), and
    where H Dv != C a matrix W_o (H Dv -> C) takes the reads back to C."""

    options = ("write_alphas", "read_norm", "conv", "key_dim", "value_dim")

    @classmethod
    def check(cls, cfg):
        super().check(cfg)
        n = len(cfg.write_alphas or ())
        require(n <= 1, f"write_alphas: the delta rule (one state) takes at most 1 decay, got {n}")

    def __init__(self, cfg, n_write=1):
        C, H = cfg.n_embd, cfg.n_head
        shape = (H, cfg.value_dim or C // H, cfg.key_dim or C // H)  # H Dv x Dk: C*D floats by default
        super().__init__(cfg, 1, shape, beta=True, n_write=n_write)  # W_q: C -> H Dk, W_beta
        self.a = cfg.write_alphas[0] if cfg.write_alphas else 0.0  # a = 1 - g; 0: no decay (DeltaNet)

    def forward(self, u, h_prev):
        q, k, v, beta, _ = self.qkvb(u, h_prev)
        with ema._no_autocast(u.device):
            rule = delta_rule_ref if self.loop else functools.partial(delta_rule_chunked, chunk=self.chunk)
            return self.read_out(rule(q, k, v, beta, self.a))  # (B, T, C), float32

    def step(self, u_t, h_prev_t, state):
        q, k, v, beta, conv = self.qkvb(u_t[:, None], h_prev_t[:, None], state.get("conv"))  # T = 1
        with ema._no_autocast(u_t.device):
            y, M = delta_rule_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], state["M"].to(q.dtype),
                                   self.a)  # (B, H, Dv)
            return self.read_out(y[:, :, None])[:, 0], self.state(M, conv)  # (B, C)

    def attn_flops(self, T):  # per head and write, chunked: K K^T (2 L Dk), the solve (L (Dk + Dv)), Q K^T
        # (2 L Dk) and its product with N (2 L Dv); with the state P: three Dk x Dv products (6 Dk Dv)
        Dk, Dv, L = self.Dk, self.D, min(self.chunk, T * self.n_write)
        return self.n_write * self.n_head * (L * (5 * Dk + 3 * Dv) + 6 * Dk * Dv)


class DeltaProductState(DeltaRuleState):
    """('delta_product', 'state'): DeltaProduct (Siems et al. 2025, arXiv 2502.10297) with n_h = 2
    delta steps per token and no gate, the same state as delta's (H D x D matrices):
        M <- M + beta_{t,j} (v_{t,j} - M k_{t,j}) k_{t,j}^T for j = 1..n_h,   x̂_t = M_{t-1} q_t,
    k_{t,j} = W_k h_{t-1} and v_{t,j} = W_v u_t per step j (W_k: S*C -> n_h C, W_v: C -> n_h C,
    W_beta: C -> n_h H), q and k L2-normalised per head as in delta. delta_product_ref is the
    definition, delta_product_chunked the fast path."""

    options = ("read_norm", "conv")  # no decay: fla's DeltaProduct without its gate
    n_h = 2

    def __init__(self, cfg):
        super().__init__(cfg, n_write=self.n_h)

    def forward(self, u, h_prev):
        q, k, v, beta, _ = self.qkvb(u, h_prev)  # q (B, H, T, D), k, v (B, H, T, n_h, D), beta (B, H, T, n_h)
        with ema._no_autocast(u.device):
            rule = delta_product_ref if self.loop else functools.partial(delta_product_chunked, chunk=self.chunk)
            return self.read_out(rule(q, k, v, beta))  # (B, T, C), float32

    def step(self, u_t, h_prev_t, state):
        q, k, v, beta, conv = self.qkvb(u_t[:, None], h_prev_t[:, None], state.get("conv"))  # T = 1
        with ema._no_autocast(u_t.device):
            y, M = delta_product_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], state["M"].to(q.dtype))
            return self.read_out(y[:, :, None])[:, 0], self.state(M, conv)  # (B, C)


class GatedDeltaState(_WriteReader):
    """('gated_delta', 'state'): the gated delta rule with Gated DeltaNet's parameterisation (Yang et
    al., ICLR 2025; fla's GatedDeltaNet layer), reading before it writes:
        M_t = alpha_t M_{t-1} + beta_t (v_t - alpha_t M_{t-1} k_t) k_t^T,   y_t = M_{t-1} q_t,
        alpha_t = exp(-exp(A_log) softplus(W_a u_t + dt_bias)) per head,  beta_t = sigmoid(W_beta u_t),
        x̂_t = RMSNorm(y_t) g * SiLU(W_gate u_t)   (per head norm; no output projection: W_mix follows).
    q and k are L2-normalised as in delta; the short convolution is cfg.conv (the published model
    uses K = 4). gated_delta_ref is the definition, gated_delta_chunked the fast path; attn_flops is
    the delta rule's (the decays inside a chunk are elementwise: left out)."""

    options = ("conv",)  # its decays are learned (no write_alphas), its output norm always on (no read_norm)
    delta = True  # the delta rule's correction (GatedEMAKVState: off)
    dt_range = (1e-3, 0.1)  # the gate's time step at init, log-uniform (fla's; GatedDeltaRetention: slower)
    attn_flops = DeltaRuleState.attn_flops

    def __init__(self, cfg):
        C, H = cfg.n_embd, cfg.n_head
        super().__init__(cfg, 1, (H, C // H, C // H), beta=True)  # as delta's: W_q, W_k, W_v, convs, W_beta
        self.decay = nn.Linear(C, H, bias=False)  # W_a
        self.A_log = nn.Parameter(torch.zeros(H))  # the decay rate per head, log-parameterised (init_weights)
        self.dt_bias = nn.Parameter(torch.zeros(H))  # the gate's bias, inverse softplus of a time step
        self.gate = nn.Linear(C, C, bias=False)  # W_gate, the output gate
        self.out_norm = nn.Parameter(torch.ones(self.D))  # g, the output RMSNorm's gain

    def init_special(self, cfg):
        """fla's: A_log = log U(1, 16); dt_bias = softplus^-1(dt), dt log-uniform in dt_range
        ([1e-3, 0.1]), so alpha starts between about exp(-1.6) and exp(-1e-3) per head (ignoring
        W_a u_t: a half-life ln 2 / (A dt) of 0.4 to 690 tokens); the norm's gain 1; then the
        convolution's taps, and the matrices, as the other write readers."""
        dt = torch.exp(torch.empty_like(self.dt_bias).uniform_(*map(math.log, self.dt_range)))
        done = [self.A_log.copy_(torch.empty_like(self.A_log).uniform_(1, 16).log()),
                self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt))), self.out_norm.fill_(1.0)]
        return done + super().init_special(cfg)

    def no_matmul_params(self):
        return [self.A_log, self.dt_bias]

    def log_decay(self, u):
        """g_t = log alpha_t = -exp(A_log) softplus(W_a u_t + dt_bias) (B, H, T) <= 0, float32."""
        with ema._no_autocast(u.device):
            a = self.decay(u)
            a = a.float() if a.dtype in ema.HALF else a
            return (-self.A_log.exp() * F.softplus(a + self.dt_bias)).transpose(1, 2)

    def gated(self, y, u):
        """y (B, H, T, D) -> RMSNorm(y) g * SiLU(W_gate u) (B, T, C)."""
        y = F.rms_norm(y, self.out_norm.shape, self.out_norm.to(y.dtype), eps=1e-6).transpose(1, 2).flatten(2)
        gate = self.gate(u)
        return y * F.silu(gate.float() if gate.dtype in ema.HALF else gate)

    def forward(self, u, h_prev):
        q, k, v, beta, _ = self.qkvb(u, h_prev)  # unit q, k; (B, H, T, D), beta (B, H, T)
        g = self.log_decay(u)  # (B, H, T)
        with ema._no_autocast(u.device):
            rule = gated_delta_ref if self.loop else functools.partial(gated_delta_chunked, chunk=self.chunk)
            y = rule(q, k, v, beta, g, delta=self.delta)  # (B, H, T, D)
        return self.gated(y, u)  # (B, T, C)

    def step(self, u_t, h_prev_t, state):
        q, k, v, beta, conv = self.qkvb(u_t[:, None], h_prev_t[:, None], state.get("conv"))  # T = 1
        g = self.log_decay(u_t[:, None])[:, :, 0]  # (B, H)
        with ema._no_autocast(u_t.device):
            y, M = gated_delta_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], g,
                                    state["M"].to(q.dtype), self.delta)  # (B, H, D)
        return self.gated(y[:, :, None], u_t[:, None])[:, 0], self.state(M, conv)  # (B, C)


class GatedDeltaRetention(GatedDeltaState):
    """('gated_delta_ret', 'state'): gated_delta with a retention initialisation, everything else the
    same: dt log-uniform in [1e-4, 1e-3] instead of [1e-3, 0.1], so at init (ignoring W_a u_t) a
    head's half-life ln 2 / (A dt) is 43 to 6,900 tokens and most heads keep half a write past
    128 bytes, where fla's range starts most of them under 10 (results/map/PLAN.md, H1). The
    model learns the gate from there; only where it starts differs."""

    dt_range = (1e-4, 1e-3)


class GatedEMAKVState(GatedDeltaState):
    """('gated_ema_kv', 'state'): the control for gated_delta, everything the same (the gate alpha_t,
    beta_t, unit q and k, the output norm and gate, cfg.conv) but the write adds beta_t v_t k_t^T
    with no correction: M_t = alpha_t M_{t-1} + beta_t v_t k_t^T, y_t = M_{t-1} q_t. ema_kv with one
    state and a learned scalar decay per head (Mamba-2's, not GLA's per channel): set beside
    gated_delta it separates the gate from the delta rule."""

    delta = False

    def attn_flops(self, T):  # chunked, no solve: ema_kv's count at one decay (Q K^T and its product with n; P)
        return 4 * min(self.chunk, T) * self.v.in_features + 4 * self.v.in_features * self.D


# (predictor, reads) -> class, for spen.READERS. A new write reader: a class above and one line here.
WRITE_READERS = {
    ("ema_kv", "state"): EMAKVState,
    ("delta", "state"): DeltaRuleState,
    ("gated_delta", "state"): GatedDeltaState,
    ("gated_delta_ret", "state"): GatedDeltaRetention,
    ("delta_product", "state"): DeltaProductState,
    ("gated_ema_kv", "state"): GatedEMAKVState,
}

"""The write rules: states of key-value outer products, each as ema.py writes the traces: the
one-token step (the definition), the loop over time (the reference, `trace_method='loop'` in the
model), and the chunked form with its derivation (the fast path: the same values and gradients,
tests/test_writes.py). flash-linear-attention keeps the same split as `fla/ops/<op>/naive.py`
apart from its layers; the readers that run these rules (projections -> rule -> read-out) are
writes.py's.

    ema_kv       M^s_t = (1 - a_s) M^s_{t-1} + a_s k_t v_t^T                  fixed decays (RetNet-like)
    delta        M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T         DeltaNet; g = 1 - a fixed
    delta product  n_h delta steps per token on one state (DeltaProduct), no gate
    gated delta  M_t = alpha_t M_{t-1} + beta_t (v_t - alpha_t M_{t-1} k_t) k_t^T   Gated DeltaNet:
                 alpha_t in (0, 1) from the input, passed as its log g_t = log alpha_t <= 0
    gated, no delta  M_t = alpha_t M_{t-1} + beta_t v_t k_t^T    the control (gated_ema_kv): the same gate,
                 no correction (delta=False in the gated rule's three forms; Mamba-2's scalar decay)

Every rule here READS BEFORE IT WRITES: y_t = M_{t-1} q_t, so SPEN's prediction x̂_t of u_t never
sees v_t = W_v u_t. fla's references read after the write (o_t = S_t q_t): the same recurrence,
outputs shifted by one token, so a comparison with fla gives different numbers by design.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) asks whether the EMA's decay or its write
(h += a (x - h): one vector, no key) loses content; these rules keep the decays and change the write.

Shape glossary
    B batch, H heads, T time, D head width (Dk keys, Dv values), S_w write decays (ema_kv), n_h
    delta steps per token, L chunk length, N = ceil(T / L) chunks, M the state (per head, and per
    decay for ema_kv). Layouts: q (B, H, S_w, T, D) for ema_kv (a query per decay), (B, H, T, D) for
    the delta rules; k, v (B, H, T, D); beta and g (B, H, T).

Run: nothing to run; tests/test_writes.py checks each chunked form against its loop, values and gradients.
"""

import torch
import torch.nn.functional as F


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

"""SPEN's variants: the attention readers of the traces, the write readers (ema_kv, delta) and
the selective context. spen.py imports them by name (VARIANT_READERS, SelectiveContext); the
paper's own reader (the linear predictor) and context (fixed-decay EMA) live in spen.py.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN" and its
predictor ablation (a linear map and full softmax attention over the traces tie). The paper
argues by data processing: once the EMA has mixed the tokens into the trace state, no reader of
that state can recover what it lost. That argument holds only for a reader restricted to the
trace state, so the attention readers come in two families (config field `reads`, PAPER.md choice 4):

  reads='state'    x̂_t is a function of u_t and the S vectors h_{t-1}^1..S of the layer only:
                   the recurrent state, S*C numbers whatever the context length. For the
                   attention readers the paper's argument applies. (The write readers are
                   registered here too, as their state has a fixed size, but it is their own
                   M, written from every past u_j: the argument does not apply to them.)
  reads='history'  every past (position j <= t, trace s) pair is a key/value slot holding
                   h_{j-1}^s. LOSSLESS: the trace history is an invertible transform of the
                   inputs, u_t = (h_t^s - (1 - a_s) h_{t-1}^s) / a_s for any s, so the argument
                   does not apply. softmax_attn's step() keeps a cache of every slot (like a KV
                   cache); linear_attn's step() keeps the running sums of its linear attention.

Readers here (config `predictor` x `reads`; spen.READERS adds ('linear', 'state'), the paper's;
parameters per block, and state_floats: what step() holds per layer beyond the S*C traces):
  linear_attn   state    linear attention over the S slots of h_{t-1}      (3C^2 + SC)       0
  softmax_attn  state    softmax attention over the S slots of h_{t-1}     (3C^2 + SC)       0
  linear_attn   history  causal linear attention over all T*S past slots   (3C^2 + SC)       C*D + C
  softmax_attn  history  causal softmax attention over all T*S past slots  (3C^2 + SC)       2*T*S*C
  ema_kv        state    fixed-decay EMA of key-value outer products       (S_w+S+1) C^2     S_w*C*D
  delta         state    the delta rule (DeltaNet), no or a fixed decay    (S+2) C^2 + HC    C*D

A slot holds z = h_{j-1}^s + E_s (E_s a learned timescale embedding); keys k = W_k z and values
v = W_v z come from trace states only, the query q_t = W_q u_t from the current input (content-
based: the strongest reader); values never hold u_t, so x̂_t cannot copy it. No output
projection (W_mix follows linearly): 3C^2 + SC parameters per block against the linear
predictor's S C^2, so the ablation changes only how the traces are read.

The write readers (ema_kv, delta) ask whether it is the decay or the write that kills recall.
Instead of the EMA of the inputs they write a state M of key-value outer products (D x D per
head, and per write decay for ema_kv): key k_t = W_k [h_{t-1}^1 ; ... ; h_{t-1}^S] (what the
traces held just before t: mostly the previous token), value v_t = W_v u_t, query from u_t, x̂_t
read from M_{t-1}, before t's own write, so u_t reaches x̂_t through the query only:
  ema_kv  M^s_t = (1 - a_s) M^s_{t-1} + a_s k_t v_t^T,   x̂_t = sum_s (M^s_{t-1})^T q^s_t   (RetNet-like)
  delta   M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T,   x̂_t = M_{t-1} q_t   (k, q unit; beta in (0, 1))
If they bind keys to values in associative recall (recall.py) where the EMA of the inputs does
not, the boundary lies in the write rule, not in the decay. The ingredients the field adds are
config fields (PAPER.md, variants.py choices 8-10): write_alphas, the decays a_s of ema_kv's S_w
states (default the trace decays) or delta's one decay g = 1 - a (default none, g = 1);
read_norm, an RMSNorm of each head's read. The loops (`ema_kv_ref`, `delta_rule_ref`) are the
definition, forward runs the chunked forms (the same values and gradients), step the loop's
one step; the state is float32 under autocast.

SelectiveContext (context='selective', PAPER.md choice 7) is the positive control, not in the
paper: input-dependent decays a_t^s = sigmoid(W_a u_t + b_s), which start as the fixed EMA.

Shape glossary
    B batch, T time, C width, S traces, H heads, D = C / H head width, S_w write decays,
    L chunk length and N = ceil(T / L) chunks of the chunked linear attention and write readers,
    M the write readers' state (D x D per head, and per decay for ema_kv).

Every reader (a new one: a class here, a line in VARIANT_READERS) has forward(u (B, T, C), h_prev
(B, T, S, C)) -> x̂ (B, T, C), strictly causal; init_state(B, device); step(u_t (B, C), h_prev_t
(B, S, C), state) -> (x̂_t, state); init_weights(cfg), which sets its parameters and returns them
(spen.init_weights refuses one left out); optionally no_matmul_params(), those left out of the
6N FLOPs; state_floats(T) (table above); attn_flops(T), forward FLOPs per token beyond its
weight matmuls as training runs it (chunks of `reader_chunk_len(D)`, in-chunk squares included).
trace_method='loop' (spen.py's one switch for every reference) runs the write readers' loops and
the quadratic linear attention instead of their chunked forms.

Run: nothing to run; tests/test_variants.py checks each reader against its definition (values and
gradients), what each family tells apart, what the write readers store; tests/test_spen.py, SPEN.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import ema


def reader_chunk_len(D):
    """L, positions per chunk of the chunked readers (linear attention over the history, ema_kv,
    delta) at head width D: inside a chunk each head pays an L x L square, across chunks a D x D
    state, so L ~ 2D balances the two, with 32 <= L <= 64: shorter chunks lose to Python's
    per-chunk overhead (bench.py --sections chunk, results/bench/chunk.txt: at D = 4 L = 32 trains
    fastest and L = 8 is slower than the plain loop; at D = 64 L = 64). Any L >= 1 gives the same values."""
    return min(64, max(32, 2 * D))


def elu1(x):
    """phi(x) = elu(x) + 1 > 0, the linear-attention feature map (Katharopoulos et al. 2020)."""
    return F.elu(x) + 1


def slot_mask(T, S, device=None):
    """(T, T*S) bool: query t sees slot j*S + s iff j <= t (the trace state h_{j-1}, all past)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril().repeat_interleave(S, dim=1)


def linear_attention_ref(q, k, v, eps=1e-6):
    """Reference (quadratic, masked) causal linear attention over trace slots:
    y_t = sum_{j<=t,s} (phi(q_t).phi(k_js)) v_js / sum_{j<=t,s} phi(q_t).phi(k_js).
    q (B, H, T, D), k, v (B, H, T*S, D) -> y (B, H, T, D). Memory O(T^2 S)."""
    T = q.shape[2]
    w = (elu1(q) @ elu1(k).transpose(-1, -2)) * slot_mask(T, k.shape[2] // max(T, 1), q.device)  # (B, H, T, T*S)
    return (w @ v) / (w.sum(-1, keepdim=True) + eps)


class _TraceAttention(nn.Module):
    """Parameters shared by every attention reader: q_t = W_q u_t, k = W_k z, v = W_v z with
    z = h^s + E_s. A slot whose trace state is still zero (before the first token) holds E_s
    alone: a fixed "nothing yet" slot, so position 0 has something to attend to."""

    def __init__(self, cfg):
        super().__init__()
        C, S = cfg.n_embd, len(cfg.alphas)
        self.n_head, self.n_slot = cfg.n_head, S
        self.q = nn.Linear(C, C, bias=False)  # W_q, reads the current u_t
        self.k = nn.Linear(C, C, bias=False)  # W_k, reads trace states only
        self.v = nn.Linear(C, C, bias=False)  # W_v, reads trace states only
        self.trace_emb = nn.Parameter(torch.zeros(S, C))  # E_s: which timescale a slot holds

    @torch.no_grad()
    def init_weights(self, cfg):
        """E_s, W_q, W_k, W_v ~ N(0, 0.02), GPT-2's default (E_s small, like a positional embedding), in
        parameters() order: the draws a seed has always given. Returns them (spen.init_weights)."""
        return [p.normal_(0.0, 0.02) for p in self.parameters()]

    def no_matmul_params(self):
        return [self.trace_emb]  # added to the slots, not multiplied: left out of the 6N FLOPs

    def split(self, x):
        """(..., C) -> (..., H, D)."""
        return x.unflatten(-1, (self.n_head, x.shape[-1] // self.n_head))


# ------------------------------------------------------------------------------------------
# reads='state': attention over the S slots of h_{t-1} only. x̂_t = f(u_t, h_{t-1}^1..S).


class _StateAttention(_TraceAttention):
    """Per position t, attention of q_t over the S slots z_s = h_{t-1}^s + E_s of that position
    alone. forward is position-wise (no mixing across t), so step() is forward at T = 1."""

    def forward(self, u, h_prev):
        q = self.split(self.q(u))  # (B, T, H, D)
        z = h_prev + self.trace_emb  # (B, T, S, C)
        k, v = self.split(self.k(z)), self.split(self.v(z))  # (B, T, S, H, D)
        # elementwise products and sums over D and S: one pass over k and v, where a batched
        # matmul would run B*T*H products of a (1 x D) by a (D x S) matrix
        w = self.weights(q.unsqueeze(2), k)  # (B, T, S, H), sums to 1 over s
        return (w.unsqueeze(-1) * v).sum(2).flatten(-2)  # (B, T, H, D) -> (B, T, C)

    def init_state(self, batch_size, device):
        return None  # reads only the traces the block holds

    def step(self, u_t, h_prev_t, state):
        return self.forward(u_t[:, None], h_prev_t[:, None])[:, 0], state  # (B, C)

    def state_floats(self, T):
        return 0

    def attn_flops(self, T):
        return 4 * self.n_slot * self.q.in_features  # q.k and w.v over S slots: 2 S C each


class SoftmaxAttnState(_StateAttention):
    """x̂_t = sum_s softmax_s(q_t.k_s / sqrt(D)) v_s over the S slots of h_{t-1}."""

    def weights(self, q, k):
        scores = (q * k).sum(-1) * q.shape[-1] ** -0.5  # (B, T, 1, H, D) . (B, T, S, H, D) -> (B, T, S, H)
        return scores.softmax(2)


class LinearAttnState(_StateAttention):
    """x̂_t = sum_s phi(q_t).phi(k_s) v_s / sum_s phi(q_t).phi(k_s) over the S slots of h_{t-1}."""

    def weights(self, q, k, eps=1e-6):
        w = (elu1(q) * elu1(k)).sum(-1)  # (B, T, S, H), > 0
        return w / (w.sum(2, keepdim=True) + eps)


# ------------------------------------------------------------------------------------------
# reads='history': attention over every past (position, trace) slot. Lossless (see docstring).


class _HistoryAttention(_TraceAttention):
    """Slot (j, s) for j <= t holds z_{j,s} = h_{j-1}^s + E_s; slots are ordered j*S + s, so the
    causal mask is a lower-triangular (T, T) mask repeated S times (`slot_mask`)."""

    def heads(self, x):
        """(B, N, C) -> (B, H, N, D)."""
        return self.split(x).transpose(1, 2)

    def qkv(self, u, h_prev):
        B, T, S, C = h_prev.shape
        z = (h_prev + self.trace_emb).view(B, T * S, C)  # (B, T*S, C) slots of the past traces
        return self.heads(self.q(u)), self.heads(self.k(z)), self.heads(self.v(z))  # (B, H, ., D)

    def forward(self, u, h_prev):
        B, T, S, C = h_prev.shape
        q, k, v = self.qkv(u, h_prev)  # q (B, H, T, D), k, v (B, H, T*S, D)
        y = self.attend(q, k, v)  # (B, H, T, D), causal over slots
        return y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)


class LinearAttnHistory(_HistoryAttention):
    """Causal linear attention over all past slots, phi = elu + 1 (`linear_attention_ref`).
    forward is the chunked form (fast path, O(T) memory): inside a chunk of L positions the
    masked quadratic form; across chunks the running sums sum phi(k) v^T (D x D) and sum phi(k)
    of all earlier chunks (an exclusive cumsum over chunks). step keeps those sums."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.chunk = reader_chunk_len(cfg.n_embd // cfg.n_head)  # L: positions per chunk (any L: the same values)
        self.loop = cfg.trace_method == "loop"  # run the reference (config's one switch for every reference)

    def attend(self, q, k, v, eps=1e-6):
        if self.loop:
            return linear_attention_ref(q, k, v, eps)
        B, H, T, D = q.shape
        S, L = self.n_slot, self.chunk
        pad = (-T) % L  # zero-padded queries/slots come after every real query: never visible
        fq = elu1(F.pad(q, (0, 0, 0, pad))).view(B, H, -1, L, D)  # (B, H, N, L, D)
        fk = elu1(F.pad(k, (0, 0, 0, pad * S))).view(B, H, -1, L * S, D)  # (B, H, N, L*S, D)
        v = F.pad(v, (0, 0, 0, pad * S)).view(B, H, -1, L * S, D)  # (B, H, N, L*S, D)
        w = (fq @ fk.transpose(-1, -2)) * slot_mask(L, S, q.device)  # (B, H, N, L, L*S) in-chunk
        kv = fk.transpose(-1, -2) @ v  # (B, H, N, D, D) each chunk's sum phi(k) v^T
        kv = F.pad(kv.cumsum(2), (0, 0, 0, 0, 1, 0))[:, :, :-1]  # shift by one chunk: earlier chunks only
        ks = F.pad(fk.sum(3).cumsum(2), (0, 0, 1, 0))[:, :, :-1]  # (B, H, N, D) sum phi(k), earlier chunks
        num = w @ v + fq @ kv  # (B, H, N, L, D)
        den = w.sum(-1) + (fq * ks.unsqueeze(3)).sum(-1)  # (B, H, N, L)
        return (num / (den.unsqueeze(-1) + eps)).view(B, H, -1, D)[:, :, :T]  # (B, H, T, D)

    def init_state(self, batch_size, device):
        H, D = self.n_head, self.q.in_features // self.n_head
        return dict(kv=torch.zeros(batch_size, H, D, D, device=device),
                    ksum=torch.zeros(batch_size, H, D, device=device))

    def step(self, u_t, h_prev_t, state):
        q, k, v = self.qkv(u_t[:, None], h_prev_t[:, None])  # q (B, H, 1, D), k, v (B, H, S, D)
        fk = elu1(k)
        kv = state["kv"] + fk.transpose(-1, -2) @ v  # (B, H, D, D)
        ksum = state["ksum"] + fk.sum(2)  # (B, H, D)
        fq = elu1(q).to(kv.dtype)  # (B, H, 1, D); the running sums stay float32
        y = (fq @ kv) / ((fq * ksum[:, :, None]).sum(-1, keepdim=True) + 1e-6)  # (B, H, 1, D)
        return y.reshape(u_t.shape), dict(kv=kv, ksum=ksum)  # (B, C)

    def state_floats(self, T):
        C, D = self.q.in_features, self.q.in_features // self.n_head
        return C * D + C  # H (D x D) sums of phi(k) v^T and H sums of phi(k)

    def attn_flops(self, T):
        C, S, D = self.q.in_features, self.n_slot, self.q.in_features // self.n_head
        return 4 * self.chunk * S * C + 2 * (S + 1) * D * C  # in-chunk square + the D x D state


class SoftmaxAttnHistory(_HistoryAttention):
    """Causal softmax attention over all past slots (F.scaled_dot_product_attention):
    x̂_t = sum_{j<=t,s} softmax_js(q_t.k_js / sqrt(D)) v_js. step keeps a cache of k, v."""

    def attend(self, q, k, v):
        T = q.shape[2]
        mask = slot_mask(T, k.shape[2] // max(T, 1), q.device)  # (T, T*S)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, D)

    def init_state(self, batch_size, device):
        H, D = self.n_head, self.q.in_features // self.n_head
        empty = torch.zeros(batch_size, H, 0, D, device=device)
        return dict(k=empty, v=empty)

    def step(self, u_t, h_prev_t, state):
        q, k, v = self.qkv(u_t[:, None], h_prev_t[:, None])  # q (B, H, 1, D), k, v (B, H, S, D)
        k = torch.cat([state["k"], k.to(state["k"].dtype)], dim=2)  # (B, H, S*(t+1), D)
        v = torch.cat([state["v"], v.to(state["v"].dtype)], dim=2)
        y = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype))  # all cached slots are past
        return y.reshape(u_t.shape), dict(k=k, v=v)  # (B, C)

    def state_floats(self, T):
        return 2 * T * self.n_slot * self.q.in_features  # k and v of T*S slots

    def attn_flops(self, T):
        return 4 * T * self.n_slot * self.q.in_features  # full T*S square, as nanoGPT counts it


# ------------------------------------------------------------------------------------------
# Readers that WRITE a state of key-value outer products of their own (module docstring). Layouts:
# q (B, H, S_w, T, D) for ema_kv (a query per decay), (B, H, T, D) for delta; k, v (B, H, T, D); beta (B, H, T).


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


def delta_rule_step(q_t, k_t, v_t, beta_t, M, a=0.0):
    """One token of the delta rule with a fixed decay g = 1 - a (gated DeltaNet, Yang et al. 2025, with
    a constant gate; a = 0: DeltaNet): read the state, decay it, correct what it holds at k_t to v_t.
        y_t = M_{t-1} q_t                                         read the state BEFORE t's write
        M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T      the write
    q_t, k_t, v_t (B, H, D) (q, k unit vectors), beta_t (B, H) in (0, 1), M (B, H, D, D) (value
    index first: M k is the value stored at key k) -> y_t (B, H, D), M_t."""
    y = (M @ q_t.unsqueeze(-1)).squeeze(-1)  # (B, H, D)
    M = (1 - a) * M
    err = v_t - (M @ k_t.unsqueeze(-1)).squeeze(-1)  # (B, H, D) v_t - g M k_t: what the state gets wrong
    return y, M + (beta_t[..., None] * err).unsqueeze(-1) * k_t.unsqueeze(-2)


def delta_rule_ref(q, k, v, beta, a=0.0):
    """Reference: the plain loop over time of `delta_rule_step`, from M_{-1} = 0 (the definition).
    q, k, v (B, H, T, D), beta (B, H, T) -> y (B, H, T, D)."""
    B, H, T, D = q.shape
    M = q.new_zeros(B, H, D, D)
    out = []
    for q_t, k_t, v_t, b_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2)):
        y_t, M = delta_rule_step(q_t, k_t, v_t, b_t, M, a)
        out.append(y_t)
    return torch.stack(out, 2) if out else v.new_zeros(B, H, 0, D)  # (B, H, T, D)


def delta_rule_chunked(q, k, v, beta, a=0.0, chunk=64):
    """Fast path of `delta_rule_ref` (the same values): the chunked WY form of (gated) DeltaNet
    (Yang et al. 2024, 2025), in chunks of L = min(chunk, T), with P = M^T (D x D, key index
    first) and g = 1 - a. Within a chunk that starts from state P_0, with local time i = 0..L-1,
    the state after position i is g^(i+1) P_0 + sum_{j<=i} g^(i-j) k_j w_j^T, with writes
    w_i = beta_i (v_i - g P_{i-1}^T k_i); stacked as rows, they solve the unit lower-triangular
        (I + tril_{-1}(diag(beta) (K K^T * G))) Wr = diag(beta) (V - diag(g^(i+1)) K P_0),
    G_ij = g^(i-j); then Y = diag(g^i) Q P_0 + tril_{-1}(Q K^T * G / g) Wr (the state before each
    write) and P_end = g^L P_0 + (diag(g^(L-1-j)) K)^T Wr. Every factor is a power g^n <= 1 of
    local time, never g^-n: fast decays and long chunks lose nothing. N = ceil(T / L) Python steps.
    q, k, v (B, H, T, D), beta (B, H, T) -> y (B, H, T, D)."""
    B, H, T, D = q.shape
    L = max(1, min(chunk, T))
    pad = (-T) % L  # zero keys and beta after the end write nothing; their outputs are cut off
    q, k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, L)) for x in (q, k, v))  # (B, H, N, L, D)
    beta = F.pad(beta, (0, pad)).unflatten(2, (-1, L))[..., None]  # (B, H, N, L, 1)
    read, start, end, gL = (x[0] for x in _decay_tables((a,), L, q.dtype, q.device, weight=False))
    write = (1 - a) * read  # (L, L) g^(i-j) for j < i, else 0
    start, end, eye = start[:, None], end[:, None], torch.eye(L, dtype=q.dtype, device=q.device)  # (L, 1)
    P = q.new_zeros(B, H, D, D)  # the state before the chunk, P = M^T
    out = []
    for q_n, k_n, v_n, b_n in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2)):  # (B, H, L, .)
        A = eye + ((b_n * k_n) @ k_n.transpose(-1, -2)) * write  # (B, H, L, L) unit lower triangular
        UW = torch.linalg.solve_triangular(A, torch.cat([b_n * v_n, b_n * (1 - a) * start * k_n], -1),
                                           upper=False, unitriangular=True)  # (B, H, L, 2D)
        w = UW[..., :D] - UW[..., D:] @ P  # (B, H, L, D) the writes w_i
        out.append((start * q_n) @ P + ((q_n @ k_n.transpose(-1, -2)) * read) @ w)  # (B, H, L, D)
        P = gL * P + (end * k_n).transpose(-1, -2) @ w
    return torch.cat(out, 2)[:, :, :T] if out else v  # (B, H, T, D)


def l2norm(x, eps=1e-6):
    """x / sqrt(|x|^2 + eps) over the last dim (fla's DeltaNet form). Not F.normalize: SPEN's key
    at t = 0 is exactly zero (h_{-1} = 0), where x / max(|x|, 1e-12) has slope 1e12, which
    overflows an fp16 gradient; here the slope at 0 is eps^-1/2 = 1e3."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class _WriteReader(nn.Module):
    """Parameters shared by the two write readers: k_t = W_k [h_{t-1}^1 ; ... ; h_{t-1}^S] (S*C -> C,
    the trace state just before t: mostly the previous token, what the short convolution before
    the keys gives the field's models (Mamba, GatedDeltaNet), so none is added), v_t = W_v u_t
    (C -> C, written after t's read) and the query projection W_q of u_t (n_query * C outputs).
    No biases. With read_norm, each head's read y leaves as RMSNorm(y) g (gain g (D,) shared by the
    heads, 1 at init), GatedDeltaNet's output norm. The state and its arithmetic are float32
    under autocast and for half-precision weights (the projections follow autocast; what they
    feed runs with autocast off, as in ema.py): the slow decay sums ~50 writes and the delta
    rule corrects its state every token, which bf16 would round visibly."""

    writes = True  # a state of its own (spen.check: only these take write_alphas and read_norm)

    def __init__(self, cfg, n_query):
        super().__init__()
        C, S, D = cfg.n_embd, len(cfg.alphas), cfg.n_embd // cfg.n_head
        self.n_head = cfg.n_head
        self.chunk = reader_chunk_len(D)  # L: positions per chunk of the fast path (any L: the same values)
        self.loop = cfg.trace_method == "loop"  # run the reference (config's one switch for every reference)
        self.gain = nn.Parameter(torch.ones(D)) if cfg.read_norm else None  # g, the read norm's gain
        self.q = nn.Linear(C, n_query * C, bias=False)  # W_q, reads the current u_t
        self.k = nn.Linear(S * C, C, bias=False)  # W_k, reads the trace state h_{t-1} only
        self.v = nn.Linear(C, C, bias=False)  # W_v, reads u_t (written into the state after t's read)

    @torch.no_grad()
    def init_weights(self, cfg):
        """W_q, W_k, W_v (and delta's W_beta) ~ N(0, 0.02), GPT-2's default; the gain g = 1. Returns them."""
        gain = [self.gain.fill_(1.0)] if self.gain is not None else []
        return gain + [m.weight.normal_(0.0, 0.02) for m in self.children()]

    def extra(self, u):
        return None  # what else a write needs from u_t (the delta rule's beta)

    def heads(self, x):
        """(B, T, n*C) -> (B, H, n, T, D), float32 if x is half."""
        (B, T, nC), C = x.shape, self.v.in_features
        x = x.float() if x.dtype in ema.HALF else x
        return x.view(B, T, nC // C, self.n_head, C // self.n_head).permute(0, 3, 2, 1, 4)

    def read_out(self, y):
        """y (..., D) -> RMSNorm(y) g with read_norm, else y."""
        return y if self.gain is None else F.rms_norm(y, self.gain.shape, self.gain.to(y.dtype), eps=1e-6)

    def forward(self, u, h_prev):
        q, k, v = self.q(u), self.k(h_prev.flatten(-2)), self.v(u)  # (B, T, n C), (B, T, C), (B, T, C)
        extra = self.extra(u)
        with ema._no_autocast(u.device):
            y = self.read_out(self.core(*self.prepare(q, k, v, extra)))  # `core`: the fast path or, with
            # trace_method='loop', the reference loop (the same values)
        return y.transpose(1, 2).flatten(2)  # (B, H, T, D) -> (B, T, C), float32

    def init_state(self, batch_size, device):
        return dict(M=torch.zeros(batch_size, *self.state_shape, device=device))  # float32

    def step(self, u_t, h_prev_t, state):
        """The recurrence, one token: read M_{t-1}, then write (`one_step`)."""
        u, h = u_t[:, None], h_prev_t[:, None]  # T = 1
        q, k, v, extra = self.q(u), self.k(h.flatten(-2)), self.v(u), self.extra(u)
        with ema._no_autocast(u_t.device):
            args = [x.select(-2 if x.dim() > 3 else -1, 0) for x in self.prepare(q, k, v, extra)]  # drop T
            M = state["M"].to(args[0].dtype)  # float32 (float64 for a float64 model)
            y, M = self.one_step(*args, M)  # (B, H, D)
        return self.read_out(y).flatten(1), dict(M=M)  # (B, C)

    def state_floats(self, T):
        return math.prod(self.state_shape)


class EMAKVState(_WriteReader):
    """('ema_kv', 'state'): linear attention with fixed decays (as RetNet, with one query per decay),
    a state of S_w (D x D) matrices per head of key-value outer products:
        M^s_t = (1 - a_s) M^s_{t-1} + a_s k_t v_t^T,   x̂_t = sum_s (M^s_{t-1})^T q^s_t,
    q^s_t = W_q^s u_t / sqrt(D); the decays a_s are cfg.write_alphas (S_w of them), by default the
    paper's trace decays. `ema_kv_ref` is the definition, `ema_kv_chunked` the fast path."""

    def __init__(self, cfg):
        super().__init__(cfg, n_query=len(cfg.write_alphas or cfg.alphas))  # W_q: C -> S_w*C
        self.alphas = cfg.write_alphas or cfg.alphas  # the S_w write decays
        D = cfg.n_embd // cfg.n_head
        self.state_shape = cfg.n_head, len(self.alphas), D, D  # H, S_w, D, D: S_w*C*D floats

    def prepare(self, q, k, v, extra):
        q = self.heads(q) * (self.v.in_features // self.n_head) ** -0.5  # (B, H, S_w, T, D) / sqrt(D)
        return q, self.heads(k)[:, :, 0], self.heads(v)[:, :, 0]  # k, v (B, H, T, D)

    def core(self, q, k, v):
        return ema_kv_ref(q, k, v, self.alphas) if self.loop else ema_kv_chunked(q, k, v, self.alphas, self.chunk)

    def one_step(self, q_t, k_t, v_t, M):
        return ema_kv_step(q_t, k_t, v_t, M, self.alphas)

    def attn_flops(self, T):  # chunked: in-chunk q^s.k per decay and their sum times v; per decay, read and carry M
        C, D, L, Sw = self.v.in_features, self.v.in_features // self.n_head, min(self.chunk, T), len(self.alphas)
        return 2 * (Sw + 1) * L * C + 4 * Sw * C * D


class DeltaRuleState(_WriteReader):
    """('delta', 'state'): the delta rule (DeltaNet: Schlag et al. 2021, Yang et al. 2024), one D x D
    matrix per head, with no decay (g = 1) or the fixed decay g = 1 - a of write_alphas = (a,):
        M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T,   x̂_t = M_{t-1} q_t,
    k_t and q_t = W_q u_t L2-normalised per head, beta_t = sigmoid(W_beta u_t) per head (W_beta:
    C -> H). `delta_rule_ref` is the definition, `delta_rule_chunked` the fast path."""

    max_write_decays = 1  # spen.check: a single state, one decay

    def __init__(self, cfg):
        super().__init__(cfg, n_query=1)  # W_q: C -> C
        self.beta = nn.Linear(cfg.n_embd, cfg.n_head, bias=False)  # W_beta: the write strength per head
        self.a = cfg.write_alphas[0] if cfg.write_alphas else 0.0  # a = 1 - g; 0: no decay (DeltaNet)
        D = cfg.n_embd // cfg.n_head
        self.state_shape = cfg.n_head, D, D  # H, D, D: C*D floats

    def extra(self, u):
        return self.beta(u)  # (B, T, H) logits

    def prepare(self, q, k, v, extra):
        q, k, v = (self.heads(x)[:, :, 0] for x in (q, k, v))  # (B, H, T, D)
        beta = torch.sigmoid(extra.float() if extra.dtype in ema.HALF else extra).transpose(1, 2)  # (B, H, T) in (0, 1)
        return l2norm(q), l2norm(k), v, beta

    def core(self, q, k, v, beta):
        a, L = self.a, self.chunk
        return delta_rule_ref(q, k, v, beta, a) if self.loop else delta_rule_chunked(q, k, v, beta, a, L)

    def one_step(self, q_t, k_t, v_t, beta_t, M):
        return delta_rule_step(q_t, k_t, v_t, beta_t, M, self.a)

    def attn_flops(self, T):  # chunked: L x L squares K K^T, solve (2D columns), Q K^T, times W; P: 3 products
        C, D, L = self.v.in_features, self.v.in_features // self.n_head, min(self.chunk, T)
        return 8 * L * C + 6 * C * D


# ------------------------------------------------------------------------------------------
# context='selective': the positive control. u (B, T, C) -> h (B, T, S, C), like EMAContext.


class SelectiveContext(nn.Module):
    """h_t^s = (1 - a_t^s) h_{t-1}^s + a_t^s u_t with a_t^s = sigmoid(W_a u_t + b_s) per channel.
    W_a (C x C) is shared by the S traces and b_s (S, C) starts at logit(a_s), so with W_a = 0
    (its initialisation) this is exactly the fixed-decay EMA. Always float32, like ema.traces."""

    def __init__(self, cfg):
        super().__init__()
        self.alphas, self.trace_method = cfg.alphas, cfg.trace_method
        self.gate = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)  # W_a
        self.gate_bias = nn.Parameter(torch.zeros(len(cfg.alphas), cfg.n_embd))  # b_s

    @torch.no_grad()
    def init_weights(self, cfg):
        """W_a = 0, b_s = logit(a_s): a_t^s = a_s, the paper's fixed EMA at init. Returns them (spen.init_weights)."""
        a = torch.tensor(cfg.alphas, dtype=self.gate_bias.dtype, device=self.gate_bias.device)[:, None]  # (S, 1)
        return [self.gate.weight.zero_(), self.gate_bias.copy_(torch.logit(a.clamp(max=1 - 1e-6)))]  # (S, 1) -> (S, C)

    def no_matmul_params(self):
        return [self.gate_bias]  # added to W_a u_t, not multiplied: left out of the 6N FLOPs

    def decay(self, u):
        """u (..., C) -> a (..., S, C) in (0, 1), float32."""
        return torch.sigmoid(self.gate(u).float().unsqueeze(-2) + self.gate_bias.float())

    def forward(self, u):
        B, T, C = u.shape
        S = len(self.alphas)
        # fold the S traces into the batch: a selective trace runs one row per (b, s)
        a = self.decay(u).permute(0, 2, 1, 3).reshape(B * S, T, C)  # (B, T, S, C) -> (B*S, T, C)
        x = u.float().unsqueeze(1).expand(B, S, T, C).reshape(B * S, T, C)  # (B*S, T, C)
        if self.trace_method == "loop":  # the reference loop, one step per token
            h = ema.selective_traces_ref(x, a)  # (B*S, T, C)
        else:
            h = ema.selective_traces(x, a, method=self.trace_method)  # (B*S, T, C)
        return h.view(B, S, T, C).transpose(1, 2)  # (B, T, S, C)

    def step(self, u_t, h):
        """u_t (B, C), h_{t-1} (B, S, C) -> h_t (B, S, C)."""
        return torch.lerp(h, u_t.float().unsqueeze(1), self.decay(u_t))


# (predictor, reads) -> class; spen.READERS adds the paper's ('linear', 'state'). A new reader: one line here.
VARIANT_READERS = {
    ("linear_attn", "state"): LinearAttnState,
    ("softmax_attn", "state"): SoftmaxAttnState,
    ("linear_attn", "history"): LinearAttnHistory,
    ("softmax_attn", "history"): SoftmaxAttnHistory,
    ("ema_kv", "state"): EMAKVState,
    ("delta", "state"): DeltaRuleState,
}

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

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import ema
import writes
from writes import delta_rule_ref, delta_rule_step, ema_kv_ref, ema_kv_step  # noqa: F401 (lab/'s names)


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


def slot_mask(T, S, device=None, window=0):
    """(T, T*S) bool: query t sees slot j*S + s iff j <= t (the trace state h_{j-1}, all past), and
    with a window w >= 1 only iff t - w < j <= t (the last w positions)."""
    seen = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return (seen.triu(1 - window) if window else seen).repeat_interleave(S, dim=1)


def linear_attention_ref(q, k, v, eps=1e-6):
    """Reference (quadratic, masked) causal linear attention over trace slots:
    y_t = sum_{j<=t,s} (phi(q_t).phi(k_js)) v_js / sum_{j<=t,s} phi(q_t).phi(k_js).
    q (B, H, T, D), k, v (B, H, T*S, D) -> y (B, H, T, D). Memory O(T^2 S)."""
    T = q.shape[2]
    w = (elu1(q) @ elu1(k).transpose(-1, -2)) * slot_mask(T, k.shape[2] // max(T, 1), q.device)  # (B, H, T, T*S)
    return (w @ v) / (w.sum(-1, keepdim=True) + eps)


class Reader(nn.Module):
    """The reader contract, with its defaults: x̂ = forward(u (B, T, C), h_prev (B, T, S, C)) ->
    (B, T, C), strictly causal (x̂_t from u_t and h_{<t} only). A position-wise reader writes
    forward and what differs from these defaults:
        init_state(B, device) -> None            no state beyond the S*C traces the block holds
        step(u_t, h_prev_t, state) -> (x̂_t, state)   forward at one token
        state_floats(T) -> 0                     numbers step() holds per sequence beyond the traces
        attn_flops(T) -> 0                       forward FLOPs per token beyond its weight matmuls
        no_matmul_params() -> []                 parameters left out of the 6N FLOPs (added, not multiplied)
        init_weights(cfg) -> the parameters it set: matrices ~ N(0, 0.02), GPT-2's default;
                                                 any other parameter needs a rule (an error until it has one)
    spen.Block holds one per block; spen.READERS names them."""

    def init_state(self, batch_size, device):
        return None

    def step(self, u_t, h_prev_t, state):
        return self.forward(u_t[:, None], h_prev_t[:, None])[:, 0], state  # (B, C)

    def state_floats(self, T):
        return 0

    def attn_flops(self, T):
        return 0

    def no_matmul_params(self):
        return []

    @torch.no_grad()
    def init_weights(self, cfg, done=()):
        """Every matrix not in `done` (set by a subclass) ~ N(0, 0.02), in parameters() order (the
        draws a seed has always given); refuses a vector, which needs a rule of its own."""
        done, out = {id(p) for p in done}, list(done)
        for name, p in self.named_parameters():
            if id(p) not in done:
                if p.dim() < 2:
                    raise ValueError(f"{type(self).__name__}.init_weights has no rule for {name!r}; add one")
                out.append(p.normal_(0.0, 0.02))
        return out


class _TraceAttention(Reader):
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
    x̂_t = sum_{j<=t,s} softmax_js(q_t.k_js / sqrt(D)) v_js. step keeps a cache of k, v. With
    cfg.window = w >= 1, a sliding window: only the slots of the last w positions (t - w < j <= t),
    and the cache keeps just those (bounded: 2 w S C floats)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.window = cfg.window  # w; 0: every past position

    def attend(self, q, k, v):
        T = q.shape[2]
        mask = slot_mask(T, k.shape[2] // max(T, 1), q.device, self.window)  # (T, T*S)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, D)

    def init_state(self, batch_size, device):
        H, D = self.n_head, self.q.in_features // self.n_head
        empty = torch.zeros(batch_size, H, 0, D, device=device)
        return dict(k=empty, v=empty)

    def step(self, u_t, h_prev_t, state):
        q, k, v = self.qkv(u_t[:, None], h_prev_t[:, None])  # q (B, H, 1, D), k, v (B, H, S, D)
        k = torch.cat([state["k"], k.to(state["k"].dtype)], dim=2)  # (B, H, S*(t+1), D)
        v = torch.cat([state["v"], v.to(state["v"].dtype)], dim=2)
        if self.window:  # keep the slots of the last w positions only
            k, v = k[:, :, -self.window * self.n_slot:], v[:, :, -self.window * self.n_slot:]
        y = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype))  # all cached slots are past
        return y.reshape(u_t.shape), dict(k=k, v=v)  # (B, C)

    def state_floats(self, T):
        return 2 * min(T, self.window or T) * self.n_slot * self.q.in_features  # k and v of the slots kept

    def attn_flops(self, T):
        return 4 * T * self.n_slot * self.q.in_features  # full T*S square, as nanoGPT counts it


# ------------------------------------------------------------------------------------------
# Readers that WRITE a state of key-value outer products of their own (module docstring); the
# rules themselves (step, loop, chunked form) are writes.py's.


class ShortConv(nn.Module):
    """The short causal convolution the field puts on q, k and v (fla's ShortConvolution, Mamba's
    conv1d): depthwise over time, kernel K, then SiLU,
        y_t = SiLU(sum_{i<K} w_i * x_{t-K+1+i}),   x_{<0} = 0.
    forward (B, T, X) -> (B, T, X) is F.conv1d (the loop: the sum over the K shifted copies,
    `trace_method='loop'`); step keeps the last K - 1 inputs (B, K - 1, X)."""

    def __init__(self, X, K, loop=False):
        super().__init__()
        self.loop = loop
        self.weight = nn.Parameter(torch.empty(X, K))  # w_i per channel; w[:, K - 1] weights x_t

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
    (n_query * C outputs). No biases. With conv = K >= 1, each of q, k, v passes a ShortConv of
    kernel K over time (k's spans h_{t-K..t-1}: still u_{<t} only, so read-before-write holds).
    With read_norm, each head's read y leaves as RMSNorm(y) g (gain g (D,), 1 at init). The
    state and its arithmetic are float32 under autocast and for half-precision weights (the
    projections follow autocast; the rule runs with autocast off, as in ema.py): the slow decay
    sums ~50 writes and the delta rule corrects its state every token, which bf16 would round."""

    writes = True  # a state of its own (spen.check: only these take write_alphas, read_norm and conv)

    def __init__(self, cfg, n_query, state_shape):
        super().__init__()
        C, S, H = cfg.n_embd, len(cfg.alphas), cfg.n_head
        self.n_head, self.D, self.state_shape = H, C // H, state_shape
        self.chunk = reader_chunk_len(self.D)  # L: positions per chunk of the fast path (any L: the same values)
        self.loop = cfg.trace_method == "loop"  # run the reference (config's one switch for every reference)
        self.gain = nn.Parameter(torch.ones(self.D)) if cfg.read_norm else None  # g, the read norm's gain
        self.q = nn.Linear(C, n_query * C, bias=False)  # W_q, reads the current u_t
        self.k = nn.Linear(S * C, C, bias=False)  # W_k, reads the trace state h_{t-1} only
        self.v = nn.Linear(C, C, bias=False)  # W_v, reads u_t (written into the state after t's read)
        self.convs = nn.ModuleList(ShortConv(n, cfg.conv, self.loop) for n in (n_query * C, C, C)) if cfg.conv else None

    @torch.no_grad()
    def init_weights(self, cfg, done=()):
        """Matrices ~ N(0, 0.02), GPT-2's default; the read norm's gain 1; a convolution's taps
        ~ U(-1/sqrt(K), 1/sqrt(K)), torch's Conv1d default (N(0, 0.02) taps would shrink q, k, v
        fifty-fold at init). Returns them."""
        done = list(done) + ([self.gain.fill_(1.0)] if self.gain is not None else [])
        for m in self.convs or ():
            done.append(m.weight.uniform_(-m.weight.shape[1] ** -0.5, m.weight.shape[1] ** -0.5))
        return super().init_weights(cfg, done)

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

    def heads(self, x):
        """(B, T, n*C) -> (B, H, n, T, D), float32 if x is half."""
        (B, T, nC), H = x.shape, self.n_head
        x = x.float() if x.dtype in ema.HALF else x
        return x.view(B, T, nC // (H * self.D), H, self.D).permute(0, 3, 2, 1, 4)

    def read_out(self, y):
        """y (B, H, T, D) -> (B, T, C), RMSNorm(y) g per head with read_norm."""
        if self.gain is not None:
            y = F.rms_norm(y, self.gain.shape, self.gain.to(y.dtype), eps=1e-6)
        return y.transpose(1, 2).flatten(2)

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

    def conv_flops(self):
        return sum(2 * c.weight.numel() for c in self.convs) if self.convs else 0  # K taps per channel


class EMAKVState(_WriteReader):
    """('ema_kv', 'state'): linear attention with fixed decays (as RetNet, with one query per decay),
    a state of S_w (D x D) matrices per head of key-value outer products:
        M^s_t = (1 - a_s) M^s_{t-1} + a_s k_t v_t^T,   x̂_t = sum_s (M^s_{t-1})^T q^s_t,
    q^s_t = W_q^s u_t / sqrt(D); the decays a_s are cfg.write_alphas (S_w of them), by default the
    paper's trace decays. writes.ema_kv_ref is the definition, writes.ema_kv_chunked the fast path."""

    def __init__(self, cfg):
        self_alphas = cfg.write_alphas or cfg.alphas  # the S_w write decays
        D = cfg.n_embd // cfg.n_head
        super().__init__(cfg, len(self_alphas), (cfg.n_head, len(self_alphas), D, D))  # W_q: C -> S_w*C; S_w*C*D floats
        self.alphas = self_alphas

    def forward(self, u, h_prev):
        (q, k, v), _ = self.project(u, h_prev)  # (B, T, S_w C), (B, T, C), (B, T, C)
        with ema._no_autocast(u.device):
            q = self.heads(q) * self.D ** -0.5  # (B, H, S_w, T, D) / sqrt(D)
            k, v = self.heads(k)[:, :, 0], self.heads(v)[:, :, 0]  # (B, H, T, D)
            rule = writes.ema_kv_ref if self.loop else functools.partial(writes.ema_kv_chunked, chunk=self.chunk)
            return self.read_out(rule(q, k, v, self.alphas))  # (B, T, C), float32

    def step(self, u_t, h_prev_t, state):
        (q, k, v), conv = self.project(u_t[:, None], h_prev_t[:, None], state.get("conv"))  # T = 1
        with ema._no_autocast(u_t.device):
            q = self.heads(q)[:, :, :, 0] * self.D ** -0.5  # (B, H, S_w, D)
            k, v = self.heads(k)[:, :, 0, 0], self.heads(v)[:, :, 0, 0]  # (B, H, D)
            y, M = writes.ema_kv_step(q, k, v, state["M"].to(q.dtype), self.alphas)  # (B, H, D)
            return self.read_out(y[:, :, None])[:, 0], self.state(M, conv)  # (B, C)

    def attn_flops(self, T):  # chunked: in-chunk q^s.k per decay and their sum times v; per decay, read and carry M
        C, L, Sw = self.v.in_features, min(self.chunk, T), len(self.alphas)
        return 2 * (Sw + 1) * L * C + 4 * Sw * C * self.D + self.conv_flops()


class DeltaRuleState(_WriteReader):
    """('delta', 'state'): the delta rule (DeltaNet: Schlag et al. 2021, Yang et al. 2024), one D x D
    matrix per head, with no decay (g = 1) or the fixed decay g = 1 - a of write_alphas = (a,):
        M_t = g M_{t-1} + beta_t (v_t - g M_{t-1} k_t) k_t^T,   x̂_t = M_{t-1} q_t,
    k_t and q_t = W_q u_t L2-normalised per head, beta_t = sigmoid(W_beta u_t) per head (W_beta:
    C -> H). writes.delta_rule_ref is the definition, writes.delta_rule_chunked the fast path."""

    max_write_decays = 1  # spen.check: a single state, one decay

    def __init__(self, cfg):
        D = cfg.n_embd // cfg.n_head
        super().__init__(cfg, 1, (cfg.n_head, D, D))  # W_q: C -> C; H D x D: C*D floats
        self.beta = nn.Linear(cfg.n_embd, cfg.n_head, bias=False)  # W_beta: the write strength per head
        self.a = cfg.write_alphas[0] if cfg.write_alphas else 0.0  # a = 1 - g; 0: no decay (DeltaNet)

    def qkvb(self, u, h_prev, conv=None):
        """Unit q and k, v (B, H, T, D) and beta (B, H, T), float32; and the convolution's caches."""
        (q, k, v), conv = self.project(u, h_prev, conv)
        beta = self.beta(u)  # (B, T, H) logits, projected under autocast like q, k, v
        with ema._no_autocast(u.device):
            q, k, v = (self.heads(x)[:, :, 0] for x in (q, k, v))  # (B, H, T, D)
            beta = torch.sigmoid(beta.float() if beta.dtype in ema.HALF else beta).transpose(1, 2)  # (B, H, T) in (0, 1)
            return writes.l2norm(q), writes.l2norm(k), v, beta, conv

    def forward(self, u, h_prev):
        q, k, v, beta, _ = self.qkvb(u, h_prev)
        with ema._no_autocast(u.device):
            if self.loop:
                y = writes.delta_rule_ref(q, k, v, beta, self.a)
            else:
                y = writes.delta_rule_chunked(q, k, v, beta, self.a, self.chunk)
            return self.read_out(y)  # (B, T, C), float32

    def step(self, u_t, h_prev_t, state):
        q, k, v, beta, conv = self.qkvb(u_t[:, None], h_prev_t[:, None], state.get("conv"))  # T = 1
        with ema._no_autocast(u_t.device):
            y, M = writes.delta_rule_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0],
                                          state["M"].to(q.dtype), self.a)  # (B, H, D)
            return self.read_out(y[:, :, None])[:, 0], self.state(M, conv)  # (B, C)

    def attn_flops(self, T):  # chunked: L x L squares K K^T, solve (2D columns), Q K^T, times N; P: 3 products
        return 8 * min(self.chunk, T) * self.v.in_features + 6 * self.v.in_features * self.D + self.conv_flops()


class GatedDeltaState(DeltaRuleState):
    """('gated_delta', 'state'): the gated delta rule with Gated DeltaNet's parameterisation (Yang et
    al., ICLR 2025; fla's GatedDeltaNet layer), reading before it writes:
        M_t = alpha_t M_{t-1} + beta_t (v_t - alpha_t M_{t-1} k_t) k_t^T,   y_t = M_{t-1} q_t,
        alpha_t = exp(-exp(A_log) softplus(W_a u_t + dt_bias)) per head,  beta_t = sigmoid(W_beta u_t),
        x̂_t = RMSNorm(y_t) g * SiLU(W_gate u_t)   (per head norm; no output projection: W_mix follows).
    q and k are L2-normalised as in delta; the short convolution is cfg.conv (the published model
    uses K = 4). writes.gated_delta_ref is the definition, writes.gated_delta_chunked the fast path."""

    max_write_decays = 0  # its decay is learned: write_alphas does not apply

    def __init__(self, cfg):
        super().__init__(cfg)
        C, H = cfg.n_embd, cfg.n_head
        self.decay = nn.Linear(C, H, bias=False)  # W_a
        self.A_log = nn.Parameter(torch.empty(H))  # the decay rate per head, log-parameterised
        self.dt_bias = nn.Parameter(torch.empty(H))  # the gate's bias, inverse softplus of a time step
        self.gate = nn.Linear(C, C, bias=False)  # W_gate, the output gate
        self.out_norm = nn.Parameter(torch.ones(self.D))  # g, the output RMSNorm's gain

    @torch.no_grad()
    def init_weights(self, cfg):
        """fla's: A_log = log U(1, 16); dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1], so
        alpha starts between about exp(-1.6) and exp(-1e-3) per head; the norm's gain 1; matrices as
        the other write readers. Returns them."""
        dt = torch.exp(torch.empty_like(self.dt_bias).uniform_(math.log(1e-3), math.log(0.1)))
        done = [self.A_log.copy_(torch.empty_like(self.A_log).uniform_(1, 16).log()),
                self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt))), self.out_norm.fill_(1.0)]
        return super().init_weights(cfg, done)

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
            rule = writes.gated_delta_ref if self.loop else functools.partial(writes.gated_delta_chunked, chunk=self.chunk)
            y = rule(q, k, v, beta, g)  # (B, H, T, D)
        return self.gated(y, u)  # (B, T, C)

    def step(self, u_t, h_prev_t, state):
        q, k, v, beta, conv = self.qkvb(u_t[:, None], h_prev_t[:, None], state.get("conv"))  # T = 1
        g = self.log_decay(u_t[:, None])[:, :, 0]  # (B, H)
        with ema._no_autocast(u_t.device):
            y, M = writes.gated_delta_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], g,
                                           state["M"].to(q.dtype))  # (B, H, D)
        return self.gated(y[:, :, None], u_t[:, None])[:, 0], self.state(M, conv)  # (B, C)

    def attn_flops(self, T):  # the delta rule's, plus the decays inside the chunk (elementwise: left out)
        return super().attn_flops(T)


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
    ("gated_delta", "state"): GatedDeltaState,
}

"""SPEN: the Sparse Predictive Equilibrium Network, a language model whose only temporal
context is EMA traces (no attention between token states, no positional embedding).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN". The paper
gives the block as: x_t -> EMA traces h_t^(s) -> predict x̂_t -> error e_t = x_t - x̂_t ->
"context mix" -> sparse FFN (top 6% of units) -> residual add; 12 blocks, ~130M parameters,
a = (0.5, 0.1, 0.02). It gives no code, so everything else below is our choice.

One block (pre-norm, two residual adds, as GPT-2):
    u_t   = LN1(x_t)                                        the block input the traces see
    h_t^s = (1 - a_s) h_{t-1}^s + a_s u_t,   h_{-1} = 0     ema.traces (fixed a_s)
    x̂_t   = P(h_{t-1}, u_t)                                 predictor of u_t from PAST traces
    e_t   = u_t - x̂_t                                       prediction error
    x     = x + W_mix [e_t ; x̂_t]                           "context mix" (our choice)
    x     = x + W_2 topk_k(relu(W_1 LN2(x)))                sparse FFN, k = 184 of F = 3072

Shape glossary
    B batch, T time, C width (n_embd), S traces (len(alphas)), V vocabulary,
    F FFN hidden width, k kept FFN units, H heads, D = C / H head width,
    L chunk length and N = ceil(T / L) chunks of the chunked linear attention.

Code name -> paper symbol
    alphas[s]   a_s             ctx(u) -> h   h_t^(s), all S traces, (B, T, S, C)
    hp          h_{t-1}         pred          the predictor, reads hp (and u for attention)
    xhat        x̂_t             e             e_t = u_t - x̂_t
    mix         "context mix"   ffn           sparse FFN keeping top 6%

Choices where the paper is silent (each also flagged where it happens):
 1. Causality: the predictor reads h_{t-1} (traces shifted by one, zero state at t = 0),
    since h_t already contains u_t and would make the prediction trivial.
 2. The error is taken on the normalised input u_t = LN1(x_t), not on the raw residual
    stream (whose scale grows with depth); pre-norm like GPT-2, final LayerNorm before the head.
 3. Context mix: a linear map of [e_t ; x̂_t] (2C -> C) added to the residual stream. Since
    e_t = u_t - x̂_t, this spans the same space as [u_t ; x̂_t]: the error form is the paper's
    wiring, not extra capacity. We chose [e ; x̂] over [e ; all S traces] because the latter
    (4C^2) plus the 3C^2 predictor would overshoot 130M by ~11%.
 4. Predictors (config `predictor`), all reading the same past traces:
      linear        x̂_t = W_p [h_{t-1}^1 ; ... ; h_{t-1}^S]                        (3C^2)
      linear_attn   causal linear attention, feature map elu(.) + 1            (3C^2 + SC)
      softmax_attn  causal softmax attention (F.scaled_dot_product_attention)  (3C^2 + SC)
    Attention: each (position j <= t, trace s) is one key/value slot, built from the trace
    state h_{j-1}^s + E_s only (E_s a learned timescale embedding), never from raw token
    states. The query comes from the CURRENT u_t (standard attention; the strongest, content-
    based reader of the traces; the values hold no u_t, so x̂_t cannot copy it). There is no
    output projection: W_mix follows linearly. So the three predictors have equal parameter
    counts up to S*C per block, and the ablation changes only how the traces are read.
    linear_attn runs a chunked O(T)-memory form (fast path) checked against the quadratic
    masked definition `linear_attention_ref`, forward and backward; step() is its recurrence.
 5. Sparse FFN: no biases, ReLU, keep the k largest of F units per token, exactly k (ties by
    torch.topk); gradient flows only through the kept units. It runs dense (mask after the
    first matmul); a sparse kernel would save most of W_2's FLOPs, not W_1's.
 6. No biases in linear layers; LayerNorms have weight and bias. Tied input/output
    embeddings. No auxiliary prediction loss: x̂ is trained only through the LM loss.
 7. context='selective' (positive control, not in the paper, issue 4): per trace s,
    a_t^s = sigmoid(W_a u_t + b_s) per channel, one C x C matrix W_a shared by the S traces
    (like Mamba's step size shared across its state), b_s initialised to logit(a_s) and W_a
    to zero, so it starts as the fixed-decay model; the only change is input-dependent decay.

Parameter counts (measured by `python spen.py`; paper: ~130M):
    linear 130,684,416 | linear_attn / softmax_attn 130,712,064 | selective (+linear) 137,789,952

Run `python spen.py` (prints parameter counts of every variant, < 10 s on a 2-core CPU,
built on the meta device) and `python -m pytest tests/test_spen.py` (34 tests, ~3 s on a quiet
2-core CPU, 20-55 s while ~6 other jobs share it).
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import ema


@dataclass
class SPENConfig:
    vocab_size: int = 50304  # V: GPT-2 BPE (50257) padded to a multiple of 64 for fast matmuls
    block_size: int = 1024  # T: training context (no positional embedding; only attention predictors grow with it)
    n_layer: int = 12  # number of SPEN blocks (paper: 12)
    n_embd: int = 768  # C: width of x_t, u_t, each trace h_t^(s), x̂_t and e_t (paper: GPT-2 small size)
    alphas: tuple = (0.5, 0.1, 0.02)  # a_s: fixed EMA decays, fast/medium/slow (paper); S = len(alphas)
    ffn_hidden: int = 3072  # F: sparse FFN width (4C)
    ffn_topk: int = 184  # k: hidden units kept per token, 6% of 3072 (paper: "top 6%")
    predictor: str = "linear"  # reads h_{t-1} into x̂_t: 'linear' (paper) | 'linear_attn' | 'softmax_attn'
    context: str = "ema"  # how traces decay: 'ema' (paper, fixed a_s) | 'selective' (control, a_t from u_t)
    n_head: int = 12  # H: heads of the attention predictors (unused by 'linear')
    dropout: float = 0.0  # on the embedding and both residual branches (paper: not stated)

    def __post_init__(self):
        self.alphas = tuple(float(a) for a in self.alphas)  # a JSON round trip gives a list
        if self.predictor not in PREDICTORS:
            raise ValueError(f"unknown predictor {self.predictor!r}; choose one of {sorted(PREDICTORS)}")
        if self.context not in CONTEXTS:
            raise ValueError(f"unknown context {self.context!r}; choose one of {sorted(CONTEXTS)}")
        if not self.alphas or not all(0.0 < a <= 1.0 for a in self.alphas):
            raise ValueError(f"alphas must be a non-empty sequence in (0, 1], got {self.alphas}")
        if not 0 < self.ffn_topk <= self.ffn_hidden:
            raise ValueError(f"need 0 < ffn_topk <= ffn_hidden, got {self.ffn_topk} and {self.ffn_hidden}")
        if self.predictor != "linear" and self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")


def shift_right(h):
    """h_t -> h_{t-1} along time, with the zero state at t = 0. (B, T, ...) -> (B, T, ...)."""
    return F.pad(h, (0,) * (2 * (h.dim() - 2)) + (1, -1))  # pad dim 1 by one in front, drop the last


# --------------------------------------------------------------------------------------------
# Temporal context: u (B, T, C) -> traces h (B, T, S, C); step: u_t (B, C), h (B, S, C) -> h.


class EMAContext(nn.Module):
    """The paper: fixed decays, h_t^s = (1 - a_s) h_{t-1}^s + a_s u_t. No parameters."""

    def __init__(self, cfg):
        super().__init__()
        self.alphas = cfg.alphas

    def forward(self, u):
        return ema.traces(u, self.alphas)  # (B, T, S, C), float32 even under bf16 autocast

    def step(self, u_t, h):
        return ema.step(u_t.float(), h, self.alphas)  # (B, S, C)


class SelectiveContext(nn.Module):
    """Positive control (not in the paper): h_t^s = (1 - a_t^s) h_{t-1}^s + a_t^s u_t with
    a_t^s = sigmoid(W_a u_t + b_s) per channel. W_a (C x C) is shared by the S traces and b_s
    (S, C) starts at logit(a_s), so with W_a = 0 this is exactly the fixed-decay EMA."""

    def __init__(self, cfg):
        super().__init__()
        self.alphas = cfg.alphas
        self.gate = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)  # W_a
        self.gate_bias = nn.Parameter(torch.zeros(len(cfg.alphas), cfg.n_embd))  # b_s

    def decay(self, u):
        """u (..., C) -> a (..., S, C) in (0, 1), float32."""
        return torch.sigmoid(self.gate(u).float().unsqueeze(-2) + self.gate_bias.float())

    def forward(self, u):
        B, T, C = u.shape
        S = len(self.alphas)
        a = self.decay(u)  # (B, T, S, C)
        # fold the S traces into the batch: ema.selective_traces runs one trace per row
        a = a.permute(0, 2, 1, 3).reshape(B * S, T, C)  # (B*S, T, C)
        x = u.float().unsqueeze(1).expand(B, S, T, C).reshape(B * S, T, C)  # (B*S, T, C)
        h = ema.selective_traces(x, a)  # (B*S, T, C)
        return h.view(B, S, T, C).transpose(1, 2)  # (B, T, S, C)

    def step(self, u_t, h):
        return torch.lerp(h, u_t.float().unsqueeze(1), self.decay(u_t))  # (B, S, C)


CONTEXTS = {"ema": EMAContext, "selective": SelectiveContext}


# --------------------------------------------------------------------------------------------
# Predictors: (u (B, T, C), hp = h_{t-1} (B, T, S, C)) -> x̂ (B, T, C), strictly causal.
# step(u_t (B, C), hp_t (B, S, C), state) -> (x̂_t (B, C), state).


class LinearPredictor(nn.Module):
    """x̂_t = W_p [h_{t-1}^1 ; ... ; h_{t-1}^S]: a static linear map of the past traces."""

    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(len(cfg.alphas) * cfg.n_embd, cfg.n_embd, bias=False)  # W_p

    def forward(self, u, hp):
        return self.proj(hp.flatten(-2))  # (B, T, S*C) -> (B, T, C)

    def init_state(self, batch_size, device):
        return None  # the traces, held by the block, are the whole state

    def step(self, u_t, hp_t, state):
        return self.proj(hp_t.flatten(-2)), state  # (B, C)


class _TraceAttention(nn.Module):
    """Shared parts of the attention predictors. Slot (j, s) for j <= t holds the trace state
    z_{j,s} = h_{j-1}^s + E_s; k = W_k z, v = W_v z; the query is q_t = W_q u_t. Slots are
    ordered j*S + s, so the causal mask is a lower-triangular (T, T) mask repeated S times.
    Slot j = 0 holds E_s alone (the zero state before the first token): a fixed "nothing yet"
    slot that every query can see, so position 0 has something to attend to."""

    def __init__(self, cfg):
        super().__init__()
        C, S = cfg.n_embd, len(cfg.alphas)
        self.n_head = cfg.n_head
        self.q = nn.Linear(C, C, bias=False)  # W_q, reads the current u_t
        self.k = nn.Linear(C, C, bias=False)  # W_k, reads trace states only
        self.v = nn.Linear(C, C, bias=False)  # W_v, reads trace states only
        self.trace_emb = nn.Parameter(torch.zeros(S, C))  # E_s: which timescale a slot holds

    def heads(self, x):
        """(B, N, C) -> (B, H, N, D)."""
        B, N, C = x.shape
        return x.view(B, N, self.n_head, C // self.n_head).transpose(1, 2)

    def qkv(self, u, hp):
        B, T, S, C = hp.shape
        z = (hp + self.trace_emb).view(B, T * S, C)  # (B, T*S, C) slots of the past traces
        return self.heads(self.q(u)), self.heads(self.k(z)), self.heads(self.v(z))  # (B, H, ., D)

    def forward(self, u, hp):
        B, T, S, C = hp.shape
        q, k, v = self.qkv(u, hp)  # q (B, H, T, D), k, v (B, H, T*S, D)
        y = self.attend(q, k, v)  # (B, H, T, D), causal over slots
        return y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)


def slot_mask(T, S, device=None):
    """(T, T*S) bool: query t sees slot j*S + s iff j <= t (the trace state h_{j-1}, all past)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril().repeat_interleave(S, dim=1)


def elu1(x):
    """phi(x) = elu(x) + 1 > 0, the linear-attention feature map (Katharopoulos et al. 2020)."""
    return F.elu(x) + 1


def linear_attention_ref(q, k, v, eps=1e-6):
    """Reference (quadratic, masked) causal linear attention over trace slots:
    y_t = sum_{j<=t,s} (phi(q_t).phi(k_js)) v_js / sum_{j<=t,s} phi(q_t).phi(k_js).
    q (B, H, T, D), k, v (B, H, T*S, D) -> y (B, H, T, D). Memory O(T^2 S)."""
    T = q.shape[2]
    w = (elu1(q) @ elu1(k).transpose(-1, -2)) * slot_mask(T, k.shape[2] // T, q.device)  # (B, H, T, T*S)
    return (w @ v) / (w.sum(-1, keepdim=True) + eps)


class LinearAttnPredictor(_TraceAttention):
    """Causal linear attention over the trace slots, phi = elu + 1 (`linear_attention_ref`).
    forward is the chunked form (fast path, O(T) memory): inside a chunk of L positions the
    masked quadratic form; across chunks the running sums sum phi(k) v^T (D x D) and sum phi(k)
    of all earlier chunks (an exclusive cumsum over chunks). step keeps those sums: O(1) state."""

    chunk = 64  # L: positions per chunk; any L >= 1 gives the same result

    def attend(self, q, k, v, eps=1e-6):
        B, H, T, D = q.shape
        S, L = k.shape[2] // T, self.chunk
        pad = (-T) % L  # zero-padded queries/slots come after every real query: never visible
        fq = elu1(F.pad(q, (0, 0, 0, pad))).view(B, H, -1, L, D)  # (B, H, N, L, D)
        fk = elu1(F.pad(k, (0, 0, 0, pad * S))).view(B, H, -1, L * S, D)  # (B, H, N, L*S, D)
        v = F.pad(v, (0, 0, 0, pad * S)).view(B, H, -1, L * S, D)  # (B, H, N, L*S, D)
        w = (fq @ fk.transpose(-1, -2)) * slot_mask(L, S, q.device)  # (B, H, N, L, L*S) in-chunk
        kv = fk.transpose(-1, -2) @ v  # (B, H, N, D, D) each chunk's sum phi(k) v^T
        kv = F.pad(kv.cumsum(2), (0, 0, 0, 0, 1, -1))  # shift by one chunk: earlier chunks only
        ks = F.pad(fk.sum(3).cumsum(2), (0, 0, 1, -1))  # (B, H, N, D) sum phi(k), earlier chunks
        num = w @ v + fq @ kv  # (B, H, N, L, D)
        den = w.sum(-1) + (fq * ks.unsqueeze(3)).sum(-1)  # (B, H, N, L)
        return (num / (den.unsqueeze(-1) + eps)).view(B, H, -1, D)[:, :, :T]  # (B, H, T, D)

    def init_state(self, batch_size, device):
        H, D = self.n_head, self.q.in_features // self.n_head
        return dict(kv=torch.zeros(batch_size, H, D, D, device=device),
                    ksum=torch.zeros(batch_size, H, D, device=device))

    def step(self, u_t, hp_t, state):
        q, k, v = self.qkv(u_t[:, None], hp_t[:, None])  # q (B, H, 1, D), k, v (B, H, S, D)
        fk = elu1(k)
        kv = state["kv"] + fk.transpose(-1, -2) @ v  # (B, H, D, D)
        ksum = state["ksum"] + fk.sum(2)  # (B, H, D)
        fq = elu1(q).to(kv.dtype)  # (B, H, 1, D); the running sums stay float32
        y = (fq @ kv) / ((fq * ksum[:, :, None]).sum(-1, keepdim=True) + 1e-6)  # (B, H, 1, D)
        return y.reshape(u_t.shape), dict(kv=kv, ksum=ksum)  # (B, C)


class SoftmaxAttnPredictor(_TraceAttention):
    """Causal softmax attention over the trace slots (F.scaled_dot_product_attention):
    x̂_t = sum_{j<=t,s} softmax_js(q_t.k_js / sqrt(D)) v_js. step keeps a cache of k, v."""

    def attend(self, q, k, v):
        T = q.shape[2]
        mask = slot_mask(T, k.shape[2] // T, q.device)  # (T, T*S)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, D)

    def init_state(self, batch_size, device):
        H, D = self.n_head, self.q.in_features // self.n_head
        empty = torch.zeros(batch_size, H, 0, D, device=device)
        return dict(k=empty, v=empty)

    def step(self, u_t, hp_t, state):
        q, k, v = self.qkv(u_t[:, None], hp_t[:, None])  # q (B, H, 1, D), k, v (B, H, S, D)
        k = torch.cat([state["k"], k.to(state["k"].dtype)], dim=2)  # (B, H, S*(t+1), D)
        v = torch.cat([state["v"], v.to(state["v"].dtype)], dim=2)
        y = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype))  # all cached slots are past
        return y.reshape(u_t.shape), dict(k=k, v=v)  # (B, C)


PREDICTORS = {"linear": LinearPredictor, "linear_attn": LinearAttnPredictor,
              "softmax_attn": SoftmaxAttnPredictor}


# --------------------------------------------------------------------------------------------


class SparseFFN(nn.Module):
    """y = W_2 (m ⊙ relu(W_1 u)), m = 1 on the k largest of the F units of each token, else 0.
    Reference (dense mask) semantics; implemented as topk + scatter, which is the same
    function with the same gradient (zero for the F - k dropped units)."""

    def __init__(self, cfg):
        super().__init__()
        self.k = cfg.ffn_topk
        self.fc = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)  # W_1
        self.proj = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)  # W_2

    def forward(self, u):
        a = F.relu(self.fc(u))  # (..., F)
        vals, idx = a.topk(self.k, dim=-1)  # (..., k)
        a = torch.zeros_like(a).scatter(-1, idx, vals)  # (..., F), exactly k units survive
        return self.proj(a)  # (..., C)


class Block(nn.Module):
    """One SPEN block, (B, T, C) -> (B, T, C); see the module docstring for the equations."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.ln1 = nn.LayerNorm(C)
        self.ctx = CONTEXTS[cfg.context](cfg)
        self.pred = PREDICTORS[cfg.predictor](cfg)
        self.mix = nn.Linear(2 * C, C, bias=False)  # W_mix: [e ; x̂] -> residual stream (our choice)
        self.ln2 = nn.LayerNorm(C)
        self.ffn = SparseFFN(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        init_weights(self, cfg)  # so a standalone Block (bench.py) starts like one inside SPEN

    def forward(self, x):
        u = self.ln1(x)  # (B, T, C)
        hp = shift_right(self.ctx(u)).to(u.dtype)  # (B, T, S, C) h_{t-1}: the past only (choice 1)
        xhat = self.pred(u, hp).to(u.dtype)  # (B, T, C)
        e = u - xhat  # prediction error e_t
        x = x + self.drop(self.mix(torch.cat([e, xhat], dim=-1)))  # (B, T, 2C) -> (B, T, C)
        return x + self.drop(self.ffn(self.ln2(x)))

    def init_state(self, batch_size, device=None):
        S, C = len(self.ctx.alphas), self.ln1.normalized_shape[0]
        return dict(h=torch.zeros(batch_size, S, C, device=device), pred=self.pred.init_state(batch_size, device))

    def step(self, x_t, state):
        """One token: x_t (B, C), state {h: h_{t-1} (B, S, C), pred: ...} -> (x'_t, state)."""
        u = self.ln1(x_t)  # (B, C)
        xhat, pred_state = self.pred.step(u, state["h"].to(u.dtype), state["pred"])  # reads h_{t-1}
        xhat = xhat.to(u.dtype)
        x = x_t + self.mix(torch.cat([u - xhat, xhat], dim=-1))
        x = x + self.ffn(self.ln2(x))
        return x, dict(h=self.ctx.step(u, state["h"]), pred=pred_state)  # h_t for the next token


@torch.no_grad()
def init_weights(module, cfg):
    """The one initialisation of every SPEN parameter, by name (GPT-2's scheme where it applies):
      wte.weight (V, C), tied to the head      N(0, 0.02)   GPT-2; logits start near uniform
      pred.proj / pred.q / pred.k / pred.v     N(0, 0.02)   GPT-2 default for linear maps
      pred.trace_emb E_s (S, C)                N(0, 0.02)   small, like a positional embedding
      ffn.fc W_1 (F, C)                        N(0, 0.02)   GPT-2 default
      mix W_mix (C, 2C), ffn.proj W_2 (C, F)   N(0, 0.02 / sqrt(2 n_layer))   GPT-2: the two
                                               residual branches per block add 2 n_layer terms,
                                               so this keeps the stream's variance O(1) at init
      ctx.gate W_a (C, C)                      0            selective starts as the fixed EMA
      ctx.gate_bias b_s (S, C)                 logit(a_s)   so a_t^s = a_s at init
      ln*.weight 1, ln*.bias 0                 identity LayerNorm
    Raises if a parameter is not listed, so a new one cannot silently keep torch's default.
    """
    residual_std = 0.02 / math.sqrt(2 * cfg.n_layer)
    for name, p in module.named_parameters():
        leaf = name.split(".")[-1]
        if name.endswith(("mix.weight", "ffn.proj.weight")):
            p.normal_(0.0, residual_std)
        elif name.endswith(("wte.weight", "ffn.fc.weight", "pred.proj.weight", "pred.q.weight",
                            "pred.k.weight", "pred.v.weight", "pred.trace_emb")):
            p.normal_(0.0, 0.02)
        elif name.endswith("ctx.gate.weight"):
            p.zero_()
        elif name.endswith("ctx.gate_bias"):
            a = torch.tensor(cfg.alphas, dtype=p.dtype, device=p.device)[:, None]  # (S, 1)
            p.copy_(torch.logit(a.clamp(max=1 - 1e-6)).expand_as(p))
        elif ".ln" in "." + name and leaf in ("weight", "bias"):
            p.fill_(1.0 if leaf == "weight" else 0.0)
        else:
            raise ValueError(f"init_weights has no rule for parameter {name!r}; add one")


class SPEN(nn.Module):
    """Token embedding -> n_layer Blocks -> final LayerNorm -> tied head. No positions."""

    def __init__(self, cfg):
        super().__init__()
        if not isinstance(cfg, SPENConfig):
            raise TypeError(f"SPEN expects a SPENConfig, got {type(cfg).__name__}")
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings (one parameter)
        init_weights(self, cfg)

    def forward(self, idx, targets=None):
        """idx (B, T) int64 -> logits (B, T, V), mean cross-entropy over targets != -1 (or None)."""
        x = self.drop(self.wte(idx))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1)
        return logits, loss

    def hidden_states(self, idx):
        """idx (B, T) -> list of n_layer + 1 tensors (B, T, C): embedding, then after each block."""
        out = [self.drop(self.wte(idx))]
        for block in self.blocks:
            out.append(block(out[-1]))
        return out

    def init_state(self, batch_size, device=None):
        """Per-block state before the first token. For predictor='linear' it is the traces only,
        n_layer x (B, S, C), whatever the sequence length; 'linear_attn' adds O(1) running sums;
        'softmax_attn' adds a k/v cache that grows by S slots per token."""
        device = device if device is not None else self.wte.weight.device
        return [block.init_state(batch_size, device) for block in self.blocks]

    def step(self, token, state):
        """token (B,) int64, state -> (logits (B, V), new state). Equals forward() token by token."""
        x = self.wte(token)  # (B, C)
        new_state = []
        for block, s in zip(self.blocks, state):
            x, s = block.step(x, s)
            new_state.append(s)
        return self.lm_head(self.ln_f(x)), new_state

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """Extend idx (B, T) by max_new_tokens sampled tokens -> (B, T + max_new_tokens).
        The prompt is fed through step() one token at a time (no crop: there are no positions),
        so each new token costs O(1) for the linear predictor. temperature 0 means greedy."""
        if idx.shape[1] == 0:
            raise ValueError("generate needs a prompt of at least one token (e.g. the EOT id 50256)")
        state = self.init_state(idx.shape[0], idx.device)
        for token in idx.unbind(1):
            logits, state = self.step(token, state)
        out = [idx]
        for _ in range(max_new_tokens):
            logits = logits.float()
            if temperature == 0:
                nxt = logits.argmax(-1)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)[:, 0]
            out.append(nxt[:, None])
            logits, state = self.step(nxt, state)
        return torch.cat(out, dim=1)

    def num_params(self, non_embedding=False):
        """Parameter count (the tied embedding counted once). non_embedding=True leaves out the
        token embedding/head matrix (V x C); SPEN has no positional embedding to subtract."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.wte.weight.numel() if non_embedding else n

    def flops_per_token(self, T):
        """Training FLOPs per token (forward + backward = 3 x forward) at sequence length T.
        Matmuls: 6 x (weights used in matmuls), the tied head counted once, the FFN counted
        DENSE (as it runs; a sparse kernel would cut W_2 to k/F of that). Per layer, the
        attention predictors add 3 x their forward cost: softmax_attn 4 T S C (q.k and w.v over
        T*S slots, the full square as nanoGPT counts it); linear_attn 4 L S C in-chunk
        (L = chunk) + 2 (S + 1) D C for updating and reading the D x D state. The EMA traces
        (a few S C elementwise FLOPs per token, memory-bound) and norms are left out (< 1%)."""
        cfg = self.config
        S, C = len(cfg.alphas), cfg.n_embd
        n_matmul = self.num_params() - sum(p.numel() for n, p in self.named_parameters()
                                           if p.dim() < 2 or n.endswith(("trace_emb", "gate_bias")))
        attn_fwd = {"linear": 0, "softmax_attn": 4 * T * S * C,
                    "linear_attn": 4 * LinearAttnPredictor.chunk * S * C + 2 * (S + 1) * C * C // cfg.n_head}
        return 6 * n_matmul + 3 * cfg.n_layer * attn_fwd[cfg.predictor]

    def estimate_mfu(self, fwdbwd_per_iter, dt, peak_flops=None):
        """Model FLOPs utilisation: achieved FLOP/s over the peak. fwdbwd_per_iter = sequences of
        block_size tokens per iteration (batch_size * grad_accum), dt seconds per iteration.
        Default peak 989e12: H100/H200 SXM bf16 dense tensor-core peak (the H200 has the H100's
        compute, more memory); pass peak_flops for other hardware."""
        T = self.config.block_size
        achieved = self.flops_per_token(T) * T * fwdbwd_per_iter / dt
        return achieved / (989e12 if peak_flops is None else peak_flops)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW with weight decay on matrices (dim >= 2: embeddings, linear weights, E_s) and
        none on vectors (LayerNorm weights and biases). Every parameter is in exactly one group."""
        params = dict(self.named_parameters())  # tied weights appear once
        decay = [p for p in params.values() if p.dim() >= 2]
        no_decay = [p for p in params.values() if p.dim() < 2]
        ids = [id(p) for p in decay + no_decay]
        assert len(ids) == len(set(ids)) == len({id(p) for p in self.parameters()}), "param groups broken"
        groups = [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]
        fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **(dict(fused=True) if fused else {}))


if __name__ == "__main__":
    # Parameter counts of the paper model and each variant, built without memory on `meta`.
    for predictor, context in [("linear", "ema"), ("linear_attn", "ema"), ("softmax_attn", "ema"),
                               ("linear", "selective")]:
        with torch.device("meta"):
            m = SPEN(SPENConfig(predictor=predictor, context=context))
        print(f"predictor={predictor:12s} context={context:9s} params {m.num_params():,} "
              f"(non-embedding {m.num_params(non_embedding=True):,}) "
              f"train FLOPs/token at T=1024 {m.flops_per_token(1024) / 1e9:.2f} GFLOP")

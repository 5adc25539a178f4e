"""SPEN: the Sparse Predictive Equilibrium Network, a language model whose only temporal
context is EMA traces (no attention between token states, no positional embedding).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN". The paper
gives the block as: x_t -> EMA traces h_t^(s) -> predict x̂_t -> error e_t = x_t - x̂_t ->
"context mix" -> sparse FFN (top 6% of units) -> residual add; 12 blocks, ~130M parameters,
a = (0.5, 0.1, 0.02). It gives no code, so everything else below is our choice.

One block (pre-norm, two residual adds, as GPT-2):
    u_t   = LN1(x_t)                                        the block input the traces see
    h_t^s = (1 - a_s) h_{t-1}^s + a_s u_t,   h_{-1} = 0     ema.traces (fixed a_s)
    x̂_t   = P(h_{t-1}, u_t)                                 reader of the PAST traces (readers.py)
    e_t   = u_t - x̂_t                                       prediction error
    x     = x + W_mix [e_t ; x̂_t]                           "context mix" (our choice)
    x     = x + W_2 topk_k(relu(W_1 LN2(x)))                sparse FFN, k = 184 of F = 3072

Shape glossary
    B batch, T time, C width (n_embd), S traces (len(alphas)), V vocabulary (vocab_size),
    Vp = lm.padded_vocab(V) rows of the embedding table, F FFN hidden width, k kept FFN units,
    H heads, D = C / H head width.

Code name -> paper symbol
    alphas[s]   a_s             ctx(u) -> h   h_t^(s), all S traces, (B, T, S, C)
    hp          h_{t-1}         pred          the predictor (reader), reads hp and u
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
 4. Predictors (config `predictor` x `reads`, see readers.py): `linear` is the paper's
    x̂_t = W_p [h_{t-1}^1 ; ... ; h_{t-1}^S]; `linear_attn` and `softmax_attn` attend with a
    query from u_t either over the S slots of the trace state h_{t-1} (reads='state', the
    default: the paper's data-processing argument holds) or over every past (position, trace)
    slot (reads='history': lossless, the inputs can be read back from it).
 5. Sparse FFN: no biases, ReLU, keep the k largest of F units per token, exactly k (ties by
    torch.topk); gradient flows only through the kept units. It runs dense (mask after the
    first matmul); a sparse kernel would save most of W_2's FLOPs, not W_1's.
 6. No biases in linear layers; LayerNorms have weight and bias. Tied input/output
    embeddings. No auxiliary prediction loss: x̂ is trained only through the LM loss.
 7. context='selective' (positive control, not in the paper): per trace s,
    a_t^s = sigmoid(W_a u_t + b_s) per channel, one C x C matrix W_a shared by the S traces
    (like Mamba's step size shared across its state), b_s initialised to logit(a_s) and W_a
    to zero, so it starts as the fixed-decay model; the only change is input-dependent decay.
 8. The embedding table has Vp rows (a multiple of 64, fast matmuls); forward and step return
    the first V logits only, so the padding rows are never inputs, targets or samples.

`SPEN(SPENConfig())` is the paper's model with the linear predictor: 130,684,416 parameters.
Run `python spen.py` (parameter counts of every predictor x reads x context, built on the meta
device) and `python -m pytest tests/test_spen.py`.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import ema
import lm
from readers import PREDICTORS, READERS, READS

TRACE_METHODS = ("auto", "scan", "matmul")


@dataclass
class SPENConfig:
    vocab_size: int = 50257  # V: GPT-2 BPE; the table has lm.padded_vocab(V) = 50304 rows
    block_size: int = 1024  # T: training context (no positional embedding: any T runs)
    n_layer: int = 12  # number of SPEN blocks (paper: 12)
    n_embd: int = 768  # C: width of x_t, u_t, each trace h_t^(s), x̂_t and e_t (paper: GPT-2 small size)
    alphas: tuple = (0.5, 0.1, 0.02)  # a_s: fixed EMA decays, fast/medium/slow (paper); S = len(alphas)
    ffn_hidden: int = None  # F: sparse FFN width; None -> 4C
    ffn_topk: int = None  # k: hidden units kept per token; None -> round(0.06 F) (paper: "top 6%")
    predictor: str = "linear"  # reader of h_{t-1} into x̂_t: 'linear' (paper) | 'linear_attn' | 'softmax_attn'
    reads: str = "state"  # 'state': only h_{t-1}^1..S (paper's argument holds) | 'history': every past slot
    context: str = "ema"  # how traces decay: 'ema' (paper, fixed a_s) | 'selective' (control, a_t from u_t)
    trace_method: str = "auto"  # ema.traces path: 'auto' | 'scan' | 'matmul' (same values)
    n_head: int = None  # H: heads of the attention readers; None -> max(1, C // 64)
    dropout: float = 0.0  # on the embedding and both residual branches (paper: not stated)

    def __post_init__(self):
        def require(ok, message):
            if not ok:
                raise ValueError(message)

        def positive_int(name):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                    f"SPENConfig.{name} must be an int >= 1, got {v!r}")

        for name in ("vocab_size", "block_size", "n_layer", "n_embd"):
            positive_int(name)
        C = self.n_embd
        if self.ffn_hidden is None:
            self.ffn_hidden = 4 * C
        positive_int("ffn_hidden")
        if self.ffn_topk is None:
            self.ffn_topk = max(1, round(0.06 * self.ffn_hidden))
        positive_int("ffn_topk")
        require(self.ffn_topk <= self.ffn_hidden,
                f"SPENConfig.ffn_topk ({self.ffn_topk}) must be <= ffn_hidden ({self.ffn_hidden})")
        if self.n_head is None:
            self.n_head = max(1, C // 64)
        positive_int("n_head")
        require(self.predictor == "linear" or C % self.n_head == 0,
                f"SPENConfig.n_embd ({C}) must be divisible by n_head ({self.n_head})")
        try:
            self.alphas = tuple(float(a) for a in self.alphas)  # a JSON round trip gives a list
        except (TypeError, ValueError):
            raise ValueError(f"SPENConfig.alphas must be a sequence of floats in (0, 1], got {self.alphas!r}") from None
        require(self.alphas and all(0.0 < a <= 1.0 for a in self.alphas),
                f"SPENConfig.alphas must be a non-empty sequence in (0, 1], got {self.alphas}")
        for name, choices in (("predictor", PREDICTORS), ("reads", READS), ("context", tuple(CONTEXTS)),
                              ("trace_method", TRACE_METHODS)):
            require(getattr(self, name) in choices,
                    f"SPENConfig.{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        require((self.predictor, self.reads) in READERS,
                f"SPENConfig.reads={self.reads!r} needs an attention predictor (linear_attn or "
                f"softmax_attn); predictor={self.predictor!r} reads the state only")
        require(isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0,
                f"SPENConfig.dropout must be in [0, 1), got {self.dropout!r}")


def shift_right(h):
    """h_t -> h_{t-1} along time, with the zero state at t = 0. (B, T, ...) -> (B, T, ...)."""
    return F.pad(h, (0,) * (2 * (h.dim() - 2)) + (1, -1))  # pad dim 1 by one in front, drop the last


def _method(cfg):
    """ema's `method` keyword, passed only when it is not the default."""
    return {} if cfg.trace_method == "auto" else dict(method=cfg.trace_method)


# --------------------------------------------------------------------------------------------
# Temporal context: u (B, T, C) -> traces h (B, T, S, C); step: u_t (B, C), h (B, S, C) -> h.


class EMAContext(nn.Module):
    """The paper: fixed decays, h_t^s = (1 - a_s) h_{t-1}^s + a_s u_t. No parameters."""

    def __init__(self, cfg):
        super().__init__()
        self.alphas, self.method = cfg.alphas, _method(cfg)

    def forward(self, u):
        return ema.traces(u, self.alphas, **self.method)  # (B, T, S, C), float32 even under autocast

    def step(self, u_t, h):
        return ema.step(u_t.float(), h, self.alphas)  # (B, S, C)


class SelectiveContext(nn.Module):
    """Positive control (not in the paper): h_t^s = (1 - a_t^s) h_{t-1}^s + a_t^s u_t with
    a_t^s = sigmoid(W_a u_t + b_s) per channel. W_a (C x C) is shared by the S traces and b_s
    (S, C) starts at logit(a_s), so with W_a = 0 this is exactly the fixed-decay EMA."""

    def __init__(self, cfg):
        super().__init__()
        self.alphas, self.method = cfg.alphas, _method(cfg)
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
        h = ema.selective_traces(x, a, **self.method)  # (B*S, T, C)
        return h.view(B, S, T, C).transpose(1, 2)  # (B, T, S, C)

    def step(self, u_t, h):
        return torch.lerp(h, u_t.float().unsqueeze(1), self.decay(u_t))  # (B, S, C)


CONTEXTS = {"ema": EMAContext, "selective": SelectiveContext}


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
        self.pred = READERS[cfg.predictor, cfg.reads](cfg)
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
      wte.weight (Vp, C), tied to the head     N(0, 0.02)   GPT-2; logits start near uniform
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
        Vp = lm.padded_vocab(cfg.vocab_size)
        self.wte = nn.Embedding(Vp, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, Vp, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings (one parameter)
        init_weights(self, cfg)

    def check(self, idx, what="idx", dims=2):
        """One-line ValueError unless idx is a (B, T) (dims=2) or (B,) (dims=1) tensor of ids in
        [0, V) with T >= 1. The id range needs the values: skipped while torch.compile traces."""
        if not isinstance(idx, torch.Tensor) or idx.dim() != dims or idx.shape[-1] == 0:
            shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
            raise ValueError(f"{what} must be a {'(B, T) tensor with T >= 1' if dims == 2 else '(B,) tensor'}"
                             f" of token ids, got {shape}")
        if not torch.compiler.is_compiling():
            lm.check_tokens(idx, self.config.vocab_size, what)

    def head(self, x):
        """(..., C) -> logits (..., V): the tied head, without the padding rows' columns."""
        return self.lm_head(self.ln_f(x))[..., :self.config.vocab_size]

    def forward(self, idx, targets=None):
        """idx (B, T) int64 -> logits (B, T, V), mean cross-entropy over targets != -1 (or None)."""
        self.check(idx)
        if targets is not None:
            if not isinstance(targets, torch.Tensor) or targets.shape != idx.shape or targets.is_floating_point():
                raise ValueError(f"targets must be an integer tensor of the shape of idx {tuple(idx.shape)}")
            skip = torch.compiler.is_compiling() or not targets.numel()
            lo, hi = (-1, -1) if skip else (int(targets.min()), int(targets.max()))
            if lo < -1 or hi >= self.config.vocab_size:
                raise ValueError(f"targets hold ids in [{lo}, {hi}], outside [0, {self.config.vocab_size}) "
                                 f"and not -1 (ignored)")
        x = self.drop(self.wte(idx))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1)
        return logits, loss

    def hidden_states(self, idx):
        """idx (B, T) -> list of n_layer + 1 tensors (B, T, C): embedding, then after each block."""
        self.check(idx)
        out = [self.drop(self.wte(idx))]
        for block in self.blocks:
            out.append(block(out[-1]))
        return out

    def init_state(self, batch_size, device=None):
        """Per-block state before the first token: the traces n_layer x (B, S, C), plus for
        reads='history' the reader's own state (see `state_floats`)."""
        device = device if device is not None else self.wte.weight.device
        return [block.init_state(batch_size, device) for block in self.blocks]

    def state_floats(self, T):
        """Numbers per sequence and per layer that step() holds after T tokens: the S*C traces,
        plus 2*T*S*C cached keys/values for softmax_attn/history, C*D + C running sums for
        linear_attn/history. State readers stay at S*C whatever T."""
        return len(self.config.alphas) * self.config.n_embd + self.blocks[0].pred.state_floats(T)

    def step(self, token, state):
        """token (B,) int64, state -> (logits (B, V), new state). Equals forward() token by token."""
        self.check(token, "token", dims=1)
        x = self.wte(token)  # (B, C)
        new_state = []
        for block, s in zip(self.blocks, state):
            x, s = block.step(x, s)
            new_state.append(s)
        return self.head(x), new_state  # (B, V)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """Extend idx (B, T) by max_new_tokens sampled tokens -> (B, T + max_new_tokens).
        The prompt is fed through step() one token at a time (no crop: there are no positions),
        so each new token costs O(1) for the state readers. temperature 0 means greedy."""
        lm.check_sampling(max_new_tokens, temperature, top_k)
        if isinstance(idx, torch.Tensor) and idx.dim() == 2 and idx.shape[1] == 0:
            raise ValueError("generate needs a prompt of at least one token (e.g. the EOT id 50256)")
        self.check(idx)
        state = self.init_state(idx.shape[0], idx.device)
        for token in idx.unbind(1):
            logits, state = self.step(token, state)
        out = [idx]
        for _ in range(max_new_tokens):
            nxt = lm.sample_next(logits, temperature, top_k, generator)  # (B,)
            out.append(nxt[:, None])
            logits, state = self.step(nxt, state)
        return torch.cat(out, dim=1)

    def num_params(self, non_embedding=False):
        """Parameter count (the tied embedding counted once). non_embedding=True leaves out the
        token embedding/head matrix (Vp x C); SPEN has no positional embedding to subtract."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.wte.weight.numel() if non_embedding else n

    def flops_per_token(self, T):
        """Training FLOPs per token (forward + backward = 3 x forward) at sequence length T.
        Matmuls: 6 x (weights used in matmuls), the tied head counted once, the FFN counted
        DENSE (as it runs; a sparse kernel would cut W_2 to k/F of that). Per layer, the
        attention readers add 3 x their forward cost (`attn_flops` in readers.py). The EMA
        traces (a few S C elementwise FLOPs per token, memory-bound) and norms are left out."""
        n_matmul = self.num_params() - sum(p.numel() for n, p in self.named_parameters()
                                           if p.dim() < 2 or n.endswith(("trace_emb", "gate_bias")))
        return 6 * n_matmul + 3 * self.config.n_layer * self.blocks[0].pred.attn_flops(T)


VARIANTS = [(p, r, c) for (p, r) in READERS for c in CONTEXTS]  # every predictor x reads x context

if __name__ == "__main__":
    # Parameter counts of the paper model and each variant, built without memory on `meta`.
    for predictor, reads, context in VARIANTS:
        with torch.device("meta"):
            m = SPEN(SPENConfig(predictor=predictor, reads=reads, context=context))
        print(f"predictor={predictor:12s} reads={reads:7s} context={context:9s} params {m.num_params():,} "
              f"(non-embedding {m.num_params(non_embedding=True):,}) "
              f"train FLOPs/token at T=1024 {m.flops_per_token(1024) / 1e9:.2f} GFLOP, "
              f"state floats/layer at T=1024 {m.state_floats(1024):,}")

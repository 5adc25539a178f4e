"""GPT-2 style transformer: the attention baseline the paper compares SPEN against.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) reports C4 perplexity 260 for SPEN against
33 for GPT-2 small. This file is that reference model: a GPT-2 small clone (nanoGPT layout)
that trains from scratch through `train.py --model gpt` (the same-budget baseline of
`ablate.py`) and loads the real OpenAI weights, so `train.py --eval_only --init_from gpt2
--eval_data c4` measures GPT-2 with our own evaluation code. It is not part of the paper's
method; it is the control that has learned, input-dependent selection (softmax attention).

Shape glossary
    B batch, T time (tokens), C width n_embd, H heads, D = C / H head width,
    V vocabulary, P tokens already in the KV cache, L layers.

Code name -> meaning
    transformer.wte   token embedding, tied to lm_head (the output projection)
    transformer.wpe   learned absolute position embedding (GPT-2; SPEN has none)
    h[i].attn         causal multi-head softmax attention (F.scaled_dot_product_attention)
    h[i].mlp          GELU (tanh approximation, GPT-2's "gelu_new") MLP with 4C hidden units
    state             KV cache: {'kv': [(k, v) per layer, each (B, H, P, D)], 'pos': P}

Same contract as spen.py (written out in lm.py): forward, hidden_states, init_state/step,
generate, num_params, flops_per_token, Block(cfg). Optimizer groups, sampling and MFU are lm.py's.

Departures / choices
    - vocab_size is the real vocabulary (50257); the embedding/head table has
      lm.padded_vocab(V) = 50304 rows (a multiple of 64: faster matmuls) and forward/step
      return only the first V logits, so the padding rows are never in the loss nor sampled.
      `from_hf` copies GPT-2's 50257 rows and zeroes the padding: logits equal Hugging Face's.
    - LayerNorm eps is PyTorch's 1e-5, which is also GPT-2's; `from_hf` refuses other values
      and other activations rather than silently computing something different.
    - Position limit: the learned position table has block_size rows, so `step` raises past
      block_size tokens; `generate` then re-reads the last block_size tokens (nanoGPT's crop).
    - n_head defaults to C // 64 (12 at width 768, GPT-2 small).
    - `window` (not GPT-2; frontier.py's bounded-state reference, Zoology's sliding-window
      attention): each query sees only the last `window` positions, and step()'s cache keeps
      the window - 1 newest keys and values, a state of fixed size whatever the length.

Run
    python -m pytest tests/test_gpt.py      # HF logits, KV cache, causality, parameter count
    python -c "import gpt; m = gpt.GPT.from_pretrained('gpt2')"   # needs network to HF hub
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

import lm


@dataclass
class GPTConfig:
    block_size: int = 1024  # maximum sequence length (rows of the position table)
    vocab_size: int = 50257  # V, GPT-2's BPE tokens (the table has lm.padded_vocab(V) = 50304 rows)
    n_layer: int = 12  # L, number of transformer blocks
    n_head: int = None  # H, attention heads per block; None: max(1, n_embd // 64), 12 for GPT-2 small
    n_embd: int = 768  # C, residual-stream width
    dropout: float = 0.0  # dropout on embeddings, attention weights and residual branches
    bias: bool = True  # biases in Linear and LayerNorm, as in GPT-2
    window: int = None  # sliding-window attention: a query sees the last `window` positions, itself included; None: all

    def __post_init__(self):  # n_head left to None follows the width
        self.n_head = max(1, self.n_embd // 64) if self.n_head is None else self.n_head


def check(cfg):
    """A one-line ValueError naming the field for a config GPT cannot build (GPT() calls it)."""
    for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
        if type(getattr(cfg, name)) is not int or getattr(cfg, name) < 1:
            raise ValueError(f"GPTConfig.{name} must be an int >= 1, got {getattr(cfg, name)!r}")
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"GPTConfig.n_embd ({cfg.n_embd}) must be divisible by n_head ({cfg.n_head})")
    if not 0 <= cfg.dropout < 1:
        raise ValueError(f"GPTConfig.dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.window is not None and (type(cfg.window) is not int or cfg.window < 1):
        raise ValueError(f"GPTConfig.window must be None (full attention) or an int >= 1, got {cfg.window!r}")


class CausalSelfAttention(nn.Module):
    """softmax(Q K^T / sqrt(D) + causal mask) V over H heads, then an output projection."""

    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.dropout, self.window = cfg.n_head, cfg.dropout, cfg.window
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, kv=None):
        """x (B, T, C) -> y (B, T, C). With a cache kv = (k, v) of P past tokens (or None for an
        empty one), also return the extended cache; the T new queries see all P + T keys causally.
        With a window w, a query sees only the last w positions and the cache keeps the last w - 1
        keys (all a later query can see): a state of 2 (w - 1) C numbers, whatever the length."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # each (B, T, C)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        use_cache = kv is not None
        P = 0
        if use_cache and kv[0] is not None:
            P = kv[0].size(2)
            k, v = torch.cat([kv[0], k], dim=2), torch.cat([kv[1], v], dim=2)  # (B, H, P+T, D)
        dropout_p = self.dropout if self.training else 0.0
        if P == 0 and self.window is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)  # (B, H, T, D)
        else:
            # query i sits at position P + i of the keys and may see keys 0..P + i (the last w of them)
            mask = torch.ones(T, P + T, dtype=torch.bool, device=x.device).tril(diagonal=P)
            if self.window is not None:
                mask = mask.triu(diagonal=P - self.window + 1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        if use_cache and self.window is not None:  # keep the w - 1 newest keys: all a later query sees
            start = max(0, k.size(2) - (self.window - 1))
            k, v = k[:, :, start:], v[:, :, start:]
        return (y, (k, v)) if use_cache else y


class MLP(nn.Module):
    """x -> W2 gelu_tanh(W1 x + b1) + b2, hidden width 4C (GPT-2)."""

    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))  # (B, T, C)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln_1 x), then + mlp(ln_2 x). (B, T, C) -> (B, T, C)."""

    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x, kv=None):
        """Without kv: (B, T, C) -> (B, T, C). With kv (a layer's cache or None): -> (x, kv)."""
        if kv is None:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))
        attn_out, kv = self.attn(self.ln_1(x), kv)
        x = x + attn_out
        return x + self.mlp(self.ln_2(x)), kv


class GPT(nn.Module):
    """Token + position embedding -> L blocks -> final LayerNorm -> tied output projection."""

    def __init__(self, cfg):
        super().__init__()
        check(cfg)
        self.config = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(lm.padded_vocab(cfg.vocab_size), cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, lm.padded_vocab(cfg.vocab_size), bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied embeddings (GPT-2)
        self.reset_parameters()

    def reset_parameters(self):
        """GPT-2 initialisation, all of it here:
        - Linear weights and both embeddings: N(0, 0.02), GPT-2's choice for width 768.
        - The two residual-branch output projections (attn.c_proj, mlp.c_proj):
          N(0, 0.02 / sqrt(2 L)), so the residual stream's variance stays O(1) after the 2 L
          additions (GPT-2 paper, section 2.3).
        - Biases 0; LayerNorm weight 1, bias 0 (identity at start).
        """
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
            elif p.dim() >= 2:  # Linear weights, wte (= lm_head), wpe
                nn.init.normal_(p, mean=0.0, std=0.02)
            elif ".ln_" in name or name.startswith("transformer.ln_f"):
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            else:  # Linear biases
                nn.init.zeros_(p)

    # ---- forward passes -------------------------------------------------------------------

    def _embed(self, idx, pos0=0):
        """idx (B, T) int64 -> token + position embedding (B, T, C), positions pos0 .. pos0+T-1.
        The one place ids enter, so the one id check (lm.check_tokens: no host sync)."""
        lm.check_tokens(idx, self.config.vocab_size)
        T = idx.size(1)
        if pos0 + T > self.config.block_size:
            raise ValueError(f"sequence of {pos0 + T} tokens exceeds block_size {self.config.block_size}; "
                             f"crop the input or build the model with a larger block_size")
        pos = torch.arange(pos0, pos0 + T, dtype=torch.long, device=idx.device)  # (T,)
        return self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)

    def hidden_states(self, idx):
        """idx (B, T) -> list of L + 1 tensors (B, T, C): the embedding output, then the residual
        stream after each block (before the final LayerNorm)."""
        x = self._embed(idx)
        out = [x]
        for block in self.transformer.h:
            x = block(x)
            out.append(x)
        return out

    def head(self, x):
        """Final LayerNorm and tied output projection: (..., C) -> logits (..., V), padding cut."""
        return self.lm_head(self.transformer.ln_f(x))[..., :self.config.vocab_size]

    def forward(self, idx, targets=None):
        """idx (B, T) -> logits (B, T, V); loss = mean next-token cross-entropy if targets (B, T)
        is given (targets == -1 are ignored), else None."""
        x = self._embed(idx)
        for block in self.transformer.h:
            x = block(x)  # (B, T, C)
        logits = self.head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def init_state(self, batch_size, device=None):
        """An empty KV cache. batch_size is fixed by the first step; kept for the shared contract."""
        return {"kv": [None] * self.config.n_layer, "pos": 0}

    def extend(self, idx, state):
        """Feed T new tokens idx (B, T) after the P cached ones -> (logits (B, T, V), state).
        One call with the whole prompt is the "prefill"; step() is the T = 1 case."""
        x = self._embed(idx, pos0=state["pos"])
        kvs = []
        for block, kv in zip(self.transformer.h, state["kv"]):
            x, kv = block(x, kv if kv is not None else (None, None))
            kvs.append(kv)
        logits = self.head(x)  # (B, T, V)
        return logits, {"kv": kvs, "pos": state["pos"] + idx.size(1)}

    def step(self, token, state):
        """token (B,) int64 -> (logits (B, V) for the next token, new state). Memory grows with
        the number of tokens seen (the KV cache); SPEN's linear state does not."""
        if token.dim() != 1:
            raise ValueError(f"token must be a (B,) tensor of token ids, got shape {tuple(token.shape)}")
        logits, state = self.extend(token[:, None], state)
        return logits[:, -1, :], state  # (B, V)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """Sample max_new_tokens tokens after idx (B, T) -> (B, T + max_new_tokens), using the KV
        cache. When the cache reaches block_size it is rebuilt from the last block_size tokens.
        temperature 0 means greedy; `generator` (torch.Generator) makes sampling reproducible."""
        lm.check_sampling(max_new_tokens, temperature, top_k)
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.shape[1] == 0:
            raise ValueError("generate needs a prompt of shape (B, T) with T >= 1 (e.g. the EOT id 50256)")
        state = None
        for _ in range(max_new_tokens):
            if state is None:
                context = idx[:, -self.config.block_size:]
                logits, state = self.extend(context, self.init_state(idx.size(0), idx.device))
                logits = logits[:, -1, :]  # (B, V)
            nxt = lm.sample_next(logits, temperature, top_k, generator)[:, None]  # (B, 1)
            idx = torch.cat((idx, nxt), dim=1)
            if state["pos"] < self.config.block_size:
                logits, state = self.step(nxt.view(-1), state)
            else:
                state = None  # cache full: re-read the cropped context next iteration
        return idx

    # ---- accounting -----------------------------------------------------------------------

    def state_floats(self, T):
        """Numbers per sequence and layer that step() holds after T tokens: the cached keys and
        values, 2 C per token kept (all T of them; the window - 1 newest with a window)."""
        kept = T if self.config.window is None else min(T, self.config.window - 1)
        return 2 * kept * self.config.n_embd

    def num_params(self, non_embedding=False):
        """Parameter count (tied wte/lm_head counted once). non_embedding drops the position
        table and the token table (nanoGPT's convention drops only wpe; we drop both so the
        number compares with SPEN's, which has no position table)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel() + self.transformer.wte.weight.numel()
        return n

    def flops_per_token(self, T):
        """Training FLOPs per token (forward + backward) at context T (PaLM appendix B):
        6 N for the matmuls (N includes the tied output projection, excludes the position table)
        plus 12 L C T for attention scores and the weighted sum (QK^T and AV, x3 for backward)."""
        cfg = self.config
        N = self.num_params() - self.transformer.wpe.weight.numel()
        return 6 * N + 12 * cfg.n_layer * cfg.n_embd * T

    # ---- loading Hugging Face GPT-2 -------------------------------------------------------

    @classmethod
    def from_hf(cls, hf_model):
        """Build a GPT from a transformers GPT2LMHeadModel (any size, random or pretrained).
        HF stores c_attn/c_proj/c_fc as Conv1D with weight (in, out); nn.Linear wants (out, in),
        so those four matrices are transposed. The vocabulary stays the checkpoint's (50257); the
        table's padding rows (up to lm.padded_vocab) are zero and cut from the logits."""
        hf_cfg = hf_model.config
        act = getattr(hf_cfg, "activation_function", "gelu_new")
        problems = []
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            problems.append(f"activation_function={act!r} (need gelu_new)")
        if getattr(hf_cfg, "n_inner", None) not in (None, 4 * hf_cfg.n_embd):
            problems.append(f"n_inner={hf_cfg.n_inner} (need None or 4*n_embd)")
        if abs(getattr(hf_cfg, "layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12:
            problems.append(f"layer_norm_epsilon={hf_cfg.layer_norm_epsilon} (need 1e-5)")
        for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if getattr(hf_cfg, flag, False):
                problems.append(f"{flag}=True (unsupported)")
        if not getattr(hf_cfg, "scale_attn_weights", True):
            problems.append("scale_attn_weights=False (unsupported)")
        if problems:
            raise ValueError("from_hf: this GPT2 config differs from GPT-2: " + "; ".join(problems))
        cfg = GPTConfig(block_size=hf_cfg.n_positions, vocab_size=hf_cfg.vocab_size, n_layer=hf_cfg.n_layer,
                        n_head=hf_cfg.n_head, n_embd=hf_cfg.n_embd, dropout=0.0, bias=True)
        model = cls(cfg)
        hf_state = hf_model.state_dict()
        ours = model.state_dict()
        transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
        with torch.no_grad():
            for name, p in ours.items():  # p: our tensor, w: Hugging Face's
                if name not in hf_state:
                    raise ValueError(f"from_hf: key {name} missing from the Hugging Face state dict")
                w = hf_state[name].t() if name.endswith(transposed) else hf_state[name]
                if name.endswith(("wte.weight", "lm_head.weight")):  # (V, C) into the padded table
                    p.zero_()
                    p = p[:w.shape[0]]
                if w.shape != p.shape:
                    raise ValueError(f"from_hf: shape mismatch for {name}: ours {tuple(p.shape)}, HF {tuple(w.shape)}")
                p.copy_(w)
        return model

    @classmethod
    def from_pretrained(cls, name="gpt2"):
        """Download OpenAI's GPT-2 ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl') through
        transformers and convert it with from_hf. Needs the Hugging Face hub or its local cache."""
        names = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
        if name not in names:
            raise ValueError(f"from_pretrained: unknown model {name!r}; choose one of {names}")
        from transformers import GPT2LMHeadModel  # runtime.load_gpt2 says in one line when it cannot
        return cls.from_hf(GPT2LMHeadModel.from_pretrained(name))

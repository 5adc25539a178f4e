"""SPEN, the Sparse Predictive Equilibrium Network: a language model whose only temporal context
is EMA traces (no attention, no positional embedding). The paper's model is all here; the
ablation's variants (attention readers, selective decays) are in variants.py, the readers that
write a state of their own in writes.py, the traces in ema.py.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": x_t -> EMA
traces h_t^(s) -> predict x̂_t -> error e_t = x_t - x̂_t -> "context mix" -> sparse FFN (top 6%
of units) -> residual add; 12 blocks, ~130M parameters, a = (0.5, 0.1, 0.02). One block here
(pre-norm, two residual adds, as GPT-2):
    u_t   = LN1(x_t)                                     the block input the traces see
    h_t^s = (1 - a_s) h_{t-1}^s + a_s u_t,  h_{-1} = 0   EMAContext (ema.traces, fixed a_s)
    x̂_t   = W_p [h_{t-1}^1 ; ... ; h_{t-1}^S]            LinearPredictor, reads the PAST traces
    e_t   = u_t - x̂_t                                    prediction error
    x     = x + W_mix [e_t ; x̂_t]                        "context mix"
    x     = x + W_2 topk_k(relu(W_1 LN2(x)))             SparseFFN, k = 184 of F = 3072

Shape glossary
    B batch, T time, C width (n_embd), S traces (len(alphas)), V vocabulary (vocab_size),
    Vp = lm.padded_vocab(V) rows of the embedding table, F FFN hidden width, k kept FFN units.

Code name -> paper symbol
    alphas[s]  a_s              ctx(u) -> h  h_t^(s), all S traces, (B, T, S, C)
    h_prev     h_{t-1}          pred         the predictor, x̂_t from h_{t-1} (and u_t)
    xhat       x̂_t              e            e_t = u_t - x̂_t
    mix        "context mix"    ffn          the sparse FFN keeping the top 6%

The paper gives no code; where it is silent we chose, each choice written out once in PAPER.md
("Choices in spen.py") and marked "(choice N, PAPER.md)" where it happens:
    1. the predictor reads h_{t-1}, not h_t (causality)      5. sparse FFN: ReLU, exactly top k
    2. error on u_t = LN1(x_t); pre-norm, final LayerNorm    6. no biases, tied embeddings, no aux loss
    3. context mix = linear map of [e_t ; x̂_t]               7. selective decays (control, variants.py)
    4. predictors: linear (paper), others (variants.py)      8. vocabulary padded to Vp rows

`SPEN(SPENConfig())` is the paper's model: 130,684,416 parameters. Run `python spen.py` (every reader's
parameters, state and FLOPs, from the reader itself, on the meta device); tests: tests/test_spen.py, tests/test_readers.py.
"""

if __name__ == "__main__":  # the demo at the end: a Ctrl-C from the first second is one line and exit 130, as in every
    import os, signal       # command (cli.exit_on_ctrl_c, SIGINT unblocked if held; a model file imports no plumbing)
    signal.signal(signal.SIGINT, lambda *_: os._exit(os.write(2, b"spen.py: interrupted (Ctrl-C)\n") and 130))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import ema
import lm
from variants import (VARIANT_READERS, Reader, ReaderOptions, SelectiveContext, block_config, block_list,
                      check_options, is_decays, require)
from writes import WRITE_READERS

TRACE_METHODS = ema.METHODS + ("loop",)  # 'loop': every reference loop inside the model (traces and readers)


@dataclass
class SPENConfig(ReaderOptions):  # and the readers' own options (write_alphas, conv, window, ...: variants.py)
    vocab_size: int = 50257  # V: GPT-2 BPE; the table has lm.padded_vocab(V) = 50304 rows
    block_size: int = 1024  # T: training context (no positional embedding: any T runs)
    n_layer: int = 12  # number of SPEN blocks (paper: 12)
    n_embd: int = 768  # C: width of x_t, u_t, each trace h_t^(s), x̂_t and e_t (paper: GPT-2 small)
    alphas: tuple = (0.5, 0.1, 0.02)  # a_s: fixed EMA decays, fast/medium/slow (paper); S = len(alphas)
    ffn_hidden: int = None  # F: sparse FFN width; None -> 4C
    ffn_topk: int = None  # k: hidden units kept per token; None -> round(0.06 F) (paper: "top 6%")
    predictor: str = "linear"  # each block's reader: one spec for all, or a comma list of n_layer (block_list)
    reads: str = "state"  # 'state': a fixed-size state (traces h_{t-1}; write readers: own M) | 'history': past slots
    context: str = "ema"  # how traces decay: 'ema' (paper, fixed a_s) | 'selective' (control, a_t from u_t)
    trace_method: str = "auto"  # 'auto' | 'scan' | 'matmul' (ema.py) | 'loop': every reference loop, same values
    n_head: int = None  # H: heads of the attention and write readers; None -> max(1, C // 64)
    dropout: float = 0.0  # on the embedding and both residual branches (paper: not stated)

    def __post_init__(self):  # the sizes left to None follow the width; a JSON list of decays is a tuple
        self.ffn_hidden = 4 * self.n_embd if self.ffn_hidden is None else self.ffn_hidden
        self.ffn_topk = max(1, round(0.06 * self.ffn_hidden)) if self.ffn_topk is None else self.ffn_topk
        self.n_head = max(1, self.n_embd // 64) if self.n_head is None else self.n_head
        self.alphas = tuple(self.alphas) if isinstance(self.alphas, list) else self.alphas
        self.write_alphas = tuple(self.write_alphas) if isinstance(self.write_alphas, list) else self.write_alphas
        self.predictor, self.reads = (tuple(x) if isinstance(x, list) else x for x in (self.predictor, self.reads))


def shift_right(h):
    """h_t -> h_{t-1} along time, with the zero state at t = 0. (B, T, ...) -> (B, T, ...)."""
    return F.pad(h, (0,) * (2 * (h.dim() - 2)) + (1, 0))[:, :-1]  # pad dim 1 by one in front, drop the last (T = 0 too)


class EMAContext(nn.Module):
    """The paper's temporal context: fixed decays, h_t^s = (1 - a_s) h_{t-1}^s + a_s u_t.
    u (B, T, C) -> h (B, T, S, C), float32 for half-precision u (ema.py, Precision). No parameters."""

    def __init__(self, cfg):
        super().__init__()
        self.alphas, self.trace_method = cfg.alphas, cfg.trace_method

    def forward(self, u):
        if self.trace_method == "loop":  # the definition, one step per token (as mamba.py's pscan=False)
            return ema.traces_ref(u.float() if u.dtype in ema.HALF else u, self.alphas)
        return ema.traces(u, self.alphas, method=self.trace_method)  # the fast paths, same values

    def step(self, u_t, h):
        return ema.step(u_t.float(), h, self.alphas)  # u_t (B, C), h_{t-1} (B, S, C) -> h_t


class LinearPredictor(Reader):
    """The paper's predictor (choice 4, PAPER.md): x̂_t = W_p [h_{t-1}^1 ; ... ; h_{t-1}^S], a static
    linear map of the trace state (W_p ~ N(0, 0.02), GPT-2's default for linear maps). Position-wise,
    no state of its own: the Reader defaults (variants.py) are its contract."""

    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(len(cfg.alphas) * cfg.n_embd, cfg.n_embd, bias=False)  # W_p (C, S C)

    def forward(self, u, h_prev):
        return self.proj(h_prev.flatten(-2))  # (..., S, C) -> (..., S*C) -> (..., C)


CONTEXTS = {"ema": EMAContext, "selective": SelectiveContext}
READERS = {("linear", "state"): LinearPredictor, **VARIANT_READERS, **WRITE_READERS}  # (predictor, reads) -> class
PREDICTORS = tuple(dict.fromkeys(p for p, _ in READERS))  # ('linear', 'linear_attn', 'softmax_attn', 'ema_kv', ...)
READS = tuple(dict.fromkeys(r for _, r in READERS))  # ('state', 'history')


class SparseFFN(nn.Module):
    """y = W_2 (m ⊙ relu(W_1 u)), m = 1 on the k largest of the F units of each token, else 0
    (choice 5, PAPER.md). Implemented as topk + scatter: the same function as the dense mask,
    with the same gradient (zero for the F - k dropped units). relu is monotone, so the top k of
    relu(z) are relu of the top k of z: relu runs on the k kept units only (exactly the same
    values and gradients, tests/test_spen.py; a dropped unit's gradient is 0 either way). It runs
    dense: a sparse kernel would save most of W_2's FLOPs, not W_1's."""

    def __init__(self, cfg):
        super().__init__()
        self.k = cfg.ffn_topk
        self.fc = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)  # W_1
        self.proj = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)  # W_2

    def forward(self, u):
        z = self.fc(u)  # (..., F) pre-activations
        vals, idx = z.topk(self.k, dim=-1, sorted=False)  # (..., k), ties broken by torch.topk
        a = torch.zeros_like(z).scatter(-1, idx, F.relu(vals))  # (..., F), at most k units nonzero
        return self.proj(a)  # (..., C)


class Block(nn.Module):
    """One SPEN block (module docstring), (B, T, C) -> (B, T, C); cfg is its own (block_config: one
    predictor, one reads). SPEN initialises it; standalone: init_weights."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.ln1 = nn.LayerNorm(C)
        self.ctx = CONTEXTS[cfg.context](cfg)
        self.pred = READERS[cfg.predictor, cfg.reads](cfg)
        self.mix = nn.Linear(2 * C, C, bias=False)  # W_mix: [e ; x̂] -> residual stream (choice 3, PAPER.md)
        self.ln2 = nn.LayerNorm(C)
        self.ffn = SparseFFN(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        u = self.ln1(x)  # (B, T, C); traces and error on the normalised input (choice 2, PAPER.md)
        h_prev = shift_right(self.ctx(u)).to(u.dtype)  # (B, T, S, C) h_{t-1}: the past only (choice 1, PAPER.md)
        xhat = self.pred(u, h_prev).to(u.dtype)  # (B, T, C)
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
    """The one initialisation of SPEN's parameters (GPT-2's scheme where it applies). The paper's, by name:
      wte.weight (Vp, C), tied to the head     N(0, 0.02)   GPT-2; logits start near uniform
      ffn.fc W_1 (F, C)                        N(0, 0.02)   GPT-2 default
      mix W_mix (C, 2C), ffn.proj W_2 (C, F)   N(0, 0.02 / sqrt(2 n_layer))   GPT-2: the two
                                               residual branches per block add 2 n_layer terms,
                                               so this keeps the stream's variance O(1) at init
      ln*.weight 1, ln*.bias 0                 identity LayerNorm
    A submodule with an `init_weights(cfg)` method (each reader, LinearPredictor's W_p included, and
    the selective context: variants.py) sets its own parameters and returns them, called where
    its parameters come in order, so a seed gives the same numbers whatever owns the rule.
    Raises if a parameter is left without a rule, so a new one cannot silently keep torch's default.
    """
    residual_std = 0.02 / math.sqrt(2 * cfg.n_layer)
    done = set()  # ids of the parameters set so far (the tied head is the embedding: set once)

    def visit(m, prefix):  # pre-order, as named_parameters: the same random draws in the same order
        if m is not module and hasattr(m, "init_weights"):
            done.update(map(id, m.init_weights(cfg)))  # a reader or context owns its rules
            return
        for name, p in m.named_parameters(prefix, recurse=False):
            if id(p) in done:
                continue
            leaf = name.split(".")[-1]
            if name.endswith(("mix.weight", "ffn.proj.weight")):
                p.normal_(0.0, residual_std)
            elif name.endswith(("wte.weight", "ffn.fc.weight")):
                p.normal_(0.0, 0.02)
            elif ".ln" in "." + name and leaf in ("weight", "bias"):
                p.fill_(1.0 if leaf == "weight" else 0.0)
            else:
                raise ValueError(f"init_weights has no rule for parameter {name!r}; add one")
            done.add(id(p))
        for name, child in m.named_children():
            visit(child, f"{prefix}.{name}" if prefix else name)

    visit(module, "")
    for name, p in module.named_parameters():
        if id(p) not in done:  # a submodule's init_weights left it out
            raise ValueError(f"init_weights has no rule for parameter {name!r}; add one")


class SPEN(nn.Module):
    """Token embedding -> n_layer Blocks -> final LayerNorm -> tied head. No positions. Every id
    enters through embed(), which checks it without reading anything back from the device."""

    def __init__(self, cfg):
        super().__init__()
        specs = check(cfg)  # (predictor, reads, own options) of each block, read once
        self.config = cfg
        Vp = lm.padded_vocab(cfg.vocab_size)  # choice 8, PAPER.md
        self.wte = nn.Embedding(Vp, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(block_config(cfg, b)) for b in specs)
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, Vp, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings, one parameter (choice 6, PAPER.md)
        init_weights(self, cfg)

    def embed(self, idx):
        """Token ids (...) -> embeddings (..., C); the one place ids enter, so the one id check."""
        lm.check_tokens(idx, self.config.vocab_size)
        return self.wte(idx)

    def head(self, x):
        """(..., C) -> logits (..., V): the tied head, without the padding rows' columns."""
        return self.lm_head(self.ln_f(x))[..., :self.config.vocab_size]

    def forward(self, idx, targets=None):
        """idx (B, T) int64 -> logits (B, T, V), mean cross-entropy over targets != -1 (or None).
        The LM loss is the only loss: x̂ learns through it (choice 6, PAPER.md)."""
        x = self.drop(self.embed(idx))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x)  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1)

    def hidden_states(self, idx):
        """idx (B, T) -> list of n_layer + 1 tensors (B, T, C): embedding, then after each block."""
        out = [self.drop(self.embed(idx))]
        for block in self.blocks:
            out.append(block(out[-1]))
        return out

    def init_state(self, batch_size, device=None):
        """Per-block state before the first token: traces (B, S, C), and a history reader's own."""
        device = device if device is not None else self.wte.weight.device
        return [block.init_state(batch_size, device) for block in self.blocks]

    def state_floats(self, T):
        """Numbers per sequence and layer that step() holds after T tokens, averaged over the blocks
        (their sum / n_layer: a hybrid's blocks differ): the S*C traces of each block (all of it for
        the trace-state readers), plus what each reader holds (variants.py: a write reader's M, a
        history reader's cache or sums)."""
        S, C = len(self.config.alphas), self.config.n_embd
        return round(sum(S * C + b.pred.state_floats(T) for b in self.blocks) / len(self.blocks))

    def step(self, token, state):
        """token (B,) int64, state -> (logits (B, V), new state). Equals forward() token by token."""
        if token.dim() != 1:
            raise ValueError(f"token must be a (B,) tensor of token ids, got shape {tuple(token.shape)}")
        x = self.embed(token)  # (B, C)
        new_state = []
        for block, s in zip(self.blocks, state):
            x, s = block.step(x, s)
            new_state.append(s)
        return self.head(x), new_state  # (B, V)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """Extend idx (B, T) by max_new_tokens sampled tokens -> (B, T + max_new_tokens), feeding
        the prompt through step() (no crop: no positions). temperature 0 means greedy."""
        lm.check_sampling(max_new_tokens, temperature, top_k)
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.shape[1] == 0:
            raise ValueError("generate needs a prompt of at least one token, shape (B, T) (e.g. the EOT id 50256)")
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
        """Training FLOPs per token (forward + backward = 3 x forward) at sequence length T:
            6 N_matmul + 3 sum over blocks of attn_flops(T)
        N_matmul: the weights used in matmuls (tied head once, the FFN DENSE, as it runs; vectors
        and what a submodule names in `no_matmul_params()`, added not multiplied, left out).
        attn_flops: what each block's reader computes in its training forward beyond them, per token
        (each reader's own formula: `python spen.py` prints them). The EMA traces (a few S C
        elementwise FLOPs per token, memory-bound) are left out."""
        skip = {id(p) for m in self.modules() if hasattr(m, "no_matmul_params") for p in m.no_matmul_params()}
        n_matmul = sum(p.numel() for p in self.parameters() if p.dim() >= 2 and id(p) not in skip)
        return 6 * n_matmul + 3 * sum(b.pred.attn_flops(T) for b in self.blocks)


def check(cfg):
    """A one-line ValueError naming the field for a config SPEN cannot build (SPEN() calls it): SPEN's own
    fields; a reader declares its options (Reader.options: write_alphas, conv, ...) and checks them.
    Returns the model's blocks as variants.block_list reads them, n_layer of them."""
    for name in ("vocab_size", "block_size", "n_layer", "n_embd", "ffn_hidden", "ffn_topk", "n_head"):
        v = getattr(cfg, name)
        require(type(v) is int and v >= 1, f"{name} must be an int >= 1, got {v!r}")
    require(cfg.ffn_topk <= cfg.ffn_hidden, f"ffn_topk ({cfg.ffn_topk}) must be <= ffn_hidden ({cfg.ffn_hidden})")
    require(is_decays(cfg.alphas), f"alphas must be a non-empty tuple of distinct decays in (0, 1], got {cfg.alphas!r}")
    require(isinstance(cfg.dropout, (int, float)) and 0 <= cfg.dropout < 1, f"dropout must be in [0, 1), got {cfg.dropout!r}")
    for name, choices in (("context", tuple(CONTEXTS)), ("trace_method", TRACE_METHODS)):
        value = getattr(cfg, name)
        require(value in choices, f"{name} must be one of {', '.join(choices)}, got {value!r}")
    model = block_list(cfg.predictor, cfg.reads, cfg.n_layer)  # [(predictor, reads, own options)] of each block
    predictors, reads = (tuple(dict.fromkeys(key[i] for key in READERS)) for i in (0, 1))  # the registry as it is now
    for p, r, own in model:
        require(p in predictors, f"predictor must be one of {', '.join(predictors)}, got {p!r}")
        require(r in reads, f"reads must be one of {', '.join(reads)}, got {r!r}")
        require((p, r) in READERS, f"reads={r!r} needs a predictor that reads the history "
                f"({', '.join(q for q, s in READERS if s == 'history')}); predictor={p!r} reads the state only")
        for name in own:  # a block's own option: its reader must use it
            require(name in READERS[p, r].options, f"predictor: {name} is not an option of {p} (reads={r}): "
                    f"{', '.join(READERS[p, r].options) or 'it has none'}")
    classes = list(dict.fromkeys(READERS[p, r] for p, r, _ in model))  # the model's readers, each once
    for name in dict.fromkeys(o for c in READERS.values() for o in c.options):  # every reader option, once
        value, default = getattr(cfg, name), getattr(SPENConfig, name)
        users = ", ".join(p + ("" if r == "state" else f" (reads={r!r})") for (p, r), c in READERS.items() if name in c.options)
        require((type(value), value) == (type(default), default) or any(name in c.options for c in classes),
                f"{name} applies to predictor {users} only; the model has none (got {name}={value!r})")
    for block in model:
        check_options(block_config(cfg, block))  # its options' values, against their declarations
        READERS[block[:2]].check(block_config(cfg, block))  # what else its options (and sizes) must be
    return model


VARIANTS = [(p, r, c) for (p, r) in READERS for c in CONTEXTS]  # every predictor x reads x context

if __name__ == "__main__":  # every reader at the paper's size, its numbers from the reader itself
    T = 1024
    print(f"SPEN at the paper's size (12 x 768), T = {T}; per block: the reader's parameters, the state it holds "
          f"beyond the S C traces (state_floats) and its FLOPs per token beyond its weights (attn_flops)")
    with torch.device("meta"):  # the sizes only: nothing allocated
        for (predictor, reads), cls in READERS.items():
            m = SPEN(SPENConfig(predictor=predictor, reads=reads))
            r = m.blocks[0].pred
            print(f"{predictor:12s} {reads:7s} {cls.__name__:18s} reader params {sum(p.numel() for p in r.parameters()):>10,}"
                  f" | state {r.state_floats(T):>9,} | attn FLOPs {r.attn_flops(T):>10,} | model params {m.num_params():,},"
                  f" train {m.flops_per_token(T) / 1e9:.2f} GFLOP/token")
        base, sel = SPEN(SPENConfig()), SPEN(SPENConfig(context="selective"))
    print(f"context=selective adds {sel.num_params() - base.num_params():,} parameters (W_a, b_s per block) to any reader")

"""SPEN's variants: the reader contract (Reader), the block spec (`blocks`: which reader each block
has, with its own options, read from one string), the attention readers of the traces and the
selective context. spen.py imports them by name (VARIANT_READERS, SelectiveContext); the paper's
own reader (the linear predictor) and context (fixed-decay EMA) live in spen.py, the readers that
write a state of their own (ema_kv, delta, gated_delta, gated_ema_kv) in writes.py beside their rules.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN" and its
predictor ablation (a linear map and full softmax attention over the traces tie). The paper
argues by data processing: once the EMA has mixed the tokens into the trace state, no reader of
that state can recover what it lost. That argument holds only for a reader restricted to the
trace state, so the attention readers come in two families (config field `reads`, PAPER.md choice 4):

  reads='state'    x̂_t is a function of u_t and the S vectors h_{t-1}^1..S of the layer only:
                   the recurrent state, S*C numbers whatever the context length. For the
                   attention readers the paper's argument applies. (The write readers, writes.py,
                   also read 'state': a fixed size, but their own M, written from every past u_j:
                   the argument does not apply to them.)
  reads='history'  every past (position j <= t, trace s) pair is a key/value slot holding
                   h_{j-1}^s. LOSSLESS: the trace history is an invertible transform of the
                   inputs, u_t = (h_t^s - (1 - a_s) h_{t-1}^s) / a_s for any s, so the argument
                   does not apply. softmax_attn's step() keeps a cache of every slot (like a KV
                   cache), or with a window w of the last w positions only; linear_attn's step()
                   keeps the running sums of its linear attention.

Readers here (config `predictor` x `reads`; parameters per block, and state_floats: what step()
holds per layer beyond the S*C traces; each reader's own `state_floats` and `attn_flops` are its
formulas, and `python spen.py` prints them for every reader):
  linear_attn   state    linear attention over the S slots of h_{t-1}      (3C^2 + SC)       0
  softmax_attn  state    softmax attention over the S slots of h_{t-1}     (3C^2 + SC)       0
  linear_attn   history  causal linear attention over all T*S past slots   (3C^2 + SC)       C*D + C
  softmax_attn  history  causal softmax attention over all T*S past slots  (3C^2 + SC)       2*T*S*C (window w:
                                                                                             2*min(T, w)*S*C)

A slot holds z = h_{j-1}^s + E_s (E_s a learned timescale embedding); keys k = W_k z and values
v = W_v z come from trace states only, the query q_t = W_q u_t from the current input (content-
based: the strongest reader); values never hold u_t, so x̂_t cannot copy it. No output
projection (W_mix follows linearly): 3C^2 + SC parameters per block against the linear
predictor's S C^2, so the ablation changes only how the traces are read.

SelectiveContext (context='selective', PAPER.md choice 7) is the positive control, not in the
paper: input-dependent decays a_t^s = sigmoid(W_a u_t + b_s), which start as the fixed EMA.

Shape glossary
    B batch, T time, C width, S traces, H heads, D = C / H head width, w window,
    L chunk length and N = ceil(T / L) chunks of the chunked linear attention.

The contract is the Reader base class (its docstring; a position-wise reader writes forward and
what differs from the defaults; a reader declares the options it reads and checks them).
trace_method='loop' (spen.py's one switch for every reference) runs the quadratic linear attention
instead of its chunked form (and the write rules' loops).

Run: nothing to run; tests/test_readers.py checks every registered reader's contract (its fast path
against its loop, causality, step against forward, its state, its options); tests/test_variants.py
each reader against its definition, what each family tells apart, what the write readers store.
"""


import re
from dataclasses import dataclass, field, fields, replace

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


def require(ok, message):
    """A config check (spen.check, each reader's check): a one-line ValueError "SPENConfig.<message>",
    the message opening with the field's name."""
    if not ok:
        raise ValueError(f"SPENConfig.{message}")


def is_decays(a):
    """A non-empty tuple of distinct decays in (0, 1] (SPENConfig.alphas, write_alphas): a decay twice is the
    same state twice, refused as a flag naming an entry twice is, whether the flag or a block spec gives it."""
    return (isinstance(a, tuple) and len(a) == len(set(a)) > 0
            and all(type(x) in (int, float) and 0 < x <= 1 for x in a))


def option(default, doc, bounds=None, ok=None, must=None):
    """A reader option, declared once, as a ReaderOptions field: its type (the annotation), default, one
    line of doc, and what a value must be: an int in bounds (lo, hi), True or False, or ok(value), said
    as `must`. The block spec's parser (READ_AS), spen.check and train.py's flags read it from here."""
    return field(default=default, metadata=dict(doc=doc, bounds=bounds, ok=ok, must=must))


@dataclass
class ReaderOptions:
    """The options a reader may read (its Reader.options names them): SPENConfig fields (SPENConfig
    subclasses this), a block's own options in a spec (`delta(conv=4)`), and train.py flags."""
    write_alphas: tuple = option(None, "write decays: ema_kv's a_s, a D x D state each (None: the trace decays); "
                                 "delta's one a, g = 1 - a (None: no decay)", bounds=(0, 1),
                                 ok=lambda v: v is None or is_decays(v),
                                 must="None or a non-empty tuple of distinct decays in (0, 1]")
    read_norm: bool = option(False, "write readers: RMSNorm of each head's read, gain 1 at init")
    conv: int = option(0, "write readers: kernel K of a short causal convolution on q, k, v (4 in the field); 0: "
                       "none", bounds=(0, 64))
    key_dim: int = option(0, "Dk, the delta rule's key width per head (its exact capacity in keys); 0: C / n_head",
                          bounds=(0, 4096))
    value_dim: int = option(0, "Dv, the delta rule's value width per head; 0: C / n_head", bounds=(0, 4096))
    window: int = option(0, "softmax over the history: attend to the last w positions only (bounded); 0: all",
                         bounds=(0, 2 ** 20))


def check_options(cfg):
    """Each reader option of cfg against its declaration (ReaderOptions): one line naming it."""
    for f in fields(ReaderOptions):
        v, m = getattr(cfg, f.name), f.metadata
        if m["ok"]:
            ok, must = m["ok"](v), m["must"]
        elif f.type is bool:
            ok, must = type(v) is bool, "True or False"
        else:
            lo, hi = m["bounds"]
            ok, must = type(v) is int and lo <= v <= hi, f"an int in {lo}..{hi}"
        require(ok, f"{f.name} must be {must}, got {v!r}")


SPEC = re.compile(r"(?:(\d+)\*)?(\w+)(?:\((.*)\))?")  # [N*]PREDICTOR[(option=value, ...)]
FROM_TEXT = {str: str, int: int, bool: lambda v: {"true": True, "false": False}[v.lower()],
             tuple: lambda v: tuple(map(float, v.split()))}  # a value of each option type, from a spec's text
READ_AS = {"reads": str, **{f.name: FROM_TEXT[f.type] for f in fields(ReaderOptions)}}  # a block's own options


def split(text):
    """'a(x=1, y=2), b' -> ['a(x=1, y=2)', 'b']: the commas outside parentheses."""
    parts, depth = [""], 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        parts[-1] += ch if (ch != "," or depth) else ""
        parts += [""] if (ch == "," and not depth) else []
    return [p.strip() for p in parts]


def block_list(predictor, reads="state", n_layer=None):
    """The blocks a spec lists -> [(predictor, reads, own options), ...]: one entry (every block alike)
    or one per block. `predictor` is one spec or a comma list; a spec is [N*]PREDICTOR[(option=value, ...)]:
    N blocks alike, with their own reads (state | history) or reader options (write_alphas as
    space-separated decays, read_norm true|false, conv, window), which the model-wide fields give otherwise:
        "linear"                                          the paper's model
        "3*gated_delta(conv=4),softmax_attn(reads=history)"   three write blocks, one attention block on top
    The older spelling, one name per block in both fields ("a,b" and "state,history", or tuples), reads alike.
    n_layer: the model's depth: a spec's counts are held to it before they are expanded, and the list
    returned is the model's blocks, n_layer of them (spen.check's one reading of them)."""
    names = list(predictor) if isinstance(predictor, tuple) else split(predictor)
    reads = list(reads) if isinstance(reads, tuple) else split(reads)
    specs = []
    for text in names:
        m = SPEC.fullmatch(text)
        require(m, f"predictor: {text!r} is not a block spec [N*]PREDICTOR[(option=value, ...)], e.g. "
                   f"3*delta(conv=4),softmax_attn(reads=history)")
        require(int(m[1] or 1) > 0, f"predictor: {text!r} names no block; a count N in N*PREDICTOR is at least 1")
        own = {}
        for item in filter(None, split(m[3] or "")):
            key, _, value = item.partition("=")
            key = key.strip()
            require(key in READ_AS,
                    f"predictor: a block's own options are {', '.join(READ_AS)}, got {item!r} in {text!r}")
            require(key not in own, f"predictor: {key} is given twice in {text!r}; give it once")
            try:
                own[key] = READ_AS[key](value.strip())
            except (ValueError, KeyError):
                require(False, f"predictor: {item!r} in {text!r} is not a {key} value")
        specs.append((m[2], own, int(m[1] or 1)))
    count = sum(n for *_, n in specs)
    require(n_layer is None or count in (1, n_layer), f"predictor names {count} blocks; the model has n_layer = "
                                                      f"{n_layer}: one spec for all, or one per block")
    out = [(p, own) for p, own, n in specs for _ in range(n)]  # counted above: a huge N is refused, not expanded
    if len(reads) > 1 and len(reads) != len(out):  # the older spelling: one name per block in both lists
        require(len(out) == 1, f"reads names {len(reads)} blocks, predictor {len(out)}: one per block in both, or one "
                               f"reads for all")
        out *= len(reads)
    reads = reads * len(out) if len(reads) == 1 else reads
    out = [(p, own.get("reads", r), {k: v for k, v in own.items() if k != "reads"}) for (p, own), r in zip(out, reads)]
    if n_layer is not None:  # the model's blocks, n_layer of them
        out = out * n_layer if len(out) == 1 else out
        require(len(out) == n_layer, f"predictor names {len(out)} blocks; the model has n_layer = {n_layer}: "
                                     f"one spec for all, or one per block")
    return out


def spec(block):
    """(predictor, reads, own options) -> its spec text, which block_list reads back as [block]."""
    predictor, reads, own = block
    text = lambda v: (" ".join(map(str, v)) if isinstance(v, tuple) else str(v).lower() if isinstance(v, bool)
                      else str(v))
    options = ", ".join(f"{k}={text(v)}" for k, v in {**({"reads": reads} if reads != "state" else {}), **own}.items())
    return f"{predictor}({options})" if options else predictor


def block_config(cfg, block):
    """The config one block's reader reads: the model's, with the block's predictor, reads and own options."""
    predictor, reads, own = block
    return replace(cfg, predictor=predictor, reads=reads, **own)


def check_heads(cfg):
    """A reader with heads splits C into H heads of D = C / H: H must divide C."""
    require(cfg.n_embd % cfg.n_head == 0, f"n_embd ({cfg.n_embd}) must be divisible by n_head ({cfg.n_head})")


class Reader(nn.Module):
    """The reader contract, with its defaults: x̂ = forward(u (B, T, C), h_prev (B, T, S, C)) ->
    (B, T, C), strictly causal (x̂_t from u_t and h_{<t} only). A position-wise reader writes
    forward and what differs from these defaults:
        options = ()                             the reader options (ReaderOptions, each declared once
                                                 there) it reads; spen.check refuses one set on a
                                                 model whose readers all leave it out
        check(cfg)                               a one-line ValueError (`require`) for a value of its
                                                 options (or sizes) it cannot take beyond what their
                                                 declarations say (check_options); default: none
        init_state(B, device) -> None            no state beyond the S*C traces the block holds
        step(u_t, h_prev_t, state) -> (x̂_t, state)   forward at one token
        state_floats(T) -> 0                     numbers step() holds per sequence beyond the traces
        attn_flops(T) -> 0                       forward FLOPs per token beyond its weight matmuls
        no_matmul_params() -> []                 parameters left out of the 6N FLOPs (added, not multiplied)
        init_special(cfg) -> []                  the parameters with a rule of their own, set first
        init_weights(cfg) -> the parameters it set: init_special's, then every other matrix ~ N(0, 0.02),
                                                 GPT-2's default; a vector without a rule is an error
    spen.Block holds one per block; spen.READERS names them."""

    options = ()

    @classmethod
    def check(cls, cfg):
        pass

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

    def init_special(self, cfg):
        return []

    @torch.no_grad()
    def init_weights(self, cfg):
        """init_special's parameters, then every other matrix ~ N(0, 0.02) in parameters() order (the
        draws a seed has always given); refuses a vector, which needs a rule of its own."""
        out = self.init_special(cfg)
        done = {id(p) for p in out}
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

    @classmethod
    def check(cls, cfg):
        check_heads(cfg)

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

    options = ("window",)

    @classmethod
    def check(cls, cfg):
        super().check(cfg)  # the heads
        w = cfg.window  # an int >= 0 (check_options)
        require(w < cfg.block_size, f"window ({w}) must be below block_size ({cfg.block_size}); 0 for no window")

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


# (predictor, reads) -> class; spen.READERS adds the paper's ('linear', 'state') and writes.WRITE_READERS.
# A new reader: one class and one line here (or in writes.py for a write rule).
VARIANT_READERS = {
    ("linear_attn", "state"): LinearAttnState,
    ("softmax_attn", "state"): SoftmaxAttnState,
    ("linear_attn", "history"): LinearAttnHistory,
    ("softmax_attn", "history"): SoftmaxAttnHistory,
}

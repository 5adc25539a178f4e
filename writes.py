"""The readers that write: SPEN's readers whose state is a key-value memory (`predictor` = ema_kv |
delta | delta_product | gated_delta | gated_delta_ret | gated_ema_kv), each running one rule of
rules.py (step, loop and chunked form: the maths lives there, as fla keeps `ops/<op>/naive.py`
apart from its layers).

Each reader reads top to bottom, as mamba-minimal's forward -> ssm -> selective_scan: projections
(k_t from the trace state h_{t-1}, q_t and v_t from u_t; an optional short causal convolution on
each, cfg.conv) -> the rule -> the read-out. Their state is float32 under autocast; each declares
the options it reads (ema_kv and delta: write_alphas, read_norm, conv; the gated rules: conv).
Parameters per block and state floats per layer (beyond the S*C traces; K the convolution's
kernel, X its channels):
  ema_kv       (S_w + S + 1) C^2            S_w C D (+ (K - 1) X)
  delta        (S + 2) C^2 + H C            C D (+ (K - 1) X)
  gated_delta  (S + 3) C^2 + 2 H C + ...    C D (+ (K - 1) X)      (gated_ema_kv: the same)

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) asks whether the EMA's decay or its write
(h += a (x - h): one vector, no key) loses content; these readers keep the decays and change the
write (results/scaling), then add what the field adds around it (results/map).

Shape glossary
    B batch, H heads, T time, C width, S traces, D = C / H head width, S_w write decays (ema_kv),
    M the state (D x D per head, and per decay for ema_kv).

Run: nothing to run; tests/test_writes.py checks each rule's chunked form against its loop,
tests/test_readers.py every reader's contract, tests/test_variants.py what the readers store.
"""

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import ema
from rules import (delta_product_chunked, delta_product_ref, delta_product_step, delta_rule_chunked, delta_rule_ref,
                   delta_rule_step, ema_kv_chunked, ema_kv_ref, ema_kv_step, gated_delta_chunked, gated_delta_ref,
                   gated_delta_step)
from variants import Reader, check_heads, reader_chunk_len, require


def l2norm(x, eps=1e-6):
    """x / sqrt(|x|^2 + eps) over the last dim (fla's DeltaNet form). Not F.normalize: SPEN's key
    at t = 0 is exactly zero (h_{-1} = 0), where x / max(|x|, 1e-12) has slope 1e12, which
    overflows an fp16 gradient; here the slope at 0 is eps^-1/2 = 1e3."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


# ------------------------------------------------------------------------------------------
# The readers that write (WRITE_READERS, at the end): projections -> the rule (rules.py) -> the read-out.


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
    def check(cls, cfg):  # the heads (each option's value: variants.check_options, from its declaration)
        check_heads(cfg)

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

    @classmethod
    def gate_init(cls, H):
        """fla's gate for H heads -> (A_log, dt_bias): A_log = log U(1, 16); dt_bias = softplus^-1(dt), dt
        log-uniform in dt_range ([1e-3, 0.1]), so alpha starts between about exp(-1.6) and exp(-1e-3) per
        head (ignoring W_a u_t: a half-life ln 2 / (A dt) of 0.4 to 690 tokens). dev.halflife draws it too."""
        dt = torch.exp(torch.empty(H).uniform_(*map(math.log, cls.dt_range)))
        return torch.empty(H).uniform_(1, 16).log(), dt + torch.log(-torch.expm1(-dt))

    def init_special(self, cfg):
        """The gate (gate_init), the norm's gain 1; then the convolution's taps, and the matrices, as the
        other write readers."""
        A_log, dt_bias = self.gate_init(len(self.A_log))
        done = [self.A_log.copy_(A_log), self.dt_bias.copy_(dt_bias), self.out_norm.fill_(1.0)]
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

"""SPCN: Sparse Predictive Column Network, trained without backpropagation.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Small scale: SPCN". Frozen random
feedforward projections into columns, top-k sparse activity per column, multi-timescale EMA
traces of that activity as the only temporal context, and feedback (predictive) weights
learned by the Precision-Gated Hebbian Update (PGHU). Zero labels are used to train it; role
labels only ever reach the linear probes in probe.py.

Shape glossary
    B sentences in a batch, T time (words), V vocabulary (147), K columns, U units per column,
    D = K * U units in all, S number of traces (len(alphas)).

One time step (x_t the one-hot word; h_{t-1} the traces of the percept before t)
    f_t   = W_ff x_t                                    feedforward drive (frozen random), (B, D)
    a_t   = topk_col(f_t)                               bottom-up activity: k winners per column
    p_t   = P h_{t-1}                                   top-down prediction of a_t, (B, D)
    e_t   = a_t - p_t                                   prediction error
    q_t   = g * topk_col(p_t)                           predictive units: the expected pattern
    r_t   = [a_t, q_t]                                  percept of the column layer, (B, 2D)
    h_t^s = (1 - alpha_s) h_{t-1}^s + alpha_s r_t       EMA traces (ema.step), (B, S, 2D)
The Precision-Gated Hebbian Update, for every unit i (post) and trace input j (pre):
    v_i   <- (1 - rho) v_i + rho * mean_b e_{t,i}^2     running variance of unit i's error
    pi_i   = (1 / (v_i + eps)) / mean_i (1 / (v_i + eps))   precision, normalised to mean 1
    P_ji  <- P_ji + eta * pi_i * mean_b h_{t-1,j} e_{t,i}
a Hebbian product of pre-synaptic trace and post-synaptic error (the delta rule of predictive
coding), with a rate that is larger for units whose error is reliable (high precision). It is
a batch LMS step, stable while eta * max(pi) * lambda_max(E[h h^T]) < 2: with the default
traces lambda_max is about 34 and max(pi) about 2.5, so eta = 0.01 gives 0.85 (a larger g
scales h, hence lambda_max by g^2, and breaks it).

Code name -> paper symbol
    W_ff  frozen random feedforward projection       P  feedback (predictive) weights
    a     sparse column activity (instantaneous)     h  multi-timescale EMA traces
    q     top-down (predictive) units                var, 1/var  error variance, precision

Choices where the paper is silent, written out once in PAPER.md ("Choices in spcn.py"):
    1 one layer of columns over a frozen projection; 2 PGHU as a precision-scaled delta rule;
    3 predictive units are traced too (g = 0 switches them off); 4 sentences are independent.

Untrained: SPCN(cfg) before fit() is the same frozen projection and traces with P = 0, so no
prediction (p = 0, q = 0, error = k / U per unit); probe.py probes it as the control for what
PGHU adds.

A library: nothing to run. `python probe.py fit` trains an SPCN on Grammar A and saves it
(save / load below); `python probe.py --load_spcn out/spcn/spcn.pt` probes it; tests/test_spcn.py
checks this file.
"""

import os
from dataclasses import asdict, dataclass

import torch

import grammar
from ema import step


@dataclass
class SPCNConfig:
    vocab_size: int = 147            # V: input words (one-hot)
    n_columns: int = 16              # K: columns
    column_size: int = 32            # U: units per column
    k: int = 4                       # winners per column (sparsity k / U = 12.5%)
    alphas: tuple = (0.5, 0.2, 0.05)  # alpha_s: trace decays, half-lives ~1, 3, 14 words
    feedback_gain: float = 1.0       # g: amplitude of the predictive units (0 = none)
    lr: float = 0.01                 # eta: PGHU learning rate (0 = no learning)
    var_rate: float = 0.01           # rho: rate of the running error variance
    eps: float = 1e-3                # floor added to the variance
    seed: int = 0                    # seed of the frozen random projection

    def __post_init__(self):
        """Refuse impossible settings with a one-line ValueError naming the flag."""
        self.alphas = tuple(self.alphas)

        def req(ok, message, *values):
            if not ok:
                raise ValueError(message.format(*values))
        for name in ("vocab_size", "n_columns", "column_size"):
            v = getattr(self, name)
            req(isinstance(v, int) and v >= 1, "--{} must be an integer >= 1, got {!r}", name, v)
        req(isinstance(self.k, int) and 1 <= self.k <= self.column_size,
            "--k must be an integer in 1..column_size ({}), got {!r}", self.column_size, self.k)
        req(len(self.alphas) >= 1 and all(isinstance(a, (int, float)) and 0 < a <= 1 for a in self.alphas),
            "--alphas must be one or more trace decays in (0, 1], got {}", " ".join(map(str, self.alphas)))
        req(self.feedback_gain >= 0, "--feedback_gain must be >= 0, got {}", self.feedback_gain)
        req(self.lr >= 0, "--lr must be >= 0 (0: no learning), got {}", self.lr)
        req(0 < self.var_rate <= 1, "--var_rate must be in (0, 1], got {}", self.var_rate)
        req(self.eps > 0, "--eps must be > 0, got {}", self.eps)


class LoadError(ValueError):
    """A missing, unreadable or foreign spcn.pt; the message is one line naming the file."""


def topk_columns(x, n_columns, k):
    """Keep the k largest units of each column at 1, the rest 0. x (..., D) -> (..., D)."""
    shape = x.shape
    x = x.reshape(*shape[:-1], n_columns, -1)  # (..., K, U)
    out = torch.zeros_like(x).scatter_(-1, x.topk(k, dim=-1).indices, 1.0)
    return out.reshape(shape)


class SPCN(torch.nn.Module):
    """Frozen feedforward columns + EMA traces + PGHU-learned feedback. Every tensor is a
    non-trainable Parameter (so state_dict holds them); nothing here ever needs a gradient."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D, S = cfg.n_columns * cfg.column_size, len(cfg.alphas)
        g = torch.Generator().manual_seed(cfg.seed)
        # Frozen random projection, unit Gaussian: one-hot input, so each word's drive is a
        # row of W_ff and its bottom-up code is a random k-of-U pattern in every column.
        self.W_ff = torch.nn.Parameter(torch.randn(cfg.vocab_size, D, generator=g),
                                       requires_grad=False)  # (V, D)
        # Feedback weights start at zero: no prediction before any learning.
        self.P = torch.nn.Parameter(torch.zeros(S * 2 * D, D), requires_grad=False)  # (2SD, D)
        # Running error variance starts at the variance of a k-of-U binary unit (no prediction).
        q = cfg.k / cfg.column_size
        self.var = torch.nn.Parameter(torch.full((D,), q * (1 - q)), requires_grad=False)  # (D,)

    @property
    def n_units(self):
        return self.cfg.n_columns * self.cfg.column_size

    def run(self, ids, learn=False):
        """Process padded sentences. ids (B, T) int64, -1 = padding.

        Returns (a, r, h, err): bottom-up activity a (B, T, D), percept r = [a, q] (B, T, 2D),
        traces h (B, T, S, 2D) and the mean squared prediction error per unit and real token
        (float). With learn=True, P and var are updated by PGHU after every time step.
        """
        assert not any(p.requires_grad for p in self.parameters()), "SPCN never uses autograd"
        cfg, D, S = self.cfg, self.n_units, len(self.cfg.alphas)
        B, T = ids.shape
        if ids.numel() and (ids.max() >= cfg.vocab_size or ids.min() < -1):
            raise ValueError(f"word ids must be in 0..{cfg.vocab_size - 1} or -1 (padding)")
        h = torch.zeros(B, S, 2 * D)  # (B, S, 2D)
        A, R, H = [], [], []
        sq, n = 0.0, 0
        with torch.no_grad():
            for t in range(T):
                real = (ids[:, t] >= 0).float().unsqueeze(1)  # (B, 1)
                f = self.W_ff[ids[:, t].clamp(min=0)]  # (B, D)
                a = topk_columns(f, cfg.n_columns, cfg.k) * real  # (B, D)
                ctx = h.reshape(B, S * 2 * D)  # (B, 2SD) traces before t
                p = ctx @ self.P  # (B, D) prediction of a_t
                e = (a - p) * real  # (B, D)
                nb = real.sum().clamp(min=1)
                sq, n = sq + (e ** 2).sum().item() / D, n + int(real.sum().item())
                if learn:
                    self.var.mul_(1 - cfg.var_rate).add_(cfg.var_rate * (e ** 2).sum(0) / nb)
                    prec = 1.0 / (self.var + cfg.eps)  # (D,)
                    prec = prec / prec.mean()
                    self.P.add_(cfg.lr * (ctx.T @ (e * prec)) / nb)  # (2SD, D) Hebbian
                # Before any learning p = 0 and topk would pick arbitrary ties: q = 0 then.
                q = cfg.feedback_gain * topk_columns(p, cfg.n_columns, cfg.k) * real  # (B, D)
                q = q * (p.abs().amax(-1, keepdim=True) > 0)
                r = torch.cat([a, q], dim=-1)  # (B, 2D)
                h = torch.where(real.unsqueeze(-1) > 0, step(r, h, cfg.alphas), h)  # (B, S, 2D)
                A.append(a)
                R.append(r)
                H.append(h)
        return (torch.stack(A, 1), torch.stack(R, 1), torch.stack(H, 1),  # (B, T, ...) x3
                sq / max(n, 1))

    def fit(self, sentences, epochs=3, batch_size=64, log=print):
        """Unsupervised PGHU training on (words, roles) pairs; roles are ignored.

        Returns the mean squared prediction error of each epoch (should fall)."""
        ids, _, _ = grammar.encode(sentences)  # (N, T)
        g = torch.Generator().manual_seed(self.cfg.seed + 1)
        errs = []
        for ep in range(epochs):
            order = torch.randperm(len(ids), generator=g)
            tot, nb = 0.0, 0
            for i in range(0, len(ids), batch_size):
                batch = ids[order[i:i + batch_size]]
                batch = batch[:, : int((batch >= 0).sum(1).max())]  # trim padding columns
                tot, nb = tot + self.run(batch, learn=True)[3], nb + 1
            errs.append(tot / max(nb, 1))
            if log:
                log(f"spcn epoch {ep + 1}/{epochs}: prediction error {errs[-1]:.4f}")
        return errs


def save(model, path):
    """Atomic write: config + state dict to path.tmp, then rename."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"config": asdict(model.cfg), "state_dict": model.state_dict()}, tmp)
    os.replace(tmp, path)


def load(path):
    """spcn.pt from save() -> SPCN; LoadError (one line) for a missing, corrupt or foreign file."""
    if not os.path.isfile(path):
        raise LoadError(f"no SPCN checkpoint at {path}; make one with `python probe.py fit`")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
        model = SPCN(SPCNConfig(**ck["config"]))
        model.load_state_dict(ck["state_dict"])
    except Exception as e:  # any unpickling, key or shape error means the same thing here
        raise LoadError(f"{path} is not an SPCN checkpoint from `python probe.py fit` "
                        f"({type(e).__name__}); make one with `python probe.py fit`") from None
    return model

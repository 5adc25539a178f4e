"""The named models every experiment reads: name -> TrainConfig overrides (what differs from the
shared width, depth and budget) and a one-line family for the tables. ablate.py trains them on
text, scaling.py draws their curves, bench.py times them; a new model is one line in MODELS and
one in FAMILY (tests/test_registry.py finds it in every command's choices).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556): `linear` is the paper's SPEN, the others
are its ablation (the readers of the traces), the write readers that ask whether the decay or
the write loses content, the field's ingredients around the write, and the map on text (what
brings the copies back: results/map), with GPT-2 (`gpt`) as the attention baseline.

Run: nothing to run; `python ablate.py --help` lists the names.
"""

import ema

SPAN = (2 ** -5, 2 ** -8, 2 ** -11)  # RetNet's decays 1 - gamma_h = 2^(-5-h) at h = 0, 3, 6: spans of 32 to 2,048
# tokens against the paper's 2 to 50, as many D x D states (the same state size)
WIDE = ema.spread_decays(3, 0.5, 2 ** -11)  # the paper's fastest to RetNet's slowest: spans of 2, 64 and 2,048
MODELS = {  # name -> TrainConfig overrides; everything else is shared by all models
    "linear": dict(model="spen", predictor="linear", reads="state", context="ema"),
    "linear_attn_state": dict(model="spen", predictor="linear_attn", reads="state", context="ema"),
    "softmax_state": dict(model="spen", predictor="softmax_attn", reads="state", context="ema"),
    "linear_attn_history": dict(model="spen", predictor="linear_attn", reads="history", context="ema"),
    "softmax_history": dict(model="spen", predictor="softmax_attn", reads="history", context="ema"),
    "selective": dict(model="spen", predictor="linear", reads="state", context="selective"),
    "ema_kv": dict(model="spen", predictor="ema_kv", reads="state", context="ema"),
    "delta": dict(model="spen", predictor="delta", reads="state", context="ema"),
    # the ingredients the field reports around the write (one change each, same state size):
    "ema_kv_span": dict(model="spen", predictor="ema_kv", reads="state", context="ema", write_alphas=SPAN),
    "ema_kv_span_norm": dict(model="spen", predictor="ema_kv", reads="state", context="ema", write_alphas=SPAN,
                             read_norm=True),
    "ema_kv_wide": dict(model="spen", predictor="ema_kv", reads="state", context="ema", write_alphas=WIDE),
    "delta_decay": dict(model="spen", predictor="delta", reads="state", context="ema", write_alphas=(0.02,)),
    "delta_norm": dict(model="spen", predictor="delta", reads="state", context="ema", read_norm=True),
    # what might bring the copies back (results/map): a wider head, a short convolution, a gate, a window, one
    # attention layer among write readers (block 3, the last of n_layer = 4, or block 1)
    "delta_wide": dict(model="spen", predictor="delta", reads="state", context="ema", n_head=1),
    "delta_conv": dict(model="spen", predictor="delta", reads="state", context="ema", conv=4),
    "ema_kv_conv": dict(model="spen", predictor="ema_kv", reads="state", context="ema", conv=4),
    "gated_delta": dict(model="spen", predictor="gated_delta", reads="state", context="ema", conv=4),
    "gated_ema_kv": dict(model="spen", predictor="gated_ema_kv", reads="state", context="ema", conv=4),  # its control
    "gated_delta_wide": dict(model="spen", predictor="gated_delta", reads="state", context="ema", conv=4, n_head=1),
    "softmax_window": dict(model="spen", predictor="softmax_attn", reads="history", context="ema", window=32),
    "hybrid_ema_kv": dict(model="spen", predictor="ema_kv,ema_kv,ema_kv,softmax_attn", reads="state,state,state,history",
                          context="ema"),
    "hybrid_gated_delta": dict(model="spen", predictor="gated_delta,gated_delta,gated_delta,softmax_attn",
                               reads="state,state,state,history", context="ema", conv=4),
    "hybrid_gated_delta_1": dict(model="spen", predictor="gated_delta,softmax_attn,gated_delta,gated_delta",
                                 reads="state,history,state,state", context="ema", conv=4),  # attention in block 1
    "gpt": dict(model="gpt"),
}
MAP = ("delta_wide", "delta_conv", "ema_kv_conv", "gated_delta", "gated_ema_kv", "gated_delta_wide", "softmax_window",
       "hybrid_ema_kv", "hybrid_gated_delta", "hybrid_gated_delta_1")  # the map on text: scaling.py curves, 4 blocks
ABLATION = tuple(n for n in MODELS if n not in MAP)  # ablate.py's default: the readers and the ingredients
FAMILY = {"linear": "state", "linear_attn_state": "state", "softmax_state": "state",
          "linear_attn_history": "history", "softmax_history": "history", "selective": "state, selective",
          "ema_kv": "write (k vᵀ, fixed decays)", "delta": "write (delta rule)",
          "ema_kv_span": "write, RetNet-like span", "ema_kv_span_norm": "write, span + read norm",
          "ema_kv_wide": "write, spans 2 to 2,048",
          "delta_decay": "write, delta + a = 0.02", "delta_norm": "write, delta + read norm",
          "delta_wide": "write, delta, one head of width C", "delta_conv": "write, delta + short conv (K = 4)",
          "ema_kv_conv": "write, ema_kv + short conv (K = 4)", "gated_delta": "write, gated delta rule + conv (GDN)",
          "gated_ema_kv": "write, GDN without the delta correction",
          "gated_delta_wide": "write, GDN, one head of width C", "softmax_window": "history, last 32 positions",
          "hybrid_ema_kv": "hybrid: 3 ema_kv + 1 softmax_history", "hybrid_gated_delta": "hybrid: 3 GDN + 1 softmax_history",
          "hybrid_gated_delta_1": "hybrid: GDN, softmax_history, 2 GDN",
          "gpt": "tokens (KV cache)"}

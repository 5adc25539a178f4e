"""The named models every experiment reads: one entry per name, its family (a short line for the
tables) and its TrainConfig overrides (what differs from the shared width, depth and budget).
ablate.py trains them on text, scaling.py draws their curves, recall.py and frontier.py train them
on recall, bench.py times them; a new model is one entry in MODELS (tests/test_registry.py finds it
in every command's choices).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556): `linear` is the paper's SPEN, the others
are its ablation (the readers of the traces), the write readers that ask whether the decay or
the write loses content, the field's ingredients around the write, and the map on text (what
brings the copies back: results/map), with GPT-2 (`gpt`) as the attention baseline.

Run: nothing to run; `python ablate.py --help` lists the names.
"""

import typing

import ema
import variants


class Model(typing.NamedTuple):
    """A named model: its family, the line the tables print beside its name, and its TrainConfig
    overrides (a saved run is keyed on the resulting config: changing them retrains it)."""
    family: str
    overrides: dict

    def blocks(self):
        """Its blocks as its overrides list them (variants.block_list; GPT's: SPEN's default, unused)."""
        return variants.block_list(self.overrides.get("predictor", "linear"), self.overrides.get("reads", "state"))


SPAN = (2 ** -5, 2 ** -8, 2 ** -11)  # RetNet's decays 1 - gamma_h = 2^(-5-h) at h = 0, 3, 6: spans of 32 to 2,048
# tokens against the paper's 2 to 50, as many D x D states (the same state size)
WIDE = ema.spread_decays(3, 0.5, 2 ** -11)  # the paper's fastest to RetNet's slowest: spans of 2, 64 and 2,048
MODELS = {  # name -> Model(family, overrides); everything else is shared by all models
    "linear": Model("state", dict(model="spen", predictor="linear", reads="state", context="ema")),
    "linear_attn_state": Model("state", dict(model="spen", predictor="linear_attn", reads="state", context="ema")),
    "softmax_state": Model("state", dict(model="spen", predictor="softmax_attn", reads="state", context="ema")),
    "linear_attn_history": Model("history", dict(model="spen", predictor="linear_attn", reads="history",
                                                 context="ema")),
    "softmax_history": Model("history", dict(model="spen", predictor="softmax_attn", reads="history", context="ema")),
    "selective": Model("state, selective", dict(model="spen", predictor="linear", reads="state", context="selective")),
    "ema_kv": Model("write (k vᵀ, fixed decays)", dict(model="spen", predictor="ema_kv", reads="state", context="ema")),
    "delta": Model("write (delta rule)", dict(model="spen", predictor="delta", reads="state", context="ema")),
    # the ingredients the field reports around the write (one change each, same state size):
    "ema_kv_span": Model("write, RetNet-like span", dict(model="spen", predictor="ema_kv", reads="state",
                                                         context="ema", write_alphas=SPAN)),
    "ema_kv_span_norm": Model("write, span + read norm", dict(model="spen", predictor="ema_kv", reads="state",
                                                              context="ema", write_alphas=SPAN, read_norm=True)),
    "ema_kv_wide": Model("write, spans 2 to 2,048", dict(model="spen", predictor="ema_kv", reads="state",
                                                         context="ema", write_alphas=WIDE)),
    "delta_decay": Model("write, delta + a = 0.02", dict(model="spen", predictor="delta", reads="state",
                                                         context="ema", write_alphas=(0.02,))),
    "delta_norm": Model("write, delta + read norm", dict(model="spen", predictor="delta", reads="state",
                                                         context="ema", read_norm=True)),
    # what might bring the copies back (results/map): a wider head, a short convolution, a gate, a window, one
    # attention layer among write readers (block 3, the last of n_layer = 4, or block 1)
    "delta_wide": Model("write, delta, one head of width C", dict(model="spen", predictor="delta", reads="state",
                                                                  context="ema", n_head=1)),
    "delta_conv": Model("write, delta + short conv (K = 4)", dict(model="spen", predictor="delta", reads="state",
                                                                  context="ema", conv=4)),
    "ema_kv_conv": Model("write, ema_kv + short conv (K = 4)", dict(model="spen", predictor="ema_kv", reads="state",
                                                                    context="ema", conv=4)),
    "gated_delta": Model("write, gated delta rule + conv (GDN)", dict(model="spen", predictor="gated_delta",
                                                                      reads="state", context="ema", conv=4)),
    "gated_ema_kv": Model("write, GDN without the delta correction",  # gated_delta's control
                          dict(model="spen", predictor="gated_ema_kv", reads="state", context="ema", conv=4)),
    "gated_delta_wide": Model("write, GDN, one head of width C", dict(model="spen", predictor="gated_delta",
                                                                      reads="state", context="ema", conv=4, n_head=1)),
    "softmax_window": Model("history, last 32 positions", dict(model="spen", predictor="softmax_attn",
                                                               reads="history", context="ema", window=32)),
    "hybrid_ema_kv": Model("hybrid: 3 ema_kv + 1 softmax_history",
                           dict(model="spen", predictor="3*ema_kv,softmax_attn(reads=history)", context="ema")),
    "hybrid_gated_delta": Model("hybrid: 3 GDN + 1 softmax_history",
                                dict(model="spen", predictor="3*gated_delta(conv=4),softmax_attn(reads=history)",
                                     context="ema")),
    "hybrid_gated_delta_1": Model("hybrid: GDN, softmax_history, 2 GDN",  # attention in block 1
                                  dict(model="spen", predictor="gated_delta(conv=4),softmax_attn(reads=history),"
                                       "2*gated_delta(conv=4)", context="ema")),
    # why a bounded reader only ties GPT on copies (results/map/PLAN.md): the gate's init (H1), key rank (H2), more
    # delta steps per token (H4); the learning rate (H3) is scaling.py's --lr
    "gated_delta_ret": Model("write, GDN, retention init (dt 1e-4..1e-3)",
                             dict(model="spen", predictor="gated_delta_ret", reads="state", context="ema", conv=4)),
    "delta_k128_v32": Model("write, delta, keys 128 / values 32 a head", dict(
        model="spen", predictor="delta(key_dim=128, value_dim=32)", reads="state", context="ema")),
    "delta_k128_v64": Model("write, delta, keys 128 / values 64 a head", dict(
        model="spen", predictor="delta(key_dim=128, value_dim=64)", reads="state", context="ema")),
    "delta_product": Model("write, DeltaProduct (2 delta steps a token)",
                           dict(model="spen", predictor="delta_product", reads="state", context="ema")),
    "gpt": Model("tokens (KV cache)", dict(model="gpt")),
}
# ablate.py's default: the readers and the ingredients, at its 2 blocks (named here: a new model joins no default)
ABLATION = ("linear", "linear_attn_state", "softmax_state", "linear_attn_history", "softmax_history", "selective",
            "ema_kv", "delta", "ema_kv_span", "ema_kv_span_norm", "ema_kv_wide", "delta_decay", "delta_norm", "gpt")
MAP = ("delta_wide", "delta_conv", "ema_kv_conv", "gated_delta", "gated_ema_kv", "gated_delta_wide", "softmax_window",
       "hybrid_ema_kv", "hybrid_gated_delta", "hybrid_gated_delta_1", "gated_delta_ret", "delta_k128_v32",
       "delta_k128_v64", "delta_product")  # the map on text: scaling.py curves, 4 blocks

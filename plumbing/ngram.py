"""Yardsticks every language-model loss is read against: unigram, bigram, trigram; on bytes also zlib, bz2, lzma.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) reports perplexities; a loss means
little without the floor a count model reaches on the same tokens, so every run here prints
these beside its own (train.py logs them, ablate.py scores hits against them).

Yardsticks (`ngram_yardsticks`): cross-entropy in nats per token of the val split under three
count models fit on the train split, over the full vocabulary V (50257 for GPT-2 BPE, 256 for
bytes; the same code for both):
  unigram  p1(w)       = (c(w) + 1) / (N + V)                          add-one smoothing
  bigram   p2(w | v)   = lam c(v, w) / c(v) + (1 - lam) p1(w)          p1(w) alone when c(v) = 0
  trigram  p3(w | u v) = mu c(u, v, w) / c(u, v) + (1 - mu) p2(w | v)  p2 alone when c(u, v) = 0
(Jelinek-Mercer interpolation, each order mixed with the one below it). lam, then mu, are
chosen on the last 10% of the train split with counts from its first 90% (never on val), then
the counts are refit on the whole train split. The first val token is scored by the unigram,
the second by the bigram; n-grams run across document boundaries (the separator is a token),
as the models see them. Each loss is convex in its weight (minus the log of a function linear
in it), so a golden-section search finds its minimum.

Glossary: V vocabulary, N train tokens, n tokens scored, P distinct n-grams, c(.) counts on
the train split (c(v) and c(u, v) count the n-grams that start with v or u v), u v w the
tokens at i-2, i-1, i; n-gram keys are u * V^2 + v * V + w (below 2^63 for V = 50257).

Fast path and reference: ngram_counts / token_probs / mixture_nll count with numpy (sparse
n-grams, chunked so memory grows with P, not N); ngram_nll_reference is the plain loop over
collections.Counter they are tested against (tests/test_ngram.py).

Compressor yardsticks (`compressor_yardsticks`, byte tokenizer only): the size of the exact val
bytes (NUL separators included) after zlib level 9, bz2 level 9 and lzma preset 9 | EXTREME
(the .xz container: every header and checksum counted), as nats per byte,
8 ln 2 x compressed bytes / raw bytes. Nobody tunes them, so nobody can argue with them. They
are adaptive models that read the whole val split as their context and whose output carries
everything they learned on the way: they profit from a repeat anywhere in val (a model sees one
window of T bytes) but start from nothing (the n-grams and the models start from what the train
split taught them). A loss below lzma's is a loss below a strong general-purpose model of the
same bytes, not a like-for-like comparison in either direction.

Run:  python data.py --dataset builtin --baselines                    the yardsticks as JSON
      python data.py --dataset builtin --tokenizer bytes --baselines  the same per byte, and zlib, bz2, lzma
corpus.baselines caches them beside the tokens in <cache folder>/baselines.json; the builtin
ones are in results/train_cpu/README.md (Yardsticks).
"""
import bz2
import collections
import lzma
import math
import zlib

import numpy as np

from plumbing import cli

UNIGRAM_K = 1.0        # add-one smoothing: a token unseen in train costs log((N + V) / 1) nats
HELDOUT = 0.1          # lam and mu are fit on this final fraction of the train split
COUNT_CHUNK = 1 << 24  # tokens counted at a time: memory grows with distinct n-grams, not N
METHOD = dict(unigram_k=UNIGRAM_K, heldout=HELDOUT, orders=3, version=2)  # baselines.json cache key
COMPRESSORS = {  # name -> (what is run, compress(data) -> bytes); the strongest standard settings
    "zlib": ("zlib level 9", lambda d: zlib.compress(d, 9)),
    "bz2": ("bz2 level 9", lambda d: bz2.compress(d, 9)),
    "lzma": ("lzma preset 9 | PRESET_EXTREME, .xz container",
             lambda d: lzma.compress(d, preset=9 | lzma.PRESET_EXTREME)),
}
COMPRESSOR_METHOD = {name: what for name, (what, _) in COMPRESSORS.items()}  # the bytes cache key's part


def _merge_counts(keys_a, counts_a, keys_b, counts_b):
    """Sum two sparse count tables given as sorted unique keys with counts."""
    keys, inverse = np.unique(np.concatenate([keys_a, keys_b]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([counts_a, counts_b]))  # exact below 2**53
    return keys, counts.astype(np.int64)


def _sparse_counts(tokens, vocab_size, order):
    """The distinct `order`-grams of a stream as sorted keys (u * V^2 + v * V + w) and counts."""
    keys, counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    for start in range(0, len(tokens), COUNT_CHUNK):
        # order - 1 tokens past the chunk: each n-gram across the seam is counted once, here
        chunk = np.asarray(tokens[start:start + COUNT_CHUNK + order - 1], dtype=np.int64)
        m = len(chunk) - order + 1                                            # n-grams starting here
        if m < 1:
            break
        q = chunk[:m].copy()
        for j in range(1, order):
            q = q * vocab_size + chunk[j:j + m]                               # (m,)
        k, c = np.unique(q, return_counts=True)                               # (P_chunk,)
        keys, counts = _merge_counts(keys, counts, k, c) if len(keys) else (k, c.astype(np.int64))
    return keys, counts


def ngram_counts(tokens, vocab_size=50257, order=2):
    """Unigram, bigram (and, order=3, trigram) counts of a token stream, vectorised; n-grams
    sparse (no V x V table).

    Returns dict(n=N, unigram=(V,) c(w), context=(V,) c(v) = number of bigrams that start
    with v, keys=(P,) the P distinct bigrams as sorted v * V + w, pairs=(P,) their c(v, w));
    order=3 adds tri_keys / triples (the distinct trigrams and their c(u, v, w)) and
    tri_context_keys / tri_context (the sorted u * V + v that open a trigram, and c(u, v))."""
    n = len(tokens)
    unigram = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, n, COUNT_CHUNK):
        chunk = np.asarray(tokens[start:start + COUNT_CHUNK], dtype=np.int64)
        if int(chunk.max()) >= vocab_size:
            raise ValueError(f"token id {int(chunk.max())} is outside the vocabulary of {vocab_size}")
        unigram += np.bincount(chunk, minlength=vocab_size)
    keys, pairs = _sparse_counts(tokens, vocab_size, 2)
    context = np.bincount(keys // vocab_size, weights=pairs, minlength=vocab_size).astype(np.int64)
    out = dict(n=n, unigram=unigram, context=context, keys=keys, pairs=pairs)
    if order >= 3:
        tri_keys, triples = _sparse_counts(tokens, vocab_size, 3)
        ctx_keys, inverse = np.unique(tri_keys // vocab_size, return_inverse=True)
        out.update(tri_keys=tri_keys, triples=triples, tri_context_keys=ctx_keys,
                   tri_context=np.bincount(inverse, weights=triples).astype(np.int64))
    return out


def _lookup(keys, counts, q):
    """counts of the keys q in a sparse table (sorted keys), 0 where absent."""
    if not len(keys):
        return np.zeros(len(q), dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    return np.where(keys[at] == q, counts[at], 0)


def token_probs(counts, tokens, k=UNIGRAM_K):
    """Two float64 arrays over the tokens w_i of `tokens`:
    p_uni[i] = (c(w_i) + k) / (N + k V)                    add-k unigram
    p_ml[i]  = c(w_{i-1}, w_i) / c(w_{i-1})                maximum-likelihood bigram,
    with p_ml[i] = p_uni[i] where the bigram is undefined (i = 0, or c(w_{i-1}) = 0)."""
    V = len(counts["unigram"])
    t = np.asarray(tokens, dtype=np.int64)                                     # (n,)
    p_uni = (counts["unigram"][t] + k) / (counts["n"] + k * V)                  # (n,)
    p_ml = p_uni.copy()
    if len(t) > 1:
        c_vw = _lookup(counts["keys"], counts["pairs"], t[:-1] * V + t[1:])    # (n-1,)
        c_v = counts["context"][t[:-1]]
        seen = c_v > 0
        p_ml[1:][seen] = c_vw[seen] / c_v[seen]
    return p_uni, p_ml


def trigram_probs(counts, tokens, p_low):
    """p_ml3[i] = c(w_{i-2}, w_{i-1}, w_i) / c(w_{i-2}, w_{i-1}), the maximum-likelihood
    trigram (counts from ngram_counts(..., order=3)), with p_low[i] where it is undefined
    (i < 2, or c(w_{i-2}, w_{i-1}) = 0)."""
    V = len(counts["unigram"])
    t = np.asarray(tokens, dtype=np.int64)                                     # (n,)
    p = np.array(p_low, dtype=np.float64)
    if len(t) > 2:
        uv = t[:-2] * V + t[1:-1]                                              # (n-2,)
        c_uvw = _lookup(counts["tri_keys"], counts["triples"], uv * V + t[2:])
        c_uv = _lookup(counts["tri_context_keys"], counts["tri_context"], uv)
        seen = c_uv > 0
        p[2:][seen] = c_uvw[seen] / c_uv[seen]
    return p


def mixture_nll(p_low, p_high, lam):
    """Mean -log(lam p_high + (1 - lam) p_low) in nats: one interpolation step (with
    p_low = p_uni and p_high = p_ml, the interpolated bigram; lam = 0: the unigram)."""
    with np.errstate(divide="ignore"):  # lam = 1 on an unseen n-gram: log 0 = -inf, a valid loss
        return float(-np.mean(np.log(lam * p_high + (1.0 - lam) * p_low)))


def best_lambda(p_low, p_high, tol=1e-6):
    """argmin of mixture_nll over lam in [0, 1], by golden-section search.

    The loss is convex in lam (minus the log of a function linear in lam), so the search
    cannot get stuck; it narrows [0, 1] by 0.618 per step to a width of tol."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = 0.0, 1.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = mixture_nll(p_low, p_high, c), mixture_nll(p_low, p_high, d)
    while b - a > tol:
        if fc <= fd:  # the minimum lies in [a, d]
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = mixture_nll(p_low, p_high, c)
        else:         # the minimum lies in [c, b]
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = mixture_nll(p_low, p_high, d)
    return (a + b) / 2.0


def _interpolated(counts, tokens, lam):
    """(p_uni, p_ml, p_bi, p_ml3): the per-token probabilities of the three models' parts."""
    p_uni, p_ml = token_probs(counts, tokens)
    p_bi = lam * p_ml + (1.0 - lam) * p_uni
    return p_uni, p_ml, p_bi, trigram_probs(counts, tokens, p_bi)


def ngram_yardsticks(train, val, vocab_size=50257):
    """Unigram, interpolated-bigram and interpolated-trigram cross-entropy (nats/token) of
    `val`, counted on `train`.

    lam, then mu, are fit on the last HELDOUT of train with counts from the rest, then the
    counts are refit on all of train; val is only ever scored."""
    cut = int(round(len(train) * (1.0 - HELDOUT)))
    if cut < 3 or len(train) - cut < 3 or len(val) < 1:
        raise cli.UserError(f"n-gram yardsticks need >= {math.ceil(3 / HELDOUT)} train tokens and >= 1 "
                            f"val token, got {len(train)} and {len(val)}: give more text")
    counts = ngram_counts(train[:cut], vocab_size, order=3)
    p_uni, p_ml = token_probs(counts, train[cut:])
    lam = best_lambda(p_uni, p_ml)
    _, _, p_bi, p_ml3 = _interpolated(counts, train[cut:], lam)
    mu = best_lambda(p_bi, p_ml3)
    counts = ngram_counts(train, vocab_size, order=3)
    p_uni, p_ml, p_bi, p_ml3 = _interpolated(counts, val, lam)
    unigram, bigram, trigram = (mixture_nll(p_uni, p_ml, 0.0), mixture_nll(p_uni, p_ml, lam),
                                mixture_nll(p_bi, p_ml3, mu))
    return dict(unigram=unigram, bigram=bigram, trigram=trigram, bigram_lambda=lam, trigram_mu=mu,
                unigram_ppl=math.exp(unigram), bigram_ppl=math.exp(bigram), trigram_ppl=math.exp(trigram),
                train_tokens=len(train), val_tokens=len(val), vocab=vocab_size, unigram_k=UNIGRAM_K,
                weights_fit_on=f"last {HELDOUT:.0%} of train, counts on the rest",
                bigram_types=len(counts["keys"]), trigram_types=len(counts["tri_keys"]))


def ngram_nll_reference(train, val, lam, mu=0.0, vocab_size=50257, k=UNIGRAM_K):
    """The plain-loop definition of the interpolated trigram's loss on val (mu = 0: the
    bigram, lam = mu = 0: the unigram), kept as the readable reference the vectorised
    version is tested against."""
    uni = collections.Counter(train)
    pairs = collections.Counter(zip(train[:-1], train[1:]))
    context = collections.Counter(train[:-1])
    triples = collections.Counter(zip(train[:-2], train[1:-1], train[2:]))
    context2 = collections.Counter(zip(train[:-2], train[1:-1]))
    total = 0.0
    for i, w in enumerate(val):
        p = (uni[w] + k) / (len(train) + k * vocab_size)
        if i > 0 and context[val[i - 1]] > 0:
            p = lam * pairs[val[i - 1], w] / context[val[i - 1]] + (1 - lam) * p
        if i > 1 and context2[val[i - 2], val[i - 1]] > 0:
            p = mu * triples[val[i - 2], val[i - 1], w] / context2[val[i - 2], val[i - 1]] + (1 - mu) * p
        total -= math.log(p) if p > 0 else -math.inf
    return total / len(val)


def nats_per_byte(compressed, raw):
    """A code length of `compressed` bytes for `raw` bytes as nats per raw byte: 8 ln 2 x compressed / raw."""
    if raw < 1 or compressed < 0:
        raise cli.UserError(f"nats per byte needs raw >= 1 and compressed >= 0 bytes, got {raw} and {compressed}")
    return 8 * math.log(2) * compressed / raw


def as_bytes(tokens):
    """A byte-tokenizer split (ids < 256, e.g. the uint16 memmap) as the bytes object it encodes."""
    t = np.asarray(tokens)
    if len(t) and int(t.max()) > 255:
        raise cli.UserError(f"compressor yardsticks read bytes: token id {int(t.max())} is not a byte "
                            "(use --tokenizer bytes)")
    return t.astype(np.uint8).tobytes()


def compressor_yardsticks(data):
    """zlib, bz2 and lzma (COMPRESSORS) on `data` (bytes, or a byte split): nats per byte each, the
    compressed sizes and the raw size (see the module docstring for what they are and are not)."""
    data = data if isinstance(data, (bytes, bytearray)) else as_bytes(data)
    if not data:
        raise cli.UserError("compressor yardsticks need >= 1 val byte, got 0: give more text")
    sizes = {name: len(compress(bytes(data))) for name, (_, compress) in COMPRESSORS.items()}
    return dict({name: nats_per_byte(n, len(data)) for name, n in sizes.items()},
                compressed_bytes=sizes, compressed_of=len(data), compressors=dict(COMPRESSOR_METHOD))


def compressor_line(y, unit="byte"):
    """'zlib 1.763, bz2 1.592, lzma 1.603 nats/byte' for the compressors a yardstick dict holds ('' if none)."""
    have = [k for k in COMPRESSORS if k in (y or {})]
    return ", ".join(f"{k} {y[k]:.3f}" for k in have) + f" nats/{unit}" if have else ""

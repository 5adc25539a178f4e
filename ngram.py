"""N-gram yardsticks: the unigram and bigram cross-entropies every language-model loss is read against.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) reports perplexities; a loss means
little without the floor a count model reaches on the same tokens, so every run here prints
these two beside its own (train.py logs them, ablate.py scores hits against them).

Yardsticks (`baselines`): cross-entropy in nats per token of the val split under two count
models fit on the train split, over the full vocabulary V = 50257:
  unigram  p(w)     = (c(w) + 1) / (N + V)                        add-one smoothing
  bigram   p(w | v) = lam c(v, w) / c(v) + (1 - lam) p(w)         p(w) alone when c(v) = 0
lam is chosen on the last 10% of the train split with counts from its first 90% (never on
val), then the counts are refit on the whole train split. The first val token is scored by
the unigram; bigrams run across document boundaries (EOT is a token), as the models see them.
The loss of the interpolation is convex in lam, so a golden-section search finds its minimum.

Glossary: V vocabulary, N train tokens, n tokens scored, P distinct bigrams, c(.) counts on
the train split, v the previous token, w the current one; bigram keys are v * V + w.

Fast path and reference: ngram_counts / token_probs / mixture_nll count with numpy (sparse
bigrams, chunked so memory grows with P, not N); bigram_nll_reference is the plain loop over
collections.Counter they are tested against (tests/test_ngram.py).

Run:  python data.py --dataset builtin --baselines   print the yardsticks as JSON
They are cached beside the tokens in <cache folder>/baselines.json; the builtin ones are
quoted in the README's Data section.
"""
import collections
import json
import math
import os
import sys

import numpy as np

import sources

VOCAB = 50257          # the GPT-2 vocabulary: both count models spread mass over all of it
UNIGRAM_K = 1.0        # add-one smoothing: a token unseen in train costs log((N + V) / 1) nats
HELDOUT = 0.1          # lam is fit on this final fraction of the train split
COUNT_CHUNK = 1 << 24  # tokens counted at a time: memory grows with distinct bigrams, not N
YARDSTICK_METHOD = dict(vocab=VOCAB, unigram_k=UNIGRAM_K, heldout=HELDOUT, version=1)


def _merge_counts(keys_a, counts_a, keys_b, counts_b):
    """Sum two sparse count tables given as sorted unique keys with counts."""
    keys, inverse = np.unique(np.concatenate([keys_a, keys_b]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([counts_a, counts_b]))  # exact below 2**53
    return keys, counts.astype(np.int64)


def ngram_counts(tokens, vocab_size=VOCAB):
    """Unigram and bigram counts of a token stream, vectorised; bigrams sparse (no V x V table).

    Returns dict(n=N, unigram=(V,) c(w), context=(V,) c(v) = number of bigrams that start
    with v, keys=(P,) the P distinct bigrams as sorted v * V + w, pairs=(P,) their c(v, w))."""
    n = len(tokens)
    if n and int(np.max(tokens)) >= vocab_size:
        raise ValueError(f"token id {int(np.max(tokens))} is outside the vocabulary of {vocab_size}")
    unigram = np.zeros(vocab_size, dtype=np.int64)
    keys, pairs = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    for start in range(0, n, COUNT_CHUNK):
        # one token past the chunk: the pair across the seam is counted once, here
        chunk = np.asarray(tokens[start:start + COUNT_CHUNK + 1], dtype=np.int64)
        unigram += np.bincount(chunk[:COUNT_CHUNK], minlength=vocab_size)
        k, c = np.unique(chunk[:-1] * vocab_size + chunk[1:], return_counts=True)  # (P_chunk,)
        keys, pairs = _merge_counts(keys, pairs, k, c) if len(keys) else (k, c.astype(np.int64))
    context = np.bincount(keys // vocab_size, weights=pairs, minlength=vocab_size).astype(np.int64)
    return dict(n=n, unigram=unigram, context=context, keys=keys, pairs=pairs)


def token_probs(counts, tokens, k=UNIGRAM_K):
    """Two float64 arrays over the tokens w_i of `tokens`:
    p_uni[i] = (c(w_i) + k) / (N + k V)                    add-k unigram
    p_ml[i]  = c(w_{i-1}, w_i) / c(w_{i-1})                maximum-likelihood bigram,
    with p_ml[i] = p_uni[i] where the bigram is undefined (i = 0, or c(w_{i-1}) = 0)."""
    V = len(counts["unigram"])
    t = np.asarray(tokens, dtype=np.int64)                                     # (n,)
    p_uni = (counts["unigram"][t] + k) / (counts["n"] + k * V)                  # (n,)
    p_ml = p_uni.copy()
    keys, pairs = counts["keys"], counts["pairs"]
    if len(t) > 1 and len(keys):
        v, q = t[:-1], t[:-1] * V + t[1:]                                      # (n-1,)
        at = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
        c_vw = np.where(keys[at] == q, pairs[at], 0)
        c_v = counts["context"][v]
        seen = c_v > 0
        p_ml[1:][seen] = c_vw[seen] / c_v[seen]
    return p_uni, p_ml


def mixture_nll(p_uni, p_ml, lam):
    """Mean -log(lam p_ml + (1 - lam) p_uni) in nats: the interpolated bigram (lam = 0: unigram)."""
    with np.errstate(divide="ignore"):  # lam = 1 on an unseen bigram: log 0 = -inf, a valid loss
        return float(-np.mean(np.log(lam * p_ml + (1.0 - lam) * p_uni)))


def best_lambda(p_uni, p_ml, tol=1e-6):
    """argmin of mixture_nll over lam in [0, 1], by golden-section search.

    The loss is convex in lam (minus the log of a function linear in lam), so the search
    cannot get stuck; it narrows [0, 1] by 0.618 per step to a width of tol."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = 0.0, 1.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = mixture_nll(p_uni, p_ml, c), mixture_nll(p_uni, p_ml, d)
    while b - a > tol:
        if fc <= fd:  # the minimum lies in [a, d]
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = mixture_nll(p_uni, p_ml, c)
        else:         # the minimum lies in [c, b]
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = mixture_nll(p_uni, p_ml, d)
    return (a + b) / 2.0


def ngram_yardsticks(train, val, vocab_size=VOCAB):
    """Unigram and interpolated-bigram cross-entropy (nats/token) of `val`, counted on `train`.

    lam is fit on the last HELDOUT of train with counts from the rest, then the counts are
    refit on all of train; val is only ever scored."""
    cut = int(round(len(train) * (1.0 - HELDOUT)))
    if cut < 2 or len(train) - cut < 2 or len(val) < 1:
        raise ValueError(f"n-gram yardsticks need >= {math.ceil(2 / HELDOUT)} train tokens and >= 1 "
                         f"val token, got {len(train)} and {len(val)}: give more text")
    lam = best_lambda(*token_probs(ngram_counts(train[:cut], vocab_size), train[cut:]))
    counts = ngram_counts(train, vocab_size)
    p_uni, p_ml = token_probs(counts, val)
    unigram, bigram = mixture_nll(p_uni, p_ml, 0.0), mixture_nll(p_uni, p_ml, lam)
    return dict(unigram=unigram, bigram=bigram, bigram_lambda=lam,
                unigram_ppl=math.exp(unigram), bigram_ppl=math.exp(bigram),
                train_tokens=len(train), val_tokens=len(val), vocab=vocab_size,
                unigram_k=UNIGRAM_K, lambda_fit_on=f"last {HELDOUT:.0%} of train, counts on the rest",
                bigram_types=len(counts["keys"]))


def bigram_nll_reference(train, val, lam, vocab_size=VOCAB, k=UNIGRAM_K):
    """The plain-loop definition of mixture_nll(*token_probs(ngram_counts(train), val), lam),
    kept as the readable reference the vectorised version is tested against."""
    uni = collections.Counter(train)
    pairs = collections.Counter(zip(train[:-1], train[1:]))
    context = collections.Counter(train[:-1])
    total = 0.0
    for i, w in enumerate(val):
        p = (uni[w] + k) / (len(train) + k * vocab_size)
        if i > 0 and context[val[i - 1]] > 0:
            p = lam * pairs[val[i - 1], w] / context[val[i - 1]] + (1 - lam) * p
        total -= math.log(p) if p > 0 else -math.inf
    return total / len(val)


def check_countable(name):
    """Raise a one-line ValueError if dataset `name` has no 'train' split to count on."""
    if "train" not in sources.splits_of(name):
        raise ValueError(f"dataset '{name}' has no 'train' split to count n-grams on; "
                         f"its splits: {sources.splits_of(name)}")


def baselines(name, cache_dir=None, max_tokens=None):
    """The n-gram yardsticks of dataset `name` (see ngram_yardsticks), as a dict.

    Prepares the dataset if needed; cached in <cache folder>/baselines.json, keyed by the
    cache's meta.json and the method, so a rebuilt cache or a changed method recomputes. The
    counts are held in memory: for a large source, cap it with max_tokens."""
    import data  # here, not at the top: data imports this module to offer data.baselines
    check_countable(name)
    folder = data.prepare(name, max_tokens=max_tokens, cache_dir=cache_dir)
    meta = data.read_meta(folder)
    bins = {s: os.path.join(folder, f"{s}.bin") for s in ("train", "val")}
    key = dict(YARDSTICK_METHOD, created=meta.get("created"),
               splits={s: [meta["splits"][s]["tokens"], os.stat(p).st_mtime_ns] for s, p in bins.items()})
    path = os.path.join(folder, "baselines.json")
    try:
        with open(path) as f:
            cached = json.load(f)
        if cached.get("key") == key:
            return cached["result"]
    except (OSError, ValueError):
        pass  # missing or unreadable: compute
    train, val = (np.memmap(bins[s], dtype=np.uint16, mode="r") for s in ("train", "val"))
    result = dict(dataset=name, **ngram_yardsticks(train, val))
    try:
        data.write_json_atomic(path, dict(key=key, result=result))
    except OSError as e:  # the numbers are right; only their cache is missing
        print(f"data.py: warning: could not cache the yardsticks in {path} ({e.strerror or e})",
              file=sys.stderr)
    return result

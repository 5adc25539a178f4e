"""Tokens an in-context copy could predict, and the per-token loss split on them.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) argues that EMA traces lose token content;
the place that shows on real text is the tokens a model could get by looking back in its own
window. ablate.py and scaling.py split every model's per-token loss on two such sets:

Where the loss goes (Zoology's "associative recall hits", Arora et al. 2023): on a fixed set of
validation windows, a target token w_i is a HIT when the bigram (w_{i-1}, w_i) already occurred
earlier in the window (some j < i - 1 with w_j = w_{i-1} and w_{j+1} = w_i): an in-context copy
could predict it. Each variant's per-token loss is split into hits and all other tokens, beside
the bigram's and unigram's per-token losses on the same tokens.

The copy split (the content question, sharpest on bytes): a target w_i is a COPY when it and the
k tokens before it, w_(i-k) .. w_i, occurred earlier in the window (a (k+1)-gram ending at some
j < i), i.e. an in-context copy of a string of at least k tokens predicts it; binned by the
distance i - j to the nearest such j (COPY_BINS). Losses on copies and on all other targets, per
variant and for the unigram, bigram and trigram yardsticks on the same targets. A state reader
must carry the string in its traces to copy it; a history reader or GPT can look it up.

Shape glossary
    B windows, T targets per window (windows hold T + 1 tokens), V vocabulary, k tokens of
    context a copy must repeat.

Every fast function here keeps its plain-loop definition beside it (recall_hits_loop,
copy_distance_loop), and tests/test_ablate.py holds them equal. Run: nothing to run; the splits
are in results/ablate (BPE) and results/ablate_bytes, results/scaling (bytes).
"""

import numpy as np
import torch
import torch.nn.functional as F

from plumbing import batches, corpus, ngram, runtime

YARDSTICKS = ("trigram", "bigram", "unigram")  # count models every split is read against (corpus.baselines)
COPY_BINS = (8, 32, 128)  # edges of the copy distance bins: 1-7 (inside the k-string: runs), 8-31, 32-127, 128+
HIT_SEED = runtime.EVAL_SEED + 2  # the split's windows differ from the val-loss batches and the content probe's


def hit_windows(val, n, T):
    """The fixed validation windows both splits are read on (ablate.py's and scaling.py's): n windows
    of T + 1 tokens of the token array val -> (n, T+1) int64."""
    x, y = batches.get_batch(val, n, T, step=0, seed=HIT_SEED)  # (n, T) each
    return torch.cat([x, y[:, -1:]], 1)


def recall_hits(w):
    """w (B, T+1) token windows -> (B, T) bool: hit[b, t] says the target w[b, t+1] follows
    w[b, t] as it did earlier in the window (some j < t with w[j] = w[t], w[j+1] = w[t+1])."""
    big = w[:, :-1] * (int(w.max()) + 1) + w[:, 1:]  # (B, T) bigram ids of (w_t, w_{t+1})
    same = big[:, :, None] == big[:, None, :]  # (B, T, T): [t, j] bigram t equals bigram j
    earlier = torch.ones(w.size(1) - 1, w.size(1) - 1, dtype=torch.bool).tril(-1)  # j < t
    return (same & earlier).any(-1)


def recall_hits_loop(w):
    """The plain-loop definition of recall_hits, the reference it is tested against."""
    B, T = w.size(0), w.size(1) - 1
    hit = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        for t in range(T):
            hit[b, t] = any(w[b, j] == w[b, t] and w[b, j + 1] == w[b, t + 1] for j in range(t))
    return hit


@torch.no_grad()
def token_nll(model, w, chunk=16):
    """Per-token cross-entropy (B, T) of model on windows w (B, T+1): input w[:, :-1], target w[:, 1:]."""
    model.eval()
    out = []
    for i in range(0, len(w), chunk):
        logits, _ = model(w[i:i + chunk, :-1])  # (b, T, V)
        out.append(F.cross_entropy(logits.float().transpose(1, 2), w[i:i + chunk, 1:], reduction="none"))
    return torch.cat(out)


def split(nll, hits):
    """dict(loss_hit, loss_other, hit_fraction, loss_all) of per-token losses (B, T) under a hit mask."""
    nll = torch.as_tensor(nll, dtype=torch.float64)
    return dict(loss_hit=nll[hits].mean().item(), loss_other=nll[~hits].mean().item(),
                hit_fraction=hits.double().mean().item(), loss_all=nll.mean().item())


def copy_distance(w, k):
    """w (B, T+1) token windows -> (B, T) int64: for the target w[b, i] (i = t + 1), the distance
    i - j to the nearest earlier j < i whose k + 1 tokens w[j-k .. j] equal w[i-k .. i] (the target
    continues a k-token string seen earlier, as it continued then: an in-context copy predicts it);
    0 where there is none. Occurrences may overlap (a run of one byte: distance 1)."""
    B, L = w.shape
    n = L - k  # end positions e = k .. L-1 of the (k+1)-grams
    same = torch.ones(B, n, n, dtype=torch.bool)
    for d in range(k + 1):  # (k+1)-gram ending at e equals the one ending at e': all k+1 tokens agree
        g = w[:, k - d:L - d]  # (B, n): the token d before each end
        same &= g[:, :, None] == g[:, None, :]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)  # [e, e']: e' < e
    pos = torch.arange(n)
    nearest = torch.where(same & earlier, pos, -1).amax(-1)  # (B, n): latest earlier end, -1: none
    dist = torch.zeros(B, L - 1, dtype=torch.long)
    dist[:, k - 1:] = torch.where(nearest >= 0, pos - nearest, 0)  # target index t = e - 1
    return dist


def copy_distance_loop(w, k):
    """The plain-loop definition of copy_distance, the reference it is tested against."""
    B, L = w.shape
    dist = torch.zeros(B, L - 1, dtype=torch.long)
    for b in range(B):
        s = w[b].tolist()
        for i in range(k, L):
            for j in range(i - 1, k - 1, -1):  # nearest first
                if s[j - k:j + 1] == s[i - k:i + 1]:
                    dist[b, i - 1] = i - j
                    break
    return dist


def bin_name(b):
    """A distance bin of copy_split's by_distance as text: '8-15', or '64+' for the last, open one."""
    return f"{b['lo']}-{b['hi'] - 1}" if b["hi"] else f"{b['lo']}+"


def copy_split(nll, dist, bins=COPY_BINS):
    """Per-token losses (B, T) split by copy distance (copy_distance): dict(loss_copy, loss_other,
    copy_fraction, by_distance=[dict(lo, hi, loss, fraction)] over the bins [1, e0), [e0, e1), ...)."""
    nll = torch.as_tensor(nll, dtype=torch.float64)
    copy = dist > 0
    edges = (1, *bins, None)
    rows = []
    for lo, hi in zip(edges, edges[1:]):
        m = (dist >= lo) & (dist < hi if hi else True)
        rows.append(dict(lo=lo, hi=hi, loss=nll[m].mean().item() if m.any() else None,
                         fraction=m.double().mean().item()))
    return dict(loss_copy=nll[copy].mean().item() if copy.any() else None, loss_other=nll[~copy].mean().item(),
                copy_fraction=copy.double().mean().item(), by_distance=rows)


@torch.no_grad()
def window_scores(model, val, T, k, bins=COPY_BINS, chunk=16):
    """The whole val split scored once (batches.eval_windows: contiguous non-overlapping windows of
    T targets, the last shorter, every token but the first a target once, no context across
    windows), with the copy split of copy_distance inside each window. Per window, in the split's
    order: targets `n` and their summed loss `loss`; the same for copies (`copy_n`, `copy_loss`)
    and for each distance bin of copy_split (`bin_n`, `bin_loss`: one list per bin). Sums, not
    means, so that windows can be pooled or resampled (a bootstrap) later; totals: score_totals."""
    edges = (1, *bins, None)
    cols = dict(n=[], loss=[], copy_n=[], copy_loss=[], bin_n=[[] for _ in bins + (0,)],
                bin_loss=[[] for _ in bins + (0,)])
    for x, y in batches.eval_batches(val, T, chunk):  # (b, L) each, full windows first, then the short one
        w = torch.cat([x, y[:, -1:]], 1)  # (b, L+1) the window's tokens
        dist = copy_distance(w, k) if w.size(1) > k else torch.zeros_like(y)  # (b, L); a window of <= k tokens: no copy
        nll = token_nll(model, w).double()  # (b, L)
        masks = [torch.ones_like(dist, dtype=torch.bool), dist > 0] + [
            (dist >= lo) & (dist < hi if hi else True) for lo, hi in zip(edges, edges[1:])]
        sums = [((nll * m).sum(1).tolist(), m.sum(1).tolist()) for m in masks]  # per window of the batch
        for (ls, ns), key in zip(sums[:2], ("", "copy_")):
            cols[key + "loss"] += [round(v, 4) for v in ls]
            cols[key + "n"] += ns
        for b, (ls, ns) in enumerate(sums[2:]):
            cols["bin_loss"][b] += [round(v, 4) for v in ls]
            cols["bin_n"][b] += ns
    return dict(bins=[[lo, hi] for lo, hi in zip(edges, edges[1:])], **cols)


def score_totals(s):
    """Losses per target from window_scores' sums: all, copies, copies in the last (farthest) bin,
    the other targets, with their target counts (None where a set is empty)."""
    mean = lambda loss, n: sum(loss) / sum(n) if sum(n) else None
    other = [a - c for a, c in zip(s["loss"], s["copy_loss"])], [a - c for a, c in zip(s["n"], s["copy_n"])]
    return dict(all=mean(s["loss"], s["n"]), copies=mean(s["copy_loss"], s["copy_n"]),
                copies_far=mean(s["bin_loss"][-1], s["bin_n"][-1]), other=mean(*other), targets=sum(s["n"]),
                copy_targets=sum(s["copy_n"]), far_targets=sum(s["bin_n"][-1]), windows=len(s["n"]))


def yardstick_nll(name, w, tokenizer="gpt2"):
    """Per-token losses (B, T) of the unigram, bigram and trigram yardsticks (corpus.baselines: the
    same counts and weights) on windows w; each window is scored on its own (no context across)."""
    counts = ngram.ngram_counts(corpus.load_split(name, "train", tokenizer=tokenizer),
                                   corpus.vocab_size(tokenizer), order=3)
    y = corpus.baselines(name, tokenizer=tokenizer)
    lam, mu = y["bigram_lambda"], y["trigram_mu"]
    rows = {k: [] for k in YARDSTICKS}
    for win in w.numpy():  # (T+1,): p[i] is the probability of win[i] given what precedes it in the window
        p_uni, p_ml = ngram.token_probs(counts, win)
        p_bi = lam * p_ml + (1 - lam) * p_uni
        p_tri = mu * ngram.trigram_probs(counts, win, p_bi) + (1 - mu) * p_bi
        for k, p in zip(("unigram", "bigram", "trigram"), (p_uni, p_bi, p_tri)):
            rows[k].append(-np.log(p[1:]))  # targets win[1:]
    return {k: torch.from_numpy(np.stack(v)) for k, v in rows.items()}

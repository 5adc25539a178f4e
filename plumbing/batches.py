"""Batches: what turns a split's token ids (corpus.load_split) into model inputs x, y.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": the 130M
SPEN trains on FineWeb-Edu windows and reports C4 and "Wiki" perplexity; this file says which
windows a run trains on and which tokens an evaluation scores.

Every batch is a pure function of (seed, step, rank), so a resumed run sees exactly the
batches it would have seen and the data position is simply the step:
  epoch_batch  training: windows of T+1 tokens at stride T, visited WITHOUT replacement in a
               seeded order per epoch (windows_per_epoch() says how many an epoch has,
               epochs() how many epochs a run makes);
  eval_batches evaluation: contiguous non-overlapping windows over a whole split (or its first
               max_tokens), each token scored once, the last partial window included
               (eval_windows() lists them);
  get_batch    B random windows, with replacement (probes, quick estimates).
check_split says, in one line, when a split is too short for the block size; the range of
the ids (< V) is checked once per split where they enter, by corpus.load_split(vocab=V).
Glossary: B batch size, T block size (context), L a window's length (T, or less for the last
evaluation window), V vocabulary, W windows per epoch, N tokens in a split.

torch is imported inside _windows only, so `import batches` stays light for data.py.
Run: nothing to run; train.py, ablate.py and content.py draw their batches here;
tests/test_batches.py checks this file.
"""
import functools

import numpy as np

from plumbing import cli


def check_split(tokens, block_size, name, split):
    """Raise a one-line cli.UserError if split `split` of dataset `name` (its ids, or their
    count) is too short for one window of block_size + 1 tokens."""
    n = len(tokens) if hasattr(tokens, "__len__") else int(tokens)
    if n < block_size + 1:
        raise cli.UserError(f"split '{split}' of {name} has {n} tokens; block_size {block_size} needs at "
                            f"least {block_size + 1}: give more text or lower --block_size")


def get_batch(data, batch_size, block_size, step, seed, rank=0, device="cpu"):
    """B random windows of T+1 tokens, drawn with replacement: x = window[:-1], y = window[1:],
    both int64 (B, T). For probes and quick estimates; training uses epoch_batch.

    A pure function of (seed, step, rank): numpy's generator is seeded by that triple,
    so no RNG state needs saving and resume is exact. Use different seeds for train/val."""
    n = len(data) - block_size  # last valid start keeps y's final token inside data
    if n < 1:
        raise _too_short(data, block_size)
    rng = np.random.default_rng([seed, step, rank])
    return _windows(data, rng.integers(0, n, size=batch_size), block_size, device)   # starts (B,)


def _too_short(data, block_size):
    """The one-line error of a split shorter than one window (get_batch, epoch_batch)."""
    return cli.UserError(f"split has {len(data)} tokens, fewer than block_size+1={block_size + 1}; "
                         "lower --block_size or prepare more data")


def _windows(data, starts, length, device):
    """x, y = the windows data[s : s + length + 1] shifted by one, int64 (B, length) each."""
    import torch  # here: tokenizing (python data.py) never needs torch, which takes seconds to import
    window = data[np.asarray(starts)[:, None] + np.arange(length + 1)]  # (B, length+1) uint16
    window = torch.from_numpy(window.astype(np.int64))
    x, y = window[:, :-1], window[:, 1:]                                # (B, T), (B, T)
    if torch.device(device).type == "cuda":  # pinned host memory -> asynchronous copy
        return (x.contiguous().pin_memory().to(device, non_blocking=True),
                y.contiguous().pin_memory().to(device, non_blocking=True))
    return x.contiguous().to(device), y.contiguous().to(device)


def windows_per_epoch(n_tokens, block_size):
    """W, the training windows of one epoch: the (N - 1) // T windows of T+1 tokens that start
    at 0, T, 2T, ... (consecutive windows share one token, so every token but the first and
    the last (N - 1) % T is a target once per epoch)."""
    return (n_tokens - 1) // block_size


def epochs(n_tokens, block_size, steps, batch_size, world=1):
    """How many epochs `steps` batches of batch_size windows on `world` ranks make (a float)."""
    return steps * batch_size * world / max(windows_per_epoch(n_tokens, block_size), 1)


@functools.lru_cache(maxsize=2)
def _epoch_order(seed, epoch, n_windows):
    """The order in which epoch `epoch` visits the windows: a seeded permutation of range(W)."""
    return np.random.default_rng([seed, epoch, n_windows]).permutation(n_windows)


def epoch_batch(data, batch_size, block_size, step, seed, rank=0, world=1, device="cpu"):
    """B training windows drawn WITHOUT replacement within an epoch: x, y int64 (B, T).

    Sample g = (step * world + rank) * B + b (b < B) of the run is window order_e[g % W] of
    epoch e = g // W, where order_e is a permutation of the W windows seeded by (seed, e)
    (windows_per_epoch). So each epoch visits every window exactly once over all ranks, and the
    batch is a pure function of (seed, step, rank, world): resume is exact, no RNG state saved.
    step counts batches (micro-batches when accumulating)."""
    W = windows_per_epoch(len(data), block_size)
    if W < 1:
        raise _too_short(data, block_size)
    g = (step * world + rank) * batch_size + np.arange(batch_size)     # (B,) sample indices
    epoch, at = g // W, g % W
    starts = np.empty(batch_size, dtype=np.int64)
    for e in np.unique(epoch):  # a batch spans at most two epochs
        mine = epoch == e
        starts[mine] = _epoch_order(seed, int(e), W)[at[mine]] * block_size
    return _windows(data, starts, block_size, device)


def eval_windows(n_tokens, block_size, max_tokens=None):
    """The evaluation protocol: contiguous, non-overlapping windows over the first
    n = min(n_tokens, max_tokens) tokens of a split, each token counted once.

    Window k covers tokens [k T, k T + L_k]: inputs its first L_k, targets its last L_k, with
    L_k = T except for the last window, which takes the rest (1 <= L < T). Every token but the
    first is a target exactly once: n - 1 targets in all; each window starts without the
    previous one's context (Hugging Face's strided perplexity with stride = T). Returns
    (starts, lengths), int64 arrays of the windows."""
    n = n_tokens if max_tokens is None else min(n_tokens, max_tokens)
    starts = np.arange(0, max(n - 1, 0), block_size, dtype=np.int64)
    return starts, np.minimum(block_size, n - 1 - starts)


def eval_batches(data, block_size, batch_size, max_tokens=None, device="cpu"):
    """(x, y) over eval_windows(len(data), block_size, max_tokens): the full windows batch_size
    at a time, (B, T) each, then the last, shorter window alone as a (1, L) batch. Summing the
    per-token losses of every batch and dividing by eval_windows' lengths.sum() gives the
    split's loss with each token counted once."""
    starts, lengths = eval_windows(len(data), block_size, max_tokens)
    full = starts[lengths == block_size]
    for i in range(0, len(full), batch_size):
        yield _windows(data, full[i:i + batch_size], block_size, device)
    if len(starts) and lengths[-1] < block_size:
        yield _windows(data, starts[-1:], int(lengths[-1]), device)

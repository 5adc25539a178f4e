"""The splits a training run reads (load_data; DDP ranks wait for rank 0's caches) and the
evaluation of a language model on its validation splits: the quick loss that steers training,
the reported loss and perplexity, and the n-gram yardsticks they are read against.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN", reports two
numbers for the 130M model: C4 perplexity (paper: 260; GPT-2 small: 33) and WikiText-103.

Shape glossary
    B batch (batch_size), T window (block_size), N tokens of a val split (or its first
    --eval_tokens).

Protocol of the reported numbers (`evaluate_split`): contiguous non-overlapping windows of T
tokens over the whole val split, or its first --eval_tokens (batches.eval_windows), each token
after the first predicted once, no context carried from one window to the next; the loss is the
mean over those N - 1 targets, the perplexity its exp. During training `estimate_loss` is a
quick, steady estimate instead: one fixed set of eval_iters random batches (seed runtime.EVAL_SEED)
for the curve and ckpt_best. Yardsticks (unigram / bigram / trigram cross-entropy, corpus.baselines)
come only from caches that exist (--yardsticks auto) or when asked (--yardsticks count): no
download, no long count unasked.

Run: a library; train.py calls it (`python train.py --eval_only --init_from PATH --eval_data
c4,wikitext103`), and out_dir/eval.json holds each corpus's loss and perplexity with its protocol
(windows, tokens counted) and yardsticks. tests/test_eval.py checks the protocol against a
window-by-window reference.

Arguments: `cfg` is a train.TrainConfig (read for the corpora, cache, block_size, batch_size,
eval_iters, eval_tokens, yardsticks), `place` a runtime.Placement (device, autocast, DDP rank and
world); nothing here imports train.py.
"""

import math
import os
import time

import torch
import torch.distributed as dist

from plumbing import batches, checkpoint, cli, corpus, shards
from plumbing.runtime import EVAL_SEED

AUTO_YARDSTICK_TOKENS = 20_000_000  # --yardsticks auto counts on a train split of at most this many tokens
DATA_WAIT_S = 12 * 3600  # DDP ranks > 0 wait this long for rank 0 to tokenize (FineWeb-Edu: est. 20-90 min)


def eval_names(cfg):
    """The validation corpora: --eval_data's comma list, or --data."""
    return [n.strip() for n in (cfg.eval_data or cfg.data).split(",")]


def data_args(cfg, name):
    """load_split's cache arguments for corpus `name`: --max_tokens caps --data's cache only (an
    evaluation corpus is read whole; --eval_tokens limits what is evaluated)."""
    return dict(max_tokens=cfg.max_tokens if name == cfg.data else None, cache_dir=cfg.cache_dir or None,
                tokenizer=cfg.tokenizer)


def wanted_splits(cfg):
    """(corpus, split) pairs this run reads: --data's train split (unless --eval_only), the val splits."""
    return ([] if cfg.eval_only else [(cfg.data, "train")]) + [(n, "val") for n in eval_names(cfg)]


def wait_for_caches(cfg, poll=2.0):
    """DDP ranks > 0: wait (up to DATA_WAIT_S) until rank 0 has tokenized every split this run
    reads, before any process group exists (no collective times out meanwhile). If rank 0 fails,
    torchrun stops every rank."""
    deadline = time.time() + DATA_WAIT_S
    for name, split in wanted_splits(cfg):
        try:
            folder = corpus.cache_folder(name, **data_args(cfg, name))
        except (cli.UserError, ValueError):
            return  # a bad name: load_data says so in one line
        while split not in ((shards.read_meta(folder) or {}).get("splits") or {}):
            if time.time() > deadline:
                raise cli.UserError(f"waited {DATA_WAIT_S / 3600:.0f} h for rank 0 to tokenize {name} ({folder}); "
                                    f"prepare it first: python data.py --dataset {name}")
            time.sleep(poll)


def load_data(cfg, vocab):
    """(train tokens or None for eval_only, {corpus: val tokens}), each long enough for block_size.
    vocab: the model's; a cache holding larger ids is refused here, where data enters."""
    def split(name, which):  # data.py / batches.py say in one line (a UserError) what does not fit
        tokens = corpus.load_split(name, which, vocab=vocab, **data_args(cfg, name))
        batches.check_split(tokens, cfg.block_size, name, which)
        return tokens
    train = None if cfg.eval_only else split(cfg.data, "train")
    return train, {name: split(name, "val") for name in eval_names(cfg)}


@torch.no_grad()
def estimate_loss(model, val, cfg, place, stop=None):
    """The validation loss during training: mean cross-entropy over a fixed set of eval_iters
    random batches (seed EVAL_SEED, the same for every run; all ranks averaged). A quick, steady
    estimate for the curve and ckpt_best; the reported number is --eval_only's (evaluate_split).
    None when `stop` (runtime.StopFlag) is requested between two batches (one process: DDP's ranks
    must all reduce, so they finish the evaluation)."""
    model.eval()
    total = torch.zeros((), device=place.device)
    for i in range(cfg.eval_iters):
        if stop is not None and stop.requested and place.world == 1:
            model.train()
            return None
        x, y = batches.get_batch(val, cfg.batch_size, cfg.block_size, step=i, seed=EVAL_SEED, rank=place.rank,
                                 device=place.device)
        with place.autocast:
            _, loss = model(x, y)
        total += loss.float()
    if place.world > 1:
        dist.all_reduce(total)
    model.train()
    return total.item() / (cfg.eval_iters * place.world)


@torch.no_grad()
def evaluate_split(model, val, cfg, place):
    """The reported loss of a val split (the protocol of the paper's perplexities as we run them):
    batches.eval_windows, contiguous non-overlapping windows of block_size tokens over the split
    (or its first --eval_tokens), every token after the first predicted once, each window without
    the previous one's context; the loss is the mean over those targets. Batches are shared out
    over the DDP ranks and the sums all-reduced."""
    model.eval()
    cap = cfg.eval_tokens or None
    starts, lengths = batches.eval_windows(len(val), cfg.block_size, cap)
    # float64 sums: millions of per-token losses (MPS has no float64: float32 there)
    total = torch.zeros((), device=place.device, dtype=torch.float32 if place.device_type == "mps" else torch.float64)
    for i, (x, y) in enumerate(batches.eval_batches(val, cfg.block_size, cfg.batch_size, cap, device=place.device)):
        if i % place.world == place.rank:
            with place.autocast:
                _, loss = model(x, y)
            total += loss.to(total.dtype) * y.numel()  # mean -> sum over this batch's targets
    if place.world > 1:
        dist.all_reduce(total)
    model.train()
    targets = int(lengths.sum())
    loss = total.item() / targets
    return dict(val_loss=loss, perplexity=math.exp(loss),
                protocol=dict(method="contiguous non-overlapping windows, each target once, no context carried "
                                     "across windows (Hugging Face strided perplexity with stride = block_size)",
                              block_size=cfg.block_size, windows=len(starts), tokens_counted=targets,
                              split_tokens=len(val), eval_tokens=cap))


def count_yardsticks(cfg, name):
    """Unigram / bigram / trigram cross-entropy of corpus `name`'s val split (corpus.baselines),
    counted on its train split. --yardsticks auto: only from a cache that exists (train and val
    built): its baselines.json, or counted here when train holds <= AUTO_YARDSTICK_TOKENS; never
    a download or a long count. count: prepare and count, whatever it takes. off: None."""
    if cfg.yardsticks == "off":
        return None
    args = data_args(cfg, name)
    if cfg.yardsticks == "count":
        return corpus.baselines(name, **args)  # a corpus without a train split (c4): its one-line error
    try:
        folder = corpus.cache_folder(name, **args)
        built = (shards.read_meta(folder) or {}).get("splits") or {}
        if not {"train", "val"} <= set(built) or (built["train"]["tokens"] > AUTO_YARDSTICK_TOKENS and
                                                  not os.path.exists(os.path.join(folder, "baselines.json"))):
            return None
        return corpus.baselines(name, **args)
    except (cli.UserError, ValueError, MemoryError):
        return None



def evaluate_checkpoint(cfg, place, model, vals, folder, yardsticks, t0):
    """--eval_only: loss and perplexity of a trained model on each val split (evaluate_split),
    each with its protocol and yardsticks, in eval.json."""
    source = os.path.join(cfg.out_dir, "ckpt_last.pt") if cfg.resume else cfg.init_from
    results = {}
    for name, val in vals.items():
        r = results[name] = evaluate_split(model, val, cfg, place)
        r["yardsticks"] = yardsticks if name == eval_names(cfg)[0] else count_yardsticks(cfg, name)
        p = r["protocol"]
        folder.log(f"eval {name}: loss {r['val_loss']:.4f} nats, perplexity {r['perplexity']:.2f} on "
                   f"{p['tokens_counted']:,} tokens ({p['windows']:,} windows of {p['block_size']}; {source}, "
                   f"{model.num_params():,} params)")
    res = dict(init_from=source, kind=cfg.model, params=model.num_params(), tokenizer=cfg.tokenizer,
               results=results, seconds=time.time() - t0, out_dir=cfg.out_dir)
    if place.master:
        checkpoint.atomic_json(res, folder.path("eval.json"))
    return res

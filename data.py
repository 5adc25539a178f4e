"""Tokenize a corpus into cached uint16 token files (GPT-2 BPE or UTF-8 bytes) and print its
n-gram yardsticks: the command line of plumbing/corpus.py, where the tokenizers, the cache
layout and the resumable build are described.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) trains its 130M SPEN on FineWeb-Edu with the
GPT-2 BPE vocabulary and reports C4 and "Wiki" perplexity; every loss here is read against the
unigram, bigram and trigram cross-entropy of the same validation split (`--baselines`); with
`--tokenizer bytes` also zlib, bz2 and lzma at their strongest settings on the val bytes, in
nats per byte (plumbing/ngram.py says what they are and are not).

Run:  python data.py --dataset builtin                       tokenize (once) and print the splits
      python data.py --dataset builtin --baselines           print the yardsticks as JSON
      python data.py --dataset builtin --tokenizer bytes --baselines   the same per byte, and the compressors
      python data.py --dataset files:~/corpus                your own text, offline
      python data.py --dataset fineweb-edu --max_tokens 100000000 --num_proc 16  (online)
The builtin yardsticks are in results/train_cpu/README.md (Yardsticks). Hub unreachable and
no cache, a full disk, a non-UTF-8 file, a split the dataset lacks, another process building the
same cache (refused without touching its work), tiktoken not installed: one line (a cli.UserError)
naming the dataset or file and what to do, exit status 1; any other error keeps its traceback.
"""
import dataclasses
import json
import os
import sys
import time

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "data.py")  # until main_guard; the imports below take seconds

from plumbing import cli, corpus, shards, sources


@dataclasses.dataclass
class DataConfig:
    """Settings of `python data.py`, one flag per field."""
    dataset: str = cli.arg("builtin", f"one of {', '.join(sources.DATASETS)} (files:PATH = your file or folder)",
                           group="data")
    max_tokens: int = cli.arg(None, "cap on tokens per split; None = the whole source", group="data",
                              bounds=(1, 10 ** 13))
    splits: tuple = cli.arg((), "splits to build, of train val; () = all the dataset has", group="data")
    tokenizer: str = cli.arg("gpt2", "gpt2 (GPT-2 BPE, V = 50257) or bytes (UTF-8 bytes, V = 256, "
                                     "documents separated by NUL)", choices=corpus.TOKENIZERS, group="data")
    baselines: bool = cli.arg(False, "print the unigram / interpolated bigram / interpolated trigram "
                                     "cross-entropy of val (counted on train) as JSON on stdout; bytes: "
                                     "also zlib -9, bz2 -9, lzma -9e on the val bytes (nats/byte)",
                              group="evaluation")
    cache_dir: str = cli.arg(None, f"cache root; None = $EMA_DATA_DIR or {shards.DEFAULT_CACHE_DIR}", group="I/O")
    force: bool = cli.arg(False, "rebuild even if cached (the old cache stays until the new one is complete)",
                          group="I/O")
    num_proc: int = cli.arg(None, "encoding processes (reading overlaps them); None = all cores", group="system",
                            bounds=(1, 1024))
    shard_tokens: int = cli.arg(shards.SHARD_TOKENS, "a resumable checkpoint of the build every this many tokens",
                                group="system", bounds=(1, 10 ** 13))
    progress: float = cli.arg(shards.PROGRESS_EVERY, "seconds between progress lines on stderr; 0 = none",
                              group="system", bounds=(0, 10 ** 6))

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        bad = [s for s in self.splits if s not in ("train", "val")]
        cli.require(not bad, "--splits must be train and/or val, got {}", " ".join(bad))


def get_parser():
    return cli.parser(DataConfig, "Tokenize a dataset into cached uint16 files (GPT-2 BPE or bytes); "
                                  "--baselines prints its n-gram yardsticks.")


def main(cfg):
    """Prepare cfg.dataset; print its splits (with --baselines on stderr, the yardsticks as JSON
    on stdout). Returns dict(folder, splits, baselines)."""
    return cli.main_guard(lambda: _run(cfg))


def _run(cfg):
    t0 = time.time()
    from plumbing.checkpoint import check_out_dir  # here: importing data.py imports no torch (checkpoint does)
    check_out_dir(cfg.cache_dir or shards.DEFAULT_CACHE_DIR, "--cache_dir")  # a file, read-only: before tokenizing
    files = sources.resolve(cfg.dataset)[0]  # a bad name or path: one line, before anything else
    if cfg.baselines:
        corpus.check_countable(cfg.dataset)
    cached = shards.read_meta(shards.folder_of(cfg.dataset, files, cfg.max_tokens, cfg.cache_dir, cfg.tokenizer))
    folder = corpus.prepare(cfg.dataset, max_tokens=cfg.max_tokens, cache_dir=cfg.cache_dir,
                     splits=list(cfg.splits) or None, num_proc=cfg.num_proc, force=cfg.force,
                     tokenizer=cfg.tokenizer, shard_tokens=cfg.shard_tokens, progress=cfg.progress)
    t1 = time.time()
    yardsticks = (corpus.baselines(cfg.dataset, cfg.cache_dir, cfg.max_tokens, cfg.tokenizer)
                  if cfg.baselines else None)
    t2 = time.time()
    meta = shards.read_meta(folder)
    report = sys.stderr if cfg.baselines else sys.stdout  # keep stdout pure JSON for --baselines
    for split, info in sorted(meta["splits"].items()):
        print(f"{split:5s} {info['tokens']:>13,d} tokens {info['documents']:>10,d} documents "
              f"-> {os.path.join(folder, split + '.bin')}", file=report)
    hit = cached is not None and cached["splits"] == meta["splits"] and not cfg.force
    print(f"{'cache hit' if hit else 'tokenized'} in {t1 - t0:.1f}s: {folder}", file=report)
    if yardsticks is not None:
        print(f"yardsticks in {t2 - t1:.1f}s: {os.path.join(folder, 'baselines.json')}", file=report)
        print(json.dumps(yardsticks, indent=2))
    return dict(folder=folder, splits=meta["splits"], baselines=yardsticks)


if __name__ == "__main__":
    main(cli.parse(DataConfig, get_parser()))

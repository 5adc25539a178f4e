"""The plumbing: everything a run needs that is not the lesson. The models (spen.py, gpt.py,
variants.py, ema.py), the SPCN (spcn.py, grammar.py) and the commands a student runs
(train.py, probe.py, recall.py, ...) live at the top level; this package holds the parts
they share, one idea per module:

    cli          a script's settings as one dataclass, its flags, its one-line errors
    runs         the output folder check, mean ± std, the parallel job runner, figure setup
    checkpoint   the run folder: atomic checkpoints, the lock, metrics.jsonl
    runtime      where a run computes (device, dtype, autocast), its speed (MFU), lr schedule
    corpus       tokenizers and token caches (data.py is its command line)
    sources      where documents come from (builtin, files:PATH, the hub)
    shards       the resumable sharded cache build
    batches      training, probe and evaluation windows of a token array
    evaluate     the splits a run reads; the paper's evaluation protocol (every token once, eval.json)
    ngram        the unigram, bigram and trigram yardsticks
    repeats      which tokens an in-context copy could predict, and the loss split on them
    timing       bench.py's timers and memory readings (its tables: bench_report)

Importing the package imports none of them.
"""

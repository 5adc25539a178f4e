"""The plumbing: everything a run needs that is not the lesson. The models (spen.py, gpt.py,
variants.py, writes.py, ema.py), the SPCN (spcn.py, grammar.py) and the commands a student runs
(train.py, probe.py, recall.py, ...) live at the top level; this package holds the parts they
share, one idea per module (tests/test_imports.py holds this index to the folder):

    cli           a script's settings as one dataclass, its flags, its one-line errors
    checkpoint    the run folder: the --out_dir check, atomic checkpoints, the lock, metrics.jsonl
    runtime       where a run computes (device, dtype, a training process's rank), will it fit, how fast (MFU), its log's header
    registry      the named models every experiment reads (name -> Model(family, config overrides))
    grid          the grid commands' run cache, and the worker pool that trains a few runs at a time
    tables        results as files: tables, figures, the results JSON, mean ± std; probe, recall, scaling's reports
    records       what is read back from a run folder, checked for type, finiteness and range (one line if damaged)
    corpus        tokenizers and token caches (data.py is its command line)
    sources       where documents come from (builtin, files:PATH, the hub)
    shards        the resumable sharded cache build
    batches       training, probe and evaluation windows of a token array
    evaluate      the splits a run reads; the paper's evaluation protocol (every token once, eval.json)
    ngram         the unigram, bigram and trigram yardsticks
    repeats       which tokens an in-context copy could predict, and the loss split on them
    timing        how bench.py measures: timers, memory readings, its sections on a training step, its tables

Importing the package imports none of them.
"""

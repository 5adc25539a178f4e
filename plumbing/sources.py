"""Where documents come from: the named text sources that data.py tokenizes.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": the
130M SPEN trains on FineWeb-Edu and reports C4 perplexity and a "Wiki" perplexity. This file
names those sources on the Hugging Face Hub, adds two offline ones so everything runs
without the hub, and tells in one line why the hub cannot be used when it cannot.

Sources (`name`):
  builtin       offline: Python's pydoc_data.topics + standard-library docstrings (read
                with `ast`, never imported); on Python 3.11.7: 673 documents, train
                644,787 tokens, val 47,018.
  fineweb-edu   HuggingFaceFW/fineweb-edu, config sample-10BT, split train, streamed.
  c4            allenai/c4 en validation (the 8 validation shards named as data_files,
                streamed); only a 'val' split: it is an evaluation set here.
  wikitext103   Salesforce/wikitext, wikitext-103-raw-v1, streamed. Our 'val' is its TEST
                split, the one perplexity is conventionally reported on (we never tune on
                it); 'train' is its train split. Rows are lines; we rejoin them into
                articles at the " = Title = " headings.
  files:PATH    your .txt / .jsonl / .json / .parquet file or folder, read with `datasets`
                (JSON/Parquet: one document per row, column 'text'; .txt: one document per
                file, cut at blank lines into pieces of >= 16k characters). Text must be
                UTF-8 (a file that is not is named, with the `iconv` line that converts it).

Splits: 'train' and 'val'. builtin, files: and fineweb-edu carve 'val' themselves:
  - shards.VAL_EVERY = 10 documents or more: every 10th document (index 0, 10, 20, ...) goes to
    'val' (fineweb-edu until 'val' holds 10M tokens, after which those go to 'train');
  - fewer documents (a single-line text file, a handful of rows): 'val' is the last tenth
    of the token stream (at least one token), cut mid-document if need be, 'train' the rest.

Terms: a document is one str of text (a pydoc topic, a module's docstrings, a row, a piece
of a .txt file, a wikitext article); a split is 'train' or 'val'; a carved source
(is_carved: builtin, files:, fineweb-edu) yields one stream that shards.carve cuts into both
splits; the others map each split to a hub split (HUB[name]['splits']).

Use: corpus.py's prepare, the one caller (nothing here calls back), calls resolve(name) at its
door (validates a name; its files and its splits), hub_unreachable() before any hub call,
and documents(...) for the texts of a build (their tokens are routed to the splits by
shards.carve); only resolve runs on a cache hit, and `datasets` is imported only when text
must be read. A hub failure is one of two one-line errors: 'offline (no network)' (hub_error:
the hub cannot be reached) or 'the hub answered with an error' (hub_answered_error: a rate
limit, a 5xx, a dropped stream; the same command resumes). Nothing to run here: `python
data.py --dataset NAME` tokenizes a source; tests/test_data.py and tests/test_prepare.py check
this file.
"""
import ast
import codecs
import glob
import os
import re
import socket
import urllib.parse

from plumbing import cli

# Hub sources: load_dataset(**kwargs, split=<hf split>, streaming=True) per split.
# 'carve': both our splits come from one stream (val_max caps val). Otherwise 'splits'
# maps our split to the hub split.
HUB = {
    "fineweb-edu": dict(kwargs=dict(path="HuggingFaceFW/fineweb-edu", name="sample-10BT"),
                        carve="train", val_max=10_000_000,
                        documents=9_670_000),  # about: the dataset viewer's row count, for the ETA
    # naming the validation shards avoids resolving the 1024 train shards of the en config
    "c4": dict(kwargs=dict(path="allenai/c4",
                           data_files={"validation": "en/c4-validation.*.json.gz"}),
               splits={"val": "validation"}),
    "wikitext103": dict(kwargs=dict(path="Salesforce/wikitext", name="wikitext-103-raw-v1"),
                        splits={"train": "train", "val": "test"}),
}
DATASETS = ["builtin", *HUB, "files:PATH"]
FILE_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DataUnavailable(cli.UserError):
    """The data cannot be had here (hub unreachable, missing files, a split the dataset lacks);
    message is one line saying what to do."""


def resolve(name):
    """What source `name` is, asked once at the door: (its sorted file list for files:, else None; the
    splits it has: ['val'] for c4, ['train', 'val'] otherwise). An unknown name is one line."""
    if name.startswith("files:"):
        return _list_files(name[len("files:"):]), ["train", "val"]
    if name != "builtin" and name not in HUB:
        raise cli.UserError(f"unknown dataset '{name}'; choose one of {', '.join(DATASETS)}")
    return None, list(HUB[name]["splits"]) if "splits" in HUB.get(name, {}) else ["train", "val"]


def is_carved(name, files=None):
    """Whether source `name` yields one stream that shards.carve cuts into 'train' and 'val'."""
    return name == "builtin" or files is not None or "carve" in HUB.get(name, {})


def documents(name, files=None, folder=None, hf_split="train"):
    """The documents (str) of source `name`: builtin, its `files` (from resolve), or the hub
    split hf_split (folder: the cache folder, named in the error if the hub fails)."""
    if name == "builtin":
        return _builtin_documents()
    if files is not None:
        return _file_documents(files)
    return _hub_documents(name, folder, hf_split)


# ----------------------------------------------------------------------------- builtin

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


# ----------------------------------------------------------------------------- files:PATH

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
        try:
            for row in ds:
                if "text" not in row:
                    raise DataUnavailable(f"{builder} rows in {os.path.dirname(group[0])} have no 'text' "
                                          f"column (columns: {sorted(row)}); rename the text column to 'text'")
                if builder == "text":
                    yield from _text_pieces(row["text"])
                else:
                    yield row["text"]
        except UnicodeDecodeError as e:  # `datasets` does not say which file: find it
            raise DataUnavailable(_not_utf8(group, e)) from e


def _not_utf8(files, error):
    """One line naming the first of `files` that is not UTF-8 and how to convert it."""
    for path in files:
        decoder = codecs.getincrementaldecoder("utf-8")()
        with open(path, "rb") as f:
            try:
                for block in iter(lambda: f.read(1 << 20), b""):
                    decoder.decode(block)
                decoder.decode(b"", final=True)
            except UnicodeDecodeError as e:
                return (f"{path} is not UTF-8 text ({e.reason}, byte 0x{e.object[e.start]:02x}); convert "
                        f"it, e.g. `iconv -f latin1 -t utf-8 {path} > {path}.new && mv {path}.new {path}`")
    return f"text in {os.path.dirname(files[0])} is not UTF-8 ({error.reason}); convert it to UTF-8"


# ----------------------------------------------------------------------------- Hugging Face hub

def hub_unreachable():
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


def hub_error(name, folder, reason):
    """The one-line DataUnavailable for hub source `name`: not in the cache `folder` and the
    hub unreachable for `reason` (offline), with the three ways out."""
    return DataUnavailable(
        f"offline (no network): dataset '{name}' is not in the token cache ({folder}) and the Hugging "
        f"Face Hub is unreachable ({reason}). Remedies: go online once and run `python data.py --dataset "
        f"{name}` (later runs read the cache offline), or train offline with `--data builtin`, "
        "or bring your own text with `--data files:PATH`.")


def hub_answered_error(name, error):
    """The one-line DataUnavailable for a hub that is reachable but failed mid-stream (a rate
    limit, a 5xx, a dropped connection): the same command resumes the build."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
    what = f"HTTP {status}: {first}" if status else first
    return DataUnavailable(f"the hub answered with an error while streaming '{name}' ({what}); a rate "
                           f"limit or a server error passes: run the same command again, it resumes.")


def _hub_documents(name, folder, hf_split):
    """Texts of one hub split, streamed. A network failure becomes DataUnavailable: 'offline'
    if the hub cannot be reached now, else 'the hub answered with an error'."""
    datasets = _import_datasets()
    try:
        ds = datasets.load_dataset(**HUB[name]["kwargs"], split=hf_split, streaming=True)
        if name == "wikitext103":
            yield from _wikitext_articles(row["text"] for row in ds)
        else:
            for row in ds:
                yield row["text"]
    except OSError as e:  # requests/httpx/hub errors are OSErrors (ConnectionError included)
        reason = hub_unreachable()
        raise (hub_error(name, folder, reason) if reason else hub_answered_error(name, e)) from e


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

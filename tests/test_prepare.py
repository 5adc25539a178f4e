"""Tests for the resumable cache build (plumbing/corpus.py's prepare, plumbing/shards.py): a stream that fails after
k documents resumes and ends byte-identical to an uninterrupted build (and says so), the offline /
hub-error messages, a FineWeb-Edu-shaped parquet file through the real `datasets` streaming code,
a build killed with SIGKILL, progress lines without a terminal, encoding processes, the build
lock. CPU, offline."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from plumbing import cli, corpus, shards, sources
import data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(argv):
    return data.main(cli.parse(data.DataConfig, data.get_parser(), argv))


def _bins(folder):
    out = {}
    for split in ("train", "val"):
        with open(os.path.join(folder, f"{split}.bin"), "rb") as f:
            out[split] = f.read()
    return out


def _splits(folder):
    """meta.json's splits without their build time."""
    splits = shards.read_meta(folder)["splits"]
    return {s: {k: v for k, v in info.items() if k != "seconds"} for s, info in splits.items()}


class HubHTTPError(OSError):
    """What the hub client raises for an HTTP error: an OSError with a .response."""

    def __init__(self, status):
        super().__init__(f"{status} Client Error: Too Many Requests for url: https://huggingface.co/...")
        self.response = type("Response", (), {"status_code": status})()


def _fake_hub(monkeypatch, n_docs, fail_after=None, unreachable=None):
    """load_dataset for fineweb-edu streams n_docs documents; raises after `fail_after` of them
    (once); hub_unreachable() says `unreachable` (a reason, or None: online)."""
    import datasets
    state = dict(fail_after=fail_after, read=0)

    def stream():
        for i in range(n_docs):
            if state["fail_after"] is not None and i == state["fail_after"]:
                state["fail_after"] = None  # the next run does not fail
                raise HubHTTPError(429)
            state["read"] += 1
            yield {"text": f"document {i}: " + "some words of text " * (1 + i % 7)}

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: stream())
    monkeypatch.setattr(sources, "hub_unreachable", lambda: unreachable)
    return state


def test_a_failed_stream_resumes_byte_identical(tmp_path, monkeypatch, capsys):
    _fake_hub(monkeypatch, 120)
    whole = corpus.prepare("fineweb-edu", cache_dir=str(tmp_path / "a"), num_proc=1, progress=0, shard_tokens=200)
    capsys.readouterr()
    _fake_hub(monkeypatch, 120, fail_after=77)
    cache = str(tmp_path / "b")
    with pytest.raises(sources.DataUnavailable) as err:
        corpus.prepare("fineweb-edu", cache_dir=cache, num_proc=1, progress=0, shard_tokens=200)
    msg = str(err.value)
    assert "\n" not in msg and "the hub answered with an error" in msg and "HTTP 429" in msg
    assert "run the same command again, it resumes" in msg and "kept in" in msg
    folder = corpus.cache_folder("fineweb-edu", cache_dir=cache)
    assert not os.path.exists(os.path.join(folder, "meta.json")) and os.path.isdir(folder + ".partial")
    with open(os.path.join(folder + ".partial", "manifest.json")) as f:
        kept = json.load(f)["state"]
    assert 0 < kept["documents"] <= 77
    encoded = []
    real = corpus._encode_batch
    monkeypatch.setattr(corpus, "_encode_batch", lambda batch, tokenizer: encoded.extend(batch) or real(batch, tokenizer))
    state = _fake_hub(monkeypatch, 120)
    assert corpus.prepare("fineweb-edu", cache_dir=cache, num_proc=1, progress=0, shard_tokens=200) == folder
    assert "resuming the build" in capsys.readouterr().err
    assert len(encoded) == 120 - kept["documents"] and state["read"] == 120  # skipped: read, not encoded
    assert _bins(folder) == _bins(whole) and _splits(folder) == _splits(whole)
    assert not os.path.exists(folder + ".partial")  # a finished build leaves no partial build


def test_offline_and_hub_error_are_told_apart(tmp_path, monkeypatch):
    # unreachable before the build: nothing is written
    _fake_hub(monkeypatch, 50, unreachable="cannot connect to huggingface.co:443: Network is unreachable")
    with pytest.raises(sources.DataUnavailable, match="fineweb-edu"):
        corpus.prepare("fineweb-edu", cache_dir=str(tmp_path), progress=0)
    assert os.listdir(tmp_path) == []
    # the network drops mid-stream: 'offline' again, now with the work kept
    state = _fake_hub(monkeypatch, 50, fail_after=30)
    monkeypatch.setattr(sources, "hub_unreachable", lambda: None if state["fail_after"] else "no route")
    with pytest.raises(sources.DataUnavailable) as err:
        corpus.prepare("fineweb-edu", cache_dir=str(tmp_path), progress=0, num_proc=1, shard_tokens=100)
    assert str(err.value).startswith("offline (no network)") and "the same command resumes" in str(err.value)


def test_fineweb_shaped_parquet_through_datasets(tmp_path, monkeypatch):
    """A parquet file with FineWeb-Edu's real columns, read by `datasets` streaming (files:)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = 23
    texts = [f"Photosynthesis, part {i}: light energy becomes chemical energy. Ünïcode ✓" for i in range(n)]
    table = pa.table({
        "text": texts, "id": [f"<urn:uuid:{i:08d}>" for i in range(n)],
        "dump": ["CC-MAIN-2024-10"] * n, "url": [f"https://example.org/{i}" for i in range(n)],
        "file_path": ["s3://commoncrawl/crawl-data/CC-MAIN-2024-10/segments/x.warc.gz"] * n,
        "language": ["en"] * n, "language_score": pa.array([0.97] * n, pa.float64()),
        "token_count": pa.array([17] * n, pa.int64()), "score": pa.array([3.1] * n, pa.float64()),
        "int_score": pa.array([3] * n, pa.int64())})
    path = tmp_path / "000_00000.parquet"
    pq.write_table(table, path)
    for tokenizer in ("gpt2", "bytes"):
        train, val = (corpus.load_split(f"files:{path}", s, cache_dir=str(tmp_path / "c"), tokenizer=tokenizer,
                                      progress=0) for s in ("train", "val"))
        sep = "<|endoftext|>" if tokenizer == "gpt2" else "\0"
        assert corpus.decode(val, tokenizer) == "".join(texts[i] + sep for i in (0, 10, 20))
        assert corpus.decode(train, tokenizer) == "".join(texts[i] + sep for i in range(n) if i % 10)


def _corpus(path, megabytes):
    """A jsonl corpus of about `megabytes` MB of varied text, one document per row."""
    rng = np.random.default_rng(0)
    words = np.array("the of and to in is was for on that with as by at from his her an were are which "
                     "café naïve résumé ✓ λ EMA trace decay token window epoch".split())
    with open(path, "w") as f:
        size, i = 0, 0
        while size < megabytes * 1e6:
            row = json.dumps({"text": f"Row {i}. " + " ".join(rng.choice(words, int(rng.integers(20, 400))))})
            f.write(row + "\n")
            size += len(row) + 1
            i += 1


def _data_py(*args):
    return [sys.executable, os.path.join(ROOT, "data.py"), *args]


@pytest.mark.slow
def test_sigkill_mid_build_resumes_byte_identical(tmp_path, monkeypatch, capsys):
    """A few MB here; the ~50 MB run of the same steps is reported by hand (see the report)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = tmp_path / "corpus.jsonl"
    _corpus(src, 1.5)
    name, opts = f"files:{src}", dict(tokenizer="bytes", num_proc=2, shard_tokens=40000, progress=0)
    whole = corpus.prepare(name, cache_dir=str(tmp_path / "whole"), **opts)
    folder = corpus.cache_folder(name, cache_dir=str(tmp_path / "killed"), tokenizer="bytes")
    manifest = os.path.join(folder + ".partial", "manifest.json")
    argv = ["--dataset", name, "--cache_dir", str(tmp_path / "killed"), "--tokenizer", "bytes", "--num_proc", "2",
            "--shard_tokens", "40000", "--progress", "0"]
    proc = subprocess.Popen(_data_py(*argv), env=dict(os.environ, OMP_NUM_THREADS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while not os.path.exists(manifest) and proc.poll() is None and time.time() - t0 < 120:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)  # mid-way: at least one shard recorded, the cache not yet renamed in
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the build ended before it could be killed"
    assert not os.path.exists(os.path.join(folder, "meta.json"))
    # run again (the same code as the command, here in-process): it resumes and ends byte-identical
    assert corpus.prepare(name, cache_dir=str(tmp_path / "killed"), **opts) == folder
    assert "resuming the build" in capsys.readouterr().err
    assert _bins(folder) == _bins(whole) and _splits(folder) == _splits(whole)
    assert not os.path.exists(folder + ".partial")


def test_progress_lines_without_a_terminal(tmp_path, capsys):
    corpus.prepare("builtin", max_tokens=20000, cache_dir=str(tmp_path), num_proc=1, progress=1e-9)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and all(line.startswith("data.py: builtin-py") for line in lines)
    assert "documents" in lines[-1] and "tokens/s" in lines[-1] and "ETA" in lines[-1]  # total known: the cap


def test_encoding_processes_give_the_same_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(corpus, "POOL_AFTER", 16)  # the worker processes start after one batch
    src = tmp_path / "rows.jsonl"
    _corpus(src, 0.3)
    for tokenizer in ("gpt2", "bytes"):
        one, two = (corpus.prepare(f"files:{src}", cache_dir=str(tmp_path / f"c{n}"), num_proc=n, progress=0,
                                 tokenizer=tokenizer) for n in (1, 2))
        assert _bins(one) == _bins(two) and _splits(one) == _splits(two)


def test_an_encoding_process_dies_on_sigterm_whatever_handler_the_parent_has():
    """The pool's terminate is a SIGTERM. A Python handler in the parent (dev.seeds once left
    KeyboardInterrupt's installed in the suite's process) passed through the fork, and a worker that
    caught it mid-task stayed alive: the pool's join, and CI, waited for ever."""
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with multiprocessing.get_context("fork").Pool(1, corpus._exit_with, (os.getpid(),)) as pool:
            assert pool.apply(signal.getsignal, (signal.SIGTERM,)) == signal.SIG_DFL
            assert pool.apply(signal.getsignal, (signal.SIGINT,)) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.slow
def test_one_build_at_a_time_and_a_bounded_wait(tmp_path, monkeypatch, capsys):
    """A lock held past WAIT_S: the second caller gives up in one line; once the holder ends, it builds."""
    monkeypatch.setattr(shards, "WAIT_S", 1.0)
    folder = corpus.cache_folder("builtin", max_tokens=500, cache_dir=str(tmp_path))
    os.makedirs(folder + ".partial")
    lock = os.path.join(folder + ".partial", "lock")
    code = ("import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.lockf(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(60)")
    other = subprocess.Popen([sys.executable, "-c", code, lock], stdout=subprocess.PIPE, text=True)
    try:  # another process builds this cache, and never finishes
        assert other.stdout.readline().strip() == "locked"
        t0 = time.time()
        with pytest.raises(sources.DataUnavailable, match="another process is building") as e:
            corpus.prepare("builtin", max_tokens=500, cache_dir=str(tmp_path), progress=0)
        assert "\n" not in str(e.value) and "1 s" in str(e.value) and time.time() - t0 < 10
        assert capsys.readouterr().err.count("waiting for it") == 1
    finally:
        other.kill()
        other.wait()
        other.stdout.close()
    assert len(corpus.load_split("builtin", "train", max_tokens=500, cache_dir=str(tmp_path), progress=0)) == 500


@pytest.mark.slow
def test_a_second_build_waits_for_the_first_and_reads_its_cache(tmp_path, monkeypatch, capsys):
    """Two builds of one cache a moment apart (two processes, as the lab's exercise-7 cell and its
    background byte run): the second waits, touching nothing of the first, then reads the cache
    the first built (no second build)."""
    import threading
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src, cache = tmp_path / "corpus.txt", str(tmp_path / "cache")
    src.write_text("".join(f"line {i} of a tiny corpus\n\n" for i in range(400)))
    name = f"files:{src}"
    partial = corpus.cache_folder(name, cache_dir=cache) + ".partial"
    ctx = multiprocessing.get_context("fork")
    started, go = ctx.Event(), ctx.Event()
    real = corpus._encode_batch

    def paused(batch, tokenizer):  # the first build waits in its first batch until the second is waiting
        started.set()
        go.wait(60)
        return real(batch, tokenizer)
    monkeypatch.setattr(corpus, "_encode_batch", paused)
    first = ctx.Process(target=corpus.prepare, args=(name,), kwargs=dict(cache_dir=cache, num_proc=1, progress=0))
    first.start()
    monkeypatch.setattr(corpus, "_encode_batch", lambda *a: pytest.fail("the second caller encoded: a second build"))
    second = {}
    waiter = threading.Thread(target=lambda: second.update(
        folder=corpus.prepare(name, cache_dir=cache, num_proc=1, progress=0)))
    try:
        assert started.wait(60), "the first build did not start"
        before = sorted(os.listdir(partial))
        waiter.start()
        time.sleep(1.0)
        assert waiter.is_alive() and sorted(os.listdir(partial)) == before  # waiting, the first's files all there
    finally:
        go.set()
        first.join(60)
    waiter.join(60)
    assert first.exitcode == 0 and second["folder"] == corpus.cache_folder(name, cache_dir=cache)
    assert not os.path.exists(partial) and "waiting for it" in capsys.readouterr().err
    assert len(corpus.load_split(name, "train", cache_dir=cache, progress=0)) > 0


def test_vocab_is_checked_where_data_enters(tmp_path):
    cache = str(tmp_path)
    meta_max = shards.read_meta(corpus.prepare("builtin", max_tokens=2000, cache_dir=cache, progress=0))["splits"]
    train = corpus.load_split("builtin", "train", max_tokens=2000, cache_dir=cache, vocab=50257)
    assert meta_max["train"]["max_id"] == int(np.max(train)) and meta_max["val"]["max_id"] == int(np.max(
        corpus.load_split("builtin", "val", max_tokens=2000, cache_dir=cache)))
    with pytest.raises(cli.UserError) as err:
        corpus.load_split("builtin", "train", max_tokens=2000, cache_dir=cache, vocab=256)
    msg = str(err.value)
    assert "\n" not in msg and f"token id {int(np.max(train))}" in msg and "vocabulary of 256" in msg
    assert "--tokenizer" in msg
    assert len(corpus.load_split("builtin", "val", max_tokens=2000, cache_dir=cache, tokenizer="bytes", vocab=256))

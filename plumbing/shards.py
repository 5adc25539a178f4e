"""The token cache on disk: its folder (folder_of) and what a finished one holds (read_meta), and
its resumable builds: token ids appended to uint16 <split>.bin files in shards, with a manifest
from which an interrupted build resumes; the lock that keeps a build to one process.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN": the 130M
SPEN trains on FineWeb-Edu, a stream far longer than one sitting; this file writes such a
stream to disk so that a build stopped at any point (an error, Ctrl-C, kill -9) continues.
It is the last step of the data path, called by corpus.py's prepare and calling nothing back:
prepare takes the lock (building), opens a Writer on what the cache holds (its identity),
reads each stream's documents from sources.py, encodes them and hands the token ids to
Writer.write (which routes a carved stream's documents to 'train' and 'val': carve), then
commit()s; corpus.py says what the cache holds (the layout, meta.json's fields), this file where
it lies and whether a split is there.

Layout of a build in progress, beside its cache folder <key>/:
  <key>.partial/<split>.bin       uint16 token ids, appended in document order
  <key>.partial/manifest.json     identity (what the build makes: cache key, tokenizer, streams,
                                  val rule, format) and state (the stream reached, the documents
                                  read in it, per split its tokens, documents and largest id)
  <key>.partial/lock              a POSIX lock the building process holds: one build at a time; a
                                  second waits for it, touching nothing, and then reads its cache
  <file>.tmp<pid>                 a write in progress; a dead pid's are removed (remove_temps)

Resuming: every shard_tokens tokens, at a document boundary, the .bin files are flushed to
disk and manifest.json is replaced (temp file + rename). A Writer opened again with the same
identity cuts each .bin back to the tokens recorded and says how many documents of its stream
were read, which the caller skips (it reads them, it does not encode them), so the build ends
byte-identical to one that never stopped; a manifest of another identity, or files shorter than
it records, start the build afresh. Writer.commit renames the finished files into <key>/ with
meta.json last. A failed write (full disk, no permission) raises CacheWriteError, one line.
Messages begin 'data.py:', the command users run.

No command line: `python data.py` builds. Tested in tests/test_prepare.py (resume after an error
and after SIGKILL, the lock, progress lines) and tests/test_data.py (full disk, stale temp files).
"""
import contextlib
import errno
import glob
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import sys
import time

from plumbing import sources  # its DataUnavailable only: a build calls nothing there

SHARD_TOKENS = 1 << 25  # a build records a resumable checkpoint every this many tokens (64 MiB)
PROGRESS_EVERY = 10.0   # seconds between progress lines of a build
WAIT_S = 1800.0         # how long a second caller waits for another process's build of the same cache
VAL_EVERY = 10          # carved sources: document i goes to 'val' when i % VAL_EVERY == 0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
DEFAULT_CACHE_DIR = os.environ.get("EMA_DATA_DIR") or os.path.join(ROOT, ".cache", "data")


class CacheWriteError(sources.DataUnavailable):  # a cli.UserError, through DataUnavailable
    """The token cache could not be written (full disk, no permission); message is one line."""


# ----------------------------------------------------------------------------- the cache on disk

def folder_of(name, files=None, max_tokens=None, cache_dir=None, tokenizer="gpt2"):
    """The cache folder of source `name` (its `files` from sources.resolve): <cache_dir>/<key> (the module
    docstring of corpus.py says what <key> is made of)."""
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


# ----------------------------------------------------------------------------- files

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


def remove_temps(folder, stale=True):
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


def write_failed(folder, e):
    """The one-line CacheWriteError for OSError `e` while writing the cache of `folder`, with
    the advice for its cause: a full disk, a read-only or forbidden folder, or what else it says."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = "free disk space there or point --cache_dir (or $EMA_DATA_DIR) at another disk"
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        advice = "make it writable or point --cache_dir (or $EMA_DATA_DIR) at a folder you can write"
    else:  # e.g. a file of the build removed under it: say which, the same command resumes
        advice = "see to it, then run the same command again"
    where = f": {e.filename}" if e.filename else ""
    return CacheWriteError(f"cannot write the token cache in {folder} ({e.strerror or e}{where}); {advice}. "
                           "The previous cache, if any, is unchanged.")


def json_tmp(path, obj):
    """Write obj to <path>.tmp<pid>, flushed to disk; return that path (removed on failure).

    The one JSON writer of the cache: meta.json is written this way and renamed only in
    Writer.commit's swap, which a write-and-rename helper (checkpoint.atomic_json) cannot do."""
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


# ----------------------------------------------------------------------------- build

class _Progress:
    """A progress line on stderr every `every` seconds (terminal or not): documents, tokens,
    tokens/s of this run, and an ETA when the total is known."""

    def __init__(self, label, every, total_tokens=None, total_documents=None, enabled=True):
        self.label, self.every, self.enabled = label, every, enabled
        self.total_tokens, self.total_documents = total_tokens, total_documents
        self.t0 = self.last = time.time()
        self.start = None  # (documents, tokens) when this run began: a resumed build's rate

    def update(self, documents, tokens, last=False):
        """Print a line if `every` seconds have passed (last: also at the end of a long build)."""
        now = time.time()
        if self.start is None:  # the clock starts with the first document (opening a stream takes time)
            self.start, self.t0, self.last = (documents, tokens), now, now
        due = now - self.last >= self.every or (last and now - self.t0 >= self.every)
        if not self.enabled or not due:
            return
        self.last = now
        rate = (tokens - self.start[1]) / max(now - self.t0, 1e-9)
        eta = ""
        if self.total_tokens and rate > 0:
            eta = f", ETA {_duration((self.total_tokens - tokens) / rate)}"
        elif self.total_documents and documents > self.start[0]:
            per_doc = (now - self.t0) / (documents - self.start[0])
            eta = f", ETA ~{_duration(max(self.total_documents - documents, 0) * per_doc)}"
        print(f"data.py: {self.label}: {documents:,} documents, {tokens:,} tokens, {rate:,.0f} tokens/s{eta}",
              file=sys.stderr, flush=True)


def _duration(seconds):
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _read_manifest(partial, identity):
    """The state of the last complete shard of a partial build, or None (no build, another
    build's identity, or files shorter than it records)."""
    try:
        with open(os.path.join(partial, "manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if manifest.get("identity") != identity:
        return None
    state = manifest["state"]
    for split, info in state["splits"].items():
        path = os.path.join(partial, f"{split}.bin")
        if not os.path.isfile(path) or os.path.getsize(path) < 2 * info["tokens"]:
            return None
    return state


@contextlib.contextmanager
def building(folder):
    """Hold the build lock of `folder` -> its partial folder (<folder>.partial). A second caller
    waits for the running build (one line on stderr, polling the lock) and then holds the lock
    itself, so that the caller reads the finished cache under it; it touches nothing while it
    waits (the partial folder is the running build's). Past WAIT_S seconds it gives up in one line.

    The lock is a POSIX record lock (lockf) on <partial>/lock, not flock: it belongs to this
    process, so the encoding processes it forks do not inherit it and cannot hold it after a
    kill -9 of this one; the kernel drops it when the process ends, however. The holder removes
    the partial folder (lock file included) when its build is done: a process that opened the
    removed file locks the new one instead (the inode check). Left with nothing but its lock
    file (no build was needed, or none got as far as writing), the folder is removed on exit.
    It makes the cache folder (a one-line CacheWriteError if it cannot) and, on exit, removes this
    process's temp files there and the folder itself if a failed first build left it empty."""
    import fcntl
    partial = folder + ".partial"
    deadline, said = time.monotonic() + WAIT_S, False
    while True:
        path = os.path.join(partial, "lock")
        try:
            os.makedirs(partial, exist_ok=True)
            f = open(path, "a")
        except FileNotFoundError:
            continue  # removed between the two calls by a build that just finished
        except OSError as e:
            raise write_failed(folder, e) from e
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            if time.monotonic() > deadline:
                raise sources.DataUnavailable(f"another process is building this cache ({partial}) and has not "
                                              f"finished after {WAIT_S:g} s of waiting; wait for it, or stop it") from None
            if not said:  # the two cells of a notebook, or two commands, that need one cache at once
                print(f"data.py: another process is building this cache ({partial}): waiting for it (at most "
                      f"{WAIT_S:g} s)", file=sys.stderr, flush=True)
                said = True
            time.sleep(0.2)
            continue  # the partial folder may be gone: the finished build removed it
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        f.close()  # a finished build removed the file we locked: lock the one there now
    created = not os.path.isdir(folder)
    try:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise write_failed(folder, e) from e
        remove_temps(partial, stale=True)
        yield partial
    finally:
        remove_temps(folder, stale=False)  # whatever this build left: nothing on success
        if created and os.path.isdir(folder) and not os.listdir(folder):  # a failed first build: no empty folder
            os.rmdir(folder)
        if os.path.isdir(partial) and os.listdir(partial) == ["lock"]:
            shutil.rmtree(partial, ignore_errors=True)
        f.close()

def carve(encoded, start=0):
    """Route the encoded documents (token id arrays, each ending in its separator) of a carved
    source to 'train' / 'val': returns (iterator of (split, ids), rule), rule a line for meta.json.

    VAL_EVERY documents or more: document i is val iff i % VAL_EVERY == 0. Fewer (known after
    reading VAL_EVERY documents at most): val is the last tenth of the tokens, at least one,
    cut mid-document if need be, so a single document does not end up all in val.
    start > 0: `encoded` begins at document `start` of a source known to have VAL_EVERY
    documents or more (a resumed build)."""
    head = list(itertools.islice(encoded, 0 if start else VAL_EVERY))
    if start or len(head) >= VAL_EVERY:
        pieces = (("val" if i % VAL_EVERY == 0 else "train", ids)
                  for i, ids in enumerate(itertools.chain(head, encoded), start))
        return pieces, f"document i in val iff i % {VAL_EVERY} == 0"
    total = sum(len(ids) for ids in head)
    cut = total - math.ceil(total / VAL_EVERY)  # first val token
    train, val, pos = [], [], 0
    for ids in head:
        k = min(max(cut - pos, 0), len(ids))  # tokens of this document before the cut
        if k > 0:
            train.append(("train", ids[:k]))
        if k < len(ids):
            val.append(("val", ids[k:]))
        pos += len(ids)
    rule = f"fewer than {VAL_EVERY} documents: val = the last 1/{VAL_EVERY} of the tokens"
    return iter(val + train), rule  # val first: a max_tokens cap on train cannot starve it


class Writer:
    """The split files of a build, <folder>.partial/<split>.bin, that token ids are appended to.

    identity: what the build makes (cache key, tokenizer, streams, val rule, format); it keys the
    manifest, and identity['streams'][j] = dict(hf_split, carve, stop, caps) says what stream j
    writes. Opened, a writer takes up the state a manifest of the same identity records (the
    stream reached, the documents read in it, per split its tokens, documents and largest id),
    cutting each .bin back to it, or starts afresh; `state` is that, kept up to date. Use it as
    `with Writer(...) as w:`, the caller holding building(folder): a block left without an error
    closes the files, where a full disk can still fail (a CacheWriteError)."""

    def __init__(self, folder, identity, shard_tokens=SHARD_TOKENS, progress=PROGRESS_EVERY, documents=None):
        self.folder, self.partial = folder, folder + ".partial"
        self.identity = json.loads(json.dumps(identity))  # as manifest.json holds it
        self.shard_tokens, self.progress = shard_tokens, progress or 0
        self.documents = documents  # the source's total, for the ETA (None: unknown)
        splits = sorted({s for stream in self.identity["streams"] for s in stream["caps"]})
        state = _read_manifest(self.partial, self.identity)
        done = 0 if state is None else sum(i["tokens"] for i in state["splits"].values())
        if done:
            print(f"data.py: resuming the build in {self.partial}: {done:,} tokens are already written",
                  file=sys.stderr, flush=True)
        else:
            state = dict(stream=0, documents=0, rule=None,
                         splits={s: dict(tokens=0, documents=0, max_id=0) for s in splits})
        self.state, self.out = state, {}
        try:
            for s in splits:
                path = os.path.join(self.partial, f"{s}.bin")
                with open(path, "ab"):  # create if missing, then cut to the recorded state
                    pass
                os.truncate(path, 2 * state["splits"][s]["tokens"])
                self.out[s] = open(path, "ab")
        except OSError as e:
            self._close()
            raise write_failed(folder, e) from e

    def __enter__(self):
        return self

    def __exit__(self, error, *_):
        try:
            if error is None:
                for f in self.out.values():
                    try:
                        f.close()  # buffered bytes are written here: a full disk can fail now
                    except OSError as e:
                        raise write_failed(self.folder, e) from e
        finally:  # after an error (or a failed close): close the rest, quietly
            self._close()

    def _close(self):
        for f in self.out.values():
            try:
                f.close()
            except OSError:
                pass

    def write(self, j, encoded):
        """Append stream j's documents, uint16 ids in document order, to the split files: a hub split's
        to its split, a carved stream's routed by carve (its rule, a line for meta.json, kept in state).
        A stream resumed mid-way gets the documents after those `state` says it read. Caps: caps[split] max tokens (None:
        all), a piece cut to fit; a full 'val' overflows into 'train'; the stream ends when its
        stop split is full or its pieces run out. Every shard_tokens tokens (at a document
        boundary) and at the end, the files are flushed and the state recorded (_checkpoint)."""
        stream, state = self.identity["streams"][j], self.state
        stats, caps, stop = state["splits"], stream["caps"], stream["stop"]
        if stream["carve"]:
            pieces, rule = carve(encoded, start=state["documents"])
        else:
            pieces, rule = ((stop, ids) for ids in encoded), "hub split"
        label = f"{os.path.basename(self.folder)} {'train+val' if stream['carve'] else stop}"
        meter = _Progress(label, self.progress, caps[stop], self.documents, enabled=self.progress > 0)
        # documents map 1:1 to pieces, except under carve's few-documents rule (never checkpointed)
        resumable = not stream["carve"] or rule.startswith("document i")
        state["rule"] = state["rule"] or rule
        since = 0  # tokens written since the last checkpoint
        for split, ids in pieces:
            if caps[split] is not None and stats[split]["tokens"] >= caps[split]:
                split = "train"  # only 'val' can be full here: its overflow feeds 'train'
            room = caps[split] - stats[split]["tokens"] if caps[split] is not None else len(ids)
            ids = ids[:room]
            try:
                self.out[split].write(ids.tobytes())
            except OSError as e:
                raise write_failed(self.folder, e) from e
            info = stats[split]
            info["tokens"] += len(ids)
            info["documents"] += 1
            info["max_id"] = max(info["max_id"], int(ids.max()) if len(ids) else 0)
            state["documents"] += 1
            since += len(ids)
            meter.update(state["documents"], stats[stop]["tokens"])
            if caps[stop] is not None and stats[stop]["tokens"] >= caps[stop]:
                break
            if resumable and since >= self.shard_tokens:
                self._checkpoint()
                since = 0
        meter.update(state["documents"], stats[stop]["tokens"], last=True)
        state.update(stream=j + 1, documents=0)
        self._checkpoint()

    def _checkpoint(self):
        """Flush the .bin files to disk, then record the state in manifest.json (temp file + rename)."""
        path = os.path.join(self.partial, "manifest.json")
        try:
            for f in self.out.values():
                f.flush()
                os.fsync(f.fileno())
            os.replace(json_tmp(path, dict(identity=self.identity, state=self.state)), path)
        except OSError as e:
            raise write_failed(self.folder, e) from e

    def commit(self, meta):
        """Swap the finished <partial>/<split>.bin files and meta in, then remove the partial build.

        The new meta.json is written as a temp file first (the last write that needs disk space;
        if it fails nothing has been touched). Then the old meta.json is withdrawn, the .bin files
        renamed over the old ones and the new meta.json renamed in: a crash between these renames
        leaves no meta.json, which reads as 'not built' and is rebuilt, never as a finished
        cache with the wrong files."""
        path = os.path.join(self.folder, "meta.json")
        try:
            meta_tmp = json_tmp(path, meta)
        except OSError as e:
            raise write_failed(self.folder, e) from e
        _remove(path)
        for s in self.state["splits"]:
            os.replace(os.path.join(self.partial, f"{s}.bin"), os.path.join(self.folder, f"{s}.bin"))
        os.replace(meta_tmp, path)
        shutil.rmtree(self.partial, ignore_errors=True)


def kept_tokens(partial):
    """Tokens a partial build has recorded in its manifest (0: nothing worth keeping)."""
    try:
        with open(os.path.join(partial, "manifest.json")) as f:
            return sum(i["tokens"] for i in json.load(f)["state"]["splits"].values())
    except (OSError, ValueError, KeyError):
        return 0

"""The run folder: its --out_dir checked before anything is written, checkpoints written
atomically and read back with clear errors, the lock that keeps two runs out of one folder, RNG
states, and the metrics.jsonl records (read back; rewritten on resume).

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) trains its 130M SPEN for 8B tokens on one
GPU; a run that long must survive a crash, a full disk, a Ctrl-C or a second run started in
the same folder by mistake. train.py uses everything here; sample.py, ablate.py and
content.py load models with `load_model`.

A checkpoint (`ckpt_last.pt`, `ckpt_best.pt`) is a dict of tensors and plain types, loadable
with torch.load(weights_only=True):
    model       the uncompiled module's state_dict
    kind        'spen' | 'gpt'          config   asdict(model.config): Model(Config(**config))
    train       asdict(TrainConfig)     step     optimizer steps done = the data position
    optimizer, best_val, val_loss, rng (torch, cuda, numpy, python states)

Guarantees (each tested in tests/test_train.py; a SIGKILL loop in tests/test_kill.py and
dev/kill_loop.py, 20 kills)
    - a write goes to PATH.tmp<pid>, is fsynced, and is renamed over PATH only when complete; a
      failed write removes the temp file and leaves the previous PATH as it was; a full or
      read-only disk (ENOSPC, EDQUOT, EROFS; torch's "file write failed") is one CheckpointError
      line, any other error propagates as raised, with its traceback. The same holds for the
      lines appended to log.txt and metrics.jsonl: refused, one line, and the lines before kept;
    - killed (kill -9, a preempted node) at any moment, a run resumes exactly: a step's record is
      written and fsynced BEFORE any checkpoint that claims the step (`RunFolder.save` makes
      metrics.jsonl durable first), and --resume keeps the records up to ckpt_last's step and
      recomputes the rest bit-identically (`kept_metrics`). So every step a checkpoint claims has
      its record and none comes twice (killed between the two, ckpt_best can be one evaluation
      ahead of ckpt_last: the resumed run rewrites it identically). Chosen over a checkpoint that
      carries its records: each write stays one atomic act (a line appended, a file renamed) and
      resume only truncates. A fresh start removes the old checkpoints before the records;
    - a killed write leaves NAME.tmp<pid> (NAME one of RUN_FILES); the next RunFolder in that
      folder removes every one once it holds the lock (no other writer is alive then);
    - run.json (written at a fresh start) names the model the folder trains (kind and config);
      `check_run` refuses, in one line, a checkpoint of another model there, and in a folder
      without run.json (made before it existed) one of another model than the flags ask for;
    - a missing, corrupt, foreign or mismatched file is one CheckpointError line;
    - an --out_dir that is a file, lies inside a file or cannot be written is one line
      (check_out_dir, the check every command shares), before anything is written;
    - `run_lock` holds an flock on OUT_DIR/.lock for the life of the run: a second run in the
      folder is refused while the first lives; the kernel drops the lock when a process dies,
      so a killed run's folder is free at once (no stale lock to clean); it never follows a link
      and writes only a file that holds a lock's text (anything else there is one line, left as it was);
    - `kept_metrics` keeps the records up to the resumed step (a record past it, written before
      its checkpoint was, is recomputed identically by the resumed run) and skips a partial last
      line (a crash mid-write); the rewrite is atomic.

Output folders: `make_out_dir(cfg.out_dir)` is the first thing each command does, before any
training: an existing file, a path inside a file, a read-only or uncreatable folder is one
cli.ConfigError line naming the flag (`check_out_dir` alone leaves nothing behind: train.py and
content.py call it before they read any input, and create their folder once the inputs are good).

Run: nothing to run; see train.py.
"""

import errno
import fcntl
import hashlib
import json
import os
import random
import re
import stat
import sys
import tempfile
from contextlib import contextmanager

import numpy as np
import torch

from plumbing import cli, records
from plumbing.records import read_jsonl  # a run folder's .jsonl records, checked (scaling.py reads it from here)
from gpt import GPT, GPTConfig
from spen import SPEN, SPENConfig

MODELS = {"spen": (SPENConfig, SPEN), "gpt": (GPTConfig, GPT)}


METADATA = dict(model=records.Each(torch.Tensor), kind=str, config=dict, train=dict, step=records.STEP,
                best_val=records.Opt(records.Range(float, 0)), val_loss=records.Opt(float),
                pending=records.Opt((dict, records.NULL)), optimizer=records.Opt(dict), digest=records.Opt(str))
# what a checkpoint holds, as read back (best_val is inf, val_loss NaN, before the first evaluation; a checkpoint
# from before the digest has none)


class CheckpointError(cli.UserError):
    """A checkpoint cannot be read or written; the message is one line saying what to do."""


def check_out_dir(out_dir, flag="--out_dir"):
    """A one-line cli.ConfigError unless out_dir is a folder this process can write in, or can
    be created as one. It tries: an empty folder is made in the deepest existing part of the path
    and removed at once, so a read-only mount or a pseudo-filesystem is caught and nothing stays."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise cli.ConfigError(f"{flag} {out_dir} is a file; name a folder (it is created if missing)")
    parent = os.path.abspath(out_dir)
    while not os.path.exists(parent):  # the deepest part of the path that is there
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise cli.ConfigError(f"{flag} {out_dir} lies inside the file {parent}; name a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=parent))
    except OSError as e:
        raise cli.ConfigError(f"{flag} {out_dir}: {parent} is not writable ({e.strerror}); name a folder you "
                              f"can write in") from None


def make_out_dir(out_dir, flag="--out_dir"):
    """check_out_dir, then create the folder; what the check cannot foresee is one line too."""
    check_out_dir(out_dir, flag)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise cli.ConfigError(f"{flag} {out_dir}: cannot create it ({e.strerror}); name another folder") from None
    return out_dir


def _one_line(e):
    return " ".join(str(e).split())[:300] or type(e).__name__


RUN_FILES = ("ckpt_last.pt", "ckpt_best.pt", "metrics.jsonl", "eval.json", "run.json")  # what a RunFolder writes
TEMP = re.compile(r"({})\.tmp\d+".format("|".join(map(re.escape, RUN_FILES))))  # their temp files: NAME.tmp<pid>
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # full, over quota, read-only
TORCH_WRITE_FAILED = re.compile(r"file write failed|unexpected pos \d+ vs \d+")  # torch.save's words for them


def disk_error(e):
    """Does e mean the disk is full or read-only? An OSError with one of DISK_ERRNOS, or torch.save's
    RuntimeError for a failed stream write (which carries no errno)."""
    if isinstance(e, OSError):
        return e.errno in DISK_ERRNOS
    return isinstance(e, RuntimeError) and TORCH_WRITE_FAILED.search(str(e)) is not None


def atomic_write(path, write, mode="w"):
    """write(f) into a temp file opened with `mode` ("w": UTF-8 text, "wb": bytes), flushed and fsynced,
    then renamed over path and the folder fsynced. On any failure the temp file is removed and path is
    untouched; a full or read-only disk becomes a one-line CheckpointError naming the file, anything
    else (a bug) propagates as it was raised."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, mode, **({} if "b" in mode else dict(encoding="utf-8"))) as f:
            write(f)
            durable(f)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.remove(tmp)
        except OSError:
            pass  # never created, or the disk refuses even that: the next RunFolder removes it
        if disk_error(e):
            raise disk_full(path, e, "the previous file, if any, is unchanged") from None
        raise
    try:  # the rename survives a power cut (best effort: not every file system can fsync a folder)
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def disk_full(path, e, kept):
    """The one-line CheckpointError for a full or read-only disk (disk_error(e)) met writing path;
    kept says what of path is still as it was."""
    return CheckpointError(f"could not write {path} ({_one_line(e)}); {kept}: free disk space (or make the "
                           f"disk writable), then run the same command again (train.py: with --resume; a grid "
                           f"keeps its finished runs)")


@contextmanager
def refused_if_full(path):
    """Inside, appending lines to path: an OSError of a full or read-only disk (disk_error) becomes
    one CheckpointError line; any other error propagates as it was raised."""
    try:
        yield
    except OSError as e:
        if disk_error(e):
            raise disk_full(path, e, "the lines written before are kept") from None
        raise


def close_appended(f):
    """Close f, opened by RunFolder.open_appending. A disk error here is that of a write already
    refused (each line leaves the line buffer as it is written; the close retries only what a failed
    write kept there), so it is dropped: its one line is on its way."""
    try:
        f.close()
    except OSError as e:
        if not disk_error(e):
            raise


def durable(f):
    """Flush the open file f and fsync it: what was written is on the disk, not only in memory."""
    f.flush()
    os.fsync(f.fileno())


def atomic_save(obj, path):
    atomic_write(path, lambda f: torch.save(obj, f), "wb")  # through a Python file: a full disk is an OSError


def atomic_json(obj, path, indent=2):
    """json.dump through atomic_write; indent=None: one compact line (bulk data, e.g. scaling's windows.json)."""
    atomic_write(path, lambda f: json.dump(obj, f, indent=indent, separators=None if indent else (",", ":")))


def remove_stale_temps(out_dir):
    """Remove the temp files (NAME.tmp<pid>) of RUN_FILES in out_dir -> [(name, bytes)]. Call it only
    while holding out_dir's run_lock: no other writer is alive, so each is a dead process's half-written
    file (our own pid's too: a restarted container can hand out the same pid again)."""
    removed = []
    for name in sorted(os.listdir(out_dir)):
        if TEMP.fullmatch(name):
            path = os.path.join(out_dir, name)
            size = os.path.getsize(path)
            os.remove(path)
            removed.append((name, size))
    return removed


_kept = {}  # {file stamp: checkpoint} held by load(keep=True) for the next load of that file


def load(path, keep=False):
    """torch.load a train.py checkpoint (tensors and plain types only), validated. keep: hold it
    for the next load of this file, if unchanged (train.py reads a checkpoint's settings, then the
    run its weights and optimizer: one read of a file that can be gigabytes)."""
    if os.path.isdir(path):
        found = sorted(n for n in os.listdir(path) if n.endswith(".pt"))
        raise CheckpointError(f"{path} is a folder, not a checkpoint file; " + (
            f"name one of its checkpoints: {', '.join(os.path.join(path, n) for n in found)}" if found else
            "it holds no .pt checkpoint: train first (train.py --out_dir FOLDER writes ckpt_best.pt there)"))
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path} not found; train first or pass the right path")
    st = os.stat(path)
    stamp = (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)  # a rewrite is a new file
    if stamp in _kept:
        return _kept.pop(stamp)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or not a train.py checkpoint "
                              f"({type(e).__name__}); delete it or point to another one") from None
    missing = [k for k in ("model", "kind", "config", "train", "step") if not isinstance(ckpt, dict) or k not in ckpt]
    if missing or ckpt.get("kind") not in MODELS:
        raise CheckpointError(f"checkpoint {path} is not a train.py checkpoint of this version "
                              f"(missing {missing or 'a known model kind'}); train a new one")
    wrong = records.shape_error(ckpt, METADATA, "its metadata") or weights_error(ckpt["model"], ckpt.get("digest"))
    if wrong:
        raise CheckpointError(f"checkpoint {path} is damaged ({wrong}); delete it or point to another one")
    _kept.clear()
    if keep:
        _kept[stamp] = ckpt
    return ckpt


def digest(weights):
    """The sha256 of a state_dict (each tensor's name, dtype, shape and bytes, in order): a checkpoint stores
    it beside its weights, and `load` refuses weights whose bytes changed on disk."""
    h = hashlib.sha256()
    for name, t in weights.items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name} {t.dtype} {tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def weights_error(weights, saved_digest=None):
    """What is wrong with a checkpoint's weights, in words, or None: bytes that differ from the digest saved
    with them (a checkpoint from before the digest has none to compare), or a weight that is not finite."""
    if saved_digest is not None and digest(weights) != saved_digest:
        return "its weights differ from the digest saved with them: bytes changed on disk"
    bad = next((k for k, t in weights.items() if t.is_floating_point() and not torch.isfinite(t).all()), None)
    return bad and f"its weight {bad} is not finite"


def build(ckpt, path):
    """The model a checkpoint describes, with its weights (one-line error on a mismatch)."""
    Config, Model = MODELS[ckpt["kind"]]
    try:
        model = Model(Config(**ckpt["config"]))
        model.load_state_dict(ckpt["model"])
    except (TypeError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} does not match this code's {ckpt['kind']} model: "
                              f"{_one_line(e)}") from None
    return model


def load_model(path, device="cpu"):
    """(model in eval mode on device, checkpoint dict) from a train.py checkpoint file."""
    ckpt = load(path)
    return build(ckpt, path).to(device).eval(), ckpt


def identity(kind, config):
    """What a run folder's run.json holds: the model kind and its config, as JSON reads it back."""
    return {"kind": kind, "config": json.loads(json.dumps(config))}


RESUME_MAY_CHANGE = ("block_size", "trace_method")  # the windows a run reads; how its traces run (same numbers)


def check_run(out_dir, ckpt, path, asked):
    """Refuse, in one line, a checkpoint whose model is not the one out_dir trains: the model its
    run.json names, or in a folder without one (made before run.json existed) the model the flags
    ask for, asked = identity(kind, config), but for the settings a resume may change."""
    run_json = os.path.join(out_dir, "run.json")
    try:
        with open(run_json) as f:
            run = json.load(f)
        whose, source, advice = "this folder's run", f"says {run_json}", "--resume it in a folder of its own"
    except FileNotFoundError:
        run = dict(asked, config={k: v for k, v in asked["config"].items() if k not in RESUME_MAY_CHANGE})
        whose, source = "the flags ask for", f"{out_dir} has no run.json: the flags name its model"
        advice = "give --resume the flags it was trained with (its log.txt's config line)"
    except ValueError:
        run = None
    if not (isinstance(run, dict) and isinstance(run.get("kind"), str) and isinstance(run.get("config"), dict)):
        raise CheckpointError(f"{run_json} is corrupt (not the kind and config of a model); delete it if {path} "
                              f"is this folder's run, then run again with that run's flags") from None
    got = identity(ckpt["kind"], ckpt["config"])
    if got["kind"] != run["kind"]:
        differs = [f"model {got['kind']} ({whose}: {run['kind']})"]
    else:
        differs = [f"{k} {got['config'].get(k)} ({whose}: {v})" for k, v in run["config"].items()
                   if got["config"].get(k) != v]
    if differs:
        raise CheckpointError(f"{path} is not this folder's run: {', '.join(differs)} ({source}); to continue that "
                              f"run, {advice}; to fine-tune from it, start a new --out_dir with --init_from {path}")


def rng_state():
    """Every random stream as tensors and plain types (loadable with weights_only=True)."""
    npst = np.random.get_state()
    pyst = random.getstate()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [npst[0], torch.from_numpy(npst[1].astype(np.int64)), *npst[2:]],
            "python": [pyst[0], list(pyst[1]), pyst[2]]}


def set_rng_state(st):
    torch.set_rng_state(st["torch"].cpu())
    if st["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in st["cuda"]])
    n = st["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), *n[2:]))
    random.setstate((st["python"][0], tuple(st["python"][1]), st["python"][2]))


class LockHeld(CheckpointError):
    """Another live process holds the folder's lock."""


LOCK_TEXT = re.compile(rb"\s*(\d+(, [^\n]*)?)?\s*")  # what a lock holds: "PID, COMMAND" (earlier: "PID"), or nothing


@contextmanager
def run_lock(out_dir):
    """An exclusive flock on OUT_DIR/.lock, held inside. The file is opened without following a link
    (O_NOFOLLOW), and only a regular file of one name that holds a lock's text (LOCK_TEXT) is truncated
    and written: a .lock that is a link, a FIFO, a hard link to another file or a file of other text is
    one line, and the file is left as it was."""
    path = os.path.join(out_dir, ".lock")
    try:  # O_NONBLOCK: a FIFO in its place does not hang the open
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:  # a link, a folder in its place, a read-only or full disk: one line
        raise lock_refused(path, e) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            raise LockHeld(f"{out_dir} is in use by a running command (pid {holder}); wait for it to finish or "
                           f"choose another --out_dir") from None
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and LOCK_TEXT.fullmatch(os.pread(fd, 4096, 0))):
                raise CheckpointError(f"{path} is not a lock file a command of this project made ("
                                      + ("a hard link to another file" if stat.S_ISREG(st.st_mode) and st.st_nlink > 1
                                         else "it holds other text" if stat.S_ISREG(st.st_mode) else "not a regular "
                                         "file") + "); it is left as it was: move it away or choose another --out_dir")
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}, {os.path.basename(sys.argv[0]) or 'python'}".encode())  # who holds it
        except OSError as e:  # a full disk: the lock is held, but the command could write nothing else either
            raise lock_refused(path, e) from None
        yield
    finally:
        os.close(fd)  # closing drops the flock; the file itself may stay


def lock_refused(path, e):
    """The one line for a lock file that cannot be made or written (e: the OSError)."""
    if os.path.islink(path):  # O_NOFOLLOW's ELOOP: the link and what it points to are left alone
        return CheckpointError(f"{path} is a symbolic link, where a command keeps its lock file; it is left as it "
                               f"was (and what it points to): move it away or choose another --out_dir")
    if os.path.isdir(path):
        return CheckpointError(f"{path} is a folder, where a command keeps its lock file: move it away or choose "
                               f"another --out_dir")
    return CheckpointError(f"cannot write the lock file {path} ({e.strerror or e}); free disk space (or make the "
                           f"folder writable), or choose another --out_dir")


class RunFolder:
    """A run's out_dir as rank 0 sees it: locked for the run's life (a dead run's temp files removed
    once the lock is ours), log.txt (appended, printed too), metrics.jsonl (one JSON record per line)
    and atomic checkpoints, each written after the records of the steps it claims are durable.
    On other DDP ranks every method does nothing. Files close with the ExitStack given."""

    def __init__(self, out_dir, master, stack):
        self.out_dir, self.master, self.stack, self.metrics = out_dir, master, stack, None
        if master:
            make_out_dir(out_dir)
            stack.enter_context(run_lock(out_dir))
            removed = remove_stale_temps(out_dir)  # the lock is ours: no live process writes them
            self.logf = self.open_appending("log.txt")
            if removed:
                self.log(f"removed {len(removed)} temporary file(s) a killed run left ({sum(b for _, b in removed):,} "
                         f"bytes): {', '.join(n for n, _ in removed)}")

    def path(self, name):
        return os.path.join(self.out_dir, name)

    def open_appending(self, name):
        """The run file `name` opened to append lines, line-buffered (each is written out whole as
        it comes), closed with the stack (close_appended)."""
        f = open(self.path(name), "a", buffering=1)
        self.stack.callback(close_appended, f)
        return f

    def log(self, msg):
        if self.master:
            print(msg, flush=True)
            with refused_if_full(self.path("log.txt")):
                self.logf.write(msg + "\n")

    def claim(self, kind, config, fresh):
        """run.json: the model this folder trains; written at a fresh start (a new run), or on resume
        in a folder that has none yet (one made before run.json existed)."""
        if self.master and (fresh or not os.path.exists(self.path("run.json"))):
            atomic_json(identity(kind, config), self.path("run.json"))

    def open_metrics(self, keep_upto):
        """Keep the records up to step keep_upto, then append to metrics.jsonl. keep_upto -1, a fresh
        start: the folder's checkpoints go first (step 0 would replace them), so that none outlives
        its records if this run dies before its first checkpoint, then its records (none is kept)."""
        if self.master:
            old = [n for n in ("ckpt_last.pt", "ckpt_best.pt") if keep_upto < 0 and os.path.exists(self.path(n))]
            for name in old:
                os.remove(self.path(name))
            if old:
                self.log(f"a fresh start (no --resume): removed the previous run's {' and '.join(old)}")
            if keep_upto >= 0:
                rewrite_metrics(self.path("metrics.jsonl"), keep_upto)
            elif os.path.exists(self.path("metrics.jsonl")):
                os.remove(self.path("metrics.jsonl"))
            self.metrics = self.open_appending("metrics.jsonl")

    def record(self, rec):
        if self.master:
            with refused_if_full(self.path("metrics.jsonl")):
                self.metrics.write(json.dumps(rec) + "\n")

    def save(self, name, obj):
        """Write checkpoint `name` atomically, after making every record written so far durable."""
        if self.master:
            if self.metrics is not None:
                with refused_if_full(self.path("metrics.jsonl")):
                    durable(self.metrics)
            atomic_save(obj, self.path(name))


def kept_metrics(path, step):
    """Lines of metrics.jsonl with record step <= step; a last line cut short is dropped, a damaged
    one (records.read_jsonl) is one line naming it."""
    recs = read_jsonl(path, records.METRICS, fix=f"fix or delete that line (records after step {step}, the "
                      "checkpoint's, are written again), or train the run anew in another --out_dir")
    return [json.dumps(rec) for rec in recs if rec["step"] <= step]


def rewrite_metrics(path, step):
    """Atomically keep only the records up to `step` (the resumed checkpoint's)."""
    lines = kept_metrics(path, step)
    atomic_write(path, lambda f: f.write("".join(ln + "\n" for ln in lines)))

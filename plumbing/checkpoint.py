"""The run folder: checkpoints written atomically and read back with clear errors, the lock
that keeps two runs out of one folder, RNG states, and the metrics.jsonl rewrite on resume.

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

Guarantees (each tested in tests/test_train.py)
    - a write goes to PATH.tmp<pid> and is renamed over PATH only when complete; a failed write
      (disk full) removes the temp file and leaves the previous PATH as it was;
    - a missing, corrupt, foreign or mismatched file is one CheckpointError line;
    - an --out_dir that is a file, lies inside a file or cannot be written is one line
      (runs.check_out_dir, the check every command shares), before anything is written;
    - `RunLock` holds an flock on OUT_DIR/.lock for the life of the run: a second run in the
      folder is refused while the first lives; the kernel drops the lock when a process dies,
      so a killed run's folder is free at once (no stale lock to clean);
    - `kept_metrics` keeps the records up to the resumed step and skips a partial last line
      (a crash mid-write); the rewrite is atomic.

Run: nothing to run; see train.py.
"""

import fcntl
import json
import os
import random

import numpy as np
import torch

from plumbing import cli, runs
from gpt import GPT, GPTConfig
from spen import SPEN, SPENConfig

MODELS = {"spen": (SPENConfig, SPEN), "gpt": (GPTConfig, GPT)}


class CheckpointError(cli.UserError):
    """A checkpoint cannot be read or written; the message is one line saying what to do."""


def _one_line(e):
    return " ".join(str(e).split())[:300] or type(e).__name__


def atomic_write(path, write):
    """write(tmp_path), then rename tmp over path. On any failure the temp file is removed and
    path is untouched; an OSError/RuntimeError becomes a CheckpointError naming the file."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, (OSError, RuntimeError)):  # torch.save reports a full disk as RuntimeError
            raise CheckpointError(f"could not write {path} ({_one_line(e)}); the previous file, if any, "
                                  f"is unchanged: free disk space, then run again with --resume") from None
        raise


def atomic_save(obj, path):
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def atomic_json(obj, path):
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)
    atomic_write(path, write)


def load(path):
    """torch.load a train.py checkpoint (tensors and plain types only), validated."""
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path} not found; train first or pass the right path")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or not a train.py checkpoint "
                              f"({type(e).__name__}); delete it or point to another one") from None
    missing = [k for k in ("model", "kind", "config", "train", "step") if not isinstance(ckpt, dict) or k not in ckpt]
    if missing or ckpt.get("kind") not in MODELS:
        raise CheckpointError(f"checkpoint {path} is not a train.py checkpoint of this version "
                              f"(missing {missing or 'a known model kind'}); train a new one")
    return ckpt


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


class RunLock:
    """An exclusive flock on OUT_DIR/.lock, held while the run lives (a context manager)."""

    def __init__(self, out_dir):
        self.path = os.path.join(out_dir, ".lock")
        self.fd = None

    def __enter__(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CheckpointError(f"{os.path.dirname(self.path)} is in use by a running train.py (pid {holder}); "
                                  f"wait for it to finish or choose another --out_dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing drops the flock; the file itself may stay


class RunFolder:
    """A run's out_dir as rank 0 sees it: locked for the run's life, log.txt (appended, printed
    too), metrics.jsonl (one JSON record per line, on disk at once) and atomic checkpoints.
    On other DDP ranks every method does nothing. Files close with the ExitStack given."""

    def __init__(self, out_dir, master, stack):
        self.out_dir, self.master, self.stack, self.metrics = out_dir, master, stack, None
        if master:
            runs.make_out_dir(out_dir)
            stack.enter_context(RunLock(out_dir))
            self.logf = stack.enter_context(open(self.path("log.txt"), "a", buffering=1))

    def path(self, name):
        return os.path.join(self.out_dir, name)

    def log(self, msg):
        if self.master:
            print(msg, flush=True)
            self.logf.write(msg + "\n")

    def open_metrics(self, keep_upto):
        """Keep the records up to step keep_upto (-1: none), then append to metrics.jsonl."""
        if self.master:
            rewrite_metrics(self.path("metrics.jsonl"), keep_upto)
            self.metrics = self.stack.enter_context(open(self.path("metrics.jsonl"), "a", buffering=1))

    def record(self, rec):
        if self.master:
            self.metrics.write(json.dumps(rec) + "\n")

    def save(self, name, obj):
        if self.master:
            atomic_save(obj, self.path(name))


def kept_metrics(path, step):
    """Lines of metrics.jsonl with record step <= step; a partial or broken line is dropped."""
    kept = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if rec.get("step", step + 1) <= step:
                    kept.append(json.dumps(rec))
    return kept


def rewrite_metrics(path, step):
    """Atomically keep only the records up to `step` (the resumed checkpoint's)."""
    lines = kept_metrics(path, step)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write("".join(ln + "\n" for ln in lines))
    atomic_write(path, write)

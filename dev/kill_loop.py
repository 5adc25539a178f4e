"""SIGKILL a small train.py run at random moments, resume it each time, and check its folder.

After every kill: each step ckpt_last.pt claims has its metrics.jsonl record, no record appears
twice, every record (and ckpt_best.pt's loss) equals the uninterrupted run's; at the next start
the temporary files the kill left are gone. At the end: no temporary file, and the records, the
final validation loss and the weights equal the uninterrupted run's, bit for bit (one thread).

    python -m dev.kill_loop --kills 20 | tee results/train_cpu/kill_loop.log

Where the kills fall: `kills` steps drawn uniformly from 0..max_iters-1, sorted, so they spread
over the whole run; life i is killed a uniformly random 0-1.5 steps' time (at its own pace) after
step k_i's log line, or, when it starts at k_i or past it, after it holds the folder (its first
log line: lock taken, stale temporary files removed). Every --aim_every-th kill is aimed instead,
at the moment a temporary file (NAME.tmp<pid>) shows, in turn of ckpt_best.pt and ckpt_last.pt
after step k_i's line (in the middle of a checkpoint write: after its step's record, before its
rename) and of metrics.jsonl as the life starts (resume's rewrite). A kill while Python and torch
load would test nothing, so none falls there. tests/test_kill.py runs this loop with 4 kills,
forking the test process instead of starting an interpreter per life.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line
cli.exit_on_ctrl_c(__name__, "dev/kill_loop.py")  # until main_guard; torch takes seconds to import
import torch

from plumbing import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root: lives run train.py there

ARGS = ["--preset", "cpu_bytes", "--device", "cpu", "--n_layer", "1", "--n_embd", "32", "--block_size", "32",
        "--batch_size", "4", "--eval_interval", "5", "--eval_iters", "2", "--log_interval", "1", "--max_iters", "40"]
STEP_LINE = re.compile(r"^step +(\d+) \| loss", re.M)  # train.py's log line of a finished step
TIMING = ("ms",)  # the one field of a record that differs between two runs of the same steps
AIMS = ("ckpt_best.pt", "ckpt_last.pt", "metrics.jsonl")  # the writes aimed kills land in, in turn


def records(out):
    """metrics.jsonl as records (a partial last line, a kill mid-write, skipped)."""
    recs = []
    if os.path.exists(os.path.join(out, "metrics.jsonl")):
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    return recs


def numbers(rec):
    return {k: v for k, v in rec.items() if k not in TIMING}


def temps(out):
    return sorted(n for n in os.listdir(out) if checkpoint.TEMP.fullmatch(n)) if os.path.isdir(out) else []


def ckpt(out, name="ckpt_last.pt"):
    path = os.path.join(out, name)
    return torch.load(path, weights_only=True) if os.path.exists(path) else None


def log_size(out):
    path = os.path.join(out, "log.txt")
    return os.path.getsize(path) if os.path.exists(path) else 0


class Subprocess:
    """A life as a fresh interpreter: `python train.py ARGS`, one thread."""

    def __init__(self, argv):
        self.p = subprocess.Popen([sys.executable, "train.py", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})

    def poll(self):
        return self.p.poll()

    def kill(self):
        self.p.send_signal(signal.SIGKILL)

    def wait(self):
        return self.p.wait()


class Watch:
    """A life's progress: its last step logged past `offset` of log.txt (polled every 2 ms), and
    its pace, the seconds per step between the first and the last step seen."""

    def __init__(self, life, out, offset, deadline):
        self.life, self.out, self.offset, self.deadline, self.seen = life, out, offset, deadline, {}

    def alive(self):
        if time.time() > self.deadline:
            self.life.kill()
            raise TimeoutError(f"the kill loop in {self.out} ran past its deadline")
        return self.life.poll() is None

    def last_step(self):
        if log_size(self.out) <= self.offset:
            return -1
        with open(os.path.join(self.out, "log.txt"), "rb") as f:
            f.seek(self.offset)
            found = STEP_LINE.findall(f.read().decode(errors="replace"))
        return int(found[-1]) if found else -1

    def until(self, step):
        """Wait until step's log line is there -> True, or False if the life ended first."""
        while self.alive():
            last = self.last_step()
            if last >= 0:
                self.seen.setdefault(last, time.time())
            if last >= step:
                return True
            time.sleep(0.002)
        return False

    def temp_file(self, name, by_step):
        """Wait (polling every 0.3 ms) until a temporary file of `name` shows in the folder -> True;
        False once step by_step is logged, or the life ended, without one."""
        while self.alive():
            if any(t.startswith(name + ".tmp") for t in temps(self.out)):
                return True
            if self.last_step() >= by_step:
                return False
            time.sleep(0.0003)
        return False

    def pace(self, default):
        if len(self.seen) < 2 or max(self.seen) - min(self.seen) < 3:
            return default
        return (self.seen[max(self.seen)] - self.seen[min(self.seen)]) / (max(self.seen) - min(self.seen))


def uninterrupted(out, launch, max_iters, deadline):
    """The reference run -> (records by step, ckpt_last, ckpt_best, seconds per step, evaluations included)."""
    shutil.rmtree(out, ignore_errors=True)
    life = launch(ARGS + ["--out_dir", out])
    watch = Watch(life, out, 0, deadline)
    watch.until(max_iters)
    assert life.wait() == 0, "the uninterrupted run failed"
    return ({r["step"]: numbers(r) for r in records(out)}, ckpt(out), ckpt(out, "ckpt_best.pt"),
            watch.pace(default=0.02))


def check(out, ref):
    """The folder of a killed run -> (steps ckpt_last claims without a record, steps recorded twice,
    steps whose record, or ckpt_best's loss, differs from the uninterrupted run's)."""
    recs = records(out)
    steps = [r["step"] for r in recs]
    last, best = ckpt(out), ckpt(out, "ckpt_best.pt")
    claimed = -1 if last is None else last["step"]
    missing = [s for s in range(claimed + 1) if s not in steps]
    duplicated = sorted({s for s in steps if steps.count(s) > 1})
    wrong = [r["step"] for r in recs if numbers(r) != ref.get(r["step"])]
    if best is not None and best["val_loss"] != ref[best["step"]].get("val_loss"):
        wrong.append(f"ckpt_best at {best['step']}")
    return missing, duplicated, wrong


def kill_loop(out, kills, rng, launch=Subprocess, say=print, aim_every=3, timeout=1800):
    """The uninterrupted run in out + '-straight', then the killed one in out -> a summary dict."""
    t0 = time.time()
    deadline = t0 + timeout
    max_iters = int(ARGS[ARGS.index("--max_iters") + 1])
    ref, ref_last, ref_best, pace = uninterrupted(out + "-straight", launch, max_iters, deadline)
    say(f"uninterrupted: {len(ref)} records, final val loss {ref_last['val_loss']!r}, {pace:.3f} s per step")
    shutil.rmtree(out, ignore_errors=True)
    plan = sorted(rng.randrange(max_iters) for _ in range(kills))
    tally = dict(kills=0, aimed=0, missing=0, duplicated=0, wrong=0, kills_between_a_record_and_its_checkpoint=0,
                 temps_left=0, temps_surviving_a_start=0)
    left = []  # the temporary files the last kill left
    while True:
        last = ckpt(out)
        first = 0 if last is None else last["step"]
        offset = log_size(out)
        life = launch(ARGS + ["--out_dir", out] + ([] if last is None else ["--resume"]))
        watch, k = Watch(life, out, offset, deadline), (plan + [max_iters])[tally["kills"]]
        while watch.alive() and log_size(out) == offset:
            time.sleep(0.002)  # until this life holds the folder (its first log line)
        survived = sorted(set(left) & set(temps(out)))  # the previous kill's, after this start
        tally["temps_surviving_a_start"] += len(survived)
        if tally["kills"] == kills or first >= max_iters:
            watch.until(max_iters)
            break  # the last life: it runs to the end
        aim = AIMS[tally["aimed"] % len(AIMS)] if (tally["kills"] + 1) % aim_every == 0 else None
        if k > first and aim != "metrics.jsonl" and not watch.until(k):
            break  # it ended before step k: an error (the exit status below says)
        aimed = aim is not None and watch.temp_file(aim, by_step=min(max(k, first) + 10, max_iters - 1))
        delay = 0 if aimed else rng.uniform(0, 1.5 * watch.pace(default=pace))
        time.sleep(delay)
        if life.poll() is not None:
            break  # finished within the delay (only possible after step max_iters - 1)
        life.kill()
        life.wait()
        tally["kills"] += 1
        missing, duplicated, wrong = check(out, ref)
        left, now, recs = temps(out), ckpt(out), records(out)
        between = any("val_loss" in r and r["step"] > (-1 if now is None else now["step"]) for r in recs)
        for key, n in (("aimed", aimed), ("missing", len(missing)), ("duplicated", len(duplicated)),
                       ("wrong", len(wrong)), ("kills_between_a_record_and_its_checkpoint", between),
                       ("temps_left", len(left))):
            tally[key] += int(n)
        when = (f"as a temporary {aim} showed" if aimed else f"{delay:.3f} s after " +
                ("holding the folder" if k <= first else f"step {k}'s log line"))
        began = "fresh start" if last is None else f"resumed at step {first}"
        say(f"kill {tally['kills']:2d}: {began:>18}, killed {when}; ckpt_last at step "
            f"{'-' if now is None else now['step']}, records to step {recs[-1]['step'] if recs else '-'}; "
            f"missing {missing}, duplicated {duplicated}, differing {wrong}; temporary files left: "
            f"{', '.join(left) or 'none'}" + (f"; survived the start: {survived}" if survived else ""))
    status = life.wait()
    assert status == 0, f"the last life exited with {status}"
    final, recs = ckpt(out), records(out)
    steps = [r["step"] for r in recs]
    best = ckpt(out, "ckpt_best.pt")
    tally.update(
        final_missing=len([s for s in ref if s not in steps]), final_duplicated=len(steps) - len(set(steps)),
        final_records_equal=[numbers(r) for r in recs] == [ref[s] for s in sorted(ref)],
        final_val_loss=final["val_loss"], uninterrupted_val_loss=ref_last["val_loss"],
        weights_equal=all(torch.equal(final["model"][k], ref_last["model"][k]) for k in ref_last["model"]),
        best_equal=best["step"] == ref_best["step"] and all(torch.equal(best["model"][k], ref_best["model"][k])
                                                            for k in ref_best["model"]),
        final_temps=len(temps(out)), seconds=round(time.time() - t0, 1))
    say(json.dumps(tally))
    return tally


def ok(t, kills):
    """Did the loop make its kills and find nothing wrong?"""
    return (t["kills"] == kills and t["final_records_equal"] and t["weights_equal"] and t["best_equal"]
            and t["final_val_loss"] == t["uninterrupted_val_loss"]
            and not any(t[k] for k in ("missing", "duplicated", "wrong", "temps_surviving_a_start", "final_missing",
                                       "final_duplicated", "final_temps")))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    p.add_argument("--aim_every", type=int, default=3, help="every N-th kill lands inside a checkpoint write")
    p.add_argument("--out_dir", default=None, help="the killed run; OUT_DIR-straight the reference (default: a "
                   "new temporary folder)")
    a = p.parse_args(argv)
    a.out_dir = a.out_dir or os.path.join(tempfile.mkdtemp(prefix="kill_loop-"), "run")
    checkpoint.check_out_dir(a.out_dir)  # a file, a read-only folder: one line before any life starts
    print(f"$ python -m dev.kill_loop --kills {a.kills} --seed {a.seed} --aim_every {a.aim_every}\n"
          f"each life: OMP_NUM_THREADS=1 python train.py {' '.join(ARGS)} --out_dir {a.out_dir} [--resume]\n"
          f"torch {torch.__version__}, {os.cpu_count()} CPUs", flush=True)
    t = kill_loop(a.out_dir, a.kills, random.Random(a.seed), say=lambda s: print(s, flush=True), aim_every=a.aim_every)
    print("OK" if ok(t, a.kills) else "FAILED")
    return 0 if ok(t, a.kills) else 1


if __name__ == "__main__":
    sys.exit(cli.main_guard(main, prog="dev/kill_loop.py"))

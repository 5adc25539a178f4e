"""The seeds of the map on text: each core model at several seeds, on one machine, two at a time.

The map's copy column cannot carry a verdict on one or two seeds (results/map: two seeds of one
model differ on copies by more than any ingredient's effect). Each (model, seed) here is one
scaling.py curve at the committed settings (width 128, 4 blocks, T = 256, 10M bytes of builtin,
constant lr 2e-3, every point scored on the whole validation split, a cooldown branch over the last
20%), in a folder of its own, OUT/<model>_s<seed>. The jobs run in PLAN's order (what the map needs
most first: gpt, delta and hybrid_ema_kv seed by seed, then delta_conv, then the gated models),
`--workers` at a time, each `OMP_NUM_THREADS=1 python scaling.py --models M --widths 128 --seed S
--out_dir OUT/M_sS` in a process of its own. An arm at another learning rate than scaling.py's is
M@LR (`delta@4e-3:0-2`), its folder OUT/M_lrLR_sS (`delta_lr0.004_s0`). scaling.py resumes: a
finished curve costs nothing, a stopped one continues from its last point, so the same command
continues after a stop (Ctrl-C, SIGTERM or SIGHUP: one line, each curve saved). A curve dies with
the driver even when the driver is killed outright (kill -9: Linux's parent-death signal, a
SIGTERM, so the curve still saves). Each finished curve prints one line (and appends it to
OUT/seeds.log) with its wall time.

Run (from the repository root)
    python -m dev.seeds --out_dir results/map/seeds            # the committed seeds (hours of CPU)
    python -m dev.seeds --plan delta:0-3 --out_dir out/seeds   # a subset: model:seeds, comma-separated
    python -m dev.seeds --out_dir results/map/screen --plan "$(python -m dev.seeds --print_plan screen)"
                                                               # the screening of results/map/PLAN.md
    python -m dev.map --out_dir results/map                    # then the map, with their statistics
    python -m dev.seeds --out_dir results/map/screen --plan "$(python -m dev.seeds --print_plan screen)" \
        --collect WORKTREE/results/map/screen                 # a campaign run in a worktree (a fixed commit):
                                                               # its finished curves' records into this checkout
"""

import argparse
import contextlib
import ctypes
import filecmp
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "dev.seeds")

from plumbing import checkpoint, registry

SETTINGS = ("--widths", "128")  # everything else: scaling.py's defaults, the committed settings
PLAN = ",".join([f"{m}:{s}" for s in range(6) for m in ("gpt", "delta", "hybrid_ema_kv")]
                + [f"delta_conv:{s}" for s in range(6)]
                + [f"{m}:{s}" for s in range(3) for m in ("gated_delta", "hybrid_gated_delta")])
# results/map/PLAN.md's screening, in its order: the baselines and H1, H2 seed by seed, then H3's rates, H4,
# delta_wide (H2's control); seeds 0-2 (the confirmation's are 100 on)
SCREEN = ",".join([f"{m}:{s}" for s in range(3) for m in ("gpt", "delta", "gated_delta", "gated_delta_ret",
                                                            "delta_k128_v32", "delta_k128_v64")]
                  + [f"{m}:{s}" for s in range(3) for m in ("delta@4e-3", "gpt@4e-3", "delta@1e-3", "gpt@1e-3")]
                  + [f"delta_product:{s}" for s in range(3)] + [f"delta_wide:{s}" for s in range(3)])
PLANS = {"map": PLAN, "screen": SCREEN}
ENTRY = re.compile(r"(\w+)(?:@([0-9.]+(?:e-?[0-9]+)?))?:([0-9]+)(?:-([0-9]+))?", re.ASCII)  # MODEL[@LR]:FIRST[-LAST]
MAX_SEEDS = 1000  # seeds one entry may name


def parse_plan(text):
    """'gpt:0-5,delta@4e-3:1' -> [(arm, seed), ...] in that order, an arm being a model of the
    registry or MODEL@LR (lr a positive number; the model's own name at scaling.py's rate); one
    line for a bad entry."""
    jobs = []
    for item in filter(None, text.split(",")):
        m = ENTRY.fullmatch(item.strip())
        cli.require(m and m[1] in registry.MODELS, "--plan entries are MODEL[@LR]:SEED or MODEL[@LR]:FIRST-LAST with a "
                    "model of {}, got {!r}", " ".join(registry.MODELS), item)
        lo, hi = int(m[3]), int(m[4] or m[3])
        cli.require(lo <= hi <= lo + MAX_SEEDS - 1, "--plan entry {!r} must run FIRST <= LAST, at most {} seeds",
                    item, MAX_SEEDS)
        cli.require(m[2] is None or 0 < float(m[2]) <= 10, "--plan entry {!r}: the learning rate must be in (0, 10]",
                    item)
        arm = m[1] if m[2] is None else f"{m[1]}@{float(m[2]):g}"
        jobs += [(arm, s) for s in range(lo, hi + 1)]
    cli.require(jobs and len(set(jobs)) == len(jobs), "--plan must name each (model, seed) once, got {}", text)
    return jobs


def split_arm(arm):
    """'delta@0.004' -> ('delta', 0.004); 'delta' -> ('delta', None): scaling.py's rate."""
    model, _, lr = arm.partition("@")
    return model, float(lr) if lr else None


def folder(arm, seed):
    """An arm's seed folder under OUT: <model>_s<seed>, or <model>_lr<lr>_s<seed> at its own rate."""
    model, lr = split_arm(arm)
    return f"{model}_s{seed}" if lr is None else f"{model}_lr{lr:g}_s{seed}"


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: scaling.py's folder


def command(arm, seed, out_dir):
    model, lr = split_arm(arm)
    return [sys.executable, "scaling.py", "--models", model, *SETTINGS, *(("--lr", f"{lr:g}") if lr else ()),
            "--seed", str(seed), "--out_dir", os.path.abspath(os.path.join(out_dir, folder(arm, seed)))]


def finished(out_dir, arm, seed):
    """Whether the arm's seed folder's scaling.json holds the finished curve (its last point and its
    cooldown's): on a fresh clone the run folders (checkpoints) are gone, and scaling.py would train
    the curve again; its record is what the map reads."""
    model = split_arm(arm)[0]
    path = os.path.join(out_dir, folder(arm, seed), "scaling.json")
    try:
        with open(path) as f:
            res = json.load(f)
        return done(res["curves"][f"{model}_c128"], res["settings"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return False  # none yet, or not finished: scaling.py continues it (and says so if it is damaged)


def done(curve, settings):
    """The one rule of a finished seed (this driver's and the map's, dev/map.py): the curve of a
    scaling.json reached its budget, with whole-split scores at its last point and its cooldown's end."""
    last = curve["points"][-1]
    return (last["tokens"] >= 0.99 * settings["max_tokens"] and any(s["step"] == last["step"] for s in curve["scores"])
            and bool((curve.get("cooldown") or {}).get("scores")))


RECORD = ("windows.json", "scaling.md", "scaling.png", "scaling.json")  # what the map reads and shows of a curve;
# scaling.json, which says the curve is finished, last


def collect(jobs, source, out_dir):
    """Copy each finished curve of the plan that is new or changed from a campaign's folder (its --out_dir,
    e.g. in the worktree of its fixed commit, where the runs and their checkpoints stay) into out_dir: its
    records (RECORD) and its log, and the campaign's seeds.log -> the (arm, seed) copied. A curve not
    finished there is left out; each file is copied whole or not at all (checkpoint.atomic_write)."""
    copied = []
    for arm, seed in jobs:
        name = folder(arm, seed)
        record = os.path.join(name, "scaling.json")
        if not finished(source, arm, seed) or (os.path.exists(os.path.join(out_dir, record)) and filecmp.cmp(
                os.path.join(source, record), os.path.join(out_dir, record), shallow=False)):
            continue
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        copy([*(os.path.join(name, f) for f in RECORD), name + ".log"], source, out_dir)
        copied.append((arm, seed))
    if copied:
        copy(["seeds.log"], source, out_dir)
    return copied


def copy(files, source, out_dir):
    """Each of files (paths under source) that exists to the same path under out_dir, in order."""
    for f in files:
        if os.path.exists(os.path.join(source, f)):
            with open(os.path.join(source, f), "rb") as src:
                checkpoint.atomic_write(os.path.join(out_dir, f), lambda dst: shutil.copyfileobj(src, dst), "wb")


def run(jobs, out_dir, workers):
    """Run the jobs `workers` at a time, in order; a job that fails stops the rest (its last lines shown)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    todo, running, t0 = list(jobs), {}, time.time()
    stops = (signal.SIGTERM, signal.SIGHUP)  # a kill or a closed terminal stops the curves as a Ctrl-C does
    before = {s: signal.signal(s, signal.default_int_handler) for s in stops}
    try:
        loop(jobs, todo, running, out_dir, workers, env, t0)
    finally:  # Ctrl-C or a failure: each curve still running saves its checkpoint (SIGTERM) before we return
        for proc, log, _ in running.values():
            proc.terminate()
        for proc, log, _ in running.values():
            proc.wait()
            log.close()
        for s, handler in before.items():
            signal.signal(s, handler)


def die_with_parent():
    """In the curve's process, before exec: Linux sends it SIGTERM when the driver dies, however it
    dies (prctl PR_SET_PDEATHSIG); elsewhere nothing (a kill -9 of the driver then leaves it running)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def stop_deferred():
    """Hold a Ctrl-C or SIGTERM that arrives inside the block and raise it at its end: a curve's process,
    in a session of its own, is then always in `running` when run's finally stops the curves. (Not
    cli.sigint_held: its mask would pass through exec to the curve, and a SIGTERM is a stop here too.)"""
    held = []
    before = {s: signal.signal(s, lambda n, frame: held.append(n)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if held:
            raise KeyboardInterrupt


def loop(jobs, todo, running, out_dir, workers, env, t0):
    """run's scheduling: start jobs while fewer than `workers` run; report each that ends."""
    while todo or running:
        while todo and len(running) < workers:
            arm, seed = todo.pop(0)
            log = open(os.path.join(out_dir, folder(arm, seed) + ".log"), "a")
            with stop_deferred():  # a stop inside Popen would lose the curve's process: it runs on, out of reach
                running[(arm, seed)] = (subprocess.Popen(command(arm, seed, out_dir), stdout=log, stderr=log, env=env,
                                                         cwd=ROOT, start_new_session=True, preexec_fn=die_with_parent),
                                        log, time.time())
        time.sleep(2)
        for job, (proc, log, started) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[job]
            if proc.returncode:  # run's finally stops the others (they save: the same command continues)
                with open(log.name) as f:
                    tail = f.read().strip().splitlines()[-3:]
                raise cli.UserError(f"{job[0]} seed {job[1]} failed (exit {proc.returncode}): "
                                    + " / ".join(tail) + f"; its log: {log.name}")
            line = (f"{job[0]:<20s} seed {job[1]} | {(time.time() - started) / 60:5.1f} min | "
                    f"{len(jobs) - len(todo) - len(running)}/{len(jobs)} done, {(time.time() - t0) / 60:.0f} min in")
            print(line, flush=True)
            with open(os.path.join(out_dir, "seeds.log"), "a") as f:
                f.write(line + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default="out/seeds", help="one scaling.py folder per (model, seed) under it")
    p.add_argument("--plan", default=PLAN, help="MODEL[@LR]:SEEDS entries, comma-separated, run in this order (default: "
                   "the map's seeds)")
    p.add_argument("--print_plan", choices=PLANS, help="print a named plan (map: the seeds of the map; screen: "
                   "results/map/PLAN.md's screening) and exit")
    p.add_argument("--workers", type=int, default=2, choices=range(1, 9), metavar="1..8",
                   help="curves at a time, one thread each")
    p.add_argument("--collect", metavar="FROM", help="train nothing: copy the plan's finished curves from FROM (the "
                   "campaign's --out_dir, e.g. in its worktree) into --out_dir, their records and logs, not their runs")
    a = p.parse_args(argv)
    if a.print_plan:
        return print(PLANS[a.print_plan])
    jobs = parse_plan(a.plan)
    cli.require(a.collect is None or os.path.isdir(a.collect), "--collect {} is not a folder; name the campaign's "
                "--out_dir", a.collect)
    checkpoint.make_out_dir(a.out_dir)
    if a.collect:
        copied = collect(jobs, a.collect, a.out_dir)
        print(f"collected {len(copied)} finished curves from {a.collect} into {a.out_dir}"
              + "".join(f"\n  {arm} seed {seed}" for arm, seed in copied))
        return copied
    done = [j for j in jobs if finished(a.out_dir, *j)]
    jobs = [j for j in jobs if j not in done]
    print(f"seeds: {len(jobs)} curves to train ({len(done)} finished already), {a.workers} at a time, under "
          f"{a.out_dir}", flush=True)
    run(jobs, a.out_dir, a.workers)


if __name__ == "__main__":
    cli.main_guard(main, prog="dev.seeds", interrupted="interrupted (Ctrl-C): each curve saved where it was; the "
                   "same command continues")

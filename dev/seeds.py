"""The seeds of the map on text: each core model at several seeds, on one machine, two at a time.

The map's copy column cannot carry a verdict on one or two seeds (results/map: two seeds of one
model differ on copies by more than any ingredient's effect). Each (model, seed) here is one
scaling.py curve at the committed settings (width 128, 4 blocks, T = 256, 10M bytes of builtin,
constant lr 2e-3, every point scored on the whole validation split, a cooldown branch over the last
20%), in a folder of its own, OUT/<model>_s<seed>. The jobs run in PLAN's order (what the map needs
most first: gpt, delta and hybrid_ema_kv seed by seed, then delta_conv, then the gated models),
`--workers` at a time, each `OMP_NUM_THREADS=1 python scaling.py --models M --widths 128 --seed S
--out_dir OUT/M_sS` in a process of its own. scaling.py resumes: a finished curve costs nothing, a
stopped one continues from its last point, so the same command continues after a stop (Ctrl-C: one
line). Each finished curve prints one line (and appends it to OUT/seeds.log) with its wall time.

Run (from the repository root)
    python -m dev.seeds --out_dir results/map/seeds            # the committed seeds (hours of CPU)
    python -m dev.seeds --plan delta:0-3 --out_dir out/seeds   # a subset: model:seeds, comma-separated
    python -m dev.map --out_dir results/map                    # then the map, with their statistics
"""

import argparse
import contextlib
import json
import os
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


def parse_plan(text):
    """'gpt:0-5,delta:1' -> [(model, seed), ...] in that order; one line for a bad entry."""
    jobs = []
    for item in filter(None, text.split(",")):
        model, _, seeds = item.partition(":")
        lo, _, hi = seeds.partition("-")
        cli.require(model in registry.MODELS and lo.isdigit() and (not hi or hi.isdigit()),
                    "--plan entries are MODEL:SEED or MODEL:FIRST-LAST with a model of {}, got {!r}",
                    " ".join(registry.MODELS), item)
        jobs += [(model, s) for s in range(int(lo), int(hi or lo) + 1)]
    cli.require(jobs and len(set(jobs)) == len(jobs), "--plan must name each (model, seed) once, got {}", text)
    return jobs


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: scaling.py's folder


def command(model, seed, out_dir):
    return [sys.executable, "scaling.py", "--models", model, *SETTINGS, "--seed", str(seed), "--out_dir",
            os.path.abspath(os.path.join(out_dir, f"{model}_s{seed}"))]


def finished(out_dir, model, seed):
    """Whether OUT/<model>_s<seed>/scaling.json holds the finished curve (its last point and its
    cooldown's): on a fresh clone the run folders (checkpoints) are gone, and scaling.py would train
    the curve again; its record is what the map reads."""
    path = os.path.join(out_dir, f"{model}_s{seed}", "scaling.json")
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


def run(jobs, out_dir, workers):
    """Run the jobs `workers` at a time, in order; a job that fails stops the rest (its last lines shown)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    todo, running, t0 = list(jobs), {}, time.time()
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill stops the curves as a Ctrl-C does
    try:
        loop(jobs, todo, running, out_dir, workers, env, t0)
    finally:  # Ctrl-C or a failure: each curve still running saves its checkpoint (SIGTERM) before we return
        for proc, log, _ in running.values():
            proc.terminate()
        for proc, log, _ in running.values():
            proc.wait()
            log.close()
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def stop_deferred():
    """Hold a Ctrl-C or SIGTERM that arrives inside the block and raise it at its end: a curve's process,
    in a session of its own, is then always in `running` when run's finally stops the curves. (Not
    cli.sigint_held: its mask would pass through exec to the curve, and a SIGTERM is a stop here too.)"""
    held = []
    before = {s: signal.signal(s, lambda n, frame: held.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
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
            model, seed = todo.pop(0)
            log = open(os.path.join(out_dir, f"{model}_s{seed}.log"), "a")
            with stop_deferred():  # a stop inside Popen would lose the curve's process: it runs on, out of reach
                running[(model, seed)] = (subprocess.Popen(command(model, seed, out_dir), stdout=log, stderr=log,
                                                           env=env, cwd=ROOT, start_new_session=True), log, time.time())
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
    p.add_argument("--plan", default=PLAN, help="MODEL:SEEDS entries, comma-separated, run in this order")
    p.add_argument("--workers", type=int, default=2, choices=range(1, 9), metavar="1..8",
                   help="curves at a time, one thread each")
    a = p.parse_args(argv)
    jobs = parse_plan(a.plan)
    checkpoint.make_out_dir(a.out_dir)
    done = [j for j in jobs if finished(a.out_dir, *j)]
    jobs = [j for j in jobs if j not in done]
    print(f"seeds: {len(jobs)} curves to train ({len(done)} finished already), {a.workers} at a time, under "
          f"{a.out_dir}", flush=True)
    run(jobs, a.out_dir, a.workers)


if __name__ == "__main__":
    cli.main_guard(main, prog="dev.seeds", interrupted="interrupted (Ctrl-C): each curve saved where it was; the "
                   "same command continues")

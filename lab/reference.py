"""The executed reference copy of the lab, for instructors: runs lab.ipynb top to bottom with the
solutions (LAB_SOLUTIONS=1) in a fresh kernel, as a student would, with LAB_OUT an empty folder
(--lab_out, else a temporary one: no finished background run or smoke-size data cache reused), and writes it
with every output, its figures included (PNG); prints the wall time, the CPU time of the kernel and
everything it started, and each slow cell's time.

    LAB_THREADS=1 python -m lab.reference                       # -> lab/reference.ipynb, full size
    LAB_SMOKE=1 python -m lab.reference --out /tmp/ref.ipynb --lab_out /tmp/lab   # smoke sizes (CI: tests/test_lab_notebook.py)

lab/INSTRUCTOR.md says what to expect in it, and how close a student's run should come.
"""
import argparse
import asyncio
import datetime
import json
import os
import resource
import signal
import sys
import tempfile
import time

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "lab.reference")

import nbformat

from plumbing import checkpoint

LAB = os.path.dirname(os.path.abspath(__file__))


def kernel_env(tmp, lab_out):
    """A python3 kernel spec of this interpreter first on JUPYTER_PATH (whatever specs the machine has)."""
    spec = os.path.join(tmp, "jupyter", "kernels", "python3")
    os.makedirs(spec)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump(dict(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                       display_name="Python 3", language="python"), f)
    os.environ.update(JUPYTER_PATH=os.path.join(tmp, "jupyter"), JUPYTER_RUNTIME_DIR=os.path.join(tmp, "runtime"),
                      IPYTHONDIR=os.path.join(tmp, "ipython"), LAB_OUT=os.path.abspath(lab_out),
                      MPLBACKEND=os.environ.get("MPLBACKEND", "Agg"), LAB_SOLUTIONS="1", LAB_STRICT="1")


def seconds(cell):
    """A cell's execution time from nbclient's timestamps (None if it has none)."""
    t = cell.get("metadata", {}).get("execution", {})
    start, end = t.get("iopub.execute_input"), t.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


def main(argv=None):
    p = argparse.ArgumentParser(description="execute lab.ipynb with the solutions; write it with its outputs")
    p.add_argument("--out", default=os.path.join(LAB, "reference.ipynb"), help="the executed copy (.ipynb)")
    p.add_argument("--lab_out", default=None, help="LAB_OUT of the run, an empty folder (default: a temporary one)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds a cell may run")
    args = p.parse_args(argv)
    if args.lab_out:
        checkpoint.check_out_dir(args.lab_out, "--lab_out")  # a file, a read-only folder: one line
    cli.require(not (args.lab_out and os.path.isdir(args.lab_out) and os.listdir(args.lab_out)),
                "--lab_out {} is not empty: the reference runs from an empty one", args.lab_out)
    cli.require(not os.path.isdir(args.out), "--out must name a file (.ipynb), got the folder {}", args.out)
    folder = os.path.dirname(os.path.abspath(args.out))
    checkpoint.check_out_dir(folder, f"--out {args.out}: its folder")  # before the notebook runs
    from nbclient import NotebookClient
    nb = nbformat.read(os.path.join(LAB, "lab.ipynb"), as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        kernel_env(tmp, args.lab_out or os.path.join(tmp, "out"))
        from lab import helpers
        helpers.environment(os.environ)  # the LAB_* variables the kernel gets: a bad one is one line here
        t0, cpu0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        # a terminal's Ctrl-C reaches the kernel too (one process group) and stops its cell, or kills it. nbclient's
        # own SIGINT handler tears the kernel down mid-run and then fails in its cleanup (an AssertionError): once
        # the kernel runs, this one replaces it and only notes the signal, and whatever nbclient then raises
        # (CellExecutionError, DeadKernelError) becomes main_guard's one line and exit 130
        interrupted = []
        note = lambda **kw: asyncio.get_event_loop().add_signal_handler(signal.SIGINT, interrupted.append, True)
        try:
            NotebookClient(nb, timeout=args.timeout, kernel_name="python3", on_notebook_start=note,
                           resources={"metadata": {"path": LAB}}).execute()
        except BaseException:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        if interrupted:  # the cell that took it finished anyway: this is not the notebook's whole run
            raise KeyboardInterrupt
        wall, cpu1 = time.time() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        out_dir = os.environ["LAB_OUT"]
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    root = os.path.dirname(LAB)
    for cell in nb.cells:  # every output kept, the figures too; this machine's paths as placeholders
        for o in cell.get("outputs", []):
            if "text" in o:
                o["text"] = o["text"].replace(out_dir, "$LAB_OUT").replace(root, "$REPO")
    nb.metadata["lab_reference"] = dict(wall_s=round(wall, 1), cpu_s=round(cpu, 1), python=sys.version.split()[0],
                                        threads=os.environ.get("LAB_THREADS", "all"),
                                        smoke=os.environ.get("LAB_SMOKE") == "1")
    checkpoint.make_out_dir(folder, f"--out {args.out}: its folder")
    checkpoint.atomic_write(args.out, lambda f: nbformat.write(nb, f))
    print(f"wrote {args.out} ({os.path.getsize(args.out):,} bytes) | wall {wall:.0f} s | CPU of the kernel and its "
          f"children {cpu:.0f} s")
    for i, cell in enumerate(nb.cells):
        s = seconds(cell)
        if cell.cell_type == "code" and s is not None and s >= 1:
            print(f"cell {i:3d} {s:7.1f} s  {cell.source.splitlines()[0][:70]}")


if __name__ == "__main__":
    cli.main_guard(main, prog="lab.reference")

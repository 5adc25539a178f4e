"""The lab's long runs in a background process: recall.py's quick run, the four write points and
the byte run (those named), one after another, each as the notebook's own cell would run it
(lab/helpers.py, lab/write.py), its printed lines and result written to OUT/background/<job>.json
for the cell that needs it (helpers.collect). Started by helpers.start_background (the notebook's
"start the long runs" cell), which names only the jobs without a finished file:

    python -m lab.background KEY JOB...   # KEY: helpers.background_key() of the settings; JOB: recall, points, bytes

A record is read only under the same KEY (the same sizes), by the kernel that started the run or a
restarted one: finished runs outlive the kernel.
"""
import io
import json
import os
import sys
import traceback


def main(key, jobs):
    from lab import helpers as H
    from lab import write as W
    run = dict(recall=lambda: H.recall_quiet(H.recall_config()), points=W.train_points, bytes=W.train_bytes)
    for job in jobs:
        text = io.StringIO()
        try:
            stdout, sys.stdout = sys.stdout, text
            try:
                result = run[job]()
            finally:
                sys.stdout = stdout
            record = dict(key=key, result=result, output=text.getvalue())
        except Exception as e:  # the cell runs it again in the notebook, where the error shows
            traceback.print_exc()
            record = dict(key=key, error=f"{type(e).__name__}: {' '.join(str(e).split())}", output=text.getvalue())
        path = H.out("background", f"{job}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, default=str)
        os.replace(path + ".tmp", path)  # atomic: the notebook never reads half a record
        print(f"{job} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

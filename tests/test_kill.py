"""kill -9 at random moments of a small train.py run, resumed each time, loses and repeats nothing.

The loop of dev/kill_loop.py (its 20-kill log is results/train_cpu/kill_loop.log)
with 4 kills, every second one aimed inside a checkpoint write. Each life is a fork of this
process (torch is loaded: no interpreter start) running train.main with one thread, SIGKILLed.
Run: python -m pytest tests/test_kill.py
"""
import os
import random
import signal
import sys
import traceback

import pytest
import torch

import train
from dev import kill_loop

pytestmark = pytest.mark.slow  # process-level: outside the `-m "not slow"` loop


class Forked:
    """A life of the run: train.main(parse_args(argv)) in a forked child, one torch thread."""

    def __init__(self, argv):
        self.status = None
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                sys.stdout = open(os.devnull, "w")
                torch.set_num_threads(1)
                train.main(train.parse_args(argv))
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)

    def poll(self):
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def kill(self):
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self):
        if self.status is None:
            self.status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.status


def test_sigkill_at_random_moments_then_resume_equals_an_uninterrupted_run(tmp_path, one_thread):
    import torch._dynamo  # noqa: F401  (AdamW imports it on first use: here once, not in each forked life)
    lines = []
    t = kill_loop.kill_loop(str(tmp_path / "run"), 4, random.Random(0), launch=Forked, say=lines.append,
                            aim_every=2, timeout=120)
    report = "\n".join(lines)
    assert t["kills"] == 4, report
    assert t["missing"] == t["duplicated"] == t["wrong"] == 0, report  # after every kill
    assert t["temps_surviving_a_start"] == 0 and t["final_temps"] == 0, report
    assert t["final_missing"] == t["final_duplicated"] == 0 and t["final_records_equal"], report
    assert t["final_val_loss"] == t["uninterrupted_val_loss"] and t["weights_equal"] and t["best_equal"], report
    assert kill_loop.ok(t, 4)
    # the aimed kills landed inside a checkpoint write: after its record, leaving a temporary file
    assert t["aimed"] >= 1 and t["kills_between_a_record_and_its_checkpoint"] >= 1 and t["temps_left"] >= 1, report

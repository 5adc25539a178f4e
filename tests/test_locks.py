"""The folder lock's own writes fail in one line: a `.lock` that is a folder, for every command that
locks (train.py, scaling.py, probe.py, and the grids: recall.py, frontier.py, ablate.py), and a disk with no
byte free (the pid write refused, as the disk-full tests of tests/test_train.py refuse writes)."""

import errno
import os

import numpy as np
import pytest

import ablate
import frontier
import probe
import recall
import scaling
import train
from plumbing import checkpoint, cli


def lock_folder(out):
    os.makedirs(os.path.join(out, ".lock"))
    return str(out)


def one_line(e):
    msg = str(e.value)
    assert "\n" not in msg and ".lock" in msg and "folder" in msg, msg


@pytest.mark.parametrize("command", ["train", "scaling", "recall", "frontier", "ablate", "probe"])
def test_a_lock_folder_is_one_line(command, tmp_path):
    out = lock_folder(tmp_path / "o")
    run = {
        "train": lambda: train.main(train.make_config("cpu_bytes", n_layer=1, n_embd=16, max_iters=2, out_dir=out),
                                    tokens=(np.arange(4000) % 256, np.arange(2000) % 256)),
        "scaling": lambda: scaling.main(cli.build(scaling.ScalingConfig, out_dir=out, models=("linear",),
                                                  widths=(16,))),
        "recall": lambda: recall.main(recall.RecallConfig(out_dir=out, variants=("linear",), steps=5, curriculum=0,
                                                          decay=0)),
        "frontier": lambda: frontier.main(frontier.FrontierConfig(out_dir=out, quick=True)),
        "probe": lambda: probe.main(probe.ProbeConfig(out_dir=out, seeds=1, n_train=10, n_val=5, n_test=5)),
        "ablate": lambda: ablate.main(ablate.AblateConfig(out_dir=out, variants=("linear",), content=False,
                                                          tokenizer="bytes", max_iters=2, seeds=1, workers=1)),
    }[command]
    with pytest.raises(cli.UserError) as e:
        run()
    one_line(e)
    assert sorted(os.listdir(out)) == [".lock"]


def test_a_full_disk_refuses_the_lock_in_one_line(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(checkpoint.os, "write", full)
    with pytest.raises(checkpoint.CheckpointError) as e:
        with checkpoint.RunLock(str(tmp_path)):
            pass
    monkeypatch.undo()
    msg = str(e.value)
    assert "\n" not in msg and ".lock" in msg and os.strerror(errno.ENOSPC) in msg
    with checkpoint.RunLock(str(tmp_path)):  # nothing held: the folder is free again
        pass

"""The folder lock's own writes fail in one line: a `.lock` that is a folder, for every command that
locks (train.py, scaling.py, probe.py, and the grids: recall.py, frontier.py, ablate.py), and a disk with no
byte free (the pid write refused, as the disk-full tests of tests/test_train.py refuse writes). A `.lock`
that is a link (to a file, to nothing), a FIFO, a hard link or a file of other text is one line, and
neither it nor what it points to changes: the lock follows no link and truncates only a lock."""

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
        "recall": lambda: recall.main(recall.RecallConfig(out_dir=out, models=("linear",), steps=5, curriculum=0,
                                                          decay=0)),
        "frontier": lambda: frontier.main(frontier.FrontierConfig(out_dir=out, quick=True)),
        "probe": lambda: probe.main(probe.ProbeConfig(out_dir=out, seeds=1, n_train=10, n_val=5, n_test=5)),
        "ablate": lambda: ablate.main(ablate.AblateConfig(out_dir=out, models=("linear",), content=False,
                                                          tokenizer="bytes", max_iters=2, seeds=1, workers=1)),
    }[command]
    with pytest.raises(cli.UserError) as e:
        run()
    one_line(e)
    assert sorted(os.listdir(out)) == [".lock"]


def notes(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("my notes: keep me")
    return f


ODD_LOCKS = {  # what stands at OUT/.lock -> the file whose bytes must stay as they were (None: only the lock)
    "a link to a file": lambda lock, tmp: (os.symlink(notes(tmp), lock), notes(tmp))[1],
    "a link to nothing": lambda lock, tmp: os.symlink(tmp / "absent", lock),
    "a hard link": lambda lock, tmp: (os.link(notes(tmp), lock), notes(tmp))[1],
    "a FIFO": lambda lock, tmp: os.mkfifo(lock),
    "a file of other text": lambda lock, tmp: (lock.write_text("my notes: keep me"), lock)[1],
}


@pytest.mark.parametrize("odd", list(ODD_LOCKS))
def test_an_odd_lock_is_one_line_and_left_as_it_was(odd, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    kept = ODD_LOCKS[odd](out / ".lock", tmp_path)
    with pytest.raises(checkpoint.CheckpointError) as e:
        with checkpoint.run_lock(str(out)):
            pass
    assert "\n" not in str(e.value) and ".lock" in str(e.value), str(e.value)
    if kept is not None:
        assert kept.read_text() == "my notes: keep me"
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize("command", ["train", "recall"])
def test_a_lock_linked_to_a_file_leaves_the_file_unchanged(command, tmp_path):
    """The issue's case, through a run and a grid: OUT/.lock -> notes.txt; one line, notes.txt as it was."""
    out = tmp_path / "o"
    out.mkdir()
    os.symlink(notes(tmp_path), out / ".lock")
    with pytest.raises(cli.UserError) as e:
        if command == "train":
            train.main(train.make_config("cpu_bytes", n_layer=1, n_embd=16, max_iters=2, out_dir=str(out)),
                       tokens=(np.arange(4000) % 256, np.arange(2000) % 256))
        else:
            recall.main(recall.RecallConfig(out_dir=str(out), models=("linear",), steps=5, curriculum=0, decay=0))
    assert "\n" not in str(e.value) and "link" in str(e.value), str(e.value)
    assert (tmp_path / "notes.txt").read_text() == "my notes: keep me"
    assert os.listdir(out) == [".lock"]


def test_a_lock_a_killed_run_left_is_taken(tmp_path):
    for text in ("", "999999", "999999, train.py"):  # empty, the old format, the current one
        (tmp_path / ".lock").write_text(text)
        with checkpoint.run_lock(str(tmp_path)):
            assert (tmp_path / ".lock").read_text().startswith(f"{os.getpid()}, ")


def test_a_full_disk_refuses_the_lock_in_one_line(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(checkpoint.os, "write", full)
    with pytest.raises(checkpoint.CheckpointError) as e:
        with checkpoint.run_lock(str(tmp_path)):
            pass
    monkeypatch.undo()
    msg = str(e.value)
    assert "\n" not in msg and ".lock" in msg and os.strerror(errno.ENOSPC) in msg
    with checkpoint.run_lock(str(tmp_path)):  # nothing held: the folder is free again
        pass

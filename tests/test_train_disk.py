"""train.py on a full or read-only disk: a checkpoint, metrics.jsonl or log.txt that cannot be written is
one line naming the file, what was written before stays, and --resume goes on; a bug in the saving code
keeps its traceback. Split from tests/test_train.py (its helpers: the tiny run, the records, the weights).
Run: python -m pytest tests/test_train_disk.py
"""
import errno
import os

import pytest
import torch

from plumbing import checkpoint
import train
from test_train import TINY, records, run, weights


def test_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    run(tmp_path, "--max_iters", 2, "--eval_interval", 2)
    before = weights(tmp_path / "ckpt_last.pt")
    real_save = torch.save

    def full_disk(obj, f):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(checkpoint.CheckpointError, match="No space left on device") as exc:
        run(tmp_path, "--max_iters", 4, "--eval_interval", 2, "--resume")
    assert "\n" not in str(exc.value) and "--resume" in str(exc.value)
    monkeypatch.setattr(torch, "save", real_save)
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]  # the temp file is gone
    after = weights(tmp_path / "ckpt_last.pt")  # the previous checkpoint, intact and loadable
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert run(tmp_path, "--max_iters", 4, "--eval_interval", 2, "--resume")["step"] == 4


class FullAfter:
    """A run file opened to append whose disk fills after `room` lines: the next write stores half
    its line and fails with ENOSPC, and so does the close that retries the rest (as a real disk)."""

    def __init__(self, f, room):
        self.f, self.room, self.full = f, room, False

    def write(self, text):
        if self.room == 0:
            self.f.write(text[:len(text) // 2])
            self.full = True
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= 1
        return self.f.write(text)

    def close(self):
        self.f.close()
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)


@pytest.mark.parametrize("name, room", [("metrics.jsonl", 3), ("log.txt", 8)])
def test_a_full_disk_while_appending_is_one_line_and_resume_goes_on(tmp_path, monkeypatch, capsys, name, room):
    """metrics.jsonl fills at step 3's record, log.txt at step 2's log line (after 5 header lines,
    the training line, step 0's evaluation and step 1): one line, what was written stays, and
    --resume (from ckpt_last at step 2, or at step 0) ends with every record once."""
    def filling(path, mode="r", *args, **kwargs):  # checkpoint's open: the appends to `name` fill the disk
        f = open(path, mode, *args, **kwargs)
        return FullAfter(f, room) if str(path).endswith(name) and mode == "a" else f
    monkeypatch.setattr(checkpoint, "open", filling, raising=False)
    with pytest.raises(SystemExit) as exc:
        train.cli_main(TINY + ["--out_dir", str(tmp_path), "--max_iters", "4", "--eval_interval", "2"])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(tmp_path / name) in err and "No space left" in err and "--resume" in err, err
    monkeypatch.undo()
    written = (tmp_path / name).read_text()
    assert written.count("\n") == room and not written.endswith("\n")  # every line before, and half a line
    assert run(tmp_path, "--max_iters", 4, "--eval_interval", 2, "--resume")["step"] == 4
    assert [r["step"] for r in records(tmp_path)] == [0, 1, 2, 3, 4]
    assert (tmp_path / name).read_text().startswith(written.rsplit("\n", 1)[0] + "\n")  # nothing written is lost


DISK_FULL = [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "Disk quota exceeded"),
             OSError(errno.EROFS, "Read-only file system"),
             RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"),
             RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")]
BUGS = [RuntimeError("Expected all tensors to be on the same device"), OSError(errno.EIO, "Input/output error"),
        TypeError("cannot pickle 'generator' object"), KeyError("model")]


@pytest.mark.parametrize("error", DISK_FULL + BUGS, ids=repr)
def test_only_a_full_or_read_only_disk_becomes_one_line(tmp_path, monkeypatch, error):
    path = str(tmp_path / "ckpt_last.pt")
    checkpoint.atomic_save({"step": 1}, path)

    def failing_save(obj, f):
        f.write(b"half a checkpoint")
        raise error

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(Exception) as exc:
        checkpoint.atomic_save({"step": 2}, path)
    if error in DISK_FULL:
        assert type(exc.value) is checkpoint.CheckpointError and "\n" not in str(exc.value)
        assert "free disk space" in str(exc.value) and "ckpt_last.pt" in str(exc.value)
    else:  # a bug: the very exception, with its traceback
        assert exc.value is error and any(entry.name == "failing_save" for entry in exc.traceback)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["ckpt_last.pt"]  # no temp file; the previous checkpoint intact
    assert torch.load(path, weights_only=True)["step"] == 1


def test_torch_on_a_full_device_is_a_disk_error_and_a_save_bug_keeps_its_traceback(tmp_path, monkeypatch):
    if os.path.exists("/dev/full"):  # Linux: every write fails with ENOSPC
        big = {"w": torch.zeros(1 << 18)}
        with pytest.raises(OSError) as through_a_file:
            with open("/dev/full", "wb") as f:  # as atomic_save writes
                torch.save(big, f)
        with pytest.raises(RuntimeError) as to_a_path:
            torch.save(big, "/dev/full")  # torch's own writer: no errno, its words
        assert checkpoint.disk_error(through_a_file.value) and checkpoint.disk_error(to_a_path.value)

    def buggy_save(obj, f):
        raise RuntimeError("a bug in the checkpoint code")

    monkeypatch.setattr(torch, "save", buggy_save)
    with pytest.raises(RuntimeError, match="a bug in the checkpoint code") as exc:
        train.cli_main(TINY + ["--out_dir", str(tmp_path), "--max_iters", "1", "--eval_interval", "1"])
    assert any(entry.name == "buggy_save" for entry in exc.traceback)
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]

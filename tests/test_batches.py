"""Tests for plumbing/batches.py: get_batch determinism and shifting, epoch coverage without
replacement, evaluation windows that count each token once, and the one-line errors of a split
too short for the block size. CPU, offline, no cache (a uint16 memmap like load_split's)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from plumbing import batches, cli


def test_get_batch_is_pure_and_shifted(tmp_path):
    np.arange(1000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = np.memmap(tmp_path / "t.bin", dtype=np.uint16, mode="r")  # as load_split returns
    x, y = batches.get_batch(tokens, 4, 16, step=3, seed=1)
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y[:, -1], x[:, -1] + 1)
    x2, y2 = batches.get_batch(tokens, 4, 16, step=3, seed=1)
    assert torch.equal(x, x2) and torch.equal(y, y2)  # same (seed, step, rank): same batch
    for other in (dict(step=4, seed=1), dict(step=3, seed=2), dict(step=3, seed=1, rank=1)):
        assert not torch.equal(x, batches.get_batch(tokens, 4, 16, **other)[0])
    # every window stays inside the data, including the last start
    xs = torch.cat([batches.get_batch(tokens, 64, 998, step=s, seed=0)[1] for s in range(5)])
    assert xs.max() == 999 and xs.min() >= 1
    with pytest.raises(cli.UserError, match="block_size"):
        batches.get_batch(tokens, 1, 1000, step=0, seed=0)


def test_epoch_batch_covers_every_window_once_per_epoch(tmp_path):
    np.arange(1000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = np.memmap(tmp_path / "t.bin", dtype=np.uint16, mode="r")
    T, B, world = 16, 4, 2
    W = batches.windows_per_epoch(len(tokens), T)
    assert W == 999 // 16 == 62
    # two ranks, steps 0.. : sample g = (step * world + rank) * B + b; 31 steps x 2 ranks x 4 = 248 = 4 W
    starts = {}
    for step in range(31):
        for rank in range(world):
            x, y = batches.epoch_batch(tokens, B, T, step=step, seed=3, rank=rank, world=world)
            assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y[:, -1], x[:, -1] + 1)
            for b in range(B):
                starts[(step * world + rank) * B + b] = int(x[b, 0])
    assert sorted(starts) == list(range(4 * W))
    for e in range(4):  # every window start 0, T, 2T, ... exactly once in each epoch
        assert sorted(starts[g] for g in range(e * W, (e + 1) * W)) == list(range(0, W * T, T))
    assert [starts[g] for g in range(W)] != [starts[g] for g in range(W, 2 * W)]  # a new order per epoch
    assert batches.epochs(len(tokens), T, steps=31, batch_size=B, world=world) == pytest.approx(4.0)
    # a pure function of (seed, step, rank, world): asked again, or after other calls, the same batch
    again = batches.epoch_batch(tokens, B, T, step=7, seed=3, rank=1, world=world)[0]
    assert torch.equal(again, batches.epoch_batch(tokens, B, T, step=7, seed=3, rank=1, world=world)[0])
    assert not torch.equal(again, batches.epoch_batch(tokens, B, T, step=7, seed=4, rank=1, world=world)[0])
    with pytest.raises(cli.UserError, match="block_size"):
        batches.epoch_batch(tokens, 1, 1000, step=0, seed=0)


def test_eval_windows_count_each_token_once(tmp_path):
    np.arange(1000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = np.memmap(tmp_path / "t.bin", dtype=np.uint16, mode="r")
    for n, T, cap in ((1000, 16, None), (1000, 37, None), (1000, 16, 161), (1000, 999, None), (1000, 5000, None),
                      (1000, 16, 1)):
        starts, lengths = batches.eval_windows(n, T, cap)
        m = n if cap is None else min(n, cap)
        assert lengths.sum() == m - 1 and (lengths >= 1).all() and (lengths[:-1] == T).all()
        targets = []
        for x, y in batches.eval_batches(tokens, T, batch_size=3, max_tokens=cap):
            assert x.shape == y.shape and x.shape[1] <= T and torch.equal(x[:, 1:], y[:, :-1])
            targets += y.flatten().tolist()
        assert targets == list(range(1, m))  # every token but the first, once, in order
    assert [len(x) for x, _ in batches.eval_batches(tokens, 100, batch_size=4)] == [4, 4, 1, 1]  # 9 full + 99


def test_check_split_message():
    with pytest.raises(cli.UserError) as err:
        batches.check_split(np.zeros(12, np.uint16), 128, "files:X", "val")
    msg = str(err.value)
    assert "\n" not in msg and "'val'" in msg and "129" in msg and "--block_size" in msg
    batches.check_split(np.zeros(129, np.uint16), 128, "builtin", "train")  # exactly enough
    with pytest.raises(cli.UserError, match="has 128 tokens"):
        batches.check_split(128, 128, "builtin", "train")


def test_public_names_and_light_import():
    """The names train.py draws its batches with; `import batches` loads neither torch (imported
    when a batch is made) nor data."""
    for name in ("get_batch", "epoch_batch", "epochs", "windows_per_epoch", "eval_windows", "eval_batches",
                 "check_split"):
        assert callable(getattr(batches, name, None)), name
    code = "import sys; from plumbing import batches; assert not {'torch', 'data'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

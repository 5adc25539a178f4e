"""Where one process of a training run sits: its DDP rank and world size, its device, its autocast
dtype. train.py's setup, read once before anything is loaded; the DDP process group itself starts
later (start_group), once every rank has its data.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) trains its 130M SPEN in bf16 on one H200;
torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) spreads the same loop over W processes.

Run: nothing to run; train.py calls it (tests/test_train.py: the one-line device errors and the
two-process gloo smoke test).
"""

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from plumbing import cli, runtime


@dataclass
class Placement:
    """Where this process runs: rank/world for DDP, the device, and the autocast context."""
    rank: int
    world: int
    ddp: bool
    device: str
    device_type: str
    dtype: str
    autocast: object

    @property
    def master(self):
        return self.rank == 0


def setup_process(cfg):
    """Resolve the device (one-line error if it is not there) and this process's DDP rank (the
    process group starts later, in start_group, once the data is ready), pick autocast."""
    device, kind = runtime.resolve_device(cfg.device)
    if cfg.data != "builtin" and kind == "cpu" and cfg.device == "auto" and cfg.max_iters * cfg.grad_accum * \
            cfg.batch_size * cfg.block_size > 1e9 and not cfg.eval_only:
        raise cli.ConfigError((runtime.hidden_gpu() or "no GPU here") + "; this run trains over 1B tokens (the default "
                              "preset 130m is the paper run); on a CPU run: python train.py --preset cpu")
    ddp = int(os.environ.get("RANK", -1)) != -1
    rank, world = 0, 1
    if ddp:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if kind == "cuda":
            device = f"cuda:{os.environ['LOCAL_RANK']}"
            torch.cuda.set_device(device)
    cli.require(cfg.grad_accum % world == 0, "--grad_accum ({}) must be a multiple of the number of "
                "processes ({})", cfg.grad_accum, world)
    dtype = runtime.resolve_dtype(cfg.dtype, kind)
    if kind == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return Placement(rank, world, ddp, device, kind, dtype, runtime.autocast(dtype, kind))


def start_group(place):
    """Start the DDP process group (nccl on CUDA, gloo on CPU) once every rank has its data, so
    no collective waits through a tokenization (see evaluate.wait_for_caches)."""
    if place.ddp and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if place.device_type == "cuda" else "gloo")

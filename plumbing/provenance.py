"""The header a run's log opens with: how the run was made (argv, git commit, versions, device,
parameters, state and FLOPs per token, the yardsticks of its validation corpus, the whole config),
so a log can be reproduced.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) reports a 130M SPEN against GPT-2 small; the
header's state and FLOPs lines are the figures that comparison turns on, read from the model itself.

Run: nothing to run; train.py logs it first (tests/test_write_readers_lm.py reads its params line).
"""

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import torch

from plumbing import ngram, runtime
from plumbing.evaluate import eval_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: its git commit


def lines(cfg, place, nparams, yardsticks, build):
    """Header lines of a run of TrainConfig cfg on runtime.Placement place; build() makes cfg's model
    (under the meta device here: its sizes only), yardsticks: the n-gram losses of its val corpus or None."""
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                cwd=ROOT, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    dev = runtime.device_name(place.device)
    name = eval_names(cfg)[0]
    with torch.device("meta"):  # the model's sizes from its config alone (no memory, no time)
        sized, T = build(), cfg.block_size
    squeezed = ngram.compressor_line(yardsticks)  # the bytes tokenizer only: zlib, bz2, lzma on the val bytes
    counted = (f"unigram {yardsticks['unigram']:.3f} | bigram {yardsticks['bigram']:.3f} nats (counted on its "
               f"train split)" + (f" | compressors {squeezed}" if squeezed else "") if yardsticks else
               f"not counted (python data.py --dataset {name} --baselines, or --yardsticks count)")
    return [f"argv: {' '.join(sys.argv)}",
            f"git: {commit or 'unknown'} | python {platform.python_version()} | torch {torch.__version__} | "
            f"numpy {np.__version__} | {platform.platform()}",
            f"device: {place.device} ({dev}) x {place.world} process(es), {torch.get_num_threads()} CPU threads, "
            f"dtype {place.dtype}" + (f" | note: {runtime.hidden_gpu()}" if runtime.hidden_gpu() else ""),
            f"params: {nparams:,} | recurrent state {sized.state_floats(T):,} floats per sequence and layer at T = {T} "
            f"(traces {len(getattr(sized.config, 'alphas', ())) * cfg.n_embd:,}) | train FLOPs/token "
            f"{sized.flops_per_token(T):.4g} | yardsticks on {name} val: {counted}",
            f"config: {json.dumps(asdict(cfg), sort_keys=True)}"]

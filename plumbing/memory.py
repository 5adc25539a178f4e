"""Will a run fit? A lower estimate of the memory a training (or evaluation) configuration needs,
against the memory of the device it runs on, so that a size that cannot fit is one line before
anything is allocated, not an allocator traceback after the run has started.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) trains a 130M SPEN on one GPU; every width,
batch and context of train.py is in bounds one by one, and some of them together need more than
any machine has (`--n_embd 65536`: a 13 GB embedding alone; `--batch_size 1048576`: terabytes of
logits). train.py calls `check` first thing in a run; `--no-memory_check` skips it.

Shape glossary: P parameters, B micro-batch, T context, C width, L blocks, V vocabulary, S traces, F FFN width.

The estimate (bytes; 4 per float: fp32 weights, an fp32 optimizer; autocast's bf16 copies are
left out, so it stays below what a run takes), from the model's config (no model is built):
    parameters        P                   the weights, at least the token table and the FFNs: V C + 2 F C L
    training state    3 P                 their gradients and AdamW's two moments (training only)
    logits            2 B T V             the logits and their gradient (evaluation: the logits)
    activations       (4 + S) B T C L     what each block keeps for its backward: the FFN's 4C-wide
                                          hidden layer and SPEN's S traces (evaluation: B T C, one
                                          block's output at a time)
Each term is a floor of the real figure (no attention matrix, no temporaries), so a configuration
refused here could not run; one that passes may still not fit, and then fails as before.

Run: nothing to run; tests/test_memory.py checks it through train.py.
"""

import os

from plumbing import cli

FLOAT = 4  # bytes of an fp32 number


def need(config, batch_size, block_size, training=True):
    """{term: bytes} of the estimate (see the docstring) and 'total'. config: the run's model config (SPEN's
    or GPT's), read for its sizes: no model is built."""
    P, V, C, L = params(config), config.vocab_size, config.n_embd, config.n_layer
    S = len(getattr(config, "alphas", ()) or ())  # SPEN's traces; GPT has none
    tokens = batch_size * block_size
    terms = dict(parameters=P * FLOAT, training_state=3 * P * FLOAT if training else 0,
                 logits=(2 if training else 1) * tokens * V * FLOAT,
                 activations=(4 + S) * tokens * C * L * FLOAT if training else tokens * C * FLOAT)
    return dict(terms, total=sum(terms.values()))


def params(config):
    """A floor of the model's parameters: the token table (V C) and each block's FFN (2 F C, F = 4C unless
    the config says), which SPEN and GPT both have; the rest (mixing, attention, norms) is left out."""
    C = config.n_embd
    return config.vocab_size * C + config.n_layer * 2 * (getattr(config, "ffn_hidden", None) or 4 * C) * C


def capacity(device):
    """(bytes, what they are) of the memory a run on `device` can use: a CUDA GPU's memory, else the
    smallest of the machine's physical memory (os.sysconf), this process's cgroup limit and what its
    address-space limit (`ulimit -v`) leaves. (None, '') where none can be read."""
    if str(device).startswith("cuda"):
        import torch
        props = torch.cuda.get_device_properties(torch.device(device))
        return props.total_memory, f"the {props.name}'s memory"
    try:
        total, what = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's memory"
    except (ValueError, OSError, AttributeError):  # not POSIX
        return None, ""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:  # cgroup v2: a container's limit ("max": none)
            limit = cli.whole(f.read().strip())  # None: "max", no limit
        if limit is not None and limit < total:
            total, what = limit, "this container's memory limit"
    except OSError:
        pass
    left = address_space_left()
    if left is not None and left < total:
        total, what = left, "address space this process's limit leaves (ulimit -v)"
    return total, what


def address_space_left():
    """Bytes this process may still map under its address-space limit (RLIMIT_AS, `ulimit -v`: every
    mapping counts, the interpreter's and torch's own too), or None without a limit."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm") as f:  # its first field: the pages mapped now
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # no /proc (macOS): the limit alone
        mapped = 0
    return max(0, limit - mapped)


def gib(n):
    return f"{n / 2 ** 30:,.1f} GiB"


def check(config, batch_size, block_size, device, eval_only=False, flag="--no-memory_check"):
    """One cli.ConfigError line, with the estimate and its terms, when need() exceeds capacity(device);
    else the estimate (or None when the capacity cannot be read). config: the run's model config."""
    have, what = capacity(device)
    if have is None:
        return None
    est = need(config, batch_size, block_size, not eval_only)
    if est["total"] <= have:
        return est
    terms = sorted((v, k) for k, v in est.items() if k != "total" and v >= 2 ** 26)  # from 0.1 GiB
    parts = ", ".join(f"{k.replace('_', ' ')} {gib(v)}" for v, k in reversed(terms))
    raise cli.ConfigError(f"this configuration needs at least {gib(est['total'])} ({parts}; at least {params(config):,} "
                          f"parameters, {batch_size} x {block_size} tokens per micro-batch), more than the "
                          f"{gib(have)} of {what}; lower --batch_size (raise --grad_accum), --block_size, --n_embd or "
                          f"--n_layer, or pass {flag} to try anyway")

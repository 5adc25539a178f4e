"""How bench.py measures: wall time (best, median, interleaved), peak memory, the operators a
step dispatches, the bytes autograd saves, the tensors in a state and the machine it ran on. A
measurement, not a model: bench.py holds the sections that use these and the tables they print.

Shape glossary: B batch, T time.

Run: nothing to run; tests/test_bench.py runs every helper through `python bench.py --quick`.
"""

import os
import platform
import resource
import statistics
import time

import torch

from plumbing import runtime

WARMUP = 3  # calls before timing; see timed()


class BenchError(RuntimeError):
    """A measurement failed or a checked property did not hold: a finding, it keeps its traceback."""


def sync(device):
    """Wait for the device's queued work (CUDA runs asynchronously: a timer must wait for it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps, warmup=WARMUP):
    """Median and min wall time of fn() in ms over reps calls, after warmup calls, and the
    minor page faults per call (getrusage): ~0 once freed blocks are reused. Three warmup calls:
    glibc reuses a freed block for posix_memalign only once neighbouring free blocks have
    coalesced (the heap grows for the first 3-4 calls, then stays)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times, f0 = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / reps
    times.sort()
    return dict(ms=times[len(times) // 2], ms_min=times[0], faults=faults)


def interleaved(fns, device, reps):
    """Median ms of each fn() of the dict fns over reps rounds after one warmup call each; a round
    calls every fn once, in an order rotated each round, so a busy machine's slow spells fall on
    all of them alike and their ratios hold where absolute times do not."""
    for fn in fns.values():
        fn()
    names, times = list(fns), {k: [] for k in fns}
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync(device)
            t = time.perf_counter()
            fns[name]()
            sync(device)
            times[name].append((time.perf_counter() - t) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def proc_status(key):
    """A /proc/self/status field in MiB (VmHWM: peak RSS, VmRSS: current RSS); None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peak(device):
    """Start a new peak-memory reading; False where the CPU's peak RSS cannot be reset."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_mib(device):
    """Peak memory since reset_peak: CUDA's allocated bytes, or the CPU process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return proc_status("VmHWM")


def count_ops(fn):
    """aten operators fn() dispatches (forward and backward), counted by torch.profiler; on a
    GPU each one is at least one kernel launch."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))


def saved_bytes(model, idx):
    """Bytes autograd keeps for the backward of one forward on idx (B, T): unique storages of the
    saved tensors, parameters left out. The activation memory of a step, without transients."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    return sum(seen.values())


def train_step(model, idx, opt=None, autocast=None):
    """One forward + backward (+ optimizer step when opt is given) on idx (B, T) as its own targets."""
    with autocast if autocast is not None else torch.autocast(idx.device.type, enabled=False):
        _, loss = model(idx, idx)
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss


def tensors(obj):
    """Every tensor in nested dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return [t for v in items for t in tensors(v)]


def machine(device):
    """Where a measurement ran: the CPU model, cores, Python, torch, platform, device (and GPU)."""
    cpu = runtime.device_name("cpu").rsplit(", ", 1)[0]  # the CPU model, without the core count
    out = dict(cpu=cpu, cores=os.cpu_count(), python=platform.python_version(), torch=torch.__version__,
               platform=platform.platform(), device=str(device))
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
        out["gpu_memory_gb"] = torch.cuda.get_device_properties(device).total_memory / 1e9
    return out

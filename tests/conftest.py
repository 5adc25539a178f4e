"""Shared test setup: import the flat top-level modules from the repository root."""
import os
import signal
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a process-level test (a command run as a process, worker pools, the "
                                       "notebook, a kill or Ctrl-C, a long training); `-m \"not slow\"` skips it")


# A shell's `cmd &` starts it with Ctrl-C ignored, and every process it starts inherits that (our commands keep
# an ignored SIGINT ignored, as under nohup): the Ctrl-C tests then hang. The suite's own process takes a handler
# back, so the commands it starts (an exec resets a handled signal) get Ctrl-C as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Small tensors run fastest on one thread: two threads spin against each other on a loaded 2-core machine.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """A files: corpus of the first 40,000 bytes of builtin's train split: a scaling curve scores its whole val
    split (its last tenth) at every point, in a fraction of builtin's time. Its byte cache goes with the session."""
    import shutil
    from plumbing import corpus
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    text = bytes(corpus.load_split("builtin", "train", tokenizer="bytes")[:40_000]).decode("utf-8", errors="ignore")
    path.write_text(text.replace("\0", "\n"), encoding="utf-8")
    yield f"files:{path}"
    shutil.rmtree(corpus.cache_folder(f"files:{path}", tokenizer="bytes"), ignore_errors=True)


@pytest.fixture
def forget_cache():
    """forget_cache(name): the default cache of the files: corpus `name` (written already), which a test let
    train.py build there, is removed when the test ends: a files: cache is keyed by its path, new every session."""
    import shutil
    from plumbing import corpus
    folders = []
    yield lambda name, tokenizer="gpt2": folders.append(corpus.cache_folder(name, tokenizer=tokenizer))
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def one_thread():
    """Small per-step matmuls (SPCN, probes): one thread is fastest; two oversubscribe 2 cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def process_signals_restored():
    """A command run in this process (runpy, as `python X.py`) takes the process's Ctrl-C for its own, as
    a script may; the next test gets the handlers back as they were (a forked worker pool inherits them:
    a SIGTERM handler left behind once hung CI for 90 minutes). A library function must not leave one:
    its own test asserts that (dev.seeds.run, tests/test_map.py)."""
    from plumbing import cli
    before, script = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}, cli._script
    yield
    for s, handler in before.items():
        signal.signal(s, handler)
    cli._script = script

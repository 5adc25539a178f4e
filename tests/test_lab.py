"""The lab (lab/): every exercise's check fails on its stub, on a plausible wrong answer, and
passes on its solution; the notebook and its plain-text twin hold the same cells; the notebook
runs top to bottom in smoke mode under a real notebook runner (nbclient, with the solutions, the
checks strict), and its twin runs as a script with the stubs (every cell runs while the exercises
are unfinished); the helpers refuse bad input in one line."""
import json
import math
import os
import runpy
import sys
import zlib

import nbformat
import pytest
import torch

from plumbing import cli
from lab import checks, exercises, helpers, solutions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab")


@pytest.mark.parametrize("name", sorted(checks.CHECKS))
def test_each_check_fails_on_the_stub_and_passes_on_the_solution(name, monkeypatch, capsys):
    with pytest.raises(NotImplementedError):
        checks.CHECKS[name](getattr(exercises, name))
    checks.CHECKS[name](getattr(solutions, name))  # raises if the solution is wrong
    monkeypatch.delenv("LAB_STRICT", raising=False)
    assert checks.check(name, getattr(exercises, name)) is False
    assert checks.check(name, getattr(solutions, name)) is True
    out = capsys.readouterr().out.splitlines()
    assert out == [f"[not yet] {name}: not written yet (the stub raises NotImplementedError)", f"[pass] {name}"]
    monkeypatch.setenv("LAB_STRICT", "1")
    with pytest.raises(AssertionError, match=name):
        checks.check(name, getattr(exercises, name))


def _no_standardising(X_train, y_train, X_test, y_test, l2=1e-3):
    Z = torch.cat([X_train, torch.ones(len(X_train), 1)], 1).double()
    Y = torch.nn.functional.one_hot(y_train, 4).double()
    W = torch.linalg.solve(Z.T @ Z + l2 * len(Z) * torch.eye(Z.shape[1], dtype=Z.dtype), Z.T @ Y)
    return (torch.cat([X_test, torch.ones(len(X_test), 1)], 1).double() @ W).argmax(1).eq(y_test).double().mean().item()


def _mqar_values_first(keys, values, slots, T, blank):
    idx, targets = solutions.mqar_sequence(keys, values, slots, T, blank)
    idx[0:2 * len(keys):2], idx[1:2 * len(keys):2] = values, keys  # v k instead of k v
    return idx, targets


WRONG = [  # plausible mistakes, each of which its check must catch
    ("effective_window", lambda a, mass=0.9: 1 if a == 1 else max(1, int(math.log(1 - mass) / math.log(1 - a)))),
    ("same_state", lambda alphas, x: x + torch.linalg.svd(torch.randn(len(alphas), len(x), dtype=torch.float64),
                                                          full_matrices=True).Vh[-1]),  # another matrix's null space
    ("probe_accuracy", lambda X, y, Xt, yt, l2=1e-3: solutions.probe_accuracy(Xt, yt, Xt, yt, l2)),  # fit on test
    ("probe_accuracy", _no_standardising),
    ("mqar_sequence", _mqar_values_first),
    ("binding", lambda acc, N: acc - 1 / N),  # not rescaled
    ("recalled_pairs", lambda acc, N: acc * N),  # forgets the free guess
    ("compressor_nats_per_byte", lambda data: solutions.compressor_nats_per_byte(data)
     | {"zlib": 8 * math.log(2) * len(zlib.compress(data)) / len(data)}),  # zlib's default level, not 9
]


@pytest.mark.parametrize("name, wrong", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_each_check_catches_a_wrong_answer(name, wrong):
    with pytest.raises(AssertionError):
        checks.CHECKS[name](wrong)


def test_every_exercise_has_a_solution_and_a_check():
    names = {n for n in vars(exercises) if callable(getattr(exercises, n)) and not n.startswith("_")} - {"torch"}
    assert names == set(checks.CHECKS) <= set(vars(solutions)) and 5 <= len(names) - 1 <= 8  # 5a/5b count as one


def _cells(nb):
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_the_notebook_and_its_plain_text_twin_hold_the_same_cells():
    """lab/lab.py is the source; lab/lab.ipynb is `jupytext --to ipynb --update lab/lab.py`, without outputs."""
    import jupytext
    twin = jupytext.read(os.path.join(LAB, "lab.py"))
    nb = nbformat.read(os.path.join(LAB, "lab.ipynb"), as_version=4)
    assert _cells(nb) == _cells(twin), "lab.ipynb differs from lab.py: run `jupytext --to ipynb --update lab/lab.py`"
    assert not any(c.get("outputs") or c.get("execution_count") for c in nb.cells if c.cell_type == "code")
    assert nb.metadata["kernelspec"]["name"] == "python3"
    setup = nb.cells[1].source
    assert "REPO_URL" in setup and "PLACEHOLDER" in setup and "LAB_SMOKE" in setup


def test_the_notebook_runs_top_to_bottom_in_smoke_mode(tmp_path, monkeypatch):
    """nbclient executes lab.ipynb as a student would (kernel started in lab/), with tiny sizes
    and the solutions: every check passes (strict: a failed one stops the run) and both verdicts print."""
    from nbclient import NotebookClient
    # the kernel is this interpreter, whatever kernel specs the machine has: a python3 spec of our own
    # first on JUPYTER_PATH; connection files and IPython's profile in tmp_path (HOME may be read-only)
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(dict(
        argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], display_name="Python 3",
        language="python")))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("LAB_SMOKE", "1")
    monkeypatch.setenv("LAB_SOLUTIONS", "1")
    monkeypatch.setenv("LAB_STRICT", "1")
    monkeypatch.setenv("LAB_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(os.path.join(LAB, "lab.ipynb"), as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": LAB}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert text.count("[pass]") == len(checks.CHECKS) and "[not yet]" not in text
    assert "verdict: within A" in text and "verdict at N = 8" in text and "copies (" in text
    assert (tmp_path / "out" / "bytes" / "ckpt_best.pt").is_file() and (tmp_path / "out" / "impulse.png").is_file()


def test_the_twin_runs_as_a_script_with_the_stubs(tmp_path, monkeypatch, capsys):
    """python lab/lab.py with every exercise unfinished: each check says 'not yet', every cell still runs."""
    for k, v in dict(LAB_SMOKE="1", LAB_OUT=str(tmp_path), MPLBACKEND="Agg").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("LAB_SOLUTIONS", raising=False)
    monkeypatch.delenv("LAB_STRICT", raising=False)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(helpers, "SMOKE", True)
    monkeypatch.setattr(helpers, "OUT", str(tmp_path))
    monkeypatch.setattr(helpers, "SIZES", helpers.SMOKE_SIZES | dict(data=dict(max_tokens=20_000,
                                                                              cache_dir=str(tmp_path / "cache"))))
    threads = torch.get_num_threads()
    try:
        runpy.run_path(os.path.join(LAB, "lab.py"), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert out.count("[not yet]") == len(checks.CHECKS) and "[pass]" not in out
    assert "verdict: within A" in out and "verdict at N = 8" in out and "copies (" in out


@pytest.mark.parametrize("call, flag", [
    (lambda: helpers.recall_config(variants=("gpt", "lstm")), "--variants"),
    (lambda: helpers.recall_config(steps=0), "--steps"),
    (lambda: helpers.probe_config(n_train=0), "--n_train"),
    (lambda: helpers.train_bytes(max_iters=0), "--max_iters"),
    (lambda: helpers.probe_features(n_sentences=1), "n_sentences"),
    (lambda: helpers.show_mqar(N=0), "N"),
    (lambda: helpers.two_pasts(T=1), "T"),
    (lambda: helpers.loss_split("nowhere.pt", windows=0), "windows"),
])
def test_helpers_refuse_bad_input_in_one_line(call, flag):
    with pytest.raises(cli.UserError) as e:
        call()
    assert flag in str(e.value) and "\n" not in str(e.value)

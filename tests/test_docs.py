"""The documentation holds together: the README stays short, every relative link in the
README, PAPER.md and the results READMEs points at a file in the repository, every experiment
folder under results/ has a README.md that the README links, the licence exists and is named,
and every name the docs give is true. Each checker also runs on a small fake repository where it
must fail.

Every name true (stale_names): in the docstrings of every .py file (top level, plumbing/, lab/,
tests/) and in every .md file, read from the source with `ast` and regexes, nothing imported:
  a reference is a dotted chain `a.b[.c...]` (not preceded by a word character, '.', '/' or '-')
  whose head is a module of this repository: a top-level module (`train.main`), a module of
  plumbing/ or lab/ by its dotted name (`plumbing.cli`) or a plumbing module by its bare name
  (`checkpoint.atomic_json`). Its next name must be defined at the top level of that module
  (def, class, assignment or import), and a name after a class must be defined in that class or
  a base class of this repository (a class with a base from outside, nn.Module, is taken on
  trust). Names after anything else (a function, a constant) are not checked. Not a reference:
  a chain whose second part is a file extension (`data.py`, `bench.json`: a file name) or whose
  head is not a module here (`e.g.`, `torch.compile`, `results.json`).
  a command is `python -m` a module or `python` a .py file (also `python3`): the module must be
  one of this repository or an installed one (`python -m pytest`), the file must exist at that
  path from the repository root.
  a file name is a name ending in .py, with or without folders (`plumbing/ngram.py`; not inside
  quotes: `prog="run.py"` is example code): it must exist at that path from the repository root
  or from the folder of the file that names it (a plumbing file named without its folder does
  not). Only source files: other names (`eval.json`, `ckpt_last.pt`) are what commands write.
A name in capitals is a placeholder (`python -m MODULE`, `X.py`). In a .md file a link's text is
left out (the link target is checked by test_relative_links_resolve).
"""
import ast
import functools
import glob
import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 340  # a page a reader finishes, with headroom: a new section does not start by editing this test

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)  # fenced code blocks
CODE = re.compile(r"`[^`\n]*`")  # inline code spans
# [text](target) and ![alt](target), the target up to whitespace or ')'; [label]: target
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?\s*$", re.M)


def links(text):
    """Every link target in markdown text, outside code blocks and code spans."""
    text = CODE.sub("", FENCE.sub("", text))
    return INLINE.findall(text) + REFERENCE.findall(text)


def broken_links(md_path, root):
    """Relative link targets of md_path that are not a file inside root (http(s), mailto
    and pure #anchors are skipped; a #anchor is stripped from a path)."""
    with open(md_path, encoding="utf-8") as f:
        text = f.read()
    bad = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # http:, https:, mailto: ... and anchors within the page
        path = target.split("#", 1)[0].split("?", 1)[0]
        full = os.path.normpath(os.path.join(root if path.startswith("/") else os.path.dirname(md_path),
                                             path.lstrip("/")))
        inside = os.path.commonpath([os.path.abspath(root), os.path.abspath(full)]) == os.path.abspath(root)
        if not (inside and os.path.isfile(full)):
            bad.append(target)
    return bad


def doc_files(root):
    """README.md, PAPER.md and every README.md under results/, as paths."""
    files = [os.path.join(root, "README.md"), os.path.join(root, "PAPER.md")]
    return files + sorted(glob.glob(os.path.join(root, "results", "**", "README.md"), recursive=True))


def experiments_without_readme(root):
    """Folders directly under results/ with no README.md."""
    res = os.path.join(root, "results")
    return sorted(d for d in os.listdir(res)
                  if os.path.isdir(os.path.join(res, d)) and not os.path.isfile(os.path.join(res, d, "README.md")))


def experiments_not_linked(root):
    """Folders directly under results/ whose README.md the top README does not link."""
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        targets = {os.path.normpath(t.split("#", 1)[0]) for t in links(f.read())}
    res = os.path.join(root, "results")
    return sorted(d for d in os.listdir(res) if os.path.isdir(os.path.join(res, d))
                  and os.path.normpath(f"results/{d}/README.md") not in targets)


# ---- every name true ------------------------------------------------------------------------

EXTENSIONS = {"py", "md", "json", "jsonl", "txt", "png", "pdf", "svg", "pt", "csv", "ipynb", "npy", "npz", "bin",
              "log", "lock", "tmp", "gz", "zip", "tar", "yaml", "yml", "toml", "cfg", "html", "sh"}
CHAIN = re.compile(r"(?<![\w./-])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # a.b.c, not inside a path or a longer chain
COMMAND = re.compile(r"\bpython3?\s+(?:-m\s+([\w.]+)|([\w./-]+\.py)\b)")  # python -m M | python FILE.py
PY_FILE = re.compile(r"""(?<![\w./"'-])((?:[\w.-]+/)*[\w-]+\.py)\b""")  # a/b.py, b.py; not in quotes


def top_names(body):
    """{name: node} of what a module or class body defines: defs, classes, assignments, imports
    (inside top-level if / try / with blocks too)."""
    names = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update({n.id: node for n in ast.walk(target) if isinstance(n, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []),
                          *[h.body for h in getattr(node, "handlers", [])]):
                names.update(top_names(block))
    return names


@functools.lru_cache(maxsize=None)
def parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read())


def documented(node):
    """The module, classes and functions under node: what can have a docstring (statements only
    are walked, not expressions: ast.walk would be ten times slower)."""
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        yield node
    for field in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(node, field, []):
            if isinstance(child, ast.stmt) or isinstance(child, ast.ExceptHandler):
                yield from documented(child)


class Repo:
    """The modules of a repository at root (dotted name -> path) and the names they define."""

    def __init__(self, root):
        self.root, self.paths = root, {}
        for folder in ("", "plumbing", "lab"):
            for path in glob.glob(os.path.join(root, folder, "*.py")):
                stem = os.path.basename(path)[:-3]
                if stem != "__init__":
                    self.paths[(folder + "." if folder else "") + stem] = path
        # a plumbing module by its bare name: checkpoint -> plumbing.checkpoint
        self.bare = {m.split(".")[1]: m for m in self.paths if m.startswith("plumbing.")}

    def tree(self, module):
        return parse(self.paths[module])

    def module_of(self, parts):
        """(module, the names after it) for a chain whose head is a module here, else None."""
        if parts[0] in ("plumbing", "lab") and os.path.isdir(os.path.join(self.root, parts[0])):
            return ".".join(parts[:2]), parts[2:]
        if parts[0] in self.paths:
            return parts[0], parts[1:]
        if parts[0] in self.bare:
            return self.bare[parts[0]], parts[1:]
        return None

    def wrong_reference(self, chain):
        """Why the chain a.b.c is not a true name here, or None (true, or not a reference)."""
        parts = chain.split(".")
        found = self.module_of(parts)
        if parts[1] in EXTENSIONS or found is None:
            return None
        module, rest = found
        if module not in self.paths:
            return f"no module {module}"
        scope, where = top_names(self.tree(module).body), module
        for name in rest:
            if name not in scope:
                return f"{where} defines no {name}"
            node = scope[name]
            if not isinstance(node, ast.ClassDef):
                return None  # past a function or a value: not checked
            scope, where = self.class_names(module, node), f"{where}.{name}"
            if scope is None:
                return None  # a base from outside this repository: taken on trust
        return None

    def class_names(self, module, cls):
        """What a class and its bases of this module define; None if a base comes from outside."""
        names, defs = top_names(cls.body), top_names(self.tree(module).body)
        for base in cls.bases:
            node = defs.get(base.id) if isinstance(base, ast.Name) else None
            if not isinstance(node, ast.ClassDef):
                return None
            inherited = self.class_names(module, node)
            if inherited is None:
                return None
            names = {**inherited, **names}
        return names

    def wrong_command(self, module, file):
        """Why a command (`python -m` module, or `python` file) names nothing here, or None."""
        if (module or os.path.basename(file)[:-3]).isupper():
            return None  # a placeholder: python -m MODULE, python X.py
        if module:
            head = module.split(".")[0]
            if head in self.paths or head in ("plumbing", "lab"):
                path = os.path.join(self.root, *module.split(".")) + ".py"
            elif importlib.util.find_spec(head) is not None:
                return None  # installed: python -m pytest
            else:
                return f"no module {module}"
        else:
            path = os.path.join(self.root, file)
        return None if os.path.isfile(path) else f"no file {os.path.relpath(path, self.root)}"


def docs(root):
    """(where, text) of every docstring in the .py files of root, plumbing/, lab/ and tests/, and
    of every .md file."""
    for path in sorted(p for d in ("", "plumbing", "lab", "tests") for p in glob.glob(os.path.join(root, d, "*.py"))):
        for node in documented(parse(path)):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield f"{os.path.relpath(path, root)}:{getattr(node, 'lineno', 1)}", text
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in ("out", "__pycache__"))
        for name in sorted(filenames):
            if name.endswith(".md"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    yield os.path.relpath(os.path.join(dirpath, name), root), f.read()


def stale_names(root):
    """Every wrong name the docs give, as 'where: name (why)'."""
    repo, bad = Repo(root), []
    for where, text in docs(root):
        if where.endswith(".md"):
            text = INLINE.sub(lambda m: f" {m.group(1)} ", text)  # a link's text is no name, its target is
        folder = os.path.dirname(os.path.join(root, where.split(":")[0]))
        for name in sorted(set(PY_FILE.findall(text))):
            if not (os.path.basename(name)[:-3].isupper() or os.path.isfile(os.path.join(root, name))
                    or os.path.isfile(os.path.join(folder, name))):
                bad.append(f"{where}: {name} (no such file)")
        for chain in sorted(set(CHAIN.findall(text))):
            why = repo.wrong_reference(chain)
            if why:
                bad.append(f"{where}: {chain} ({why})")
        for module, file in sorted(set(COMMAND.findall(text))):
            why = repo.wrong_command(module, file)
            if why:
                bad.append(f"{where}: python {'-m ' + module if module else file} ({why})")
    return bad


# ---- the repository -------------------------------------------------------------------------

def test_readme_is_short():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        n = len(f.read().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move lab notes to results/<experiment>/README.md"


@pytest.mark.parametrize("md", [os.path.relpath(p, ROOT) for p in doc_files(ROOT)])
def test_relative_links_resolve(md):
    assert os.path.isfile(os.path.join(ROOT, md)), md
    assert broken_links(os.path.join(ROOT, md), ROOT) == []


def test_every_experiment_has_a_readme_linked_from_the_readme():
    assert experiments_without_readme(ROOT) == []
    assert experiments_not_linked(ROOT) == []


def test_license_exists_and_readme_names_it():
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        licence = f.read()
    assert "MIT License" in licence and "Copyright" in licence
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert "LICENSE" in links(readme) and "MIT" in readme


# ---- the checkers fail where they must -------------------------------------------------------

def write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def test_link_checker_finds_broken_links(tmp_path):
    root = str(tmp_path)
    write(os.path.join(root, "a.py"))
    write(os.path.join(root, "results", "x", "fig.png"))
    write(os.path.join(root, "results", "x", "README.md"),
          "[fig](fig.png) [up](../../a.py#L3) [gone](missing.json) [escape](../../../etc/passwd)\n")
    write(os.path.join(root, "README.md"),
          "# T\n[a](a.py) [anchor](#t) [web](https://example.com/x) ![f](results/x/fig.png)\n"
          "[broken](b.py) [dir](results/x) [sec](results/x/README.md#part) [ref]\n"
          "`[in code](nope.py)`\n```\n[in a block](nope2.py)\n```\n[ref]: missing_ref.md\n")
    assert broken_links(os.path.join(root, "README.md"), root) == ["b.py", "results/x", "missing_ref.md"]
    assert broken_links(os.path.join(root, "results", "x", "README.md"), root) == [
        "missing.json", "../../../etc/passwd"]


def test_results_checkers_find_missing_readmes(tmp_path):
    root = str(tmp_path)
    write(os.path.join(root, "results", "done", "README.md"))
    write(os.path.join(root, "results", "todo", "run.json"))
    write(os.path.join(root, "README.md"), "[done](results/done/README.md)\n")
    assert experiments_without_readme(root) == ["todo"]
    assert experiments_not_linked(root) == ["todo"]


def test_stale_name_checker_finds_every_kind_and_leaves_prose_alone(tmp_path):
    root = str(tmp_path)
    write(os.path.join(root, "mod.py"), '"""The lesson: mod.f, mod.K.inherited, mod.K.size, mod.Ext.anything,\n'
          'mod.g, mod.K.nope; e.g. i.e. torch.compile, results.json, mod.json; prog="run.py"; tool.py."""\n'
          'import torch\nSIZE = 3\n\n\nclass Base:\n    def inherited(self):\n        """tool.gone"""\n\n\n'
          'class K(Base):\n    size: int = 1\n\n\nclass Ext(torch.nn.Module):\n    pass\n\n\n'
          'def f():\n    """Run python mod.py or python gone.py; python -m MODULE, X.py."""\n')
    write(os.path.join(root, "plumbing", "__init__.py"))
    write(os.path.join(root, "plumbing", "tool.py"), '"""tool.helper, plumbing.tool.helper, plumbing/tool.py, '
          'tool.py, plumbing.missing."""\ndef helper():\n    pass\n')
    write(os.path.join(root, "README.md"), "[mod.py](mod.py) [tool.py](plumbing/tool.py) `mod.SIZE`\n"
          "```\npython -m plumbing.tool\npython -m pytest -q\npython -m plumbing.gone\npython -m nosuchmodule_xyz\n"
          "python plumbing/tool.py\n```\n")
    assert stale_names(root) == [
        "mod.py:1: tool.py (no such file)",  # named without its folder (in plumbing/tool.py, the same name is true)
        "mod.py:1: mod.K.nope (mod.K defines no nope)", "mod.py:1: mod.g (mod defines no g)",
        "mod.py:8: tool.gone (plumbing.tool defines no gone)",
        "mod.py:20: gone.py (no such file)", "mod.py:20: python gone.py (no file gone.py)",
        "plumbing/tool.py:1: plumbing.missing (no module plumbing.missing)",
        "README.md: plumbing.gone (no module plumbing.gone)",
        "README.md: python -m nosuchmodule_xyz (no module nosuchmodule_xyz)",
        "README.md: python -m plumbing.gone (no file plumbing/gone.py)"]


def test_every_name_is_true():
    assert stale_names(ROOT) == []

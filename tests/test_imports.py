"""The import graph of the top-level modules is a tree: no cycle, and no library module imports a
script. Read from the source with `ast` (nothing is imported), so a lazy import inside a
function counts as well. Every top-level .py file must be classified below: a new file that is
in neither list fails the test until it is placed in one."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Imported by others, import nothing of SCRIPTS; may also run as __main__ (data.py, spcn.py).
LIBRARIES = {"batches", "cli", "checkpoint", "data", "ema", "evaluate", "gpt", "grammar", "lm", "ngram", "repeats",
             "runs", "shards", "sources", "spcn", "spen", "variants"}
# Entry points with a command line; a script may import a library or another script.
SCRIPTS = {"ablate", "bench", "bench_train", "content", "probe", "recall", "sample", "scaling", "train"}


def modules():
    return sorted(f[:-3] for f in os.listdir(ROOT) if f.endswith(".py"))


def imports(name):
    """The top-level modules of this repository that module `name` imports, anywhere in its source."""
    with open(os.path.join(ROOT, name + ".py")) as f:
        tree = ast.parse(f.read())
    local, found = set(modules()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return (found & local) - {name}


def test_every_module_is_classified():
    assert not LIBRARIES & SCRIPTS
    unplaced = set(modules()) - LIBRARIES - SCRIPTS
    assert not unplaced, f"place {sorted(unplaced)} in LIBRARIES or SCRIPTS of {__file__}"


def test_no_library_imports_a_script():
    wrong = {m: sorted(imports(m) & SCRIPTS) for m in modules() if m in LIBRARIES}
    assert not {m: s for m, s in wrong.items() if s}


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
    assert find_cycle({m: imports(m) for m in modules()}) is None


def test_the_cycle_finder_finds_cycles():
    """The check above can fail: a two-module and a three-module circle are both found."""
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None

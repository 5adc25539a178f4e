"""The documentation holds together: the README stays short, every relative link in the
README, PAPER.md and the results READMEs points at a file in the repository, every experiment
folder under results/ has a README.md that the README links, and the licence exists and is
named. Each checker also runs on a small fake repository where it must fail."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 300

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

"""The students' copy of the repository: every tracked file but the answers and the instructor's
kit (HELD_BACK), as one zip whose top folder is the one the notebook's setup cell looks for, and
the notebook beside it (with REPO_URL set, if given: the one place a clone URL is written).

    python -m lab.handout                                  # -> out/handout/ema-is-not-all-you-need.zip, lab.ipynb
    python -m lab.handout --repo_url https://host/you/ema-is-not-all-you-need.git --out_dir handout/

Students upload the zip to Colab's file panel (or unzip it locally) and open lab.ipynb; the setup
cell unpacks it. The instructor keeps this repository: solutions.py, INSTRUCTOR.md, the executed
reference and the lab's tests stay out of the zip.
"""
from plumbing import cli  # a Ctrl-C is one line (exit_on_ctrl_c); nothing here imports torch
cli.exit_on_ctrl_c(__name__, "lab.handout")
import argparse
import json
import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = "ema-is-not-all-you-need"  # the folder name the setup cell unpacks to
HELD_BACK = ("lab/solutions.py", "lab/INSTRUCTOR.md", "lab/reference.ipynb", "tests/test_lab.py")


def tracked(root=ROOT):
    """The repository's files: git's list in a checkout, else every file outside out/, .git and caches."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        return [p for p in listed.decode().split("\0") if p and os.path.isfile(os.path.join(root, p))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "out", "__pycache__")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def notebook(repo_url=""):
    """lab.ipynb with REPO_URL set in its setup cell (unchanged when repo_url is empty)."""
    with open(os.path.join(ROOT, "lab", "lab.ipynb")) as f:
        nb = json.load(f)
    if repo_url:
        setup = next(c for c in nb["cells"] if c["cell_type"] == "code")
        text = "".join(setup["source"]).replace('REPO_URL = ""', f"REPO_URL = {json.dumps(repo_url)}", 1)
        setup["source"] = text.splitlines(keepends=True)
    return nb


def main(argv=None):
    p = argparse.ArgumentParser(description="the students' copy of the repository, without the answers")
    p.add_argument("--out_dir", default=os.path.join(ROOT, "out", "handout"), help="where the zip and notebook go")
    p.add_argument("--repo_url", default="", help="a clone URL written into the notebook's setup cell")
    args = p.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    files = sorted(set(tracked()) - set(HELD_BACK) - ({"lab/lab.ipynb"} if args.repo_url else set()))
    archive = os.path.join(args.out_dir, f"{TOP}.zip")
    with zipfile.ZipFile(archive + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for path in files:
            z.write(os.path.join(ROOT, path), f"{TOP}/{path}")
        if args.repo_url:  # the notebook inside the zip carries the URL too
            z.writestr(f"{TOP}/lab/lab.ipynb", json.dumps(notebook(args.repo_url), indent=1))
    os.replace(archive + ".tmp", archive)
    with open(os.path.join(args.out_dir, "lab.ipynb"), "w") as f:
        json.dump(notebook(args.repo_url), f, indent=1)
    print(f"wrote {archive} ({len(files)} files, {os.path.getsize(archive):,} bytes; held back: "
          f"{', '.join(HELD_BACK)}) and {os.path.join(args.out_dir, 'lab.ipynb')}")
    return archive


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

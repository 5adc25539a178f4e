"""The students' copy of the repository: every tracked file but the answers and the instructor's
kit (HELD_BACK), as one zip whose top folder is the one the notebook's setup cell looks for, and
the notebook beside it. Markdown files lose their instructor-only passages (between
`<!-- instructor -->` and `<!-- /instructor -->`), so nothing in the copy points to what it lacks.

    python -m lab.handout                                  # -> out/handout/ema-is-not-all-you-need.zip, lab.ipynb
    python -m lab.handout --repo_url https://host/you/lab-students.git --branch students

Students upload the zip to Colab's file panel (or unzip it locally) and open lab.ipynb; the setup
cell unpacks it. With --repo_url the setup cell clones instead, and that route cannot hand out the
answers: --branch (with --repo_url only) names a branch that this command makes in this repository,
holding exactly the zip's files in one commit without parents (no history: the answers are in none
of its objects), which the instructor pushes, and only it, to the students' repository (`git push
URL BRANCH`); the setup cell clones that branch. A URL that is one of this repository's own remotes
(which hold the answers) is refused, and so is a --branch name that git refuses or that an existing
branch of this history has, each in one line before anything is written.
"""
from plumbing import cli

cli.exit_on_ctrl_c(__name__, "lab.handout")  # a Ctrl-C from the first second is one line

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import zipfile  # noqa: E402

from plumbing import checkpoint  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = "ema-is-not-all-you-need"  # the folder name the setup cell unpacks to
HELD_BACK = ("lab/solutions.py", "lab/snapshot.py", "lab/reference.py", "lab/INSTRUCTOR.md", "lab/reference.ipynb",
             "tests/test_lab.py", "tests/test_lab_notebook.py", "tests/test_lab_grading.py")
EMAIL = "lab.handout@localhost"  # the author of a students' branch: the one kind of branch --branch may replace
INSTRUCTOR_ONLY = re.compile(r"<!-- instructor -->.*?<!-- /instructor -->\n?", re.S)  # cut from every .md


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


def notebook(repo_url="", branch="", root=None):
    """lab.ipynb with REPO_URL and REPO_BRANCH set in its setup cell (unchanged when repo_url is empty)."""
    with open(os.path.join(root or ROOT, "lab", "lab.ipynb")) as f:
        nb = json.load(f)
    if repo_url:
        setup = next(c for c in nb["cells"] if c["cell_type"] == "code")
        text = "".join(setup["source"]).replace('REPO_URL = ""', f"REPO_URL = {json.dumps(repo_url)}", 1)
        text = text.replace('REPO_BRANCH = ""', f"REPO_BRANCH = {json.dumps(branch)}", 1)
        setup["source"] = text.splitlines(keepends=True)
    return nb


def contents(root, repo_url="", branch=""):
    """{path: bytes} of the students' copy: the tracked files but HELD_BACK, Markdown without its
    instructor-only passages, the notebook with the clone URL (if any)."""
    files = {}
    for path in sorted(set(tracked(root)) - set(HELD_BACK)):
        with open(os.path.join(root, path), "rb") as f:
            files[path] = f.read()
        if path.endswith(".md"):
            files[path] = INSTRUCTOR_ONLY.sub("", files[path].decode()).encode()
    if repo_url:
        files["lab/lab.ipynb"] = json.dumps(notebook(repo_url, branch, root), indent=1).encode()
    return files


def git(root, *args, stdin=None, env=None):
    """git's output (stripped) in `root`; a failure raises CalledProcessError."""
    return subprocess.run(["git", *args], cwd=root, input=stdin, capture_output=True, check=True,
                          env={**os.environ, **(env or {})}).stdout.decode().strip()


def check_route(root, repo_url, branch):
    """The --repo_url route's refusals, each one line: no branch named, a URL of this repository's own
    remotes, a branch name git refuses (`git check-ref-format`) or that a branch of this history has,
    or no git checkout here."""
    cli.require(bool(branch), "--repo_url needs --branch: the students' branch that lab.handout makes (the "
                "handout's files, no history), the one the setup cell clones")
    try:
        remotes = git(root, "remote", "-v").split()
    except (OSError, subprocess.CalledProcessError):
        raise cli.ConfigError("--repo_url makes a students' branch with git: run it in a git checkout") from None
    refused = subprocess.run(["git", "check-ref-format", f"refs/heads/{branch}"], cwd=root, capture_output=True)
    cli.require(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*", branch) and not refused.returncode, "--branch {!r} is "
                "not a name git takes for a branch (letters, digits, . _ / -; no '..', no '.lock' or '/' at the end, "
                "no '/.' or '//')", branch)
    cli.require(repo_url.rstrip("/") not in {r.rstrip("/") for r in remotes}, "--repo_url {} is a remote of this "
                "repository, whose history holds the answers: give the students' repository (push only --branch "
                "there)", repo_url)
    try:  # an existing branch is replaced only if lab.handout made it: one commit, no parents
        made = git(root, "log", "-1", "--format=%P|%ae", f"refs/heads/{branch}")
    except subprocess.CalledProcessError:
        return  # no such branch yet
    cli.require(made == f"|{EMAIL}", "--branch {}: a branch of this history has that name: name a new one", branch)


def students_branch(root, branch, files, message):
    """The branch `branch` of the repository at `root`: one commit without parents whose tree is
    `files` ({path: bytes}), made through a temporary index (the checkout is not touched) -> its id."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(GIT_INDEX_FILE=os.path.join(tmp, "index"))
        entries = []
        for path, data in files.items():
            blob = git(root, "hash-object", "-w", "--stdin", stdin=data)
            mode = "100755" if os.access(os.path.join(root, path), os.X_OK) else "100644"
            entries.append(f"{mode} {blob}\t{path}")
        git(root, "update-index", "--add", "--index-info", stdin="\n".join(entries).encode(), env=env)
        tree = git(root, "write-tree", env=env)
    who = dict(GIT_AUTHOR_NAME="lab.handout", GIT_AUTHOR_EMAIL=EMAIL, GIT_COMMITTER_NAME="lab.handout",
               GIT_COMMITTER_EMAIL=EMAIL)
    commit = git(root, "commit-tree", tree, "-m", message, env=who)
    git(root, "update-ref", f"refs/heads/{branch}", commit)
    return commit


def main(argv=None):
    p = argparse.ArgumentParser(description="the students' copy of the repository, without the answers")
    p.add_argument("--out_dir", default=os.path.join(ROOT, "out", "handout"), help="where the zip and notebook go")
    p.add_argument("--repo_url", default="", help="the students' repository, written into the notebook's setup cell")
    p.add_argument("--branch", default="", help="with --repo_url: the students' branch to make here and push there")
    args = p.parse_args(argv)
    checkpoint.check_out_dir(args.out_dir)  # a file, or a read-only folder: one line, nothing written
    cli.require(args.repo_url or not args.branch, "--branch names the students' branch of the --repo_url route: "
                "give --repo_url too (without it, hand out the zip)")
    if args.repo_url:  # every refusal before the zip is written
        check_route(ROOT, args.repo_url, args.branch)
    files = contents(ROOT, args.repo_url, args.branch)
    os.makedirs(args.out_dir, exist_ok=True)
    archive, nb = os.path.join(args.out_dir, f"{TOP}.zip"), os.path.join(args.out_dir, "lab.ipynb")
    try:  # each file whole under its temp name, then renamed
        with zipfile.ZipFile(archive + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
            for path, data in files.items():
                z.writestr(zipfile.ZipInfo.from_file(os.path.join(ROOT, path), f"{TOP}/{path}"), data,
                           zipfile.ZIP_DEFLATED)
        with open(nb + ".tmp", "w") as f:
            json.dump(notebook(args.repo_url, args.branch), f, indent=1)
        os.replace(archive + ".tmp", archive)
        os.replace(nb + ".tmp", nb)
    except OSError as e:  # a full disk: one line
        raise cli.ConfigError(f"could not write the handout in {args.out_dir}: {e.strerror or e}") from None
    finally:  # a full disk or a Ctrl-C midway: no half-written file left behind
        for tmp in (archive + ".tmp", nb + ".tmp"):
            if os.path.exists(tmp):
                os.remove(tmp)
    print(f"wrote {archive} ({len(files)} files, {os.path.getsize(archive):,} bytes; held back: "
          f"{', '.join(HELD_BACK)}) and {nb}")
    if args.repo_url:
        commit = students_branch(ROOT, args.branch, files, f"the lab's students' copy ({len(files)} files)")
        print(f"made branch {args.branch} ({commit[:12]}: the zip's files, no history); push it, and only it: "
              f"git push {args.repo_url} {args.branch}")
    return archive


if __name__ == "__main__":
    sys.exit(0 if cli.main_guard(main, prog="lab.handout") else 1)

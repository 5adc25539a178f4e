"""What installing costs: the disk size and number of distributions of a requirements file.

Follows the requirements (and -r includes) through each installed distribution's own requirements
(importlib.metadata: markers evaluated for this Python, extras not followed), then sums the size
of every installed file of each. Measures the environment it runs in: run it where the project
was installed by its own commands (torch first, then the file), e.g. a fresh virtual environment.

Run (from the repository root)
    python -m dev.install_size                                          # -> out/install/install.json
    python -m dev.install_size --out_dir results/bench                  # the committed numbers (README)
Writes install.json: per file (requirements.txt, requirements-dev.txt) the MiB, the distribution
count and the largest distributions, with the Python, the platform and the date.
"""

import argparse
import datetime
import importlib.metadata as md
import os
import platform
import re

from plumbing import cli  # first and cheap: a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "dev.install_size")

from plumbing import checkpoint

FILES = ("requirements.txt", "requirements-dev.txt")


def requirement_names(path):
    """The distributions a requirements file names (following -r), lower-case, '-' for '_'."""
    names = []
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line.startswith("-r"):
                names += requirement_names(os.path.join(os.path.dirname(path), line[2:].strip()))
            elif line:
                names.append(norm(re.split(r"[<>=!~ \[;]", line, maxsplit=1)[0]))
    return names


def norm(name):
    return name.lower().replace("_", "-")


def closure(names):
    """The installed distributions `names` need, their own requirements followed (no extras)."""
    seen, todo = {}, list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise cli.UserError(f"{name} is not installed here: install the requirements first "
                                "(pip install torch==2.13.0, then pip install -r requirements-dev.txt)") from None
        seen[name] = dist
        for req in dist.requires or []:
            spec, _, marker = req.partition(";")
            if "extra" in marker or (marker and not evaluate(marker)):
                continue
            todo.append(norm(re.split(r"[<>=!~ \[(]", spec.strip(), maxsplit=1)[0]))
    return seen


def evaluate(marker):
    """A PEP 508 environment marker without extras, for this interpreter (packaging's, if present)."""
    try:
        from packaging.markers import Marker
        return Marker(marker).evaluate()
    except ImportError:  # without packaging: follow it (an upper bound on the size)
        return True


def size_mib(dist):
    total = 0
    for f in dist.files or []:
        path = dist.locate_file(f)
        if os.path.isfile(path):
            total += os.path.getsize(path)
    return total / 2 ** 20


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out_dir", default="out/install", help="folder for install.json")
    a = p.parse_args(argv)
    checkpoint.check_out_dir(a.out_dir)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = dict(command=f"python -m dev.install_size --out_dir {a.out_dir}", python=platform.python_version(),
               platform=platform.platform(), date=datetime.date.today().isoformat(), files={})
    for name in FILES:
        dists = closure(requirement_names(os.path.join(root, name)))
        sizes = sorted(((size_mib(d), n) for n, d in dists.items()), reverse=True)
        out["files"][name] = dict(mib=round(sum(s for s, _ in sizes)), distributions=len(sizes),
                                  largest={n: round(s) for s, n in sizes[:6]},
                                  torch=md.version("torch"))
        print(f"{name}: {out['files'][name]['mib']:,} MiB in {len(sizes)} distributions; largest "
              + ", ".join(f"{n} {round(s)}" for s, n in sizes[:6]))
    checkpoint.make_out_dir(a.out_dir)
    checkpoint.atomic_json(out, os.path.join(a.out_dir, "install.json"))


if __name__ == "__main__":
    cli.main_guard(main, prog="dev.install_size")

"""What installing costs: the disk size and number of distributions of a requirements file.

Follows the requirements (and -r includes) through each installed distribution's own requirements
(importlib.metadata: markers evaluated for this Python, extras not followed), then sums the size
of every installed file of each. Measures the environment it runs in: run it where the project
was installed by its own commands (torch first, then the file), e.g. a fresh virtual environment.

Run (from the repository root)
    python -m dev.install_size                                          # -> out/install/install.json
    python -m dev.install_size --out_dir results/bench                  # the committed numbers (README)
Writes install.json: per file (requirements.txt, requirements-dev.txt) the MiB of the files installed,
the MiB they take on disk (what `du -sh .venv` counts, with pip's own files beside them), the
distribution count and the largest distributions, with the Python, the platform and the date.
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


def requirement_names(path, within=()):
    """The distributions a requirements file names (following -r), lower-case, '-' for '_'. A file that
    cannot be read, is not UTF-8 or includes itself (within: the files that -r led here) is one line."""
    path = os.path.realpath(path)
    chain = " -> ".join(os.path.basename(p) for p in within + (path,))
    if path in within:
        raise cli.UserError(f"{chain}: the -r includes go round in a circle; remove the -r line that closes it")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise cli.UserError(f"cannot read {path} ({chain}): {e.strerror}; fix the -r line or the file") from None
    except UnicodeDecodeError as e:
        raise cli.UserError(f"{path} is not UTF-8 text (byte {e.start} is {e.object[e.start]:#04x}): save it as "
                            "UTF-8") from None
    names = []
    for line in lines:
        line = line.split("#")[0].strip()
        if line.startswith("-r"):
            names += requirement_names(os.path.join(os.path.dirname(path), line[2:].strip()), within + (path,))
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
    """(MiB of its files, MiB they take on disk): the second is what `du` counts, every file rounded up to
    whole blocks of the file system."""
    files = [os.stat(p) for p in map(dist.locate_file, dist.files or []) if os.path.isfile(p)]
    return sum(st.st_size for st in files) / 2 ** 20, sum(st.st_blocks * 512 for st in files) / 2 ** 20


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
        sizes = sorted(((*size_mib(d), n) for n, d in dists.items()), reverse=True)
        rec = out["files"][name] = dict(mib=round(sum(s for s, _, _ in sizes)), distributions=len(sizes),
                                        disk_mib=round(sum(d for _, d, _ in sizes)),
                                        largest={n: round(s) for s, _, n in sizes[:6]}, torch=md.version("torch"))
        print(f"{name}: {rec['mib']:,} MiB in {len(sizes)} distributions ({rec['disk_mib']:,} MiB on disk); largest "
              + ", ".join(f"{n} {round(s)}" for s, _, n in sizes[:6]))
    checkpoint.make_out_dir(a.out_dir)
    checkpoint.atomic_json(out, os.path.join(a.out_dir, "install.json"))


if __name__ == "__main__":
    cli.main_guard(main, prog="dev.install_size")

"""Every command checks its output folder the same way (plumbing/checkpoint.py check_out_dir
and make_out_dir): an existing file, a path inside a file, a folder it may not write in, a folder
that cannot be created are each one line and exit status 2, before anything trains, and
nothing is written. Each command runs in-process (runpy), as `python X.py ...` would; and every
command prints its --help."""
import os
import runpy
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = {  # command -> (argv before the folder flag, the folder flag)
    "train": (["--preset", "cpu", "--device", "cpu", "--max_iters", "1"], "--out_dir"),
    "probe": (["--seeds", "1"], "--out_dir"),
    "probe fit": ([], "--out_dir"),
    "recall": (["--models", "linear", "--steps", "1", "--curriculum", "0", "--decay", "0"], "--out_dir"),
    "ablate": (["--preset", "cpu_bytes"], "--out_dir"),
    "scaling": ([], "--out_dir"),
    "content": ([], "--out_dir"),
    "bench": (["--quick", "--sections", "ema"], "--out"),
    "frontier": (["--quick"], "--out_dir"),
}


def bad_folders(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    return {"an existing file": (str(a_file), "is a file"),
            "a path inside a file": (str(a_file / "sub"), "lies inside the file"),
            "a folder it may not write in": ("/proc/self/ema_out", "is not writable"),
            "a folder that cannot be created": ("/sys/ema_out", "is not writable")}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.slow
def test_every_command_refuses_a_bad_output_folder_in_one_line(command, tmp_path, monkeypatch, capsys):
    argv, flag = COMMANDS[command]
    script, *sub = command.split()
    monkeypatch.chdir(tmp_path)  # anything written by mistake would land here
    for what, (path, message) in bad_folders(tmp_path).items():
        target = os.path.join(path, "bench.json") if flag == "--out" else path
        monkeypatch.setattr(sys, "argv", [f"{script}.py", *sub, *argv, flag, target])
        monkeypatch.syspath_prepend(ROOT)
        with pytest.raises(SystemExit) as e:
            runpy.run_path(os.path.join(ROOT, f"{script}.py"), run_name="__main__")
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and message in err[0], (command, what, err)
        assert sorted(os.listdir(tmp_path)) == ["a_file"], (command, what)


@pytest.mark.parametrize("command", list(COMMANDS) + ["data", "sample"])
@pytest.mark.slow
def test_every_command_prints_its_help(command, monkeypatch, capsys):
    """`python X.py --help` works for every command (and `python probe.py fit --help`)."""
    script, *sub = command.split()
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *sub, "--help"])
    monkeypatch.syspath_prepend(ROOT)
    with pytest.raises(SystemExit) as e:
        runpy.run_path(os.path.join(ROOT, f"{script}.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage:") and "--" in out, out[:200]

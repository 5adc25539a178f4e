"""dev/seeds.py, the driver of the map's seeded curves: its plan (arms at their own learning rate,
seed ranges in ASCII digits and of a sane size), the finished-record rule, and its processes: a stop
while a curve starts, and a driver killed outright, leave no curve running."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dev import map as M
from plumbing import cli
from tests.test_map import repo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_seeds_plan_and_finished_curves(tmp_path):
    """dev.seeds: a plan names each (model, seed) once in its order; a finished record is not trained
    again on a fresh clone (its run folder gone), a curve without its cooldown is."""
    from dev import seeds
    assert seeds.parse_plan("gpt:0-2,delta:4") == [("gpt", 0), ("gpt", 1), ("gpt", 2), ("delta", 4)]
    assert seeds.parse_plan(seeds.PLAN)[:3] == [("gpt", 0), ("delta", 0), ("hybrid_ema_kv", 0)]
    for bad in ("lstm:0", "gpt:a", "gpt:0,gpt:0", "", "delta:\u00b2", "delta:0-99999999", "delta@x:0", "delta@0:1",
                "delta:3-1"):
        with pytest.raises(cli.UserError) as e:
            seeds.parse_plan(bad)
        assert "\n" not in str(e.value) and "--plan" in str(e.value)
    root = repo(tmp_path, {"gpt": [0.8]})
    out = root / M.SEEDS
    assert seeds.finished(str(out), "gpt", 0) and not seeds.finished(str(out), "gpt", 1)
    rec = json.loads((out / "gpt_s0" / "scaling.json").read_text())
    del rec["curves"]["gpt_c128"]["cooldown"]
    (out / "gpt_s0" / "scaling.json").write_text(json.dumps(rec))
    assert not seeds.finished(str(out), "gpt", 0)


def test_collect_copies_each_finished_curve_once_and_no_run(tmp_path):
    """--collect FROM: the plan's finished curves of a campaign's folder (records, log, seeds.log) into
    --out_dir, not an unfinished one nor any run folder; called again it copies nothing, and a curve
    finished since is copied then."""
    from dev import seeds
    source = repo(tmp_path, {"gpt": [0.8, 0.7]}) / M.SEEDS
    (source / "gpt_s0" / "runs").mkdir()  # the checkpoints stay in the campaign's folder
    (source / "gpt_s0.log").write_text("gpt's log\n")
    (source / "seeds.log").write_text("gpt seed 0 | 50 min\n")
    done = (source / "gpt_s1" / "scaling.json").read_text()
    rec = json.loads(done)
    del rec["curves"]["gpt_c128"]["cooldown"]
    (source / "gpt_s1" / "scaling.json").write_text(json.dumps(rec))
    out = tmp_path / "main"
    argv = ["--out_dir", str(out), "--plan", "gpt:0-1", "--collect", str(source)]
    assert seeds.main(argv) == [("gpt", 0)]
    assert sorted(os.listdir(out)) == ["gpt_s0", "gpt_s0.log", "seeds.log"]
    assert os.listdir(out / "gpt_s0") == ["scaling.json"]  # the runs/ folder stays in the campaign's
    assert all((out / f).read_bytes() == (source / f).read_bytes() for f in ("gpt_s0/scaling.json", "gpt_s0.log",
                                                                             "seeds.log"))
    assert seeds.main(argv) == []
    (source / "gpt_s1" / "scaling.json").write_text(done)
    assert seeds.main(argv) == [("gpt", 1)] and seeds.finished(str(out), "gpt", 1)
    with pytest.raises(cli.UserError, match="--collect .* is not a folder"):
        seeds.main(argv[:-1] + [str(tmp_path / "nowhere")])


def test_a_stop_while_a_curve_starts_does_not_lose_its_process(tmp_path, monkeypatch):
    """A Ctrl-C that lands inside Popen (a loaded machine forks slowly) once left a curve's process,
    in a session of its own, running after the driver had ended: the stop now waits until the
    process is in the driver's list, and the driver stops it."""
    import signal
    import subprocess
    import sys
    from dev import seeds
    started, real = [], subprocess.Popen

    def popen(*a, **kw):  # start a stand-in curve, then take a Ctrl-C before Popen returns
        started.append(real([sys.executable, "-c", "import time; time.sleep(60)"], **kw))
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        return started[-1]

    monkeypatch.setattr(seeds.subprocess, "Popen", popen)
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(KeyboardInterrupt):
            seeds.run([("gpt", 0)], str(tmp_path), workers=1)
        assert started and started[0].poll() is not None, "the curve's process outlived the driver"
        assert signal.getsignal(signal.SIGTERM) is before, "run left its SIGTERM handler (CI's hang, tests/conftest.py)"
    finally:
        for p in started:
            p.kill()


def test_an_arm_at_its_own_learning_rate_has_its_own_folder_and_flag():
    from dev import seeds
    jobs = seeds.parse_plan("delta@4e-3:0-1,gpt:0,delta@0.004:2")
    assert jobs == [("delta@0.004", 0), ("delta@0.004", 1), ("gpt", 0), ("delta@0.004", 2)]
    assert seeds.folder("delta@0.004", 1) == "delta_lr0.004_s1" and seeds.folder("gpt", 0) == "gpt_s0"
    cmd = seeds.command("delta@0.004", 1, "OUT")
    assert cmd[cmd.index("--lr") + 1] == "0.004" and cmd[cmd.index("--models") + 1] == "delta"
    assert cmd[-1].endswith(os.path.join("OUT", "delta_lr0.004_s1")) and "--lr" not in seeds.command("gpt", 0, "OUT")
    screen = seeds.parse_plan(seeds.SCREEN)
    assert len(screen) == len(set(screen)) == 36 and {s for _, s in screen} == {0, 1, 2}


def test_a_curve_dies_with_a_driver_killed_outright(tmp_path):
    """kill -9 of the driver runs no handler of its: the curve (in a session of its own) gets Linux's
    parent-death signal, a SIGTERM, and ends; without it, it ran on and held its folder."""
    pid_file = tmp_path / "pid"
    driver = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from dev import seeds
seeds.command = lambda arm, seed, out: [sys.executable, "-c",
    "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"]
seeds.run([("gpt", 0)], {str(tmp_path)!r}, workers=1)
"""], cwd=ROOT)
    try:
        for _ in range(300):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        curve = int(pid_file.read_text())
        driver.kill()
        driver.wait()
        for _ in range(100):
            try:
                os.kill(curve, 0)
            except ProcessLookupError:
                break
            try:
                with open(f"/proc/{curve}/status") as f:
                    if "zombie" in f.read():
                        break
            except OSError:  # gone between the two looks
                break
            time.sleep(0.1)
        else:
            os.kill(curve, signal.SIGKILL)
            pytest.fail("the curve outlived its driver's kill -9")
    finally:
        if driver.poll() is None:
            driver.kill()

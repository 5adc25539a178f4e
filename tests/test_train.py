"""train.py as a specification: settings, outputs, exact resume, Ctrl-C, faults, bad inputs.

Tiny SPEN (1 block, width 32, T=16) on the offline 'builtin' corpus, in-process through
train.cli_main(argv) / train.main(cfg), except the Ctrl-C and DDP runs (subprocesses). A full or read-only
disk: tests/test_train_disk.py.
Run: python -m pytest tests/test_train.py  (the first run tokenizes builtin into .cache/data)
"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from plumbing import checkpoint, cli, runtime
import train
from spen import SPEN, SPENConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--preset", "cpu", "--device", "cpu", "--dtype", "fp32", "--n_layer", "1", "--n_embd", "32",
        "--block_size", "16", "--batch_size", "2", "--eval_iters", "2", "--log_interval", "1",
        "--warmup_iters", "2", "--lr", "3e-3"]


def run(out_dir, *extra):
    return train.main(train.parse_args(TINY + ["--out_dir", str(out_dir), *map(str, extra)]))


def records(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def weights(path):
    return torch.load(path, weights_only=True)["model"]


def test_presets_and_flags_resolve_in_order():
    a = train.make_config()
    assert a.n_embd == 768 and a.eval_data == "c4" and a.max_iters == 15259 and a.compile
    assert a.batch_size * a.block_size * a.grad_accum == 524288  # ~0.5M tokens per step
    assert a.max_iters * 524288 >= 8e9 > (a.max_iters - 1) * 524288  # 8B tokens
    a = train.parse_args(["--preset", "cpu", "--n_layer", "2", "--no-compile"])
    assert (a.data, a.eval_data, a.n_layer, a.n_embd, a.compile) == ("builtin", "", 2, 128, False)
    lrs = [train.cosine_lr(s, a.lr, a.min_lr, a.warmup_iters, a.lr_decay_iters or a.max_iters)
           for s in range(a.max_iters + 1)]
    assert max(lrs) == pytest.approx(a.lr) and lrs[-1] == pytest.approx(a.min_lr)
    with pytest.raises(cli.ConfigError, match="unknown setting"):
        train.make_config("cpu", n_layers=3)
    # the parser is generated from the fields: every field is a flag with its help
    help_text = train.get_parser().format_help()
    assert all(f"--{f.name}" in help_text for f in train.fields(train.TrainConfig))


def test_cli_smoke_writes_outputs_and_eval_only_agrees(tmp_path):
    out = tmp_path / "run"
    res = run(out, "--max_iters", 4, "--eval_interval", 2, "--lr", 1e-2)  # 4 steps: a rate that shows learning
    assert {"val_loss", "params", "tokens", "seconds", "out_dir", "yardsticks"} <= set(res)
    assert res["tokens"] == 4 * 2 * 16 and res["params"] > 50257 * 32
    for name in ("log.txt", "metrics.jsonl", "ckpt_last.pt", "ckpt_best.pt"):
        assert (out / name).exists(), name
    log = (out / "log.txt").read_text()
    assert "argv:" in log and "git:" in log and f"params: {res['params']:,}" in log and "tok/s" in log
    assert "yardsticks on builtin val: unigram" in log  # every loss is read against n-gram models
    recs = records(out)
    assert [r["step"] for r in recs if "train_loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in recs if "val_loss" in r] == [0, 2, 4]
    assert recs[0]["val_loss"] == pytest.approx(math.log(50257), abs=0.5)  # untrained: ~uniform
    assert recs[-1]["val_loss"] < recs[0]["val_loss"] - 0.02  # 4 updates already lower it
    ck = torch.load(out / "ckpt_last.pt", weights_only=True)
    assert ck["step"] == 4 and ck["kind"] == "spen" and SPENConfig(**ck["config"]).n_embd == 32
    assert ck["train"]["n_embd"] == 32 and ck["train"]["data"] == "builtin"
    assert not [p for p in os.listdir(out) if ".tmp" in p]  # atomic writes leave no temp files
    # --eval_only on the checkpoint (its corpus and context): the protocol of tests/test_eval.py
    ev = train.main(train.parse_args(["--eval_only", "--init_from", str(out / "ckpt_last.pt"), "--eval_tokens",
                                      "161", "--out_dir", str(tmp_path / "ev")]))
    saved = json.loads((tmp_path / "ev" / "eval.json").read_text())["results"]["builtin"]
    assert saved["val_loss"] == pytest.approx(ev["results"]["builtin"]["val_loss"])
    assert saved["protocol"]["windows"] == 10 and saved["protocol"]["tokens_counted"] == 160
    assert abs(saved["val_loss"] - res["val_loss"]) < 0.3  # the training estimate is near it
    assert saved["perplexity"] == pytest.approx(math.exp(saved["val_loss"]))
    assert saved["yardsticks"]["bigram"] < saved["yardsticks"]["unigram"]


def test_resume_is_exact_and_tolerates_a_partial_metrics_line(tmp_path, monkeypatch):
    # Dropout on, so the restored RNG state matters too; the cosine spans 6 steps in both runs.
    common = ["--dropout", 0.1, "--eval_interval", 3, "--lr_decay_iters", 6]
    straight = run(tmp_path / "a", *common, "--max_iters", 6)
    run(tmp_path / "b", *common, "--max_iters", 3)
    with open(tmp_path / "b" / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "train_lo')  # a crash cut the last line short
    resumed = run(tmp_path / "b", *common, "--max_iters", 6, "--resume")
    la = [r["train_loss"] for r in records(tmp_path / "a") if "train_loss" in r]
    lb = [r["train_loss"] for r in records(tmp_path / "b") if "train_loss" in r]
    assert len(la) == 6 and la == lb  # bit-identical, not merely close
    assert resumed["val_loss"] == straight["val_loss"] and resumed["tokens"] == straight["tokens"]
    sa, sb = weights(tmp_path / "a" / "ckpt_last.pt"), weights(tmp_path / "b" / "ckpt_last.pt")
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # resuming a finished run with the same --max_iters does nothing and keeps its numbers; it reads
    # its checkpoint once (parse_args takes the settings, the run the weights, from one torch.load)
    loads, real_load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: loads.append(str(f)) or real_load(f, *a, **k))
    again = run(tmp_path / "b", *common, "--max_iters", 6, "--resume")
    assert loads == [str(tmp_path / "b" / "ckpt_last.pt")]
    assert again["val_loss"] == straight["val_loss"] and len(records(tmp_path / "b")) == len(records(tmp_path / "a"))


@pytest.mark.slow
def test_ctrl_c_saves_and_resume_gives_the_same_weights(tmp_path, one_thread):
    """A real SIGINT at a random moment of a subprocess run, then --resume, equals a straight run.
    One thread everywhere: the same reduction order in every process, so weights are bit-equal."""
    args = TINY + ["--max_iters", "40", "--eval_interval", "20", "--lr_decay_iters", "40"]
    straight = tmp_path / "straight"
    run(straight, *args[len(TINY):])
    out = tmp_path / "interrupted"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "train.py", *args, "--out_dir", str(out)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:  # wait until training is under way
        if (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    time.sleep(0.3 * torch.rand(()).item())  # a random moment inside the loop
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr and "interrupted: saved" in stdout
    stopped_at = torch.load(out / "ckpt_last.pt", weights_only=True)["step"]
    assert 0 < stopped_at < 40
    run(out, *args[len(TINY):], "--resume")
    sa, sb = weights(straight / "ckpt_last.pt"), weights(out / "ckpt_last.pt")
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    steps = [r["step"] for r in records(out) if "train_loss" in r]
    assert steps == list(range(1, 41))  # every step recorded exactly once


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    class NaNAfter(SPEN):
        """SPEN whose training loss turns NaN from the 5th training forward on."""
        calls = 0

        def forward(self, idx, targets=None):
            logits, loss = super().forward(idx, targets)
            if self.training:
                NaNAfter.calls += 1
                if NaNAfter.calls >= 5:
                    loss = loss * float("nan")
            return logits, loss

    monkeypatch.setitem(checkpoint.MODELS, "spen", (SPENConfig, NaNAfter))
    with pytest.raises(SystemExit, match="non-finite loss") as exc:
        run(tmp_path, "--max_iters", 10, "--eval_interval", 3)
    assert "\n" not in str(exc.value) and "ckpt_last.pt" in str(exc.value)
    ck = torch.load(tmp_path / "ckpt_last.pt", weights_only=True)
    assert ck["step"] == 3  # the checkpoint from the last eval before the NaN, intact
    assert all(torch.isfinite(v).all() for v in ck["model"].values())
    assert max(r["step"] for r in records(tmp_path)) == 4  # iteration 5 was not recorded or applied


def test_a_second_run_in_the_same_folder_is_refused(tmp_path):
    with checkpoint.run_lock(str(tmp_path)):  # as a live run holds it
        with pytest.raises(checkpoint.CheckpointError, match="in use"):
            run(tmp_path, "--max_iters", 1, "--eval_interval", 1)
    (tmp_path / ".lock").write_text("999999")  # left by a killed run: the kernel dropped its flock
    assert run(tmp_path, "--max_iters", 1, "--eval_interval", 1)["step"] == 1


@pytest.mark.slow
def test_a_death_between_a_record_and_its_checkpoint_loses_and_repeats_nothing(tmp_path, monkeypatch):
    """The run dies after step 4's record (with its val_loss) and ckpt_best, before ckpt_last: resume
    drops the records past ckpt_last's step 2 and recomputes them bit-identically, once each."""
    common = ["--max_iters", 4, "--eval_interval", 2, "--lr_decay_iters", 4, "--lr", 1e-2]
    run(tmp_path / "a", *common)
    real_save = checkpoint.atomic_save

    class Died(BaseException):  # no handler catches it, as none runs on a SIGKILL
        pass

    def dies_at_step_4(obj, path):
        if obj["step"] == 4 and path.endswith("ckpt_last.pt"):
            raise Died
        real_save(obj, path)

    monkeypatch.setattr(checkpoint, "atomic_save", dies_at_step_4)
    b = tmp_path / "b"
    with pytest.raises(Died):
        run(b, *common)
    monkeypatch.setattr(checkpoint, "atomic_save", real_save)
    assert (torch.load(b / "ckpt_last.pt", weights_only=True)["step"],
            torch.load(b / "ckpt_best.pt", weights_only=True)["step"]) == (2, 4)
    assert [r["step"] for r in records(b)] == [0, 1, 2, 3, 4] and "val_loss" in records(b)[-1]
    run(b, *common, "--resume")

    def numbers(out):
        return [{k: v for k, v in r.items() if k != "ms"} for r in records(out)]
    assert numbers(b) == numbers(tmp_path / "a")  # steps 0..4 once each, the same numbers
    for name in ("ckpt_last.pt", "ckpt_best.pt"):
        sa, sb = weights(tmp_path / "a" / name), weights(b / name)
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # a fresh start over that run, dead before its first checkpoint, leaves no checkpoint of the
    # old run beside the new records (a --resume then says 'not found': start again)
    def dies_at_once(obj, path):
        raise Died

    monkeypatch.setattr(checkpoint, "atomic_save", dies_at_once)
    with pytest.raises(Died):
        run(b, *common)
    assert not (b / "ckpt_last.pt").exists() and not (b / "ckpt_best.pt").exists()
    assert [r["step"] for r in records(b)] == [0]


def test_the_next_start_removes_what_a_killed_write_left_never_what_a_live_run_holds(tmp_path):
    run(tmp_path, "--max_iters", 2, "--eval_interval", 2)
    stale = ["ckpt_last.pt.tmp999999", f"ckpt_best.pt.tmp{os.getpid()}", "metrics.jsonl.tmp123", "run.json.tmp7"]
    for name in stale:  # a dead writer's (our own pid too: a restarted container reuses pids)
        (tmp_path / name).write_bytes(b"half a file")
    (tmp_path / "notes.txt.tmp5").write_text("not a file of the run: kept")
    with checkpoint.run_lock(str(tmp_path)):  # a live run holds the folder: its temp files are its own
        with pytest.raises(checkpoint.CheckpointError, match="in use"):
            run(tmp_path, "--max_iters", 4, "--eval_interval", 2, "--resume")
    assert all((tmp_path / name).exists() for name in stale)
    assert run(tmp_path, "--max_iters", 4, "--eval_interval", 2, "--resume")["step"] == 4
    assert [p for p in os.listdir(tmp_path) if ".tmp" in p] == ["notes.txt.tmp5"]
    assert "removed 4 temporary file(s)" in (tmp_path / "log.txt").read_text()


def test_resume_refuses_another_runs_checkpoint_in_one_line(tmp_path, capsys):
    spen_run, gpt_run = tmp_path / "spen", tmp_path / "gpt"
    run(spen_run, "--max_iters", 2, "--eval_interval", 2)
    run(gpt_run, "--model", "gpt", "--max_iters", 1, "--eval_interval", 1)
    assert json.loads((spen_run / "run.json").read_text())["kind"] == "spen"
    kept = {name: (spen_run / name).read_bytes() for name in ("metrics.jsonl", "ckpt_best.pt")}
    shutil.copy(gpt_run / "ckpt_last.pt", spen_run / "ckpt_last.pt")  # a GPT checkpoint in the SPEN folder

    def refused(out, *flags):
        with pytest.raises(SystemExit) as exc:
            train.cli_main(TINY + ["--out_dir", str(out), "--resume", "--max_iters", "4", *flags])
        err = capsys.readouterr().err
        assert exc.value.code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
        assert str(out / "ckpt_last.pt") in err, err
        return err
    err = refused(spen_run)
    assert "model gpt (this folder's run: spen)" in err and "start a new --out_dir with --init_from" in err
    assert all((spen_run / name).read_bytes() == data for name, data in kept.items())  # nothing rewritten
    ident = json.loads((gpt_run / "run.json").read_text())
    (gpt_run / "run.json").write_text(json.dumps(dict(ident, config=dict(ident["config"], n_embd=64))))
    assert "n_embd 32 (this folder's run: 64)" in refused(gpt_run)  # the same kind, another shape
    for corrupt in ("[1, 2]", "{}", '{"kind": "gpt", "config": [1]}', json.dumps(ident)[:30]):
        (gpt_run / "run.json").write_text(corrupt)
        assert f"{gpt_run / 'run.json'} is corrupt" in refused(gpt_run, "--model", "gpt")
    # a folder from before run.json: the flags name its model (TINY's preset asks for SPEN)...
    os.remove(gpt_run / "run.json")
    err = refused(gpt_run)
    assert "model gpt (the flags ask for: spen)" in err and "start a new --out_dir with --init_from" in err
    with pytest.raises(checkpoint.CheckpointError, match="n_embd"):  # in-process
        train.main(train.make_config("cpu", model="gpt", n_layer=1, n_embd=64, out_dir=str(gpt_run), resume=True))
    assert not (gpt_run / "run.json").exists()  # a refusal writes nothing
    # ...and a resume with the run's own flags goes on, and names the folder from then on
    assert run(gpt_run, "--model", "gpt", "--max_iters", 2, "--resume")["step"] == 2
    assert json.loads((gpt_run / "run.json").read_text()) == ident


def test_checkpoint_settings_win_and_contradictions_are_refused(tmp_path, capsys):
    run(tmp_path / "a", "--max_iters", 1, "--eval_interval", 1)
    ck = str(tmp_path / "a" / "ckpt_last.pt")
    with pytest.raises(SystemExit):  # typed model flags that contradict the checkpoint
        train.parse_args(TINY + ["--init_from", ck, "--model", "gpt", "--n_embd", "128"])
    assert "--model gpt (checkpoint: spen)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.parse_args(TINY + ["--out_dir", str(tmp_path / "a"), "--resume", "--n_embd", "64"])
    assert "differs from the checkpoint" in capsys.readouterr().err
    # fine-tuning from a checkpoint without model flags trains, logs and saves the checkpoint's model
    cfg = train.parse_args(["--preset", "cpu", "--init_from", ck, "--out_dir", str(tmp_path / "b"),
                            "--max_iters", "1", "--eval_interval", "1", "--eval_iters", "1", "--block_size", "16"])
    assert (cfg.n_layer, cfg.n_embd) == (1, 32)
    train.main(cfg)
    assert torch.load(tmp_path / "b" / "ckpt_last.pt", weights_only=True)["config"]["n_embd"] == 32


def test_bytes_tokenizer_sets_the_vocabulary_and_the_checkpoint_keeps_it(tmp_path, capsys):
    cfg = train.make_config("cpu_bytes")
    assert (cfg.tokenizer, cfg.n_layer, cfg.n_embd, cfg.data) == ("bytes", 4, 128, "builtin")
    assert train.make_config("cpu").tokenizer == "gpt2"  # BPE stays the default
    res = run(tmp_path / "b", "--tokenizer", "bytes", "--max_iters", 2, "--eval_interval", 2)
    ck = torch.load(tmp_path / "b" / "ckpt_last.pt", weights_only=True)
    assert ck["train"]["tokenizer"] == "bytes" and ck["config"]["vocab_size"] == 256
    assert ck["model"]["lm_head.weight"].shape[0] == 256  # a 256-row head: no padding to 50304
    assert res["yardsticks"]["tokenizer"] == "bytes" and res["yardsticks"]["bigram"] < res["yardsticks"]["unigram"]
    assert math.isfinite(res["val_loss"]) and res["val_loss"] < math.log(50257)  # scored over 256 symbols
    # resuming keeps the checkpoint's tokenizer; a typed contradiction is refused
    assert train.parse_args(TINY + ["--out_dir", str(tmp_path / "b"), "--resume"]).tokenizer == "bytes"
    with pytest.raises(SystemExit):
        train.parse_args(TINY + ["--out_dir", str(tmp_path / "b"), "--resume", "--tokenizer", "gpt2"])
    assert "--tokenizer gpt2 (checkpoint: bytes)" in capsys.readouterr().err


def test_eval_only_gpt2_path_and_gpt_training(tmp_path, monkeypatch):
    # The hub is offline here: stand a tiny random GPT in for GPT.from_pretrained('gpt2').
    from gpt import GPT, GPTConfig
    tiny = GPT(GPTConfig(block_size=8, n_layer=1, n_head=1, n_embd=16))
    monkeypatch.setattr(GPT, "from_pretrained", classmethod(lambda cls, name: tiny))
    monkeypatch.setattr(runtime, "hub_weights_unreachable", lambda name: None)  # as if online
    ev = run(tmp_path / "g2", "--eval_only", "--init_from", "gpt2", "--eval_tokens", 33)
    saved = json.loads((tmp_path / "g2" / "eval.json").read_text())
    got = saved["results"]["builtin"]
    assert saved["kind"] == "gpt" and got["val_loss"] == ev["results"]["builtin"]["val_loss"]
    assert got["protocol"]["block_size"] == 8 and got["protocol"]["windows"] == 4  # capped at the model's 8
    assert abs(got["val_loss"] - math.log(50257)) < 0.5
    res = run(tmp_path / "gpt", "--model", "gpt", "--max_iters", 2, "--eval_interval", 2)
    assert res["kind"] == "gpt" and math.isfinite(res["val_loss"])


def test_local_text_validates_on_itself_and_tiny_corpora_are_refused(tmp_path, capsys, forget_cache):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):  # 12 documents: 2 go to val
        (corpus / f"{i}.txt").write_text(" ".join(f"word{i} number{j}" for j in range(200)))
    forget_cache(f"files:{corpus}")
    cfg = train.parse_args(TINY + ["--data", f"files:{corpus}", "--out_dir", str(tmp_path / "r")])
    assert cfg.eval_data == ""  # the cpu preset does not pin validation to builtin
    train.main(train.parse_args(TINY + ["--data", f"files:{corpus}", "--out_dir", str(tmp_path / "r"),
                                        "--max_iters", "1", "--eval_interval", "1"]))
    assert f"yardsticks on files:{corpus} val" in (tmp_path / "r" / "log.txt").read_text()
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("too short")
    forget_cache(f"files:{tiny}")
    with pytest.raises(SystemExit) as exc:
        train.cli_main(TINY + ["--data", f"files:{tiny}", "--out_dir", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and err.count("\n") == 1 and "block_size" in err
    assert not (tmp_path / "t").exists()  # nothing written


# Each row: the flags, a fragment of the one-line error, the exit status.
BAD_INPUTS = [
    (["--grad_clip", "-1"], "--grad_clip must be", 2),
    (["--lr", "0"], "--lr must be", 2),
    (["--lr", "-1"], "--lr must be", 2),
    (["--lr", "abc"], "invalid float value", 2),
    (["--max_iters", "-5"], "--max_iters must be", 2),
    (["--block_size", "1"], "--block_size must be", 2),
    (["--block_size", "0"], "--block_size must be", 2),
    (["--batch_size", "0"], "--batch_size must be", 2),
    (["--grad_accum", "0"], "--grad_accum must be", 2),
    (["--eval_interval", "0"], "--eval_interval must be", 2),
    (["--log_interval", "0"], "--log_interval must be", 2),
    (["--eval_iters", "0"], "--eval_iters must be", 2),
    (["--n_layer", "0"], "--n_layer must be", 2),
    (["--n_embd", "0"], "--n_embd must be", 2),
    (["--dropout", "1.5"], "--dropout must be", 2),
    (["--beta1", "1.5"], "--beta1 must be", 2),
    (["--min_lr", "1"], "--min_lr must be", 2),
    (["--device", "tpu"], "--device must be auto, cpu, cuda, cuda:N or mps", 2),
    (["--predictor", "lstm"], "predictor", 2),
    (["--predictor", "linear", "--reads", "history"], "model settings", 2),
    (["--eval_only"], "--eval_only needs a trained model", 2),
    (["--resume", "--init_from", "x.pt"], "--resume continues out_dir/ckpt_last.pt", 2),
    (["--resume"], "not found", 2),
    (["--init_from", "missing.pt"], "not found", 2),
    (["--preset", "gpu"], "invalid choice", 2),
    (["--data", "nope"], "unknown dataset 'nope'", 1),
    (["--data", "c4"], "'c4' has no split 'train'", 1),
]
if not torch.cuda.is_available():
    BAD_INPUTS.append((["--device", "cuda"], "sees no CUDA GPU", 2))
if not torch.backends.mps.is_available():
    BAD_INPUTS.append((["--device", "mps"], "MPS (Apple GPU) is not available", 2))


@pytest.mark.parametrize("flags,message,status", BAD_INPUTS, ids=[" ".join(r[0]) for r in BAD_INPUTS])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, flags, message, status):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        train.cli_main(TINY + ["--out_dir", str(out)] + flags)
    err = capsys.readouterr().err
    assert exc.value.code == status, err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()  # nothing written before the inputs are checked


def unwritable_folder(tmp_path):
    """A folder this process cannot write in: mode 0o500, or, for root (who writes anywhere),
    /proc/sys (read-only to every user)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    return str(folder) if not os.access(folder, os.W_OK) else "/proc/sys"


@pytest.mark.parametrize("where,message", [("file", "is a file; name a folder"),
                                           ("inside", "lies inside the file"),
                                           ("unwritable", "is not writable")])
def test_an_out_dir_that_cannot_hold_a_run_is_one_line(tmp_path, capsys, where, message):
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    out = {"file": str(f), "inside": str(f / "run"), "unwritable": None}[where] or \
        os.path.join(unwritable_folder(tmp_path), "run")
    assert not os.access(os.path.dirname(out), os.W_OK) or where != "unwritable"
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(SystemExit) as exc:
        train.cli_main(TINY + ["--out_dir", out, "--max_iters", "1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == before and f.read_text() == "keep me"  # nothing written
    assert not os.path.exists(out) or where == "file"


def test_a_bug_inside_the_model_keeps_its_traceback(tmp_path, monkeypatch):
    """Only a user's mistakes become one line: a ValueError raised inside forward (a shape bug,
    say) propagates out of cli_main with its traceback."""
    class Broken(SPEN):
        def forward(self, idx, targets=None):
            raise ValueError("shapes (2, 16, 32) and (31, 32) do not match")

    monkeypatch.setitem(checkpoint.MODELS, "spen", (SPENConfig, Broken))
    with pytest.raises(ValueError, match="do not match") as exc:
        train.cli_main(TINY + ["--out_dir", str(tmp_path / "run"), "--max_iters", "1"])
    assert any(entry.name == "forward" for entry in exc.traceback)


def test_default_preset_without_gpu_names_a_command_that_works(capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the message shown on a machine without CUDA")
    with pytest.raises(SystemExit):
        train.cli_main([])
    assert "python train.py --preset cpu" in capsys.readouterr().err


def test_a_gpu_torch_cannot_see_is_named_with_the_fix(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(runtime.shutil, "which", lambda cmd: "/usr/bin/nvidia-smi" if cmd == "nvidia-smi" else None)
    for flags in ([], ["--device", "cuda"]):  # auto falls back to the CPU; cuda is refused
        with pytest.raises(SystemExit):
            train.cli_main(flags)
        err = capsys.readouterr().err
        assert "torch" in err and "cannot see it" in err and "download.pytorch.org/whl/cu12" in err, err
        assert err.count("\n") == 1


@pytest.mark.slow
def test_ddp_two_process_gloo_smoke(tmp_path):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", "train.py",
           *TINY, "--grad_accum", "2", "--max_iters", "3", "--eval_interval", "3", "--out_dir", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert [r["step"] for r in records(out) if "train_loss" in r] == [1, 2, 3]
    log = (out / "log.txt").read_text()
    assert "x 2 process" in log and log.count("argv:") == 1  # only rank 0 logs
    assert torch.load(out / "ckpt_last.pt", weights_only=True)["step"] == 3


def test_cosine_lr_warms_up_decays_and_stays_flat():
    lrs = [train.cosine_lr(s, 1e-3, 1e-4, warmup=10, decay_end=100) for s in range(120)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)  # linear warmup, peak at its end
    assert max(lrs) == pytest.approx(1e-3) and all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[55] == pytest.approx(0.55e-3)  # half way down the cosine: the mean of lr and min_lr
    assert lrs[100:] == [1e-4] * 20
    # the form recall.py trains with: cosine to peak / 10 at its last step
    steps, warm, peak = 50, 5, 2e-3
    for s in range(warm, steps):
        frac = (s - warm) / (steps - 1 - warm)
        assert train.cosine_lr(s, peak, peak / 10, warm, steps - 1) == pytest.approx(
            peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))))


def test_cooldown_scales_the_last_steps_linearly_to_zero():
    """WSD: a constant rate (min_lr = lr) for 80 steps, then 20 steps down to lr / 20 at the last."""
    lr = lambda s: train.cosine_lr(s, 2e-3, 2e-3, warmup=5, decay_end=100, cooldown=20, end=100)
    assert [lr(s) for s in range(5, 80)] == [2e-3] * 75  # the trunk's constant rate, untouched
    assert [lr(s) for s in range(80, 100)] == pytest.approx([2e-3 * (100 - s) / 20 for s in range(80, 100)])
    assert lr(99) == pytest.approx(2e-3 / 20) and all(lr(s) > lr(s + 1) for s in range(80, 99))
    assert train.cosine_lr(50, 2e-3, 2e-3, 5, 100) == lr(50)  # no cooldown: the same schedule


def test_resume_with_the_folders_own_block_list_goes_on(tmp_path):
    """--resume --predictor <the folder's own list> is checked against the folder's depth, not the preset's:
    a 2-block hybrid saved by a run resumes with its spec typed again (the preset says 12 blocks)."""
    spec = "delta,softmax_attn(reads=history)"
    run(tmp_path, "--n_layer", 2, "--predictor", spec, "--max_iters", 1, "--eval_interval", 1)
    cfg = train.parse_args(["--out_dir", str(tmp_path), "--resume", "--predictor", spec, "--max_iters", "2"])
    assert (cfg.n_layer, cfg.predictor) == (2, spec)
    assert train.main(cfg)["step"] == 2


def test_a_checkpoint_from_before_the_digest_resumes_exactly(tmp_path):
    """A run started by the code before checkpoints carried a digest of their weights (a checkpoint
    without one) still resumes, to the same weights as a straight run."""
    common = ["--eval_interval", 2, "--lr_decay_iters", 4]
    run(tmp_path / "a", *common, "--max_iters", 4)
    run(tmp_path / "b", *common, "--max_iters", 2)
    path = tmp_path / "b" / "ckpt_last.pt"
    ck = torch.load(path, weights_only=True)
    assert ck.pop("digest") == checkpoint.digest(ck["model"])
    torch.save(ck, path)  # the older format: no digest
    run(tmp_path / "b", *common, "--max_iters", 4, "--resume")
    sa, sb = weights(tmp_path / "a" / "ckpt_last.pt"), weights(tmp_path / "b" / "ckpt_last.pt")
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_damaged_checkpoint_is_one_line(tmp_path, capsys):
    """Bytes zeroed inside the weights on disk (the digest), a NaN weight or best loss, a checkpoint
    without its optimizer: one line naming the file, and the folder's records left as they were."""
    import zipfile
    run(tmp_path, "--max_iters", 2, "--eval_interval", 2)
    path, good = tmp_path / "ckpt_last.pt", (tmp_path / "ckpt_last.pt").read_bytes()
    kept = (tmp_path / "metrics.jsonl").read_bytes()

    def refused(code):
        with pytest.raises(SystemExit) as e:
            train.cli_main(TINY + ["--out_dir", str(tmp_path), "--resume", "--max_iters", "4"])
        err = capsys.readouterr().err
        assert e.value.code == code and err.count("\n") == 1 and "Traceback" not in err, err
        assert str(path) in err and (tmp_path / "metrics.jsonl").read_bytes() == kept
        return err
    with zipfile.ZipFile(path) as z:  # torch.save's zip stores each tensor's bytes as they are
        entry = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(good)
    start = entry.header_offset + 30 + len(entry.filename.encode()) + len(entry.extra) + entry.file_size // 2
    data[start:start + 64] = bytes(64)
    path.write_bytes(bytes(data))
    assert "digest" in refused(2)
    ck = torch.load(tmp_path / "ckpt_best.pt", weights_only=True)
    for damage, words, code in [(dict(model={**ck["model"], "wte.weight": ck["model"]["wte.weight"] * float("nan")}),
                                 "wte.weight is not finite", 2),
                                (dict(best_val=float("nan")), "best_val is nan", 2),
                                (dict(optimizer=None), "optimizer", 1)]:
        bad = {k: v for k, v in {**ck, **damage}.items() if v is not None and k != "digest"}
        torch.save(bad, path)
        assert words in refused(code)

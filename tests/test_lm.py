"""lm.py: padded vocabulary, token-id and sampling checks, sampling, optimizer groups, MFU, the
learning-rate schedule, device and dtype selection."""
import math

import pytest
import torch

import cli
import lm


def test_padded_vocab():
    assert lm.padded_vocab(50257) == 50304 and lm.padded_vocab(64) == 64 and lm.padded_vocab(65) == 128


def test_check_tokens_and_sampling_arguments():
    lm.check_tokens(torch.tensor([[0, 9]]), 10)
    for bad in (torch.tensor([[10]]), torch.tensor([[-1]])):
        with pytest.raises(ValueError, match=r"outside \[0, 10\)"):
            lm.check_tokens(bad, 10)
    with pytest.raises(ValueError, match="integer tensor"):
        lm.check_tokens(torch.zeros(2), 10)
    lm.check_sampling(0, 0.0, None)
    for args, match in (((-3, 1.0, None), "max_new_tokens"), ((5, -1.0, None), "temperature"),
                        ((5, float("nan"), None), "temperature"), ((5, 1.0, 0), "top_k")):
        with pytest.raises(ValueError, match=match):
            lm.check_sampling(*args)


def test_sample_next_greedy_top_k_and_determinism():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]]).repeat(500, 1)
    assert torch.equal(lm.sample_next(logits, temperature=0), torch.full((500,), 1))
    drawn = lm.sample_next(logits, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {1, 3}  # only the two best can be drawn, and both are
    again = lm.sample_next(logits, top_k=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(drawn, again)


def test_optimizer_groups_cover_every_parameter_once():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 10))
    model[2].weight = model[0].weight  # tied, as both language models do
    opt = lm.configure_optimizers(model, 0.1, 1e-3, (0.9, 0.95), "cpu")
    decay, no_decay = (g["params"] for g in opt.param_groups)
    assert all(p.dim() >= 2 for p in decay) and all(p.dim() < 2 for p in no_decay)
    assert len(decay) + len(no_decay) == len(list(model.parameters())) == 4  # tied weight once


def test_mfu():
    class Model:
        def flops_per_token(self, T):
            return 1e6
    assert lm.estimate_mfu(Model(), 16, 500.0, peak=1e9) == pytest.approx(0.5)
    assert lm.estimate_mfu(Model(), 16, 500.0, peak=None) is None
    assert lm.peak_flops("NVIDIA H200") == 989e12 and lm.peak_flops("cpu") is None


# torch.cuda.get_device_name spellings -> dense bf16 peak TFLOP/s (datasheets; 4090: fp32 accumulate)
GPU_PEAKS = {"NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA H200": 989,
             "NVIDIA A100-SXM4-80GB": 312, "NVIDIA A100-SXM4-40GB": 312, "NVIDIA A100-PCIE-40GB": 312,
             "NVIDIA L4": 121, "NVIDIA L40S": 362, "NVIDIA GeForce RTX 4090": 165}


def test_peak_table_matches_exact_names_only():
    for name, tflops in GPU_PEAKS.items():
        assert lm.peak_flops(name) == tflops * 1e12, name
    # near names are not guessed: L4 is not L40S or L40, an unknown GPU gets no MFU
    for name in ("NVIDIA L40", "L4", "NVIDIA H100 NVL", "NVIDIA GeForce RTX 4080", "Tesla T4", "", None):
        assert lm.peak_flops(name) is None, name


def test_a_gpu_torch_cannot_see_is_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(lm.shutil, "which", lambda cmd: None)
    monkeypatch.setattr(lm.os.path, "exists", lambda p: False)
    assert lm.hidden_gpu() is None  # no GPU at all: nothing to say
    with pytest.raises(cli.ConfigError, match="sees no CUDA GPU"):
        lm.resolve_device("cuda")
    for which, dev in ((lambda cmd: "/usr/bin/nvidia-smi", False), (lambda cmd: None, True)):
        monkeypatch.setattr(lm.shutil, "which", which)
        monkeypatch.setattr(lm.os.path, "exists", lambda p, dev=dev: dev and p == "/dev/nvidia0")
        note = lm.hidden_gpu()
        assert "cannot see it" in note and "--index-url https://download.pytorch.org/whl/cu12" in note
        with pytest.raises(cli.ConfigError, match="cannot see it") as exc:
            lm.resolve_device("cuda")
        assert "\n" not in str(exc.value)


def test_cosine_lr_warms_up_decays_and_stays_flat():
    lrs = [lm.cosine_lr(s, 1e-3, 1e-4, warmup=10, decay_end=100) for s in range(120)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)  # linear warmup, peak at its end
    assert max(lrs) == pytest.approx(1e-3) and all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[55] == pytest.approx(0.55e-3)  # half way down the cosine: the mean of lr and min_lr
    assert lrs[100:] == [1e-4] * 20
    # the form recall.py trains with: cosine to peak / 10 at its last step
    steps, warm, peak = 50, 5, 2e-3
    for s in range(warm, steps):
        frac = (s - warm) / (steps - 1 - warm)
        assert lm.cosine_lr(s, peak, peak / 10, warm, steps - 1) == pytest.approx(
            peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))))


def test_device_and_dtype_selection():
    assert lm.resolve_device("cpu") == ("cpu", "cpu")
    if not torch.cuda.is_available():
        assert lm.resolve_device("auto", auto=("cuda",)) == ("cpu", "cpu")
        with pytest.raises(cli.ConfigError, match="sees no CUDA GPU"):
            lm.resolve_device("cuda:0")
    assert lm.resolve_dtype("auto", "cuda") == "bf16" and lm.resolve_dtype("auto", "cpu") == "fp32"
    assert lm.resolve_dtype("fp16", "cpu") == "fp16"
    with lm.autocast("bf16", "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with lm.autocast("fp32", "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert lm.device_name("cpu").endswith("cores")

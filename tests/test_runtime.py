"""plumbing/runtime.py: MFU and the exact GPU peak table, the hidden-GPU note, device and dtype
selection."""

import pytest
import torch

from plumbing import cli, runtime


def test_mfu():
    class Model:
        def flops_per_token(self, T):
            return 1e6
    assert runtime.estimate_mfu(Model(), 16, 500.0, peak=1e9) == pytest.approx(0.5)
    assert runtime.estimate_mfu(Model(), 16, 500.0, peak=None) is None
    assert runtime.peak_flops("NVIDIA H200") == 989e12 and runtime.peak_flops("cpu") is None


# torch.cuda.get_device_name spellings -> dense bf16 peak TFLOP/s (datasheets; 4090: fp32 accumulate)
GPU_PEAKS = {"NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA H200": 989,
             "NVIDIA A100-SXM4-80GB": 312, "NVIDIA A100-SXM4-40GB": 312, "NVIDIA A100-PCIE-40GB": 312,
             "NVIDIA L4": 121, "NVIDIA L40S": 362, "NVIDIA GeForce RTX 4090": 165}


def test_peak_table_matches_exact_names_only():
    for name, tflops in GPU_PEAKS.items():
        assert runtime.peak_flops(name) == tflops * 1e12, name
    # near names are not guessed: L4 is not L40S or L40, an unknown GPU gets no MFU
    for name in ("NVIDIA L40", "L4", "NVIDIA H100 NVL", "NVIDIA GeForce RTX 4080", "Tesla T4", "", None):
        assert runtime.peak_flops(name) is None, name


def test_a_gpu_torch_cannot_see_is_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(runtime.shutil, "which", lambda cmd: None)
    monkeypatch.setattr(runtime.os.path, "exists", lambda p: False)
    assert runtime.hidden_gpu() is None  # no GPU at all: nothing to say
    with pytest.raises(cli.ConfigError, match="sees no CUDA GPU"):
        runtime.resolve_device("cuda")
    for which, dev in ((lambda cmd: "/usr/bin/nvidia-smi", False), (lambda cmd: None, True)):
        monkeypatch.setattr(runtime.shutil, "which", which)
        monkeypatch.setattr(runtime.os.path, "exists", lambda p, dev=dev: dev and p == "/dev/nvidia0")
        note = runtime.hidden_gpu()
        assert "cannot see it" in note and "--index-url https://download.pytorch.org/whl/cu12" in note
        with pytest.raises(cli.ConfigError, match="cannot see it") as exc:
            runtime.resolve_device("cuda")
        assert "\n" not in str(exc.value)


def test_device_and_dtype_selection():
    assert runtime.resolve_device("cpu") == ("cpu", "cpu")
    if not torch.cuda.is_available():
        assert runtime.resolve_device("auto", auto=("cuda",)) == ("cpu", "cpu")
        with pytest.raises(cli.ConfigError, match="sees no CUDA GPU"):
            runtime.resolve_device("cuda:0")
    assert runtime.precision("auto", "cuda")[0] == "bf16" and runtime.precision("auto", "cpu")[0] == "fp32"
    assert runtime.precision("fp16", "cpu")[0] == "fp16"
    with runtime.precision("bf16", "cpu")[1]:
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with runtime.precision("auto", "cpu")[1]:
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert runtime.device_name("cpu").endswith("cores")

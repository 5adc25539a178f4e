"""probe.py end to end on a small setting: outputs exist, JSON shape, traces beat activity."""
import json
import os

import pytest

import probe


pytestmark = pytest.mark.usefixtures("one_thread")


def test_probe_small_run(tmp_path):
    args = probe.get_parser().parse_args([
        "--out_dir", str(tmp_path), "--n_train", "300", "--n_val", "80", "--n_test", "150",
        "--seeds", "2", "--spcn_epochs", "1", "--probe_iters", "40", "--gru_epochs", "2",
        "--n_columns", "8", "--column_size", "16", "--k", "2", "--threads", "1"])
    res = probe.main(args)
    for f in ("results.json", "results.md", "roles.png"):
        assert os.path.getsize(tmp_path / f) > 0
    saved = json.load(open(tmp_path / "results.json"))
    assert saved["seeds"] == 2 and saved["seconds"] > 0
    assert set(saved["within"]) >= {"instantaneous", "traces", "bigru"}
    assert set(saved["transfer"]) >= {"spcn", "bigru"} and set(saved["deep_embedded"]) >= {"spcn", "bigru"}
    assert len(saved["roles"]) == 20
    for d in saved["roles"].values():
        assert d["kind"] in ("structural", "content")
        assert all(0 <= d[k] <= 1 for k in ("within_spcn", "within_bigru", "transfer_spcn", "transfer_bigru"))
    # the point of the experiment: context from traces beats instantaneous activity
    assert res["within"]["traces"] > res["within"]["instantaneous"] + 0.15

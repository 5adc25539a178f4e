"""bench.py --quick runs end to end (both allocator settings, every CPU section) and writes its JSON.
No timing asserts: the numbers depend on the machine."""
import json

import bench


def test_quick_run_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    res = bench.main(bench.get_parser().parse_args(["--quick", "--device", "cpu", "--out", str(out)]))
    saved = json.loads(out.read_text())
    assert saved["quick"] and set(saved["runs"]) == {"on", "off"}
    run = saved["runs"]["on"]
    assert run["allocator"] is True and saved["runs"]["off"]["allocator"] is False
    assert run["limits"]["copy_gbs"] > 0
    assert [r["T"] for r in run["ema"]["rows"]] == [64, 256]
    assert all(r["fwd"]["ms"] > 0 and r["ref_fb"]["ms"] > 0 for r in run["ema"]["rows"])
    assert all(r["ratio_block"] > 0 for r in run["blocks"]["rows"])
    assert [r["P"] for r in run["gen_gpt"]["rows"]] == [64, 256]
    # the KV cache grows with the context, the SPEN state does not
    gpt_state = [r["state_mib"] for r in run["gen_gpt"]["rows"]]
    spen_state = [r["state_mib"] for r in run["gen_spen"]["rows"]]
    assert gpt_state[1] > gpt_state[0] and spen_state[1] == spen_state[0]
    assert run["train"] == {"skipped": "needs CUDA"}
    assert res["runs"]["on"]["ema"]["stream"]["step_us"] > 0

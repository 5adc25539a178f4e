"""plumbing/registry.py, the one table of named models: every name builds through train.py's
config, every name has a family line, every reader spen.READERS knows is named by some model, the
defaults name registered models only, and adding a reader is one class, one spen.READERS line and
one registry entry: a toy reader then builds, trains a step, and is a valid choice of ablate.py,
scaling.py, recall.py and frontier.py without touching them."""
import pytest
import torch
import torch.nn as nn

import ablate
import frontier
import recall
import scaling
import spen
import train
from plumbing import registry
from variants import Reader


@pytest.mark.parametrize("name", list(registry.MODELS))
def test_every_name_builds_and_has_a_family(name):
    assert registry.MODELS[name].family
    model = train.build_model(train.make_config("cpu_bytes", **registry.MODELS[name].overrides, n_embd=32))
    assert model.state_floats(256) > 0 and model.flops_per_token(256) > 0


def test_every_reader_has_a_name():
    named = set()
    for m in registry.MODELS.values():
        if m.overrides.get("model", "spen") == "spen":
            named |= {b[:2] for b in m.blocks()}
    assert set(spen.READERS) <= named, set(spen.READERS) - named


def test_the_defaults_name_registered_models_once():
    """ABLATION and MAP are literal lists, so a new model joins neither by itself; each names models of the table."""
    for names in (registry.ABLATION, registry.MAP):
        assert names and set(names) <= set(registry.MODELS) and len(set(names)) == len(names), names


class Toy(Reader):
    """A position-wise reader: x̂_t = W h_{t-1}^1, a linear map of the fastest trace."""

    def __init__(self, cfg):
        super().__init__()
        self.w = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, u, h_prev):
        return self.w(h_prev[..., 0, :])  # (B, T, C) from h_{t-1}^1


def test_a_new_reader_is_one_class_and_two_lines(monkeypatch):
    monkeypatch.setitem(spen.READERS, ("toy", "state"), Toy)  # the class and its spen.READERS line
    monkeypatch.setitem(registry.MODELS, "toy", registry.Model("state, a toy", dict(
        model="spen", predictor="toy", reads="state", context="ema")))  # the registry's one entry
    model = train.build_model(train.make_config("cpu_bytes", **registry.MODELS["toy"].overrides, n_embd=32))
    idx = torch.randint(256, (2, 17))
    _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert model.blocks[0].pred.w.weight.grad is not None and model.state_floats(16) == 3 * 32  # the traces only
    ablate.AblateConfig(models=("toy",), tokenizer="bytes", content=False)  # the commands read the one table
    scaling.ScalingConfig(models=("toy",), widths=(32,))
    assert "toy" in recall.names() and "toy" in frontier.names()  # recall's and frontier's choices too
    cfg = recall.RecallConfig(models=("toy",))
    assert recall.state_kind("toy") == "traces" and recall.run_key(cfg, "toy")["variant"] == "toy"
    grid = frontier.FrontierConfig(models=("toy",), settings=("near",), windows=())
    assert [j.name for j in frontier.jobs(grid)] == ["near/toy_s0", "near/toy_s1"]  # no heads: one point


COMMITTED_SPELLING = {  # the two aligned lists the committed map runs were trained with (their log.txt's config)
    "hybrid_ema_kv": dict(predictor="ema_kv,ema_kv,ema_kv,softmax_attn", reads="state,state,state,history"),
    "hybrid_gated_delta": dict(predictor="gated_delta,gated_delta,gated_delta,softmax_attn",
                               reads="state,state,state,history", conv=4),
    "hybrid_gated_delta_1": dict(predictor="gated_delta,softmax_attn,gated_delta,gated_delta",
                                 reads="state,history,state,state", conv=4)}


@pytest.mark.parametrize("name", list(COMMITTED_SPELLING))
def test_a_hybrid_in_one_list_is_the_model_its_committed_runs_trained(name):
    """The registry spells a hybrid as one list of blocks; it builds, draw for draw, the model of the
    older spelling its committed runs were trained under, so they resume and compare."""
    old, new = (train.build_model(train.make_config("cpu_bytes", **{"model": "spen", **o}, n_embd=32)).state_dict()
                for o in (COMMITTED_SPELLING[name], registry.MODELS[name].overrides))
    assert old.keys() == new.keys() and all(torch.equal(old[k], new[k]) for k in old)


def test_every_committed_curve_has_the_size_its_registry_entry_builds():
    """Each curve of a committed scaling record names a model whose registry entry, at the record's
    width, depth and context, has the recorded parameters and state: a changed entry shows here."""
    import glob
    import json
    import os
    seen = 0
    for path in glob.glob(os.path.join(os.path.dirname(__file__), "..", "results", "**", "scaling.json"), recursive=True):
        with open(path) as f:
            rec = json.load(f)
        s = rec["settings"]
        for c in rec["curves"].values():
            cfg = train.make_config("cpu_bytes", **registry.MODELS[c["model"]].overrides, n_embd=c["width"],
                                    n_layer=s["n_layer"], block_size=s["block_size"], tokenizer=s["tokenizer"])
            with torch.device("meta"):
                model = train.build_model(cfg, seeded=False)
            assert (model.num_params(), model.state_floats(s["block_size"])) == (c["params"], c["state_floats"]), path
            seen += 1
    assert seen >= 20

"""lm.py: padded vocabulary, the token-id check (no host read), sampling checks, sampling,
optimizer groups."""
import pytest
import torch

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

"""Tests for gpt.py: exact Hugging Face GPT-2 logits, KV cache == full forward, causality,
parameter count of GPT-2 small, token-id checks in step and generate, no host sync in a training
forward, determinism of generate."""
from dataclasses import asdict

import pytest
import torch

import lm
from plumbing import runtime
from gpt import GPT, GPTConfig, Block

TINY = GPTConfig(block_size=32, vocab_size=97, n_layer=2, n_head=4, n_embd=32)


def _tiny(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**asdict(TINY), **kw})).eval()


def test_from_hf_matches_huggingface_logits():
    transformers = pytest.importorskip("transformers")  # a listed test dependency
    torch.manual_seed(0)
    hc = transformers.GPT2Config(vocab_size=101, n_positions=40, n_embd=48, n_layer=3, n_head=4,
                                 bos_token_id=0, eos_token_id=0)
    hf = transformers.GPT2LMHeadModel(hc).eval()
    # HF's random init leaves biases at 0; perturb every tensor so a missed transpose or key shows
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ours = GPT.from_hf(hf).eval()
    assert ours.config.vocab_size == 101 and ours.config.block_size == 40
    idx = torch.randint(0, 101, (2, 40))
    with torch.no_grad():
        ref = hf(idx).logits
        got, _ = ours(idx)
    assert got.shape == ref.shape
    assert torch.allclose(got, ref, atol=1e-5, rtol=0), (got - ref).abs().max()


def test_from_hf_rejects_other_activation():
    transformers = pytest.importorskip("transformers")
    hc = transformers.GPT2Config(vocab_size=11, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                                 activation_function="relu", bos_token_id=0, eos_token_id=0)
    with pytest.raises(ValueError, match="activation_function"):
        GPT.from_hf(transformers.GPT2LMHeadModel(hc))


def test_kv_cache_step_equals_forward():
    m = _tiny()
    idx = torch.randint(0, TINY.vocab_size, (3, 20))
    with torch.no_grad():
        full, _ = m(idx)
        state = m.init_state(3)
        steps = []
        for t in range(idx.size(1)):
            logits, state = m.step(idx[:, t], state)
            steps.append(logits)
        # prefill 12 tokens at once, then step: the masked multi-token cache path
        pre, st2 = m.extend(idx[:, :12], m.init_state(3))
        nxt, _ = m.extend(idx[:, 12:], st2)
    assert torch.allclose(torch.stack(steps, 1), full, atol=1e-5)
    assert torch.allclose(torch.cat([pre, nxt], 1), full, atol=1e-5)
    assert state["pos"] == 20 and state["kv"][0][0].shape == (3, TINY.n_head, 20, TINY.n_embd // TINY.n_head)


def test_causality():
    m = _tiny()
    idx = torch.randint(0, TINY.vocab_size, (1, 16))
    idx2 = idx.clone()
    idx2[0, 10:] = (idx2[0, 10:] + 1) % TINY.vocab_size  # change the future only
    with torch.no_grad():
        a, _ = m(idx)
        b, _ = m(idx2)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)
    assert not torch.allclose(a[:, 10:], b[:, 10:], atol=1e-3)


def test_shapes_loss_hidden_states_and_block():
    m = _tiny()
    idx = torch.randint(0, TINY.vocab_size, (2, 8))
    logits, loss = m(idx, idx)
    assert logits.shape == (2, 8, TINY.vocab_size) and loss.dim() == 0
    # random init: loss near ln V
    assert abs(loss.item() - torch.log(torch.tensor(float(TINY.vocab_size))).item()) < 0.5
    hs = m.hidden_states(idx)
    assert len(hs) == TINY.n_layer + 1 and all(h.shape == (2, 8, TINY.n_embd) for h in hs)
    assert torch.allclose(m.head(hs[-1]), logits, atol=1e-5)
    assert Block(TINY)(torch.randn(2, 5, TINY.n_embd)).shape == (2, 5, TINY.n_embd)
    rebuilt = GPT(GPTConfig(**asdict(m.config)))
    assert rebuilt.num_params() == m.num_params()
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, TINY.block_size + 1, dtype=torch.long))


def test_gpt2_small_param_count_on_meta():
    with torch.device("meta"):
        m = GPT(GPTConfig())
    n = m.num_params()
    # nanoGPT's GPT-2 small with the padded vocabulary (50304 rows): 124,475,904 incl. positions
    assert n == 124_475_904, n
    assert m.config.vocab_size == 50257 and m.config.n_head == 12
    assert m.lm_head.weight is m.transformer.wte.weight  # tied


def test_optimizer_groups_and_flops():
    m = _tiny()
    opt = lm.configure_optimizers(m, 0.1, 1e-3, (0.9, 0.95), "cpu")
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(m.parameters()))
    assert opt.param_groups[0]["weight_decay"] == 0.1 and opt.param_groups[1]["weight_decay"] == 0.0
    assert m.flops_per_token(16) > 6 * m.num_params(non_embedding=True)
    assert 0 < runtime.estimate_mfu(m, 16, 1e3, peak=1e12) < 1


def test_generate_reproducible_and_crops():
    m = _tiny()
    idx = torch.randint(0, TINY.vocab_size, (2, 5))
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    a = m.generate(idx, 40, top_k=10, generator=g1)  # 45 > block_size 32: exercises the crop
    b = m.generate(idx, 40, top_k=10, generator=g2)
    assert a.shape == (2, 45) and torch.equal(a, b) and torch.equal(a[:, :5], idx)
    # greedy generate agrees with argmax of a full forward for the first token
    with torch.no_grad():
        greedy = m.generate(idx, 1, temperature=0)
        assert torch.equal(greedy[:, -1], m(idx)[0][:, -1].argmax(-1))


def test_learns_tiny_batch():
    m = _tiny().train()
    opt = lm.configure_optimizers(m, 0.0, 3e-3, (0.9, 0.95), "cpu")
    idx = torch.randint(0, TINY.vocab_size, (4, 16))
    for _ in range(60):
        _, loss = m(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1.0, loss.item()


def test_token_ids_and_generate_arguments_are_checked():
    m = _tiny()
    V = TINY.vocab_size  # 97 real tokens in a 128-row table: 97..127 are padding, not tokens
    assert m.transformer.wte.weight.shape[0] == lm.padded_vocab(V) == 128
    assert m(torch.zeros(1, 4, dtype=torch.long))[0].shape[-1] == V  # logits cover real tokens only
    # token ids are checked where they enter: step and generate (forward checks nothing: no sync)
    for bad in (torch.tensor([V]), torch.tensor([-1]), torch.tensor([127])):  # 127: a padding row
        with pytest.raises(ValueError, match="outside"):
            m.step(bad, m.init_state(1))
        with pytest.raises(ValueError, match="outside"):
            m.generate(bad[:, None], 2)
    with pytest.raises(ValueError, match="integer"):
        m.step(torch.zeros(1), m.init_state(1))
    with pytest.raises(ValueError, match="integer"):
        m.generate(torch.zeros(1, 3), 2)
    with pytest.raises(ValueError, match=r"\(B,\)"):
        m.step(torch.zeros(1, 2, dtype=torch.long), m.init_state(1))
    idx = torch.zeros(1, 2, dtype=torch.long)
    for kw, match in ((dict(temperature=-1.0), "temperature"), (dict(top_k=0), "top_k"),
                      (dict(max_new_tokens=-3), "max_new_tokens")):
        with pytest.raises(ValueError, match=match):
            m.generate(idx, **{"max_new_tokens": 2, **kw})
    with pytest.raises(ValueError, match="prompt"):
        m.generate(torch.zeros(1, 0, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        m.generate(torch.zeros(3, dtype=torch.long), 2)
    out = m.generate(idx, 30, generator=torch.Generator().manual_seed(0))
    assert int(out.max()) < V  # padding rows are never sampled


def test_forward_and_generate_check_ids_without_a_host_sync(monkeypatch):
    """forward checks its ids (lm.check_tokens) and reads nothing back from the device; neither do
    64 generated tokens (crop and re-read of the cache included)."""
    m = _tiny().train()
    reads, checks = [], []
    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda t, *a, _n=name, _r=real: reads.append(_n) or _r(t, *a))
    real_check = lm.check_tokens
    monkeypatch.setattr(lm, "check_tokens", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    idx = torch.randint(0, TINY.vocab_size, (2, 17))
    logits, loss = m(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert reads == [] and checks == [1] and logits.shape == (2, 16, TINY.vocab_size)
    out = m.eval().generate(idx[:, :3], 64, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 67) and reads == []


def test_ids_past_the_vocabulary_are_refused_in_forward():
    m = _tiny()
    for bad in (TINY.vocab_size, lm.padded_vocab(TINY.vocab_size), -1):
        with pytest.raises(ValueError, match=rf"outside \[0, {TINY.vocab_size}\)"):
            m(torch.tensor([[0, bad]]))


@pytest.mark.parametrize("window", [1, 3, 8])
def test_sliding_window_attention_is_its_definition_and_step_keeps_w_minus_1_keys(window):
    """Query t sees positions t - w + 1 .. t only: the logits at t do not move when a token more
    than w - 1 back changes (within one layer), forward equals an explicit masked softmax, and
    step() (its cache trimmed to w - 1 keys) gives forward's logits with a bounded state."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=16, vocab_size=20, n_layer=1, n_head=2, n_embd=16, window=window)).eval()
    attn = m.transformer.h[0].attn
    x = torch.randn(2, 12, 16)
    q, k, v = (z.view(2, 12, 2, 8).transpose(1, 2) for z in attn.c_attn(x).split(16, dim=2))
    i, j = torch.arange(12)[:, None], torch.arange(12)[None, :]
    scores = (q @ k.transpose(-1, -2)) / 8 ** 0.5
    scores = scores.masked_fill(~((j <= i) & (i - j < window)), float("-inf"))
    ref = attn.c_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 12, 16))
    assert torch.allclose(attn(x), ref, atol=1e-6)
    idx = torch.randint(0, 20, (2, 12))
    far = idx.clone()
    far[:, 0] = (far[:, 0] + 1) % 20  # one layer: position t >= w cannot see position 0
    assert torch.allclose(m(idx)[0][:, window:], m(far)[0][:, window:], atol=1e-6)
    with torch.no_grad():
        state, out = m.init_state(2), []
        for token in idx.unbind(1):
            logits, state = m.step(token, state)
            out.append(logits)
    assert torch.allclose(torch.stack(out, 1), m(idx)[0], atol=1e-5)
    assert state["kv"][0][0].shape[2] == window - 1  # the cache: the w - 1 newest keys
    full = GPT(GPTConfig(block_size=16, vocab_size=20, n_layer=1, n_head=2, n_embd=16, window=16))
    full.load_state_dict(m.state_dict())
    plain = GPT(GPTConfig(block_size=16, vocab_size=20, n_layer=1, n_head=2, n_embd=16))
    plain.load_state_dict(m.state_dict())
    assert torch.allclose(full(idx)[0], plain(idx)[0], atol=1e-6)  # a window as long as the input: full attention


def test_a_bad_window_is_one_line():
    for bad in (0, -2, 2.5):
        with pytest.raises(ValueError, match="GPTConfig.window must be None"):
            GPT(GPTConfig(block_size=8, vocab_size=10, n_layer=1, n_head=1, n_embd=8, window=bad))


def test_state_floats_count_what_step_holds():
    for window, T, kept in ((None, 10, 10), (4, 10, 3), (4, 2, 2), (1, 10, 0)):
        m = GPT(GPTConfig(block_size=16, vocab_size=20, n_layer=2, n_head=2, n_embd=16, window=window)).eval()
        with torch.no_grad():
            state = m.init_state(1)
            for t in range(T):
                _, state = m.step(torch.tensor([t % 20]), state)
        held = sum(k.numel() + v.numel() for k, v in state["kv"]) // 2  # per layer, batch of one
        assert held == m.state_floats(T) == 2 * kept * 16, (window, T)

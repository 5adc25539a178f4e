"""spen.py: paper-size parameter count, strict causality, step == forward, learning, contract."""
from dataclasses import asdict

import pytest
import torch

from spen import SPEN, Block, LinearAttnPredictor, SparseFFN, SPENConfig, linear_attention_ref, shift_right

VARIANTS = [(p, c) for p in ("linear", "linear_attn", "softmax_attn") for c in ("ema", "selective")]


def tiny(**kw):
    cfg = dict(vocab_size=64, block_size=32, n_layer=2, n_embd=32, ffn_hidden=64, ffn_topk=8, n_head=4)
    cfg.update(kw)
    return SPENConfig(**cfg)


def make(seed=0, **kw):
    torch.manual_seed(seed)
    model = SPEN(tiny(**kw))
    if kw.get("context") == "selective":  # W_a starts at 0 (= fixed EMA); make the gate matter
        for block in model.blocks:
            torch.nn.init.normal_(block.ctx.gate.weight, std=0.5)
    return model.eval()


@pytest.mark.parametrize("predictor", ["linear", "linear_attn", "softmax_attn"])
def test_paper_model_has_130m_params(predictor):
    with torch.device("meta"):
        model = SPEN(SPENConfig(predictor=predictor))
    n = model.num_params()
    assert 123.5e6 <= n <= 136.5e6, f"{n:,}"
    assert model.lm_head.weight is model.wte.weight  # tied: counted once
    assert model.num_params(non_embedding=True) == n - 50304 * 768


@pytest.mark.parametrize("predictor,context", VARIANTS)
def test_strictly_causal(predictor, context):
    model = make(predictor=predictor, context=context)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 64, (2, 20), generator=g)
    for j in (0, 7, 19):
        idx2 = idx.clone()
        idx2[:, j] = (idx2[:, j] + 1) % 64
        with torch.no_grad():
            a, b = model(idx)[0], model(idx2)[0]
        assert torch.allclose(a[:, :j], b[:, :j], atol=1e-6, rtol=0), f"token {j} leaked backwards"
        assert not torch.allclose(a[:, j], b[:, j], atol=1e-4), "changed token had no effect"


@pytest.mark.parametrize("predictor", ["linear", "linear_attn", "softmax_attn"])
def test_predictor_reads_only_past_traces(predictor):
    """x̂_t must not depend on u_t through the values: perturb u_t only inside the traces' input."""
    block = Block(tiny(predictor=predictor)).eval()
    u = torch.randn(1, 10, 32)
    assert block(u).shape == u.shape  # usable standalone: (B, T, C) -> (B, T, C)
    hp = shift_right(block.ctx(u))  # (1, 10, S, C)
    u2 = u.clone()
    u2[:, 5] += 1.0
    hp2 = shift_right(block.ctx(u2))
    assert torch.equal(hp[:, :6], hp2[:, :6])  # h_{t-1} at t <= 5 does not contain u_5
    x1, x2 = block.pred(u, hp), block.pred(u, hp2)  # same query, traces differ only from t = 6
    assert torch.allclose(x1[:, :6], x2[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(x1[:, 6], x2[:, 6], atol=1e-5)


@pytest.mark.parametrize("predictor,context", VARIANTS)
def test_step_reproduces_forward(predictor, context):
    model = make(predictor=predictor, context=context)
    idx = torch.randint(0, 64, (3, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(idx)[0]  # (B, T, V)
        state = model.init_state(3)
        out = []
        for token in idx.unbind(1):
            logits, state = model.step(token, state)
            out.append(logits)
    assert torch.allclose(torch.stack(out, 1), ref, atol=1e-4, rtol=0)
    if predictor != "softmax_attn":  # O(1) state: nothing in it grows with the sequence length
        sizes = [t.numel() for s in state for t in [s["h"], *(s["pred"] or {}).values()]]
        assert sum(sizes) == sum(t.numel() for s in model.init_state(3) for t in [s["h"], *(s["pred"] or {}).values()])


@pytest.mark.parametrize("predictor", ["linear", "linear_attn", "softmax_attn"])
def test_pure_bf16_model_runs_forward_and_step(predictor):
    model = make(predictor=predictor, context="selective").to(torch.bfloat16)
    idx = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        ref = model(idx)[0]
        state = model.init_state(2)
        out = []
        for token in idx.unbind(1):
            logits, state = model.step(token, state)
            out.append(logits)
    assert ref.dtype == torch.bfloat16 and torch.isfinite(ref).all()
    assert torch.allclose(torch.stack(out, 1).float(), ref.float(), atol=0.1, rtol=0)


@pytest.mark.parametrize("T,chunk", [(1, 4), (13, 4), (16, 4), (20, 64)])
def test_chunked_linear_attention_equals_reference(T, chunk):
    pred = LinearAttnPredictor(tiny(predictor="linear_attn"))
    pred.chunk = chunk
    g = torch.Generator().manual_seed(T)
    q = torch.randn(2, 4, T, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 4, T * 3, 8, generator=g, requires_grad=True)
    v = torch.randn(2, 4, T * 3, 8, generator=g, requires_grad=True)
    fast, ref = pred.attend(q, k, v), linear_attention_ref(q, k, v)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    w = torch.randn(fast.shape, generator=g)
    for a, b in zip(torch.autograd.grad((fast * w).sum(), (q, k, v)), torch.autograd.grad((ref * w).sum(), (q, k, v))):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_tiny_model_overfits_tiny_batch():
    torch.manual_seed(0)
    model = SPEN(tiny())
    idx = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(3))
    x, y = idx[:, :-1], idx[:, 1:]
    opt = model.configure_optimizers(0.0, 2e-2, (0.9, 0.95), "cpu")
    first = model(x, y)[1].item()
    for _ in range(60):  # ~0.4 s on one core; reaches ~0.001
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 4.0 and loss.item() < 0.1, (first, loss.item())


def test_hidden_states_and_head():
    model = make()
    idx = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        hs = model.hidden_states(idx)
        logits = model(idx)[0]
    assert len(hs) == 3 and all(h.shape == (2, 9, 32) for h in hs)
    assert torch.allclose(model.lm_head(model.ln_f(hs[-1])), logits, atol=1e-6)


def test_config_round_trip_rebuilds_the_same_model():
    cfg = tiny(predictor="softmax_attn", context="selective", alphas=[0.3, 0.05])
    d = asdict(cfg)
    assert d["alphas"] == (0.3, 0.05)
    a = SPEN(cfg)
    b = SPEN(SPENConfig(**d))
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(7))
    assert torch.equal(a(idx)[0], b(idx)[0])


@pytest.mark.parametrize("field,value", [("predictor", "lstm"), ("context", "gru"), ("ffn_topk", 0)])
def test_bad_config_gives_clear_error(field, value):
    with pytest.raises(ValueError, match=field):
        SPENConfig(**{field: value})


def test_sparse_ffn_keeps_exactly_k_units_and_their_gradient():
    torch.manual_seed(4)
    ffn = SparseFFN(tiny(ffn_hidden=64, ffn_topk=8))
    u = torch.randn(5, 32)
    hidden = {}
    ffn.proj.register_forward_hook(lambda m, inp, out: hidden.setdefault("a", inp[0]))
    ffn(u).sum().backward()
    a = hidden["a"]  # (5, 64) the masked activations fed to W_2
    assert ((a != 0).sum(-1) <= 8).all() and ((a != 0).sum(-1) >= 6).all()  # k kept (relu may zero some)
    dense = torch.relu(u @ ffn.fc.weight.t())
    kept = dense >= dense.topk(8, dim=-1).values[:, -1:]
    assert torch.equal(a, dense * kept)  # the reference, dense-mask definition
    # W_1's gradient rows are zero for units never selected in the batch
    never = ~kept.any(0)
    assert never.any() and (ffn.fc.weight.grad[never] == 0).all()


def test_optimizer_groups_and_generate_determinism():
    model = make(predictor="linear_attn")
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    groups = [list(g["params"]) for g in opt.param_groups]
    assert sum(len(g) for g in groups) == len(list(model.parameters()))
    assert all(p.dim() < 2 for p in groups[1]) and groups[0] and groups[1]
    prompt = torch.zeros(2, 3, dtype=torch.long)
    a = model.generate(prompt, 6, top_k=10, generator=torch.Generator().manual_seed(5))
    b = model.generate(prompt, 6, top_k=10, generator=torch.Generator().manual_seed(5))
    assert a.shape == (2, 9) and torch.equal(a, b) and torch.equal(a[:, :3], prompt)


def test_flops_and_mfu():
    model = make()
    n = model.flops_per_token(32)
    assert n > 6 * 64 * 32  # at least the head
    assert model.estimate_mfu(4, 0.5, peak_flops=n * 32 * 4 / 0.5) == pytest.approx(1.0)

"""spen.py and readers.py: paper-size parameter count, strict causality, step == forward for every
predictor x reads x context, what state and history readers can tell apart, autocast dtypes,
checked inputs, learning, contract."""
import inspect
from dataclasses import asdict

import pytest
import torch

import ema
import lm
from readers import READERS, LinearAttnHistory, linear_attention_ref
from spen import SPEN, VARIANTS, Block, SparseFFN, SPENConfig, shift_right

V = 60  # tiny vocabulary; the table is padded to 64 rows, so ids 60..63 are padding


def tiny(**kw):
    cfg = dict(vocab_size=V, block_size=32, n_layer=2, n_embd=32, ffn_hidden=64, ffn_topk=8, n_head=4)
    cfg.update(kw)
    return SPENConfig(**cfg)


def make(seed=0, **kw):
    torch.manual_seed(seed)
    model = SPEN(tiny(**kw))
    if kw.get("context") == "selective":  # W_a starts at 0 (= fixed EMA); make the gate matter
        for block in model.blocks:
            torch.nn.init.normal_(block.ctx.gate.weight, std=0.5)
    return model.eval()


def tokens(B, T, seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_paper_model_config_and_param_counts():
    cfg = SPENConfig()
    assert (cfg.vocab_size, cfg.ffn_hidden, cfg.ffn_topk, cfg.n_head) == (50257, 3072, 184, 12)
    assert (cfg.predictor, cfg.reads, cfg.context) == ("linear", "state", "ema")
    with torch.device("meta"):
        model = SPEN(cfg)
        attn = {r: SPEN(SPENConfig(predictor="softmax_attn", reads=r)).num_params() for r in ("state", "history")}
    assert model.num_params() == 130_684_416  # the paper model: unchanged
    assert attn == {"state": 130_712_064, "history": 130_712_064}  # readers differ by E_s only
    assert model.wte.weight.shape == (50304, 768) and model.lm_head.weight is model.wte.weight
    assert model.num_params(non_embedding=True) == 130_684_416 - 50304 * 768


@pytest.mark.parametrize("predictor,reads,context", VARIANTS)
def test_strictly_causal(predictor, reads, context):
    model = make(predictor=predictor, reads=reads, context=context)
    idx = tokens(2, 20, 1)
    for j in (0, 7, 19):
        idx2 = idx.clone()
        idx2[:, j] = (idx2[:, j] + 1) % V
        with torch.no_grad():
            a, b = model(idx)[0], model(idx2)[0]
        assert a.shape == (2, 20, V)
        assert torch.allclose(a[:, :j], b[:, :j], atol=1e-6, rtol=0), f"token {j} leaked backwards"
        assert not torch.allclose(a[:, j], b[:, j], atol=1e-4), "changed token had no effect"


@pytest.mark.parametrize("predictor,reads", list(READERS))
def test_predictor_reads_only_past_traces(predictor, reads):
    """x̂_t must not depend on u_t through the values: perturb u_t only inside the traces' input."""
    block = Block(tiny(predictor=predictor, reads=reads)).eval()
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


def state_numel(state):
    return sum(t.numel() for s in state for t in [s["h"], *(s["pred"] or {}).values()])


@pytest.mark.parametrize("predictor,reads,context", VARIANTS)
def test_step_reproduces_forward(predictor, reads, context):
    model = make(predictor=predictor, reads=reads, context=context)
    idx = tokens(3, 13, 2)
    with torch.no_grad():
        ref = model(idx)[0]  # (B, T, V)
        state = model.init_state(3)
        out = []
        for token in idx.unbind(1):
            logits, state = model.step(token, state)
            out.append(logits)
    assert torch.allclose(torch.stack(out, 1), ref, atol=1e-4, rtol=0)
    # the state holds what state_floats says; state readers: S*C per layer whatever T
    assert state_numel(state) == 3 * model.config.n_layer * model.state_floats(13)
    if reads == "state":
        assert state_numel(state) == state_numel(model.init_state(3)) == 3 * 2 * 3 * 32


def test_state_readers_cannot_tell_pasts_with_equal_state_apart():
    """With S = 3 traces, 4 inputs u_0..u_3 map linearly to h_3 through a 3 x 4 matrix, which has
    a null space: two different pasts with the same state h_3. A state reader gives the same x̂_4
    for both; a history reader sees h_0..h_2 too and tells them apart."""
    a = torch.tensor(SPENConfig().alphas, dtype=torch.float64)[:, None]  # (S, 1)
    M = a * (1 - a) ** (3 - torch.arange(4, dtype=torch.float64))  # (S, 4): h_3 = M u_{0..3}
    null = torch.linalg.svd(M).Vh[-1]  # (4,), M @ null = 0
    torch.manual_seed(0)
    u = torch.randn(1, 5, 32)
    u2 = u.clone()
    u2[0, :4] += 3 * null.float()[:, None] * torch.randn(32)
    for predictor, reads in READERS:
        block = Block(tiny(predictor=predictor, reads=reads)).eval()
        for p in block.pred.parameters():  # away from the near-uniform attention of the init
            torch.nn.init.normal_(p, std=0.3)
        hp, hp2 = shift_right(block.ctx(u)), shift_right(block.ctx(u2))
        assert torch.allclose(hp[:, 4], hp2[:, 4], atol=1e-5) and not torch.allclose(hp[:, 3], hp2[:, 3], atol=0.1)
        with torch.no_grad():
            x1, x2 = block.pred(u, hp)[0, 4], block.pred(u, hp2)[0, 4]  # x̂_4, same query u_4
        diff, scale = (x1 - x2).abs().max(), x1.abs().max()
        if reads == "state":
            assert diff < 1e-4 * scale, (predictor, reads, diff / scale)
        else:
            assert diff > 1e-2 * scale, (predictor, reads, diff / scale)


def test_history_reader_is_lossless():
    """The inputs come back exactly from what the softmax history reader caches: its value slots
    v = W_v (h_{j-1}^s + E_s), inverted through W_v, give h, and u_j = (h_j - (1 - a) h_{j-1}) / a."""
    torch.manual_seed(0)
    cfg = tiny(predictor="softmax_attn", reads="history")
    block = Block(cfg).double().eval()
    T, C, S = 8, 32, 3
    u = torch.randn(1, T, C, dtype=torch.float64)
    hp = shift_right(block.ctx(u))  # (1, T, S, C)
    state = block.pred.init_state(1, None)
    state = {k: v.double() for k, v in state.items()}
    for t in range(T):
        _, state = block.pred.step(u[:, t], hp[:, t], state)
    v = state["v"].transpose(1, 2).reshape(1, T * S, C)  # (1, T*S, C), slots j*S + s
    z = torch.linalg.solve(block.pred.v.weight, v[0].t()).t().view(T, S, C)  # W_v^-1 v
    h = z - block.pred.trace_emb  # (T, S, C): h_{j-1}^s, j = 0..T-1
    for s, a_s in enumerate(cfg.alphas):
        rec = (h[1:, s] - (1 - a_s) * h[:-1, s]) / a_s  # (T-1, C) = u_0..u_{T-2}
        assert torch.allclose(rec, u[0, :T - 1], atol=1e-8), s


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("predictor,reads,context", VARIANTS)
def test_autocast_trains(predictor, reads, context, dtype):
    """Forward + backward under CPU autocast: finite loss and gradients, traces in float32.
    T = 40 spans several ema.traces chunks."""
    model = make(predictor=predictor, reads=reads, context=context).train()
    seen = []
    model.blocks[0].ctx.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    idx = tokens(2, 41, 9)
    with torch.autocast("cpu", dtype=dtype):
        logits, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert seen == [torch.float32] and logits.dtype == dtype
    assert torch.isfinite(loss) and loss.item() > 3.0
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("predictor,reads", list(READERS))
def test_pure_bf16_model_runs_forward_and_step(predictor, reads):
    model = make(predictor=predictor, reads=reads, context="selective").to(torch.bfloat16)
    idx = tokens(2, 9, 8)
    with torch.no_grad():
        ref = model(idx)[0]
        state = model.init_state(2)
        out = []
        for token in idx.unbind(1):
            logits, state = model.step(token, state)
            out.append(logits)
    assert ref.dtype == torch.bfloat16 and torch.isfinite(ref).all()
    assert torch.allclose(torch.stack(out, 1).float(), ref.float(), atol=0.1, rtol=0)


@pytest.mark.parametrize("predictor", ["linear_attn", "softmax_attn"])
def test_state_attention_is_attention_over_s_slots(predictor):
    """Each position's x̂_t equals textbook attention with one query (q_t) and S keys/values
    (h_{t-1}^s + E_s): SDPA for softmax, `linear_attention_ref` at T = 1 for linear."""
    torch.manual_seed(3)
    pred = Block(tiny(predictor=predictor)).pred
    u, hp = torch.randn(2, 5, 32), torch.randn(2, 5, 3, 32)
    z = hp + pred.trace_emb  # (B, T, S, C)
    q = pred.q(u).view(10, 1, 4, 8).transpose(1, 2)  # (B*T, H, 1, D)
    k, v = (lin(z).view(10, 3, 4, 8).transpose(1, 2) for lin in (pred.k, pred.v))  # (B*T, H, S, D)
    attend = torch.nn.functional.scaled_dot_product_attention if predictor == "softmax_attn" else linear_attention_ref
    ref = attend(q, k, v).transpose(1, 2).reshape(2, 5, 32)
    assert torch.allclose(pred(u, hp), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("T,chunk", [(1, 4), (13, 4), (16, 4), (20, 64)])
def test_chunked_linear_attention_equals_reference(T, chunk):
    pred = LinearAttnHistory(tiny(predictor="linear_attn", reads="history"))
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


@pytest.mark.skipif("method" not in inspect.signature(ema.traces).parameters, reason="ema.traces has no method yet")
@pytest.mark.parametrize("context", ["ema", "selective"])
def test_trace_methods_agree(context):
    idx = tokens(2, 40, 10)  # longer than one chunk
    out = {m: make(trace_method=m, context=context)(idx)[0] for m in ("auto", "scan", "matmul")}
    assert torch.allclose(out["scan"], out["auto"], atol=1e-5) and torch.allclose(out["matmul"], out["auto"], atol=1e-4)


def test_tiny_model_overfits_tiny_batch():
    torch.manual_seed(0)
    model = SPEN(tiny())
    idx = tokens(4, 17, 3)
    x, y = idx[:, :-1], idx[:, 1:]
    opt = lm.configure_optimizers(model, 0.0, 2e-2, (0.9, 0.95), "cpu")
    first = model(x, y)[1].item()
    for _ in range(60):
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 3.5 and loss.item() < 0.1, (first, loss.item())


def test_hidden_states_and_head():
    model = make()
    idx = tokens(2, 9, 6)
    with torch.no_grad():
        hs = model.hidden_states(idx)
        logits = model(idx)[0]
    assert len(hs) == 3 and all(h.shape == (2, 9, 32) for h in hs)
    assert logits.shape == (2, 9, V) and model.wte.weight.shape == (64, 32)  # padding rows never logits
    assert torch.allclose(model.lm_head(model.ln_f(hs[-1]))[..., :V], logits, atol=1e-6)


def test_config_round_trip_rebuilds_the_same_model():
    cfg = tiny(predictor="softmax_attn", reads="history", context="selective", alphas=[0.3, 0.05])
    d = asdict(cfg)
    assert d["alphas"] == (0.3, 0.05)
    a = SPEN(cfg)
    b = SPEN(SPENConfig(**d))
    b.load_state_dict(a.state_dict())
    idx = tokens(1, 5, 7)
    assert torch.equal(a(idx)[0], b(idx)[0])


def test_derived_sizes_follow_the_width():
    cfg = SPENConfig(n_embd=128)
    assert (cfg.ffn_hidden, cfg.ffn_topk, cfg.n_head) == (512, 31, 2)
    assert SPENConfig(n_embd=32).n_head == 1


@pytest.mark.parametrize("field,value", [
    ("predictor", "lstm"), ("reads", "all"), ("context", "gru"), ("trace_method", "fast"),
    ("ffn_topk", 0), ("ffn_topk", 65), ("n_layer", 0), ("n_embd", -1), ("vocab_size", 0),
    ("alphas", (0.0, 0.5)), ("alphas", "ab"), ("dropout", 1.5), ("block_size", 2.5)])
def test_bad_config_gives_clear_error(field, value):
    with pytest.raises(ValueError, match=field) as e:
        tiny(**{field: value})
    assert "\n" not in str(e.value)


def test_meaningless_combinations_are_refused():
    with pytest.raises(ValueError, match="reads='history' needs an attention predictor"):
        tiny(predictor="linear", reads="history")
    with pytest.raises(ValueError, match="n_head"):
        tiny(predictor="softmax_attn", n_head=5)


@pytest.mark.parametrize("call,match", [
    (lambda m: m(torch.tensor([[1, V]])), r"outside \[0, 60\)"),  # a padding row: not a token
    (lambda m: m(torch.tensor([[-1, 2]])), "outside"),
    (lambda m: m(torch.zeros(1, 3)), "integer tensor"),
    (lambda m: m(torch.zeros(2, 0, dtype=torch.long)), "T >= 1"),
    (lambda m: m(torch.zeros(3, dtype=torch.long)), r"\(B, T\)"),
    (lambda m: m(torch.ones(1, 3, dtype=torch.long), torch.tensor([[1, -1, V]])), "targets"),
    (lambda m: m.step(torch.tensor([V + 2]), m.init_state(1)), "token"),
    (lambda m: m.generate(torch.zeros(1, 0, dtype=torch.long), 3), "prompt of at least one token"),
    (lambda m: m.generate(torch.tensor([[V]]), 3), "outside"),
    (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), -3), "max_new_tokens"),
    (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=-1.0), "temperature"),
    (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), 3, top_k=0), "top_k"),
])
def test_bad_inputs_give_clear_errors(call, match):
    with pytest.raises(ValueError, match=match) as e:
        call(make())
    assert "\n" not in str(e.value)


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
    model = make(predictor="linear_attn", reads="history")
    opt = lm.configure_optimizers(model, 0.1, 1e-3, (0.9, 0.95), "cpu")
    groups = [list(g["params"]) for g in opt.param_groups]
    assert sum(len(g) for g in groups) == len(list(model.parameters()))
    assert all(p.dim() < 2 for p in groups[1]) and groups[0] and groups[1]
    prompt = torch.zeros(2, 3, dtype=torch.long)
    a = model.generate(prompt, 6, top_k=10, generator=torch.Generator().manual_seed(5))
    b = model.generate(prompt, 6, top_k=10, generator=torch.Generator().manual_seed(5))
    assert a.shape == (2, 9) and torch.equal(a, b) and torch.equal(a[:, :3], prompt)
    assert int(a.max()) < V  # padding rows are never sampled
    assert torch.equal(model.generate(prompt, 0), prompt)


def test_flops_and_mfu():
    model = make()
    n = model.flops_per_token(32)
    assert n > 6 * 64 * 32  # at least the head
    hist = make(predictor="softmax_attn", reads="history")
    assert hist.flops_per_token(64) > hist.flops_per_token(32) > make(predictor="softmax_attn").flops_per_token(32)
    assert lm.estimate_mfu(model, 32, 1000.0, peak=n * 1000.0) == pytest.approx(1.0)

"""spen.py: paper-size parameter count; causality, step == forward and the reference loops == the
fast paths (values, gradients) of each context and per-block model (each reader's: tests/test_readers.py);
one initialisation, no host sync in a training forward, autocast dtypes, checked inputs where they
enter (step, generate), learning, contract. The readers themselves: tests/test_variants.py."""
from dataclasses import asdict

import pytest
import torch

import lm
from plumbing import runtime
import spen
import variants
from spen import READERS, SPEN, VARIANTS, SparseFFN, SPENConfig
from variants import Reader

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


def assert_causal(model, idx):
    """Changing token j changes the logits at j and leaves every earlier position as it was."""
    for j in (0, 7, idx.shape[1] - 1):
        idx2 = idx.clone()
        idx2[:, j] = (idx2[:, j] + 1) % V
        with torch.no_grad():
            a, b = model(idx)[0], model(idx2)[0]
        assert a.shape == (*idx.shape, V)
        assert torch.allclose(a[:, :j], b[:, :j], atol=1e-6, rtol=0), f"token {j} leaked backwards"
        assert not torch.allclose(a[:, j], b[:, j], atol=1e-4), "changed token had no effect"


def state_numel(state):
    flat = lambda x: x if isinstance(x, list) else [x]  # a convolution's caches: a list of tensors
    return sum(t.numel() for s in state for x in [s["h"], *(s["pred"] or {}).values()] for t in flat(x))


# options and per-block models under bf16 autocast (each reader with each option: tests/test_readers.py)
OPTIONS = [dict(predictor="delta", conv=4), dict(predictor="ema_kv", conv=2), dict(predictor="gated_delta", conv=4),
           dict(predictor="gated_delta"), dict(predictor="gated_ema_kv", conv=4), dict(predictor="softmax_attn", reads="history", window=4),
           dict(predictor=("ema_kv", "softmax_attn"), reads=("state", "history")),
           dict(predictor=("gated_delta", "delta"), conv=3)]


@pytest.mark.parametrize("kw", OPTIONS)
def test_options_train_under_autocast(kw):
    model, idx = make(**kw), tokens(2, 20, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model.train()(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("kw", [dict(context=c) for c in spen.CONTEXTS]
                         + [kw for kw in OPTIONS if isinstance(kw["predictor"], tuple)])
def test_contexts_and_per_block_models_are_causal_step_like_forward_and_loop_like_fast(kw):
    """Each context (the paper's reader) and each model with a reader per block: strict causality,
    step() == forward token by token with the state state_floats counts, trace_method='loop' (every
    reference inside the model) == the fast paths, logits and the gradient of every parameter, T = 40
    over several chunks of traces and readers. Each reader's: tests/test_readers.py."""
    model, idx = make(**kw), tokens(2, 41, 1)
    assert_causal(model, idx[:, :20])
    with torch.no_grad():
        ref, state, out = model(idx[:, :13])[0], model.init_state(2), []
        for token in idx[:, :13].unbind(1):
            logits, state = model.step(token, state)
            out.append(logits)
    assert torch.allclose(torch.stack(out, 1), ref, atol=1e-4, rtol=0)
    assert state_numel(state) == 2 * model.config.n_layer * model.state_floats(13)
    runs = {}
    for method in ("auto", "loop"):
        m = make(trace_method=method, **kw)  # same seed: same weights
        logits, loss = m(idx[:, :-1], idx[:, 1:])
        runs[method] = logits, loss, torch.autograd.grad(loss, list(m.parameters()))
    assert torch.allclose(runs["auto"][0], runs["loop"][0], atol=1e-5, rtol=0)
    assert torch.allclose(runs["auto"][1], runs["loop"][1], atol=1e-6)
    assert all(torch.allclose(x, y, atol=1e-6, rtol=1e-4) for x, y in zip(runs["auto"][2], runs["loop"][2]))


def test_window_bounds_the_cache_and_forgets_what_left_it():
    """A window of w keeps the slots of the last w positions: the cache stops growing at w, and the
    slot of position j (its trace state h_{j-1}) is read at t = j .. j + w - 1 and never after."""
    w = 4
    model = make(predictor="softmax_attn", reads="history", window=w)
    assert model.state_floats(w) == model.state_floats(30) < make(predictor="softmax_attn", reads="history").state_floats(30)
    pred = model.blocks[0].pred
    u, h_prev = torch.randn(1, 12, 32), torch.randn(1, 12, 3, 32)
    h2 = h_prev.clone()
    h2[:, 3] += 1.0  # the slots of position 3 only
    with torch.no_grad():
        d = (pred(u, h_prev) - pred(u, h2)).abs().amax(-1)[0]  # (T,)
    assert (d[:3] == 0).all() and (d[3:3 + w] > 0).all() and (d[3 + w:] == 0).all()


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


@pytest.mark.parametrize("context", ["ema", "selective"])
def test_trace_methods_agree(context):
    idx = tokens(2, 40, 10)  # longer than one chunk
    out = {m: make(trace_method=m, context=context)(idx)[0] for m in ("auto", "scan", "matmul")}
    assert torch.allclose(out["scan"], out["auto"], atol=1e-5) and torch.allclose(out["matmul"], out["auto"], atol=1e-4)


def test_loop_switch_reaches_every_chunked_reader(monkeypatch):
    """The one switch: trace_method='loop' runs the readers' references, never their fast paths."""
    import variants
    import writes
    calls = []
    for module, name in ((writes, "ema_kv_chunked"), (writes, "delta_rule_chunked"), (writes, "gated_delta_chunked"),
                         (writes, "ema_kv_ref"), (writes, "delta_rule_ref"), (writes, "gated_delta_ref"),
                         (variants, "linear_attention_ref")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    for predictor, reads in (("ema_kv", "state"), ("delta", "state"), ("gated_delta", "state"),
                             ("gated_ema_kv", "state"), ("linear_attn", "history")):
        for method in ("auto", "loop"):
            calls.clear()
            make(trace_method=method, predictor=predictor, reads=reads)(tokens(1, 9, 1))
            ref = {c for c in calls if c.endswith("_ref")}
            assert ref if method == "loop" else not ref, (predictor, method, calls)
            assert not (method == "loop" and {c for c in calls if c.endswith("_chunked")}), calls


def test_parameters_are_initialised_once(monkeypatch):
    calls = []
    real = spen.init_weights
    monkeypatch.setattr(spen, "init_weights", lambda module, cfg: calls.append(type(module).__name__) or real(module, cfg))
    SPEN(tiny(n_layer=3))
    assert calls == ["SPEN"]  # once, for the whole model; Blocks do not initialise themselves


class ToyReader(Reader):
    """A reader written outside spen.py: x̂_t = W h_{t-1}^1 + b, with b added (not a matmul weight)."""

    def __init__(self, cfg):
        super().__init__()
        self.w = torch.nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.b = torch.nn.Parameter(torch.zeros(1, cfg.n_embd))

    @torch.no_grad()
    def init_weights(self, cfg):
        return [self.w.weight.normal_(0.0, 0.02), self.b.fill_(0.5)]

    def no_matmul_params(self):
        return [self.b]

    def forward(self, u, h_prev):
        return self.w(h_prev[..., 0, :]) + self.b[0]  # (..., C)

    def init_state(self, batch_size, device):
        return None

    def step(self, u_t, h_prev_t, state):
        return self.forward(u_t, h_prev_t), state

    def state_floats(self, T):
        return 0

    def attn_flops(self, T):
        return 7


def test_a_new_reader_is_one_class_and_one_registry_line(monkeypatch):
    """Registered in the registry alone (spen.py untouched), a reader builds, initialises itself,
    runs forward and step alike and counts its FLOPs; an init_weights that leaves a parameter out
    is refused by name."""
    monkeypatch.setitem(spen.READERS, ("toy", "state"), ToyReader)
    model = make(predictor="toy")
    assert all(torch.equal(b.pred.b, torch.full((1, 32), 0.5)) for b in model.blocks)
    assert 0.01 < model.blocks[0].pred.w.weight.std() < 0.03
    idx = tokens(2, 7, 1)
    with torch.no_grad():
        ref, state, out = model(idx)[0], model.init_state(2), []
        for token in idx.unbind(1):
            logits, state = model.step(token, state)
            out.append(logits)
    assert torch.allclose(torch.stack(out, 1), ref, atol=1e-5, rtol=0)
    vectors = sum(p.numel() for p in model.parameters() if p.dim() < 2)
    assert model.flops_per_token(32) == 6 * (model.num_params() - vectors - 2 * 32) + 3 * 2 * 7
    monkeypatch.setattr(ToyReader, "init_weights", lambda self, cfg: [self.w.weight])
    with pytest.raises(ValueError, match=r"no rule for parameter 'blocks\.0\.pred\.b'"):
        make(predictor="toy")


HOST_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")


def count_host_reads(monkeypatch, checks=None):
    """Patch the Tensor methods that read a value back to the host; returns the list they append to
    (and, with `checks`, count lm.check_tokens calls there too)."""
    reads = []
    for name in HOST_READS:
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda t, *a, _n=name, _r=real: reads.append(_n) or _r(t, *a))
    if checks is not None:
        real_check = lm.check_tokens
        monkeypatch.setattr(lm, "check_tokens", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    return reads


def test_training_forward_checks_ids_without_a_host_sync(monkeypatch):
    """forward checks the ids (lm.check_tokens), and neither that check nor anything else in
    forward and backward reads a value back from the device."""
    checks = []
    reads = count_host_reads(monkeypatch, checks)
    for context in ("ema", "selective"):
        idx = tokens(2, 17, 12)
        logits, loss = make(context=context).train()(idx[:, :-1], idx[:, 1:])
        loss.backward()
    assert reads == [] and logits.shape == (2, 16, V) and len(checks) == 2


def test_generate_makes_no_host_sync_per_token(monkeypatch):
    """64 generated tokens read nothing back from the device: the sampled ids go straight back in."""
    model = make()
    prompt = tokens(2, 5, 3)
    reads = count_host_reads(monkeypatch)
    out = model.generate(prompt, 64, top_k=10, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 69) and reads == []


@pytest.mark.parametrize("call", ["forward", "hidden_states", "step", "generate"])
def test_ids_past_the_vocabulary_are_refused_in_every_entry(call):
    """Id V is a padding row of the table (not a token), id Vp is past the table: both are refused
    with the range, in forward, hidden_states, step and generate alike."""
    model = make()
    for bad in (V, lm.padded_vocab(V), -1):
        idx = torch.tensor([[1, bad, 2]])
        run = dict(forward=lambda: model(idx), hidden_states=lambda: model.hidden_states(idx),
                   step=lambda: model.step(idx[:, 1], model.init_state(1)),
                   generate=lambda: model.generate(idx, 2))[call]
        with pytest.raises(ValueError, match=rf"outside \[0, {V}\)"):
            run()


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
        spen.check(tiny(**{field: value}))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw,match", [
    (dict(predictor="ema_kv", write_alphas=(0.5, 0.0)), r"write_alphas must be .* decays in \(0, 1\]"),
    (dict(predictor="delta", write_alphas=(1.5,)), r"write_alphas must be .* decays in \(0, 1\]"),
    (dict(predictor="ema_kv", write_alphas=()), "write_alphas must be None or a non-empty tuple"),
    (dict(predictor="delta", write_alphas=(0.1, 0.01)), r"write_alphas: the delta rule .* takes at most 1 decay, got 2"),
    (dict(predictor="delta", conv=-1), "conv must be"), (dict(predictor="delta", conv=4.0), "conv must be"),
    (dict(predictor="softmax_attn", reads="history", window=32), "window .* below block_size"),
    (dict(predictor="softmax_attn", reads="history", window=-1), "window must be"),
    (dict(predictor="delta", read_norm=1), "read_norm must be True or False"),
    (dict(predictor="delta", n_head=5), r"n_embd \(32\) must be divisible by n_head \(5\)"),
    (dict(predictor="ema_kv", n_head=0), "n_head must be an int >= 1")])
def test_write_settings_are_checked(kw, match):
    """Each reader's own check of its options' values (one it does not declare: tests/test_readers.py)."""
    with pytest.raises(ValueError, match=match) as e:
        SPEN(tiny(**kw))
    assert "\n" not in str(e.value)
    SPEN(tiny(predictor=kw["predictor"], reads=kw.get("reads", "state")))  # the reader itself builds


def test_write_settings_default_to_todays_model_and_round_trip():
    """write_alphas=None, read_norm=False rebuild a saved model unchanged; a JSON list is a tuple."""
    for predictor in ("ema_kv", "delta"):
        torch.manual_seed(0)
        a = SPEN(tiny(predictor=predictor))
        torch.manual_seed(0)
        b = SPEN(tiny(predictor=predictor, write_alphas=None, read_norm=False))
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    cfg = tiny(predictor="ema_kv", write_alphas=[0.03, 0.001], read_norm=True)
    assert cfg.write_alphas == (0.03, 0.001)
    m = SPEN(cfg)
    m2 = SPEN(SPENConfig(**asdict(cfg)))
    m2.load_state_dict(m.state_dict())
    idx = tokens(1, 5, 7)
    assert torch.equal(m(idx)[0], m2(idx)[0])


@pytest.mark.parametrize("predictor,reads,context", VARIANTS)
def test_empty_sequence_gives_empty_logits_as_gpt(predictor, reads, context):
    """T = 0: SPEN returns (B, 0, V) logits and the same loss as GPT (a mean over no token), every
    reader and both paths (fast and reference)."""
    import gpt
    idx = torch.zeros(2, 0, dtype=torch.long)
    g = gpt.GPT(gpt.GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_embd=32))
    for method in ("auto", "loop"):
        logits, loss = make(predictor=predictor, reads=reads, context=context, trace_method=method)(idx, idx)
        glogits, gloss = g(idx, idx)
        assert logits.shape == glogits.shape == (2, 0, V)
        assert loss.isnan() and gloss.isnan()  # F.cross_entropy's mean over no token, in both


def test_meaningless_combinations_are_refused():
    with pytest.raises(ValueError, match="reads='history' needs a predictor that reads the history"):
        SPEN(tiny(predictor="linear", reads="history"))  # the model checks its config (spen.check)
    with pytest.raises(ValueError, match="n_head"):
        spen.check(tiny(predictor="softmax_attn", n_head=5))


@pytest.mark.parametrize("call,match", [  # user tokens enter through step and generate
    (lambda m: m.step(torch.tensor([V]), m.init_state(1)), r"outside \[0, 60\)"),  # a padding row: not a token
    (lambda m: m.step(torch.tensor([-1, 2]), m.init_state(2)), "outside"),
    (lambda m: m.step(torch.zeros(1), m.init_state(1)), "integer tensor"),
    (lambda m: m.step(torch.zeros(1, 3, dtype=torch.long), m.init_state(1)), r"\(B,\)"),
    (lambda m: m.step(torch.tensor([V + 2]), m.init_state(1)), "token"),
    (lambda m: m.generate(torch.tensor([[1, V]]), 3), r"outside \[0, 60\)"),
    (lambda m: m.generate(torch.tensor([[-1, 2]]), 3), "outside"),
    (lambda m: m.generate(torch.zeros(1, 3), 3), "integer tensor"),
    (lambda m: m.generate(torch.zeros(3, dtype=torch.long), 3), r"\(B, T\)"),
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
    ffn.proj.register_forward_pre_hook(lambda m, inp: hidden.update(a=inp[0]))  # returns None: inputs unchanged
    ffn(u).sum().backward()
    a = hidden["a"]  # (5, 64) the masked activations fed to W_2
    assert ((a != 0).sum(-1) <= 8).all() and ((a != 0).sum(-1) >= 6).all()  # k kept (relu may zero some)
    dense = torch.relu(u @ ffn.fc.weight.t())
    kept = dense >= dense.topk(8, dim=-1).values[:, -1:]
    assert torch.equal(a, dense * kept)  # the reference, dense-mask definition
    # W_1's gradient rows are zero for units never selected in the batch
    never = ~kept.any(0)
    assert never.any() and (ffn.fc.weight.grad[never] == 0).all()
    # values and gradients equal the dense mask's (relu after topk is the same function)
    u = torch.randn(5, 32, requires_grad=True)
    def out_and_grads(y):
        return (y, *torch.autograd.grad(y.square().sum(), (u, ffn.fc.weight, ffn.proj.weight)))
    z = torch.relu(ffn.fc(u))
    ref = out_and_grads(ffn.proj(z * (z >= z.topk(8, dim=-1).values[:, -1:])))
    assert all(torch.allclose(a, b) for a, b in zip(out_and_grads(ffn(u)), ref))


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
    assert runtime.estimate_mfu(model, 32, 1000.0, peak=n * 1000.0) == pytest.approx(1.0)


@pytest.mark.parametrize("kw,match", [
    (dict(predictor=("delta", "delta", "delta")), r"predictor names 3 blocks; the model has n_layer = 2"),
    (dict(predictor="3*delta"), r"predictor names 3 blocks; the model has n_layer = 2"),
    (dict(predictor="delta,delta", reads="state,state,history"), r"reads names 3 blocks"),
    (dict(predictor="delta,softmax_attn(conv=4)"), "conv is not an option of softmax_attn"),
    (dict(predictor="delta(size=4),delta"), "a block's own options are reads, .*conv"),
    (dict(predictor="delta(conv=four),delta"), "'conv=four' in 'delta.conv=four.' is not a conv value"),
    (dict(predictor="delta(read_norm=yes)"), "is not a read_norm value"),
    (dict(predictor="delta conv"), "is not a block spec"),
    (dict(predictor=("delta", "nope")), "predictor must be one of"),
    (dict(predictor=("delta", "linear"), reads=("state", "history")), "needs a predictor that reads the history"),
    (dict(predictor=("linear", "linear"), conv=4), "conv.* the model has none"),
    (dict(predictor="softmax_attn(reads=history, reads=state),linear"), "reads is given twice"),
    (dict(predictor="0*delta,2*linear"), "names no block"),
    (dict(predictor=f"{10 ** 12}*delta"), f"predictor names {10 ** 12} blocks"),  # counted, not expanded
    (dict(predictor="ema_kv(write_alphas=0.5 0.5)"), "distinct decays"),  # as --write_alphas 0.5 0.5 is refused
    (dict(predictor="ema_kv", write_alphas=(0.5, 0.5)), "distinct decays")])
def test_per_block_readers_are_checked(kw, match):
    """A per-block tuple of the wrong length, an unknown reader in it, or a block that cannot read
    what it is told: one line, before anything is built."""
    with pytest.raises(ValueError, match=match) as e:
        SPEN(tiny(**kw))
    assert "\n" not in str(e.value)


def test_a_model_is_one_list_of_blocks():
    """One spec list names each block's reader and its own options: it builds the same model, draw
    for draw, as the older two aligned lists with a model-wide option, and an option on one block
    stays on that block (here a convolution on block 0 only, and one block reading the history)."""
    old = make(predictor=("gated_delta", "softmax_attn"), reads=("state", "history"), conv=4).state_dict()
    new = make(predictor="gated_delta(conv=4),softmax_attn(reads=history)").state_dict()
    assert old.keys() == new.keys() and all(torch.equal(old[k], new[k]) for k in old)
    for b in [("softmax_attn", "history", dict(window=4)), ("delta", "state", dict(write_alphas=(0.1,), read_norm=True))]:
        assert variants.block_list(variants.spec(b)) == [b]  # a block's text reads back as the block
    model = make(predictor="2*delta(conv=4),delta(write_alphas=0.02)", n_layer=3)
    assert [(b.pred.convs is not None, b.pred.a) for b in model.blocks] == [(True, 0.0), (True, 0.0), (False, 0.02)]
    idx = tokens(2, 12, 3)
    logits, _ = model(idx)
    state, steps = model.init_state(2), []
    for t in range(12):
        out, state = model.step(idx[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), logits, atol=1e-4, rtol=1e-4)


def test_hybrid_reports_the_sum_over_its_blocks():
    """A model with a different reader per block reports state and FLOPs summed over its blocks
    (state per layer: the mean), not block 0 times the depth: here block 0 holds no state of its
    own and block 1 a softmax cache, so the block-0 shortcut would report the traces alone."""
    T = 32
    hybrid = SPEN(tiny(predictor=("linear", "softmax_attn"), reads=("state", "history")))
    plain, full = SPEN(tiny()), SPEN(tiny(predictor="softmax_attn", reads="history"))
    assert [type(b.pred).__name__ for b in hybrid.blocks] == ["LinearPredictor", "SoftmaxAttnHistory"]
    assert 2 * hybrid.state_floats(T) == plain.state_floats(T) + full.state_floats(T) > 2 * plain.state_floats(T)
    per_block = [b.pred.attn_flops(T) for b in hybrid.blocks]
    assert per_block[0] == 0 < per_block[1] == full.blocks[0].pred.attn_flops(T)
    extra = hybrid.flops_per_token(T) - 6 * (hybrid.num_params() - sum(p.numel() for p in hybrid.parameters() if p.dim() < 2)
                                             - sum(b.pred.trace_emb.numel() for b in hybrid.blocks[1:]))
    assert extra == 3 * per_block[1]

"""variants.py: what the state and history readers can and cannot tell apart, each attention
reader against its textbook definition (SDPA, the quadratic linear attention), the chunked linear
attention against its reference (values and gradients), the write readers (ema_kv, delta: their
fast paths against their loops, what they store, their state size), the selective context
starting as the fixed EMA; and the one initialisation table."""
import pytest
import torch
import torch.nn.functional as F

import ema
from spen import READERS, Block, EMAContext, SPENConfig, init_weights, shift_right
from variants import LinearAttnHistory, SelectiveContext, linear_attention_ref
from writes import (WRITE_READERS, DeltaRuleState, EMAKVState, delta_rule_chunked, delta_rule_ref, ema_kv_chunked,
                    ema_kv_ref, l2norm)

WRITERS = tuple(p for p, _ in WRITE_READERS)  # a state of their own


def tiny(**kw):
    cfg = dict(vocab_size=60, block_size=32, n_layer=2, n_embd=32, ffn_hidden=64, ffn_topk=8, n_head=4)
    cfg.update(kw)
    return SPENConfig(**cfg)


def block_of(**kw):
    """A standalone Block, initialised as SPEN initialises its blocks (one explicit call)."""
    cfg = tiny(**kw)
    block = Block(cfg)
    init_weights(block, cfg)
    return block.eval()


@pytest.mark.parametrize("predictor,reads", list(READERS))
def test_predictor_reads_only_past_traces(predictor, reads):
    """x̂_t must not depend on u_t through the values: perturb u_t only inside the traces' input.
    The traces first differ at h_prev[6] = h_5: the trace readers read it at t = 6; the write
    readers write it (as the key k_6) at t = 6 and read it from t = 7 on."""
    block = block_of(predictor=predictor, reads=reads).eval()
    u = torch.randn(1, 10, 32)
    assert block(u).shape == u.shape  # usable standalone: (B, T, C) -> (B, T, C)
    h_prev = shift_right(block.ctx(u))  # (1, 10, S, C)
    u2 = u.clone()
    u2[:, 5] += 1.0
    h_prev2 = shift_right(block.ctx(u2))
    assert torch.equal(h_prev[:, :6], h_prev2[:, :6])  # h_{t-1} at t <= 5 does not contain u_5
    x1, x2 = block.pred(u, h_prev), block.pred(u, h_prev2)  # same query, traces differ only from t = 6
    first = 7 if predictor in WRITERS else 6
    assert torch.allclose(x1[:, :first], x2[:, :first], atol=1e-6, rtol=0)
    assert not torch.allclose(x1[:, first], x2[:, first], atol=1e-5)


def test_state_readers_cannot_tell_pasts_with_equal_state_apart():
    """With S = 3 traces, 4 inputs u_0..u_3 map linearly to h_3 through a 3 x 4 matrix, which has
    a null space: two different pasts with the same state h_3. A reader of the traces alone
    (state_floats 0) gives the same x̂_4 for both; a history reader sees h_0..h_2 too, and a write
    reader holds a state of its own written from every past u_j: both tell them apart."""
    a = torch.tensor(SPENConfig().alphas, dtype=torch.float64)[:, None]  # (S, 1)
    M = a * (1 - a) ** (3 - torch.arange(4, dtype=torch.float64))  # (S, 4): h_3 = M u_{0..3}
    null = torch.linalg.svd(M).Vh[-1]  # (4,), M @ null = 0
    torch.manual_seed(0)
    u = torch.randn(1, 5, 32)
    u2 = u.clone()
    u2[0, :4] += 3 * null.float()[:, None] * torch.randn(32)
    for predictor, reads in READERS:
        block = block_of(predictor=predictor, reads=reads).eval()
        for p in block.pred.parameters():  # away from the near-uniform attention of the init
            torch.nn.init.normal_(p, std=0.3)
        h_prev, h_prev2 = shift_right(block.ctx(u)), shift_right(block.ctx(u2))
        assert torch.allclose(h_prev[:, 4], h_prev2[:, 4], atol=1e-5) and not torch.allclose(h_prev[:, 3], h_prev2[:, 3], atol=0.1)
        with torch.no_grad():
            x1, x2 = block.pred(u, h_prev)[0, 4], block.pred(u, h_prev2)[0, 4]  # x̂_4, same query u_4
        diff, scale = (x1 - x2).abs().max(), x1.abs().max()
        if block.pred.state_floats(5) == 0:
            assert diff < 1e-4 * scale, (predictor, reads, diff / scale)
        else:
            assert diff > 1e-2 * scale, (predictor, reads, diff / scale)


def test_history_reader_is_lossless():
    """The inputs come back exactly from what the softmax history reader caches: its value slots
    v = W_v (h_{j-1}^s + E_s), inverted through W_v, give h, and u_j = (h_j - (1 - a) h_{j-1}) / a."""
    torch.manual_seed(0)
    cfg_kw = dict(predictor="softmax_attn", reads="history")
    cfg = tiny(**cfg_kw)
    block = block_of(**cfg_kw).double()
    T, C, S = 8, 32, 3
    u = torch.randn(1, T, C, dtype=torch.float64)
    h_prev = shift_right(block.ctx(u))  # (1, T, S, C)
    state = block.pred.init_state(1, None)
    state = {k: v.double() for k, v in state.items()}
    for t in range(T):
        _, state = block.pred.step(u[:, t], h_prev[:, t], state)
    v = state["v"].transpose(1, 2).reshape(1, T * S, C)  # (1, T*S, C), slots j*S + s
    z = torch.linalg.solve(block.pred.v.weight, v[0].t()).t().view(T, S, C)  # W_v^-1 v
    h = z - block.pred.trace_emb  # (T, S, C): h_{j-1}^s, j = 0..T-1
    for s, a_s in enumerate(cfg.alphas):
        rec = (h[1:, s] - (1 - a_s) * h[:-1, s]) / a_s  # (T-1, C) = u_0..u_{T-2}
        assert torch.allclose(rec, u[0, :T - 1], atol=1e-8), s


@pytest.mark.parametrize("predictor", ["linear_attn", "softmax_attn"])
def test_state_attention_is_attention_over_s_slots(predictor):
    """Each position's x̂_t equals textbook attention with one query (q_t) and S keys/values
    (h_{t-1}^s + E_s): SDPA for softmax, `linear_attention_ref` at T = 1 for linear."""
    torch.manual_seed(3)
    pred = block_of(predictor=predictor).pred
    u, h_prev = torch.randn(2, 5, 32), torch.randn(2, 5, 3, 32)
    z = h_prev + pred.trace_emb  # (B, T, S, C)
    q = pred.q(u).view(10, 1, 4, 8).transpose(1, 2)  # (B*T, H, 1, D)
    k, v = (lin(z).view(10, 3, 4, 8).transpose(1, 2) for lin in (pred.k, pred.v))  # (B*T, H, S, D)
    attend = torch.nn.functional.scaled_dot_product_attention if predictor == "softmax_attn" else linear_attention_ref
    ref = attend(q, k, v).transpose(1, 2).reshape(2, 5, 32)
    assert torch.allclose(pred(u, h_prev), ref, atol=1e-5, rtol=0)


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


# ------------------------------------------------------------------------------------------
# The write readers: ema_kv (fixed-decay EMA of k v^T) and delta (the delta rule).


def write_inputs(predictor, B, H, T, D, S=3, seed=0, dtype=torch.float64):
    """Random leaf inputs of the reader's core: ema_kv (q (B, H, S, T, D), k, v), delta (q, k, v
    (B, H, T, D), beta logits (B, H, T))."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, H, S, T, D) if predictor == "ema_kv" else (B, H, T, D), (B, H, T, D), (B, H, T, D)]
    shapes += [(B, H, T)] if predictor == "delta" else []
    return [torch.randn(s, generator=g, dtype=dtype, requires_grad=True) for s in shapes]


def write_core(predictor, inputs, chunk=None, alphas=(0.5, 0.1, 0.02), a=0.0):
    """The loop (chunk None) or the chunked fast path on the leaves; delta (decay a) normalises q, k
    and squashes beta as DeltaRuleState does."""
    if predictor == "ema_kv":
        return ema_kv_ref(*inputs, alphas) if chunk is None else ema_kv_chunked(*inputs, alphas, chunk)
    q, k, v, b = inputs
    args = l2norm(q), l2norm(k), v, torch.sigmoid(b)
    return delta_rule_ref(*args, a) if chunk is None else delta_rule_chunked(*args, a, chunk=chunk)


@pytest.mark.parametrize("T,chunk", [(1, 4), (7, 4), (12, 4), (17, 4), (17, 64)])
@pytest.mark.parametrize("predictor,a", [("ema_kv", 0.0), ("delta", 0.0), ("delta", 0.3), ("delta", 1.0)])
def test_write_reader_fast_path_equals_reference(predictor, a, T, chunk):
    """The chunked forms compute the loops' values and gradients (of every input), float64; T runs
    below one chunk, across whole chunks and into a partial last chunk; delta without and with a
    fixed decay (a = 1: the state keeps the last write only)."""
    inputs = write_inputs(predictor, 2, 2, T, 4, seed=T)
    fast, ref = write_core(predictor, inputs, chunk, a=a), write_core(predictor, inputs, a=a)
    assert fast.shape == ref.shape == (2, 2, T, 4)
    assert torch.allclose(fast, ref, atol=1e-10, rtol=0)
    w = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=ref.dtype)
    grads = [torch.autograd.grad((y * w).sum(), inputs, materialize_grads=True) for y in (fast, ref)]  # T = 1: k, v unread
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_decayed_delta_rule_is_the_plain_rule_rescaled():
    """An independent formula: with M_t = g^(t+1) N_t the gated rule is the plain delta rule on N
    with values g^-(t+1) v_t, read as y_t = g^t (N_{t-1} q_t); float64, T short enough for g^-T."""
    q, k, v, b = write_inputs("delta", 2, 2, 12, 4, seed=5)
    a = 0.2
    g = (1 - a) ** torch.arange(12, dtype=torch.float64)[:, None]  # (T, 1) g^t
    args = l2norm(q), l2norm(k), torch.sigmoid(b)
    with torch.no_grad():
        plain = delta_rule_ref(args[0], args[1], v / (g * (1 - a)), args[2]) * g
        assert torch.allclose(delta_rule_ref(args[0], args[1], v, args[2], a), plain, atol=1e-12, rtol=0)
        assert torch.allclose(delta_rule_chunked(args[0], args[1], v, args[2], a, chunk=5), plain, atol=1e-12, rtol=0)
        assert not torch.allclose(delta_rule_ref(args[0], args[1], v, args[2]), plain, atol=1e-2)


@pytest.mark.parametrize("a", [0.0, 0.5, 0.9])
def test_decayed_delta_rule_chunk_64_keeps_float32_precision(a):
    """Local time inside each chunk: every factor is a power g^n <= 1, so a fast decay over a chunk of
    64 (0.5^63 ~ 1e-19) computed in float32 is as close to the float64 loop as the float32 loop is."""
    q, k, v, b = (x.detach() for x in write_inputs("delta", 1, 2, 160, 16, seed=6))
    args = l2norm(q), l2norm(k), v, torch.sigmoid(b)
    exact = delta_rule_ref(*args, a)
    fast = delta_rule_chunked(*(x.float() for x in args), a, chunk=64).double()
    loop = delta_rule_ref(*(x.float() for x in args), a).double()
    assert (fast - exact).abs().max() < 2 * (loop - exact).abs().max() + 1e-6 < 1e-5


@pytest.mark.parametrize("predictor", WRITERS)
def test_write_reader_sees_u_t_only_through_its_query(predictor):
    """x̂_t reads M_{t-1}, the state before t's own write: with the queries (and the gated rules'
    output gate) held fixed (a hook replaces W_q u by its unperturbed value), perturbing u_5 (values v_5, and beta_5) leaves
    x̂_0..x̂_5 unchanged and changes x̂_6 on, where the write is read. Without the hook x̂_5 changes:
    through the query only. (With W_q = 0, x̂ = 0 everywhere: every path from u_t runs through q.)"""
    torch.manual_seed(0)
    pred = READERS[predictor, "state"](tiny(predictor=predictor))
    u, h_prev = torch.randn(2, 10, 32), torch.randn(2, 10, 3, 32)
    u2 = u.clone()
    u2[:, 5] += 1.0
    held = [pred.q] + ([pred.gate] if hasattr(pred, "gate") else [])  # the gated rules: their output gate reads u_t too
    with torch.no_grad():
        hooks = [m.register_forward_hook(lambda module, inputs, out, _o=m(u): _o) for m in held]
        x1, x2 = pred(u, h_prev), pred(u2, h_prev)  # the same queries (and gates)
        [h.remove() for h in hooks]
        x3 = pred(u2, h_prev)  # the query at 5 from u2 too
    assert torch.allclose(x1[:, :6], x2[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(x1[:, 6], x2[:, 6], atol=1e-4)
    assert torch.allclose(x1[:, :5], x3[:, :5], atol=1e-6, rtol=0) and not torch.allclose(x1[:, 5], x3[:, 5], atol=1e-4)
    with torch.no_grad():
        pred.q.weight.zero_()
        assert torch.equal(pred(u, h_prev), torch.zeros(2, 10, 32))


@pytest.mark.parametrize("trace_method", ["auto", "loop"])
@pytest.mark.parametrize("predictor", WRITERS)
def test_write_reader_step_equals_forward(predictor, trace_method):
    """Reader level: step() token by token (the recurrence, float32 state) == forward (T = 13
    over chunks of 4, or the reference loop), also under bf16 autocast, where the state stays float32."""
    torch.manual_seed(1)
    pred = READERS[predictor, "state"](tiny(predictor=predictor, trace_method=trace_method))
    pred.chunk = 4
    u, h_prev = torch.randn(3, 13, 32), torch.randn(3, 13, 3, 32)
    for autocast in (False, True):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            ref = pred(u, h_prev)
            state, out = pred.init_state(3, None), []
            for t in range(13):
                x_t, state = pred.step(u[:, t], h_prev[:, t], state)
                out.append(x_t)
        assert ref.dtype == state["M"].dtype == torch.float32 and ref.shape == (3, 13, 32)
        assert torch.allclose(torch.stack(out, 1), ref, atol=1e-5 if not autocast else 1e-3, rtol=0), autocast


def orthonormal_pairs(N, D, seed):
    """N orthonormal keys (N, D) and N values (N, D), float64."""
    g = torch.Generator().manual_seed(seed)
    keys = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=torch.float64)).Q[:N]
    return keys, torch.randn(N, D, generator=g, dtype=torch.float64)


def recall_sequence(keys, values, query_keys):
    """Write every (keys[j], values[j]) in order, then read: batch element i queries query_keys[i]
    at the last position. -> q, k, v (B, 1, T, D) (one head) and a beta of ones (B, 1, T); the
    last position's own key and value are written after its read, so they are zero here."""
    B, (T, D) = len(query_keys), keys.shape
    q = torch.cat([torch.zeros(B, T, D, dtype=keys.dtype), query_keys[:, None]], 1)  # (B, T + 1, D)
    k, v = (torch.cat([x, torch.zeros(1, D, dtype=x.dtype)])[None].expand(B, T + 1, D) for x in (keys, values))
    return q[:, None], k[:, None], v[:, None], torch.ones(B, 1, T + 1, dtype=keys.dtype)


@pytest.mark.parametrize("chunk", [None, 3])
def test_delta_rule_stores_orthonormal_pairs_exactly(chunk):
    """The delta rule with beta = 1 writes k_i -> v_i by correcting what M holds at k_i, it does
    not add: after N <= D pairs with orthonormal keys M k_i = v_i exactly, and rewriting a key
    replaces its value. An additive write (the EMA of k v^T, a = 0.5) of the same pairs returns
    v_i scaled by the weight a (1 - a)^(N-1-i) of write i, and a rewrite adds to the old value."""
    N, D = 6, 8
    keys, values = orthonormal_pairs(N, D, seed=2)
    delta = delta_rule_ref if chunk is None else lambda *x: delta_rule_chunked(*x, chunk=chunk)
    y = delta(*recall_sequence(keys, values, keys))[:, 0, -1]  # (N, D): what query i retrieves
    assert torch.allclose(y, values, atol=1e-12, rtol=0)
    new = torch.randn(1, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    rewritten = recall_sequence(torch.cat([keys, keys[:1]]), torch.cat([values, new]), keys)  # key 0 -> new
    y = delta(*rewritten)[:, 0, -1]
    assert torch.allclose(y[0], new[0], atol=1e-12) and torch.allclose(y[1:], values[1:], atol=1e-12)
    a = 0.5
    q, k, v, _ = recall_sequence(keys, values, keys)
    y = ema_kv_ref(q[:, :, None], k, v, (a,))[:, 0, -1]  # one decay, the same pairs
    weight = a * (1 - a) ** (N - 1 - torch.arange(N, dtype=torch.float64))  # (N,) of write i
    assert torch.allclose(y, weight[:, None] * values, atol=1e-12)
    assert not torch.allclose(y, values, atol=0.1)
    q, k, v, _ = rewritten
    y = ema_kv_ref(q[:, :, None], k, v, (a,))[:, 0, -1]
    assert torch.allclose(y[0], a * (1 - a) ** N * values[0] + a * new[0], atol=1e-12)  # old and new, mixed


@pytest.mark.parametrize("chunk", [None, 3])
def test_ema_kv_with_decay_one_keeps_only_the_last_write(chunk):
    """a = 1: M_t = k_t v_t^T, so x̂_t = (q_t . k_{t-1}) v_{t-1} (and 0 at t = 0), for any q, k, v;
    a < 1 remembers earlier writes, so the same formula no longer holds."""
    q, k, v = write_inputs("ema_kv", 2, 2, 10, 4, S=1, seed=4)
    run = ema_kv_ref if chunk is None else lambda *x: ema_kv_chunked(*x, chunk=chunk)
    with torch.no_grad():
        last = F.pad((q[:, :, 0, 1:] * k[:, :, :-1]).sum(-1, keepdim=True) * v[:, :, :-1], (0, 0, 1, 0))  # (B, H, T, D)
        assert torch.allclose(run(q, k, v, (1.0,)), last, atol=1e-12, rtol=0)
        assert not torch.allclose(run(q, k, v, (0.5,)), 0.5 * last, atol=1e-3)


def test_write_readers_state_floats_flops_and_params_by_hand():
    """C = 32, H = 4 (D = 8), S = 3, chunk L = reader_chunk_len(8) = 32 (L = T below it). ema_kv:
    S_w*H (D x D) matrices = S_w*C*D floats (S_w = S = 3 by default: 768; write_alphas of 2 decays:
    512); delta: H (D x D) = C*D = 256; whatever T, and what init_state and step hold. FLOPs per
    token of the chunked forward (a multiply-add is 2): ema_kv 2 (S_w + 1) L C + 4 S_w C D =
    8192 + 3072 at T = 64; delta 8 L C + 6 C D = 8192 + 1536. Parameters: ema_kv W_q (S_w C x C),
    W_k (C x S C), W_v (C x C) = (S_w + S + 1) C^2; delta W_q, W_v (C x C), W_k (C x S C), W_beta
    (H x C) = 5 C^2 + H C; read_norm adds the gain, D."""
    for kw, floats, flops, params in [
            (dict(predictor="ema_kv"), 3 * 4 * 8 * 8, (11264, 2 * 4 * 4 * 32 + 3072), 7 * 32 * 32),
            (dict(predictor="ema_kv", write_alphas=(0.03, 0.001), read_norm=True), 2 * 4 * 8 * 8,
             (2 * 3 * 32 * 32 + 2048, 2 * 3 * 4 * 32 + 2048), 6 * 32 * 32 + 8),
            (dict(predictor="delta"), 4 * 8 * 8, (9728, 8 * 4 * 32 + 1536), 5 * 32 * 32 + 4 * 32),
            (dict(predictor="delta", write_alphas=(0.01,), read_norm=True), 4 * 8 * 8, (9728, 8 * 4 * 32 + 1536),
             5 * 32 * 32 + 4 * 32 + 8)]:
        pred = READERS[kw["predictor"], "state"](tiny(**kw))
        assert pred.state_floats(1) == pred.state_floats(1000) == floats, kw
        assert (pred.attn_flops(64), pred.attn_flops(4)) == flops, kw
        assert sum(p.numel() for p in pred.parameters()) == params, kw
        state = pred.init_state(2, None)
        for _ in range(3):
            _, state = pred.step(torch.randn(2, 32), torch.randn(2, 3, 32), state)
        assert sum(t.numel() for t in state.values()) == 2 * floats, kw
    names = {n for n, _ in DeltaRuleState(tiny()).named_parameters()}
    assert names == {"q.weight", "k.weight", "v.weight", "beta.weight"}


@pytest.mark.parametrize("kw", [dict(predictor="ema_kv", write_alphas=(0.03, 0.001)),
                                dict(predictor="delta", write_alphas=(0.2,)),
                                dict(predictor="ema_kv", read_norm=True), dict(predictor="delta", read_norm=True)])
def test_write_ingredients_step_equals_forward_and_change_the_read(kw):
    """Each ingredient: step() == forward (chunks of 4, T = 13), and the read is not the default
    reader's on the same weights; with read_norm each head's read has RMS 1 at init (gain 1)."""
    torch.manual_seed(2)
    pred = READERS[kw["predictor"], "state"](tiny(**kw))
    pred.init_weights(tiny(**kw))
    for m in pred.children():  # reads well above the norm's eps
        torch.nn.init.normal_(m.weight, std=0.3)
    pred.chunk = 4
    pred.double()  # float64: the norm magnifies rounding where a read is small
    u, h_prev = torch.randn(2, 13, 32, dtype=torch.float64), torch.randn(2, 13, 3, 32, dtype=torch.float64)
    with torch.no_grad():
        ref, state, out = pred(u, h_prev), pred.init_state(2, None), []
        for t in range(13):
            x_t, state = pred.step(u[:, t], h_prev[:, t], state)
            out.append(x_t)
    assert torch.allclose(torch.stack(out, 1), ref, atol=1e-10, rtol=0)
    if kw.get("read_norm"):
        rms = ref[:, 1:].unflatten(-1, (4, 8)).pow(2).mean(-1).sqrt()  # (B, T-1, H); t = 0 reads the empty state
        assert torch.allclose(rms, torch.ones_like(rms), atol=1e-3)
    if kw["predictor"] == "delta" or kw.get("read_norm"):  # the default reader on the same weights reads otherwise
        plain = READERS[kw["predictor"], "state"](tiny(predictor=kw["predictor"])).double()
        plain.load_state_dict(pred.state_dict(), strict=False)  # all but the read norm's gain
        with torch.no_grad():
            assert not torch.allclose(plain(u, h_prev), ref, atol=1e-4)


@pytest.mark.parametrize("trace_method", ["scan", "matmul", "loop"])
def test_selective_context_starts_as_the_fixed_ema(trace_method):
    """W_a = 0 and b_s = logit(a_s) at init: a_t^s = a_s, the paper's EMA, forward and step."""
    selective = block_of(context="selective", trace_method=trace_method).ctx
    fixed = EMAContext(tiny(trace_method=trace_method))
    assert isinstance(selective, SelectiveContext)
    u = torch.randn(2, 30, 32)
    assert torch.allclose(selective(u), fixed(u), atol=1e-6)
    h = torch.randn(2, 3, 32)
    assert torch.allclose(selective.step(u[:, 0], h), ema.step(u[:, 0], h, fixed.alphas), atol=1e-6)
    torch.nn.init.normal_(selective.gate.weight, std=0.5)  # an input-dependent decay: no longer the EMA
    assert not torch.allclose(selective(u), fixed(u), atol=1e-3)


def test_init_weights_refuses_a_parameter_it_has_no_rule_for():
    block = Block(tiny())
    block.extra = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="no rule for parameter 'extra'"):
        init_weights(block, tiny())

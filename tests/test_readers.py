"""Every reader's contract, generated from spen.READERS: a reader added to the registry is tested
here without a line added to any test. For each registered (predictor, reads), alone and with each
option it declares (Reader.options: one example value each, EXAMPLES), in a tiny SPEN:
  - its fast path against its reference loop (trace_method='loop', the config's one switch for
    every reference): logits, loss and every parameter's gradient, T = 40 (past one chunk, 32);
  - causality: changing tokens t+1.. changes no output at <= t, and changes the output at t+1;
  - step() against forward() token by token, the step state holding exactly n_layer x
    state_floats(t) numbers per sequence after t tokens (a reads='state' reader's: not growing);
  - its options: one it does not declare is refused in one line naming it (spen.check's one rule);
    one it declares changes what it computes on the same weights (declared, so used).
test_every_registered_reader_is_covered prints the count (pytest -s, or in the summary).
The readers' own properties (what they store, what they tell apart): tests/test_variants.py."""
import pytest
import torch

import spen
from spen import SPEN, SPENConfig
from variants import Reader
from writes import DeltaRuleState

V = 60  # tiny vocabulary (64 rows)
EXAMPLES = dict(write_alphas=(0.2,), read_norm=True, conv=2, window=3, key_dim=16, value_dim=4)  # a new option: a value here
CASES = [(p, r, {}) for p, r in spen.READERS] + [(p, r, {o: EXAMPLES[o]}) for (p, r), c in spen.READERS.items()
                                                for o in c.options]
IDS = ["-".join([p, r, *kw]) for p, r, kw in CASES]
OPTIONS = tuple(dict.fromkeys(o for c in spen.READERS.values() for o in c.options))  # every reader option


def tiny(**kw):
    return SPENConfig(**dict(dict(vocab_size=V, block_size=64, n_layer=2, n_embd=32, ffn_hidden=64, ffn_topk=8,
                                  n_head=4), **kw))


def make(seed=0, **kw):
    torch.manual_seed(seed)
    return SPEN(tiny(**kw)).eval()


def tokens(B, T, seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def numel(state):
    """The numbers a step state holds: its tensors, in any nesting of dicts and lists."""
    if isinstance(state, torch.Tensor):
        return state.numel()
    values = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else ()
    return sum(map(numel, values))


@pytest.mark.parametrize("predictor,reads,kw", CASES, ids=IDS)
def test_fast_path_equals_reference_loop_values_and_gradients(predictor, reads, kw):
    idx = tokens(2, 41, 11)
    runs = {}
    for method in ("auto", "loop"):
        model = make(predictor=predictor, reads=reads, trace_method=method, **kw)  # same seed: same weights
        logits, loss = model(idx[:, :-1], idx[:, 1:])
        runs[method] = logits, loss, torch.autograd.grad(loss, list(model.parameters()))
    (lf, lossf, gf), (lr, lossr, gr) = runs["auto"], runs["loop"]
    assert torch.allclose(lf, lr, atol=1e-5, rtol=0) and torch.allclose(lossf, lossr, atol=1e-6)
    assert len(gf) == len(gr) == len(list(model.parameters()))
    for (name, _), a, b in zip(model.named_parameters(), gf, gr):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("predictor,reads,kw", CASES, ids=IDS)
def test_causal(predictor, reads, kw):
    model, idx = make(predictor=predictor, reads=reads, **kw), tokens(2, 20, 1)
    with torch.no_grad():
        ref = model(idx)[0]  # (B, T, V)
        for t in (0, 6, 18):
            later = idx.clone()
            later[:, t + 1:] = (later[:, t + 1:] + 1 + tokens(2, 19 - t, t) % (V - 1)) % V  # every later token changed
            out = model(later)[0]
            assert torch.allclose(out[:, :t + 1], ref[:, :t + 1], atol=1e-6, rtol=0), f"tokens > {t} leaked into {t}"
            assert not torch.allclose(out[:, t + 1], ref[:, t + 1], atol=1e-4), "a changed token had no effect"


@pytest.mark.parametrize("predictor,reads,kw", CASES, ids=IDS)
def test_step_equals_forward_and_holds_state_floats(predictor, reads, kw):
    model, idx = make(predictor=predictor, reads=reads, **kw), tokens(2, 40, 2)
    n_layer = model.config.n_layer
    with torch.no_grad():
        ref, state, out = model(idx)[0], model.init_state(2), []
        for t, token in enumerate(idx.unbind(1), 1):
            logits, state = model.step(token, state)
            out.append(logits)
            assert numel(state) == 2 * n_layer * model.state_floats(t), t  # what state_floats says, every t
    assert torch.allclose(torch.stack(out, 1), ref, atol=1e-4, rtol=0)
    if reads == "state":  # a fixed-size state: as large before the first token as after the last
        assert numel(model.init_state(2)) == numel(state) and model.state_floats(1) == model.state_floats(40)


@pytest.mark.parametrize("predictor,reads", list(spen.READERS))
def test_an_option_the_reader_does_not_declare_is_refused(predictor, reads):
    cls = spen.READERS[predictor, reads]
    for name in (o for o in OPTIONS if o not in cls.options):
        with pytest.raises(ValueError, match=rf"^SPENConfig\.{name} applies to .* the model has none") as e:
            SPEN(tiny(predictor=predictor, reads=reads, **{name: EXAMPLES[name]}))
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("predictor,reads,kw", [c for c in CASES if c[2]], ids=[i for i, c in zip(IDS, CASES) if c[2]])
def test_an_option_the_reader_declares_changes_what_it_computes(predictor, reads, kw):
    """With the weights the two models share copied over, the option changes the logits: a reader
    that declares an option and ignores it (a subclass that inherits the declaration) fails here."""
    plain, option, idx = make(predictor=predictor, reads=reads), make(predictor=predictor, reads=reads, **kw), tokens(2, 20, 3)
    mine = option.state_dict()
    option.load_state_dict({**mine, **{k: v for k, v in plain.state_dict().items() if k in mine and v.shape == mine[k].shape}})
    with torch.no_grad():
        assert not torch.allclose(plain(idx)[0], option(idx)[0], atol=1e-5), kw


class Toy(Reader):
    """A new reader with no write decays: x̂_t = W h_{t-1}^1 (declares no option)."""

    def __init__(self, cfg):
        super().__init__()
        self.w = torch.nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, u, h_prev):
        return self.w(h_prev[..., 0, :])  # (B, T, C)


class ToyGatedDelta(DeltaRuleState):
    """A subclass of the delta rule that learns its decay (say) and so reads no write_alphas: it says so."""

    options = ("read_norm", "conv")


@pytest.mark.parametrize("cls", [Toy, ToyGatedDelta])
def test_a_new_reader_given_an_option_it_does_not_declare_is_refused_in_one_line(cls, monkeypatch):
    monkeypatch.setitem(spen.READERS, ("toy", "state"), cls)  # registered for this test only
    SPEN(tiny(predictor="toy"))  # builds
    with pytest.raises(ValueError, match="write_alphas applies to predictor ema_kv, delta only; the model has none") as e:
        SPEN(tiny(predictor="toy", write_alphas=(0.1,)))
    assert "\n" not in str(e.value)
    SPEN(tiny(predictor=("toy", "delta"), write_alphas=(0.1,)))  # a block that reads them: the option is the model's


def test_every_registered_reader_is_covered(capsys):
    covered = {(p, r) for p, r, _ in CASES}
    assert covered == set(spen.READERS) and {("gated_delta", "state"), ("gated_ema_kv", "state")} <= covered
    with capsys.disabled():
        print(f"\ntests/test_readers.py: {len(covered)} readers covered of len(spen.READERS) = {len(spen.READERS)}, "
              f"{len(CASES)} cases with their options")

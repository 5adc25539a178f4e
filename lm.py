"""What SPEN (spen.py) and the GPT baseline (gpt.py) share as language models, written once: the
contract both follow, the token-id check at their edge, next-token sampling, and the optimizer's
parameter groups. It imports torch only: where a run computes and how fast is plumbing/runtime.py.

The contract (both `spen.SPEN` and `gpt.GPT`)
    config                      the model's dataclass; Model(Config(**asdict(config))) rebuilds it
    forward(idx, targets=None)  idx (B, T) int64 -> (logits (B, T, V), mean cross-entropy over
                                targets != -1, or None)
    hidden_states(idx)          n_layer + 1 tensors (B, T, C): the embedding, then each block's output
    init_state(B, device)       the recurrent state before any token (SPEN: traces; GPT: KV cache)
    step(token, state)          token (B,) -> (logits (B, V) for the next token, new state)
    generate(idx, n, ...)       idx (B, T) -> (B, T + n), sampling with `sample_next`
    state_floats(T)             numbers per sequence and layer that step() holds after T tokens
    num_params(non_embedding)   parameter count, tied embedding counted once
    flops_per_token(T)          training FLOPs per token (forward + backward) at context T
forward, step and generate check their ids with `check_tokens`, which reads nothing back from
the device; generate checks the prompt once and never the tokens it samples itself (they are
logits' columns, always in range), so it makes no host sync per token.

Shape glossary
    B batch, T time, C width, V real vocabulary (config.vocab_size, 50257 for GPT-2 BPE),
    Vp = padded_vocab(V) rows of the embedding table (a multiple of 64: fast matmuls). The
    head computes Vp logits and the models return the first V (as nanochat does), so padding
    rows are never tokens: not valid inputs, never in the loss, never sampled.

Run: nothing to run; tests/test_lm.py checks every function here.
"""

import inspect

import torch
import torch.nn.functional as F

TOKEN_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8)


def padded_vocab(vocab_size, multiple=64):
    """Rows of the embedding table: vocab_size rounded up to a multiple of 64 (50257 -> 50304)."""
    return -(-vocab_size // multiple) * multiple


def check_tokens(idx, vocab_size, what="idx"):
    """The one id check of both models, at their edge (forward, step, generate): idx must be an
    integer tensor of ids in [0, vocab_size); the padding rows of the table are not tokens. The
    range is tested on the device (torch._assert_async): on a CPU it raises a ValueError at once,
    on a GPU the kernel fails, and nothing waits for the device meanwhile (no host sync)."""
    if not isinstance(idx, torch.Tensor) or idx.dtype not in TOKEN_DTYPES:
        kind = idx.dtype if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise ValueError(f"{what} must be an integer tensor of token ids, got {kind}")
    if idx.numel():
        ok = ((idx >= 0) & (idx < vocab_size)).all()
        try:  # raises here on a CPU only; a GPU reports it from the kernel
            torch._assert_async(ok, f"{what} holds token ids outside [0, {vocab_size}) of this model's vocabulary")
        except RuntimeError as e:
            raise ValueError(str(e)) from None


def check_sampling(max_new_tokens, temperature, top_k):
    """One-line ValueErrors for generation settings that make no sense."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not temperature >= 0:  # also rejects NaN
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 or None (no cut), got {top_k!r}")


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """logits (B, V) -> next token ids (B,). temperature 0 is greedy; top_k keeps the k most
    likely tokens; `generator` (torch.Generator) makes the draw reproducible."""
    logits = logits.float()  # (B, V)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)[:, 0]  # (B,)


def configure_optimizers(model, weight_decay, learning_rate, betas, device_type):
    """AdamW with weight decay on every matrix (dim >= 2: embeddings, linear weights, per-trace
    embeddings) and none on vectors (LayerNorm weights, biases). Every parameter lands in exactly
    one group (asserted). fused=True on CUDA: one kernel for the whole update."""
    params = dict(model.named_parameters())  # tied weights appear once
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    ids = [id(p) for p in decay + no_decay]
    assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()}), "param groups broken"
    groups = [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]
    fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **(dict(fused=True) if fused else {}))

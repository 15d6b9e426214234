"""``bench/gpu.py decode``: greedy generation on the device, sonnx against a torch decoder.

The model is :func:`sonnx.testing.gqa_decoder.gqa_decoder` at ``--layers``/``--hidden``/...
(onnxruntime-genai's layout: GroupQueryAttention over a shared KV buffer, random weights;
default 2 layers, hidden 512, 8/2 heads of 64, MLP 1024, vocabulary 8192: about 45 MiB of
weights, under the ~100 MiB frozen into a graph-mode library that crashed loading on an H100,
bench/history.md; ``--vocab 32000`` gives a llama-sized head). The reference, :class:`TorchDecoder`,
is the same decoder written in torch with the same weights and a preallocated KV cache, run
eagerly (``--torch-compile`` adds it under ``torch.compile``: four compiles, too slow for the
device check). Each batch of ``--batches`` is ``--prompt`` random tokens per row; each side
generates ``--new`` tokens greedily (no end token) in three calls, of 1, 2 and ``--new``
tokens:

- prefill ms: the 1-token call (the prompt's run and its token's choice);
- decode ms per step: (``--new`` call - 2-token call) / (``--new`` - 2), so neither the prompt
  nor what a call does once before its second token (``cuda_graph=True`` captures the decode
  step there) is in it; tok/s is batch / that.

sonnx runs eagerly, in graph mode (``use_graph=True``: one compile for the prompt, one for
the decode step), and in graph mode with ``generate(..., cuda_graph=True)`` (CUDA only: on
the CPU its row says it is skipped). A row's ms columns are decode ms per step, sonnx / torch;
its note gives tok/s, prefill ms and whether the tokens equal sonnx eager's (a variant that
differs says so rather than stopping the section, as does one that raises a sonnx error).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

import sonnx
from sonnx.device import Device
from sonnx.errors import SonnxError
from sonnx.generation import detect_layout
from sonnx.testing.gqa_decoder import (
    GqaSizes,
    genai_config,
    gqa_decoder,
    gqa_weights,
    rotary_angles,
)

#: n tokens -> the (batch, n) new tokens.
Generate = Callable[[int], np.ndarray]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The decode section's size flags."""
    group = parser.add_argument_group("decode")
    group.add_argument("--layers", type=int, default=2)
    group.add_argument("--hidden", type=int, default=512)
    group.add_argument("--heads", type=int, default=8)
    group.add_argument("--kv-heads", type=int, default=2)
    group.add_argument("--ffn", type=int, default=1024, help="MLP width, 0: none")
    group.add_argument("--vocab", type=int, default=8192)
    group.add_argument("--prompt", type=int, default=32, help="prompt tokens per row")
    group.add_argument("--new", type=int, default=64, help="generated tokens per row (>= 3)")
    group.add_argument(
        "--torch-compile", action="store_true", help="add the reference under torch.compile"
    )


class TorchDecoder(nn.Module):
    """:func:`gqa_decoder`'s model in torch with its cache of ``max_positions`` rows per
    sequence: ``forward(ids, start)`` runs ``ids`` (batch, n) at positions ``start``...
    (a 0-d int64 tensor, the cache rows so far, the same for every row) and returns the last
    position's logits (batch, vocab)."""

    def __init__(self, weights: dict[str, np.ndarray], sizes: GqaSizes, batch: int) -> None:
        super().__init__()
        self.sizes = sizes
        for name, w in weights.items():
            self.register_buffer(name.replace(".", "_"), torch.from_numpy(w))
        angles = rotary_angles(sizes)
        self.register_buffer("cos", torch.from_numpy(np.cos(angles).astype(np.float32)))
        self.register_buffer("sin", torch.from_numpy(np.sin(angles).astype(np.float32)))
        shape = (sizes.layers, batch, sizes.kv_heads, sizes.max_positions, sizes.head_size)
        self.register_buffer("keys", torch.zeros(shape))
        self.register_buffer("values", torch.zeros(shape))

    def weight(self, name: str) -> torch.Tensor:
        return getattr(self, name.replace(".", "_"))

    def forward(self, ids: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        positions = start + torch.arange(ids.shape[1], device=ids.device)
        h = self.embed[ids]
        for i in range(self.sizes.layers):
            h = h + self.attention(i, h, positions) @ self.weight(f"layers.{i}.out")
            if self.sizes.ffn:
                up = h @ self.weight(f"layers.{i}.up")
                h = h + nn.functional.silu(up) @ self.weight(f"layers.{i}.down")
        return h[:, -1] @ self.lm_head

    def attention(self, i: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """GroupQueryAttention as onnxruntime computes it: rotary (halves rotated) on q and k,
        the new rows written into the cache at ``positions``, causal attention over it."""
        s = self.sizes
        batch, n, _ = x.shape
        q, k, v = (x @ self.weight(f"layers.{i}.qkv")).split(
            [s.heads * s.head_size, s.kv_heads * s.head_size, s.kv_heads * s.head_size], -1
        )
        q = self.rotary(q.view(batch, n, s.heads, s.head_size).transpose(1, 2), positions)
        k = self.rotary(k.view(batch, n, s.kv_heads, s.head_size).transpose(1, 2), positions)
        self.keys[i].index_copy_(2, positions, k)
        self.values[i].index_copy_(2, positions, v.view(batch, n, s.kv_heads, -1).transpose(1, 2))
        group = s.heads // s.kv_heads
        keys = self.keys[i].repeat_interleave(group, 1)
        values = self.values[i].repeat_interleave(group, 1)
        visible = torch.arange(s.max_positions, device=x.device) <= positions[:, None]
        out = nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
        return out.transpose(1, 2).reshape(batch, n, s.heads * s.head_size)

    def rotary(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        half = self.sizes.head_size // 2
        cos, sin = self.cos[positions], self.sin[positions]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def torch_generate(step: Callable, prompt: torch.Tensor) -> Generate:
    """Greedy tokens from ``step`` (a :class:`TorchDecoder`, compiled or not) after ``prompt``."""

    def generate(n: int) -> np.ndarray:
        with torch.no_grad():
            start = torch.zeros((), dtype=torch.int64, device=prompt.device)
            token = step(prompt, start).argmax(-1)
            chosen = [token]
            start = start + prompt.shape[1]
            for _ in range(n - 1):
                token = step(token[:, None], start).argmax(-1)
                chosen.append(token)
                start = start + 1
            return torch.stack(chosen, 1).cpu().numpy()

    return generate


def sonnx_generate(
    rep: sonnx.SingaRep, prompt: np.ndarray, config: dict, cuda_graph: bool
) -> Generate:
    """Greedy tokens from ``rep`` after ``prompt`` (no end token), captured as a CUDA graph
    where ``cuda_graph``."""
    layout = detect_layout(rep, config)

    def generate(n: int) -> np.ndarray:
        out = rep.generate(prompt, max_new_tokens=n, layout=layout, cuda_graph=cuda_graph)
        return out[:, prompt.shape[1] :]

    return generate


def measure(
    sides: tuple[Generate, Generate], new: int, dev: Device, repeats: int
) -> list[tuple[float, float]]:
    """Per side, median prefill seconds and decode seconds per step (see the module
    docstring), each a median over ``repeats`` rounds of the three calls, the sides alternated
    call by call (after one warm-up call each, which holds graph mode's compiles)."""
    for generate in sides:
        generate(new)
    rounds: list[list[tuple[float, float]]] = [[] for _ in sides]
    for _ in range(repeats):
        took: list[list[float]] = [[] for _ in sides]
        for n in (1, 2, new):
            for side, generate in enumerate(sides):
                dev.synchronize()
                start = time.perf_counter()
                generate(n)
                dev.synchronize()
                took[side].append(time.perf_counter() - start)
        for side, (one, two, all_) in enumerate(took):
            rounds[side].append((one, (all_ - two) / (new - 2)))
    return [
        (statistics.median(r[0] for r in side), statistics.median(r[1] for r in side))
        for side in rounds
    ]


def decode_row(case: str, batch: int, timings: list[tuple[float, float]], note: str) -> str:
    """One Markdown row: decode ms per step, sonnx and torch, their ratio; tok/s and
    prefill ms in the note."""
    (o_prefill, ours), (t_prefill, theirs) = timings
    speeds = f"decode {batch / ours:.0f} / {batch / theirs:.0f} tok/s"
    prefill = f"prefill {o_prefill * 1e3:.1f} / {t_prefill * 1e3:.1f} ms"
    cells = f"{ours * 1e3:.2f} | {theirs * 1e3:.2f} | {ours / theirs:.2f}"
    return f"| {case} | {batch} | {cells} | {speeds}; {prefill}; {note} |"


def tokens_note(tokens: np.ndarray, eager: np.ndarray, what: str) -> str:
    if np.array_equal(tokens, eager):
        return f"{what} equal sonnx eager's"
    rows, cols = np.nonzero(tokens != eager)
    return f"{what} DIFFER from sonnx eager's (first at row {rows[0]}, token {cols[0]})"


def decoder_sizes(args: argparse.Namespace) -> GqaSizes:
    """The decoder the flags describe, with rotary positions for the prompt and the new
    tokens."""
    if args.new < 3 or args.hidden % args.heads or args.heads % args.kv_heads:
        raise SystemExit(
            "decode: --new must be at least 3 (decode time is from the 3rd call), --heads "
            "must divide --hidden and --kv-heads --heads"
        )
    return GqaSizes(
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        kv_heads=args.kv_heads,
        head_size=args.hidden // args.heads,
        vocab=args.vocab,
        ffn=args.ffn,
        max_positions=args.prompt + args.new,
    )


def torch_references(
    sizes: GqaSizes, prompt: np.ndarray, dev: Device, compiled: bool
) -> dict[str, Generate]:
    """The torch decoder's generation after ``prompt``, eager and (``compiled``) under
    torch.compile, by name."""
    module = TorchDecoder(gqa_weights(sizes=sizes), sizes, len(prompt)).to(dev.torch_device)
    on_device = torch.from_numpy(prompt).to(dev.torch_device)
    references = {"torch eager": torch_generate(module, on_device)}
    if compiled:
        references["torch.compile"] = torch_generate(torch.compile(module), on_device)
    return references


def bench_decode(dev: Device, args: argparse.Namespace) -> Iterator[str]:
    """The decode section's rows: per sonnx variant, each batch (see the module docstring)."""
    sizes = decoder_sizes(args)
    proto = gqa_decoder(sizes=sizes)
    config = genai_config(sizes.layers, True, sizes.kv_heads, sizes.head_size)
    params = sum(math.prod(t.dims) for t in proto.graph.initializer) / 1e6
    name = f"GQA decoder L{sizes.layers} h{sizes.hidden} v{sizes.vocab} ({params:.3g}M params)"
    reps = {
        "eager": sonnx.prepare(proto, device=dev),
        "graph": sonnx.prepare(proto, device=dev, use_graph=True),
    }
    rng = np.random.default_rng(0)
    prompts = {b: rng.integers(0, sizes.vocab, (b, args.prompt)) for b in args.batches}
    compiled = args.torch_compile
    references = {b: torch_references(sizes, p, dev, compiled) for b, p in prompts.items()}
    eager_tokens: dict[int, np.ndarray] = {}
    for variant, cuda_graph in (("eager", False), ("graph", False), ("graph + cuda_graph", True)):
        rep = reps["eager" if variant == "eager" else "graph"]
        for batch, prompt in prompts.items():
            case = f"{name}: sonnx {variant}"
            if cuda_graph and not dev.is_cuda():
                yield f"| {case} | {batch} | - | - | - | skipped: CUDA graphs need a CUDA device |"
                continue
            ours = sonnx_generate(rep, prompt, config, cuda_graph)
            start = time.perf_counter()
            try:
                tokens = ours(args.new)
            except SonnxError as e:  # a refusal (say, a step graph mode cannot capture) is a row
                yield f"| {case} | {batch} | - | - | - | failed: {e} |"
                continue
            first = ""
            eager = eager_tokens.setdefault(batch, tokens)
            if variant != "eager":  # graph mode's first call compiles or loads its graphs
                took = time.perf_counter() - start
                first = f"first call {took:.1f} s; {tokens_note(tokens, eager, 'tokens')}; "
            kinds = ["torch eager"] if variant == "eager" else list(references[batch])
            for kind in kinds:
                reference = references[batch][kind]
                note = first + tokens_note(reference(args.new), eager, "torch's")
                timings = measure((ours, reference), args.new, dev, args.repeats)
                yield decode_row(f"{case} vs {kind}", batch, timings, note)

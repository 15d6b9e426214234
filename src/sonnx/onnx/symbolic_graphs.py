"""One compiled graph for many input shapes: a symbolic trace and the guards it leaves.

Graph mode traces a segment of steps with ``make_fx`` on fake inputs whose dimensions are
symbols (a batch size, a sequence length, an image side), except those the model declares
fixed. Shape arithmetic stays symbolic too (``Shape -> Gather -> Concat -> Reshape`` computes
``s0 * 12`` rather than ``96``; see :mod:`sonnx.symbolic_sizes`). What the trace learns about
the symbols becomes a *guard* in its ``ShapeEnv``: a convolution's channels equal the
weight's (``s1 == 3``), a feature pyramid's upsampled side equals its skip connection's.
Dimensions no guard pins stay symbolic, so the graph inductor compiles from the trace serves
every input its guards admit: graph mode checks them before each run and compiles another
graph only when they fail. torch itself still tells some sizes apart: which convolution kernel
runs (and so the memory format of its output) depends on whether the batch is 1, or under 16
for a 1x1 kernel on one thread, so a CNN may get one graph for a batch of one and another for
the rest, each serving every image size.

Inductor's on-disk cache (a new process's compile of a graph seen before is a load) keys a
compiled graph on the graph itself and checks the guards it was compiled under only against
integer graph inputs, which a trace of tensors does not have: keyed on the symbolic graph
alone, a graph compiled for a batch of one would be handed back for a batch of eight. So the
key also holds the input shapes the graph is compiled at (``cache_key_tag``), and a graph
loaded from the cache, which brings no guards of inductor's size decisions, serves exactly
those shapes; the next new shape compiles (or loads) its own.

Two torch settings keep the symbols general: sizes of 1 are not specialised
(``specialize_zero_one=False``, and ``backed_size_oblivious`` so that broadcasting and
contiguity checks do not pin a batch of one), and equal sizes are not merged into one symbol
(``duck_shape=False``: a 320 x 320 image does not make the graph square-only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx.experimental._config as fx_config
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)


@dataclass
class CompiledGraph:
    """A compiled segment: the weight versions it froze in, whether it serves given inputs
    (its guards), and the callable computing the segment's outputs from them."""

    versions: tuple[Any, ...]
    fits: Callable[[Sequence[torch.Tensor]], bool]
    run: Callable[..., Any]


def compile_symbolic(
    pure: Callable[..., list[torch.Tensor]],
    params: list[torch.Tensor],
    xs: list[torch.Tensor],
    versions: tuple[Any, ...],
    declared: Sequence[Sequence[Any] | None] | None = None,
) -> CompiledGraph:
    """``pure(*params, *xs)`` traced with symbolic sizes for ``xs`` and compiled by inductor
    with ``params`` frozen in as constants; it serves the inputs its guards admit.

    ``declared`` holds each input's shape as the model declares it, if it does: an int for a
    fixed dimension, which is traced fixed; anything else is free, a symbol.
    """
    env = ShapeEnv(specialize_zero_one=False, duck_shape=False)
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    fake_params = [mode.from_tensor(p, static_shapes=True) for p in params]
    shapes = declared if declared is not None else [None] * len(xs)
    fake_xs = [_symbolic(mode, x, shape) for x, shape in zip(xs, shapes, strict=True)]
    layouts = _layouts(xs)
    tag = f"{torch.compiler.config.cache_key_tag}|sonnx {layouts}"
    loads = _cache_loads()
    with (
        fx_config.patch(backed_size_oblivious=True),
        torch.compiler.config.patch(cache_key_tag=tag),
    ):
        graph = make_fx(pure, tracing_mode="symbolic", _allow_non_fake_inputs=True)(
            *fake_params, *fake_xs
        )
        graph = freeze(graph, params)
        try:
            run = _inductor(graph, fake_xs, pattern_matcher=True)
        except Exception:
            # inductor's pattern rewrites (attention fusion) can reject a graph whose
            # constants are tensors (a softmax scale computed from a shape); without them the
            # graph still compiles.
            run = _inductor(graph, fake_xs, pattern_matcher=False)
    if _cache_loads() > loads:  # no guards came with it
        return CompiledGraph(versions, lambda ts: _layouts(ts) == layouts, run)
    # Produced after compiling: inductor adds the guards of its own size decisions.
    code = env.produce_guards_expression(fake_xs, ignore_static=False)
    if not code:
        return CompiledGraph(versions, lambda ts: True, run)
    check = compile(code, "<graph mode guards>", "eval")
    return CompiledGraph(versions, lambda ts: bool(eval(check, {"L": _locals(ts)})), run)


def _cache_loads() -> int:
    """Compiled graphs loaded from the disk caches so far (AOTAutograd's, which holds the
    inductor graph, or else inductor's own)."""
    from torch._dynamo.utils import counters  # dynamo and inductor load on first use (~2 s)

    aot, fx = counters["aot_autograd"], counters["inductor"]
    return aot["autograd_cache_hit"] + fx["fxgraph_cache_hit"]


def _layouts(ts: Sequence[torch.Tensor]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(tuple(t.shape), t.stride()) for t in ts]


def _locals(ts: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The guard expression's names for the inputs (``ShapeEnv`` calls them ``t0``, ...)."""
    return {f"t{i}": t for i, t in enumerate(ts)}


def _symbolic(mode: FakeTensorMode, x: torch.Tensor, declared: Sequence[Any] | None) -> FakeTensor:
    """A fake of ``x`` whose dimensions are symbols, but those ``declared`` fixed."""
    known = declared is not None and len(declared) == x.dim()
    sizes = [
        DimDynamic.STATIC if known and isinstance(declared[axis], int) else DimDynamic.DYNAMIC
        for axis in range(x.dim())
    ]
    context = StatelessSymbolicContext(dynamic_sizes=sizes)
    return mode.from_tensor(x, symbolic_context=context)


def freeze(graph: GraphModule, params: list[torch.Tensor]) -> GraphModule:
    """The graph with its first ``len(params)`` inputs turned into attributes holding
    ``params``: it takes only the model inputs, and inductor sees the weights as constants."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"][: len(params)]
    for i, (node, value) in enumerate(zip(placeholders, params, strict=True)):
        attr = f"_weight_{i}"
        graph.register_buffer(attr, value)
        with graph.graph.inserting_before(node):
            constant = graph.graph.get_attr(attr)
        node.replace_all_uses_with(constant)
        graph.graph.erase_node(node)
    graph.graph.lint()
    graph.recompile()
    return graph


def _inductor(
    graph: GraphModule, fake_xs: list[FakeTensor], pattern_matcher: bool
) -> Callable[..., Any]:
    """inductor's compile of ``graph`` (no dynamo: the trace's guards are the only ones).

    ``cpp_wrapper`` makes inductor launch the kernels from C++ instead of a Python wrapper,
    which at batch 1 is a large part of a run (measured: MobileNet-v2 22 -> 14 ms, the BERT
    encoder 3.5 -> 2.7 ms) for a few more seconds of compiling.
    """
    from torch._inductor.compile_fx import compile_fx

    options = {"freezing": True, "pattern_matcher": pattern_matcher, "cpp_wrapper": True}
    with torch._inductor.config.patch(**options):
        return compile_fx(graph, fake_xs)

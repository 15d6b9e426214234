"""One compiled graph for many input shapes: a symbolic trace and the guards it leaves.

Graph mode traces a segment of steps with ``make_fx`` on fake inputs whose dimensions are
symbols (a batch size, a sequence length, an image side), except those the model declares
fixed. Shape arithmetic stays symbolic too (``Shape -> Gather -> Concat -> Reshape`` computes
``s0 * 12`` rather than ``96``; see :mod:`sonnx.symbolic_sizes`). What the trace learns about
the symbols becomes a *guard* in its ``ShapeEnv``: a convolution's channels equal the
weight's (``s1 == 3``), a feature pyramid's upsampled side equals its skip connection's.
Dimensions no guard pins stay symbolic, so the graph inductor compiles from the trace serves
every input its guards admit: graph mode checks them before each run and compiles another
graph only when they fail.

torch's fake convolution asks which kernel eager torch would pick (``_select_conv_backend``:
its reference kernel for a batch of one, oneDNN from 16 up for a 1x1 kernel on one thread) and
what memory format that kernel writes, and each answer guards the batch size: a CNN got one
graph for a batch of one and another for the rest. In the compiled graph inductor replaces
every convolution with a constant weight (all of an imported model's) by oneDNN's
``_convolution_pointwise``, whose output layout follows its input's, not the batch; so those
questions are answered here for the example's sizes without guarding them. inductor leaves
a transposed convolution under symbolic sizes to torch's kernel choice at each call; for a 2-D
one on the CPU in float32 both kernels write the same memory format, so its answers are not
guarded either (other transposed convolutions' still are).

Two torch settings keep the symbols general: sizes of 1 are not specialised
(``specialize_zero_one=False``, and ``backed_size_oblivious`` so that broadcasting and
contiguity checks do not pin a batch of one), and equal sizes are not merged into one symbol
(``duck_shape=False``: a 320 x 320 image does not make the graph square-only).

A dimension of size 0 is traced fixed, though: inductor cannot compile a graph whose size hint
is 0 (its layout choice for a ``cat`` takes a size modulo another, and the hint's ``% 0``
raises ZeroDivisionError), and graph mode then compiled that segment per shape from there on.
An empty past KV cache at the prompt step of an optimum export did that, and every decode
length got a graph of its own. Fixed, the empty axis gets a graph of its own (the prompt's);
the other shapes' graph is traced at their sizes and stays symbolic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch._inductor.ir as inductor_ir
import torch._subclasses.fake_impls as fake_impls
import torch.fx.experimental._config as fx_config
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from sonnx.runtime.compiled_graphs import compile_library, freeze
from sonnx.runtime.conv_input_strides import channels_last_convolution_inputs

# One trace and compile at a time in the process: both swap torch functions and settings
# process-wide (see _unguarded_kernel_choices), and inductor's config patches are global too.
# Runs in other threads (eager, or of graphs compiled before) go on meanwhile.
_COMPILING = threading.Lock()


def compile_symbolic(
    pure: Callable[..., list[torch.Tensor]],
    params: list[torch.Tensor],
    xs: list[torch.Tensor],
    library: Path,
    named: Mapping[str, torch.Tensor],
    declared: Sequence[Sequence[Any] | None] | None = None,
) -> str:
    """``pure(*params, *xs)`` traced with symbolic sizes for ``xs`` and compiled into the
    shared library ``library`` with ``params`` frozen in as constants; returns the guards
    saying which inputs it serves. ``named``: the model's tensors, which the library reads
    when loaded (see :func:`~sonnx.runtime.compiled_graphs.compile_library`).

    ``declared`` holds each input's shape as the model declares it, if it does: an int for a
    fixed dimension, which is traced fixed; anything else is free, a symbol.
    """
    with _COMPILING:
        return _compile_symbolic(pure, params, xs, library, named, declared)


def _compile_symbolic(
    pure: Callable[..., list[torch.Tensor]],
    params: list[torch.Tensor],
    xs: list[torch.Tensor],
    library: Path,
    named: Mapping[str, torch.Tensor],
    declared: Sequence[Sequence[Any] | None] | None,
) -> str:
    env = ShapeEnv(specialize_zero_one=False, duck_shape=False)
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    fake_params = [mode.from_tensor(p, static_shapes=True) for p in params]
    shapes = declared if declared is not None else [None] * len(xs)
    fake_xs = [_symbolic(mode, x, shape) for x, shape in zip(xs, shapes, strict=True)]
    with fx_config.patch(backed_size_oblivious=True), _unguarded_kernel_choices(env):
        graph = make_fx(pure, tracing_mode="symbolic", _allow_non_fake_inputs=True)(
            *fake_params, *fake_xs
        )
        with _size_oblivious_views(), channels_last_convolution_inputs():
            compile_library(freeze(graph, params), fake_xs, library, named)
    # Produced after compiling: inductor adds the guards of its own size decisions.
    return env.produce_guards_expression(fake_xs, ignore_static=False) or ""


def compile_static(
    pure: Callable[..., list[torch.Tensor]],
    params: list[torch.Tensor],
    xs: list[torch.Tensor],
    library: Path,
    named: Mapping[str, torch.Tensor],
) -> str:
    """As :func:`compile_symbolic`, for exactly the shapes of ``xs`` (every dimension traced
    fixed); the guards admit those shapes and strides only."""
    return compile_symbolic(pure, params, xs, library, named, [tuple(x.shape) for x in xs])


@contextmanager
def _unguarded_kernel_choices(env: ShapeEnv) -> Iterator[None]:
    """torch's choice of convolution kernel and its output format, for the example's sizes
    and without guards, while a graph is traced and compiled (see the module docstring); and
    the same for the order of strides inductor asks a kernel's inputs to have, which its
    ``argsort_sym`` says is an optimisation only, never a question of correctness (a state
    of shape ``[1, batch, hidden]`` has strides that tie at a batch of one).

    torch offers no hook for this, so the functions are swapped for the duration:
    process-wide, so a ``torch.compile`` running in another thread meanwhile would see them
    too.
    """
    select = torch._C._select_conv_backend
    memory_format = torch._C._conv_determine_backend_memory_format
    argsort = inductor_ir.argsort_sym

    def select_unguarded(*args: Any, **kwargs: Any) -> Any:
        transposed = kwargs.get("transposed", args[6] if len(args) > 6 else False)
        if transposed and not _same_layout_either_way(args[0]):
            return select(*args, **kwargs)
        with env.suppress_guards():
            return select(*args, **kwargs)

    def memory_format_unguarded(x: Any, weight: Any, backend: Any) -> Any:
        if "Transpose" in str(backend) and not _same_layout_either_way(x):
            return memory_format(x, weight, backend)
        with env.suppress_guards():
            return memory_format(x, weight, backend)

    def argsort_unguarded(shape_env: Any, seq: Any, *args: Any, **kwargs: Any) -> Any:
        with env.suppress_guards():
            return argsort(shape_env, seq, *args, **kwargs)

    torch._C._select_conv_backend = select_unguarded
    torch._C._conv_determine_backend_memory_format = memory_format_unguarded
    inductor_ir.argsort_sym = argsort_unguarded
    try:
        yield
    finally:
        torch._C._select_conv_backend = select
        torch._C._conv_determine_backend_memory_format = memory_format
        inductor_ir.argsort_sym = argsort


def _same_layout_either_way(x: Any) -> bool:
    """Whether a transposed convolution of ``x`` writes the same memory format whichever
    kernel torch picks for it at run time: for a 2-D one on the CPU, oneDNN's and the
    reference kernel both write channels-last exactly when the input or the weight is
    channels-last (``mkldnn_conv_use_channels_last``, ``thnn_conv_use_channels_last``). The
    kernel itself is chosen by torch at each call (inductor leaves a transposed convolution
    under symbolic sizes to it), so its choice need not be guarded."""
    return x.dim() == 4 and x.device.type == "cpu" and x.dtype == torch.float32


@contextmanager
def _size_oblivious_views() -> Iterator[None]:
    """Inductor's strides for a view of a buffer whose layout it fixed (oneDNN's channels-last
    output, a concatenation of those), worked out without asking whether a size is 1.

    Inductor asks that only of unbacked sizes and guards on the backed ones: the reshape of a
    detection head's channels-last output guarded a batch of one. The size-oblivious answer
    holds for every size (a stride along a dimension of size 1 is never used); where it cannot
    say, inductor indexes the view without strides instead. Swapped process-wide while
    inductor compiles, as :func:`_unguarded_kernel_choices` does.
    """
    compute = fake_impls._compute_stride

    def oblivious(*args: Any, **kwargs: Any) -> Any:
        kwargs["size_oblivious"] = True
        return compute(*args, **kwargs)

    fake_impls._compute_stride = oblivious
    try:
        yield
    finally:
        fake_impls._compute_stride = compute


def _symbolic(mode: FakeTensorMode, x: torch.Tensor, declared: Sequence[Any] | None) -> FakeTensor:
    """A fake of ``x`` whose dimensions are symbols, but those ``declared`` fixed and those
    of size 0 (see the module docstring)."""
    known = declared is not None and len(declared) == x.dim()
    sizes = [
        DimDynamic.STATIC
        if x.shape[axis] == 0 or (known and isinstance(declared[axis], int))
        else DimDynamic.DYNAMIC
        for axis in range(x.dim())
    ]
    context = StatelessSymbolicContext(dynamic_sizes=sizes)
    return mode.from_tensor(x, symbolic_context=context)

"""Graph mode for imported models: ``prepare(model, use_graph=True)``.

An inference run (``sonnx.autograd.training`` off, the whole graph, its declared outputs) is
traced once per input signature into an FX graph of torch operations (``make_fx``) and
compiled with ``torch.compile`` (inductor), the weights frozen in as constants so that, for
instance, convolution weights are packed once for oneDNN. All of sonnx's per-node Python runs
at trace time only.

Shape arithmetic (``Shape -> Gather -> Concat -> Reshape``, as in every exported BERT) depends
only on the input shapes, which the compiled graph is specialised on: :class:`ValueFlow`
follows which tensors carry input or weight values and runs every operation that touches none
of them *outside* the trace, on plain tensors, so its results become constants of the graph
and the host reads they feed (a reshape's target) happen once, at trace time.

A step whose control flow or output shapes depend on input values (NonZero, Unique, an ``If``
on a computed condition, a host read of a computed value), or that draws random numbers, cannot
be part of a static graph. Such a step runs eagerly, *there*: the steps between such steps form
segments, each traced and compiled on its own, so the rest of the model stays compiled. A
segment that inductor fails to compile runs eagerly too. Each case is warned about once, with
the node's name.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from sonnx.autograd.host_values import HOST_CONSTANT_SIZE, is_host_value
from sonnx.autograd.random_ops import RANDOM_OP_TYPES
from sonnx.autograd.tracing import NotTraceableError, ValueFlow, tracing
from sonnx.onnx.graph_program import GraphProgram, reads_of
from sonnx.onnx.symbolic_graphs import CompiledGraph, compile_symbolic, freeze
from sonnx.symbolic_sizes import SymbolicInts, materialize, viewable
from sonnx.tensor import Tensor


def _kind(t: torch.Tensor) -> tuple[Any, ...]:
    """What a compiled graph is specialised on whatever its guards say: rank, dtype, device."""
    return (t.dim(), t.dtype, t.device)


def _is_shape_value(t: torch.Tensor) -> bool:
    """A small integer tensor on the host: a shape value, baked into a segment's graph."""
    return is_host_value(t) and t.numel() <= HOST_CONSTANT_SIZE


@dataclass
class Segment:
    """Steps ``[start, stop)`` compiled together: what they read from before and what later
    steps (or the graph's outputs) read from them; compiled graphs by the inputs' ranks,
    dtypes and devices and the baked shape values, each serving the shapes its guards admit."""

    start: int
    stop: int
    inputs: list[str]
    outputs: list[str]
    compiled: dict[tuple[Any, ...], list[CompiledGraph]] = field(default_factory=dict)
    eager: bool = False
    #: Why the segment is compiled for each input shape (no symbolic trace), if it is.
    per_shape: str | None = None


class _ReplanError(Exception):
    """A step turned out not to be traceable: the segments change, and the run starts over."""


class GraphRunner:
    """Compiled inference runs of one :class:`GraphProgram`.

    The steps are split into compiled segments around the steps that must run eagerly (found
    while tracing, or random draws, known up front). Each segment is compiled once per input
    signature; trainable weights (``stores_grad``) are frozen into it as constants, and every
    constant's identity and version counter are part of the cache key, so after a training
    step or ``load_states`` the next run compiles afresh.
    """

    def __init__(
        self,
        program: GraphProgram,
        backend: str = "inductor",
        declared_shapes: dict[str, Any] | None = None,
    ) -> None:
        self.program = program
        #: The graph inputs' shapes as the model declares them (see ``compile_symbolic``).
        self.declared_shapes = declared_shapes or {}
        # The program's own (the SingaRep's tensor_map is the same dict), so weights a user
        # changes or trains are the ones compiled in.
        self.constants = program.constants
        self.input_names = program.input_names
        self.output_names = program.output_names
        self.backend = backend
        #: Trace segments with symbolic sizes: one graph for every shape its guards admit
        #: (see :mod:`sonnx.onnx.symbolic_graphs`); a segment torch cannot trace or compile
        #: that way is compiled for each input shape. False compiles every segment per shape.
        self.dynamic = True
        #: Why the steps that run eagerly do, by step index.
        self.eager_steps: dict[int, str] = {
            i: f"it draws random numbers ({step.info.op_type})"
            for i, step in enumerate(program.steps)
            if step.info.op_type in RANDOM_OP_TYPES
        }
        self._segments: list[Segment | int] | None = None
        self._warned: set[str] = set()

    @property
    def fallback(self) -> str | None:
        """What runs eagerly and why (None: the whole graph is compiled)."""
        parts = [
            f"node {self.program.steps[i].info.name!r} runs eagerly: {why}"
            for i, why in sorted(self.eager_steps.items())
        ]
        parts += [
            f"steps {s.start}-{s.stop - 1} run eagerly: inductor could not compile them"
            for s in self.segments
            if isinstance(s, Segment) and s.eager
        ]
        return "; ".join(parts) or None

    @property
    def compile_count(self) -> int:
        """How many graphs are compiled (for each segment, one per set of shapes its guards
        cannot cover with one graph)."""
        return sum(
            len(graphs)
            for s in self.segments
            if isinstance(s, Segment)
            for graphs in s.compiled.values()
        )

    @property
    def segments(self) -> list[Segment | int]:
        """Compiled segments, and the indices of the steps run eagerly between them."""
        if self._segments is None:
            self._segments = _plan(self.program, set(self.eager_steps))
        return self._segments

    def run(self, inputs: dict[str, Tensor]) -> list[Tensor] | None:
        """The outputs of a compiled run, or None when an input is not a tensor."""
        if not all(isinstance(inputs.get(n), Tensor) for n in self.input_names):
            return None
        for _ in range(len(self.program.steps) + 1):
            values: dict[str, Any] = dict(self.constants)
            values.update(inputs)
            try:
                with torch.no_grad():
                    for part in self.segments:
                        if isinstance(part, int):
                            self.program.execute(values, start=part, stop=part + 1)
                        else:
                            self._run_segment(part, values)
            except _ReplanError:
                continue
            outs = [values[n] for n in self.output_names]
            if not all(isinstance(o, Tensor) for o in outs):
                return None
            return [Tensor(data=o.data, requires_grad=False, name=n) for o, n in
                    zip(outs, self.output_names, strict=True)]  # fmt: skip
        raise RuntimeError("graph mode could not settle which steps run eagerly")

    def _run_segment(self, segment: Segment, values: dict[str, Any]) -> None:
        args = [values.get(n) for n in segment.inputs]
        if segment.eager or not all(isinstance(a, Tensor) for a in args):
            self.program.execute(values, start=segment.start, stop=segment.stop)
            return
        # A shape value an eager step computed is baked in; a graph input (token ids are
        # small host integers too) never is.
        baked = [
            n not in self.input_names and _is_shape_value(a.data)
            for n, a in zip(segment.inputs, args, strict=True)
        ]
        traced = [a.data for a, bake in zip(args, baked, strict=True) if not bake]
        key = tuple(
            (_kind(a.data), tuple(a.data.reshape(-1).tolist())) if bake else _kind(a.data)
            for a, bake in zip(args, baked, strict=True)
        )
        versions = tuple((id(t.data), t.data._version) for t in self.constants.values())
        graphs = segment.compiled.setdefault(key, [])
        graphs[:] = [g for g in graphs if g.versions == versions]
        entry = next((g for g in graphs if g.fits(traced)), None)
        if entry is None:
            try:
                entry = self._compile(segment, args, baked, versions)
                graphs.append(entry)
            except NotTraceableError as e:
                if e.step_index is None or e.step_index in self.eager_steps:
                    raise
                self._run_eagerly(e.step_index, str(e))
                raise _ReplanError from e
            except Exception as e:  # inductor's own failure: this segment runs eagerly
                segment.eager = True
                first = self.program.steps[segment.start].info.name
                self._warn(f"steps from node {first!r} on ({_reason(e)})")
                self.program.execute(values, start=segment.start, stop=segment.stop)
                return
        outs = entry.run(*traced)
        values.update(
            (n, Tensor(data=t, requires_grad=False, name=n))
            for n, t in zip(segment.outputs, outs, strict=True)
        )

    def _run_eagerly(self, index: int, reason: str) -> None:
        self.eager_steps[index] = reason
        self._segments = None
        self._warn(f"node {self.program.steps[index].info.name!r} ({reason})")

    def _warn(self, what: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(
                f"graph mode runs {what} eagerly; the rest stays compiled, with the same results",
                RuntimeWarning,
                stacklevel=4,
            )

    def _compile(
        self, segment: Segment, args: list[Tensor], baked: list[bool], versions: tuple[Any, ...]
    ) -> CompiledGraph:
        reads = _segment_reads(self.program, segment.start, segment.stop)
        names = [n for n in reads if n in self.constants and self.constants[n].stores_grad]
        fixed = {n: a for n, a, bake in zip(segment.inputs, args, baked, strict=True) if bake}
        traced_names = [n for n, bake in zip(segment.inputs, baked, strict=True) if not bake]

        def pure(*flat: torch.Tensor) -> list[torch.Tensor]:
            params, inputs = flat[: len(names)], flat[len(names) :]
            values: dict[str, Any] = dict(self.constants)
            values.update(fixed)
            values.update(
                (n, Tensor(data=p, requires_grad=False, name=n))
                for n, p in zip(names, params, strict=True)
            )
            values.update(
                (n, Tensor(data=x, requires_grad=False, name=n))
                for n, x in zip(traced_names, inputs, strict=True)
            )
            with tracing(), ValueFlow([*params, *inputs]):
                self.program.execute(
                    values, start=segment.start, stop=segment.stop, keep=set(segment.outputs)
                )
                outs = [values.get(n) for n in segment.outputs]
                if not all(isinstance(o, Tensor) for o in outs):
                    error = NotTraceableError(
                        "an output is not a tensor (a sequence or an optional)"
                    )
                    error.step_index = segment.stop - 1
                    raise error
                # A shape value leaving the segment becomes a tensor of the graph; a strided
                # output of symbolic sizes leaves contiguous (inductor cannot always give a
                # symbolic output the strides of the trace).
                return [
                    materialize(o.data) if type(o.data) is SymbolicInts else viewable(o.data)
                    for o in outs
                ]

        params = [self.constants[n].data.detach() for n in names]
        xs = [a.data for a, bake in zip(args, baked, strict=True) if not bake]
        with torch.no_grad():
            if self.dynamic and self.backend == "inductor" and segment.per_shape is None:
                try:
                    declared = [self.declared_shapes.get(n) for n in traced_names]
                    return compile_symbolic(pure, params, xs, versions, declared)
                except NotTraceableError:
                    raise
                except Exception as e:  # a symbolic trace or compile torch cannot do
                    segment.per_shape = _reason(e)
            return self._compile_static(pure, params, xs, versions)

    def _compile_static(
        self,
        pure: Callable[..., list[torch.Tensor]],
        params: list[torch.Tensor],
        xs: list[torch.Tensor],
        versions: tuple[Any, ...],
    ) -> CompiledGraph:
        """A graph for exactly the shapes of ``xs``."""
        graph = make_fx(pure)(*params, *xs)
        freeze(graph, params)
        shapes = [(x.shape, x.stride()) for x in xs]
        try:
            run = _compiled(graph, xs, self.backend, pattern_matcher=True)
        except torch._dynamo.exc.BackendCompilerFailed:
            # inductor's pattern rewrites (attention fusion) can reject a graph whose
            # constants are tensors (a softmax scale computed from a shape); without them
            # the graph still compiles.
            run = _compiled(graph, xs, self.backend, pattern_matcher=False)
        return CompiledGraph(
            versions, lambda ts: [(t.shape, t.stride()) for t in ts] == shapes, run
        )


def _reason(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _segment_reads(program: GraphProgram, start: int, stop: int) -> list[str]:
    """The names steps ``[start, stop)`` read, subgraph reads and fused inputs included."""
    names: list[str] = []
    for index in range(start, stop):
        names.extend(reads_of(program.steps[index]))
        fusion = program.fusions.get(index)
        if fusion is not None:
            names.extend(fusion.inputs)
    return list(dict.fromkeys(names))


def _plan(program: GraphProgram, eager: set[int]) -> list[Segment | int]:
    """Segments between the eager steps, each with its inputs and the outputs read later."""
    parts: list[Segment | int] = []
    bounds = [-1, *sorted(eager), len(program.steps)]
    for before, after in itertools.pairwise(bounds):
        if after - before > 1:
            parts.append(_segment(program, before + 1, after))
        if after < len(program.steps):
            parts.append(after)
    return parts


def _segment(program: GraphProgram, start: int, stop: int) -> Segment:
    produced = {o for i in range(start, stop) for o in program.steps[i].outputs if o}
    inputs = [
        n
        for n in _segment_reads(program, start, stop)
        if n not in produced and n not in program.constants
    ]
    later = set(program.output_names)
    for index in range(stop, len(program.steps)):
        later.update(reads_of(program.steps[index]))
        fusion = program.fusions.get(index)
        if fusion is not None:
            later.update(fusion.inputs)
    outputs = [o for i in range(start, stop) for o in program.steps[i].outputs if o in later]
    return Segment(start, stop, inputs, list(dict.fromkeys(outputs)))


def _compiled(
    graph: GraphModule, xs: list[torch.Tensor], backend: str, pattern_matcher: bool
) -> Callable[..., Any]:
    """``torch.compile`` of ``graph``, compiled now (first call) with the weights frozen in.

    ``cpp_wrapper`` makes inductor launch the kernels from C++ instead of a Python wrapper,
    which at batch 1 is a large part of a run (measured: MobileNet-v2 22 -> 14 ms, the BERT
    encoder 3.5 -> 2.7 ms) for a few more seconds of compiling.
    """
    compiled = torch.compile(graph, backend=backend, dynamic=False)
    options = {"freezing": True, "pattern_matcher": pattern_matcher, "cpp_wrapper": True}
    with torch._inductor.config.patch(**options):
        compiled(*xs)
    return compiled

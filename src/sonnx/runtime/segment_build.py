"""What graph mode compiles for a segment: the steps as one function of the traced inputs
and trainable weights, and the build that traces and compiles it into a library.

The function runs the program's own steps (graph mode traces the interpreter rather than a
second implementation), under :func:`~sonnx.engine.tracing.tracing` and a
:class:`~sonnx.engine.tracing.ValueFlow` that keeps shape arithmetic outside the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from sonnx.compiler_warnings import torch_deprecations_ignored
from sonnx.engine.tracing import NotTraceableError, ValueFlow, tracing
from sonnx.runtime.compile_notes import compiling, describe_inputs
from sonnx.runtime.compiled_graphs import first_line
from sonnx.runtime.program import GraphProgram
from sonnx.runtime.segments import Segment, segment_reads
from sonnx.symbolic_sizes import SymbolicInts, materialize, viewable
from sonnx.tensor import Tensor

__all__ = ["segment_builder"]


def segment_builder(
    program: GraphProgram,
    segment: Segment,
    args: Mapping[str, Tensor],
    traced_names: Sequence[str],
    declared: Sequence[Any],
    dynamic: bool,
    named: Mapping[str, torch.Tensor],
) -> Callable[[Path], str]:
    """A build compiling ``segment`` into the library file it is given, returning the guards.

    ``args`` are the segment's inputs by name; those in ``traced_names`` are traced (with
    ``declared`` shapes), the others baked in. ``dynamic`` traces symbolic sizes first (a
    segment torch cannot trace so is compiled per shape from then on: ``per_shape``);
    ``named`` are the model's tensors the library reads.
    """
    constants = program.constants
    reads = segment_reads(program, segment.start, segment.stop)
    names = [n for n in reads if n in constants and constants[n].stores_grad]
    fixed = {n: a for n, a in args.items() if n not in traced_names}

    def pure(*flat: torch.Tensor) -> list[torch.Tensor]:
        params, inputs = flat[: len(names)], flat[len(names) :]
        values: dict[str, Any] = dict(constants)
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
            program.runner.execute(
                values, start=segment.start, stop=segment.stop, keep=set(segment.outputs)
            )
            outs = [values.get(n) for n in segment.outputs]
            if not all(isinstance(o, Tensor) for o in outs):
                error = NotTraceableError("an output is not a tensor (a sequence or an optional)")
                error.step_index = segment.stop - 1
                raise error
            # A shape value leaving the segment becomes a tensor of the graph; a strided
            # output of symbolic sizes leaves contiguous (inductor cannot always give a
            # symbolic output the strides of the trace).
            return [
                materialize(o.data) if type(o.data) is SymbolicInts else viewable(o.data)
                for o in outs
            ]

    params = [constants[n].data.detach() for n in names]
    xs = [args[n].data for n in traced_names]
    steps = len(program.steps)
    what = describe_inputs(xs)
    if segment.stop - segment.start < steps:
        what += f" (steps {segment.start}-{segment.stop - 1} of {steps})"

    def build(library: Path) -> str:
        with compiling(what), torch.no_grad(), torch_deprecations_ignored():
            # Imported when a graph is first compiled: it loads inductor (1-2 s), which a
            # process that only loads stored graphs or runs eagerly never needs.
            from sonnx.runtime.symbolic_graphs import compile_static, compile_symbolic

            if dynamic and segment.per_shape is None:
                try:
                    return compile_symbolic(pure, params, xs, library, named, declared)
                except NotTraceableError:
                    raise
                except Exception as e:  # a symbolic trace or compile torch cannot do
                    segment.per_shape = first_line(e)
            return compile_static(pure, params, xs, library, named)

    return build

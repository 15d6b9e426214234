"""How graph mode splits a program's steps into parts: compiled segments between the steps
that run eagerly (see :mod:`sonnx.runtime.graph_mode`), which steps do so by design
(:func:`eager_by_design`), what each segment reads and leaves for later steps, and what a run
did, part by part (:class:`RunPart`).

A segment between eager steps whose steps only move elements or read sizes (the ``Transpose
-> GatherND`` of ``x[mask]`` between a VITS spline's NonZeros) is not compiled: its compiled
graph would run the same copies, and each such graph cost a compile of 10-15 s (a tiny VITS
duration predictor had fifteen of them). Its steps run eagerly (:attr:`Segment.runs_eagerly`).
A segment with an eager step on each side, of light steps only (element-wise math, indexing,
reductions: :func:`light_steps`), is timed eagerly at its first run, and stays eager where that
is cheap (see :mod:`sonnx.runtime.segment_costs`). The segments at a model's start and end
(before its first eager step, after its last) are compiled whatever their steps, as is a model
with no eager step, one segment.

A trace that stops at a NonZero (or a Compress, a Unique: an output sized by a count of values)
makes every such step of computed values run eagerly at once (:func:`stops_alike`): found one
trace at a time, each cost a trace of the steps before it."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from sonnx.engine.operator import Operator, Randomness
from sonnx.onnx.registry import operator_class
from sonnx.operators import activation, elementwise, indexing, reduce, shape
from sonnx.operators.linalg.products import CumProd, CumSum
from sonnx.runtime.program import GraphProgram
from sonnx.runtime.string_steps import string_steps


@dataclass
class Segment:
    """Steps ``[start, stop)`` compiled together: what they read from before and what later
    steps (or the graph's outputs) read from them. Its choices and compiled graphs are the
    runner's plan's (:class:`~sonnx.runtime.graph_plan_state.GraphPlan`), by its bounds."""

    start: int
    stop: int
    inputs: list[str]
    outputs: list[str]
    #: Why the segment is compiled for each input shape (no symbolic trace), if it is.
    per_shape: str | None = None
    #: Why the segment is not compiled at all, its steps run eagerly, if it is not (it only
    #: moves elements: see the module docstring).
    runs_eagerly: str | None = None
    #: Whether its first run is timed eagerly, and it stays eager if that is cheap (its steps
    #: are light: see :mod:`sonnx.runtime.segment_costs`).
    timed: bool = False


@dataclass(frozen=True)
class RunPart:
    """One part of a graph-mode run, in the order they run: steps computed by one compiled
    segment, or steps run eagerly, with why."""

    steps: range
    #: The ONNX nodes' names, one per step.
    nodes: tuple[str, ...]
    #: Whether a compiled graph computed the steps in the runs so far.
    compiled: bool
    #: Why the steps ran eagerly (None when compiled).
    why_eager: str | None = None


def describe_fallback(parts: Sequence[RunPart], eager_steps: Mapping[int, str]) -> str | None:
    """What runs eagerly because it must (the parts starting at one of ``eager_steps``) and
    why, as one line.

    :param parts: a run's parts (:meth:`GraphRunner.parts
        <sonnx.runtime.graph_mode.GraphRunner.parts>`).
    :param eager_steps: why the steps that must run eagerly do, by index.
    :returns: the line; None when no step must run eagerly.
    """
    found = [p for p in parts if not p.compiled and p.steps.start in eager_steps]
    described = [
        f"node {p.nodes[0]!r} runs eagerly: {p.why_eager}"
        if len(p.steps) == 1
        else f"steps {p.steps.start}-{p.steps.stop - 1} ({p.nodes[0]!r} .. "
        f"{p.nodes[-1]!r}) run eagerly: {p.why_eager}"
        for p in found
    ]
    return "; ".join(described) or None


def eager_by_design(program: GraphProgram) -> dict[int, str]:
    """The steps no compiled graph can hold whatever the inputs, with why: random draws (a
    compiled graph would repeat one draw) and the steps that read or make strings (see
    :mod:`sonnx.runtime.string_steps`). Graph mode runs them eagerly from the start, without
    a warning; the steps it finds it cannot compile while tracing join them."""
    found = {
        i: f"it draws random numbers ({step.info.op_type})"
        for i, step in enumerate(program.steps)
        if operator_class(step.info).random is Randomness.ALWAYS
    }
    return {**string_steps(program), **found}


#: Why a segment that only moves elements or reads sizes runs eagerly.
ONLY_MOVES = "it only moves elements or reads sizes: a compiled graph would save nothing"


def only_moves(program: GraphProgram, start: int, stop: int) -> bool:
    """Whether steps ``[start, stop)`` only move their inputs' elements (Transpose, Gather,
    Reshape, ...), read shapes (Shape) or make tensors from sizes (ConstantOfShape).

    :param program: the steps.
    :param start: the first step.
    :param stop: the step after the last.
    :returns: whether a compiled graph of them would only copy.
    """
    for step in program.steps[start:stop]:
        if step.has_subgraphs:
            return False
        traits = operator_class(step.info)
        if traits.moves_elements_only or traits.reads_shape_only:
            continue
        if not all(i in traits.size_inputs for i, n in enumerate(step.inputs) if n):
            return False
    return True


#: Operators whose cost follows their inputs' and outputs' sizes, a few operations an element:
#: element-wise math and activations (a softmax's row included), moves and shape steps,
#: indexing, reductions and running sums.
LIGHT_OPERATORS: frozenset[type[Operator]] = frozenset(
    (
        *elementwise.OPERATORS,
        *activation.OPERATORS,
        *shape.OPERATORS,
        *indexing.OPERATORS,
        *reduce.OPERATORS,
        CumSum,
        CumProd,
    )
)


def light_steps(program: GraphProgram, start: int, stop: int) -> bool:
    """Whether steps ``[start, stop)`` are all light (:data:`LIGHT_OPERATORS`, no subgraphs):
    their eager time on one input says what it is on inputs of similar size.

    :param program: the steps.
    :param start: the first step.
    :param stop: the step after the last.
    :returns: whether the segment's first run may decide that it stays eager.
    """
    return all(
        not step.has_subgraphs and operator_class(step.info) in LIGHT_OPERATORS
        for step in program.steps[start:stop]
    )


#: Operators whose output's size is a count of their input's values (NonZero's positions, the
#: elements Compress keeps, Unique's values): a trace stops at each one reading computed values.
COUNTING_OPERATORS: frozenset[type[Operator]] = frozenset(
    {indexing.masks.NonZero, indexing.masks.Compress, indexing.gather_scatter.Unique}
)


def stops_alike(program: GraphProgram, index: int, eager: Collection[int] = ()) -> list[int]:
    """The steps a trace stopped at step ``index`` would stop at too: where ``index`` is a
    counting operator's (:data:`COUNTING_OPERATORS`), every step of that operator that reads
    computed values (not a shape value's step, which runs outside the trace) and does not run
    eagerly already; else ``index``. Graph mode runs them eagerly at once, where finding them
    one trace at a time cost a trace each (twenty in a 4-flow VITS duration predictor).

    :param program: the steps.
    :param index: the step a trace stopped at.
    :param eager: the steps that run eagerly already (for a reason of their own).
    :returns: the steps, ``index`` among them, in order.
    """
    kind = operator_class(program.steps[index].info)
    if kind not in COUNTING_OPERATORS:
        return [index]
    shape_steps = program.shape_value_steps
    return [
        i
        for i, step in enumerate(program.steps)
        if i == index
        or (operator_class(step.info) is kind and i not in shape_steps and i not in eager)
    ]


def segment_reads(program: GraphProgram, start: int, stop: int) -> list[str]:
    """The names steps ``[start, stop)`` read, subgraph reads and fused inputs included (the
    reads of their schedule)."""
    reads = (n for entry in program.runner.schedule(start, stop).steps for n in entry.reads)
    return list(dict.fromkeys(reads))


def plan_segments(program: GraphProgram, eager: set[int], splits: set[int]) -> list[Segment | int]:
    """Segments between the eager steps, each with its inputs and the outputs read later; a
    segment is split where ``splits`` says one starts."""
    parts: list[Segment | int] = []
    bounds = [-1, *sorted(eager), len(program.steps)]
    for before, after in itertools.pairwise(bounds):
        starts = [before + 1, *sorted(i for i in splits if before + 1 < i < after), after]
        # Eager steps on both sides: the glue of value-dependent steps (a spline's masks), not
        # the model's start or end, where its inputs or outputs are computed.
        between = before >= 0 and after < len(program.steps)
        for start, stop in itertools.pairwise(starts):
            if stop > start:
                segment = _segment(program, start, stop)
                whole = (start, stop) == (0, len(program.steps))
                if not whole and only_moves(program, start, stop):
                    segment.runs_eagerly = ONLY_MOVES
                elif between and not whole:
                    segment.timed = light_steps(program, start, stop)
                parts.append(segment)
        if after < len(program.steps):
            parts.append(after)
    return parts


def whole_graph(parts: list[Segment | int], outputs: list[str]) -> tuple[Segment, list[int]] | None:
    """The only part, if it is a segment computing every output, with the outputs' positions
    among the segment's."""
    if len(parts) != 1 or isinstance(parts[0], int):
        return None
    segment = parts[0]
    if not set(outputs) <= set(segment.outputs):  # an output is a graph input or a constant
        return None
    return segment, [segment.outputs.index(n) for n in outputs]


def _segment(program: GraphProgram, start: int, stop: int) -> Segment:
    produced = {o for i in range(start, stop) for o in program.steps[i].outputs if o}
    inputs = [
        n
        for n in segment_reads(program, start, stop)
        if n not in produced and n not in program.constants
    ]
    later = set(program.output_names).union(segment_reads(program, stop, len(program.steps)))
    outputs = [o for i in range(start, stop) for o in program.steps[i].outputs if o in later]
    return Segment(start, stop, inputs, list(dict.fromkeys(outputs)))

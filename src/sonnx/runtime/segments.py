"""How graph mode splits a program's steps into parts: compiled segments between the steps
that run eagerly (see :mod:`sonnx.runtime.graph_mode`), which steps do so by design
(:func:`eager_by_design`), what each segment reads and leaves for later steps, and what a run
did, part by part (:class:`RunPart`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sonnx.engine.operator import Randomness
from sonnx.onnx.registry import operator_class
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


def segment_reads(program: GraphProgram, start: int, stop: int) -> list[str]:
    """The names steps ``[start, stop)`` read, subgraph reads and fused inputs included (the
    reads of their schedule)."""
    reads = (n for entry in program.schedule(start, stop).steps for n in entry.reads)
    return list(dict.fromkeys(reads))


def plan_segments(program: GraphProgram, eager: set[int], splits: set[int]) -> list[Segment | int]:
    """Segments between the eager steps, each with its inputs and the outputs read later; a
    segment is split where ``splits`` says one starts."""
    parts: list[Segment | int] = []
    bounds = [-1, *sorted(eager), len(program.steps)]
    for before, after in itertools.pairwise(bounds):
        starts = [before + 1, *sorted(i for i in splits if before + 1 < i < after), after]
        for start, stop in itertools.pairwise(starts):
            if stop > start:
                parts.append(_segment(program, start, stop))
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

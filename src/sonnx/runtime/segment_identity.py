"""What a segment's compiled graph is a function of: its steps as written, not where they are.

Graph mode keys a segment's compiled graphs, in memory and in the store, by this identity
(:func:`segment_identity`) rather than by the segment's step numbers, so that segments of the
same steps on the same constant values share one graph. A VITS duration predictor repeats its
rational-quadratic spline in every flow, between the same NonZeros and on no weights: its
three spline segments compiled the same graph three times (25-110 s each on a 2-core machine).

Two segments are the same when their steps are, one for one: operator (type, domain, version,
converter), attributes, which of the segment's inputs or earlier steps' outputs each input
reads, and the bytes of each constant read (by digest, not by name: each flow's constants
have names of their own). Whether a step computes a shape value is not part of it: a trace
computes those like any other step. A step with subgraphs, or an attribute this module cannot
compare by value, leaves the segment its position as identity. A shared graph is checked
again at its first run in each segment (see
:meth:`~sonnx.runtime.compiled_graphs.CompiledGraph.twin`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx.runtime.compiled_graphs import CompiledGraph
from sonnx.runtime.segments import Segment, segment_reads

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram

__all__ = ["SharedGraphs", "segment_identity"]

#: Attribute values compared by their repr (anything else: no identity).
_PLAIN = (type(None), bool, int, float, str, bytes)


def segment_identity(
    program: GraphProgram, segment: Segment, digest_of: Callable[[Any], str]
) -> tuple[Any, ...]:
    """What ``segment``'s compiled graph depends on among the program's steps and constants:
    its steps' structure and the digests (``digest_of``) of the constants they read; the
    segment's bounds where a step cannot be compared by value.

    :param program: the steps.
    :param segment: the segment.
    :param digest_of: a constant's digest (of its bytes, dtype and shape).
    :returns: a value whose repr keys the segment's graphs.
    """
    constants = program.constants
    weights = [
        (n, digest_of(constants[n].data))
        for n in segment_reads(program, segment.start, segment.stop)
        if n in constants
    ]
    position = ("steps", segment.start, segment.stop, tuple(weights))
    local: dict[str, tuple[Any, ...]] = {n: ("input", i) for i, n in enumerate(segment.inputs)}
    steps: list[tuple[Any, ...]] = []
    for offset, step in enumerate(program.steps[segment.start : segment.stop]):
        attrs = _attributes(step.attrs)
        if step.has_subgraphs or attrs is None:
            return position
        reads: list[Any] = []
        for name in step.inputs:
            if not name:
                reads.append(None)
            elif name in local:
                reads.append(local[name])
            elif name in constants:
                reads.append(("constant", digest_of(constants[name].data)))
            else:  # read from outside the program's values: keep the name
                return position
        info = step.info
        convert = getattr(step.convert, "__qualname__", repr(step.convert))
        flags = (step.foldable, step.blames_input, len(step.outputs))
        steps.append((info.op_type, info.domain, info.since_version, convert, attrs, reads, flags))
        local.update((o, ("step", offset, k)) for k, o in enumerate(step.outputs) if o)
    outputs = tuple(local.get(n, ("missing", n)) for n in segment.outputs)
    # The fused groups of a schedule read what their steps read, and constants a pass made:
    # the steps and every constant's digest decide them.
    return ("segment", tuple(steps), outputs, tuple(d for _, d in weights))


def _attributes(attrs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The attributes as comparable values (a tensor or array by its bytes); None if one
    cannot be compared so."""
    found = []
    for key in sorted(attrs):
        value = _value(attrs[key])
        if value is None and attrs[key] is not None:
            return None
        found.append((key, value))
    return tuple(found)


def _value(value: Any) -> Any:
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, list | tuple):
        items = [_value(v) for v in value]
        return None if any(i is None for i in items) else ("seq", *items)
    if isinstance(value, torch.Tensor):
        try:
            value = value.detach().cpu().numpy()
        except TypeError:  # no NumPy dtype (bfloat16)
            return None
    if isinstance(value, np.ndarray) and value.dtype != object:
        return ("array", str(value.dtype), value.shape, value.tobytes())
    return None


class SharedGraphs:
    """The graphs compiled or loaded so far by their store key (see :mod:`~sonnx.runtime.store`,
    whose key holds the segment's identity): a segment of the same steps as one compiled
    before takes a twin of its graph, whether or not the store keeps graphs on disk."""

    def __init__(self) -> None:
        self._by_key: dict[str, list[CompiledGraph]] = {}
        #: The weight versions of the graphs kept: those of others go (a training loop that
        #: evaluates in graph mode compiles anew after each step, under keys of new digests).
        self._versions: tuple[Any, ...] | None = None

    def find(
        self, key: str, inputs: list[torch.Tensor], versions: tuple[Any, ...]
    ) -> CompiledGraph | None:
        """A twin of a graph kept under ``key``, of the weights ``versions``, whose guards
        admit ``inputs``; None if there is none.

        :param key: the store key.
        :param inputs: the traced inputs.
        :param versions: the constants' identities and versions now.
        :returns: the twin, or None.
        """
        for graph in self._by_key.get(key, ()):
            if graph.versions == versions and graph.fits(inputs):
                return graph.twin()
        return None

    def add(self, key: str, graph: CompiledGraph) -> None:
        """Keep ``graph`` under ``key``.

        :param key: the store key it was compiled or loaded under.
        :param graph: the graph.
        """
        if graph.versions != self._versions:
            self._by_key, self._versions = {}, graph.versions
        self._by_key[key] = [*self._by_key.get(key, ()), graph]

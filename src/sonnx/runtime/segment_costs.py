"""Whether a segment between eager steps is worth a compiled graph: decided by timing its
first run eagerly.

A compiled graph saves what its steps cost eagerly beyond the graph's own call (a fixed
10-30 us): sonnx's Python per step and torch's dispatch per operation. It costs a compile of
10-100 s on a 2-core machine. Between a VITS duration predictor's NonZeros sit segments of a
few element-wise steps on tens of elements (the ``Mul`` and ``Exp`` of the latents inside the
spline's bound): about 100-200 us eagerly, so their graph saves about 100 us a run and repays a
15 s compile after some 100,000 runs.

So the first run of such a segment (one with an eager step on each side, of light steps only:
see :func:`~sonnx.runtime.segments.light_steps`) is made eagerly and timed before anything is
compiled; under :data:`WORTH_COMPILING_S` the segment stays eager (:class:`CheapSegment`,
which ``explain()`` shows with the time measured) and nothing is traced. Over it, it is timed
once more (the first run of an operator pays one-off costs) and compiled only if that run is
over too; the new graph's first-run check then compares with this eager run's results rather
than running the steps again. The timed run is the run's own: it costs nothing where the
segment stays eager, and one or two eager runs beside a compile of seconds where it does not.

An input computed before the segment that is empty (a NonZero's count of 0) makes no graph
either (:func:`empty_computed_input`): inductor cannot compile a symbolic size whose example is
0, so such a graph would be traced at that size and serve it alone, one more compile beside the
graph of the other counts. That run's segment runs eagerly instead; a graph traced at another
count serves a count of 0 where its guards admit it. An empty graph input (the past of a
decoder's first step) still gets a graph of its own (see :mod:`sonnx.runtime.symbolic_graphs`).

A cheap segment stays eager for inputs of up to :data:`GROWTH` times the elements it was
timed with; larger inputs time it again. Matrix products, convolutions, recurrences and the
like are not light: their cost grows faster than their inputs' size (a longer text, a larger
image), so a short first run says little of the next, and they are compiled as before. The
segments at a model's start and end (its inputs' first steps, its outputs' last) are compiled
whatever they cost, as is a model with no eager step (one segment): a small model compiled
whole or around one NonZero is what graph mode was asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sonnx.runtime.segments import Segment

__all__ = [
    "GROWTH",
    "WORTH_COMPILING_S",
    "CheapSegment",
    "EagerTrial",
    "elements",
    "empty_computed_input",
    "timed_eager_run",
]

#: Below this many seconds eagerly a segment of light steps is not compiled. At 1 ms a graph
#: saves at most about 1 ms a run: a 10 s compile pays after 10,000 runs, a 100 s one after
#: 100,000 (see the module docstring; measured in bench/history.md, 2026-11-29).
WORTH_COMPILING_S = 1e-3

#: A cheap segment is timed again for inputs of more than this many times the elements it
#: was timed with.
GROWTH = 8


def elements(datas: Sequence[torch.Tensor]) -> int:
    """How many elements ``datas`` hold together: what a cheap segment's time is taken at.

    :param datas: a segment's inputs.
    :returns: the sum of their element counts.
    """
    return sum(d.numel() for d in datas)


@dataclass(frozen=True)
class CheapSegment:
    """A segment found cheap eagerly: its measured time and the inputs' size it was taken at."""

    seconds: float
    elements: int

    def covers(self, datas: Sequence[torch.Tensor]) -> bool:
        """Whether inputs ``datas`` are small enough to run eagerly on this measurement.

        :param datas: the segment's inputs now.
        :returns: whether they hold at most :data:`GROWTH` times the elements measured.
        """
        return elements(datas) <= GROWTH * max(self.elements, 1)

    @property
    def reason(self) -> str:
        """Why the segment runs eagerly, as ``explain()`` shows it."""
        return (
            f"{self.seconds * 1e6:.0f} us eagerly on {self.elements} input elements, not worth "
            f"a compile (under {WORTH_COMPILING_S * 1e3:g} ms)"
        )


@dataclass(frozen=True)
class EagerTrial:
    """A segment's first run, eager and timed: the fastest of its timed runs, and the values
    (inputs and outputs by name) of the last."""

    seconds: float
    values: dict[str, Any]

    @property
    def cheap(self) -> bool:
        """Whether the segment runs faster eagerly than a compile could pay for."""
        return self.seconds < WORTH_COMPILING_S


#: ``execute(values, start, stop, keep)``: a runner's eager steps (see
#: :meth:`~sonnx.runtime.graph_mode.GraphRunner._execute`).
Execute = Callable[[dict[str, Any], int, int, set[str]], None]


def timed_eager_run(execute: Execute, segment: Segment, values: dict[str, Any]) -> EagerTrial:
    """``segment`` run eagerly on a copy of ``values``, timed; run and timed once more when
    the first run is not cheap (it paid one-off costs).

    :param execute: the runner's eager steps.
    :param segment: the segment.
    :param values: the values before it (left as they are).
    :returns: the trial: the faster time, and the values after the last run.
    """
    best = float("inf")
    trial = EagerTrial(best, values)
    for _ in range(2):
        after = dict(values)
        started = time.perf_counter()
        execute(after, segment.start, segment.stop, set(segment.outputs))
        best = min(best, time.perf_counter() - started)
        trial = EagerTrial(best, after)
        if trial.cheap:
            break
    return trial


#: Why a segment runs eagerly for an empty input computed before it.
EMPTY_INPUT = (
    "an input computed before it is empty (a count of 0): a graph traced at that size would "
    "serve it alone"
)


def empty_computed_input(
    names: Sequence[str], datas: Sequence[torch.Tensor], graph_inputs: Sequence[str]
) -> bool:
    """Whether a segment's traced input computed by earlier steps (not one of the graph's
    ``graph_inputs``) is empty: a graph compiled for it would serve that size alone.

    :param names: the traced inputs' names.
    :param datas: their values.
    :param graph_inputs: the graph's inputs' names.
    :returns: whether one of them has a dimension of size 0.
    """
    return any(0 in d.shape and n not in graph_inputs for n, d in zip(names, datas, strict=True))

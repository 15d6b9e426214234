"""Which way a run of an imported model goes, and why: the one place that decides.

A run of a :class:`~sonnx.runtime.rep.SingaRep` goes one of two ways:

* **compiled graph mode** (``prepare(..., use_graph=True)``): the graph runner's compiled
  segments, with the steps it cannot compile run eagerly between them
  (:meth:`~sonnx.runtime.graph_mode.GraphRunner.parts`);
* **the program**: the imported graph's steps run eagerly, by the *generated plan* (straight-line
  code written once per set of kept values, :mod:`sonnx.runtime.plan`) or by the *step loop*
  (the interpreter: first runs, cuts, every value asked for, ``SONNX_DEBUG``).

:func:`choose_path` and :func:`step_loop_reason` make those decisions; ``SingaRep.run``
dispatches on them, ``SONNX_DEBUG=1`` prints them for every run and ``SingaRep.explain`` tells
them to a user. Not to be confused with ``Model.compile(use_graph=True)``, the *traced training
graph* of models built with sonnx's layer API (:mod:`sonnx.model`).
"""

from __future__ import annotations

import enum
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sonnx import dtypes
from sonnx.operators.quantize.ort_kernels import kernel_lines

if TYPE_CHECKING:
    from sonnx.runtime.graph_mode import GraphRunner
    from sonnx.runtime.program import GraphProgram
    from sonnx.runtime.steps import Step

__all__ = [
    "WHOLE_GRAPH_RUN",
    "Path",
    "RunChoice",
    "RunTaken",
    "announce",
    "choose_path",
    "debugging",
    "explain_run",
    "report",
    "step_loop_reason",
    "took",
    "trace_step",
]


class Path(enum.Enum):
    COMPILED = "compiled graph mode"
    PROGRAM = "the program"


@dataclass(frozen=True)
class RunChoice:
    """The way a run goes and why."""

    path: Path
    why: str


@dataclass(frozen=True)
class RunTaken:
    """The way one run actually went, as ``SingaRep.explain`` reports it for the last run: a
    graph-mode run can still compute eagerly (steps its runner cannot compile, a graph dropped
    at its first-run check, a spent compile budget, or no graph-mode run at all when an input
    or output is no tensor), which the choice made before the run does not show."""

    path: Path
    #: Compiled segments whose graphs computed this run.
    compiled: int = 0
    #: The steps this run computed eagerly in graph mode, counted by why.
    eager: tuple[tuple[str, int], ...] = ()
    #: Why the program's steps ran (``Path.PROGRAM``), graph mode's fallback included.
    why: str | None = None

    def describe(self) -> str:
        """One line: the path taken and, where steps ran eagerly, how many and why.

        :returns: the line.
        """
        if self.path is Path.PROGRAM:
            return f"eager, the program's steps ran: {self.why}"
        steps = sum(count for _, count in self.eager)
        whys = "; ".join(
            why if len(self.eager) == 1 else f"{_steps(count)}: {why}" for why, count in self.eager
        )
        if not steps:
            if not self.compiled:
                return "nothing computed: every output is an input or a constant"
            if self.compiled == 1:
                return "compiled, the whole graph in one compiled graph"
            return f"compiled, {self.compiled} compiled segments"
        if not self.compiled:
            return f"eager, all {_steps(steps)} ran eagerly in graph mode: {whys}"
        return f"compiled segments ({self.compiled}), with {_steps(steps)} run eagerly: {whys}"


#: The path of a run the whole graph's one compiled graph computed (the common case).
WHOLE_GRAPH_RUN = RunTaken(Path.COMPILED, compiled=1)


def _steps(count: int) -> str:
    return f"{count} step" if count == 1 else f"{count} steps"


def choose_path(has_runner: bool, whole: bool, training: bool) -> RunChoice:
    """Compiled graph mode or the program, for a run of a model prepared with (``has_runner``)
    or without ``use_graph=True``, of the whole model or not, training or not."""
    if not has_runner:
        return RunChoice(Path.PROGRAM, "prepared without use_graph=True")
    if not whole:
        return RunChoice(
            Path.PROGRAM,
            "a cut or extra values (last_layers, output=, aux_output, all_outputs) run the "
            "imported steps themselves",
        )
    if training:
        return RunChoice(
            Path.PROGRAM,
            "sonnx.autograd.training is on in this thread: autograd records "
            "the eager run (compiled graphs are for inference)",
        )
    return RunChoice(Path.COMPILED, "prepared with use_graph=True; a whole run, in inference")


def step_loop_reason(
    whole: bool, every_value: bool, keeps: bool, value_checks: bool, plans_work: bool
) -> str | None:
    """Why the program's run goes through the step loop instead of the generated plan (None:
    the plan runs once a run of the input signature has found its shape values)."""
    if debugging():
        return "SONNX_DEBUG is set: the step loop traces every node"
    if every_value:
        return "every value is asked for (all_outputs)"
    if not keeps:
        return "the run keeps every value (no liveness schedule)"
    if not whole:
        return "a cut runs part of the steps"
    if not value_checks:
        return "graph mode is tracing the steps for the compiler"
    if not plans_work:
        return "a generated plan failed where the step loop did not (plans are off for this graph)"
    return None


def announce(choice: RunChoice) -> RunChoice:
    """``choice``, printed as the first line of the ``SONNX_DEBUG`` trace of a run.

    :param choice: the path chosen before the run.
    :returns: ``choice``.
    """
    if debugging():
        report(f"run: {choice.path.value} ({choice.why})")
    return choice


def took(taken: RunTaken) -> RunTaken:
    """``taken``, printed in the ``SONNX_DEBUG`` trace of a graph-mode run once its graphs ran:
    the path it actually took (steps run eagerly and why, the fallback to the program's steps),
    which the first line, the path chosen, does not show.

    :param taken: how the run went.
    :returns: ``taken``.
    """
    if debugging():
        report(f"took: {taken.describe()}")
    return taken


def debugging() -> bool:
    """``SONNX_DEBUG`` set: every run's path and every node's inputs and time are printed."""
    return os.environ.get("SONNX_DEBUG", "") not in ("", "0")


def report(line: str) -> None:
    """Print one line of the ``SONNX_DEBUG`` trace."""
    print(f"[sonnx] {line}", file=sys.stderr)


def trace_step(step: Step, args: list[Any], values: dict[str, Any], seconds: float) -> None:
    """One node of the ``SONNX_DEBUG`` trace: its inputs, its outputs by name, its time.

    :param step: the step that ran.
    :param args: its input values.
    :param values: the run's values, its outputs among them.
    :param seconds: how long it took.
    """
    inputs = ", ".join(_described(a) for a in args)
    outputs = ", ".join(f"{n}: {_described(values.get(n))}" for n in step.outputs if n)
    report(
        f"{step.info.op_type:<20} {step.info.name:<30} ({inputs}) -> {outputs} "
        f"{seconds * 1e3:.3f} ms"
    )


def _described(value: Any) -> str:
    if value is None:
        return "-"
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return f"{dtypes.dtype_name(value.dtype)}{list(value.shape)}"
    return type(value).__name__  # a sequence, an optional


def explain_run(
    program: GraphProgram,
    runner: GraphRunner | None,
    choice: RunChoice,
    stop: int,
    every_value: bool,
    values: dict[str, Any] | None,
    last: RunTaken | None = None,
) -> str:
    """The lines ``SingaRep.explain`` prints: the path, why, what it runs part by part, the
    path the ``last`` run actually took (if one ran), and which kernel ran the steps that have
    a choice (:mod:`sonnx.operators.quantize.ort_kernels`)."""
    lines = [f"{choice.path.value}: {choice.why}"]
    taken = [] if last is None else [f"  last run: {last.describe()}"]
    if choice.path is Path.COMPILED and runner is not None:
        parts = runner.parts()
        for number, part in enumerate(parts, 1):
            where = f"part {number} of {len(parts)}"
            span = _span(part.steps, part.nodes)
            if part.compiled:
                lines.append(f"  {where}, compiled: {span}")
            else:
                lines.append(f"  {where}, eager ({part.why_eager}): {span}")
        return "\n".join([*lines, *taken, *kernel_lines(program.steps)])
    why = program.runner.step_loop_reason(0, stop, {} if every_value else None, set())
    if why is not None:
        lines.append(f"  the step loop runs steps 0-{stop - 1}: {why}")
    elif values is not None and program.runner.knows_shape_values(values):
        lines.append("  the generated plan runs: these input shapes' shape values are known")
    else:
        lines.append(
            "  the step loop runs the first run of these input shapes (it finds their shape "
            "values); later runs of them take the generated plan"
        )
    groups = Counter(f.name for f in program.fusions.values())
    if groups and not every_value:
        counted = ", ".join(f"{count} {name}" for name, count in sorted(groups.items()))
        lines.append(f"  fused groups, each run as one step: {counted}")
    return "\n".join([*lines, *taken, *kernel_lines(program.steps)])


def _span(indices: range, nodes: tuple[str, ...]) -> str:
    if len(indices) == 1:
        return f"step {indices.start} ({nodes[0]})"
    return f"steps {indices.start}-{indices.stop - 1} ({nodes[0]} .. {nodes[-1]})"

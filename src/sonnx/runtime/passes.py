"""The passes that prepare a compiled graph's program, in the order they run.

:func:`~sonnx.runtime.program.compile_graph` lowers a ``GraphProto`` to a program (constants and
one :class:`~sonnx.runtime.steps.Step` per node, in execution order) and then runs
:data:`PASSES` over it. Each pass reads the steps, constants and outputs, and who computes and
reads each value from the program's one index (:mod:`sonnx.runtime.program_index`, subgraph
bodies' reads and the graph's outputs included), and rewrites the program: folding and the
shape-value pass give steps their kind (:class:`~sonnx.runtime.steps.StepKind`), and the
fusion passes put a fused step in the program's order in place of each group
(:meth:`~sonnx.runtime.program.GraphProgram.fuse`), which keeps the group's steps as its
fallback. The steps themselves stay one per original node, so cuts (``last_layers``), export
and ``SONNX_DEBUG`` still see the graph's nodes. A pass that renames what a step reads says so
(``Pass.rewires``), and the index is built again for the passes after it.

What a run takes of the program is decided per kind of run by the schedule
(:mod:`sonnx.runtime.schedule`): whether a fused step runs whole or its fallback's steps run
(a cut inside the group, an intermediate value asked for), which pure steps are pruned as
dead, and when each value is freed. Every executor (the runner's step loop, the generated
plan, graph mode's segments) walks that schedule and reads each step's kind from the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sonnx.runtime.constants import mark_parameterising_constants, mark_statistics_as_buffers
from sonnx.runtime.folding import mark_foldable
from sonnx.runtime.fusions import find_fusions
from sonnx.runtime.graph_weights import mark_constant_weights
from sonnx.runtime.product_groups import find_product_groups
from sonnx.runtime.shape_values import shape_value_steps
from sonnx.runtime.step_errors import input_dependent
from sonnx.runtime.steps import StepKind

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram
    from sonnx.runtime.steps import Step

__all__ = ["PASSES", "Pass", "run_passes"]


@dataclass(frozen=True)
class Pass:
    """One pass: its name (for ``explain`` and the docs) and what it does to a program.
    ``free`` names the values a run may feed freely (see :mod:`sonnx.runtime.step_errors`)."""

    name: str
    apply: Callable[[GraphProgram, set[str]], None]
    #: Whether it may rename what steps read or write (the program's index is then stale).
    rewires: bool = False


def _constant_weights(program: GraphProgram, free: set[str]) -> None:
    mark_constant_weights(program.steps, program.constants, program.constant_nodes, program.index)


def _statistics(program: GraphProgram, free: set[str]) -> None:
    mark_statistics_as_buffers(program.steps, program.constants, program.index)


def _parameterising(program: GraphProgram, free: set[str]) -> None:
    mark_parameterising_constants(program.steps, program.constants, program.index)


def _folding(program: GraphProgram, free: set[str]) -> None:
    mark_foldable(program.steps, program.constants)


def _blame(program: GraphProgram, free: set[str]) -> None:
    steps: list[Step] = program.steps
    flags = input_dependent([s.reads() for s in steps], [s.outputs for s in steps], free)
    for step, flag in zip(steps, flags, strict=True):
        step.blames_input = flag


def _fusions(program: GraphProgram, free: set[str]) -> None:
    program.fuse(find_fusions(program.steps, program.constants, program.index).values())


def _product_groups(program: GraphProgram, free: set[str]) -> None:
    claimed = {i for f in program.fused_steps for i in f.fallback}
    program.fuse(find_product_groups(program.steps, program.constants, claimed).values())


def _shape_values(program: GraphProgram, free: set[str]) -> None:
    steps = program.steps
    for index in shape_value_steps(steps, program.constants, set(program.input_names)):
        steps[index].kind = StepKind.SHAPE_VALUE


#: The passes, in order: what a later one reads, an earlier one wrote (the statistics and
#: parameterising passes judge Constant nodes' weights as they judge initializers; folding
#: reads which constants are weights; the fusions leave out folded steps; a shape value read
#: from folded results is a shape value, not a folded step).
PASSES: tuple[Pass, ...] = (
    Pass("Constant nodes' weights as parameters", _constant_weights),
    Pass("running statistics as buffers", _statistics, rewires=True),
    Pass("parameterising inputs as constants", _parameterising),
    Pass("constant folding", _folding),
    Pass("input blame", _blame),
    Pass("fusions (GELU, Linear, Conv+BatchNorm+activation chains)", _fusions),
    Pass("products reading one input as one onnxruntime session", _product_groups),
    Pass("shape values", _shape_values),
)


def run_passes(program: GraphProgram, free: set[str]) -> None:
    """Run every pass of :data:`PASSES` over ``program``."""
    for each in PASSES:
        each.apply(program, free)
        if each.rewires:
            program.wiring_changed()

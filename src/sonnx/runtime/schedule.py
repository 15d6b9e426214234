"""The schedule of a run: the program's steps in order, and when each value may be dropped.

Both executors of a :class:`~sonnx.runtime.program.GraphProgram` walk the same schedule,
as torch.fx's ``Interpreter`` and its code generation walk one graph: the step loop
(:class:`~sonnx.runtime.runner.ProgramRunner`, the interpreter: first runs, cuts,
``all_outputs``, the first run of a range graph mode keeps eager, ``SONNX_DEBUG``) and the
generated plan (:mod:`sonnx.runtime.plan`, the hot path: whole runs, and graph mode's eager
ranges after that). What each entry is, a node, a folded or shape-value step, or a fused group,
is its step's kind (:class:`~sonnx.runtime.steps.StepKind`), which the passes wrote; a schedule
adds only which of the program's steps a run takes and what each entry frees.

A kind of run is the steps ``[start, stop)``, the names it keeps (``None``: every value stays),
whether it wants every value computed (``all_outputs``: no group is fused) and whether dead
steps are pruned. A fused step of the program's order is taken when the run covers its whole
group and keeps none of its intermediate values; else its fallback's steps run where they stand
in the graph. *Pruning* (the plan's runs) leaves out the pure steps (shape values, folded
results) whose outputs no later step reads and the run does not keep; the step loop does not
prune, since its first run of an input signature records every shape value for later runs of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sonnx.runtime.steps import FusedStep, Step, StepKind

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram

__all__ = ["Schedule", "Scheduled", "build_schedule"]


@dataclass(frozen=True)
class Scheduled:
    """One entry of a schedule: a step of the program, and what to free after it."""

    #: Where it runs: the step's index (a fused step's: its group's final step).
    index: int
    step: Step | FusedStep
    #: The names it reads: the group's inputs, or the step's (its subgraphs' outer reads too);
    #: none for a shape value of a pruned run (it comes from the signature's known values).
    reads: tuple[str, ...]
    #: The names no later scheduled step reads and the run does not keep: dropped after it
    #: (those it reads for the last time, and its own outputs that nothing reads).
    frees: tuple[str, ...]

    @property
    def kind(self) -> StepKind:
        """The step's kind."""
        return self.step.kind


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Scheduled, ...]
    #: The position of the last entry reading each name (read by no entry: absent).
    last_reads: dict[str, int]


#: An entry being built: where it runs, its step, what it reads.
_Entry = tuple[int, "Step | FusedStep", tuple[str, ...]]


def build_schedule(
    program: GraphProgram,
    start: int,
    stop: int,
    keep: frozenset[str] | None,
    every_value: bool,
    prune: bool,
) -> Schedule:
    """The schedule of a run of ``program``'s steps ``[start, stop)`` keeping ``keep``.

    :param program: the program.
    :param start: the first step.
    :param stop: the step after the last.
    :param keep: the names the run keeps (None: every value).
    :param every_value: whether the run wants every value (no group fused).
    :param prune: whether dead pure steps are left out.
    :returns: the schedule.
    """
    steps = program.steps
    entries: list[_Entry] = []
    for item in program.order:
        if type(item) is int:
            if start <= item < stop:
                entries.append((item, steps[item], tuple(steps[item].reads())))
        elif not every_value and _whole(item, start, stop, keep):
            entries.append((item.index, item, item.inputs))
        else:  # its fallback's steps, each where it stands
            found = (i for i in item.fallback if start <= i < stop)
            entries.extend((i, steps[i], tuple(steps[i].reads())) for i in found)
    entries.sort(key=lambda entry: entry[0])
    if prune:
        entries = _live(entries, keep or frozenset())
    last_reads = {
        name: position for position, (_, _, reads) in enumerate(entries) for name in reads
    }
    frees = _frees(program, entries, keep, last_reads)
    return Schedule(
        tuple(
            Scheduled(index, step, reads, frees[position])
            for position, (index, step, reads) in enumerate(entries)
        ),
        last_reads,
    )


def _whole(fused: FusedStep, start: int, stop: int, keep: frozenset[str] | None) -> bool:
    """Whether a run takes ``fused`` whole: it covers the group entirely and keeps none of its
    intermediate values."""
    return (
        start <= fused.fallback[0]
        and fused.fallback[-1] < stop
        and not (keep and fused.fusion.intermediates & keep)
    )


def _live(entries: list[_Entry], keep: frozenset[str]) -> list[_Entry]:
    """The entries without the pure ones (shape values, folded results) whose outputs no later
    entry reads and the run does not keep (an int8 table's Cast read only by a shape value). A
    shape value reads nothing in a pruned run: it comes from the signature's known values."""
    needed = set(keep)
    live: list[_Entry] = []
    for index, step, reads in reversed(entries):
        pure = step.kind is StepKind.SHAPE_VALUE or step.kind is StepKind.FOLDED
        if pure and not any(o in needed for o in step.outputs if o):
            continue
        if step.kind is StepKind.SHAPE_VALUE:
            reads = ()
        needed.update(reads)
        live.append((index, step, reads))
    live.reverse()
    return live


def _frees(
    program: GraphProgram,
    entries: Sequence[_Entry],
    keep: frozenset[str] | None,
    last_reads: dict[str, int],
) -> list[tuple[str, ...]]:
    """For each entry, the names to drop after it (nothing when ``keep`` is None): after
    their last reader, or where they are made if nothing reads them."""
    if keep is None:
        return [() for _ in entries]
    last = dict(last_reads)
    for position, (_, step, _) in enumerate(entries):
        made = step.made(program.steps) if type(step) is FusedStep else step.outputs
        for name in made:
            if name:
                last.setdefault(name, position)  # freed where made unless read later
    frees: list[list[str]] = [[] for _ in entries]
    for name, position in last.items():
        if name not in keep:
            frees[position].append(name)
    return [tuple(names) for names in frees]

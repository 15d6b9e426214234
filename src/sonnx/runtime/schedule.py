"""The schedule of a run: what happens to each step, and when each value may be dropped.

Both executors of a :class:`~sonnx.runtime.program.GraphProgram` walk the same schedule,
as torch.fx's ``Interpreter`` and its code generation walk one graph: the step loop
(:meth:`GraphProgram.execute`, the interpreter: first runs, cuts, ``all_outputs``, the first
run of a range graph mode keeps eager, ``SONNX_DEBUG``) and the generated plan
(:mod:`sonnx.runtime.plan`, the hot path: whole runs, and graph mode's eager ranges after that).
Neither decides on its own whether a step is fused away, is a shape value, or is dead, and
neither keeps its own liveness: :func:`build_schedule` decides once per kind of run.

A kind of run is the steps ``[start, stop)``, the names it keeps (``None``: every value stays),
whether it wants every value computed (``all_outputs``: no group is fused) and whether dead
steps are pruned. A fused group is one scheduled step (its final step's index,
:attr:`Action.FUSED`), active only when the run covers the whole group and keeps none of its
intermediate values. *Pruning* (the plan's runs) leaves out the
pure steps (shape values, folded results) whose outputs no later step reads and the run does
not keep; the step loop does not prune, since its first run of an input signature records every
shape value for later runs of it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sonnx.runtime.fusions import Fusion
    from sonnx.runtime.program import GraphProgram

__all__ = ["Action", "Schedule", "Scheduled", "build_schedule"]


class Action(enum.Enum):
    #: the step's operator or converter (a folded step: its kept result while its inputs last)
    RUN = "run"
    #: the fused group ending at this step, as one call
    FUSED = "fused"
    #: a shape value: taken from the input signature's known values when an earlier run found
    #: them, else computed and remembered
    SHAPE_VALUE = "shape value"


@dataclass(frozen=True)
class Scheduled:
    """One step of a schedule."""

    index: int
    action: Action
    #: The group, for :attr:`Action.FUSED`.
    fusion: Fusion | None
    #: The names it reads: the group's inputs, or the step's (its subgraphs' outer reads too).
    reads: tuple[str, ...]
    #: The names no later scheduled step reads and the run does not keep: dropped after it
    #: (those it reads for the last time, and its own outputs that nothing reads).
    frees: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Scheduled, ...]


def build_schedule(
    program: GraphProgram,
    start: int,
    stop: int,
    keep: frozenset[str] | None,
    every_value: bool,
    prune: bool,
) -> Schedule:
    """The schedule of a run of ``program``'s steps ``[start, stop)`` keeping ``keep``."""
    fused = {} if every_value else _active_fusions(program, start, stop, keep)
    internal = {i for fusion in fused.values() for i in fusion.internal}
    shape_steps = program.shape_value_steps
    entries: list[tuple[int, Action, Fusion | None, tuple[str, ...]]] = []
    for index in range(start, stop):
        if index in internal:
            continue
        if index in fused:
            fusion = fused[index]
            entries.append((index, Action.FUSED, fusion, tuple(fusion.inputs)))
        elif index in shape_steps:
            entries.append((index, Action.SHAPE_VALUE, None, tuple(program.steps[index].reads())))
        else:
            entries.append((index, Action.RUN, None, tuple(program.steps[index].reads())))
    if prune:
        entries = _live(program, entries, keep or frozenset())
    frees = _frees(program, entries, keep)
    return Schedule(
        tuple(
            Scheduled(index, action, fusion, reads, frees[position])
            for position, (index, action, fusion, reads) in enumerate(entries)
        )
    )


def _active_fusions(
    program: GraphProgram, start: int, stop: int, keep: frozenset[str] | None
) -> dict[int, Fusion]:
    """The groups a run goes through whole, by final step: those it covers entirely and none
    of whose intermediate values it keeps."""
    return {
        final: fusion
        for final, fusion in program.fusions.items()
        if start <= min((*fusion.internal, final))
        and max((*fusion.internal, final)) < stop
        and not (keep and fusion.intermediates & keep)
    }


def _live(
    program: GraphProgram,
    entries: list[tuple[int, Action, Fusion | None, tuple[str, ...]]],
    keep: frozenset[str],
) -> list[tuple[int, Action, Fusion | None, tuple[str, ...]]]:
    """The entries without the pure ones (shape values, folded results) whose outputs no later
    entry reads and the run does not keep (an int8 table's Cast read only by a shape value). A
    shape value reads nothing in a pruned run: it comes from the signature's known values."""
    needed = set(keep)
    live: list[tuple[int, Action, Fusion | None, tuple[str, ...]]] = []
    for index, action, fusion, reads in reversed(entries):
        step = program.steps[index]
        pure = action is Action.SHAPE_VALUE or (action is Action.RUN and step.foldable)
        if pure and not any(o in needed for o in step.outputs if o):
            continue
        if action is Action.SHAPE_VALUE:
            reads = ()
        needed.update(reads)
        live.append((index, action, fusion, reads))
    live.reverse()
    return live


def _frees(
    program: GraphProgram,
    entries: Sequence[tuple[int, Action, Fusion | None, tuple[str, ...]]],
    keep: frozenset[str] | None,
) -> list[tuple[str, ...]]:
    """For each entry, the names to drop after it (nothing when ``keep`` is None)."""
    if keep is None:
        return [() for _ in entries]
    last: dict[str, int] = {}
    for position, (index, _, fusion, reads) in enumerate(entries):
        made = program.steps[index].outputs
        for name in made if fusion is None else fusion.made(made):
            if name:
                last.setdefault(name, position)  # freed where made unless read later
        for name in reads:
            last[name] = position
    frees: list[list[str]] = [[] for _ in entries]
    for name, position in last.items():
        if name not in keep:
            frees[position].append(name)
    return [tuple(names) for names in frees]


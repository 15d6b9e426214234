"""Who computes each value of a program and who reads it: the one index every pass consults.

The passes that prepare a :class:`~sonnx.runtime.program.GraphProgram` (the weights of
Constant nodes, running statistics, parameterising inputs, shape values, fusions, QAT's
fake-quantized pairs) and the walks over it (the If switches graph mode bakes, a subgraph's
reads from its enclosing scope, the subgraphs an export refreshes) all ask the same two
questions: which step computes a value, and which steps read it. Each used to index the
steps itself, and they disagreed: the schedule counted what an ``If``, ``Loop`` or ``Scan``
body reads from the enclosing graph (``Step.reads``), the fusions and the parameterising pass
counted only the steps' inputs, so a group whose intermediate a branch read was fused away and
the branch found nothing. A :class:`ProgramIndex` is built from the steps once, with those
reads and the graph's outputs, and the program builds it again only after a pass rewrote the
steps' wiring (:meth:`~sonnx.runtime.program.GraphProgram.wiring_changed`).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from sonnx.runtime.steps import Step

__all__ = ["ProgramIndex", "Use"]


class Use(NamedTuple):
    """One read of a value: the step reading it and the input position it is read at (None
    where the step's subgraph body reads it from the enclosing scope)."""

    step: int
    position: int | None


class ProgramIndex:
    """The producer and the readers of every value of a program's steps.

    :param steps: the program's steps, in execution order.
    :param outputs: the graph's output names (a value the run returns is read from outside).
    """

    def __init__(self, steps: Sequence[Step], outputs: Iterable[str]) -> None:
        producer: dict[str, int] = {}
        uses: dict[str, list[Use]] = {}
        for index, step in enumerate(steps):
            for position, name in enumerate(step.inputs):
                if name:
                    uses.setdefault(name, []).append(Use(index, position))
            for name in step.outer_reads():
                uses.setdefault(name, []).append(Use(index, None))
            for name in step.outputs:
                if name:
                    producer[name] = index  # a name made twice: the later step's, as a run has it
        #: The step computing each value, by name.
        self.producer: Mapping[str, int] = producer
        #: Every read of each value, in step order (a step's inputs, then its subgraphs' reads),
        #: by name; the names come in the order first read.
        self.uses: Mapping[str, tuple[Use, ...]] = {n: tuple(u) for n, u in uses.items()}
        #: The graph's outputs.
        self.outputs: frozenset[str] = frozenset(outputs)
        self._read_from: dict[int, frozenset[str]] = {}

    def readers(self, name: str) -> tuple[int, ...]:
        """The steps reading ``name``, once per read: a step reading it at two inputs (``Mul(x,
        x)``) or from two subgraphs (an ``If``'s two branches) is listed twice.

        :param name: a value's name.
        :returns: the steps' indices, in step order; empty where no step reads it.
        """
        return tuple(use.step for use in self.uses.get(name, ()))

    def only_reader(self, name: str) -> int | None:
        """The one step reading ``name``, if it reads it once and nothing else does: no other
        step, no subgraph body, not the graph's outputs. A group fuses its intermediate values
        away only where this holds.

        :param name: a value's name.
        :returns: that step's index, or None.
        """
        found = self.uses.get(name, ())
        if len(found) != 1 or name in self.outputs:
            return None
        return found[0].step

    def read_only_at(self, name: str, positions: Callable[[int], Container[int]]) -> bool:
        """Whether every read of ``name`` is at an input position that ``positions`` (of the
        reading step's index) allows; a subgraph's read never is.

        :param name: a value's name.
        :param positions: the input positions allowed for the step of each index.
        :returns: whether it is read, and read only there.
        """
        found = self.uses.get(name, ())
        return bool(found) and all(
            use.position is not None and use.position in positions(use.step) for use in found
        )

    def read_from(self, start: int) -> frozenset[str]:
        """The names that steps ``start`` onward read, and the graph's outputs: what a run of
        the steps before ``start`` must leave for the rest (graph mode's eager ranges).

        :param start: the first step of the rest.
        :returns: the names (kept per ``start``).
        """
        found = self._read_from.get(start)
        if found is None:
            later = (n for n, uses in self.uses.items() if uses[-1].step >= start)
            found = self._read_from[start] = self.outputs.union(later)
        return found

"""What an operator with a graph attribute (If, Loop, Scan, SequenceMap) may ask of it.

A graph attribute is a program the operator itself cannot run: compiling and executing
programs is the runtime's business (:mod:`sonnx.runtime.subgraphs` implements this protocol),
and the operators sit below it. So the operators of :mod:`sonnx.operators.control` receive each
graph attribute already bound to the enclosing scope's values for one run of their node, and
see only this protocol: how many inputs and outputs it has, and a way to run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sonnx.engine.values import GraphValue

__all__ = ["BoundSubgraph"]


@runtime_checkable
class BoundSubgraph(Protocol):
    """A subgraph bound to its enclosing scope for one run of its node.

    Each :meth:`run` runs the whole subgraph once; the operators it runs are recorded as
    usual, so gradients reach the taken branch and every iteration. An implementation may
    refuse a run past its limits (an endless Loop, a body too long to unroll into a compiled
    graph) with a :class:`~sonnx.errors.SonnxError`.
    """

    @property
    def num_inputs(self) -> int:
        """How many formal inputs the subgraph declares.

        :returns: the count of the subgraph's graph inputs.
        """
        ...

    @property
    def num_outputs(self) -> int:
        """How many outputs the subgraph declares.

        :returns: the count of the subgraph's graph outputs.
        """
        ...

    def run(self, inputs: list[GraphValue | None]) -> list[GraphValue]:
        """Run the subgraph once on ``inputs`` (the enclosing scope supplies the rest).

        :param inputs: values for the subgraph's formal inputs, in order (None: left unset).
        :returns: the subgraph's outputs, in order.
        """
        ...

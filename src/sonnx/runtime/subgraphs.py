"""Subgraphs (the branches of If, the bodies of Loop and Scan) run by the runtime.

A graph attribute is compiled into a :class:`Subgraph` with the enclosing graph (see
:mod:`sonnx.runtime.program`); each run of its node binds it to the enclosing scope's values
as a :class:`BoundProgram`, the runtime's implementation of the protocol the operators of
:mod:`sonnx.operators.control` call (:class:`sonnx.engine.subgraphs.BoundSubgraph`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sonnx.engine.tracing import NotTraceableError, value_checks
from sonnx.errors import BadInputError, BadModelError, ResourceLimitError
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.engine.values import GraphValue
    from sonnx.runtime.program import GraphProgram

__all__ = [
    "DEFAULT_LOOP_LIMIT",
    "LOOP_LIMIT_VAR",
    "UNROLL_LIMIT",
    "BoundProgram",
    "Subgraph",
    "loop_limit",
]


class Subgraph:
    """A compiled graph attribute (a branch or loop body) that reads its enclosing scope."""

    def __init__(self, program: GraphProgram, name: str) -> None:
        self.program = program
        self.name = name
        #: What a run keeps of the values it computes (the rest is freed after its last use).
        self.output_names = frozenset(program.output_names)

    def bind(self, scope: dict[str, Tensor]) -> BoundProgram:
        """The subgraph for one run of its node.

        :param scope: the enclosing scope's values, which the subgraph reads by name.
        :returns: what the node's operator runs.
        """
        return BoundProgram(self, scope)


#: How many times one run of a node may run its subgraph (Loop iterations, Scan steps), from
#: ``SONNX_MAX_LOOP_ITERATIONS``: a Loop with no trip count whose condition never turns false
#: runs forever by the spec; past the limit it fails instead.
LOOP_LIMIT_VAR = "SONNX_MAX_LOOP_ITERATIONS"
DEFAULT_LOOP_LIMIT = 10_000_000


#: How many steps a traced Loop or Scan may unroll into a compiled graph (runs of its body
#: times the body's steps). A decoder's Loop of 500 trips unrolled into one graph kept inductor
#: compiling for minutes; past the limit the node runs eagerly and the rest stays compiled.
UNROLL_LIMIT = 512


def loop_limit() -> int:
    """How many runs of its subgraph one run of a node may make (``SONNX_MAX_LOOP_ITERATIONS``).

    :returns: the limit, at least 1.
    """
    given = os.environ.get(LOOP_LIMIT_VAR, "").strip()
    if not given:
        return DEFAULT_LOOP_LIMIT
    try:
        return max(int(given), 1)
    except ValueError:
        raise BadInputError(
            f"environment variable {LOOP_LIMIT_VAR} must be an integer, received {given!r}"
        ) from None


class BoundProgram:
    """A subgraph with the enclosing scope's values: call :meth:`run` with its inputs (a
    :class:`~sonnx.engine.subgraphs.BoundSubgraph`)."""

    def __init__(self, subgraph: Subgraph, scope: dict[str, Tensor]) -> None:
        self.subgraph = subgraph
        self.scope = scope
        self.runs = 0
        self.limit = loop_limit()

    @property
    def num_inputs(self) -> int:
        return len(self.subgraph.program.input_names)

    @property
    def num_outputs(self) -> int:
        return len(self.subgraph.program.output_names)

    def run(self, inputs: list[GraphValue | None]) -> list[GraphValue]:
        """Run the subgraph's program once on ``inputs`` and the enclosing scope.

        :param inputs: values for the subgraph's formal inputs (None: left unset).
        :returns: the subgraph's outputs, in order.
        """
        self.runs += 1
        if self.runs > self.limit:
            raise ResourceLimitError(
                f"subgraph {self.subgraph.name!r} would run more than {self.limit} times in one "
                f"run of its node (set {LOOP_LIMIT_VAR} to raise the limit); received "
                f"{self.runs} runs"
            )
        program = self.subgraph.program
        if not value_checks() and self.runs * len(program.steps) > UNROLL_LIMIT:
            raise NotTraceableError(
                f"subgraph {self.subgraph.name!r} would be unrolled into more than "
                f"{UNROLL_LIMIT} steps of a compiled graph ({self.runs} runs of "
                f"{len(program.steps)} steps)"
            )
        values = dict(self.scope)
        values.update(program.constants)
        for name, t in zip(program.input_names, inputs, strict=False):
            if t is not None:
                values[name] = t
        program.runner.execute(values, keep=self.subgraph.output_names)
        try:
            return [values[n] for n in program.output_names]
        except KeyError as e:
            raise BadModelError(
                f"subgraph {self.subgraph.name!r} does not compute its output {e.args[0]!r}"
            ) from None

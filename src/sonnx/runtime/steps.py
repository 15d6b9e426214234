"""The steps of a program: one node ready to run, or a fused group standing in for several.

A :class:`~sonnx.runtime.program.GraphProgram` is its steps in execution order. Every node is
a :class:`Step` (one per node, so cuts, export and ``SONNX_DEBUG`` see the graph's nodes), and
the passes (:mod:`sonnx.runtime.passes`) rewrite the program by giving steps a *kind*
(:class:`StepKind`): a folded step keeps its result while the constants it reads are
unchanged, a shape-value step is taken from the input signature's known values, and a fused
group becomes one :class:`FusedStep` in the program's order in place of its steps, which it
carries as its fallback. The executors read the kind from the step; nothing else says what a
step is.

The wrapping of results is here too, once for both executors: what an operator returns
becomes a :class:`~sonnx.tensor.Tensor` (:func:`plain`), and a step's result is split into
one value per output (:func:`output_values`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sonnx.engine.host_values import call_placed
from sonnx.engine.operator import Operator
from sonnx.engine.tracing import value_checks
from sonnx.engine.values import is_single_value
from sonnx.onnx.registry import NodeInfo
from sonnx.runtime.step_errors import node_error
from sonnx.runtime.subgraphs import Subgraph
from sonnx.strings import StringArray
from sonnx.symbolic_sizes import SymbolicInts
from sonnx.tensor import Tensor, computed_tensor, string_tensor, symbolic_tensor

if TYPE_CHECKING:
    from sonnx.runtime.fusions import Fusion

__all__ = ["FusedStep", "Step", "StepKind", "named", "output_values", "plain", "plain_all"]


class StepKind(enum.Enum):
    """What a step of the program is, as the passes decided it."""

    #: a node run by its operator or converter
    RUN = "run"
    #: a node reading only constants and folded values: its kept result while they last
    FOLDED = "folded"
    #: a node whose values the input signature fixes: taken from the signature's known values
    #: once an earlier run found them, else computed and remembered
    SHAPE_VALUE = "shape value"
    #: a group of nodes run as one call (:class:`FusedStep`)
    FUSED = "fused"


@dataclass
class Step:
    """One node ready to run: converter, decoded attributes and wiring.

    ``op`` is the node's operator, built once, for nodes whose converter is an Operator class:
    a run calls its ``forward`` on the inputs' torch tensors directly. The run as a whole is
    recorded as one :class:`~sonnx.runtime.imported_graph.ImportedGraph` (export writes the
    original graph; ``backward`` needs only torch's graph and the weights), so nothing per
    node is recorded.
    """

    info: NodeInfo
    attrs: dict[str, Any]
    inputs: list[str]
    outputs: list[str]
    convert: Callable[..., Any]
    has_subgraphs: bool = False
    op: Operator | None = None
    #: What the passes made of it: run, folded, or a shape value.
    kind: StepKind = StepKind.RUN
    #: Depends on a graph input the run may feed freely: a failure here is a BadInputError
    #: (see :mod:`sonnx.runtime.step_errors`).
    blames_input: bool = False

    @property
    def foldable(self) -> bool:
        """Whether it reads only constants and folded values (a Cast or DequantizeLinear of
        int8 weights, a Transpose of a weight): its result is kept between runs until an input
        changes."""
        return self.kind is StepKind.FOLDED

    def reads(self) -> list[str]:
        """The names the step reads: its inputs, then :meth:`outer_reads`."""
        return [n for n in self.inputs if n] + self.outer_reads()

    def outer_reads(self) -> list[str]:
        """What the step's subgraph bodies read from the enclosing scope, branch by branch."""
        if not self.has_subgraphs:
            return []
        subgraphs = (v for v in self.attrs.values() if isinstance(v, Subgraph))
        return [n for subgraph in subgraphs for n in subgraph.program.outer_names()]

    def failure(
        self, args: list[Any], error: Exception, names: Sequence[str] | None = None
    ) -> Exception:
        """The sonnx error to raise for ``error`` raised while this step ran on ``args``
        (named ``names``, by default the step's inputs)."""
        if not value_checks():
            return error  # a graph tracer's own failure: graph mode runs the step eagerly
        return node_error(
            self.info,
            self.inputs if names is None else names,
            args,
            error,
            self.blames_input,
            self.has_subgraphs,
        )

    def run(self, args: list[Any], attrs: dict[str, Any]) -> Any:
        """The node's output value(s) for input values ``args``."""
        op = self.op
        if op is None:
            return self.convert(self.info, args, attrs)
        raw: list[Any] = []
        for a in args:  # a loop, not comprehensions: this runs once per node per run
            if a is None:
                raw.append(None)
            elif type(a) is Tensor:
                raw.append(a.data)
            else:  # a sequence, an optional, a string tensor: the converter's own handling
                return self.convert(self.info, args, attrs)
        result = call_placed(op.op_type, op.forward, raw)
        if isinstance(result, (torch.Tensor, StringArray, SymbolicInts)):
            return plain(result)
        return tuple(None if r is None else plain(r) for r in result)


@dataclass(frozen=True)
class FusedStep:
    """A group of steps run as one call, in the program's order in place of its steps.

    It runs at ``index`` (its ``fusion``'s final step). Where its call declines the inputs
    (training, tracing, another dtype or device, a shape it does not take), or where a run
    cannot take the group whole (a cut inside it, a request for an intermediate value, every
    value wanted), its ``fallback`` runs: the group's own steps, node by node.
    """

    fusion: Fusion
    #: The group's steps, by index, in step order.
    fallback: tuple[int, ...]

    kind = StepKind.FUSED

    @classmethod
    def of(cls, fusion: Fusion) -> FusedStep:
        """The fused step of ``fusion``.

        :param fusion: the group.
        :returns: its step.
        """
        return cls(fusion, tuple(sorted((*fusion.internal, fusion.final))))

    @property
    def index(self) -> int:
        """Where in the order it runs: its group's final step."""
        return self.fusion.final

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names its call reads."""
        return self.fusion.inputs

    def made(self, steps: Sequence[Step]) -> tuple[str, ...]:
        """The names it makes: its group's ``outputs``, else its final step's.

        :param steps: the program's steps.
        :returns: the names.
        """
        return self.fusion.made(steps[self.fusion.final].outputs)


def plain(data: torch.Tensor | StringArray | SymbolicInts) -> Tensor:
    """A value an operator computed inside an imported run as a Tensor: values only, no
    creator.

    :param data: what the operator returned.
    :returns: the tensor.
    """
    if type(data) is StringArray:  # Cast to strings, a string-valued op on numbers
        return string_tensor(data)
    if type(data) is SymbolicInts:  # Shape in a symbolic trace
        return symbolic_tensor(data)
    return computed_tensor(data)


def plain_all(made: Any) -> Tensor | tuple[Tensor, ...]:
    """A fused step's result as Tensors: one, or a tuple of them (a group naming several).

    :param made: its call's torch tensor or tensors, or its fallback's Tensors.
    :returns: the tensor or tensors.
    """
    if isinstance(made, (tuple, list)):
        return tuple(m if isinstance(m, Tensor) else plain(m) for m in made)
    return made if isinstance(made, Tensor) else plain(made)


def named(value: Any, name: str) -> Any:
    """``value`` as a run holds it under ``name``: a Tensor learns its name (what export and
    error messages call it); another value (a sequence, an optional) is as it is.

    :param value: a step's output value.
    :param name: its name in the graph.
    :returns: the value.
    """
    if isinstance(value, Tensor):
        value.name = name
    return value


def output_values(result: Any) -> Sequence[Any]:
    """A step's result as one value per output: a single value (a Tensor, a sequence, an
    optional) is the first output's, anything else lists the outputs.

    :param result: what the step returned.
    :returns: the values, in output order (fewer than the outputs where it left some out).
    """
    return (result,) if type(result) is Tensor or is_single_value(result) else result

"""Where an imported graph keeps its weights besides initializers: ``Constant`` nodes and the
subgraphs of ``If``, ``Loop`` and ``Scan``.

tf2onnx and paddle2onnx write many weights as ``Constant`` nodes, and voice-activity models keep
theirs inside ``If`` branches. Such weights train as initializers do: a ``Constant`` node's float
value is a trainable parameter when it holds more than one value (a one-element value is an
epsilon, an exponent, a coefficient) and some node reads it as an operand, not only as an input
that parameterises, shapes or sizes an operation; the passes that follow may still make it a
constant or a buffer, as they do initializers (see :mod:`sonnx.runtime.constants`). An export
writes each back where it came from: a ``Constant`` node holding the current value, a subgraph's
initializer in its subgraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

from sonnx import dtypes
from sonnx.onnx.registry import operator_class
from sonnx.proto.graph_builder import tensor_proto
from sonnx.runtime.subgraphs import Subgraph
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram
    from sonnx.runtime.program_index import ProgramIndex
    from sonnx.runtime.steps import Step

__all__ = ["graph_weights", "mark_constant_weights", "write_constant_value"]


def mark_constant_weights(
    steps: list[Step], constants: dict[str, Tensor], names: frozenset[str], index: ProgramIndex
) -> None:
    """Make the values of Constant nodes ``names`` that hold weights trainable parameters.

    :param steps: the program's steps, which decide how each value is used.
    :param constants: the program's constants by name, the Constant nodes' values among them.
    :param names: the names of the values that Constant nodes hold.
    :param index: the steps' readers of each value; what a subgraph body reads from this
        scope is an operand there (a branch's MatMul by the outer graph's weight).
    """

    def not_operands(step: int) -> frozenset[int]:
        op = operator_class(steps[step].info)
        return op.parameterising_inputs | op.shape_inputs | op.size_inputs

    for name in names:
        t = constants.get(name)
        if t is None or not dtypes.is_float(t.dtype) or t.data.numel() <= 1:
            continue
        if index.uses.get(name) and not index.read_only_at(name, not_operands):
            t.requires_grad = True
            t.stores_grad = True


def graph_weights(program: GraphProgram) -> dict[str, Tensor]:
    """Every trainable weight of ``program`` and of the subgraphs inside it, by name (ONNX
    forbids a subgraph to reuse a name of its enclosing graphs, so names are unique).

    :param program: a compiled graph.
    :returns: the tensors with ``stores_grad``, frozen ones included, by name.
    """
    found = {name: t for name, t in program.constants.items() if t.stores_grad}
    for step in program.steps:
        for value in step.attrs.values():
            if isinstance(value, Subgraph):
                found.update(graph_weights(value.program))
    return found


def write_constant_value(node: onnx.NodeProto, constants: dict[str, Tensor]) -> None:
    """Write the current value of a Constant node's weight into the node, in the attribute it
    came in (``value`` or ``value_floats``); a node holding no weight is left as it is.

    :param node: a node of the graph whose program holds ``constants``.
    :param constants: the program's constants by name.
    """
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or not node.output:
        return
    current = constants.get(node.output[0])
    if current is None or not current.stores_grad:
        return
    for attr in node.attribute:
        if attr.name == "value":
            attr.t.CopyFrom(tensor_proto(current.data, attr.t.name))
        elif attr.name == "value_floats":
            attr.floats[:] = current.data.detach().cpu().reshape(-1).tolist()

"""ONNX models that branch on a one-value integer input, as Silero-VAD branches on its sample
rate: graph mode bakes such an input into each graph (tests of graph mode, its store and its
array runs build them)."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import TensorProto, helper


def unary_branch(name: str, op: str, source: str) -> onnx.GraphProto:
    """An If branch applying ``op`` to the outer-scope tensor ``source``."""
    return helper.make_graph(
        [helper.make_node(op, [source], [name])],
        name,
        [],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)],
    )


def switch_model(
    name: str,
    then_branch: onnx.GraphProto,
    else_branch: onnx.GraphProto,
    x_width: int,
    before: Sequence[onnx.NodeProto] = (),
    initializers: Sequence[onnx.TensorProto] = (),
    y_shape: list[str | int] | None = None,
) -> onnx.ModelProto:
    """``y = If (mode == 1) then_branch else else_branch`` after the nodes ``before``: inputs
    ``x`` (float, ``[n, x_width]``) and ``mode`` (an int64 scalar), output ``y`` of
    ``y_shape`` (None: not declared); opset 17."""
    nodes = [
        *before,
        helper.make_node("Constant", [], ["one"], value_int=1),
        helper.make_node("Equal", ["mode", "one"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", x_width]),
            helper.make_tensor_value_info("mode", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

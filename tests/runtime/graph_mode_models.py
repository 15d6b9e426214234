"""Small models the graph-mode tests share: a chain of elementwise steps with a Tanh in the
middle (where a test double of the compiler plants its faults), and two compiled segments
around an eager NonZero."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def compute_around_a_nonzero() -> onnx.ModelProto:
    """Relu -> Mul (compiled) -> NonZero (eager) -> Cast -> ReduceSum -> Mul by the first
    segment's output (compiled again)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "r"], ["sq"], name="square"),
        helper.make_node("NonZero", ["sq"], ["where"], name="nonzero"),
        helper.make_node("Cast", ["where"], ["wf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["wf"], ["total"], name="total", keepdims=0),
        helper.make_node("Mul", ["sq", "total"], ["y"], name="scaled"),
    ]
    graph = helper.make_graph(
        nodes,
        "around",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def chain_with_a_tanh() -> onnx.ModelProto:
    """Relu -> Mul by 2 -> Add x -> Tanh -> Mul -> Sigmoid: six elementwise steps."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Mul", ["a", "two"], ["b"], name="double"),
        helper.make_node("Add", ["b", "x"], ["c"], name="skip"),
        helper.make_node("Tanh", ["c"], ["d"], name="tanh"),
        helper.make_node("Mul", ["d", "c"], ["e"], name="gate"),
        helper.make_node("Sigmoid", ["e"], ["y"], name="squash"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [two],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

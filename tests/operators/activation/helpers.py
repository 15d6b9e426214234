"""What the activation tests share: one ONNX node run by onnx.reference, and an exported
operator run by onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
from onnx import helper
from onnx.reference import ReferenceEvaluator

from sonnx.engine.operator import Operator
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor


def tensor(a: np.ndarray) -> Tensor:
    """A constant (no gradient) sonnx tensor of ``a``."""
    return Tensor(data=np.asarray(a), requires_grad=False)


def reference(op_type: str, inputs: list[np.ndarray], opset: int, **attrs) -> np.ndarray:
    """Run one ONNX node with onnx.reference at ``opset``."""
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, elem, None) for n in names],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))[0]


def run_exported(op: Operator, inputs: list[np.ndarray], opset: int) -> np.ndarray:
    """Export ``op`` (already called) at ``opset`` into a model and run it with onnxruntime.

    onnxruntime, unlike onnx.reference, implements the pre-13 softmax family's 2-D coercion.
    """
    g = GraphBuilder(opset)
    names = [f"x{i}" for i in range(len(inputs))]
    op.export(g, names, ["y"])
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        g.nodes,
        "g",
        [
            helper.make_tensor_value_info(n, elem, a.shape)
            for n, a in zip(names, inputs, strict=True)
        ],
        [helper.make_tensor_value_info("y", elem, inputs[0].shape)],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(zip(names, inputs, strict=True)))[0]

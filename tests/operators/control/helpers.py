"""What the control-flow tests share: a subgraph written in Python (the protocol the operators
call, as the runtime implements it for an imported graph) and one ONNX model run by
onnxruntime, the reference each direct call is compared with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

OPSET = 17


class PythonSubgraph:
    """A :class:`~sonnx.engine.subgraphs.BoundSubgraph` whose run calls ``fn`` on the inputs;
    ``fn`` computes with sonnx operators, so what it runs is recorded."""

    def __init__(self, fn: Callable[..., list[Any]], num_inputs: int, num_outputs: int) -> None:
        self.fn = fn
        self.runs = 0
        self._inputs = num_inputs
        self._outputs = num_outputs

    @property
    def num_inputs(self) -> int:
        return self._inputs

    @property
    def num_outputs(self) -> int:
        return self._outputs

    def run(self, inputs: list[Any]) -> list[Any]:
        self.runs += 1
        return list(self.fn(*inputs))


#: (name, element type) or (name, element type, shape) of a graph's inputs or outputs.
Typed = list[tuple[Any, ...]]
FLOAT, INT64, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL


def graph(name: str, nodes: list[onnx.NodeProto], inputs: Typed, outputs: Typed) -> onnx.GraphProto:
    """A graph of tensors of the given element types and shapes (None where left open)."""
    return helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info(*spec, *([None] if len(spec) == 2 else []))
            for spec in inputs
        ],
        [
            helper.make_tensor_value_info(*spec, *([None] if len(spec) == 2 else []))
            for spec in outputs
        ],
    )


def ort_run(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: Typed) -> list:
    """onnxruntime's outputs of a graph of ``nodes`` whose inputs take ``feeds``."""
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
    model = helper.make_model(
        graph("g", nodes, inputs, outputs), opset_imports=[helper.make_opsetid("", OPSET)]
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)

"""Single com.microsoft node models run by onnxruntime and by sonnx, for the attention tests."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

import sonnx
from sonnx.tensor import to_numpy

RNG = np.random.default_rng(0)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def contrib_model(op_type: str, inputs: list, n_out: int, **attrs) -> onnx.ModelProto:
    """One com.microsoft node (``None`` inputs absent), float outputs."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for n, x in zip(names, inputs, strict=True)
            if n
        ],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outs],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def run_both(model: onnx.ModelProto, inputs: list) -> tuple[list, list]:
    """(onnxruntime's outputs, sonnx's outputs) of ``model`` on the given inputs."""
    given = [x for x in inputs if x is not None]
    feed = {i.name: x for i, x in zip(model.graph.input, given, strict=True)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours = sonnx.prepare(model).run(given)
    return session.run(None, feed), [to_numpy(t) for t in ours]


def close(actual: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)

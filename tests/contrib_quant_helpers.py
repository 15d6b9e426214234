"""Single-node com.microsoft models run by onnxruntime (CPU) and by sonnx, for the tests of the
products and quantization operators."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import sonnx
from sonnx.tensor import Tensor, to_numpy

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def node_model(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    graph_inputs: Collection[str],
    outputs: tuple[int, ...] = (onnx.TensorProto.FLOAT,),
    domain: str = "com.microsoft",
    shapes: tuple[tuple[int, ...] | None, ...] | None = None,
    **attrs,
) -> onnx.ModelProto:
    """One ``op_type`` node reading ``inputs`` in order: those named in ``graph_inputs`` are
    graph inputs, the others initializers (None: an absent optional input). ``outputs``: the
    outputs' types, ``shapes`` their shapes (None: not declared)."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    while names and not names[-1]:
        names.pop()
    outs = [f"y{i}" for i in range(len(outputs))]
    node = helper.make_node(op_type, names, outs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
            if n in graph_inputs
        ],
        [
            helper.make_tensor_value_info(n, t, shape)
            for n, t, shape in zip(outs, outputs, shapes or [None] * len(outs), strict=True)
        ],
        [
            numpy_helper.from_array(np.asarray(a), n)
            for n, a in inputs.items()
            if a is not None and n not in graph_inputs
        ],
    )
    return helper.make_model(graph, opset_imports=OPSETS, ir_version=10)


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's CPU kernels, without graph rewrites (the nodes run as written)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def sonnx_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    tensors = {n: Tensor(data=a, requires_grad=False) for n, a in feeds.items()}
    outs = sonnx.prepare(model).run(tensors)
    return [to_numpy(o) for o in outs]


def both(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(onnxruntime's outputs, sonnx's outputs)."""
    return ort_run(model, feeds), sonnx_run(model, feeds)

"""sonnx as an ``onnx.backend.base.Backend``: prepare/run_model/run_node/supports_device."""

from __future__ import annotations

import numpy as np
import torch
from onnx import TensorProto, helper

from sonnx.runtime.backend import SonnxBackend


def _add_model():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_prepare_and_run_model_return_numpy_outputs() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 3), np.float32)
    (out,) = SonnxBackend.prepare(_add_model(), "CPU").run([a, b])
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(SonnxBackend.run_model(_add_model(), [a, b])[0], a + b)


def test_run_node_wraps_one_node() -> None:
    x = np.array([[-1.0, 2.0]], np.float32)
    (y,) = SonnxBackend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_device_support_and_compatibility() -> None:
    assert SonnxBackend.supports_device("CPU")
    assert SonnxBackend.supports_device("CUDA") == torch.cuda.is_available()
    assert SonnxBackend.is_compatible(_add_model())
    unsupported = helper.make_model(
        helper.make_graph(
            [helper.make_node("NoSuchOp", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
    )
    assert not SonnxBackend.is_compatible(unsupported)

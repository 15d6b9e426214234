"""Which initializers are trainable weights: float ones, except those read only where their
operator class declares the input parameterising (``parameterising_inputs``).

The stand-in is a YOLOv8 export's neck in small: its nearest-neighbour ``Resize`` takes its
``scales`` from a float initializer. Counted as a weight, such scales were a tensor graph mode
could not read on the host, and the graph split at every Resize.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.tensor import to_numpy


def _yolo_neck(rng: np.random.Generator) -> onnx.ModelProto:
    """x -> Conv (stride 2) -> Sigmoid*Mul (SiLU) -> Resize x2 by a float scales initializer,
    as YOLOv8's exporter writes it -> Concat with x -> Conv."""

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)

    initializers = [
        weight("w1", 8, 3, 3, 3),
        weight("w2", 4, 11, 1, 1),  # 8 resized channels and x's 3
        weight("b2", 4),
        numpy_helper.from_array(np.array([1.0, 1.0, 2.0, 2.0], np.float32), "scales"),
    ]
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    nearest = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", **conv),
        helper.make_node("Sigmoid", ["c1"], ["g1"], name="gate1"),
        helper.make_node("Mul", ["c1", "g1"], ["s1"], name="silu1"),
        helper.make_node("Resize", ["s1", "", "scales"], ["up"], name="resize", **nearest),
        helper.make_node("Concat", ["up", "x"], ["joined"], name="concat", axis=1),
        helper.make_node("Conv", ["joined", "w2", "b2"], ["y"], name="head", kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "yolo_neck",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_resize_scales_are_constants_not_trainable_weights() -> None:
    rep = sonnx.prepare(_yolo_neck(np.random.default_rng(0)))
    assert set(rep.tensor_map) == {"w1", "w2", "b2"}
    assert set(rep.params) == {"w1", "w2", "b2"}


def test_a_yolo_neck_with_float_resize_scales_compiles_whole_and_equals_eager() -> None:
    model = _yolo_neck(np.random.default_rng(0))
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rep.graph_runner.dynamic = False  # one input shape: a plain compile is the quicker one
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    (got,), (expected,) = rep.run([x]), eager.run([x])
    np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5, atol=1e-5)
    runner = rep.graph_runner
    assert runner.compile_count == 1
    assert runner.eager_steps == {}
    assert runner.fallback is None
    assert [type(part).__name__ for part in runner.segments] == ["Segment"]

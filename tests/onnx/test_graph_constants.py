"""Which initializers are trainable weights: float ones, except those read only where their
operator class declares the input parameterising (``parameterising_inputs``).

The stand-in is a YOLOv8 export's neck in small: its nearest-neighbour ``Resize`` nodes take
their ``scales`` from float initializers. Counted as weights, those scales were tensors graph
mode could not read on the host, and the graph split at every Resize.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.tensor import to_numpy


def _yolo_neck(rng: np.random.Generator) -> onnx.ModelProto:
    """x -> Conv (stride 2) -> Sigmoid*Mul (SiLU) -> Conv (stride 2) -> Resize x2 -> Concat
    with the first level -> Resize x2 -> Concat with x's own Conv -> Conv: two Resizes by float
    scales initializers, as YOLOv8's exporter writes them."""

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)

    scales = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    initializers = [
        weight("w0", 4, 3, 1, 1),
        weight("w1", 8, 3, 3, 3),
        weight("w2", 8, 8, 3, 3),
        weight("w3", 4, 23, 1, 1),  # 8 + 8 resized channels, conv0's 4 and x's 3
        weight("b3", 4),
        numpy_helper.from_array(scales, "scales_a"),
        numpy_helper.from_array(scales.copy(), "scales_b"),
    ]
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    nearest = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", kernel_shape=[1, 1]),
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", **conv),
        helper.make_node("Sigmoid", ["c1"], ["g1"], name="gate1"),
        helper.make_node("Mul", ["c1", "g1"], ["s1"], name="silu1"),
        helper.make_node("Conv", ["s1", "w2"], ["c2"], name="conv2", **conv),
        helper.make_node("Resize", ["c2", "", "scales_a"], ["u2"], name="resize_a", **nearest),
        helper.make_node("Concat", ["u2", "s1"], ["j1"], name="concat_a", axis=1),
        helper.make_node("Resize", ["j1", "", "scales_b"], ["u1"], name="resize_b", **nearest),
        helper.make_node("Concat", ["u1", "c0", "x"], ["j0"], name="concat_b", axis=1),
        helper.make_node("Conv", ["j0", "w3", "b3"], ["y"], name="head", kernel_shape=[1, 1]),
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
    assert set(rep.tensor_map) == {"w0", "w1", "w2", "w3", "b3"}
    assert set(rep.params) == {"w0", "w1", "w2", "w3", "b3"}


def test_a_yolo_neck_with_float_resize_scales_compiles_whole_and_equals_eager() -> None:
    model = _yolo_neck(np.random.default_rng(0))
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(1)
    for _ in range(2):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        (got,), (expected,) = rep.run([x]), eager.run([x])
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5, atol=1e-5)
    runner = rep.graph_runner
    assert runner.compile_count == 1
    assert runner.eager_steps == {}
    assert runner.fallback is None
    assert [type(part).__name__ for part in runner.segments] == ["Segment"]

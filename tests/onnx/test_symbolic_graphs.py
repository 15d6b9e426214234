"""One compiled graph serves a batch of one and larger batches alike.

A size of 1 is where torch and inductor ask layout questions whose answers differ from the
other sizes: can a transposed tensor be viewed with another shape (yes, with a batch of one),
can oneDNN's channels-last output be reshaped as a view, which of two tying strides is the
outer one. Each answer was a guard holding the graph to batch 1 or to the rest; the model here
meets all three, and must compile once for batches 1, 2 and 3 and compute what eager does.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.tensor import to_numpy

HIDDEN, CHANNELS = 16, 8


def _model() -> onnx.ModelProto:
    """Conv -> Reshape to (batch, channels, pixels) -> pixels as a sequence into an LSTM with
    state inputs of shape (1, batch, hidden) -> a transposed output times a weight."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "conv_w"], ["features"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["features", "flat"], ["flat_features"]),
        helper.make_node("Transpose", ["flat_features"], ["sequence"], perm=[2, 0, 1]),
        helper.make_node(
            "LSTM",
            ["sequence", "lstm_w", "lstm_r", "", "", "h0", "c0"],
            ["states", "h_last"],
            hidden_size=HIDDEN,
        ),
        helper.make_node("Squeeze", ["states", "one"], ["steps"]),
        helper.make_node("Transpose", ["steps"], ["by_batch"], perm=[1, 0, 2]),
        helper.make_node("MatMul", ["by_batch", "head_w"], ["y"]),
    ]
    state = [1, "batch", HIDDEN]
    graph = helper.make_graph(
        nodes,
        "layouts",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 6, 6]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, state),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("h_last", TensorProto.FLOAT, None),
        ],
        [
            weight("conv_w", CHANNELS, 3, 3, 3),
            numpy_helper.from_array(np.array([0, CHANNELS, -1], np.int64), "flat"),
            weight("lstm_w", 1, 4 * HIDDEN, CHANNELS),
            weight("lstm_r", 1, 4 * HIDDEN, HIDDEN),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
            weight("head_w", HIDDEN, 4),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_one_graph_serves_batch_one_and_larger_batches() -> None:
    model = _model()
    graph_rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(1)
    for batch in (1, 2, 3):
        feeds = {
            "x": rng.standard_normal((batch, 3, 6, 6)).astype(np.float32),
            "h0": rng.standard_normal((1, batch, HIDDEN)).astype(np.float32),
            "c0": rng.standard_normal((1, batch, HIDDEN)).astype(np.float32),
        }
        got, expected = graph_rep.run(feeds), eager.run(feeds)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(to_numpy(g), to_numpy(e), rtol=1e-5, atol=1e-5)
    runner = graph_rep.graph_runner
    assert runner.fallback is None
    assert runner.compile_count == 1

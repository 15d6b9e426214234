"""One compiled graph serves a batch of one and larger batches alike.

A size of 1 is where torch and inductor ask layout questions whose answers differ from the
other sizes: can a transposed tensor be viewed with another shape (yes, with a batch of one),
can oneDNN's channels-last output be reshaped as a view, which of two tying strides is the
outer one. Each answer was a guard holding the graph to batch 1 or to the rest; the model here
meets all three, and must compile once for batches 1, 2 and 3 and compute what eager does.
So must a model whose LSTM reads a transposed computed value: contiguous at a batch of one
only, which inductor handed oneDNN's LSTM layer in the strides of the buffer before the
transpose (wrong results at batch 1, and a second graph for the other batches).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.operators.rnn.recurrent import REDUCTION_STEP_MACS
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


def _weight(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _transposed_lstm_input() -> onnx.ModelProto:
    """(batch, frames, 8) times a weight, transposed to (batch, channels, frames) as a conv
    stack's output is, through Relu, then frames as the sequence of an LSTM."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("MatMul", ["x", "proj_w"], ["projected"]),
        helper.make_node("Transpose", ["projected"], ["channels"], perm=[0, 2, 1]),
        helper.make_node("Relu", ["channels"], ["features"]),
        helper.make_node("Transpose", ["features"], ["sequence"], perm=[2, 0, 1]),
        helper.make_node(
            "LSTM",
            ["sequence", "lstm_w", "lstm_r", "", "", "h0", "c0"],
            ["states", "h_last", "c_last"],
            hidden_size=HIDDEN,
        ),
    ]
    state = [1, "batch", HIDDEN]
    graph = helper.make_graph(
        nodes,
        "transposed_sequence",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, state),
        ],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("states", "h_last", "c_last")
        ],
        [
            _weight(rng, "proj_w", 8, CHANNELS),
            _weight(rng, "lstm_w", 1, 4 * HIDDEN, CHANNELS),
            _weight(rng, "lstm_r", 1, 4 * HIDDEN, HIDDEN),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check_batches(model: onnx.ModelProto, x_shape: tuple[int, ...]) -> None:
    """Graph mode equals eager for batches 1, 2, 3 (batch 1 first), from one compiled graph."""
    graph_rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(1)
    for batch in (1, 2, 3):
        feeds = {
            "x": rng.standard_normal((batch, *x_shape)).astype(np.float32),
            "h0": rng.standard_normal((1, batch, HIDDEN)).astype(np.float32),
            "c0": rng.standard_normal((1, batch, HIDDEN)).astype(np.float32),
        }
        got, expected = graph_rep.run(feeds), eager.run(feeds)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(to_numpy(g), to_numpy(e), rtol=1e-5, atol=1e-5)
    runner = graph_rep.graph_runner
    assert runner.fallback is None
    assert runner.compile_count == 1


def test_an_lstm_reading_a_transposed_value_is_right_at_batch_one() -> None:
    _check_batches(_transposed_lstm_input(), (3, 8))


def test_one_graph_serves_batch_one_and_larger_batches() -> None:
    _check_batches(_model(), (3, 6, 6))


def _short_bidirectional_lstm(steps: int, width: int) -> onnx.ModelProto:
    """A bidirectional LSTM over a fixed number of steps (a streaming model's chunk), with
    biases and initial states; the batch is free."""
    rng = np.random.default_rng(3)
    node = helper.make_node(
        "LSTM",
        ["x", "w", "r", "b", "", "h0", "c0"],
        ["y", "h_last", "c_last"],
        hidden_size=HIDDEN,
        direction="bidirectional",
    )
    state = [2, "batch", HIDDEN]
    graph = helper.make_graph(
        [node],
        "short_lstm",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, "batch", width]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, state),
        ],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("y", "h_last", "c_last")
        ],
        [
            _weight(rng, "w", 2, 4 * HIDDEN, width),
            _weight(rng, "r", 2, 4 * HIDDEN, HIDDEN),
            _weight(rng, "b", 2, 8 * HIDDEN),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_short_lstm_unrolled_into_the_graph_matches_eager_and_guards_its_batch() -> None:
    """Unrolled into reductions up to the batch whose time step stays within
    REDUCTION_STEP_MACS (here 170); a larger batch compiles a graph with torch's LSTM."""
    steps, width = 3, 8
    model = _short_bidirectional_lstm(steps, width)
    graph_rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    largest = REDUCTION_STEP_MACS // (4 * HIDDEN * (width + HIDDEN))
    rng = np.random.default_rng(4)
    compiles = []
    for batch in (1, 5, largest + 1):
        feeds = {
            "x": rng.standard_normal((steps, batch, width)).astype(np.float32),
            "h0": rng.standard_normal((2, batch, HIDDEN)).astype(np.float32),
            "c0": rng.standard_normal((2, batch, HIDDEN)).astype(np.float32),
        }
        got, expected = graph_rep.run(feeds), eager.run(feeds)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(to_numpy(g), to_numpy(e), rtol=1e-5, atol=1e-5)
        compiles.append(graph_rep.graph_runner.compile_count)
    assert compiles == [1, 1, 2]
    assert graph_rep.graph_runner.fallback is None


def _per_step_scalar_along_another_batch() -> onnx.ModelProto:
    """A gate of one value per sequence and step, ``g`` (batch, steps, 1), reshaped along the
    batch of ``x`` (batch, steps, heads, size) with a -1 and scanned over the steps with it, each
    step's gate broadcast over its heads (the official gated-delta LinearAttention expansion's
    beta): ``y[s, b] = x[b, s] * g[b, s]``. The two inputs' batches are separate symbols, so
    torch infers the -1 as their quotient."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["g_t", "x_t"], ["y_t"])],
        "step",
        [
            helper.make_tensor_value_info("g_t", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("x_t", TensorProto.FLOAT, None),
        ],
        [helper.make_tensor_value_info("y_t", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["batch"], start=0, end=1),
        helper.make_node("Concat", ["batch", "steps_minus_one_one"], ["gate_shape"], axis=0),
        helper.make_node("Reshape", ["g", "gate_shape"], ["gate"]),  # (batch, 4, 1, 1)
        helper.make_node("Transpose", ["gate"], ["gates"], perm=[1, 0, 2, 3]),
        helper.make_node("Transpose", ["x"], ["xs"], perm=[1, 0, 2, 3]),
        helper.make_node("Scan", ["gates", "xs"], ["y"], num_scan_inputs=2, body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "gate",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 3, 8]),
            helper.make_tensor_value_info("g", TensorProto.FLOAT, ["m", 4, 1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([4, -1, 1], np.int64), "steps_minus_one_one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_reshapes_inferred_size_of_one_broadcasts_in_the_compiled_graph() -> None:
    """The -1 stands for ``m // n``, 1 whenever the batches agree: the compiled graph indexed
    each step's gate along it as if it were the heads (reading the next steps' gates) until
    the Reshape wrote it as a guarded 1. verify=False: nothing but the graph computes the
    result."""
    model = _per_step_scalar_along_another_batch()
    graph_rep = sonnx.prepare(model, use_graph=True, verify=False)
    eager = sonnx.prepare(model)
    rng = np.random.default_rng(5)
    for batch in (2, 3):
        feeds = {
            "x": rng.standard_normal((batch, 4, 3, 8)).astype(np.float32),
            "g": rng.standard_normal((batch, 4, 1)).astype(np.float32),
        }
        (got,), (expected,) = graph_rep.run(feeds), eager.run(feeds)
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-6, atol=1e-6)

"""MatMuls whose weights have leading 1s (``[1, K, N]``, ``[1, 1, K, N]``), one weight read by
two MatMuls, and a bfloat16 weight: quantize_weights writes onnxruntime's model byte for byte
(the reshape chain after MatMulNBits where the input's rank is lower, none where it is not;
the shared weight's tensors where onnxruntime leaves them), and sonnx runs the reshaped
products as onnxruntime does."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.quantization import quantize_weights
from sonnx.quantization.nbits_shape import static_rank
from tests.quantization.test_quantize_weights import ATOL, ort_quantized


def _leading_ones_model() -> onnx.ModelProto:
    """x [2, 64] @ w3 [1, 64, 8] (reshaped), then @ w4 [1, 1, 8, 16] by an unnamed node
    (reshaped, named after the weight); x3 [2, 5, 64] @ w3 again (rank 3: no reshape)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((1, 64, 8)).astype(np.float32), "w3"),
        numpy_helper.from_array(rng.standard_normal((1, 1, 8, 16)).astype(np.float32), "w4"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w3"], ["h"], name="mm3"),
        helper.make_node("MatMul", ["h", "w4"], ["y"]),
        helper.make_node("MatMul", ["x3", "w3"], ["z"], name="mm3b"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64]),
        helper.make_tensor_value_info("x3", TensorProto.FLOAT, [2, 5, 64]),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "yz"]
    graph = helper.make_graph(nodes, "g", inputs, outputs, weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
def test_leading_ones_equal_onnxruntime(symmetric: bool) -> None:
    model = _leading_ones_model()
    ours = quantize_weights(model, block_size=16, symmetric=symmetric)
    ref = ort_quantized(model, bits=4, block_size=16, is_symmetric=symmetric, accuracy_level=4)
    assert ours.SerializeToString() == ref.SerializeToString()
    names = [n.name for n in ours.graph.node]
    assert names[:2] == ["mm3_Q4", "mm3_Q4_h_shape_a"] and "w4_Q4_y_reshape_out" in names
    assert names[-1] == "mm3b_Q4"  # rank 3 >= the weight's rank: no reshape
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((2, 64)).astype(np.float32),
        "x3": rng.standard_normal((2, 5, 64)).astype(np.float32),
    }
    session = ort.InferenceSession(ours.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    got = sonnx.prepare(ours).run(feeds)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g.numpy(), e, rtol=0, atol=ATOL)
    assert expected[0].shape == (1, 1, 2, 16) and expected[1].shape == (2, 5, 8)


def test_bfloat16_weight_equals_onnxruntime() -> None:
    bfloat16 = helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16)
    weight = np.random.default_rng(0).standard_normal((40, 24)).astype(bfloat16)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["b"], name="mm")],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [2, 40])],
        [helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [2, 24])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for symmetric in (True, False):
        ours = quantize_weights(model, block_size=16, symmetric=symmetric)
        ref = ort_quantized(model, bits=4, block_size=16, is_symmetric=symmetric, accuracy_level=4)
        assert ours.SerializeToString() == ref.SerializeToString()
        assert ours.graph.initializer[1].data_type == TensorProto.BFLOAT16  # the scales


def test_static_rank() -> None:
    model = _leading_ones_model()
    graph = model.graph
    assert static_rank("x", [graph]) == 2 and static_rank("x3", [graph]) == 3
    assert static_rank("y", [graph]) is None  # an output declared without a shape
    assert static_rank("h", [graph]) is None  # undeclared

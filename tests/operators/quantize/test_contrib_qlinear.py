"""com.microsoft QOperator-form operators against onnxruntime's CPU kernels on single-node
models: equal element for element."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.errors import BadInputError
from sonnx.operators.quantize.contrib_qlinear import QLinearConcat, QLinearSigmoid
from tests.contrib_quant_helpers import (
    OPSETS,
    both,
    int8_weights_7_bits,
    node_model,
    reference_run,
)

RNG = np.random.default_rng(2)
F32 = np.float32
MS = "com.microsoft"
TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def q(dtype, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def params(dtype, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """A scale and a zero point near the middle of dtype's range."""
    middle = (int(np.iinfo(dtype).min) + int(np.iinfo(dtype).max)) // 2
    return np.array(scale, F32), np.array(middle + int(RNG.integers(-20, 21)), dtype)


def compare(op_type, inputs, graph_inputs, dtype, **attrs) -> None:
    model = node_model(op_type, inputs, graph_inputs, outputs=(TYPES[dtype],), **attrs)
    (expected,), (got,) = both(model, {n: inputs[n] for n in graph_inputs})
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_matches_onnxruntime(op_type, dtype):
    a_s, a_z = params(dtype, 0.02)
    b_s, b_z = params(dtype, 0.05)
    c_s, c_z = params(dtype, 0.08 if op_type == "QLinearAdd" else 0.6)
    inputs = {
        "A": q(dtype, 2, 3, 8),
        "A_scale": a_s,
        "A_zero_point": a_z,
        "B": q(dtype, 3, 1),
        "B_scale": b_s,
        "B_zero_point": b_z,
        "C_scale": c_s,
        "C_zero_point": c_z,
    }
    compare(op_type, inputs, ["A", "B"], dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    ("op_type", "attrs", "y_scale"),
    [
        ("QLinearSigmoid", {}, 1 / 256),
        ("QLinearLeakyRelu", {"alpha": 0.1}, 0.05),
        ("QLinearSoftmax", {"axis": -1, "opset": 13}, 1 / 256),
        ("QLinearSoftmax", {"axis": 1, "opset": 11}, 1 / 256),
        ("QLinearGlobalAveragePool", {}, 0.03),
        ("QLinearGlobalAveragePool", {"channels_last": 1}, 0.03),
        ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2]}, 0.03),
        (
            "QLinearAveragePool",
            {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1], "count_include_pad": 1},
            0.03,
        ),
        ("QLinearAveragePool", {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1]}, 0.03),
    ],
)
def test_qlinear_unary_matches_onnxruntime(op_type, attrs, y_scale, dtype):
    x_s, x_z = params(dtype, 0.05)
    y_s, y_z = params(dtype, y_scale)
    if op_type in ("QLinearSigmoid", "QLinearSoftmax"):
        y_z = np.array(np.iinfo(dtype).min, dtype)  # outputs in [0, 1]
    inputs = {
        "X": q(dtype, 2, 4, 7, 6),
        "X_scale": x_s,
        "X_zero_point": x_z,
        "Y_scale": y_s,
        "Y_zero_point": y_z,
    }
    compare(op_type, inputs, ["X"], dtype, **attrs)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_concat_matches_onnxruntime(dtype):
    y_s, y_z = params(dtype, 0.05)
    inputs = {"Y_scale": y_s, "Y_zero_point": y_z}
    for i, (shape, scale) in enumerate((((2, 3, 4), 0.05), ((2, 5, 4), 0.02), ((2, 1, 4), 0.1))):
        # the first input shares Y's quantization (copied as it is), the others are requantized
        s, z = params(dtype, scale) if i else (y_s, y_z)
        inputs.update({f"x{i}": q(dtype, *shape), f"s{i}": s, f"z{i}": z})
    compare("QLinearConcat", inputs, ["x0", "x1", "x2"], dtype, axis=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_where_matches_onnxruntime(dtype):
    x_s, x_z = params(dtype, 0.05)
    y_s, y_z = params(dtype, 0.02)
    z_s, z_z = params(dtype, 0.04)
    inputs = {
        "condition": RNG.random((3, 1, 5)) > 0.5,
        "X": q(dtype, 3, 4, 5),
        "x_scale": x_s,
        "x_zero_point": x_z,
        "Y": q(dtype, 4, 1),
        "y_scale": y_s,
        "y_zero_point": y_z,
        "z_scale": z_s,
        "z_zero_point": z_z,
    }
    compare("QLinearWhere", inputs, ["condition", "X", "Y"], dtype)


def qgemm_inputs(dtype, b: np.ndarray, per_column: bool, attrs: dict) -> dict[str, np.ndarray]:
    """QGemm's inputs: A of ``dtype``, the int8 weights ``b`` (K, N), transposed for transB."""
    m, (k, n) = 4, b.shape
    a_s, a_z = params(dtype, 0.05)
    y_s, y_z = params(dtype, 0.3)
    b_shape = (n,) if per_column else ()
    return {
        "A": q(dtype, *((k, m) if attrs.get("transA") else (m, k))),
        "a_scale": a_s,
        "a_zero_point": a_z,
        "B": np.ascontiguousarray(b.T) if attrs.get("transB") else b,
        "b_scale": RNG.uniform(0.01, 0.05, b_shape).astype(F32),
        "b_zero_point": np.zeros(b_shape, np.int8),
        "C": RNG.integers(-500, 500, n).astype(np.int32),
        "y_scale": y_s,
        "y_zero_point": y_z,
    }


QGEMM_ATTRS = [{}, {"transA": 1, "transB": 1, "alpha": 0.5}]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("attrs", QGEMM_ATTRS)
def test_qgemm_matches_onnxruntime(dtype, per_column, attrs):
    # Beside uint8 A, int8 weights in 7 bits, where onnxruntime's uint8 x int8 product is exact on
    # every x86 CPU (tests/contrib_quant_helpers.py); the test below covers all 8 bits.
    b = int8_weights_7_bits(RNG, 12, 5) if dtype == np.uint8 else q(np.int8, 12, 5)
    compare("QGemm", qgemm_inputs(dtype, b, per_column, attrs), ["A"], dtype, **attrs)


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("attrs", QGEMM_ATTRS)
def test_qgemm_uint8_a_full_range_equals_exact_reference(per_column, attrs):
    """uint8 A and int8 weights over all 8 bits, whose products onnxruntime saturates in int16
    on x86 without VNNI: sonnx's torch path equals the exact product, requantized in
    onnxruntime's order (its default, onnxruntime's own kernel, equals onnxruntime's run:
    test_ort_qlinear_kernels.py)."""
    inputs = qgemm_inputs(np.uint8, q(np.int8, 12, 5), per_column, attrs)
    model = node_model("QGemm", inputs, ["A"], outputs=(TensorProto.UINT8,), **attrs)
    (got,) = sonnx.prepare(model, kernels="torch").run([inputs["A"]])
    np.testing.assert_array_equal(got.numpy(), reference_run(model, {"A": inputs["A"]})[0])


@pytest.mark.parametrize(
    ("dtype", "onnx_type"),
    [
        (np.uint8, TensorProto.UINT8),
        (np.int8, TensorProto.INT8),
        (np.uint16, TensorProto.UINT16),
        (np.int16, TensorProto.INT16),
    ],
)
@pytest.mark.parametrize("axis", [None, 1])
def test_com_microsoft_quantize_dequantize_match_onnxruntime(dtype, onnx_type, axis):
    x = (RNG.standard_normal((2, 3, 4)) * 4).astype(F32)
    shape = (3,) if axis else ()
    scale = RNG.uniform(0.02, 0.05, shape).astype(F32)
    zero = np.full(shape, 3, dtype)
    attrs = {"axis": axis} if axis else {}
    quantize = node_model(
        "QuantizeLinear",
        {"x": x, "scale": scale, "zero": zero},
        ["x"],
        outputs=(onnx_type,),
        **attrs,
    )
    (expected,), (got,) = both(quantize, {"x": x})
    np.testing.assert_array_equal(got, expected)
    dequantize = node_model(
        "DequantizeLinear", {"q": expected, "scale": scale, "zero": zero}, ["q"], **attrs
    )
    (expected_x,), (got_x,) = both(dequantize, {"q": expected})
    np.testing.assert_array_equal(got_x, expected_x)


def test_qlinear_ops_reject_float_inputs_and_vector_scales():
    one = torch.ones(())
    with pytest.raises(BadInputError, match="input X must be uint8 or int8, received"):
        QLinearSigmoid().forward(torch.zeros(3), one, None, one, None)
    with pytest.raises(BadInputError, match=r"must be a scalar .* received shape \(2,\)"):
        QLinearSigmoid().forward(torch.zeros(3, dtype=torch.uint8), torch.ones(2), None, one)
    with pytest.raises(BadInputError, match=r"\(tensor, scale, zero point\) triples"):
        QLinearConcat(axis=0).forward(one, torch.zeros((), dtype=torch.uint8), torch.zeros(2))


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4])
def test_com_microsoft_int4_quantize_then_dequantize_matches_onnxruntime(dtype):
    """Through int4 and back (onnxruntime's Python API returns no int4 arrays): values beyond
    the 16 codes saturate."""
    x = RNG.standard_normal((2, 3, 4)).astype(F32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS, axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain=MS, axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "int4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
        [
            numpy_helper.from_array(np.array([0.2, 0.3, 0.25], F32), "s"),
            numpy_helper.from_array(np.array([1, 2, 3], dtype), "z"),
        ],
    )
    model = helper.make_model(graph, opset_imports=OPSETS, ir_version=10)
    (expected,), (got,) = both(model, {"x": x})
    np.testing.assert_array_equal(got, expected)

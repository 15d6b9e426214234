"""onnxruntime's own kernels for QGemm, QAttention and the elementwise QLinear operators under
sonnx (sonnx.operators.quantize.ort_qlinear): equal to onnxruntime's run bit for bit (its u8 x
s8 saturation on full-range weights included), one extern call in graph mode; ``kernels="torch"``
equals onnxruntime as the torch path always did, and a gradient takes the torch path."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd
from sonnx.tensor import Tensor, to_numpy
from tests.contrib_quant_helpers import node_model, ort_run

RNG = np.random.default_rng(245)
F32, U8, I8 = np.float32, np.uint8, np.int8
TYPES = {U8: TensorProto.UINT8, I8: TensorProto.INT8, F32: TensorProto.FLOAT}


def codes(dtype, *shape: int, bits: int = 8) -> np.ndarray:
    """Random codes of ``dtype``; int8 ones within ``bits`` bits."""
    if dtype == I8:
        half = 2 ** (bits - 1)
        return RNG.integers(-half, half, shape).astype(I8)
    return RNG.integers(0, 256, shape).astype(U8)


def zero_point(dtype, present: bool = True) -> np.ndarray | None:
    if not present:
        return None
    return np.array(RNG.integers(100, 150) if dtype == U8 else RNG.integers(-20, 20), dtype)


def scale(low: float = 0.01, high: float = 0.1, shape: tuple[int, ...] = ()) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(F32)


def run(model: onnx.ModelProto, feeds: dict, **prepare) -> tuple[np.ndarray, str]:
    """sonnx's first output and the kernel the node's operator used."""
    rep = sonnx.prepare(model, **prepare)
    y = rep.run(list(feeds.values()))[0]
    return y.numpy(), rep.program.steps[0].op.kernel_used


def check(model: onnx.ModelProto, feeds: dict, op_type: str, torch_atol: float = 0.0) -> None:
    """The bridge equals onnxruntime bit for bit; ``kernels="torch"`` equals it as the torch
    path does (within ``torch_atol``: QAttention's float32 softmax)."""
    (expected,) = ort_run(model, feeds)[:1]
    got, kernel = run(model, feeds)
    assert kernel == f"onnxruntime's {op_type}"
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    got, kernel = run(model, feeds, kernels="torch")
    assert kernel == "torch's"
    assert got.dtype == expected.dtype
    difference = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    assert difference.max() <= torch_atol


# ---- QGemm -----------------------------------------------------------------------------------


def qgemm_case(m, k, n, dtype=U8, bits=7, per_column=False, bias=True, out=True, **attrs):
    """A one-node QGemm model over constant weights, and its feed."""
    b = codes(I8, k, n, bits=bits)
    b_shape = (n,) if per_column else ()
    inputs = {
        "A": codes(dtype, *((k, m) if attrs.get("transA") else (m, k))),
        "a_scale": scale(),
        "a_zero_point": zero_point(dtype),
        "B": np.ascontiguousarray(b.T) if attrs.get("transB") else b,
        "b_scale": scale(0.001, 0.01, b_shape),
        "b_zero_point": np.zeros(b_shape, I8),
        "C": RNG.integers(-500, 500, n).astype(np.int32) if bias else None,
        "y_scale": scale(0.2, 0.5) if out else None,
        "y_zero_point": zero_point(dtype) if out else None,
    }
    model = node_model("QGemm", inputs, ["A"], outputs=(TYPES[dtype if out else F32],), **attrs)
    return model, {"A": inputs["A"]}


@pytest.mark.parametrize(
    "m, k, n, kwargs",
    [
        (1, 33, 7, {}),
        (5, 70, 9, {"per_column": True, "bias": False}),
        (3, 17, 11, {"dtype": I8, "transA": 1, "transB": 1, "alpha": 0.5}),
        (4, 40, 6, {"out": False, "per_column": True}),
    ],
    ids=["uint8", "per_column_no_bias", "int8_transposed", "float_output"],
)
def test_qgemm_equals_onnxruntime_exactly(m, k, n, kwargs):
    check(*qgemm_case(m, k, n, **kwargs), "QGemm")


def test_qgemm_full_range_weights_equal_onnxruntime_saturation_included():
    """All 8 bits of int8 weights against uint8 A: onnxruntime's kernel saturates in int16 on
    x86 without VNNI, and the bridge gives its very result (torch's exact sums do not)."""
    model, feeds = qgemm_case(6, 64, 10, bits=8)
    (expected,) = ort_run(model, feeds)
    got, kernel = run(model, feeds)
    assert kernel == "onnxruntime's QGemm"
    np.testing.assert_array_equal(got, expected)


def test_a_weight_fed_at_run_time_takes_the_torch_path():
    model, feeds = qgemm_case(3, 20, 5)
    (weight,) = [t for t in model.graph.initializer if t.name == "B"]
    model.graph.input.append(helper.make_tensor_value_info("B", TensorProto.INT8, weight.dims))
    model.graph.initializer.remove(weight)
    feeds = {**feeds, "B": numpy_helper.to_array(weight)}
    (expected,) = ort_run(model, feeds)
    got, kernel = run(model, feeds)
    assert kernel == "torch's"
    np.testing.assert_array_equal(got, expected)


# ---- QAttention --------------------------------------------------------------------------------


def qattention_case(batch, seq, heads, size, mask, zero_points=True, **attrs):
    """A QAttention as ``quantize_dynamic`` writes it: the input, its scale and zero point and
    the mask fed; 7-bit int8 weights and a float bias constant."""
    hidden = heads * size
    inputs = {
        "input": codes(U8, batch, seq, hidden),
        "weight": codes(I8, hidden, 3 * hidden, bits=7),
        "bias": (RNG.standard_normal(3 * hidden) * 0.1).astype(F32),
        "input_scale": scale(0.01, 0.03),
        "weight_scale": scale(0.001, 0.003),
        "mask_index": mask,
        "input_zero_point": zero_point(U8, zero_points),
        "weight_zero_point": zero_point(I8, zero_points),
    }
    fed = [n for n in ("input", "input_scale", "mask_index", "input_zero_point") if n in inputs]
    fed = [n for n in fed if inputs[n] is not None]
    model = node_model("QAttention", inputs, fed, num_heads=heads, **attrs)
    return model, {n: inputs[n] for n in fed}


@pytest.mark.parametrize(
    "batch, seq, mask, zero_points, attrs",
    [
        (1, 1, None, True, {}),
        (2, 5, np.array([5, 3], np.int32), True, {}),
        (3, 7, np.array([[1] * 7, [1] * 4 + [0] * 3, [0] + [1] * 6], np.int32), False, {}),
        (2, 6, None, True, {"unidirectional": 1}),
    ],
    ids=["one_token", "lengths", "flags_no_zero_points", "causal"],
)
def test_qattention_equals_onnxruntime_exactly(batch, seq, mask, zero_points, attrs):
    model, feeds = qattention_case(batch, seq, 3, 5, mask, zero_points, **attrs)
    check(model, feeds, "QAttention", torch_atol=1e-5)


def test_qattention_asked_for_its_present_takes_the_torch_path():
    model, feeds = qattention_case(2, 4, 2, 4, None)
    model.graph.node[0].output.append("present")
    model.graph.output.append(helper.make_tensor_value_info("present", TensorProto.FLOAT, None))
    expected = ort_run(model, feeds)
    rep = sonnx.prepare(model)
    got = rep.run(list(feeds.values()))
    assert rep.program.steps[0].op.kernel_used == "torch's"
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-5)


def _float_input_qattention() -> onnx.ModelProto:
    """x -> DynamicQuantizeLinear -> QAttention, as ``quantize_dynamic`` writes it."""
    model, _ = qattention_case(2, 3, 2, 4, None)
    graph = model.graph
    quantize = helper.make_node(
        "DynamicQuantizeLinear", ["x"], ["input", "input_scale", "input_zero_point"]
    )
    graph.node.insert(0, quantize)
    del graph.input[:]
    graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8]))
    return model


def test_a_gradient_takes_the_torch_path():
    """Training, QAttention runs on torch's path (fused with the DynamicQuantizeLinear before
    it, :meth:`QAttention.forward_float_input`): its float bias gets a finite gradient. Without
    one, the node runs onnxruntime's kernel, with the same output."""
    model = _float_input_qattention()
    x = RNG.standard_normal((2, 3, 8)).astype(F32)
    rep = sonnx.prepare(model)
    (expected,) = ort_run(model, {"x": x})
    np.testing.assert_array_equal(rep.run([x])[0].numpy(), expected)
    attention = rep.program.steps[1].op
    assert attention.kernel_used == "onnxruntime's QAttention"
    attention.kernel_used = None
    autograd.training = True
    try:
        (y,) = rep.run([Tensor(data=x, requires_grad=True)])
        loss = autograd.reduce_mean(autograd.mul(y, y), keepdims=0)
        grads = {p.name: to_numpy(g) for p, g in autograd.backward(loss)}
    finally:
        autograd.training = False
    assert attention.kernel_used != "onnxruntime's QAttention"
    assert np.isfinite(grads["bias"]).all() and np.abs(grads["bias"]).sum() > 0
    np.testing.assert_allclose(to_numpy(y), expected, rtol=1e-5, atol=1e-5)


# ---- the elementwise operators -----------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize(
    "dtype, b_shape",
    [(U8, (2, 3, 5, 7)), (I8, (3, 1, 7)), (U8, (7,))],
    ids=["uint8", "int8_broadcast", "uint8_row"],
)
def test_qlinear_binary_equals_onnxruntime_exactly(op_type, dtype, b_shape):
    inputs = {
        "A": codes(dtype, 2, 3, 5, 7), "A_scale": scale(), "A_zero_point": zero_point(dtype),
        "B": codes(dtype, *b_shape), "B_scale": scale(), "B_zero_point": zero_point(dtype),
        "C_scale": scale(0.05, 0.2), "C_zero_point": zero_point(dtype),
    }  # fmt: skip
    model = node_model(op_type, inputs, ["A", "B"], outputs=(TYPES[dtype],))
    check(model, {"A": inputs["A"], "B": inputs["B"]}, op_type)


@pytest.mark.parametrize(
    "op_type, shape, attrs",
    [
        ("QLinearSigmoid", (3, 5, 7), {}),
        ("QLinearLeakyRelu", (2, 3, 5, 7), {"alpha": 0.15}),
        ("QLinearGlobalAveragePool", (2, 3, 5, 7), {}),
        ("QLinearGlobalAveragePool", (2, 5, 7, 3), {"channels_last": 1}),
        ("QLinearSoftmax", (3, 9, 7), {"axis": -1, "opset": 13}),
        ("QLinearSoftmax", (3, 9, 7), {"axis": 1, "opset": 11}),
        ("QLinearSoftmax", (2, 40, 3), {"axis": 1, "opset": 13}),
    ],
    ids=[
        "sigmoid",
        "leaky_relu",
        "global_pool",
        "global_pool_nhwc",
        "softmax",
        "softmax_11",
        "softmax_middle_axis",
    ],
)
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_unary_equals_onnxruntime_exactly(op_type, shape, attrs, dtype):
    inputs = {
        "X": codes(dtype, *shape), "X_scale": scale(0.02, 0.1), "X_zero_point": zero_point(dtype),
        "Y_scale": scale(0.005, 0.02), "Y_zero_point": zero_point(dtype),
    }  # fmt: skip
    model = node_model(op_type, inputs, ["X"], outputs=(TYPES[dtype],), **attrs)
    check(model, {"X": inputs["X"]}, op_type)


@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_concat_equals_onnxruntime_exactly(dtype):
    inputs = {"Y_scale": scale(0.05, 0.1), "Y_zero_point": zero_point(dtype)}
    for i, width in enumerate((3, 1, 5)):
        inputs |= {f"X{i}": codes(dtype, 2, width, 7), f"s{i}": scale(), f"z{i}": zero_point(dtype)}
    fed = ["X0", "X1", "X2"]
    model = node_model("QLinearConcat", inputs, fed, outputs=(TYPES[dtype],), axis=1)
    check(model, {n: inputs[n] for n in fed}, "QLinearConcat")


# ---- graph mode ----------------------------------------------------------------------------------


def test_graph_mode_compiles_the_kernel_call_once_for_two_lengths(tmp_path, monkeypatch):
    monkeypatch.setenv("SONNX_CACHE_DIR", str(tmp_path))
    model, _ = qgemm_case(1, 48, 8, per_column=True)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "rows"
    rep = sonnx.prepare(model, use_graph=True)
    for rows in (3, 7):
        feeds = {"A": codes(U8, rows, 48)}
        (expected,) = ort_run(model, feeds)
        np.testing.assert_array_equal(rep.run([feeds["A"]])[0].numpy(), expected)
    assert [p.compiled for p in rep.graph_runner.parts()] == [True]
    assert len(list((tmp_path / "graphs").glob("*/*/graph.json"))) == 1
    assert "onnxruntime's QGemm kernel" in rep.explain([feeds["A"]])

"""Quantization ops: forward vs onnx.reference (all granularities and types), errors, export."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from sonnx import dtypes
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.quantize import linear as q
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

RNG = np.random.default_rng(0)


def _tensor(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def _reference(op_type: str, inputs: list, opset: int, n_out: int = 1, **attrs) -> list:
    names = ["" if a is None else f"x{i}" for i, a in enumerate(inputs)]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    present = [(n, a) for n, a in zip(names, inputs, strict=True) if a is not None]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in present
        ],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(present))


X = (RNG.standard_normal((3, 4)) * 200).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize(
    ("scale", "zp_shape", "attrs"),
    [
        (np.array(1.5, np.float32), (), {}),
        (np.array([1.0, 2.0, 0.5], np.float32), (3,), {"axis": 0}),
        (np.array([1.0, 2.0, 0.5, 4.0], np.float32), (4,), {"axis": -1}),
        (RNG.uniform(0.5, 3, (3, 2)).astype(np.float32), (3, 2), {"axis": 1, "block_size": 2}),
        (RNG.uniform(0.5, 3, (2, 4)).astype(np.float32), (2, 4), {"axis": 0, "block_size": 2}),
    ],
)
def test_quantize_and_dequantize_match_reference(dtype, scale, zp_shape, attrs):
    zp = RNG.integers(0, 20, zp_shape).astype(dtype)
    got = q.QuantizeLinear(**attrs)(_tensor(X), _tensor(scale), _tensor(zp)).numpy()
    ref = _reference("QuantizeLinear", [X, scale, zp], 21, **attrs)[0]
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)
    back = q.DequantizeLinear(**attrs)(_tensor(ref), _tensor(scale), _tensor(zp)).numpy()
    np.testing.assert_array_equal(
        back, _reference("DequantizeLinear", [ref, scale, zp], 21, **attrs)[0]
    )


def test_quantize_rounds_half_to_even_and_defaults_to_uint8():
    x = np.array([0.5, 1.5, 2.5, -0.5, 300.0], np.float32)
    got = q.quantize_linear(_tensor(x), _tensor(np.array(1.0, np.float32))).numpy()
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [0, 2, 2, 0, 255])


def test_quantize_int32_input_and_output_dtype():
    x = np.array([-7, 3, 1000], dtype=np.int32)
    op = q.QuantizeLinear(output_dtype=TensorProto.INT8)
    got = op(_tensor(x), _tensor(np.array(3.0, np.float32))).numpy()
    ref = _reference("QuantizeLinear", [x, np.array(3.0, np.float32)], 21, output_dtype=3)[0]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize(
    "onnx_type",
    [
        TensorProto.FLOAT8E4M3FN,
        TensorProto.FLOAT8E4M3FNUZ,
        TensorProto.FLOAT8E5M2,
        TensorProto.FLOAT8E5M2FNUZ,
    ],
)
def test_quantize_to_float8(onnx_type, saturate):
    x = np.array([0.0, 1.3, -2.6, 100.0, 300.0, 1e5, -1e6, np.inf, np.nan], np.float32)
    scale = np.array(0.5, np.float32)
    np_type = helper.tensor_dtype_to_np_dtype(onnx_type)
    zp = np.zeros((), dtype=np_type)
    zp_t = Tensor(data=torch.zeros((), dtype=dtypes.onnx_to_torch(onnx_type)), requires_grad=False)
    got = q.QuantizeLinear(saturate=saturate)(_tensor(x), _tensor(scale), zp_t).numpy()
    ref = _reference("QuantizeLinear", [x, scale, zp], 21, saturate=saturate)[0]
    np.testing.assert_array_equal(got.astype(np.float32), ref.astype(np.float32))


def test_dequantize_float8_to_float16():
    x = np.array([1.0, -2.5, 448.0], dtype=ml_dtypes.float8_e4m3fn)
    scale = np.array(2.0, np.float16)
    xt = Tensor(data=torch.tensor([1.0, -2.5, 448.0]).to(torch.float8_e4m3fn), requires_grad=False)
    got = q.dequantize_linear(xt, _tensor(scale)).numpy()
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, _reference("DequantizeLinear", [x, scale], 21)[0])


@pytest.mark.parametrize(
    "x", [np.array([0, 2, -3, -2.5, 1.34, 0.5], np.float32), np.array([-1.0, -2.0], np.float32)]
)
def test_dynamic_quantize_matches_reference(x):
    got = [t.numpy() for t in q.dynamic_quantize_linear(_tensor(x))]
    ref = _reference("DynamicQuantizeLinear", [x], 11, n_out=3)
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_array_equal(g, r)


def test_dequantize_passes_gradients_to_the_scale():
    import sonnx.autograd as autograd

    autograd.training = True
    scale = Tensor(data=torch.tensor(0.5), requires_grad=True, stores_grad=True)
    y = q.dequantize_linear(_tensor(np.array([4, 6], np.int8)), scale)
    grads = dict(autograd.backward(y))
    assert grads[scale].item() == pytest.approx(10.0)


def test_bad_inputs():
    with pytest.raises(BadInputError, match="QuantizeLinear: input y_scale must be a scalar or"):
        q.quantize_linear(_tensor(X), _tensor(np.ones(5, np.float32)))
    with pytest.raises(BadInputError, match="for blocked quantization along axis 1"):
        q.quantize_linear(_tensor(X), _tensor(np.ones((3, 3), np.float32)), block_size=2)
    with pytest.raises(BadInputError, match="QuantizeLinear: the quantized type must be"):
        q.quantize_linear(_tensor(X), _tensor(np.ones((), np.float32)), _tensor(np.int64(0)))
    with pytest.raises(BadInputError, match="DequantizeLinear: x_zero_point must have x's dtype"):
        q.dequantize_linear(
            _tensor(np.ones(2, np.int8)), _tensor(np.float32(1)), _tensor(np.uint8(0))
        )
    with pytest.raises(BadInputError, match="DynamicQuantizeLinear: input x must be"):
        q.dynamic_quantize_linear(_tensor(np.ones(2, np.float64)))


def test_export_checks_the_target_opset():
    op = q.QuantizeLinear(axis=0)
    op(_tensor(X), _tensor(np.ones(3, np.float32)))
    with pytest.raises(ExportError, match="needs opset >= 13"):
        op.export(GraphBuilder(10), ["x", "s"], ["y"])
    blocked = q.QuantizeLinear(axis=1, block_size=2)
    blocked(_tensor(X), _tensor(np.ones((3, 2), np.float32)))
    with pytest.raises(ExportError, match="block_size=2 has no equivalent at opset 19"):
        blocked.export(GraphBuilder(19), ["x", "s"], ["y"])
    g = GraphBuilder(21)
    blocked.export(g, ["x", "s"], ["y"])
    node = g.nodes[0]
    assert node.op_type == "QuantizeLinear"
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute} == {
        "axis": 1,
        "block_size": 2,
    }
    onnx.checker.check_node(node)

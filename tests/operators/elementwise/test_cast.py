"""Cast, CastLike and BitCast: values against NumPy and ONNX's reference evaluator (float8 with
and without saturation), the gradient of float casts, unsupported types, import and export."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import sonnx
from sonnx import autograd, tensor
from sonnx.autograd import BitCast, Cast, CastLike
from sonnx.errors import BadInputError
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor

NUMERIC = [
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]


def t(array) -> Tensor:
    return Tensor(data=np.asarray(array), requires_grad=False)


@pytest.mark.parametrize("src", NUMERIC)
@pytest.mark.parametrize("dst", NUMERIC)
def test_cast_between_numeric_types(src, dst):
    x = np.array([0, 1, 2, 3, 100, 7], dtype=src)
    out = autograd.cast(t(x), dst).numpy()
    assert out.dtype == np.dtype(dst)
    np.testing.assert_array_equal(out, x.astype(dst))


def test_float_to_int_truncates_and_int_narrowing_wraps():
    x = np.array([2.7, -2.7, 0.4], dtype=np.float32)
    np.testing.assert_array_equal(autograd.cast(t(x), np.int32).numpy(), [2, -2, 0])
    wide = np.array([200, 300, -1], dtype=np.int16)
    np.testing.assert_array_equal(autograd.cast(t(wide), "int8").numpy(), wide.astype(np.int8))


@pytest.mark.parametrize("to", [torch.float16, np.float16, "float16", TensorProto.FLOAT16], ids=str)
def test_cast_accepts_every_dtype_spelling(to):
    y = autograd.cast(t(np.ones(2, np.float32)), to)
    assert y.dtype == torch.float16
    assert y.creator.attrs == {"to": TensorProto.FLOAT16}


FLOAT8 = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}
SPECIAL = np.array(
    [0.0, -0.0, 1.0, 0.3, -17.0, 240.0, 300.0, 448.0, 460.0, 470.0, 1e5, -1e5, np.inf, -np.inf,
     np.nan, 57344.0, 6e4, 1e-9],
    dtype=np.float32,
)  # fmt: skip


@pytest.mark.parametrize("code", list(FLOAT8))
@pytest.mark.parametrize("saturate", [0, 1])
def test_float8_matches_onnx_reference(code, saturate):
    node = helper.make_node("Cast", ["x"], ["y"], to=code, saturate=saturate)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(SPECIAL)])],
        [helper.make_tensor_value_info("y", code, [len(SPECIAL)])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (expected,) = ReferenceEvaluator(model).run(None, {"x": SPECIAL})
    got = Cast(to=code, saturate=saturate)(t(SPECIAL)).numpy()
    assert got.dtype == np.dtype(FLOAT8[code])
    np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32))


def test_float8_back_to_float_and_bfloat16():
    x = np.array([1.5, -3.25, 448.0], dtype=np.float32)
    f8 = autograd.cast(t(x), torch.float8_e4m3fn)
    np.testing.assert_array_equal(autograd.cast(f8, np.float16).numpy(), x.astype(np.float16))
    bf = autograd.cast(t(np.array([1.0 + 2**-9, 3.0], np.float32)), torch.bfloat16)
    np.testing.assert_array_equal(bf.numpy().astype(np.float32), [1.0, 3.0])  # round to even


def test_float_cast_gradient_flows_back():
    autograd.training = True
    x = Tensor(data=torch.tensor([1.0, 2.0], dtype=torch.float64), stores_grad=True)
    y = autograd.cast(x, torch.float32) * 3.0
    ((param, grad),) = list(autograd.backward(y, Tensor(data=torch.ones(2))))
    assert param is x
    assert grad.dtype == torch.float64
    np.testing.assert_array_equal(grad.numpy(), [3.0, 3.0])


def test_cast_like_and_bitcast():
    x = np.array([1.0, -2.5], dtype=np.float32)
    like = autograd.cast_like(t(x), t(np.zeros(1, np.int64)))
    np.testing.assert_array_equal(like.numpy(), np.array([1, -2], np.int64))
    bits = autograd.bitcast(t(x), np.int32).numpy()
    np.testing.assert_array_equal(bits, x.view(np.int32))
    flags = BitCast(to=TensorProto.UINT8)(t(np.array([True, False]))).numpy()
    np.testing.assert_array_equal(flags, [1, 0])


def test_unsupported_types_and_widths():
    with pytest.raises(BadInputError, match=r"Cast: target type .*UNDEFINED is not supported"):
        Cast(to=TensorProto.UNDEFINED)(t(np.ones(2)))
    with pytest.raises(BadInputError, match="BitCast: strings have no fixed bit width"):
        BitCast(to=TensorProto.STRING)(t(np.ones(2)))
    with pytest.raises(BadInputError, match="BitCast: the target type must have the input's bit"):
        autograd.bitcast(t(np.ones(2, np.float32)), np.int64)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (TensorProto.INT4, [0, 1, 2, -2, 0, 4, -4, 7]),
        (TensorProto.UINT4, [0, 1, 2, 14, 0, 4, 12, 7]),
        (TensorProto.INT2, [0, 1, -2, -2, 0, 0, 0, -1]),
        (TensorProto.UINT2, [0, 1, 2, 2, 0, 0, 0, 3]),
    ],
)
def test_sub_byte_casts_truncate_and_wrap_like_the_reference(code, expected):
    x = np.array([0.5, 1.5, 2.5, -2.7, -0.5, 20, -20, 7.9], np.float32)
    narrow = Cast(to=code)(t(x))
    stored = tensor.to_numpy(narrow)
    assert stored.dtype == np.dtype(helper.tensor_dtype_to_np_dtype(code))
    np.testing.assert_array_equal(stored.astype(np.float32), expected)
    back = Cast(to=TensorProto.FLOAT)(narrow)
    np.testing.assert_array_equal(tensor.to_numpy(back), np.array(expected, np.float32))


def test_float4_rounds_to_nearest_even_and_saturates_like_the_reference():
    x = np.array([0, 0.25, 0.3, 0.75, 1.25, 2.5, 3.5, 5, 7, 100, -100, -0.1], np.float32)
    narrow = Cast(to=TensorProto.FLOAT4E2M1)(t(x))
    stored = tensor.to_numpy(narrow)
    assert stored.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
    expected = [0, 0, 0.5, 1, 1, 2, 4, 4, 6, 6, -6, -0.0]
    np.testing.assert_array_equal(stored.astype(np.float32), expected)
    back = tensor.to_numpy(Cast(to=TensorProto.FLOAT)(narrow))
    np.testing.assert_array_equal(back, np.array(expected, np.float32))


def test_import_cast1_with_type_name():
    node = helper.make_node("Cast", ["x"], ["y"], to="INT32")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 5)])
    (y,) = sonnx.prepare(model).run({"x": np.array([1.9, -4.2], np.float32)})
    np.testing.assert_array_equal(y.numpy(), np.array([1, -4], np.int32))


def test_export_cast_like_before_opset_15_is_a_cast():
    x = t(np.array([1.5, 2.5], np.float32))
    target = t(np.zeros(1, np.float16))
    y = CastLike()(x, target)
    model = to_onnx([x], [y], opset=13)
    assert [n.op_type for n in model.graph.node] == ["Cast"]
    onnx.checker.check_model(model)
    (out,) = ReferenceEvaluator(model).run(None, {model.graph.input[0].name: x.numpy()})
    np.testing.assert_array_equal(out, np.array([1.5, 2.5], np.float16))

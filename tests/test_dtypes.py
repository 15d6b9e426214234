"""Element types as sonnx shows them to users: ONNX's lower-case names, never torch's, in
:func:`dtype_name` and in the errors operators raise."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from onnx import TensorProto

from sonnx import autograd
from sonnx.dtypes import STRING, dtype_name
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (torch.float32, "float32"),
        (torch.float64, "float64"),
        (torch.bool, "bool"),
        (torch.bfloat16, "bfloat16"),
        (torch.float8_e4m3fn, "float8_e4m3fn"),
        (torch.float4_e2m1fn_x2, "float4_e2m1fn"),  # sonnx keeps FLOAT4E2M1 one value a byte
        (STRING, "string"),
        (np.int64, "int64"),
        (np.dtype(ml_dtypes.bfloat16), "bfloat16"),
        (TensorProto.DOUBLE, "float64"),
        ("float16", "float16"),
        (None, "?"),
    ],
)
def test_dtype_names_are_onnx_words(dtype, name) -> None:
    assert dtype_name(dtype) == name


def _t(array: np.ndarray) -> Tensor:
    return Tensor(data=array, requires_grad=False)


_F16 = np.ones((2, 3), np.float16)
_U8 = np.ones((1, 1, 3, 3), np.uint8)


@pytest.mark.parametrize(
    ("call", "received"),
    [
        (lambda: autograd.binarizer(_t(_F16)), "received float16"),  # ai.onnx.ml
        (lambda: autograd.Relu()(_t(_U8)), "received uint8"),
        (
            lambda: autograd.DequantizeLinear()(_t(_U8), _t(np.int32(1)), None),
            "x_scale must be floating-point, received int32",
        ),
        (
            lambda: autograd.QLinearConv()(
                *[_t(a) for a in (_U8.astype(np.float32), np.float32(1), np.uint8(0))],
                *[_t(a) for a in (_U8, np.float32(1), np.uint8(0), np.float32(1), np.uint8(0))],
            ),
            "input x must be int8 or uint8, received float32",
        ),
        (lambda: autograd.Multinomial()(_t(np.ones((2, 3), np.int64))), "received int64"),
        (lambda: autograd.MatMulInteger()(_t(_F16), _t(_F16)), "received float16"),
    ],
    ids=["Binarizer", "Relu", "DequantizeLinear", "QLinearConv", "Multinomial", "MatMulInteger"],
)
def test_operator_errors_name_dtypes_in_onnx_words(call, received) -> None:
    with pytest.raises(BadInputError) as caught:
        call()
    message = str(caught.value)
    assert received in message
    assert "torch." not in message

"""Element types as sonnx shows them to users: ONNX's lower-case names, never torch's."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from onnx import TensorProto

from sonnx.dtypes import STRING, dtype_name


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

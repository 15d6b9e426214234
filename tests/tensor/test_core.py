"""sonnx.tensor.core: how a Tensor shows itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx.tensor import Tensor


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (np.zeros((2, 3), np.float32), "float32"),
        (torch.zeros(4, dtype=torch.bfloat16), "bfloat16"),
        (np.zeros(1, np.int64), "int64"),
        (np.array([True]), "bool"),
        (np.array(["a", "b"]), "string"),
    ],
)
def test_repr_names_the_dtype_as_onnx_does(data, shown: str) -> None:
    text = repr(Tensor(data=data, name="x"))
    assert f"dtype={shown}," in text
    assert "torch." not in text
    assert text.startswith(f"Tensor(shape={tuple(data.shape)}, ") and "name='x'" in text

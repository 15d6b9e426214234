"""sonnx.tensor.core: how a Tensor shows itself and what data it takes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx.errors import BadInputError
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


def test_data_torch_cannot_read_is_a_typed_error_with_the_string_hint() -> None:
    with pytest.raises(BadInputError, match="dtype='string'") as caught:
        Tensor(data=["a", "b"])
    assert "list" in str(caught.value)
    assert Tensor(data=["a", "b"], dtype="string").shape == (2,)

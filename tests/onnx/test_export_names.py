"""sonnx.onnx.export_names: a ``dynamic_axes`` key that names no input or output is an error
listing the names there are, and the tensors that have none."""

from __future__ import annotations

import numpy as np
import pytest

import sonnx
from sonnx import autograd
from sonnx.errors import ExportError
from sonnx.tensor import Tensor


def _relu() -> tuple[Tensor, Tensor]:
    x = Tensor(data=np.ones((2, 4), np.float32), requires_grad=False)
    return x, autograd.relu(x)


@pytest.mark.parametrize(
    ("names", "listed"),
    [
        (
            {},
            "inputs [inputs[0] (unnamed)], outputs [outputs[0] (unnamed)]; name a tensor with "
            "input_names or output_names",
        ),
        ({"input_names": ["tokens"]}, "inputs ['tokens'], outputs [outputs[0] (unnamed)];"),
        (
            {"input_names": ["tokens"], "output_names": ["probs"]},
            "inputs ['tokens'], outputs ['probs']",
        ),
    ],
)
def test_an_unknown_dynamic_axes_name_lists_the_names_there_are(names, listed: str) -> None:
    x, y = _relu()
    with pytest.raises(ExportError) as caught:
        sonnx.to_onnx([x], [y], dynamic_axes={"x": [0]}, **names)
    message = str(caught.value)
    assert "dynamic_axes names 'x', which is none of the inputs' or outputs' names: " in message
    assert listed in message
    assert "names []" not in message


def test_a_tensor_named_by_itself_is_listed_by_its_name() -> None:
    x, y = _relu()
    x.name = "pixels"
    with pytest.raises(ExportError, match=r"inputs \['pixels'\], outputs \[outputs\[0\]"):
        sonnx.to_onnx([x], [y], dynamic_axes={"x": [0]})
    model = sonnx.to_onnx([x], [y], dynamic_axes={"pixels": {0: "batch"}})
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"

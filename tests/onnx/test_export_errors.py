"""What cannot be exported fails with an ExportError that names the op, opset or tensor."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import sonnx.autograd as ag
from sonnx.errors import ExportError
from sonnx.onnx.exporter import OLDEST_EXPORT_OPSET, to_onnx
from sonnx.tensor import Tensor

F = np.float32


def data(*shape: int, name: str | None = "x") -> Tensor:
    return Tensor(data=np.ones(shape, F), requires_grad=False, name=name)


def test_user_leaf_that_is_neither_input_nor_parameter_is_refused() -> None:
    x = data(2, 3)
    user = Tensor(data=np.ones((2, 3), F), requires_grad=True, name="user_data")
    with pytest.raises(
        ExportError, match=r"'user_data' of shape \(2, 3\).*neither among the given"
    ):
        to_onnx([x], [ag.add(x, user)])


@pytest.mark.parametrize("where", ["inputs", "outputs"])
def test_non_tensors_are_refused(where: str) -> None:
    x = data(2, 3)
    y = ag.relu(x)
    inputs, outputs = ([x, np.ones(3)], [y]) if where == "inputs" else ([x], [y, "logits"])
    bad = "ndarray" if where == "inputs" else "str"
    with pytest.raises(ExportError, match=rf"{where}\[1\] must be a sonnx Tensor, received {bad}"):
        to_onnx(inputs, outputs)


def test_computed_tensor_as_input_is_refused() -> None:
    x = data(2, 3)
    y = ag.relu(x)
    with pytest.raises(ExportError, match=r"inputs\[0\] was computed by Relu"):
        to_onnx([y], [ag.exp(y)])


def test_no_outputs_is_refused() -> None:
    with pytest.raises(ExportError, match="no outputs"):
        to_onnx([data(2)], [])


@pytest.mark.parametrize("opset", [OLDEST_EXPORT_OPSET - 1, onnx.defs.onnx_opset_version() + 1, 0])
def test_bad_opset_is_refused(opset: int) -> None:
    x = data(2)
    with pytest.raises(ExportError, match=rf"opset must be in \[11, \d+\], received {opset}"):
        to_onnx([x], [ag.relu(x)], opset=opset)


def test_integer_clip_before_opset_12_names_the_op() -> None:
    x = Tensor(data=np.arange(6).reshape(2, 3), requires_grad=False, name="x")
    with pytest.raises(ExportError, match="Clip"):
        to_onnx([x], [ag.clip(x, 0, 3)], opset=11)


def test_parameters_and_constants_are_not_errors() -> None:
    x = data(2, 3)
    weight = Tensor(data=np.ones((3, 2), F), requires_grad=True, stores_grad=True, name="W")
    frozen = Tensor(data=np.ones(2, F), requires_grad=False, name="offset")
    model = to_onnx([x], [ag.matmul(x, weight) + frozen])
    assert sorted(i.name for i in model.graph.initializer) == ["W", "offset"]
    assert [i.name for i in model.graph.input] == ["x"]

"""The checks to_onnx holds a graph to (``sonnx.onnx.export_checks``): every output connected
to the inputs, every node an operator of the target opset; each failure names the output or the
op and opset."""

from __future__ import annotations

import numpy as np
import pytest

import sonnx.autograd as ag
from sonnx.errors import ExportError
from sonnx.onnx.exporter import to_onnx
from tests.onnx.test_export_errors import data


def test_output_not_connected_to_the_inputs_names_the_output() -> None:
    x, other = data(2, 3), data(2, 3, name="other")
    with pytest.raises(
        ExportError, match=r"outputs\[1\] \(Relu, shape \(2, 3\)\) is not connected"
    ):
        to_onnx([x], [ag.relu(x), ag.relu(other)])


def test_leaf_output_that_is_not_an_input() -> None:
    x = data(2, 3)
    with pytest.raises(ExportError, match=r"outputs\[0\] \(stray, shape \(4,\)\) is not connected"):
        to_onnx([x], [data(4, name="stray")])


@pytest.mark.parametrize(
    ("build", "opset", "op"),
    [
        (lambda x: ag.bitcast(x, np.int32), 25, "BitCast"),
        (
            lambda x: ag.causal_conv_with_state(x, data(3, 1, 2, name=None)),
            26,
            "CausalConvWithState",
        ),
        (lambda x: ag.tensor_scatter(x, data(1, 3, 1, name=None)), 23, "TensorScatter"),
    ],
)
def test_op_missing_at_the_target_opset_names_op_and_opset(build, opset: int, op: str) -> None:
    x = data(1, 3, 4)
    y = build(x)
    y = y[0] if isinstance(y, tuple) else y
    with pytest.raises(ExportError, match=rf"{op}.*does not exist at opset {opset}"):
        to_onnx([x], [y], opset=opset)

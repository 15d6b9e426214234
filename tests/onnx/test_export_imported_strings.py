"""Export of an imported model with a string front end: the front end is written whole, in an
order the ONNX checker accepts even when the model listed it after the nodes reading it (which
onnxruntime and sonnx run), and onnxruntime runs the file as it runs the original, at lengths
other than the example's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import sonnx
from sonnx import layer
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.string_front_ends import OUTPUTS, front_end, in_onnxruntime, phonemes

ORDERS = pytest.mark.parametrize("appended", [False, True], ids=["in_order", "appended"])


def _assert_runs_as(written: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """``written`` passes the full ONNX checker and computes what ``original`` does."""
    onnx.checker.check_model(written, full_check=True)
    for count in (3, 9):
        x = phonemes(count)
        got, expected = in_onnxruntime(written, x), in_onnxruntime(original, x)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(g, e)


@ORDERS
def test_to_onnx_of_a_run_writes_the_front_end_whole(appended: bool) -> None:
    model = front_end(appended)
    rep = sonnx.prepare(model)
    x = Tensor(data=phonemes(6), requires_grad=False)
    exported = sonnx.to_onnx([x], rep.run([x]))
    assert [o.name for o in exported.graph.output] == OUTPUTS
    assert sorted(n.name for n in exported.graph.node) == sorted(n.name for n in model.graph.node)
    _assert_runs_as(exported, model)


@ORDERS
def test_the_current_model_is_valid_onnx(appended: bool) -> None:
    model = front_end(appended)
    current = sonnx.prepare(model).current_model()
    assert current.graph.node[0].name == "encode"
    _assert_runs_as(current, model)


def test_layers_appended_to_a_front_end_listed_late_export_after_it() -> None:
    class Scored(sonnx.SONNXModel):
        def __init__(self, model: onnx.ModelProto) -> None:
            super().__init__(model)
            self.score = layer.Linear(2)

        def forward(self, x: Tensor) -> Tensor:
            return self.score(super().forward(x)[0])

    net = Scored(front_end(appended=True))
    x = Tensor(data=phonemes(5), requires_grad=False)
    net.compile([x], is_train=False, use_graph=False)
    expected = to_numpy(net(x))
    exported = net.to_onnx(None, [x])
    onnx.checker.check_model(exported, full_check=True)
    (got,) = in_onnxruntime(exported, phonemes(5))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

"""The graph input names given to ``to_onnx`` are the names written, also where an imported
model already uses them (issue 47 item 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import sonnx
from sonnx import layer, model, tensor

X = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32)


class ConvNet(model.Model):
    """A first layer that is not a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(3)

    def forward(self, x):
        return self.fc(self.flatten(self.conv(x)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ConvNet written with its input named ``x``."""
    x = tensor.from_numpy(X)
    net = ConvNet()
    net.compile([x], is_train=False)
    path = tmp_path_factory.mktemp("net") / "net.onnx"
    net.to_onnx(str(path), [x], input_names=["x"], output_names=["y"])
    return path


def _inputs_and_ops(path: Path) -> tuple[list[str], list[str]]:
    graph = onnx.load(str(path)).graph
    return [i.name for i in graph.input], [n.op_type for n in graph.node]


def test_a_conv_net_writes_the_name_given(exported: Path) -> None:
    names, ops = _inputs_and_ops(exported)
    assert names == ["x"] and ops[0] == "Conv"
    session = ort.InferenceSession(str(exported), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]


def test_re_exporting_an_imported_model_under_its_own_input_name(exported, tmp_path) -> None:
    rep = sonnx.prepare(str(exported))
    x = tensor.from_numpy(X)
    path = sonnx.save(sonnx.to_onnx([x], rep.run([x]), input_names=["x"]), tmp_path / "r.onnx")
    names, ops = _inputs_and_ops(path)
    assert names == ["x"] and ops == _inputs_and_ops(exported)[1]  # no Identity joins x
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        session.run(None, {"x": X})[0], tensor.to_numpy(rep.run([X])[0]), rtol=1e-5, atol=1e-6
    )


def test_a_name_an_imported_tensor_holds_goes_to_the_input(exported, tmp_path) -> None:
    rep = sonnx.prepare(str(exported))
    inner = rep.model.graph.node[0].output[0]  # the Conv's output tensor
    x = tensor.from_numpy(X)
    model_proto = sonnx.to_onnx([x], rep.run([x]), input_names=[inner])
    assert [i.name for i in model_proto.graph.input] == [inner]
    assert inner not in model_proto.graph.node[-1].output
    path = sonnx.save(model_proto, tmp_path / "renamed.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.run(None, {inner: X})[0].shape == (2, 3)

"""The files the documentation's code assumes (see :mod:`tests.docs.pages`), made once per
session for the tests that run the pages' python and shell blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sonnx import layer, model, tensor


class _SmallCNN(model.Model):
    """The README quick start's network, for pages that start from a ``model.onnx``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(8, 3, padding=1)
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2, 2)
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(10)

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        return self.fc(self.flatten(self.pool(self.relu(self.conv(x)))))


@pytest.fixture(scope="session")
def model_onnx(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    net = _SmallCNN()
    x = tensor.from_numpy(np.zeros((2, 1, 28, 28), np.float32))
    net.compile([x], is_train=False)
    path = tmp_path_factory.mktemp("fixture") / "model.onnx"
    net.to_onnx(path, [x], input_names=["input"], output_names=["logits"])
    return path.read_bytes()


@pytest.fixture(scope="session")
def tiny_llm() -> Path:
    from tests.genai_builds import build

    return build("llama", "fp32")

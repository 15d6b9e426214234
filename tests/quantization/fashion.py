"""A depthwise-separable CNN trained in torch on real Fashion-MNIST and exported with
``torch.onnx``, with the accuracy helpers the QAT tests use (sonnx and onnxruntime).

Trained once per test session: one epoch of 12,000 training images (about 20 s on 2 cores);
accuracy is measured on the first 2,000 test images.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from sonnx import autograd, opt, tensor
from sonnx.data.mnist import FASHION_MNIST_DIR, load_idx_directory
from sonnx.testing import torch_models as tm

TRAIN, TEST, BATCH = 12000, 2000, 100


class SeparableNet(nn.Module):
    """Conv+BN+ReLU and MaxPool, a depthwise-separable block (depthwise Conv+BN+ReLU,
    pointwise Conv+BN+ReLU) and MaxPool, then Flatten and Linear: a MobileNet in miniature."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, 1, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).flatten(1))


@dataclass(frozen=True)
class Fashion:
    """The exported float model and the data it was trained and is measured on."""

    model: onnx.ModelProto
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    def calibration(self, batches: int = 4) -> list[dict[str, np.ndarray]]:
        return [{"x": self.train_x[i * BATCH : (i + 1) * BATCH]} for i in range(batches)]


@functools.cache
def fashion() -> Fashion:
    """The trained, exported network (BatchNorm kept, so that ``prepare_qat`` folds it)."""
    data = load_idx_directory(FASHION_MNIST_DIR, "fashion-mnist")
    train_x, train_y = data.train_x[:TRAIN], data.train_y[:TRAIN]
    torch.manual_seed(0)
    net = SeparableNet()
    sgd = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.from_numpy(train_x), torch.from_numpy(train_y)
    for i in range(0, TRAIN, BATCH):
        sgd.zero_grad()
        nn.functional.cross_entropy(net(x[i : i + BATCH]), y[i : i + BATCH]).backward()
        sgd.step()
    model = tm.export(net, (x[:1],), 13, ["x"], keep_batchnorm=True)
    return Fashion(model, train_x, train_y, data.test_x[:TEST], data.test_y[:TEST])


def predictions(rep: Any, images: np.ndarray) -> np.ndarray:
    """sonnx's class predictions, in inference."""
    out = [tensor.to_numpy(rep.run([images[i : i + 500]])[0]) for i in range(0, len(images), 500)]
    return np.concatenate(out).argmax(1)


def ort_predictions(model: onnx.ModelProto, images: np.ndarray) -> np.ndarray:
    """onnxruntime's class predictions, with its default optimizations (its int8 kernels)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"x": images})[0].argmax(1)


def train_epoch(rep: Any, data: Fashion, lr: float = 0.01) -> None:
    """One epoch of SGD with momentum over the training images, sonnx's way."""
    sgd = opt.SGD(lr=lr, momentum=0.9)
    autograd.training = True
    try:
        for i in range(0, len(data.train_x), BATCH):
            out = rep.run([tensor.from_numpy(data.train_x[i : i + BATCH])])[0]
            label = tensor.from_numpy(data.train_y[i : i + BATCH].astype(np.int32))
            sgd(autograd.softmax_cross_entropy(out, label))
    finally:
        autograd.training = False

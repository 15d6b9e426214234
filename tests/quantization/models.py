"""The float models the quantization tests quantize, their calibration feeds, and
onnxruntime's ``quantize_static`` on them as the reference."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from torch import nn

from sonnx.testing import torch_models as tm

ORT_METHODS = {
    "minmax": CalibrationMethod.MinMax,
    "percentile": CalibrationMethod.Percentile,
    "entropy": CalibrationMethod.Entropy,
}


class DepthwiseNet(nn.Module):
    """A MobileNet-like block: Conv+BN, ReLU, depthwise Conv+BN, ReLU6 (a Clip), pointwise
    Conv with bias, ReLU, MaxPool, global average pool, Flatten, Linear (a Gemm)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 1, 1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU6(),
            nn.Conv2d(8, 16, 1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.fc(y.flatten(1))


def depthwise_cnn() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """The exported net (BatchNorm folded into the convolutions) and 3 feeds of 2 images."""
    torch.manual_seed(0)
    net = DepthwiseNet()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    model = tm.export(net, (torch.randn(1, 3, 16, 16),), 13, ["x"])
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
    return model, feeds


def tiny_bert() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """One-layer TinyBert at opset 17 (MatMul, Add, Softmax, LayerNormalization, Erf-GELU,
    Gather embeddings) and 3 feeds of 2 sequences of 8 tokens."""
    torch.manual_seed(0)
    ids, mask = tm.bert_inputs(2, 8)
    model = tm.export(tm.TinyBert(layers=1), (ids, mask), 17, ["input_ids", "attention_mask"])
    feeds = []
    for seed in range(3):
        ids, mask = tm.bert_inputs(2, 8, seed=seed)
        feeds.append({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    return model, feeds


class OperatorMix(nn.Module):
    """Pads (zero, reflect, constant 1), Concat, Split, Sigmoid, Mul, Add, AveragePool,
    Transpose, Reshape and MatMul with a constant, around one Conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.weight = nn.Parameter(torch.randn(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        zero = nn.functional.pad(y, (1, 1, 1, 1))
        reflect = nn.functional.pad(y, (1, 1, 1, 1), mode="reflect")
        one = nn.functional.pad(y, (1, 1, 1, 1), value=1.0)
        z = torch.cat([zero, reflect * torch.sigmoid(one)], 1)
        a, b = torch.split(z, 4, 1)
        z = nn.functional.avg_pool2d(a + b, 2)
        z = z.transpose(1, 3).reshape(z.shape[0], -1, 4)
        return z @ self.weight


def operator_mix() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """The exported :class:`OperatorMix` and 3 feeds of 2 images."""
    torch.manual_seed(0)
    model = tm.export(OperatorMix(), (torch.randn(1, 3, 14, 14),), 13, ["x"])
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 3, 14, 14)).astype(np.float32)} for _ in range(3)]
    return model, feeds


class Reader(CalibrationDataReader):
    """onnxruntime's data reader over a list of feeds."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def ort_quantized(
    model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], tmp: Path, **options: Any
) -> onnx.ModelProto:
    """onnxruntime's QDQ model for ``options`` (sonnx's spellings: strings for the types and
    the method). onnxruntime gets a copy: it moves a ModelProto's weights to external data."""
    names = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8, "int4": QuantType.QInt4}
    names |= {"uint4": QuantType.QUInt4, "int16": QuantType.QInt16, "uint16": QuantType.QUInt16}
    for key in ("activation_type", "weight_type"):
        if key in options:
            options[key] = names[options[key]]
    if "calibrate_method" in options:
        options["calibrate_method"] = ORT_METHODS[options["calibrate_method"]]
    path = tmp / "ort.onnx"
    quantize_static(
        copy.deepcopy(model), path, Reader(feeds), quant_format=QuantFormat.QDQ, **options
    )
    return onnx.load(path)

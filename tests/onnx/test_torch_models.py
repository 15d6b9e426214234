"""Models exported from PyTorch at opsets 9, 11, 13 and 17 run in sonnx as in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import sonnx
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm

OPSETS = [9, 11, 13, 17]


def _compare(model, feeds: dict[str, np.ndarray]) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    got = sonnx.prepare(model).run(feeds)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(to_numpy(g), e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", OPSETS)
def test_small_cnn_matches_onnxruntime_at_batch_1_and_8(opset: int) -> None:
    torch.manual_seed(opset)
    model = tm.export(tm.SmallCNN(), (torch.randn(2, 3, 16, 16),), opset, ["x"])
    rep = sonnx.prepare(model)
    for batch in (1, 8):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
        _compare(model, {"x": x})
        assert rep.run([x])[0].shape == (batch, 10)


@pytest.mark.parametrize("opset", OPSETS)
def test_bert_style_encoder_matches_onnxruntime_at_batch_1_and_8(opset: int) -> None:
    torch.manual_seed(opset)
    ids, mask = tm.bert_inputs(2)
    model = tm.export(tm.TinyBert(), (ids, mask), opset, ["input_ids", "attention_mask"])
    for batch in (1, 8):
        ids, mask = tm.bert_inputs(batch, seed=batch)
        _compare(model, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})


def test_resnet18_and_mobilenet_v2_styles_match_onnxruntime() -> None:
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32)
    for module in (tm.ResNet18(width=16, num_classes=10), tm.MobileNetV2(num_classes=10)):
        model = tm.export(module, (torch.from_numpy(x),), 13, ["x"])
        _compare(model, {"x": x})

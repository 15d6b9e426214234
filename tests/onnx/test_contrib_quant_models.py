"""Models written by onnxruntime's quantization tools from small torch modules run in sonnx as
in onnxruntime: MatMulNBitsQuantizer (MatMulNBits)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
from torch import nn

from sonnx.autograd.contrib_quant import MatMulNBits
from sonnx.testing import torch_models as tm
from tests.contrib_quant_helpers import both

RNG = np.random.default_rng(0)


def _mlp() -> onnx.ModelProto:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 32), nn.Tanh())
    # A 3-D input (batch, tokens, features): torch writes MatMul, which the quantizer rewrites.
    return tm.export(module, (torch.randn(2, 3, 64),), 17, ["x"])


def _layers(model: onnx.ModelProto) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Each MatMulNBits's dequantized weight [N, K], the bias of the Add after it, and its
    block size."""
    init = {
        t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer
    }
    nodes = list(model.graph.node)
    layers = []
    for i, node in enumerate(nodes):
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        op = MatMulNBits(**attrs)
        b, scales, *rest = (init[name] if name else None for name in node.input[1:])
        zero_points = rest[0] if rest else None
        w = op.dequantize(b, scales, zero_points, None, k=attrs["K"], n=attrs["N"]).numpy()
        bias = next(init[n] for n in nodes[i + 1].input if n in init).numpy()
        layers.append((w, bias, attrs["block_size"]))
    return layers


def _mlp_forward(model: onnx.ModelProto, x: np.ndarray, int8_inputs: bool) -> np.ndarray:
    """The quantized MLP in NumPy from sonnx's dequantized weights; ``int8_inputs``: each
    layer's input rounded to int8 as onnxruntime does at accuracy_level 4 (per block of K, a
    step of the block's largest magnitude / 127)."""
    a = x
    layers = _layers(model)
    for i, (w, bias, block) in enumerate(layers):
        if int8_inputs:
            blocks = a.reshape(*a.shape[:-1], -1, block)
            step = np.abs(blocks).max(-1, keepdims=True) / 127
            step = np.where(step == 0, 1, step)
            a = (np.round(blocks / step) * step).reshape(a.shape)
        a = a @ w.T + bias
        a = np.tanh(a) if i == len(layers) - 1 else np.maximum(a, 0)
    return a


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_matmul_nbits_quantizer_mlp_matches_onnxruntime(symmetric, block_size, accuracy_level):
    """At accuracy_level 0 both compute in float32 (1e-4 relative). At level 4 onnxruntime
    rounds each MatMulNBits input to int8 and sonnx computes in float: onnxruntime's output is
    the MLP with that rounding (:func:`_mlp_forward` on sonnx's dequantized weights), and
    sonnx's differs from it, element by element, by no more than the rounding moves it."""
    quantizer = MatMulNBitsQuantizer(
        _mlp(), bits=4, block_size=block_size, is_symmetric=symmetric, accuracy_level=accuracy_level
    )
    quantizer.process()
    model = quantizer.model.model
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("MatMulNBits") == 2, ops
    x = RNG.standard_normal((5, 3, 64)).astype(np.float32)
    (expected,), (got,) = both(model, {"x": x})
    if accuracy_level == 4:
        rounded = _mlp_forward(model, x, int8_inputs=True)
        np.testing.assert_allclose(expected, rounded, rtol=1e-4, atol=1e-5)
        rounding = np.abs(rounded - _mlp_forward(model, x, int8_inputs=False))
        assert np.all(np.abs(got - expected) <= rounding + 1e-5)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

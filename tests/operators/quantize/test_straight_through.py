"""DynamicQuantizeMatMul passes its float input's gradient straight through the input's
dynamic quantization: ``dy @ dequantize(B).T``, the value unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx.operators.quantize.contrib_integer import DynamicQuantizeMatMul

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(
    "b_dtype, per_column", [(np.int8, False), (np.uint8, True)], ids=["int8", "uint8_per_column"]
)
def test_dynamic_quantize_matmul_gradients_pass_straight_through(b_dtype, per_column) -> None:
    """The product's value is the same with or without a gradient; A's gradient is the
    output's times the dequantized weight's transpose (float64 here, from the codes), the
    bias's the output's summed over rows."""
    info = np.iinfo(b_dtype)
    b = torch.from_numpy(RNG.integers(info.min, info.max + 1, (7, 5)).astype(b_dtype))
    shape = (5,) if per_column else ()
    scale = torch.from_numpy(RNG.uniform(0.01, 0.05, shape).astype(np.float32))
    zero_point = torch.from_numpy(RNG.integers(0, 9, shape).astype(b_dtype))
    a0 = torch.from_numpy(RNG.standard_normal((2, 3, 7)).astype(np.float32))
    bias0 = torch.from_numpy(RNG.standard_normal(5).astype(np.float32))
    op = DynamicQuantizeMatMul()
    plain = op.forward(a0, b, scale, zero_point, bias0)
    a, bias = a0.clone().requires_grad_(True), bias0.clone().requires_grad_(True)
    y = op.forward(a, b, scale, zero_point, bias)
    assert torch.equal(y, plain)
    weighting = torch.from_numpy(RNG.standard_normal(tuple(y.shape)).astype(np.float32))
    grad_a, grad_bias = torch.autograd.grad((y * weighting).sum(), [a, bias])
    dequantized = (b.numpy() - zero_point.numpy().astype(np.float64)) * scale.numpy()
    expected = weighting.numpy().astype(np.float64) @ dequantized.T
    np.testing.assert_allclose(grad_a.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad_bias.numpy(), weighting.numpy().sum((0, 1)), rtol=1e-5)

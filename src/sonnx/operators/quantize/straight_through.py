"""The straight-through estimator for products of dynamically quantized activations.

``quantize_dynamic`` rounds a float activation to uint8 codes from its own range
(DynamicQuantizeLinear) before each int8 product (DynamicQuantizeMatMul, MatMulInteger,
QAttention). The rounding is a step function, and the codes are integers, which carry no
gradient: without an estimator, no float layer before such a product trains. The estimator
passes the gradient through the rounding as if the activation were not rounded, so the
activation's gradient is the output's gradient times the dequantized weight's transpose (as
:func:`~sonnx.operators.quantize.contrib_nbits.int8_blocks` does for MatMulNBits' input). The
forward value stays the integer product's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def dequantized_weight(
    b: torch.Tensor, b_scale: torch.Tensor, b_zero_point: torch.Tensor | None
) -> torch.Tensor:
    """``(B - b_zero_point) * b_scale`` in float32.

    :param b: the int8 or uint8 weight [K, N].
    :param b_scale: its scale: one value, or one per column ([N]).
    :param b_zero_point: its zero point, likewise (None: 0).
    :returns: the float32 weight [K, N].
    """
    # The forward that computed the product has already checked the shapes.
    shifted = b.float() if b_zero_point is None else b.float() - b_zero_point.float().reshape(-1)
    return shifted * b_scale.float().reshape(-1)


class _StraightThrough(torch.autograd.Function):
    """``y`` as it is, whose gradient to ``a`` is that of ``a @ dequantize()``; ``y``'s own
    graph (a float bias added to it) gets the output's gradient unchanged. The weight is
    dequantized again in backward, so no float copy of it is held between the passes."""

    @staticmethod
    def forward(
        ctx: Any, a: torch.Tensor, y: torch.Tensor, dequantize: Callable[[], torch.Tensor]
    ) -> torch.Tensor:
        ctx.dequantize = dequantize
        return y.view_as(y)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        return torch.matmul(grad, ctx.dequantize().to(grad.dtype).t()), grad, None


def straight_through(
    a: torch.Tensor,
    y: torch.Tensor,
    b: torch.Tensor,
    b_scale: torch.Tensor,
    b_zero_point: torch.Tensor | None,
) -> torch.Tensor:
    """``y``, the product of ``a``'s dynamically quantized codes with B, made differentiable
    in ``a``: its gradient is ``dy @ dequantize(B).T``. The value is ``y``'s, bit for bit.

    :param a: the float activation [..., K] that was quantized (nothing changes unless it
        needs a gradient).
    :param y: the product computed from its codes [..., N].
    :param b: the quantized weight [K, N].
    :param b_scale: its scale: one value, or one per column.
    :param b_zero_point: its zero point, likewise (None: 0).
    :returns: ``y``, with ``a``'s gradient defined.
    """
    if not (a.requires_grad and torch.is_grad_enabled()):
        return y
    return _StraightThrough.apply(a, y, lambda: dequantized_weight(b, b_scale, b_zero_point))

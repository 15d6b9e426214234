"""QLinearConv: a convolution of linearly quantized int8/uint8 tensors, requantized.

The integer accumulation ``sum((x - x_zp) * (w - w_zp)) + B`` is the float convolution of the
zero-point-shifted operands (Conv's own machinery, run in float64, which holds every int32 sum
exactly); multiplying it by ``x_scale * w_scale / y_scale`` is the convolution of the
dequantized operands expressed in y's scale. That multiplier is formed in the scales' float32,
as onnxruntime and ``onnx.reference`` do, so ties round the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import BadInputError
from sonnx.operators.conv.conv import conv_forward
from sonnx.operators.conv.windows import require_opset, user_ints, user_pads
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["QLinearConv", "qlinear_conv"]

_QUANTIZED = (torch.int8, torch.uint8)


def _check_quantized(name: str, t: torch.Tensor) -> None:
    if t.dtype not in _QUANTIZED:
        raise BadInputError(
            f"QLinearConv: input {name} must be int8 or uint8, received {dtype_name(t.dtype)}"
        )


def _scalar(name: str, t: torch.Tensor) -> torch.Tensor:
    if t.numel() != 1:
        raise BadInputError(
            f"QLinearConv: input {name} must be a scalar (per-tensor quantization), "
            f"received shape {tuple(t.shape)}"
        )
    return t.reshape(())


def _per_channel(name: str, t: torch.Tensor, channels: int, rank: int) -> torch.Tensor:
    """A scalar, or one value per output channel shaped to broadcast against W or Y."""
    if t.numel() == 1:
        return t.reshape(())
    if t.dim() != 1 or t.shape[0] != channels:
        raise BadInputError(
            f"QLinearConv: input {name} must be a scalar or a 1-D tensor of length {channels} "
            f"(one per output channel), received shape {tuple(t.shape)}"
        )
    return t.reshape(-1, *[1] * (rank - 1))


class QLinearConv(Operator):
    """ONNX QLinearConv: quantized x and w, their scales and zero points, y's scale and zero
    point, an optional int32 bias B (quantized with scale ``x_scale * w_scale``, zero point 0).

    w's scale and zero point may be per output channel. The result has y_zero_point's type,
    rounded half to even and saturated. Integer in and out, so not differentiable.
    """

    op_type = "QLinearConv"
    since_versions = (10,)
    output_shape = OutputShape.FROM_SHAPES
    parameterising_inputs = frozenset({1, 2, 4, 5, 6, 7})

    def forward(
        self,
        x: torch.Tensor,
        x_scale: torch.Tensor,
        x_zero_point: torch.Tensor,
        w: torch.Tensor,
        w_scale: torch.Tensor,
        w_zero_point: torch.Tensor,
        y_scale: torch.Tensor,
        y_zero_point: torch.Tensor,
        b: torch.Tensor | None = None,
    ) -> torch.Tensor:
        for name, t in (("x", x), ("w", w), ("y_zero_point", y_zero_point)):
            _check_quantized(name, t)
        for name, t, like in (("x_zero_point", x_zero_point, x), ("w_zero_point", w_zero_point, w)):
            if t.dtype != like.dtype:
                raise BadInputError(
                    f"QLinearConv: input {name} must have the type of {name[0]} "
                    f"({dtype_name(like.dtype)}), received {dtype_name(t.dtype)}"
                )
        if b is not None and b.dtype != torch.int32:
            raise BadInputError(
                f"QLinearConv: input B must be int32, received {dtype_name(b.dtype)}"
            )
        channels = w.shape[0] if w.dim() > 0 else 0
        xf = x.to(torch.float64) - _scalar("x_zero_point", x_zero_point).to(torch.float64)
        w_zp = _per_channel("w_zero_point", w_zero_point, channels, w.dim())
        wf = w.to(torch.float64) - w_zp.to(torch.float64)
        acc = conv_forward(self, xf, wf, None if b is None else b.to(torch.float64))
        scale = (
            _scalar("x_scale", x_scale)
            * _per_channel("w_scale", w_scale, channels, acc.dim() - 1)
            / _scalar("y_scale", y_scale)
        )
        y = torch.round(acc * scale.to(torch.float64)) + _scalar("y_zero_point", y_zero_point)
        info = torch.iinfo(y_zero_point.dtype)
        return y.clamp(info.min, info.max).to(y_zero_point.dtype)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        require_opset(g, self.op_type, 10)
        super().export(g, inputs, outputs)


def qlinear_conv(
    x: Tensor,
    x_scale: Tensor,
    x_zero_point: Tensor,
    W: Tensor,
    w_scale: Tensor,
    w_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
    b: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    group: int = 1,
) -> Tensor:
    """Quantized convolution of x (N, C, spatial...) with W (M, C/group, kernel...).

    ``padding`` is an int, one value per spatial axis, or ONNX-style begins then ends.

    :param x: the quantized (N, C, spatial...) input.
    :param x_scale: ``x``'s scale (a scalar).
    :param x_zero_point: ``x``'s zero point (a scalar of ``x``'s type).
    :param W: the quantized (M, C/group, kernel...) weights.
    :param w_scale: ``W``'s scale: a scalar or one per output channel (M,).
    :param w_zero_point: ``W``'s zero point, shaped as ``w_scale``.
    :param y_scale: the output's scale.
    :param y_zero_point: the output's zero point; its dtype is the output's.
    :param b: the int32 (M,) bias quantized with scale ``x_scale * w_scale``, or None.
    :param stride: the step: an int or one per spatial axis.
    :param padding: an int, one value per spatial axis, or begins then ends.
    :param dilation: the spacing of the kernel's taps: an int or one per spatial axis.
    :param group: the number of channel groups.
    :returns: the quantized (N, M, ...) output (ONNX QLinearConv).
    :raises BadInputError: the shapes or types of the inputs do not fit.
    """
    n = len(W.shape) - 2
    op = QLinearConv(
        strides=user_ints("qlinear_conv", "stride", stride, n),
        pads=user_pads("qlinear_conv", padding, n),
        dilations=user_ints("qlinear_conv", "dilation", dilation, n),
        group=group,
    )
    inputs = (x, x_scale, x_zero_point, W, w_scale, w_zero_point, y_scale, y_zero_point)
    return op(*inputs) if b is None else op(*inputs, b)

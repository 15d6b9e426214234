"""QLinearSoftmax as onnxruntime's CPU kernel computes it, in torch: the path without that
kernel (onnxruntime not installed, ``kernels="torch"``, another device).

onnxruntime does not quantize a float softmax. Per row it takes each code's distance ``d`` to
the row's largest code, looks up ``exp((d + shift) * x_scale)`` (computed in double, stored as
float32; ``shift`` keeps a row's sum below float32's largest value), sums a row in float32 in
order, and writes ``round(e * floor(1 / y_scale) / sum) + y_zero_point``, saturated to the
type. So X's zero point plays no part, and the output scale is rounded to a whole reciprocal,
as there. The float32 sum is taken in order for rows of up to 1024 codes (one add per code,
across rows); a longer row, or one of a size only known symbolically (graph mode), is summed
in float64 and rounded, which may move a code by one.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["table_softmax"]

#: onnxruntime's headroom below float32's largest value, in bits of the exponent (natural log).
_RESERVE = 5.0
#: The longest row summed in order.
_IN_ORDER = 1024


def table_softmax(
    x: torch.Tensor,
    x_scale: torch.Tensor,
    y_scale: torch.Tensor,
    y_zp: torch.Tensor | None,
    axis: int,
    opset: int,
) -> torch.Tensor:
    """The codes onnxruntime's QLinearSoftmax writes (see the module).

    :param x: uint8 or int8 codes.
    :param x_scale: X's scale, one element.
    :param y_scale: Y's scale, one element.
    :param y_zp: Y's zero point (X's type), or None for 0.
    :param axis: the softmax axis, non-negative.
    :param opset: the ``opset`` attribute: below 13, the axes from ``axis`` on are one row.
    :returns: Y, X's shape and type.
    """
    moved = x if opset < 13 else x.movedim(axis, -1)
    length = int(np.prod(x.shape[axis:])) if opset < 13 else x.shape[axis]
    rows = moved.reshape(-1, length).to(torch.int32)
    if rows.numel() == 0:
        return torch.empty_like(x)
    distance = (rows - rows.amax(dim=-1, keepdim=True)).double()
    scale = x_scale.reshape(()).double()
    headroom = torch.full((), float(np.finfo(np.float32).max), device=x.device) / length
    shift = (torch.log(headroom.double()) - _RESERVE).clamp(min=0.0) / scale
    exps = torch.exp((distance + shift) * scale).float()
    total = _row_sums(exps)
    reciprocal = torch.floor(1.0 / y_scale.reshape(()).float())
    codes = torch.round(exps * reciprocal / total).to(torch.int32)
    if y_zp is not None:
        codes = codes + y_zp.reshape(()).to(torch.int32)
    info = torch.iinfo(x.dtype)
    y = codes.clamp(info.min, info.max).to(x.dtype).reshape(moved.shape)
    return y if opset < 13 else y.movedim(-1, axis)


def _row_sums(exps: torch.Tensor) -> torch.Tensor:
    """Each row's float32 sum, [rows, 1], in order where the row is short and of known size."""
    length = exps.shape[-1]
    if not isinstance(length, int) or length > _IN_ORDER:
        return exps.double().sum(dim=-1, keepdim=True).float()
    total = exps[:, :1]
    for j in range(1, length):
        total = total + exps[:, j : j + 1]
    return total

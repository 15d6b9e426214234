"""Operators between masks and indices: OneHot (indices to a one-hot mask), NonZero (a mask
to the indices of its true elements) and Compress (the slices a 1-D mask selects). The gathers
and scatters are in :mod:`sonnx.operators.indexing.gather_scatter`.

Compress is differentiable with respect to the tensor it selects from; OneHot moves its
``values`` pair, and NonZero's output is integer indices, which carry no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sonnx.engine.host_values import host
from sonnx.engine.memory_guard import check_shape
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    Input,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.operators.indexing.common import (
    index_tensor,
    moved,
    moved_pair,
    norm_axis,
    signed_bits,
)
from sonnx.tensor import Tensor

__all__ = ["Compress", "NonZero", "OneHot", "compress", "nonzero", "onehot"]


class OneHot(Operator):
    """``values[1]`` where ``indices`` (negatives wrapped by ``depth``) hits the new ``axis``
    position and ``values[0]`` elsewhere; out-of-range indices give an all-off row."""

    op_type = "OneHot"
    since_versions = (9, 11, 28)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({1})
    # depth, and the (off, on) values.
    parameterising_inputs = frozenset({1, 2})

    def forward(
        self, indices: torch.Tensor, depth: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        if depth.numel() != 1 or values.numel() != 2:
            raise BadInputError(
                f"OneHot: depth must be a scalar and values a pair [off, on], received depth "
                f"shape {tuple(depth.shape)} and values shape {tuple(values.shape)}"
            )
        n = int(host(depth).reshape(-1)[0].item())
        if n < 1:
            raise BadInputError(f"OneHot: depth must be positive, received {n}")
        axis = norm_axis(self.op_type, self.attr("axis"), indices.dim() + 1)
        out = [*indices.shape[:axis], n, *indices.shape[axis:]]
        check_shape("OneHot: output", out, values.dtype, indices.device)
        idx = indices.to(torch.int64)
        idx = torch.where(idx < 0, idx + n, idx).unsqueeze(axis)
        classes = torch.arange(n, device=indices.device).view(n, *[1] * (indices.dim() - axis))
        off, on = values.reshape(2)
        return moved_pair(lambda a, b: torch.where(idx == classes, b, a), off, on)


class NonZero(Operator):
    """The indices of the non-zero elements, as an int64 ``(rank, count)`` tensor."""

    op_type = "NonZero"
    since_versions = (9, 13)
    output_shape = OutputShape.VALUE_SIZED

    singa_functions = (
        SingaFunction(
            "nonzero",
            (
                "The indices of the non-zero elements of ``x``, shape ``(rank, count)`` (ONNX "
                "NonZero)."
            ),
            inputs=(Input("x", "any tensor."),),
            returns="an int64 (rank, count) tensor.",
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A 0-d input is treated as 1-D, as numpy.nonzero (ONNX's reference) does.
        x = signed_bits(x).reshape(1) if x.dim() == 0 else signed_bits(x)
        return torch.nonzero(x).T.contiguous()


class Compress(Operator):
    """The slices along ``axis`` (of the flattened input when axis is unset) where the 1-D
    ``condition`` is true (``numpy.compress``: a shorter condition selects a prefix)."""

    op_type = "Compress"
    since_versions = (9, 11, 28)
    output_shape = OutputShape.VALUE_SIZED
    moves_elements_only = True

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        axis = self.attr("axis")
        if axis is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = norm_axis(self.op_type, axis, x.dim())
        if condition.dim() != 1:
            raise BadInputError(
                f"Compress: input condition must be 1-D, received shape {tuple(condition.shape)}"
            )
        keep = torch.nonzero(condition.to(torch.bool)).reshape(-1)
        if keep.numel() and int(keep[-1]) >= x.shape[axis]:
            raise BadInputError(
                f"Compress: input condition selects index {int(keep[-1])} beyond the size "
                f"{x.shape[axis]} of axis {axis}"
            )
        return moved(lambda d: torch.index_select(d, axis, keep), x)


# ---- SINGA-style functions --------------------------------------------------------------------


def onehot(
    axis: int,
    indices: Tensor,
    depth: int | Tensor,
    values: Sequence[Any] | Tensor,
) -> Tensor:
    """One-hot encode ``indices`` with ``depth`` classes along a new ``axis``; ``values`` is
    ``[off_value, on_value]`` (SINGA's argument order); Python floats give float32 values.

    :param axis: where the new class axis goes (-1: last).
    :param indices: the class of each entry (negatives wrap by ``depth``; out of range gives an
        all-off row).
    :param depth: the number of classes: an int or a scalar tensor.
    :param values: ``[off_value, on_value]``, a pair or a 2-element tensor.
    :returns: a tensor of ``indices``' shape with the class axis inserted, ``values``' dtype.
    :raises BadInputError: ``depth`` is not a positive scalar or ``values`` is not a pair.
    """
    if not isinstance(depth, Tensor):
        depth = index_tensor(depth, indices)
    if not isinstance(values, Tensor):
        array = np.asarray(values)
        if array.dtype == np.float64:  # Python floats: sonnx's default float type, as Tensor()
            array = array.astype(np.float32)
        values = Tensor(data=array, device=indices.device, requires_grad=False)
    return OneHot(axis=axis)(indices, depth, values)


def compress(x: Tensor, condition: Tensor | Sequence[bool], axis: int | None = None) -> Tensor:
    """The slices of ``x`` along ``axis`` where ``condition`` holds (ONNX Compress).

    :param x: the tensor to select from.
    :param condition: a 1-D bool tensor or sequence (a shorter one selects from a prefix).
    :param axis: the axis to select along; None for the flattened ``x``.
    :returns: the selected slices.
    :raises BadInputError: ``condition`` is not 1-D or selects beyond the axis' size.
    """
    if not isinstance(condition, Tensor):
        condition = Tensor(
            data=np.asarray(condition, dtype=bool), device=x.device, requires_grad=False
        )
    return Compress(axis=axis)(x, condition)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def nonzero(x: Tensor) -> Tensor:
    """The indices of the non-zero elements of ``x``, shape ``(rank, count)`` (ONNX NonZero).

    :param x: any tensor.
    :returns: an int64 (rank, count) tensor.
    """
    return NonZero()(x)

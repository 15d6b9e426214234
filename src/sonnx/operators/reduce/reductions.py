"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp, ReduceSumSquare.

Every class follows the modern ONNX form, where ``axes`` is an optional int64 input (ReduceSum
from opset 13, the others from 18): no axes (or an empty list) reduces everything, unless
``noop_with_empty_axes`` makes that the identity. Older models, whose ``axes`` is an attribute,
are converted to this form on import, and :meth:`export` writes the attribute form back for
older opsets.

Reducing over an empty set gives the reduction's identity element (0 for sums, 1 for the
product, -inf for max / log-sums, +inf for min), as ONNX specifies. Integer inputs keep their
dtype (sums wrap like ONNX Runtime's, means truncate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.errors import BadInputError
from sonnx.operators.indexing.common import (
    SIGNED_TWIN,
    constant_ints,
    from_order_key,
    norm_axes,
    order_key,
    require_opset,
    restore_bits,
    signed_bits,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "reduce_l1",
    "reduce_l2",
    "reduce_log_sum",
    "reduce_log_sum_exp",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
    "reduce_sum_square",
]


def _is_float(x: torch.Tensor) -> bool:
    return x.dtype.is_floating_point or x.dtype.is_complex


def _wide(x: torch.Tensor) -> torch.Tensor:
    """Integers as float64 for a computation that needs a float (sqrt, log, mean)."""
    return x if _is_float(x) else x.to(torch.float64)


def _sum(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """Sum keeping the dtype (torch widens ints to int64); unsigned via the signed twin."""
    bits = signed_bits(x)
    return restore_bits(torch.sum(bits, dim=dims, keepdim=True, dtype=bits.dtype), x.dtype)


# The only reductions defined for booleans (from opset 20).
_TAKES_BOOL = ("ReduceMax", "ReduceMin")


class Reduction(Operator):
    """Common machinery: resolve the axes, reduce with ``keepdims=True``, then drop axes.

    A subclass implements :meth:`reduce` for the (non-empty) list of axes to reduce.
    """

    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({1})
    # The axes (an input from ReduceSum-13 and the others' 18).
    parameterising_inputs = frozenset({1})

    input_axes_since: ClassVar[int] = 18

    def forward(self, data: torch.Tensor, axes: torch.Tensor | None = None) -> torch.Tensor:
        if data.dtype == torch.bool and self.op_type not in _TAKES_BOOL:
            raise BadInputError(f"{self.op_type}: input data must be numeric, received torch.bool")
        given = host_ints(axes) or []
        if not given and self.attr("noop_with_empty_axes"):
            return data.clone()
        rank = data.dim()
        dims = norm_axes(self.op_type, given, rank) if given else list(range(rank))
        if rank == 0:
            return self.reduce(data.reshape(1), [0]).reshape(())
        out = self.reduce(data, dims)
        return out if self.attr("keepdims") else out.squeeze(dims)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        """Reduce ``x`` over ``dims`` keeping them as size-1 axes."""
        raise NotImplementedError

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """The input form from :attr:`input_axes_since`, the attribute form before it."""
        data = self.inputs[0]
        if data is not None and data.dtype == torch.bool and self.op_type in _TAKES_BOOL:
            require_opset(g, self.op_type, 20, "a boolean input")
        noop = self.attr("noop_with_empty_axes")
        keepdims = self.attr("keepdims")
        if g.opset >= self.input_axes_since:
            g.add_node(self.op_type, inputs, outputs, keepdims=keepdims, noop_with_empty_axes=noop)
            return
        axes = constant_ints(self.op_type, _at(self.inputs, 1), "axes", g.opset) or []
        if not axes and noop:
            g.add_node("Identity", inputs[:1], outputs)
            return
        attrs: dict[str, Any] = {"keepdims": keepdims}
        if axes:
            attrs["axes"] = axes
        g.add_node(self.op_type, inputs[:1], outputs, **attrs)


def _at(items: Sequence[Tensor | None], i: int) -> Tensor | None:
    return items[i] if i < len(items) else None


class ReduceSum(Reduction):
    """ONNX ``ReduceSum``: sum over the axes input (all axes when absent)."""

    op_type = "ReduceSum"
    since_versions = (13,)
    input_axes_since = 13

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        return _sum(x, dims)


class ReduceSumSquare(Reduction):
    """ONNX ``ReduceSumSquare``: sum of squares over the axes input (all axes when absent)."""

    op_type = "ReduceSumSquare"
    since_versions = (18,)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        return _sum(_restore_mul(x, x), dims)


def _restore_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a * b`` in ``a``'s dtype (wrapping for unsigned types, like ONNX Runtime)."""
    return restore_bits(signed_bits(a) * signed_bits(b), a.dtype)


class ReduceMean(Reduction):
    """ONNX ``ReduceMean``: mean (integers truncate) over the axes input (all axes when absent)."""

    op_type = "ReduceMean"
    since_versions = (18,)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        if _is_float(x):
            return torch.mean(x, dim=dims, keepdim=True)
        return torch.mean(x.to(torch.float64), dim=dims, keepdim=True).trunc().to(x.dtype)


class ReduceProd(Reduction):
    """ONNX ``ReduceProd``: product over the axes input (all axes when absent)."""

    op_type = "ReduceProd"
    since_versions = (18,)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        # torch.prod takes one dimension at a time; prod of an empty set is 1.
        out = signed_bits(x)
        for d in dims:
            out = torch.prod(out, dim=d, keepdim=True, dtype=out.dtype)
        return restore_bits(out, x.dtype)


class _Extreme(Reduction):
    """ReduceMax / ReduceMin on an order-preserving key; empty sets give the identity."""

    largest: ClassVar[bool] = True

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        key = order_key(x)
        if any(x.shape[d] == 0 for d in dims):
            shape = [1 if d in dims else n for d, n in enumerate(x.shape)]
            return torch.full(
                shape, _identity(x.dtype, self.largest), dtype=x.dtype, device=x.device
            )
        pick = torch.amax if self.largest else torch.amin
        return from_order_key(pick(key, dim=dims, keepdim=True), x.dtype)


def _identity(dtype: torch.dtype, largest: bool) -> Any:
    """The identity of max (the lowest value) or of min (the highest value) for ``dtype``."""
    if dtype == torch.bool:
        return not largest
    if dtype.is_floating_point:
        return -float("inf") if largest else float("inf")
    info = torch.iinfo(dtype)
    return info.min if largest else info.max


class ReduceMax(_Extreme):
    """ONNX ``ReduceMax``: maximum over the axes input (all axes when absent)."""

    op_type = "ReduceMax"
    since_versions = (18, 20)
    largest = True


class ReduceMin(_Extreme):
    """ONNX ``ReduceMin``: minimum over the axes input (all axes when absent)."""

    op_type = "ReduceMin"
    since_versions = (18, 20)
    largest = False


class ReduceL1(Reduction):
    """ONNX ``ReduceL1``: sum of absolute values over the axes input (all axes when absent)."""

    op_type = "ReduceL1"
    since_versions = (18,)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        magnitude = x if x.dtype in SIGNED_TWIN or x.dtype == torch.uint8 else x.abs()
        return _sum(magnitude, dims)


class ReduceL2(Reduction):
    """ONNX ``ReduceL2``: euclidean norm over the axes input (all axes when absent)."""

    op_type = "ReduceL2"
    since_versions = (18,)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        # vector_norm's gradient is 0 (not NaN) where the norm is 0.
        norm = torch.linalg.vector_norm(_wide(x), ord=2, dim=dims, keepdim=True)
        return norm if _is_float(x) else norm.trunc().to(x.dtype)


class ReduceLogSum(Reduction):
    """ONNX ``ReduceLogSum``: ``log(sum(x))`` over the axes input (all axes when absent)."""

    op_type = "ReduceLogSum"
    since_versions = (18, 28)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        out = torch.log(torch.sum(_wide(x), dim=dims, keepdim=True))
        return out if _is_float(x) else out.trunc().to(x.dtype)


class ReduceLogSumExp(Reduction):
    """ONNX ``ReduceLogSumExp``: ``log(sum(exp(x)))`` over the axes input, computed stably."""

    op_type = "ReduceLogSumExp"
    since_versions = (18, 28)

    def reduce(self, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        # torch.logsumexp subtracts the maximum first, so large inputs do not overflow.
        out = torch.logsumexp(_wide(x), dim=dims, keepdim=True)
        return out if _is_float(x) else out.trunc().to(x.dtype)


# ---- SINGA-style functions --------------------------------------------------------------------


def _apply(
    cls: type[Reduction], x: Tensor, axes: Sequence[int] | int | None, keepdims: int
) -> Tensor:
    """Record ``cls`` with the Python ``axes`` as a constant int64 input (the modern form)."""
    if axes is None:
        return cls(keepdims=keepdims)(x)
    if isinstance(axes, int):
        axes = [axes]
    t = Tensor(data=np.asarray(list(axes), dtype=np.int64), device=x.device, requires_grad=False)
    return cls(keepdims=keepdims)(x, t)


def reduce_sum(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """Sum over ``axes`` (all axes when None; ONNX ``ReduceSum``).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceSum, x, axes, keepdims)


def reduce_mean(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """Mean (integers truncate) over ``axes`` (all axes when None; ONNX ``ReduceMean``).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceMean, x, axes, keepdims)


def reduce_max(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """Maximum over ``axes`` (all axes when None; ONNX ``ReduceMax``).

    :param x: a number or bool tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: an axis is out of range.
    """
    return _apply(ReduceMax, x, axes, keepdims)


def reduce_min(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """Minimum over ``axes`` (all axes when None; ONNX ``ReduceMin``).

    :param x: a number or bool tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: an axis is out of range.
    """
    return _apply(ReduceMin, x, axes, keepdims)


def reduce_prod(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """Product over ``axes`` (all axes when None; ONNX ``ReduceProd``).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceProd, x, axes, keepdims)


def reduce_l1(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """Sum of absolute values over ``axes`` (all axes when None; ONNX ``ReduceL1``).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceL1, x, axes, keepdims)


def reduce_l2(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """Euclidean norm over ``axes`` (all axes when None; ONNX ``ReduceL2``).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceL2, x, axes, keepdims)


def reduce_log_sum(x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1) -> Tensor:
    """``log(sum(x))`` over ``axes`` (all axes when None; ONNX ``ReduceLogSum``).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceLogSum, x, axes, keepdims)


def reduce_log_sum_exp(
    x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1
) -> Tensor:
    """``log(sum(exp(x)))`` over ``axes``, computed stably (all axes when None).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceLogSumExp, x, axes, keepdims)


def reduce_sum_square(
    x: Tensor, axes: Sequence[int] | int | None = None, keepdims: int = 1
) -> Tensor:
    """Sum of squares over ``axes`` (all axes when None; ONNX ``ReduceSumSquare``).

    :param x: a number tensor.
    :param axes: the axes to reduce (negative counts from the end); None for all.
    :param keepdims: 1 keeps each reduced axis with size 1, 0 drops it.
    :returns: a tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is boolean or an axis is out of range.
    """
    return _apply(ReduceSumSquare, x, axes, keepdims)

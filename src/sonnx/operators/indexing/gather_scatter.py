"""Indexing ops: Gather, GatherElements, GatherND, ScatterElements (which also serves the
deprecated Scatter), ScatterND, TensorScatter; OneHot, NonZero and Compress live in
:mod:`sonnx.operators.indexing.masks`, TopK, Unique, ArgMax, ArgMin and NonMaxSuppression in
:mod:`sonnx.operators.indexing.select`.

Gathers and scatters are differentiable with respect to the tensors they move (data, updates);
their index inputs are integers and carry no gradient.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.tracing import defers_checks_on, value_checks
from sonnx.errors import BadInputError
from sonnx.operators.indexing.common import (
    from_order_key,
    index_tensor,
    moved,
    moved_pair,
    norm_axis,
    norm_indices,
    order_key,
    require_int,
    require_opset,
    restore_bits,
    signed_bits,
)
from sonnx.operators.indexing.select import (
    ArgMax,
    ArgMin,
    NonMaxSuppression,
    TopK,
    Unique,
    argmax,
    argmin,
    non_max_suppression,
    topk,
    unique,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "ArgMax",
    "ArgMin",
    "Gather",
    "GatherElements",
    "GatherND",
    "NonMaxSuppression",
    "ScatterElements",
    "ScatterND",
    "TensorScatter",
    "TopK",
    "Unique",
    "argmax",
    "argmin",
    "gather",
    "gather_elements",
    "gather_nd",
    "non_max_suppression",
    "scatter_elements",
    "scatter_nd",
    "tensor_scatter",
    "topk",
    "unique",
]


#: At most this many indices are kept by :meth:`Gather._wrap` (larger ones are rarely
#: constants, and keeping them would hold a caller's input after its run).
_KEPT_INDICES = 1024


class Gather(Operator):
    """``output = data`` indexed along ``axis`` by ``indices`` (any shape; negative wrap)."""

    op_type = "Gather"
    since_versions = (1, 11, 13)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    # Indices are data.
    parameterising_inputs = frozenset()
    # The last indices checked and wrapped, with what they were found for: (indices tensor,
    # its version, the axis size, the wrapped indices). A constant index (a model taking the
    # last step of a sequence) is the same tensor at every run of an imported graph.
    _wrapped: tuple[torch.Tensor, int, int, torch.Tensor] | None = None

    def forward(self, data: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        require_int(self.op_type, "indices", indices)
        axis = norm_axis(self.op_type, self.attr("axis"), data.dim())
        idx = self._wrap(indices, data.shape[axis])
        shape = data.shape[:axis] + idx.shape + data.shape[axis + 1 :]
        return moved(lambda d: torch.index_select(d, axis, idx.reshape(-1)), data).reshape(shape)

    def _wrap(self, indices: torch.Tensor, size: int) -> torch.Tensor:
        """``indices`` range-checked, negatives wrapped; kept for the same unchanged tensor
        (outside graph tracing, few indices, and only when the check was made now, not
        deferred)."""
        last = self._wrapped
        if (
            last is not None
            and last[0] is indices
            and last[1] == indices._version
            and last[2] == size
        ):
            return last[3]
        idx = norm_indices(self.op_type, "indices", indices, size)
        if (
            value_checks()
            and type(size) is int
            and indices.numel() <= _KEPT_INDICES
            and not defers_checks_on(indices.device)
        ):
            self._wrapped = (indices, indices._version, size, idx)
        return idx


class GatherElements(Operator):
    """``output[i][j][k] = data[index[i][j][k]][j][k]`` for axis 0 (``torch.gather``)."""

    op_type = "GatherElements"
    since_versions = (11, 13)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    parameterising_inputs = frozenset()

    def forward(self, data: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        require_int(self.op_type, "indices", indices)
        _same_rank(self.op_type, data, indices)
        axis = norm_axis(self.op_type, self.attr("axis"), data.dim())
        idx = norm_indices(self.op_type, "indices", indices, data.shape[axis])
        return moved(lambda d: torch.gather(d, axis, idx), data)


def _same_rank(op: str, data: torch.Tensor, indices: torch.Tensor) -> None:
    if indices.dim() != data.dim():
        raise BadInputError(
            f"{op}: input indices must have the rank of data ({data.dim()}), received shape "
            f"{tuple(indices.shape)}"
        )


def _nd_positions(op: str, data: torch.Tensor, indices: torch.Tensor, first: int) -> torch.Tensor:
    """Row-major linear positions into ``data.shape[first:first + k]`` of the last-axis index
    tuples of ``indices`` (each coordinate range-checked, negatives wrapped)."""
    require_int(op, "indices", indices)
    k = indices.shape[-1]
    if first + k > data.dim():
        raise BadInputError(
            f"{op}: the last dimension of indices ({k}) must not exceed the rank of data "
            f"({data.dim()}) minus batch_dims ({first})"
        )
    dims = data.shape[first : first + k]
    linear = torch.zeros(indices.shape[:-1], dtype=torch.int64, device=indices.device)
    for j, size in enumerate(dims):
        linear = linear * size + norm_indices(op, "indices", indices[..., j], size)
    return linear


class GatherND(Operator):
    """Gather slices of ``data`` addressed by the index tuples in the last axis of ``indices``;
    the first ``batch_dims`` axes of both are batch axes gathered in lock-step."""

    op_type = "GatherND"
    since_versions = (11, 12, 13)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    parameterising_inputs = frozenset()

    def forward(self, data: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        b = self.attr("batch_dims") or 0
        if indices.dim() < 1 or data.shape[:b] != indices.shape[:b]:
            raise BadInputError(
                f"GatherND: the first batch_dims={b} dimensions of data {tuple(data.shape)} and "
                f"indices {tuple(indices.shape)} must be equal, and indices must be at least 1-D"
            )
        k = indices.shape[-1]
        linear = _nd_positions(self.op_type, data, indices, b)
        batch = math.prod(data.shape[:b])
        rest = data.shape[b + k :]
        flat = data.reshape(batch, math.prod(data.shape[b : b + k]), *rest)
        rows = torch.arange(batch, device=data.device).view(-1, 1)
        picked = moved(lambda d: d[rows, linear.reshape(batch, -1)], flat)
        return picked.reshape(*indices.shape[:-1], *rest)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        b = self.attr("batch_dims") or 0
        if b:
            require_opset(g, self.op_type, 12, "batch_dims")
        attrs = {"batch_dims": b} if g.opset >= 12 else {}
        g.add_node(self.op_type, inputs, outputs, **attrs)


_TORCH_REDUCE = {"mul": "prod", "max": "amax", "min": "amin"}
_REDUCTION_SINCE = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}


def _reduction(op: Operator) -> str:
    reduction = op.attr("reduction") or "none"
    if reduction not in _REDUCTION_SINCE:
        raise BadInputError(
            f"{op.op_type}: attribute reduction must be one of none, add, mul, max, min, "
            f"received {reduction!r}"
        )
    return reduction


def _scatter_domain(
    reduction: str, data: torch.Tensor, updates: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """Data and updates in a dtype torch's scatter kernels accept, and the way back.

    max/min compare, so they need the order-preserving key; the others only move bits or do
    wrap-around arithmetic, which the signed twin does identically.
    """
    dtype = data.dtype
    if reduction in ("max", "min"):
        return order_key(data), order_key(updates), lambda y: from_order_key(y, dtype)
    return signed_bits(data), signed_bits(updates), lambda y: restore_bits(y, dtype)


def _export_scatter(op: Operator, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
    """ScatterElements/ScatterND: ``reduction`` exists from 16 and max/min from 18."""
    reduction = _reduction(op)
    require_opset(g, op.op_type, _REDUCTION_SINCE[reduction], f"reduction={reduction!r}")
    attrs: dict[str, Any] = {"reduction": reduction} if g.opset >= 16 else {}
    if op.op_type == "ScatterElements":
        attrs["axis"] = op.attr("axis")
    g.add_node(op.op_type, inputs, outputs, **attrs)


class ScatterElements(Operator):
    """A copy of ``data`` with ``updates`` written (or combined by ``reduction``) at the
    positions ``indices`` gives along ``axis``: the inverse of GatherElements."""

    op_type = "ScatterElements"
    since_versions = (11, 13, 16, 18)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    moved_inputs = frozenset({0, 2})
    parameterising_inputs = frozenset()

    def forward(
        self, data: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor
    ) -> torch.Tensor:
        require_int(self.op_type, "indices", indices)
        _same_rank(self.op_type, data, indices)
        if indices.shape != updates.shape:
            raise BadInputError(
                f"ScatterElements: input updates must have the shape of indices "
                f"{tuple(indices.shape)}, received {tuple(updates.shape)}"
            )
        axis = norm_axis(self.op_type, self.attr("axis"), data.dim())
        idx = norm_indices(self.op_type, "indices", indices, data.shape[axis])
        reduction = _reduction(self)
        d, u, back = _scatter_domain(reduction, data, updates.to(data.dtype))
        if reduction == "none":
            out = d.scatter(axis, idx, u)
        elif reduction == "add":
            out = d.scatter_add(axis, idx, u)
        else:
            out = d.scatter_reduce(axis, idx, u, _TORCH_REDUCE[reduction], include_self=True)
        return back(out)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        _export_scatter(self, g, inputs, outputs)


class ScatterND(Operator):
    """A copy of ``data`` with the slices addressed by the index tuples in the last axis of
    ``indices`` replaced by (or combined by ``reduction`` with) ``updates``."""

    op_type = "ScatterND"
    since_versions = (11, 13, 16, 18)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    moved_inputs = frozenset({0, 2})
    parameterising_inputs = frozenset()

    def forward(
        self, data: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor
    ) -> torch.Tensor:
        if indices.dim() < 1:
            raise BadInputError("ScatterND: input indices must be at least 1-D, received 0-D")
        linear = _nd_positions(self.op_type, data, indices, 0).reshape(-1)
        k = indices.shape[-1]
        rest = data.shape[k:]
        expected = tuple(indices.shape[:-1]) + tuple(rest)
        if tuple(updates.shape) != expected:
            raise BadInputError(
                f"ScatterND: input updates must have shape indices.shape[:-1] + "
                f"data.shape[k:] = {expected}, received {tuple(updates.shape)}"
            )
        reduction = _reduction(self)
        d, u, back = _scatter_domain(reduction, data, updates.to(data.dtype))
        rows = math.prod(data.shape[:k])
        flat, src = d.reshape(rows, *rest), u.reshape(-1, *rest)
        if reduction == "none":
            out = flat.index_copy(0, linear, src)
        elif reduction == "add":
            out = flat.index_add(0, linear, src)
        else:
            with warnings.catch_warnings():  # torch flags index_reduce as a beta API
                warnings.filterwarnings("ignore", message="index_reduce", category=UserWarning)
                out = flat.index_reduce(0, linear, src, _TORCH_REDUCE[reduction], include_self=True)
        return back(out.reshape(data.shape))

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        _export_scatter(self, g, inputs, outputs)


class TensorScatter(Operator):
    """Write ``update`` into a copy of ``past_cache`` along the sequence ``axis``, starting
    per batch row at ``write_indices`` (0 when absent); ``mode="circular"`` wraps around."""

    op_type = "TensorScatter"
    since_versions = (24,)
    output_shape = OutputShape.FROM_SHAPES
    # Strings, which ONNX lets in, are refused: only numeric caches are written.
    moves_elements_only = False
    # The write positions are data of each call.
    parameterising_inputs = frozenset()

    def forward(
        self,
        past_cache: torch.Tensor,
        update: torch.Tensor,
        write_indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        rank = past_cache.dim()
        axis = norm_axis(self.op_type, self.attr("axis"), rank)
        if axis == 0 or update.dim() != rank:
            raise BadInputError(
                f"TensorScatter: axis must not be the batch axis 0 and update must have the rank "
                f"of past_cache ({rank}); received axis {self.attr('axis')}, update shape "
                f"{tuple(update.shape)}"
            )
        batch, length, capacity = past_cache.shape[0], update.shape[axis], past_cache.shape[axis]
        if write_indices is None:
            write_indices = torch.zeros(batch, dtype=torch.int64, device=past_cache.device)
        ones = [1] * (rank - 1)
        steps = [length if d == axis else 1 for d in range(rank)]
        pos = write_indices.to(torch.int64).view(batch, *ones) + torch.arange(
            length, device=past_cache.device
        ).view(steps)
        mode = self.attr("mode")
        if mode == "circular":
            pos = pos % capacity
        elif pos.numel() and (int(pos.max()) >= capacity or int(pos.min()) < 0):
            raise BadInputError(
                f"TensorScatter: write_indices + sequence length must stay within "
                f"[0, {capacity}) in linear mode, received positions up to {int(pos.max())}"
            )
        index = pos.expand(update.shape)
        return moved_pair(lambda p, u: p.scatter(axis, index, u), past_cache, update)


# ---- SINGA-style functions --------------------------------------------------------------------


def gather(x: Tensor, axis: int, indices: Tensor | Sequence[int] | int) -> Tensor:
    """Take the entries ``indices`` of ``x`` along ``axis`` (ONNX Gather).

    :param x: the tensor to index.
    :param axis: the axis to index (negative counts from the end).
    :param indices: the int64 indices, of any shape (negative ones wrap).
    :returns: ``x`` with ``axis`` replaced by ``indices``' dims.
    :raises BadInputError: ``axis`` or an index is out of range.
    """
    return Gather(axis=axis)(x, index_tensor(indices, x))


def gather_elements(x: Tensor, indices: Tensor | Sequence[Any], axis: int = 0) -> Tensor:
    """``torch.gather``-style element gather (ONNX GatherElements).

    :param x: the tensor to read.
    :param indices: int64 indices of ``x``'s rank; along ``axis`` they pick the element.
    :param axis: the axis the indices address.
    :returns: a tensor of ``indices``' shape and ``x``'s dtype.
    :raises BadInputError: the ranks differ, or ``axis`` or an index is out of range.
    """
    return GatherElements(axis=axis)(x, index_tensor(indices, x))


def gather_nd(x: Tensor, indices: Tensor | Sequence[Any], batch_dims: int = 0) -> Tensor:
    """Gather the slices addressed by index tuples (ONNX GatherND).

    :param x: the tensor to read.
    :param indices: int64 index tuples in the last axis; the first axes say where each goes.
    :param batch_dims: the number of leading axes of ``x`` and ``indices`` gathered in lock-step.
    :returns: ``indices.shape[:-1] + x.shape[batch_dims + k:]`` for tuples of length ``k``.
    :raises BadInputError: the batch dims differ, the tuples are too long, or an index is out of
        range.
    """
    return GatherND(batch_dims=batch_dims)(x, index_tensor(indices, x))


def scatter_elements(
    x: Tensor,
    indices: Tensor | Sequence[Any],
    updates: Tensor,
    axis: int = 0,
    reduction: str = "none",
) -> Tensor:
    """A copy of ``x`` with ``updates`` scattered along ``axis`` (ONNX ScatterElements).

    :param x: the tensor to copy.
    :param indices: int64 indices of ``updates``' shape; along ``axis`` they pick the position.
    :param updates: the values to write, of ``x``'s dtype.
    :param axis: the axis the indices address.
    :param reduction: ``"none"`` to overwrite, or ``"add"``, ``"mul"``, ``"max"``, ``"min"`` to
        combine with the value there.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``updates``' shape differs from ``indices``', ``reduction`` is unknown,
        or an index is out of range.
    """
    return ScatterElements(axis=axis, reduction=reduction)(x, index_tensor(indices, x), updates)


def scatter_nd(
    x: Tensor, indices: Tensor | Sequence[Any], updates: Tensor, reduction: str = "none"
) -> Tensor:
    """A copy of ``x`` with slices replaced by ``updates`` (ONNX ScatterND).

    :param x: the tensor to copy.
    :param indices: int64 index tuples in the last axis, each addressing one slice of ``x``.
    :param updates: the slices, of shape ``indices.shape[:-1] + x.shape[k:]``.
    :param reduction: ``"none"`` to overwrite, or ``"add"``, ``"mul"``, ``"max"``, ``"min"``.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``indices`` is 0-D, ``updates`` has the wrong shape, ``reduction`` is
        unknown, or an index is out of range.
    """
    return ScatterND(reduction=reduction)(x, index_tensor(indices, x), updates)


def tensor_scatter(
    past_cache: Tensor,
    update: Tensor,
    write_indices: Tensor | Sequence[int] | None = None,
    axis: int = -2,
    mode: str = "linear",
) -> Tensor:
    """Write ``update`` into a KV-cache-like buffer along ``axis`` (ONNX TensorScatter).

    :param past_cache: the (batch, ...) buffer to copy and write into.
    :param update: the new entries, of ``past_cache``'s rank.
    :param write_indices: per batch row, where along ``axis`` the writing starts; None for 0.
    :param axis: the sequence axis (not the batch axis 0).
    :param mode: ``"linear"``, or ``"circular"`` to wrap around the buffer's end.
    :returns: a tensor of ``past_cache``'s shape and dtype.
    :raises BadInputError: ``axis`` is 0, the ranks differ, or a linear write runs past the end.
    """
    wi = None if write_indices is None else index_tensor(write_indices, past_cache)
    return TensorScatter(axis=axis, mode=mode)(past_cache, update, wi)

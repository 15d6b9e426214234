"""Operators that cut, join or pick: Concat, Split, Slice, ReverseSequence, Trilu. Pad and
CenterCropPad, which grow or crop to a size, are in :mod:`sonnx.operators.shape.padding`.

All are built from torch slicing, ``index_select``, ``cat`` and ``where``, which work for every
dtype torch holds and carry gradients through torch autograd.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.shape.common import (
    attrs_without,
    int64_input,
    ints_for_attribute,
    normalize_axes,
    normalize_axis,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "Concat",
    "ReverseSequence",
    "Slice",
    "Split",
    "Trilu",
    "cat",
    "concat",
    "reverse_sequence",
    "slice",
    "split",
    "trilu",
]


class Concat(Operator):
    """Join the inputs along ``axis``."""

    op_type = "Concat"
    since_versions = (1, 4, 11, 13)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    moved_inputs = None

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if not xs:
            raise BadInputError("Concat: needs at least one input, received none")
        axis = self.attr("axis")
        # Concat-1 documents 1 as the default axis without declaring it in its schema.
        axis = normalize_axis("Concat", 1 if axis is None else axis, xs[0].dim())
        ranks = {x.dim() for x in xs}
        if len(ranks) != 1:
            raise BadInputError(
                f"Concat: every input must have the same rank, received shapes "
                f"{[tuple(x.shape) for x in xs]}"
            )
        try:
            return torch.cat(xs, dim=axis)
        except RuntimeError:
            raise BadInputError(
                f"Concat: inputs must match in every dim but axis {axis}, received shapes "
                f"{[tuple(x.shape) for x in xs]}"
            ) from None


def equal_split_sizes(dim: int, parts: int) -> list[int]:
    """ONNX's sizes for ``parts`` chunks of ``dim``: equal, or equal but a smaller last one."""
    if parts < 1:
        raise BadInputError(f"Split: the number of outputs must be positive, received {parts}")
    size = -(-dim // parts)
    sizes = [size] * (parts - 1) + [dim - size * (parts - 1)]
    if sizes[-1] < 0:
        raise BadInputError(f"Split: cannot split a dim of {dim} into {parts} outputs")
    return sizes


class Split(Operator):
    """Cut ``x`` along ``axis`` into pieces of the sizes in ``split`` (an input from opset 13),
    else into ``num_outputs`` (opset 18) or as many pieces as the node has outputs."""

    op_type = "Split"
    since_versions = (13, 18)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    shape_inputs = frozenset({1})
    # Sizes computed from a shape (halves of a length) stay symbolic in a trace.
    size_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})

    def forward(self, x: torch.Tensor, split: torch.Tensor | None = None) -> tuple[torch.Tensor]:
        axis = normalize_axis("Split", self.attr("axis"), x.dim())
        dim = x.shape[axis]
        sizes = host_ints(split)
        if sizes:
            if sum(sizes) != dim or any(s < 0 for s in sizes):
                raise BadInputError(
                    f"Split: split sizes must be non-negative and sum to {dim} (axis {axis} of "
                    f"input shape {tuple(x.shape)}), received {sizes}"
                )
        else:
            parts = self.attr("num_outputs") or self.requested_outputs
            if parts is None:
                raise BadInputError(
                    "Split: give split sizes or num_outputs; received neither (and no node "
                    "output count)"
                )
            sizes = equal_split_sizes(dim, parts)
        if self.requested_outputs is not None and len(sizes) != self.requested_outputs:
            raise BadInputError(
                f"Split: the node has {self.requested_outputs} outputs but the split makes "
                f"{len(sizes)} pieces ({sizes})"
            )
        return tuple(torch.split(x, sizes, dim=axis))

    def _recorded_sizes(self) -> list[int]:
        x = self.inputs[0]
        axis = normalize_axis("Split", self.attr("axis"), x.ndim())
        return equal_split_sizes(x.shape[axis], self.num_outputs)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        has_split = len(inputs) > 1 and inputs[1] != ""
        attrs = attrs_without(self.attrs, "num_outputs", "split")
        if g.opset >= 18:
            if not has_split:
                attrs["num_outputs"] = self.num_outputs
            g.add_node("Split", inputs, outputs, **attrs)
            return
        # Before 18 an absent split means equal pieces, which an uneven num_outputs split is not.
        sizes = None if has_split else self._recorded_sizes()
        if sizes is not None and len(set(sizes)) == 1:
            sizes = None
        if g.opset >= 13:
            if sizes is not None:
                inputs = [inputs[0], g.constant(sizes, "split", np.int64)]
            g.add_node("Split", inputs, outputs, **attrs)
            return
        if has_split:
            sizes = ints_for_attribute(self, 1, "split", g, 13)
        if sizes is not None:
            attrs["split"] = sizes
        g.add_node("Split", inputs[:1], outputs, **attrs)


# A bound past any dimension (no tensor has 2**62 elements) that stays inside int64 when a
# size is added to it: the int64 sentinels ONNX models use (INT64_MIN to walk back to the
# start) would otherwise overflow in a compiled graph's size arithmetic.
_FAR = 1 << 62


def _backward_slice(dim: Any, start: Any, end: Any, step: int) -> builtins.slice:
    """The forward slice holding the elements a negative ``step`` takes (flipped after).

    ONNX clamps a backward start to ``[0, dim - 1]`` and end to ``[-1, dim - 1]`` (so a start
    before the first element still takes it, unlike Python's ``slice.indices``, as
    onnxruntime does). ``torch.sym_min``/``sym_max`` keep a symbolic ``dim`` symbolic: a
    Python ``min`` or ``slice.indices`` would read its value and pin the traced graph to it.
    """
    first = _clamped(start, dim, 0)
    stop = _clamped(end, dim, -1)
    stride = -step
    count = torch.sym_max((first - stop + stride - 1) // stride, 0)
    # From the last element taken up to the first; empty (start past stop) for a count of 0.
    # An empty dim gives first 0 and count 1, a slice of nothing all the same.
    return builtins.slice(first - (count - 1) * stride, first + 1, stride)


def _clamped(bound: Any, dim: Any, low: int) -> Any:
    """A backward slice's ``bound`` clamped to ``[low, dim - 1]``, negatives counted from the
    end. A sentinel past any dimension (INT64_MIN, INT64_MAX) clamps to its end without
    ``dim``: ``sym_max(-1, s0 - 2**62)`` is one torch cannot decide, and the slice of such a
    bound gets a data-dependent size that the next size check (a Split's) cannot guard on,
    so a symbolic trace of a VITS flow's channel flip failed and compiled per shape."""
    if isinstance(bound, int):
        if bound <= -_FAR:
            return low
        if bound >= _FAR:
            return torch.sym_max(dim - 1, low)
    return torch.sym_max(torch.sym_min(bound + dim if bound < 0 else bound, dim - 1), low)


class Slice(Operator):
    """Take ``x[starts:ends:steps]`` on ``axes`` (inputs from opset 10; negative steps walk
    backwards)."""

    op_type = "Slice"
    since_versions = (10, 11, 13)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    shape_inputs = frozenset({1, 2, 3, 4})
    size_inputs = frozenset({1, 2, 3, 4})
    parameterising_inputs = frozenset({1, 2, 3, 4})
    # The last index resolved, with what it was resolved from: (the input's sizes, the
    # starts/ends/axes/steps tensors and their versions, the index and the axes to flip). An
    # imported graph hands a Slice the same constant bounds at every run.
    _resolved: tuple[Any, tuple[Any, ...], tuple[Any, ...], tuple[Any, list[int]]] | None = None

    def forward(
        self,
        x: torch.Tensor,
        starts: torch.Tensor,
        ends: torch.Tensor,
        axes: torch.Tensor | None = None,
        steps: torch.Tensor | None = None,
    ) -> torch.Tensor:
        bounds = (starts, ends, axes, steps)
        last = self._resolved
        if (
            last is not None
            and value_checks()  # first: sizes traced as symbols must not meet a comparison
            and all(a is b for a, b in zip(last[1], bounds, strict=True))
            and last[2] == tuple(None if t is None else t._version for t in bounds)
            and last[0] == x.shape
        ):
            index, flips = last[3]
        else:
            index, flips = self._index(x, *bounds)
            if value_checks() and all(t is None or isinstance(t, torch.Tensor) for t in bounds):
                versions = tuple(None if t is None else t._version for t in bounds)
                self._resolved = (x.shape, bounds, versions, (index, flips))
        y = x[index]
        return y.flip(flips) if flips else y

    def _index(
        self,
        x: torch.Tensor,
        starts: torch.Tensor,
        ends: torch.Tensor,
        axes: torch.Tensor | None,
        steps: torch.Tensor | None,
    ) -> tuple[tuple[builtins.slice, ...], list[int]]:
        """The index taking the slice forwards, and the axes to flip after (negative steps)."""
        st, en = host_ints(starts), host_ints(ends)
        ax = host_ints(axes)
        ax = list(builtins.range(len(st))) if ax is None else ax
        sp = host_ints(steps) or [1] * len(st)
        if not len(st) == len(en) == len(ax) == len(sp):
            raise BadInputError(
                f"Slice: starts, ends, axes and steps must have equal lengths, received "
                f"{len(st)}, {len(en)}, {len(ax)}, {len(sp)}"
            )
        if 0 in sp:
            raise BadInputError(f"Slice: steps must be non-zero, received {sp}")
        index = [builtins.slice(None)] * x.dim()
        flips = []
        for a, s, e, p in zip(normalize_axes("Slice", ax, x.dim()), st, en, sp, strict=True):
            if p > 0:
                # torch clamps a forward slice's bounds as ONNX does (negatives count from the
                # end, INT64_MAX is the end), without reading a symbolic size.
                index[a] = builtins.slice(s, e, p)
                continue
            # torch has no negative-step slicing: take the same elements forwards, then flip.
            index[a] = _backward_slice(x.shape[a], s, e, p)
            flips.append(a)
        return tuple(index), flips

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= 10:
            super().export(g, inputs, outputs)
            return
        steps = ints_for_attribute(self, 4, "steps", g, 10)
        if steps is not None and any(s != 1 for s in steps):
            raise ExportError(
                f"Slice: steps other than 1 exist only from opset 10; cannot export at opset "
                f"{g.opset}"
            )
        attrs = {
            "starts": ints_for_attribute(self, 1, "starts", g, 10),
            "ends": ints_for_attribute(self, 2, "ends", g, 10),
        }
        axes = ints_for_attribute(self, 3, "axes", g, 10)
        if axes is not None:
            attrs["axes"] = axes
        g.add_node("Slice", inputs[:1], outputs, **attrs)


class ReverseSequence(Operator):
    """Reverse the first ``sequence_lens[b]`` time steps of every batch entry b."""

    op_type = "ReverseSequence"
    since_versions = (10, 28)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    # The sequence lengths are data of each call.
    parameterising_inputs = frozenset()

    def forward(self, x: torch.Tensor, sequence_lens: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2:
            raise BadInputError(
                f"ReverseSequence: input must be at least 2-D, received shape {tuple(x.shape)}"
            )
        batch_axis = normalize_axis("ReverseSequence", self.attr("batch_axis"), x.dim())
        time_axis = normalize_axis("ReverseSequence", self.attr("time_axis"), x.dim())
        if batch_axis == time_axis:
            raise BadInputError(
                f"ReverseSequence: batch_axis and time_axis must differ, both are {batch_axis}"
            )
        lens = sequence_lens.to(torch.int64).reshape(-1)
        n_batch, n_time = x.shape[batch_axis], x.shape[time_axis]
        if lens.numel() != n_batch or bool(((lens < 0) | (lens > n_time)).any()):
            raise BadInputError(
                f"ReverseSequence: sequence_lens must hold {n_batch} lengths in [0, {n_time}], "
                f"received {lens.tolist()}"
            )
        # Move (batch, time) to the front, pick rows of the flattened (batch*time) axis.
        rest = [a for a in builtins.range(x.dim()) if a not in (batch_axis, time_axis)]
        perm = [batch_axis, time_axis, *rest]
        moved = x.permute(*perm)
        t = torch.arange(n_time, device=x.device)
        src = torch.where(t[None, :] < lens[:, None], lens[:, None] - 1 - t[None, :], t[None, :])
        rows = (src + torch.arange(n_batch, device=x.device)[:, None] * n_time).reshape(-1)
        picked = moved.reshape(n_batch * n_time, -1).index_select(0, rows).reshape(moved.shape)
        return picked.permute(*np.argsort(perm).tolist())


class Trilu(Operator):
    """Keep the upper (``upper=1``) or lower triangle of the last two axes, from diagonal k."""

    op_type = "Trilu"
    since_versions = (14,)
    output_shape = OutputShape.FROM_SHAPES
    # Strings, which ONNX lets in, are refused: the zeroed part needs a string zero.
    moves_elements_only = False
    parameterising_inputs = frozenset({1})

    def forward(self, x: torch.Tensor, k: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() < 2:
            raise BadInputError(
                f"Trilu: input must be at least 2-D, received shape {tuple(x.shape)}"
            )
        diagonal = 0 if k is None else host_ints(k)[0]
        rows = torch.arange(x.shape[-2], device=x.device)[:, None]
        cols = torch.arange(x.shape[-1], device=x.device)[None, :]
        offset = cols - rows
        keep = offset >= diagonal if self.attr("upper") else offset <= diagonal
        return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))


# ---- SINGA-named functions -------------------------------------------------------------------


def concat(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join the tensors along ``axis`` (ONNX ``Concat``; ``cat`` is the same function).

    :param xs: tensors of one rank, matching in every dim but ``axis``.
    :param axis: the axis to join along (negative counts from the end).
    :returns: the joined tensor.
    :raises BadInputError: ``xs`` is empty, the ranks differ or another dim differs.
    """
    return Concat(axis=axis)(*xs)


cat = concat


def split(
    x: Tensor, axis: int, parts: Sequence[int] | None, num_output: int | None = None
) -> tuple[Tensor, ...]:
    """Cut ``x`` along ``axis`` into pieces of the sizes in ``parts`` (SINGA), or into
    ``num_output`` equal pieces (the last may be smaller).

    :param x: the tensor to cut.
    :param axis: the axis to cut along.
    :param parts: the size of each piece (summing to ``x``'s dim), or None to use ``num_output``.
    :param num_output: the number of equal pieces, when ``parts`` is None.
    :returns: the pieces, in order (ONNX ``Split``).
    :raises BadInputError: neither ``parts`` nor ``num_output`` is given, the sizes do not sum
        to the dim, or the dim cannot be cut into ``num_output`` pieces.
    """
    if parts is not None:
        return Split(axis=axis)(x, int64_input(list(parts), x))
    if num_output is None:
        raise BadInputError("split: give parts (a list of sizes) or num_output, received neither")
    return Split(axis=axis, num_outputs=num_output)(x)


def slice(
    x: Tensor,
    starts: Sequence[int] | Tensor,
    ends: Sequence[int] | Tensor,
    axes: Sequence[int] | Tensor | None = None,
    steps: Sequence[int] | Tensor | None = None,
) -> Tensor:
    """``x[starts:ends:steps]`` along ``axes`` (default: the first len(starts) axes).

    :param x: the tensor to slice.
    :param starts: the first index per axis (negative counts from the end; clamped).
    :param ends: the end (exclusive) per axis, clamped like Python's slices.
    :param axes: the axes the bounds apply to; None for ``0 .. len(starts) - 1``.
    :param steps: the step per axis (non-zero, negative walks backwards); None for 1s.
    :returns: the slice of ``x``.
    :raises BadInputError: the four lists differ in length, or a step is 0.
    """
    ints = [int64_input(v, x) for v in (starts, ends, axes, steps)]
    return Slice()(x, *ints)


def reverse_sequence(
    x: Tensor, sequence_lens: Sequence[int] | Tensor, batch_axis: int = 1, time_axis: int = 0
) -> Tensor:
    """Reverse the first ``sequence_lens[b]`` steps of each batch entry ``b`` (ONNX
    ``ReverseSequence``).

    :param x: a tensor of at least 2 axes.
    :param sequence_lens: one length per batch entry, each in [0, the time axis' size].
    :param batch_axis: the batch axis (0 or 1).
    :param time_axis: the time axis (1 or 0, not ``batch_axis``).
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` has fewer than 2 axes, the two axes are the same, or a length is
        out of range.
    """
    return ReverseSequence(batch_axis=batch_axis, time_axis=time_axis)(
        x, int64_input(sequence_lens, x)
    )


def trilu(x: Tensor, k: int = 0, upper: bool = True) -> Tensor:
    """The upper (or lower) triangle of the last two axes from diagonal ``k`` (ONNX ``Trilu``).

    :param x: a tensor of at least 2 axes.
    :param k: the diagonal: 0 the main one, positive above it, negative below.
    :param upper: True keeps the upper triangle, False the lower; the rest becomes 0.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` has fewer than 2 axes.
    """
    diagonal = Tensor(data=torch.tensor(k, dtype=torch.int64), device=x.device, requires_grad=False)
    return Trilu(upper=int(upper))(x, diagonal if k else None)

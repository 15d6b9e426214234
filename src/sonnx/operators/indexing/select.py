"""Selection ops whose output depends on comparing values: TopK, Unique, ArgMax, ArgMin and
NonMaxSuppression (re-exported by :mod:`sonnx.operators.indexing.gather_scatter`).

Ties follow ONNX: the lower index wins (TopK, ArgMax/ArgMin unless ``select_last_index``,
NonMaxSuppression's score order). Values selected from the input (TopK values, Unique's Y) are
gathered from it, so gradients flow to the selected elements; indices carry none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError, OpsetTooOldError
from sonnx.operators.indexing.common import (
    norm_axis,
    order_key,
    restore_bits,
    signed_bits,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "ArgMax",
    "ArgMin",
    "NonMaxSuppression",
    "TopK",
    "Unique",
    "argmax",
    "argmin",
    "non_max_suppression",
    "topk",
    "unique",
]


def _take(x: torch.Tensor, axis: int, index: torch.Tensor) -> torch.Tensor:
    """``index_select`` that also works for the unsigned types (differentiable for floats)."""
    return restore_bits(torch.index_select(signed_bits(x), axis, index), x.dtype)


class TopK(Operator):
    """The ``K`` largest (or smallest) elements along ``axis`` and their int64 indices.

    A stable sort of the whole axis gives ONNX's tie rule (lower index first) that
    ``torch.topk`` does not promise; output is always sorted, which ``sorted=0`` permits.
    """

    op_type = "TopK"
    since_versions = (10, 11, 24)
    output_shape = OutputShape.FROM_SHAPES
    shape_inputs = frozenset({1})
    # A K computed from a shape (a detector's min(k, boxes)) stays symbolic in a trace.
    size_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})

    def forward(self, x: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dim() == 0:
            raise BadInputError("TopK: input X must be at least 1-D, received a 0-d tensor")
        axis = norm_axis(self.op_type, self.attr("axis"), x.dim())
        ks = host_ints(k)
        size = x.shape[axis]
        if len(ks) != 1 or not 0 <= ks[0] <= size:
            raise BadInputError(
                f"TopK: input K must be one integer in [0, {size}] (the size of axis {axis}), "
                f"received {ks}"
            )
        order = torch.sort(
            order_key(x), dim=axis, descending=bool(self._flag("largest")), stable=True
        ).indices.narrow(axis, 0, ks[0])
        values = restore_bits(torch.gather(signed_bits(x), axis, order), x.dtype)
        return values, order

    def _flag(self, name: str) -> int:
        """``largest``/``sorted``: TopK-10 has neither, and behaves as their default 1."""
        value = self.attr(name)
        return 1 if value is None else value

    def export_attrs(self, g: GraphBuilder) -> dict[str, Any]:
        return {
            "axis": self.attr("axis"),
            "largest": self._flag("largest"),
            "sorted": self._flag("sorted"),
        }


class Unique(Operator):
    """Unique elements (or slices along ``axis``) with first-occurrence indices, inverse
    indices and counts; sorted ascending, or in order of first occurrence when ``sorted=0``."""

    op_type = "Unique"
    since_versions = (11, 28)
    output_shape = OutputShape.VALUE_SIZED
    # Strings, which ONNX lets in, are refused: sorting them has no torch form.
    moves_elements_only = False

    singa_functions = (
        SingaFunction(
            "unique",
            "Unique values (or slices along ``axis``), first indices, inverse indices and counts.",
            inputs=(Input("x", "the tensor to deduplicate (ONNX Unique)."),),
            returns="``(values, indices, inverse_indices, counts)``, the last three int64.",
            keywords=(
                Keyword(
                    "axis", "the axis whose slices are compared; None for the flattened elements."
                ),
                Keyword(
                    "sorted",
                    "True for ascending order, False for the order of first occurrence.",
                    default=True,
                    annotation="bool",
                    convert="int",
                ),
            ),
            result="tuple[Tensor, ...]",
        ),
    )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        axis = self.attr("axis")
        if axis is None:
            src, axis = x.reshape(-1), 0
            dim = None
        else:
            axis = norm_axis(self.op_type, axis, x.dim())
            src, dim = x, axis
        _, inverse, counts = torch.unique(
            order_key(src), sorted=True, return_inverse=True, return_counts=True, dim=dim
        )
        n = inverse.numel()
        first = torch.full((counts.numel(),), n, dtype=torch.int64, device=x.device)
        first = first.scatter_reduce(
            0, inverse, torch.arange(n, device=x.device), "amin", include_self=True
        )
        if not self.attr("sorted"):
            order = torch.argsort(first)
            rank = torch.empty_like(order)
            rank[order] = torch.arange(order.numel(), device=x.device)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        outputs = (_take(src, axis, first), first, inverse, counts)
        return outputs[: self.requested_outputs or len(outputs)]


class _ArgReduce(Operator):
    """ArgMax/ArgMin: int64 index of the extreme along ``axis`` (first, or last if asked)."""

    output_shape = OutputShape.FROM_SHAPES

    largest: ClassVar[bool]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rank = max(x.dim(), 1)
        axis = norm_axis(self.op_type, self.attr("axis"), rank)
        key = order_key(x.reshape(1) if x.dim() == 0 else x)
        size = key.shape[axis]
        if size == 0:
            raise BadInputError(f"{self.op_type}: axis {axis} of input data has size 0")
        last = bool(self.attr("select_last_index"))
        if last:
            key = key.flip(axis)
        pick = torch.argmax if self.largest else torch.argmin
        result = pick(key, dim=axis, keepdim=bool(self.attr("keepdims")))
        result = size - 1 - result if last else result
        return result.reshape(()) if x.dim() == 0 else result

    def export_attrs(self, g: GraphBuilder) -> dict[str, Any]:
        last = self.attr("select_last_index")
        axis = self.attr("axis")
        attrs: dict[str, Any] = {"keepdims": self.attr("keepdims"), "axis": axis}
        if g.opset >= 12:
            attrs["select_last_index"] = last
        elif last:
            raise OpsetTooOldError(
                f"{self.op_type}: select_last_index=1 needs opset 12; cannot export to opset "
                f"{g.opset}",
                12,
            )
        return attrs


class ArgMax(_ArgReduce):
    """ONNX ``ArgMax``: the int64 index of the maximum along ``axis``."""

    op_type = "ArgMax"
    since_versions = (1, 11, 12, 13)
    largest = True

    singa_functions = (
        SingaFunction(
            "argmax",
            "The int64 index of the maximum along ``axis`` (ONNX ArgMax).",
            inputs=(Input("x", "a number tensor."),),
            returns="an int64 tensor of the indices.",
            keywords=(
                Keyword("axis", "the axis to search (negative counts from the end)."),
                Keyword("keepdims", "1 keeps ``axis`` with size 1, 0 drops it."),
                Keyword("select_last_index", "1 to pick the last of equal maxima, 0 the first."),
            ),
            raises=(("BadInputError", "``axis`` is out of range or has size 0."),),
        ),
    )


class ArgMin(_ArgReduce):
    """ONNX ``ArgMin``: the int64 index of the minimum along ``axis``."""

    op_type = "ArgMin"
    since_versions = (1, 11, 12, 13)
    largest = False

    singa_functions = (
        SingaFunction(
            "argmin",
            "The int64 index of the minimum along ``axis`` (ONNX ArgMin).",
            inputs=(Input("x", "a number tensor."),),
            returns="an int64 tensor of the indices.",
            keywords=(
                Keyword("axis", "the axis to search (negative counts from the end)."),
                Keyword("keepdims", "1 keeps ``axis`` with size 1, 0 drops it."),
                Keyword("select_last_index", "1 to pick the last of equal minima, 0 the first."),
            ),
            raises=(("BadInputError", "``axis`` is out of range or has size 0."),),
        ),
    )


def _corners(boxes: torch.Tensor, center_point_box: int) -> torch.Tensor:
    """``(N, 4)`` boxes as ``[x_min, y_min, x_max, y_max]``.

    ONNX's corner format ``[y1, x1, y2, x2]`` may name either diagonal; the center format is
    ``[x_center, y_center, width, height]``.
    """
    if center_point_box:
        xy, half = boxes[:, :2], boxes[:, 2:] / 2
        return torch.cat([xy - half, xy + half], dim=1)
    y1, x1, y2, x2 = boxes.unbind(1)
    return torch.stack(
        [
            torch.minimum(x1, x2),
            torch.minimum(y1, y2),
            torch.maximum(x1, x2),
            torch.maximum(y1, y2),
        ],
        dim=1,
    )


def _iou(c: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of corner boxes; 0 where the boxes do not overlap or one has no area."""
    low = torch.maximum(c[:, None, :2], c[None, :, :2])
    high = torch.minimum(c[:, None, 2:], c[None, :, 2:])
    inter = (high - low).clamp(min=0).prod(dim=2)
    area = (c[:, 2:] - c[:, :2]).prod(dim=1)
    union = area[:, None] + area[None, :] - inter
    valid = (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    return torch.where(valid, inter / torch.where(valid, union, 1), 0)


class NonMaxSuppression(Operator):
    """Greedy per-(batch, class) selection of boxes by descending score, dropping boxes whose
    IoU with an already selected box exceeds ``iou_threshold``; int64 ``(n, 3)`` rows of
    ``[batch, class, box]``."""

    op_type = "NonMaxSuppression"
    since_versions = (10, 11)
    output_shape = OutputShape.VALUE_SIZED
    # The box count per class and the two thresholds.
    parameterising_inputs = frozenset({2, 3, 4})

    def forward(
        self,
        boxes: torch.Tensor,
        scores: torch.Tensor,
        max_output_boxes_per_class: torch.Tensor | None = None,
        iou_threshold: torch.Tensor | None = None,
        score_threshold: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if boxes.dim() != 3 or boxes.shape[2] != 4 or scores.dim() != 3:
            raise BadInputError(
                f"NonMaxSuppression: boxes must be (batch, boxes, 4) and scores (batch, classes, "
                f"boxes); received {tuple(boxes.shape)} and {tuple(scores.shape)}"
            )
        if scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise BadInputError(
                f"NonMaxSuppression: scores {tuple(scores.shape)} do not match boxes "
                f"{tuple(boxes.shape)} in batch or box count"
            )
        limit = _scalar(max_output_boxes_per_class, 0)
        iou_limit = _scalar(iou_threshold, 0.0)
        min_score = None if score_threshold is None else _scalar(score_threshold, 0.0)
        selected: list[tuple[int, int, int]] = []
        with torch.no_grad():
            for b in range(boxes.shape[0]):
                overlaps = _iou(_corners(boxes[b], self.attr("center_point_box"))) > iou_limit
                overlap_rows = overlaps.tolist()
                for c in range(scores.shape[1]):
                    s = scores[b, c]
                    order = torch.sort(s, descending=True, stable=True).indices.tolist()
                    if min_score is not None:
                        order = [i for i in order if float(s[i]) > min_score]
                    kept: list[int] = []
                    for i in order:
                        if len(kept) >= limit:
                            break
                        if not any(overlap_rows[i][j] for j in kept):
                            kept.append(i)
                    selected.extend((b, c, i) for i in kept)
        return torch.tensor(selected, dtype=torch.int64, device=boxes.device).reshape(-1, 3)


def _scalar(x: torch.Tensor | None, default: Any) -> Any:
    """A scalar input's value (``default`` when absent or empty), as int or float."""
    if x is None or x.numel() == 0:
        return default
    value = x.reshape(-1)[0].item()
    return max(int(value), 0) if isinstance(default, int) else float(value)


# ---- SINGA-style functions --------------------------------------------------------------------


def topk(
    x: Tensor, k: int, axis: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) values along ``axis`` and their indices (ONNX TopK).

    :param x: a tensor of at least 1 axis.
    :param k: how many values, in [0, the axis' size].
    :param axis: the axis to select along.
    :param largest: True for the largest values, False for the smallest.
    :param sorted: True to order the results (ties: the lower index first).
    :returns: ``(values, indices)``: ``x``'s dtype and int64, ``k`` along ``axis``.
    :raises BadInputError: ``x`` is 0-D or ``k`` is out of range.
    """
    kt = Tensor(data=np.asarray([k], dtype=np.int64), device=x.device, requires_grad=False)
    return TopK(axis=axis, largest=int(largest), sorted=int(sorted))(x, kt)


def non_max_suppression(
    boxes: Tensor,
    scores: Tensor,
    max_output_boxes_per_class: int = 0,
    iou_threshold: float = 0.0,
    score_threshold: float | None = None,
    center_point_box: int = 0,
) -> Tensor:
    """Greedy non-maximum suppression (ONNX NonMaxSuppression), rows of [batch, class, box].

    :param boxes: a (batch, boxes, 4) tensor of corners, or of centres and sizes.
    :param scores: a (batch, classes, boxes) tensor.
    :param max_output_boxes_per_class: the most boxes kept per batch and class (0: none).
    :param iou_threshold: a box overlapping a kept one by more than this IoU is dropped.
    :param score_threshold: boxes scoring at most this are dropped; None keeps all.
    :param center_point_box: 0 for ``[y1, x1, y2, x2]`` corners, 1 for ``[x, y, w, h]``.
    :returns: an int64 (n, 3) tensor of ``[batch, class, box]`` rows.
    :raises BadInputError: the shapes of ``boxes`` and ``scores`` do not fit.
    """
    settings: list[np.ndarray] = [
        np.asarray([max_output_boxes_per_class], dtype=np.int64),
        np.asarray([iou_threshold], dtype=np.float32),
    ]
    if score_threshold is not None:
        settings.append(np.asarray([score_threshold], dtype=np.float32))
    extras = [Tensor(data=a, device=boxes.device, requires_grad=False) for a in settings]
    return NonMaxSuppression(center_point_box=center_point_box)(boxes, scores, *extras)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def unique(x: Tensor, axis: int | None = None, sorted: bool = True) -> tuple[Tensor, ...]:
    """Unique values (or slices along ``axis``), first indices, inverse indices and counts.

    :param x: the tensor to deduplicate (ONNX Unique).
    :param axis: the axis whose slices are compared; None for the flattened elements.
    :param sorted: True for ascending order, False for the order of first occurrence.
    :returns: ``(values, indices, inverse_indices, counts)``, the last three int64.
    """
    return Unique(axis=axis, sorted=int(sorted))(x)


def argmax(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    """The int64 index of the maximum along ``axis`` (ONNX ArgMax).

    :param x: a number tensor.
    :param axis: the axis to search (negative counts from the end).
    :param keepdims: 1 keeps ``axis`` with size 1, 0 drops it.
    :param select_last_index: 1 to pick the last of equal maxima, 0 the first.
    :returns: an int64 tensor of the indices.
    :raises BadInputError: ``axis`` is out of range or has size 0.
    """
    return ArgMax(axis=axis, keepdims=keepdims, select_last_index=select_last_index)(x)


def argmin(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    """The int64 index of the minimum along ``axis`` (ONNX ArgMin).

    :param x: a number tensor.
    :param axis: the axis to search (negative counts from the end).
    :param keepdims: 1 keeps ``axis`` with size 1, 0 drops it.
    :param select_last_index: 1 to pick the last of equal minima, 0 the first.
    :returns: an int64 tensor of the indices.
    :raises BadInputError: ``axis`` is out of range or has size 0.
    """
    return ArgMin(axis=axis, keepdims=keepdims, select_last_index=select_last_index)(x)

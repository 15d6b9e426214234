"""ONNX losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (see sonnx.operators.loss)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape, TorchOutputs
from sonnx.errors import BadInputError
from sonnx.operators.normalization.common import attrs_at_opset, check_float, compute_dtype
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = [
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    "nll_loss",
    "softmax_cross_entropy_loss",
]

_REDUCTIONS = ("none", "sum", "mean")


def negative_log_likelihood(
    op: str,
    log_prob: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: str,
    ignore_index: int | None,
) -> torch.Tensor:
    """ONNX's NegativeLogLikelihoodLoss on torch tensors (input (N, C, d1...), target (N, d1...)).

    ``mean`` divides by the summed weights of the targets that are not ignored, as ONNX (and
    torch) define it.
    """
    check_float(op, "input", log_prob)
    if target.dtype not in (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8):
        raise BadInputError(
            f"{op}: input target must hold integer class indices, received "
            f"{dtype_name(target.dtype)}"
        )
    if log_prob.dim() < 2:
        raise BadInputError(
            f"{op}: input must be at least 2-D (N, C, d1, ...), received shape "
            f"{tuple(log_prob.shape)}"
        )
    expected = (log_prob.shape[0], *log_prob.shape[2:])
    if tuple(target.shape) != expected:
        raise BadInputError(
            f"{op}: target must have shape {expected} (input's shape without axis 1), "
            f"received {tuple(target.shape)}"
        )
    if reduction not in _REDUCTIONS:
        raise BadInputError(
            f"{op}: attribute reduction must be one of {_REDUCTIONS}, received {reduction!r}"
        )
    c = log_prob.shape[1]
    if weight is not None and tuple(weight.shape) != (c,):
        raise BadInputError(
            f"{op}: weight must have shape ({c},) (one per class), received {tuple(weight.shape)}"
        )
    target = target.long()
    if weight is None and ignore_index is None:
        return _plain_nll(op, log_prob, target, reduction)
    valid = torch.ones_like(target, dtype=torch.bool)
    if ignore_index is not None:
        valid = target != int(ignore_index)
    out_of_range = valid & ((target < 0) | (target >= c))
    if bool(out_of_range.any()):
        bad = int(target[out_of_range][0])
        raise BadInputError(
            f"{op}: target values must be class indices in [0, {c}) or ignore_index "
            f"({ignore_index}), received {bad}"
        )
    ct = compute_dtype(log_prob.dtype)
    safe = torch.where(valid, target, torch.zeros_like(target))
    picked = -log_prob.to(ct).gather(1, safe.unsqueeze(1)).squeeze(1)
    w = valid.to(ct)
    if weight is not None:
        w = w * weight.to(ct)[safe]
    loss = picked * w
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / w.sum()
    return loss.to(log_prob.dtype)


def _plain_nll(
    op: str, log_prob: torch.Tensor, target: torch.Tensor, reduction: str
) -> torch.Tensor:
    """The common case, no class weights and no ignored index: torch's own nll_loss, after one
    range check (torch would index out of bounds on a bad label)."""
    c = log_prob.shape[1]
    if target.numel():
        low, high = (int(v) for v in torch.aminmax(target))
        if low < 0 or high >= c:
            raise BadInputError(
                f"{op}: target values must be class indices in [0, {c}), received "
                f"{low if low < 0 else high}"
            )
    ct = compute_dtype(log_prob.dtype)
    return F.nll_loss(log_prob.to(ct), target, reduction=reduction).to(log_prob.dtype)


class NegativeLogLikelihoodLoss(Operator):
    """ONNX NegativeLogLikelihoodLoss (versions 12, 13, 22: one semantics)."""

    op_type = "NegativeLogLikelihoodLoss"
    since_versions = (12, 13, 22)
    output_shape = OutputShape.FROM_SHAPES
    # Targets are data; the class weights are fixed, not trained.
    parameterising_inputs = frozenset({2})

    def forward(self, x, target, weight=None) -> torch.Tensor:  # type: ignore[override]
        return negative_log_likelihood(
            self.op_type, x, target, weight, self.attr("reduction"), self.attr("ignore_index")
        )

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(
            self.op_type, inputs, outputs, **attrs_at_opset(self.op_type, g.opset, self.attrs)
        )


class SoftmaxCrossEntropyLoss(Operator):
    """ONNX SoftmaxCrossEntropyLoss: log-softmax over axis 1, then NegativeLogLikelihoodLoss.

    The optional second output is the log-softmax (returned when the node asks for it).
    """

    op_type = "SoftmaxCrossEntropyLoss"
    since_versions = (12, 13)
    output_shape = OutputShape.FROM_SHAPES
    # Labels are data; the class weights are fixed, not trained.
    parameterising_inputs = frozenset({2})

    def forward(self, scores, labels, weights=None) -> TorchOutputs:  # type: ignore[override]
        op = self.op_type
        check_float(op, "scores", scores)
        if scores.dim() < 2:
            raise BadInputError(
                f"{op}: scores must be at least 2-D (N, C, d1, ...), received shape "
                f"{tuple(scores.shape)}"
            )
        log_prob = torch.log_softmax(scores.to(compute_dtype(scores.dtype)), dim=1)
        loss = negative_log_likelihood(
            op, log_prob, labels, weights, self.attr("reduction"), self.attr("ignore_index")
        ).to(scores.dtype)
        if (self.requested_outputs or 1) == 1:
            return loss
        return loss, log_prob.to(scores.dtype)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(
            self.op_type, inputs, outputs, **attrs_at_opset(self.op_type, g.opset, self.attrs)
        )


def _loss_attrs(reduction: str, ignore_index: int | None) -> dict[str, object]:
    attrs: dict[str, object] = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = int(ignore_index)
    return attrs


def nll_loss(
    log_prob: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
) -> Tensor:
    """ONNX NegativeLogLikelihoodLoss of log-probabilities (N, C, ...) and labels (N, ...).

    :param log_prob: the floating-point (N, C, d1, ...) log-probabilities.
    :param target: the integer (N, d1, ...) class labels.
    :param weight: the (C,) weight per class, or None.
    :param reduction: ``"none"``, ``"sum"`` or ``"mean"`` (divided by the summed weights of the
        labels not ignored).
    :param ignore_index: a label that contributes nothing, or None.
    :returns: the loss: a scalar, or (N, d1, ...) for ``"none"``.
    :raises BadInputError: a dtype or shape is wrong, ``reduction`` is unknown, or a label is out
        of range.
    """
    return NegativeLogLikelihoodLoss(**_loss_attrs(reduction, ignore_index))(
        log_prob, target, weight
    )


def softmax_cross_entropy_loss(
    scores: Tensor,
    labels: Tensor,
    weights: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
) -> Tensor:
    """ONNX SoftmaxCrossEntropyLoss of logits (N, C, ...) and labels (N, ...).

    :param scores: the floating-point (N, C, d1, ...) logits.
    :param labels: the integer (N, d1, ...) class labels.
    :param weights: the (C,) weight per class, or None.
    :param reduction: ``"none"``, ``"sum"`` or ``"mean"``.
    :param ignore_index: a label that contributes nothing, or None.
    :returns: the loss: a scalar, or (N, d1, ...) for ``"none"``.
    :raises BadInputError: a dtype or shape is wrong, ``reduction`` is unknown, or a label is out
        of range.
    """
    return SoftmaxCrossEntropyLoss(**_loss_attrs(reduction, ignore_index))(scores, labels, weights)

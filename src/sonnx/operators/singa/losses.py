"""SINGA's losses as composite operators (see sonnx.operators.loss for their definitions).

Each returns shape (1,) and exports a decomposition into standard ONNX ops (opset 9 or later):
per-sample sums over the non-batch axes, ReduceMean over the batch (so the exported graph
accepts any batch size), then Reshape to [1].
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.loss.onnx_losses import negative_log_likelihood
from sonnx.operators.normalization.common import check_float, compute_dtype
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = [
    "BinaryCrossEntropy",
    "CrossEntropy",
    "MeanSquareError",
    "SoftmaxCrossEntropy",
    "binary_cross_entropy",
    "cross_entropy",
    "mse_loss",
    "softmax_cross_entropy",
]

_LOG_FLOOR = -100.0


def _node(g: GraphBuilder, op_type: str, inputs: list[str], hint: str, **attrs: object) -> str:
    """Add one single-output node and return its fresh output name."""
    out = g.fresh_name(hint)
    g.add_node(op_type, inputs, [out], **attrs)
    return out


def _reduce(g: GraphBuilder, op_type: str, x: str, axes: list[int] | None, hint: str) -> str:
    """ReduceSum / ReduceMean without keepdims; ``axes=None`` reduces everything.

    The axes moved from an attribute to an input at opset 13 (ReduceSum) and 18 (ReduceMean).
    """
    if axes is None:
        return _node(g, op_type, [x], hint, keepdims=0)
    if g.opset >= (13 if op_type == "ReduceSum" else 18):
        return _node(g, op_type, [x, g.constant(axes, "axes", np.int64)], hint, keepdims=0)
    return _node(g, op_type, [x], hint, axes=axes, keepdims=0)


def _sum_per_sample(g: GraphBuilder, x: str, rank: int) -> str:
    """Sum over every axis but the batch axis 0 (nothing to sum for a 1-D input)."""
    if rank < 2:
        return x
    return _reduce(g, "ReduceSum", x, list(range(1, rank)), "loss_per_sample")


def _per_sample_sum(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1).sum(dim=1)


def _cast_to(g: GraphBuilder, name: str, have: torch.dtype, want: torch.dtype) -> str:
    if have == want:
        return name
    return _node(g, "Cast", [name], "loss_cast", to=dtypes.torch_to_onnx(want))


class _BatchLoss(Operator):
    """A SINGA loss of an input x (N, ...) and a target t: batch mean of per-sample losses."""

    def _inputs(self) -> tuple[Tensor, Tensor]:
        x, t = self.inputs
        if x is None or t is None:
            raise ExportError(f"{self.op_type}: both inputs must be recorded to export it")
        return x, t

    def _check(self, x: torch.Tensor, t: torch.Tensor, x_name: str) -> None:
        check_float(self.op_type, x_name, x)
        if x.dim() < 1:
            raise BadInputError(
                f"{self.op_type}: input {x_name} must be at least 1-D (N, ...), received a "
                "0-d tensor"
            )

    def _finish(self, g: GraphBuilder, per_sample: str, scale: float, output: str) -> None:
        """Batch mean of the per-sample losses times ``scale``, reshaped to [1]."""
        if g.opset < 9:
            raise ExportError(
                f"{self.op_type} can only be written at opset 9 or later, not {g.opset}"
            )
        mean = _reduce(g, "ReduceMean", per_sample, None, "loss_mean")
        if scale != 1.0:
            np_dtype = dtypes.torch_to_numpy(self._inputs()[0].dtype)
            factor = g.constant(np.asarray(scale), "loss_scale", np_dtype)
            mean = _node(g, "Mul", [mean, factor], "loss_scaled")
        g.add_node("Reshape", [mean, g.constant([1], "loss_shape", np.int64)], [output])


class _CrossEntropyBase(_BatchLoss):
    """``-mean_n sum_c t_nc log p_nc`` with t one-hot / soft (N, C) or labels (N,)."""

    log_op: ClassVar[str] = ""
    x_name: ClassVar[str] = "x"

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def hard_labels(x_shape: tuple[int, ...], t_shape: tuple[int, ...]) -> bool:
        """Class labels: one value per sample, e.g. (N,) or (N, 1), instead of (N, C)."""
        return t_shape != x_shape and int(np.prod(t_shape)) == x_shape[0]

    def forward(self, x, t) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        self._check(x, t, self.x_name)
        if x.dim() != 2:
            raise BadInputError(
                f"{op}: input {self.x_name} must be 2-D (N, C), received shape {tuple(x.shape)}"
            )
        log_p = self.log_prob(x.to(compute_dtype(x.dtype)))
        if self.hard_labels(tuple(x.shape), tuple(t.shape)):
            labels = t.reshape(-1)
            if labels.dtype.is_floating_point or labels.dtype.is_complex:
                # float class labels are most often a mistake (targets of the wrong shape, or
                # labels read as floats); the ONNX losses refuse them too
                raise BadInputError(
                    f"{op}: class labels t of shape {tuple(t.shape)} must be integer class "
                    f"indices; received {dtypes.dtype_name(labels.dtype)}: cast them (for "
                    f"NumPy labels.astype(np.int32)), or give one-hot or probability targets "
                    f"of x's shape {tuple(x.shape)}"
                )
            loss = negative_log_likelihood(op, log_p, labels, None, "mean", None)
        else:
            if tuple(t.shape) != tuple(x.shape):
                raise BadInputError(
                    f"{op}: target t must be labels ({x.shape[0]},) or one-hot/probabilities "
                    f"{tuple(x.shape)}, received shape {tuple(t.shape)}"
                )
            loss = -(t.to(log_p.dtype) * log_p).sum(dim=1).mean()
        if torch.is_autocast_enabled(x.device.type):
            # autocast's rule for losses: computed and returned in float32, so the loss (and a
            # float16 loss scale, 2**16 > float16's largest value) keeps its digits
            return loss.reshape(1)
        return loss.to(x.dtype).reshape(1)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        x, t = self._inputs()
        x_name, t_name = inputs
        if self.hard_labels(x.shape, t.shape):
            flat = _node(g, "Reshape", [t_name, g.constant([-1], "flat", np.int64)], "labels")
            labels = _cast_to(g, flat, t.dtype, torch.int64)
            if g.opset >= 12:
                self._export_labels(g, x_name, labels, outputs[0])
                return
            np_dtype = dtypes.torch_to_numpy(x.dtype)
            depth = g.constant(np.asarray(x.shape[1]), "depth", np.int64)
            values = g.constant([0, 1], "one_hot_values", np_dtype)
            target = _node(g, "OneHot", [labels, depth, values], "one_hot", axis=-1)
        else:
            target = _cast_to(g, t_name, t.dtype, x.dtype)
        log_p = _node(
            g,
            self.log_op,
            [x_name],
            "log_prob",
            **({"axis": 1} if self.log_op == "LogSoftmax" else {}),
        )
        weighted = _node(g, "Mul", [target, log_p], "weighted_log_prob")
        self._finish(g, _sum_per_sample(g, weighted, 2), -1.0, outputs[0])

    def _export_labels(self, g: GraphBuilder, x_name: str, labels: str, output: str) -> None:
        """Opset 12+: the ONNX loss operator with int64 labels, reshaped to [1]."""
        if self.log_op == "LogSoftmax":
            loss = _node(g, "SoftmaxCrossEntropyLoss", [x_name, labels], "loss", reduction="mean")
        else:
            log_p = _node(g, "Log", [x_name], "log_prob")
            loss = _node(g, "NegativeLogLikelihoodLoss", [log_p, labels], "loss", reduction="mean")
        g.add_node("Reshape", [loss, g.constant([1], "loss_shape", np.int64)], [output])


class SoftmaxCrossEntropy(_CrossEntropyBase):
    """SINGA's softmax cross-entropy of logits (N, C)."""

    op_type = "SoftmaxCrossEntropy"
    log_op = "LogSoftmax"

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


class CrossEntropy(_CrossEntropyBase):
    """SINGA's cross-entropy of probabilities (N, C)."""

    op_type = "CrossEntropy"
    log_op = "Log"
    x_name = "y"

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class MeanSquareError(_BatchLoss):
    """SINGA's ``sum((x - t)^2) / (2 N)``."""

    op_type = "MeanSquareError"

    def forward(self, x, t) -> torch.Tensor:  # type: ignore[override]
        self._check(x, t, "x")
        if tuple(t.shape) != tuple(x.shape):
            raise BadInputError(
                f"{self.op_type}: target t must have the shape of x {tuple(x.shape)}, "
                f"received {tuple(t.shape)}"
            )
        diff = x - t.to(x.dtype)
        return (_per_sample_sum(diff * diff).mean() / 2).reshape(1)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        x, t = self._inputs()
        diff = _node(g, "Sub", [inputs[0], _cast_to(g, inputs[1], t.dtype, x.dtype)], "diff")
        square = _node(g, "Mul", [diff, diff], "square")
        self._finish(g, _sum_per_sample(g, square, len(x.shape)), 0.5, outputs[0])


class BinaryCrossEntropy(_BatchLoss):
    """SINGA's ``-sum(t log x + (1 - t) log(1 - x)) / N``, logs clamped at -100."""

    op_type = "BinaryCrossEntropy"

    def forward(self, x, t) -> torch.Tensor:  # type: ignore[override]
        self._check(x, t, "x")
        if tuple(t.shape) != tuple(x.shape):
            raise BadInputError(
                f"{self.op_type}: target t must have the shape of x {tuple(x.shape)}, "
                f"received {tuple(t.shape)}"
            )
        t = t.to(x.dtype)
        log_x = torch.clamp(torch.log(x), min=_LOG_FLOOR)
        log_1mx = torch.clamp(torch.log(1 - x), min=_LOG_FLOOR)
        return (-_per_sample_sum(t * log_x + (1 - t) * log_1mx).mean()).reshape(1)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        x, t = self._inputs()
        np_dtype = dtypes.torch_to_numpy(x.dtype)
        one = g.constant(np.asarray(1), "one", np_dtype)
        floor = g.constant(np.asarray(_LOG_FLOOR), "log_floor", np_dtype)
        x_name, t_name = inputs[0], _cast_to(g, inputs[1], t.dtype, x.dtype)

        def clamped_log(name: str) -> str:
            return _node(g, "Max", [_node(g, "Log", [name], "log"), floor], "clamped_log")

        log_x = clamped_log(x_name)
        log_1mx = clamped_log(_node(g, "Sub", [one, x_name], "one_minus_x"))
        pos = _node(g, "Mul", [t_name, log_x], "positive")
        neg = _node(g, "Mul", [_node(g, "Sub", [one, t_name], "one_minus_t"), log_1mx], "negative")
        total = _node(g, "Add", [pos, neg], "log_likelihood")
        self._finish(g, _sum_per_sample(g, total, len(x.shape)), -1.0, outputs[0])


def _as_input(value: Tensor | np.ndarray, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    array = np.asarray(value)
    return Tensor(data=dtypes.array_to_torch(array), device=like.device, requires_grad=False)


def softmax_cross_entropy(x: Tensor, t: Tensor) -> Tensor:
    """SINGA's loss of logits ``x`` (N, C) against labels (N,) or one-hot / soft targets (N, C).

    :param x: the (N, C) logits.
    :param t: the targets: (N,) class indices, or (N, C) one-hot or soft targets (a Tensor or
        an array).
    :returns: the mean over the batch, shape (1,).
    :raises BadInputError: ``x`` is 0-D.
    """
    return SoftmaxCrossEntropy()(x, _as_input(t, x))


def cross_entropy(y: Tensor, t: Tensor) -> Tensor:
    """SINGA's ``-sum(t * log(y)) / N`` for probabilities ``y`` (N, C); shape (1,).

    :param y: the (N, C) probabilities.
    :param t: the (N, C) targets (a Tensor or an array).
    :returns: the loss, shape (1,).
    :raises BadInputError: ``y`` is 0-D or ``t``'s shape differs from ``y``'s.
    """
    return CrossEntropy()(y, _as_input(t, y))


def mse_loss(x: Tensor, t: Tensor) -> Tensor:
    """SINGA's ``sum((x - t)^2) / (2 N)`` with N = x.shape[0]; shape (1,).

    :param x: the (N, ...) predictions.
    :param t: the targets, of ``x``'s shape (a Tensor or an array).
    :returns: the loss, shape (1,).
    :raises BadInputError: ``x`` is 0-D or ``t``'s shape differs from ``x``'s.
    """
    return MeanSquareError()(x, _as_input(t, x))


def binary_cross_entropy(x: Tensor, t: Tensor) -> Tensor:
    """SINGA's ``-sum(t log x + (1 - t) log(1 - x)) / N`` for probabilities ``x``; shape (1,).

    :param x: the (N, ...) probabilities.
    :param t: the 0/1 (or soft) targets, of ``x``'s shape (a Tensor or an array).
    :returns: the loss, shape (1,).
    :raises BadInputError: ``x`` is 0-D or ``t``'s shape differs from ``x``'s.
    """
    return BinaryCrossEntropy()(x, _as_input(t, x))

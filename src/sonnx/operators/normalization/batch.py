"""Normalization: BatchNormalization, InstanceNormalization, GroupNormalization here;
LayerNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization and LRN in
``normalization_layer``; Dropout in ``normalization_dropout`` (all re-exported from here).

Statistics are computed in float32 for half-precision inputs and always use the population
variance (divide by the element count), as ONNX defines; note torch's running variance uses the
unbiased estimate instead, and its momentum weighs the *batch* statistic, while ONNX (and SINGA)
write ``running = momentum * running + (1 - momentum) * batch``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape, TorchOutputs, is_training
from sonnx.engine.singa_functions import (
    LIKE_X,
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.normalization.common import (
    attrs_at_opset,
    check_float,
    check_rank,
    compute_dtype,
    stash_dtype,
)
from sonnx.operators.normalization.dropout import *  # noqa: F403
from sonnx.operators.normalization.dropout import __all__ as _dropout_all
from sonnx.operators.normalization.layer import *  # noqa: F403
from sonnx.operators.normalization.layer import __all__ as _layer_all
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = [
    "BatchNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "batchnorm_2d",
    "batch_norm",
    "instance_norm",
    "group_norm",
    *_layer_all,
    *_dropout_all,
]


def _check_param(op: str, name: str, t: torch.Tensor, shape: tuple[int, ...]) -> None:
    if t.numel() != int(np.prod(shape)):
        raise BadInputError(
            f"{op}: input {name} must hold {int(np.prod(shape))} values (shape {shape}), "
            f"received shape {tuple(t.shape)}"
        )


def _normalize(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, eps: float) -> torch.Tensor:
    return (x - mean) * torch.rsqrt(var + eps)


class BatchNormalization(Operator):
    """Batch normalization over every axis but the channel axis 1.

    Inference uses the given mean and variance. Training (``training_mode=1`` from version 14;
    before that, a node asking for the running statistics as outputs, unless version 1/6's
    ``is_test`` is set) normalizes with the batch statistics and also returns the updated
    running statistics ``momentum * running + (1 - momentum) * batch`` (population variance).
    Versions 1 to 7 with ``spatial=0`` normalize each activation: parameters have shape
    ``X.shape[1:]`` and statistics reduce over the batch axis only. A 1-D input is (N,), C = 1.
    """

    op_type = "BatchNormalization"
    output_shape = OutputShape.FROM_SHAPES

    def is_training_mode(self) -> bool:
        v = self.version
        if v is None or v >= 14:
            return bool(self.attr("training_mode"))
        if v < 7 and self.attr("is_test"):
            return False
        return (self.requested_outputs or 1) > 1

    def per_activation(self) -> bool:
        v = self.version
        return v is not None and v < 9 and self.attr("spatial") == 0

    def forward(self, x, scale, b, mean, var) -> TorchOutputs:  # type: ignore[override]
        op = self.op_type
        check_float(op, "X", x)
        check_rank(op, "X", x, 1, "at least 1-D (N, C, spatial...)")
        shape = x.shape
        if x.dim() == 1:
            x = x.unsqueeze(1)
        if self.per_activation():
            c_shape, reduce_dims = tuple(x.shape[1:]), (0,)
        else:
            c_shape, reduce_dims = (x.shape[1],), (0, *range(2, x.dim()))
        for name, t in (("scale", scale), ("B", b), ("mean", mean), ("var", var)):
            if t is None:
                raise BadInputError(f"{op}: input {name} is required, received nothing")
            _check_param(op, name, t, c_shape)
        fused = self._fused(x, scale, b, mean, var)
        if fused is not None:
            return fused
        ct = compute_dtype(x.dtype)
        param_shape = (1, *c_shape) + (1,) * (x.dim() - 1 - len(c_shape))

        def as_param(t: torch.Tensor) -> torch.Tensor:
            return t.to(ct).reshape(param_shape)

        xc = x.to(ct)
        eps = float(self.attr("epsilon"))
        affine = as_param(scale), as_param(b)
        if not self.is_training_mode():
            y = _normalize(xc, as_param(mean), as_param(var), eps) * affine[0] + affine[1]
            return y.to(x.dtype).reshape(shape)
        batch_mean = xc.mean(dim=reduce_dims, keepdim=True)
        batch_var = xc.var(dim=reduce_dims, unbiased=False, keepdim=True)
        y = _normalize(xc, batch_mean, batch_var, eps) * affine[0] + affine[1]
        m = float(self.attr("momentum"))
        bm, bv = batch_mean.detach(), batch_var.detach()
        running_mean = as_param(mean) * m + bm * (1 - m)
        running_var = as_param(var) * m + bv * (1 - m)
        outs = [
            y.to(x.dtype).reshape(shape),
            running_mean.reshape(mean.shape).to(mean.dtype),
            running_var.reshape(var.shape).to(var.dtype),
        ]
        if self.version is not None and self.version < 14:
            outs += [bm.reshape(mean.shape).to(mean.dtype), bv.reshape(var.shape).to(var.dtype)]
        n = self.requested_outputs or len(outs)
        return outs[0] if n == 1 else tuple(outs[:n])

    def _fused(self, x, scale, b, mean, var) -> TorchOutputs | None:  # type: ignore[no-untyped-def]
        """torch's fused batch-norm kernels where they compute exactly ONNX's formula
        (per-channel, float32/float64, running statistics without gradients); None otherwise.
        A training step is several times faster than the same formula as separate ops."""
        params = (scale, b, mean, var)
        if (
            x.dim() < 2
            or self.per_activation()
            or x.dtype not in (torch.float32, torch.float64)
            or any(t.dtype != x.dtype or t.dim() != 1 for t in params)
            or mean.requires_grad
            or var.requires_grad
        ):
            return None
        eps = float(self.attr("epsilon"))
        if not self.is_training_mode():
            return F.batch_norm(x, mean, var, scale, b, False, 0.0, eps)
        y, batch_mean, invstd = torch.native_batch_norm(x, scale, b, None, None, True, 0.0, eps)
        m = float(self.attr("momentum"))
        with torch.no_grad():
            batch_var = invstd.pow(-2) - eps  # the population variance the kernel used
            outs = [y, mean * m + batch_mean * (1 - m), var * m + batch_var * (1 - m)]
            if self.version is not None and self.version < 14:
                outs += [batch_mean, batch_var]
        n = self.requested_outputs or len(outs)
        return outs[0] if n == 1 else tuple(outs[:n])

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        training = self.is_training_mode()
        if self.per_activation() and g.opset >= 9:
            raise ExportError(
                f"BatchNormalization with spatial=0 cannot be written at opset {g.opset}: the "
                "attribute was removed in opset 9"
            )
        attrs: dict[str, Any] = {
            "epsilon": float(self.attr("epsilon")),
            "momentum": float(self.attr("momentum")),
        }
        outs = outputs[: 3 if training else 1]
        if g.opset >= 14:
            attrs["training_mode"] = int(training)
        else:
            outs = outputs if training else outputs[:1]
            if self.per_activation():
                attrs["spatial"] = 0
            if g.opset < 7:
                attrs["is_test"] = int(not training)
            if g.opset < 6:
                attrs["consumed_inputs"] = [0, 0, 0, 1, 1] if training else [0, 0, 0, 0, 0]
        g.add_node(self.op_type, inputs, outs, **attrs)


class InstanceNormalization(Operator):
    """Normalize each (instance, channel) over its spatial axes, then scale and shift."""

    op_type = "InstanceNormalization"
    since_versions = (1, 6, 22)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "instance_norm",
            "Instance normalization of an (N, C, D1, ...) input (ONNX InstanceNormalization).",
            inputs=(
                Input("x", "a floating-point (N, C, D1, ...) tensor."),
                Input("scale", "the (C,) scale."),
                Input("bias", "the (C,) offset."),
            ),
            returns=LIKE_X,
            keywords=(
                Keyword(
                    "epsilon", "added to the variance before its square root.", convert="float"
                ),
            ),
            raises=(("BadInputError", "``x`` is not floating-point or has fewer than 3 axes."),),
        ),
    )

    def forward(self, x, scale, b) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        check_float(op, "input", x)
        check_rank(op, "input", x, 3, "at least 3-D (N, C, D1, ...)")
        c = x.shape[1]
        _check_param(op, "scale", scale, (c,))
        _check_param(op, "B", b, (c,))
        ct = compute_dtype(x.dtype)
        xc = x.to(ct)
        dims = tuple(range(2, x.dim()))
        mean = xc.mean(dim=dims, keepdim=True)
        var = xc.var(dim=dims, unbiased=False, keepdim=True)
        param_shape = (1, c) + (1,) * (x.dim() - 2)
        y = _normalize(xc, mean, var, float(self.attr("epsilon")))
        y = y * scale.to(ct).reshape(param_shape) + b.to(ct).reshape(param_shape)
        return y.to(x.dtype)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        attrs = attrs_at_opset(self.op_type, g.opset, self.attrs)
        g.add_node(self.op_type, inputs, outputs, **attrs)


class GroupNormalization(Operator):
    """Normalize each group of ``C / num_groups`` channels per instance, then scale and shift.

    Version 18 takes ``scale`` and ``bias`` per group (shape ``(num_groups,)``); version 21
    (the framework's default) per channel, and computes the statistics in ``stash_type``.
    """

    op_type = "GroupNormalization"
    since_versions = (18, 21)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "group_norm",
            "Group normalization with per-channel ``scale`` and ``bias`` (ONNX version 21).",
            inputs=(
                Input("x", "a floating-point (N, C, ...) tensor."),
                Input("scale", "the (C,) scale."),
                Input("bias", "the (C,) offset."),
            ),
            returns=LIKE_X,
            keywords=(
                Keyword("num_groups", "the number of channel groups (dividing C).", convert="int"),
                Keyword(
                    "epsilon", "added to the variance before its square root.", convert="float"
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``x`` is not floating-point or has fewer than 2 axes, or ``num_groups`` "
                        "does not divide C."
                    ),
                ),
            ),
        ),
    )

    def per_group_affine(self) -> bool:
        return self.version is not None and self.version < 21

    def forward(self, x, scale, bias) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        check_float(op, "X", x)
        check_rank(op, "X", x, 2, "at least 2-D (N, C, ...)")
        n, c = x.shape[:2]
        groups = int(self.attr("num_groups"))
        if groups <= 0 or c % groups:
            raise BadInputError(
                f"{op}: attribute num_groups must be positive and divide the {c} channels of "
                f"X, received {groups}"
            )
        affine = (groups,) if self.per_group_affine() else (c,)
        _check_param(op, "scale", scale, affine)
        _check_param(op, "bias", bias, affine)
        stash = None if self.per_group_affine() else stash_dtype(op, self.attr("stash_type"))
        xg = x.to(compute_dtype(x.dtype, stash)).reshape(n, groups, -1)
        mean = xg.mean(dim=-1, keepdim=True)
        var = xg.var(dim=-1, unbiased=False, keepdim=True)
        normed = _normalize(xg, mean, var, float(self.attr("epsilon"))).reshape(x.shape)
        normed = normed.to(x.dtype)
        if self.per_group_affine():
            scale = scale.reshape(-1).repeat_interleave(c // groups)
            bias = bias.reshape(-1).repeat_interleave(c // groups)
        param_shape = (1, c) + (1,) * (x.dim() - 2)
        return normed * scale.to(x.dtype).reshape(param_shape) + bias.to(x.dtype).reshape(
            param_shape
        )

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        per_group = self.per_group_affine()
        if (per_group and 18 <= g.opset < 21) or (not per_group and g.opset >= 21):
            # stash_type is written even at its default: ONNX's function body reads it.
            names = (
                ("epsilon", "num_groups") if per_group else ("epsilon", "num_groups", "stash_type")
            )
            g.add_node(self.op_type, inputs, outputs, **{k: self.attr(k) for k in names})
            return
        self._export_decomposed(g, inputs, outputs)

    def _export_decomposed(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """InstanceNormalization over X reshaped to (N, groups, -1), reshaped back.

        Per-group scale and bias (version 18) are InstanceNormalization's own; per-channel ones
        are applied afterwards with Mul and Add.
        """
        if g.opset < 6:
            raise ExportError(f"GroupNormalization cannot be written at opset {g.opset} (< 6)")
        x_name, scale_name, bias_name = inputs
        x = self.inputs[0]
        if x is None:
            raise ExportError("GroupNormalization: input X was not recorded, cannot export")
        groups = int(self.attr("num_groups"))
        np_dtype = dtypes.torch_to_numpy(x.dtype)
        grouped = g.fresh_name("group_norm_grouped")
        g.add_node(
            "Reshape", [x_name, g.constant([0, groups, -1], "groups_shape", np.int64)], [grouped]
        )
        normed = g.fresh_name("group_norm_normed")
        eps = float(self.attr("epsilon"))
        if self.per_group_affine():
            g.add_node(
                "InstanceNormalization", [grouped, scale_name, bias_name], [normed], epsilon=eps
            )
        else:
            ones = g.constant(np.ones(groups), "ones", np_dtype)
            zeros = g.constant(np.zeros(groups), "zeros", np_dtype)
            g.add_node("InstanceNormalization", [grouped, ones, zeros], [normed], epsilon=eps)
        x_shape = g.fresh_name("group_norm_shape")
        g.add_node("Shape", [x_name], [x_shape])
        if self.per_group_affine():
            g.add_node("Reshape", [normed, x_shape], outputs)
            return
        restored = g.fresh_name("group_norm_restored")
        g.add_node("Reshape", [normed, x_shape], [restored])
        param_shape = g.constant([-1] + [1] * (len(x.shape) - 2), "param_shape", np.int64)
        scale_c = g.fresh_name("group_norm_scale")
        bias_c = g.fresh_name("group_norm_bias")
        g.add_node("Reshape", [scale_name, param_shape], [scale_c])
        g.add_node("Reshape", [bias_name, param_shape], [bias_c])
        scaled = g.fresh_name("group_norm_scaled")
        g.add_node("Mul", [restored, scale_c], [scaled])
        g.add_node("Add", [scaled, bias_c], outputs)


def batch_norm(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float = 0.9,
    epsilon: float = 1e-5,
) -> Tensor:
    """Batch normalization of an (N, C, ...) input, as SINGA's and torch's layers behave.

    When ``sonnx.autograd.training`` is True it normalizes with the batch statistics and
    updates ``running_mean`` and ``running_var`` in place (``momentum * running + (1 -
    momentum) * batch``, population variance); otherwise it uses the running statistics.

    :param x: a floating-point (N, C, ...) tensor.
    :param scale: the (C,) scale.
    :param bias: the (C,) offset.
    :param running_mean: the (C,) running mean (updated in place while training).
    :param running_var: the (C,) running variance (updated in place while training).
    :param momentum: the weight of the running statistics in each update.
    :param epsilon: added to the variance before its square root.
    :returns: the normalized tensor, of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or is 0-D.
    """
    training = is_training()
    op = BatchNormalization(
        momentum=float(momentum), epsilon=float(epsilon), training_mode=int(training)
    )
    out = op(x, scale, bias, running_mean, running_var)
    if not training:
        return out
    y, new_mean, new_var = out
    with torch.no_grad():
        running_mean.data.copy_(new_mean.data)
        running_var.data.copy_(new_var.data)
    return y


def batchnorm_2d(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float = 0.9,
    epsilon: float = 1e-5,
) -> Tensor:
    """SINGA's name for :func:`batch_norm` on an (N, C, H, W) input.

    :param x: a floating-point (N, C, H, W) tensor.
    :param scale: the (C,) scale.
    :param bias: the (C,) offset.
    :param running_mean: the (C,) running mean (updated in place while training).
    :param running_var: the (C,) running variance (updated in place while training).
    :param momentum: the weight of the running statistics in each update.
    :param epsilon: added to the variance before its square root.
    :returns: the normalized tensor, of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not 4-D or not floating-point.
    """
    if x.ndim() != 4:
        raise BadInputError(
            f"batchnorm_2d: input x must be 4-D (N, C, H, W), received shape {x.shape}"
        )
    return batch_norm(x, scale, bias, running_mean, running_var, momentum, epsilon)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def instance_norm(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-05) -> Tensor:
    """Instance normalization of an (N, C, D1, ...) input (ONNX InstanceNormalization).

    :param x: a floating-point (N, C, D1, ...) tensor.
    :param scale: the (C,) scale.
    :param bias: the (C,) offset.
    :param epsilon: added to the variance before its square root.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or has fewer than 3 axes.
    """
    return InstanceNormalization(epsilon=float(epsilon))(x, scale, bias)


def group_norm(
    x: Tensor, scale: Tensor, bias: Tensor, num_groups: int, epsilon: float = 1e-05
) -> Tensor:
    """Group normalization with per-channel ``scale`` and ``bias`` (ONNX version 21).

    :param x: a floating-point (N, C, ...) tensor.
    :param scale: the (C,) scale.
    :param bias: the (C,) offset.
    :param num_groups: the number of channel groups (dividing C).
    :param epsilon: added to the variance before its square root.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or has fewer than 2 axes, or ``num_groups``
        does not divide C.
    """
    return GroupNormalization(num_groups=int(num_groups), epsilon=float(epsilon))(x, scale, bias)

"""Per-sample normalizations: LayerNormalization, RMSNormalization, LpNormalization,
MeanVarianceNormalization and LRN (local response normalization across channels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape, TorchOutputs
from sonnx.engine.singa_functions import (
    LIKE_X,
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.normalization.common import (
    attrs_at_opset,
    check_broadcasts_to,
    check_float,
    check_rank,
    compute_dtype,
    normalize_axis,
    stash_dtype,
)
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = [
    "LRN",
    "LayerNormalization",
    "LpNormalization",
    "MeanVarianceNormalization",
    "RMSNormalization",
    "layer_norm",
    "lp_norm",
    "lrn",
    "mean_variance_norm",
    "rms_norm",
]


_NORMALIZED = "must broadcast to the normalized shape {}"


def _signature(
    x: torch.Tensor, scale: torch.Tensor, b: torch.Tensor | None, outputs: int
) -> tuple[Any, ...]:
    """What LayerNormalization's checks and choice of kernel depend on."""
    bias = None if b is None else (b.shape, b.dtype)
    return (x.shape, x.dtype, scale.shape, scale.dtype, bias, outputs)


def _recorded_axes(op: Operator) -> tuple[Tensor, list[int]]:
    """The recorded input X and the axes ``axis..rank-1`` a decomposition reduces over."""
    x = op.inputs[0] if op.inputs else None
    if x is None:
        raise ExportError(f"{op.op_type}: input X was not recorded, cannot export")
    rank = len(x.shape)
    return x, list(range(int(op.attr("axis")) % rank, rank))


def _cast(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.to(dtype)


def _reduce_mean(g: GraphBuilder, x: str, axes: list[int], out: str) -> None:
    """ReduceMean with keepdims over ``axes``: an attribute before opset 18, an input since."""
    if g.opset >= 18:
        g.add_node("ReduceMean", [x, g.constant(axes, "axes", np.int64)], [out], keepdims=1)
    else:
        g.add_node("ReduceMean", [x], [out], axes=axes, keepdims=1)


def _scalar(g: GraphBuilder, value: float, like: Tensor | None, hint: str) -> str:
    np_dtype = dtypes.torch_to_numpy(like.dtype) if like is not None else np.float32
    return g.constant(np.asarray(value), hint, np_dtype)


class LayerNormalization(Operator):
    """Normalize over the axes from ``axis`` to the last, then scale (and shift).

    Statistics are computed in ``stash_type`` (float32 by default); the optional outputs Mean
    and InvStdDev (shape ``X.shape[:axis] + (1, ...)``) are in that type.
    """

    op_type = "LayerNormalization"
    since_versions = (17,)
    output_shape = OutputShape.FROM_SHAPES
    # The last input signature found to take torch's fused kernel, with the normalized shape
    # and epsilon: an imported transformer runs one operator object on the same shapes at
    # every call, and its checks cost more than the kernel at small sizes.
    _fused: tuple[Any, ...] | None = None

    singa_functions = (
        SingaFunction(
            "layer_norm",
            (
                "Layer normalization over the axes from ``axis`` to the last (ONNX "
                "LayerNormalization)."
            ),
            inputs=(
                Input("x", "a floating-point tensor of at least 1 axis."),
                Input("scale", "the scale, broadcasting to ``x.shape[axis:]``."),
                Input("bias", "the offset, broadcasting to ``x.shape[axis:]``, or None."),
            ),
            returns=LIKE_X,
            keywords=(
                Keyword("axis", "the first normalized axis.", convert="int"),
                Keyword(
                    "epsilon", "added to the variance before its square root.", convert="float"
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``x`` is not floating-point or 0-D, or ``scale`` or ``bias`` does not "
                        "broadcast to the normalized shape."
                    ),
                ),
            ),
        ),
    )

    def forward(self, x, scale, b=None) -> TorchOutputs:  # type: ignore[override]
        fused = self._fused
        if fused is not None and fused[0] == _signature(x, scale, b, self.requested_outputs or 1):
            _, normalized, eps = fused
            return F.layer_norm(x, normalized, scale, b, eps)
        op = self.op_type
        check_float(op, "X", x)
        check_rank(op, "X", x, 1, "at least 1-D")
        axis = normalize_axis(op, int(self.attr("axis")), x.dim())
        check_broadcasts_to(op, "Scale", scale, x.shape[axis:], _NORMALIZED)
        if b is not None:
            check_broadcasts_to(op, "B", b, x.shape[axis:], _NORMALIZED)
        stash = stash_dtype(op, self.attr("stash_type"))
        n = self.requested_outputs or 1
        normalized = tuple(x.shape[axis:])
        if (
            n == 1
            and compute_dtype(x.dtype, stash) == x.dtype
            and tuple(scale.shape) == normalized
            and (b is None or tuple(b.shape) == normalized)
        ):
            # torch's fused kernel (and its one-kernel backward) computes the same thing.
            eps = float(self.attr("epsilon"))
            if value_checks() and scale.dtype == x.dtype and (b is None or b.dtype == x.dtype):
                # not while a graph is traced: its shapes may be symbols
                self._fused = (_signature(x, scale, b, n), normalized, eps)
            return F.layer_norm(x, normalized, scale.to(x.dtype), _cast(b, x.dtype), eps)
        xc = x.to(compute_dtype(x.dtype, stash))
        dims = tuple(range(axis, x.dim()))
        mean = xc.mean(dim=dims, keepdim=True)
        centered = xc - mean
        inv_std = torch.rsqrt(
            (centered * centered).mean(dim=dims, keepdim=True) + float(self.attr("epsilon"))
        )
        y = (centered * inv_std).to(x.dtype) * scale.to(x.dtype)
        if b is not None:
            y = y + b.to(x.dtype)
        if n == 1:
            return y
        return (y, mean.to(stash), inv_std.to(stash))[:n]

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= 17:
            g.add_node(
                self.op_type, inputs, outputs, **attrs_at_opset(self.op_type, 17, self.attrs)
            )
            return
        self._export_decomposed(g, inputs, outputs)

    def _export_decomposed(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """ReduceMean / Sub / Mul / Add / Sqrt / Reciprocal for opsets before 17."""
        x_name, scale_name = inputs[0], inputs[1]
        bias_name = inputs[2] if len(inputs) > 2 else ""
        x, axes = _recorded_axes(self)
        names = {
            k: g.fresh_name(f"layer_norm_{k}")
            for k in ("centered", "square", "var", "var_eps", "std", "normed", "scaled")
        }
        mean = outputs[1] if len(outputs) > 1 else g.fresh_name("layer_norm_mean")
        inv_std = outputs[2] if len(outputs) > 2 else g.fresh_name("layer_norm_inv_std")
        _reduce_mean(g, x_name, axes, mean)
        g.add_node("Sub", [x_name, mean], [names["centered"]])
        g.add_node("Mul", [names["centered"], names["centered"]], [names["square"]])
        _reduce_mean(g, names["square"], axes, names["var"])
        eps = _scalar(g, float(self.attr("epsilon")), x, "epsilon")
        g.add_node("Add", [names["var"], eps], [names["var_eps"]])
        g.add_node("Sqrt", [names["var_eps"]], [names["std"]])
        g.add_node("Reciprocal", [names["std"]], [inv_std])
        g.add_node("Mul", [names["centered"], inv_std], [names["normed"]])
        if bias_name:
            g.add_node("Mul", [names["normed"], scale_name], [names["scaled"]])
            g.add_node("Add", [names["scaled"], bias_name], [outputs[0]])
        else:
            g.add_node("Mul", [names["normed"], scale_name], [outputs[0]])


class RMSNormalization(Operator):
    """``X / sqrt(mean(X^2 over axes axis..last) + epsilon) * scale``; output in scale's type."""

    op_type = "RMSNormalization"
    since_versions = (23,)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "rms_norm",
            "RMS normalization over the axes from ``axis`` to the last (ONNX RMSNormalization).",
            inputs=(
                Input("x", "a floating-point tensor of at least 1 axis."),
                Input("scale", "the scale, broadcasting to ``x.shape[axis:]``."),
            ),
            returns="a tensor of ``x``'s shape in ``scale``'s dtype.",
            keywords=(
                Keyword("axis", "the first normalized axis.", convert="int"),
                Keyword(
                    "epsilon", "added to the mean square before its square root.", convert="float"
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "an input is not floating-point, ``x`` is 0-D, or ``scale`` does not "
                        "broadcast to the normalized shape."
                    ),
                ),
            ),
        ),
    )

    def forward(self, x, scale) -> torch.Tensor:  # type: ignore[override]
        return rms_normalize(self, x, scale)[0]

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= 23:
            g.add_node(
                self.op_type, inputs, outputs, **attrs_at_opset(self.op_type, 23, self.attrs)
            )
            return
        x_name, scale_name = inputs
        x, axes = _recorded_axes(self)
        names = {
            k: g.fresh_name(f"rms_norm_{k}")
            for k in ("square", "mean", "mean_eps", "rms", "normed")
        }
        g.add_node("Mul", [x_name, x_name], [names["square"]])
        _reduce_mean(g, names["square"], axes, names["mean"])
        eps = _scalar(g, float(self.attr("epsilon")), x, "epsilon")
        g.add_node("Add", [names["mean"], eps], [names["mean_eps"]])
        g.add_node("Sqrt", [names["mean_eps"]], [names["rms"]])
        g.add_node("Div", [x_name, names["rms"]], [names["normed"]])
        g.add_node("Mul", [names["normed"], scale_name], outputs)


def rms_normalize(
    op: Operator, x: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNormalization with ``op``'s axis, epsilon and stash_type: (Y in scale's type, the
    inverse RMS in the stash type, shaped as X with the normalized axes 1). onnxruntime's
    SimplifiedLayerNormalization returns both."""
    name = op.op_type
    check_float(name, "X", x)
    check_float(name, "scale", scale)
    check_rank(name, "X", x, 1, "at least 1-D")
    axis = normalize_axis(name, int(op.attr("axis")), x.dim())
    check_broadcasts_to(name, "scale", scale, x.shape[axis:], _NORMALIZED)
    stash = stash_dtype(name, op.attr("stash_type"))
    xc = x.to(compute_dtype(x.dtype, stash))
    dims = tuple(range(axis, x.dim()))
    inv_rms = torch.rsqrt((xc * xc).mean(dim=dims, keepdim=True) + float(op.attr("epsilon")))
    normed = (xc * inv_rms).to(x.dtype)
    return (normed * scale).to(scale.dtype), inv_rms.to(stash)


class LpNormalization(Operator):
    """Divide by the L1 or L2 norm along ``axis``; a zero-norm slice stays zero."""

    op_type = "LpNormalization"
    since_versions = (1, 22)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "lp_norm",
            "``x`` divided by its L``p`` norm along ``axis`` (p is 1 or 2; ONNX LpNormalization).",
            inputs=(Input("x", "a floating-point tensor of at least 1 axis."),),
            returns=LIKE_X,
            keywords=(
                Keyword("axis", "the axis the norm is taken along.", convert="int"),
                Keyword("p", "the norm's order, 1 or 2.", convert="int"),
            ),
            raises=(
                ("BadInputError", "``x`` is not floating-point or is 0-D, or ``p`` is not 1 or 2."),
            ),
        ),
    )

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        check_float(op, "input", x)
        check_rank(op, "input", x, 1, "at least 1-D")
        axis = normalize_axis(op, int(self.attr("axis")), x.dim())
        p = int(self.attr("p"))
        if p not in (1, 2):
            raise BadInputError(f"{op}: attribute p must be 1 or 2, received {p}")
        norm = torch.linalg.vector_norm(x, ord=p, dim=axis, keepdim=True)
        return x / torch.where(norm == 0, torch.ones_like(norm), norm)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(
            self.op_type, inputs, outputs, **attrs_at_opset(self.op_type, g.opset, self.attrs)
        )


class MeanVarianceNormalization(Operator):
    """``(X - mean) / (std + 1e-9)`` over ``axes`` (the epsilon is ONNX's function body's)."""

    op_type = "MeanVarianceNormalization"
    since_versions = (9, 13)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        check_float(op, "X", x)
        axes = [int(a) for a in self.attr("axes")]
        dims = tuple(sorted({normalize_axis(op, a, x.dim()) for a in axes}))
        xc = x.to(compute_dtype(x.dtype))
        mean = xc.mean(dim=dims, keepdim=True)
        centered = xc - mean
        std = torch.sqrt((centered * centered).mean(dim=dims, keepdim=True))
        return (centered / (std + 1e-9)).to(x.dtype)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(
            self.op_type, inputs, outputs, **attrs_at_opset(self.op_type, g.opset, self.attrs)
        )


class LRN(Operator):
    """Local response normalization across channels.

    ``y = x / (bias + alpha / size * sum of x^2 over the channel window) ** beta``; the window
    spans ``floor((size-1)/2)`` channels before and ``ceil((size-1)/2)`` after, as ONNX defines
    (torch's ``local_response_norm`` puts the longer side first, so it is not used).
    """

    op_type = "LRN"
    since_versions = (1, 13)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "lrn",
            "Local response normalization across the channels of an (N, C, ...) input (ONNX LRN).",
            inputs=(Input("x", "a floating-point (N, C, ...) tensor."),),
            returns=LIKE_X,
            keywords=(
                Keyword("size", "the number of channels in each sum.", convert="int"),
                Keyword("alpha", "the scale of the sum of squares.", convert="float"),
                Keyword("beta", "the exponent.", convert="float"),
                Keyword("bias", "the constant added before the exponent.", convert="float"),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``x`` is not floating-point or has fewer than 2 axes, or ``size`` is not "
                        "positive."
                    ),
                ),
            ),
        ),
    )

    def forward(self, x) -> torch.Tensor:  # type: ignore[override]
        op = self.op_type
        check_float(op, "X", x)
        check_rank(op, "X", x, 2, "at least 2-D (N, C, ...)")
        size = int(self.attr("size"))
        if size <= 0:
            raise BadInputError(f"{op}: attribute size must be positive, received {size}")
        alpha, beta, bias = (float(self.attr(k)) for k in ("alpha", "beta", "bias"))
        xc = x.to(compute_dtype(x.dtype))
        before = (size - 1) // 2
        square = (xc * xc).movedim(1, -1)
        padded = torch.nn.functional.pad(square, (before, size - 1 - before))
        window_sum = padded.unfold(-1, size, 1).sum(dim=-1).movedim(-1, 1)
        return (xc / (bias + alpha / size * window_sum) ** beta).to(x.dtype)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(
            self.op_type, inputs, outputs, **attrs_at_opset(self.op_type, g.opset, self.attrs)
        )


def mean_variance_norm(x: Tensor, axes: Sequence[int] = (0, 2, 3)) -> Tensor:
    """Zero mean and unit variance over ``axes`` (ONNX MeanVarianceNormalization).

    :param x: a floating-point tensor.
    :param axes: the axes the statistics are taken over.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return MeanVarianceNormalization(axes=[int(a) for a in axes])(x)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def layer_norm(
    x: Tensor, scale: Tensor, bias: Tensor | None = None, axis: int = -1, epsilon: float = 1e-05
) -> Tensor:
    """Layer normalization over the axes from ``axis`` to the last (ONNX LayerNormalization).

    :param x: a floating-point tensor of at least 1 axis.
    :param scale: the scale, broadcasting to ``x.shape[axis:]``.
    :param bias: the offset, broadcasting to ``x.shape[axis:]``, or None.
    :param axis: the first normalized axis.
    :param epsilon: added to the variance before its square root.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or 0-D, or ``scale`` or ``bias`` does not
        broadcast to the normalized shape.
    """
    return LayerNormalization(axis=int(axis), epsilon=float(epsilon))(x, scale, bias)


def rms_norm(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-05) -> Tensor:
    """RMS normalization over the axes from ``axis`` to the last (ONNX RMSNormalization).

    :param x: a floating-point tensor of at least 1 axis.
    :param scale: the scale, broadcasting to ``x.shape[axis:]``.
    :param axis: the first normalized axis.
    :param epsilon: added to the mean square before its square root.
    :returns: a tensor of ``x``'s shape in ``scale``'s dtype.
    :raises BadInputError: an input is not floating-point, ``x`` is 0-D, or ``scale`` does not
        broadcast to the normalized shape.
    """
    return RMSNormalization(axis=int(axis), epsilon=float(epsilon))(x, scale)


def lp_norm(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
    """``x`` divided by its L``p`` norm along ``axis`` (p is 1 or 2; ONNX LpNormalization).

    :param x: a floating-point tensor of at least 1 axis.
    :param axis: the axis the norm is taken along.
    :param p: the norm's order, 1 or 2.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or is 0-D, or ``p`` is not 1 or 2.
    """
    return LpNormalization(axis=int(axis), p=int(p))(x)


def lrn(
    x: Tensor, size: int, alpha: float = 0.0001, beta: float = 0.75, bias: float = 1.0
) -> Tensor:
    """Local response normalization across the channels of an (N, C, ...) input (ONNX LRN).

    :param x: a floating-point (N, C, ...) tensor.
    :param size: the number of channels in each sum.
    :param alpha: the scale of the sum of squares.
    :param beta: the exponent.
    :param bias: the constant added before the exponent.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point or has fewer than 2 axes, or ``size`` is not
        positive.
    """
    return LRN(size=int(size), alpha=float(alpha), beta=float(beta), bias=float(bias))(x)

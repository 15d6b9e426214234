"""Activation functions that act on each element alone: the rectifiers (Relu, LeakyRelu,
PRelu, Elu, Selu, Celu, ThresholdedRelu, Shrink) and the squashing functions (Sigmoid,
HardSigmoid, Tanh, Softplus, Softsign). The gated activations (HardSwish, Gelu, Mish, Swish,
SwiGLU) are in :mod:`sonnx.operators.activation.gated`, the softmax family in
:mod:`sonnx.operators.activation.softmax`, the base they share in
:mod:`sonnx.operators.activation.base`.

Every class is one ONNX operator run with torch functions, so torch autograd provides the
gradients. Activations that ONNX added late (Celu, ThresholdedRelu) export a decomposition
into older operators when the target opset predates them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.nn import functional as F

from sonnx import dtypes
from sonnx.engine.singa_functions import (
    LIKE_X,
    Input,
    Keyword,
    SingaFunction,
    float_function,
)
from sonnx.errors import BadInputError
from sonnx.operators.activation.base import _UNSIGNED, _Activation, scalar_constant
from sonnx.operators.elementwise.base import broadcast_shapes
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "Celu",
    "Elu",
    "HardSigmoid",
    "LeakyRelu",
    "PRelu",
    "Relu",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Softplus",
    "Softsign",
    "Tanh",
    "ThresholdedRelu",
    "celu",
    "elu",
    "hardsigmoid",
    "leakyrelu",
    "prelu",
    "relu",
    "selu",
    "shrink",
    "sigmoid",
    "softplus",
    "softsign",
    "tanh",
    "thresholded_relu",
]


class Relu(_Activation):
    """ONNX ``Relu``: ``max(x, 0)`` element-wise, for signed number tensors."""

    op_type = "Relu"
    since_versions = (1, 6, 13, 14)

    singa_functions = (
        SingaFunction(
            "relu",
            "``max(x, 0)`` element-wise (ONNX ``Relu``).",
            inputs=(Input("x", "a tensor of a signed number type."),),
            returns=LIKE_X,
            raises=(("BadInputError", "``x`` is boolean, complex or unsigned."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.bool or x.is_complex() or x.dtype in _UNSIGNED:
            raise BadInputError(
                f"Relu: input X must be a signed number tensor, received "
                f"{dtypes.dtype_name(x.dtype)}"
            )
        return torch.relu(x)


class LeakyRelu(_Activation):
    """ONNX ``LeakyRelu``: ``x`` where x >= 0, else ``alpha * x`` (attribute ``alpha``, 0.01)."""

    op_type = "LeakyRelu"
    since_versions = (1, 6, 16)

    singa_functions = (
        float_function(
            "leakyrelu",
            "``x`` where x >= 0, else ``a * x`` (ONNX ``LeakyRelu``).",
            Keyword("a", "the slope of the negative part (ONNX's ``alpha``).", attr="alpha"),
        ),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, float(self.attr("alpha")))


class PRelu(_Activation):
    """``slope * x`` where x < 0; ``slope`` broadcasts unidirectionally to ``X``."""

    op_type = "PRelu"
    since_versions = (1, 6, 7, 9, 16)

    singa_functions = (
        SingaFunction(
            "prelu",
            "``slope * x`` where x < 0, else ``x`` (ONNX ``PRelu``).",
            inputs=(
                Input("x", "the input tensor."),
                Input(
                    "slope", "the slopes, broadcast to ``x``'s shape (one per channel, for one)."
                ),
            ),
            returns=LIKE_X,
            raises=(("BadInputError", "``slope`` does not broadcast to ``x``'s shape."),),
        ),
    )

    def _per_channel(self, x_shape: tuple[int, ...], slope_shape: tuple[int, ...]) -> bool:
        """Before version 7 a 1-D slope held one value per channel (axis 1 of X). Reads shapes
        only: an export sees a large computed X as a record without values."""
        return (
            self.version is not None
            and self.version < 7
            and len(slope_shape) == 1
            and len(x_shape) > 2
            and slope_shape[0] == x_shape[1]
            and slope_shape[0] > 1
        )

    def forward(self, x: torch.Tensor, slope: torch.Tensor) -> torch.Tensor:
        if self._per_channel(tuple(x.shape), tuple(slope.shape)):
            slope = slope.reshape(-1, *[1] * (x.dim() - 2))
        try:
            shape = broadcast_shapes(x.shape, slope.shape)
        except RuntimeError:
            shape = None
        if shape != x.shape:
            raise BadInputError(
                f"PRelu: input slope must broadcast to X's shape {tuple(x.shape)}, received "
                f"shape {tuple(slope.shape)}"
            )
        return torch.where(x < 0, x * slope, x)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        x, slope = self.inputs[0], self.inputs[1]
        if x is not None and slope is not None and self._per_channel(x.shape, slope.shape):
            shaped = g.fresh_name("prelu_slope")
            shape = g.constant([slope.size(), *[1] * (x.ndim() - 2)], "slope_shape", np.int64)
            g.add_node("Reshape", [inputs[1], shape], [shaped])
            inputs = [inputs[0], shaped]
        super().export(g, inputs, outputs)


class Elu(_Activation):
    """ONNX ``Elu``: ``x`` where x > 0, else ``alpha * (exp(x) - 1)`` (attribute ``alpha``, 1.0)."""

    op_type = "Elu"
    since_versions = (1, 6, 22)

    singa_functions = (
        float_function(
            "elu",
            "``x`` where x > 0, else ``alpha * (exp(x) - 1)`` (ONNX ``Elu``).",
            Keyword("alpha", "the scale of the negative part."),
        ),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.elu(x, float(self.attr("alpha")))


class Selu(_Activation):
    """ONNX ``Selu``: ``gamma * x`` where x > 0, else ``gamma * alpha * (exp(x) - 1)``."""

    op_type = "Selu"
    since_versions = (1, 6, 22)

    singa_functions = (
        float_function(
            "selu",
            "Scaled ELU: ``gamma * x`` where x > 0, else ``gamma * alpha * (exp(x) - 1)``.",
            Keyword(
                "alpha",
                "the scale of the negative part (the self-normalising constant by default).",
                default=1.6732631921768188,
            ),
            Keyword(
                "gamma",
                "the overall scale (the self-normalising constant by default).",
                default=1.0507010221481323,
            ),
        ),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        alpha, gamma = float(self.attr("alpha")), float(self.attr("gamma"))
        return gamma * torch.where(x > 0, x, alpha * torch.expm1(x))


class Celu(_Activation):
    """ONNX ``Celu``: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (attribute ``alpha``)."""

    op_type = "Celu"
    since_versions = (12, 28)
    since = 12

    singa_functions = (
        float_function(
            "celu",
            "``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (ONNX ``Celu``).",
            Keyword("alpha", "the scale of the negative part."),
        ),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.celu(x, float(self.attr("alpha")))

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        # celu(x) = alpha * elu(x / alpha) with elu's alpha = 1.
        alpha = scalar_constant(g, float(self.attr("alpha")), self.inputs[0], "alpha")
        scaled, elu_out = g.fresh_name("celu_scaled"), g.fresh_name("celu_elu")
        g.add_node("Div", [inputs[0], alpha], [scaled])
        g.add_node("Elu", [scaled], [elu_out], alpha=1.0)
        g.add_node("Mul", [elu_out, alpha], outputs)


class Sigmoid(_Activation):
    """ONNX ``Sigmoid``: ``1 / (1 + exp(-x))`` element-wise."""

    op_type = "Sigmoid"
    since_versions = (1, 6, 13)

    singa_functions = (
        float_function("sigmoid", "``1 / (1 + exp(-x))`` element-wise (ONNX ``Sigmoid``)."),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


class HardSigmoid(_Activation):
    """ONNX ``HardSigmoid``: ``max(0, min(1, alpha * x + beta))``."""

    op_type = "HardSigmoid"
    since_versions = (1, 6, 22)

    singa_functions = (
        float_function(
            "hardsigmoid",
            "``max(0, min(1, alpha * x + gamma))`` (SINGA calls ONNX's ``beta`` ``gamma``).",
            Keyword("alpha", "the slope."),
            Keyword("gamma", "the offset (ONNX ``HardSigmoid``'s ``beta``).", attr="beta"),
        ),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        alpha, beta = float(self.attr("alpha")), float(self.attr("beta"))
        return torch.clamp(alpha * x + beta, 0.0, 1.0)


class Tanh(_Activation):
    """ONNX ``Tanh``: the hyperbolic tangent element-wise."""

    op_type = "Tanh"
    since_versions = (1, 6, 13)

    singa_functions = (
        float_function("tanh", "The hyperbolic tangent element-wise (ONNX ``Tanh``)."),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


class Softplus(_Activation):
    """ONNX ``Softplus``: ``log(1 + exp(x))`` element-wise."""

    op_type = "Softplus"
    since_versions = (1, 22)

    singa_functions = (
        float_function("softplus", "``log(1 + exp(x))`` element-wise (ONNX ``Softplus``)."),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x)


class Softsign(_Activation):
    """ONNX ``Softsign``: ``x / (1 + |x|)`` element-wise."""

    op_type = "Softsign"
    since_versions = (1, 22)

    singa_functions = (
        float_function("softsign", "``x / (1 + |x|)`` element-wise (ONNX ``Softsign``)."),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.softsign(x)


class ThresholdedRelu(_Activation):
    """ONNX ``ThresholdedRelu``: ``x`` where x > ``alpha``, else 0."""

    op_type = "ThresholdedRelu"
    since_versions = (10, 22)
    since = 10

    singa_functions = (
        float_function(
            "thresholded_relu",
            "``x`` where x > ``alpha``, else 0 (ONNX ``ThresholdedRelu``).",
            Keyword("alpha", "the threshold."),
        ),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > float(self.attr("alpha")), x, torch.zeros_like(x))

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        alpha = scalar_constant(g, float(self.attr("alpha")), self.inputs[0], "alpha")
        above, mask = g.fresh_name("trelu_above"), g.fresh_name("trelu_mask")
        g.add_node("Greater", [inputs[0], alpha], [above])
        g.add_node("Cast", [above], [mask], to=dtypes.torch_to_onnx(self.inputs[0].dtype))
        g.add_node("Mul", [inputs[0], mask], outputs)


class Shrink(_Activation):
    """``x - bias`` above ``lambd``, ``x + bias`` below ``-lambd``, else 0 (any number type)."""

    op_type = "Shrink"
    since_versions = (9,)
    since = 9

    singa_functions = (
        SingaFunction(
            "shrink",
            (
                "``x - bias`` above ``lambd``, ``x + bias`` below ``-lambd``, else 0 (ONNX "
                "``Shrink``)."
            ),
            inputs=(Input("x", "a real number tensor (integers stay integers)."),),
            returns=LIKE_X,
            keywords=(
                Keyword("bias", "the amount moved towards zero."),
                Keyword("lambd", "the half-width of the band mapped to zero."),
            ),
            raises=(("BadInputError", "``x`` is boolean or complex."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.bool or x.is_complex():
            raise BadInputError(
                f"Shrink: input X must be a real number tensor, received "
                f"{dtypes.dtype_name(x.dtype)}"
            )
        bias, lambd = float(self.attr("bias")), float(self.attr("lambd"))
        # Integer inputs stay integer: the arithmetic happens in x's own type, as ONNX says.
        b = (
            torch.tensor(bias, dtype=x.dtype, device=x.device)
            if not dtypes.is_float(x.dtype)
            else bias
        )
        return torch.where(
            x < -lambd, x + b, torch.where(x > lambd, x - b, torch.zeros_like(x))
        ).to(x.dtype)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)`` element-wise (ONNX ``Relu``).

    :param x: a tensor of a signed number type.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean, complex or unsigned.
    """
    return Relu()(x)


def leakyrelu(x: Tensor, a: float = 0.01) -> Tensor:
    """``x`` where x >= 0, else ``a * x`` (ONNX ``LeakyRelu``).

    :param x: a floating-point tensor.
    :param a: the slope of the negative part (ONNX's ``alpha``).
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return LeakyRelu(alpha=a)(x)


def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """``slope * x`` where x < 0, else ``x`` (ONNX ``PRelu``).

    :param x: the input tensor.
    :param slope: the slopes, broadcast to ``x``'s shape (one per channel, for one).
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``slope`` does not broadcast to ``x``'s shape.
    """
    return PRelu()(x, slope)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where x > 0, else ``alpha * (exp(x) - 1)`` (ONNX ``Elu``).

    :param x: a floating-point tensor.
    :param alpha: the scale of the negative part.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Elu(alpha=alpha)(x)


def selu(x: Tensor, alpha: float = 1.6732631921768188, gamma: float = 1.0507010221481323) -> Tensor:
    """Scaled ELU: ``gamma * x`` where x > 0, else ``gamma * alpha * (exp(x) - 1)``.

    :param x: a floating-point tensor.
    :param alpha: the scale of the negative part (the self-normalising constant by default).
    :param gamma: the overall scale (the self-normalising constant by default).
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Selu(alpha=alpha, gamma=gamma)(x)


def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (ONNX ``Celu``).

    :param x: a floating-point tensor.
    :param alpha: the scale of the negative part.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Celu(alpha=alpha)(x)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` element-wise (ONNX ``Sigmoid``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Sigmoid()(x)


def hardsigmoid(x: Tensor, alpha: float = 0.2, gamma: float = 0.5) -> Tensor:
    """``max(0, min(1, alpha * x + gamma))`` (SINGA calls ONNX's ``beta`` ``gamma``).

    :param x: a floating-point tensor.
    :param alpha: the slope.
    :param gamma: the offset (ONNX ``HardSigmoid``'s ``beta``).
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return HardSigmoid(alpha=alpha, beta=gamma)(x)


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent element-wise (ONNX ``Tanh``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Tanh()(x)


def softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))`` element-wise (ONNX ``Softplus``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Softplus()(x)


def softsign(x: Tensor) -> Tensor:
    """``x / (1 + |x|)`` element-wise (ONNX ``Softsign``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Softsign()(x)


def thresholded_relu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where x > ``alpha``, else 0 (ONNX ``ThresholdedRelu``).

    :param x: a floating-point tensor.
    :param alpha: the threshold.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return ThresholdedRelu(alpha=alpha)(x)


def shrink(x: Tensor, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
    """``x - bias`` above ``lambd``, ``x + bias`` below ``-lambd``, else 0 (ONNX ``Shrink``).

    :param x: a real number tensor (integers stay integers).
    :param bias: the amount moved towards zero.
    :param lambd: the half-width of the band mapped to zero.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean or complex.
    """
    return Shrink(bias=bias, lambd=lambd)(x)

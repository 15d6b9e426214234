"""Activation functions (Relu, Sigmoid, Gelu, Swish, ...); the softmax family is in
:mod:`sonnx.operators.activation.softmax`.

Every class is one ONNX operator run with torch functions, so torch autograd provides the
gradients. Activations that ONNX added late (HardSwish, Mish, Gelu, Swish, SwiGLU, Celu,
ThresholdedRelu) export a decomposition into older operators when the target opset predates
them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx.defs
import torch
from torch.nn import functional as F

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import BadInputError, ExportError, OpsetTooOldError
from sonnx.operators.elementwise.base import broadcast_shapes
from sonnx.proto.attributes import schema_defaults
from sonnx.proto.graph_builder import first_opset
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "Celu",
    "Elu",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Mish",
    "PRelu",
    "Relu",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Softplus",
    "Softsign",
    "SwiGLU",
    "Swish",
    "Tanh",
    "ThresholdedRelu",
    "celu",
    "elu",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "leakyrelu",
    "mish",
    "prelu",
    "relu",
    "selu",
    "shrink",
    "sigmoid",
    "softplus",
    "softsign",
    "swiglu",
    "swish",
    "tanh",
    "thresholded_relu",
]

# Attributes that older schemas had and that carry no meaning for the computation.
_LEGACY_ATTRS = frozenset({"consumed_inputs"})


def attrs_for_opset(op: Operator, opset: int) -> dict[str, Any]:
    """``op``'s attributes as the schema in force at ``opset`` spells them.

    Attributes that schema lacks are dropped when they hold their default (or are legacy
    bookkeeping such as ``consumed_inputs``); otherwise the op cannot be written at that opset.
    """
    try:
        schema = onnx.defs.get_schema(op.op_type, opset, op.domain)
    except onnx.defs.SchemaError:
        raise OpsetTooOldError(
            f"{op.op_type}: no such ONNX operator at opset {opset}",
            first_opset(op.op_type, op.domain),
        ) from None
    own_defaults = schema_defaults(op.op_type, op.version, op.domain)
    out: dict[str, Any] = {}
    for name, value in op.attrs.items():
        if value is None:
            continue
        if name in schema.attributes:
            out[name] = value
        elif name not in _LEGACY_ATTRS and value != own_defaults.get(name):
            raise ExportError(
                f"{op.op_type}: attribute {name}={value!r} has no equivalent at opset {opset}"
            )
    return out


def scalar_constant(g: GraphBuilder, value: float, like: Tensor, hint: str = "c") -> str:
    """A 0-d initializer holding ``value`` in ``like``'s element type (bfloat16 included)."""
    value_t = torch.tensor(value, dtype=like.dtype)  # host: an initializer is serialised
    return g.add_initializer(value_t, g.fresh_name(hint))


_UNSIGNED = frozenset({torch.uint8, torch.uint16, torch.uint32, torch.uint64})


def require_float(op: str, name: str, x: torch.Tensor) -> None:
    if not dtypes.is_float(x.dtype):
        raise BadInputError(
            f"{op}: input {name} must be a floating-point tensor, received dtype "
            f"{dtypes.dtype_name(x.dtype)}"
        )


class StrictExport(Operator):
    """An operator exported as one node, checked against the target opset's schema."""

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(self.op_type, inputs, outputs, **attrs_for_opset(self, g.opset))


class _Activation(StrictExport):
    """An element-wise activation of one floating-point input.

    ``since`` is the opset that introduced the operator; below it :meth:`decompose` writes an
    equivalent graph of older operators (or the export fails with a clear message).
    """

    output_shape = OutputShape.FROM_SHAPES

    since = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_float(self.op_type, "X", x)
        return self.compute(x)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= self.since:
            super().export(g, inputs, outputs)
        else:
            self.decompose(g, inputs, outputs)

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        raise OpsetTooOldError(
            f"{self.op_type}: needs opset >= {self.since}, cannot be written at opset {g.opset}",
            self.since,
        )


class Relu(_Activation):
    """ONNX ``Relu``: ``max(x, 0)`` element-wise, for signed number tensors."""

    op_type = "Relu"
    since_versions = (1, 6, 13, 14)

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

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, float(self.attr("alpha")))


class PRelu(_Activation):
    """``slope * x`` where x < 0; ``slope`` broadcasts unidirectionally to ``X``."""

    op_type = "PRelu"
    since_versions = (1, 6, 7, 9, 16)

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
    """ONNX ``Elu``: ``x`` where x > 0, else ``alpha * (exp(x) - 1)`` (attribute ``alpha``, 1.0).
    """

    op_type = "Elu"
    since_versions = (1, 6, 22)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.elu(x, float(self.attr("alpha")))


class Selu(_Activation):
    """ONNX ``Selu``: ``gamma * x`` where x > 0, else ``gamma * alpha * (exp(x) - 1)``."""

    op_type = "Selu"
    since_versions = (1, 6, 22)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        alpha, gamma = float(self.attr("alpha")), float(self.attr("gamma"))
        return gamma * torch.where(x > 0, x, alpha * torch.expm1(x))


class Celu(_Activation):
    """ONNX ``Celu``: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (attribute ``alpha``).
    """

    op_type = "Celu"
    since_versions = (12, 28)
    since = 12

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

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


class HardSigmoid(_Activation):
    """ONNX ``HardSigmoid``: ``max(0, min(1, alpha * x + beta))`` (attributes ``alpha``, ``beta``).
    """

    op_type = "HardSigmoid"
    since_versions = (1, 6, 22)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        alpha, beta = float(self.attr("alpha")), float(self.attr("beta"))
        return torch.clamp(alpha * x + beta, 0.0, 1.0)


class HardSwish(_Activation):
    """ONNX ``HardSwish``: ``x * max(0, min(1, x / 6 + 0.5))`` element-wise."""

    op_type = "HardSwish"
    since_versions = (14, 22)
    since = 14

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x)

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        gate = g.fresh_name("hardswish_gate")
        g.add_node("HardSigmoid", [inputs[0]], [gate], alpha=1.0 / 6.0, beta=0.5)
        g.add_node("Mul", [inputs[0], gate], outputs)


class Tanh(_Activation):
    """ONNX ``Tanh``: the hyperbolic tangent element-wise."""

    op_type = "Tanh"
    since_versions = (1, 6, 13)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


class Softplus(_Activation):
    """ONNX ``Softplus``: ``log(1 + exp(x))`` element-wise."""

    op_type = "Softplus"
    since_versions = (1, 22)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x)


class Softsign(_Activation):
    """ONNX ``Softsign``: ``x / (1 + |x|)`` element-wise."""

    op_type = "Softsign"
    since_versions = (1, 22)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.softsign(x)


class ThresholdedRelu(_Activation):
    """ONNX ``ThresholdedRelu``: ``x`` where x > ``alpha``, else 0."""

    op_type = "ThresholdedRelu"
    since_versions = (10, 22)
    since = 10

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > float(self.attr("alpha")), x, torch.zeros_like(x))

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        alpha = scalar_constant(g, float(self.attr("alpha")), self.inputs[0], "alpha")
        above, mask = g.fresh_name("trelu_above"), g.fresh_name("trelu_mask")
        g.add_node("Greater", [inputs[0], alpha], [above])
        g.add_node("Cast", [above], [mask], to=dtypes.torch_to_onnx(self.inputs[0].dtype))
        g.add_node("Mul", [inputs[0], mask], outputs)


#: The values of ONNX Gelu's ``approximate`` attribute.
GELU_APPROXIMATIONS = ("none", "tanh")


class Gelu(_Activation):
    """``x * Phi(x)``; ``approximate="tanh"`` uses the tanh formula."""

    op_type = "Gelu"
    since_versions = (20,)
    since = 20

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        approximate = self.attr("approximate")
        if approximate not in GELU_APPROXIMATIONS:
            raise BadInputError(
                f"Gelu: attribute approximate must be 'none' or 'tanh', received {approximate!r}"
            )
        return F.gelu(x, approximate=approximate)

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        x, like = inputs[0], self.inputs[0]
        inner = g.fresh_name("gelu_inner")
        if self.attr("approximate") == "tanh":
            # sqrt(2/pi) * (x + 0.044715 x^3), then tanh
            cube, scaled, summed, pre = (g.fresh_name("gelu") for _ in range(4))
            g.add_node("Pow", [x, scalar_constant(g, 3.0, like, "three")], [cube])
            g.add_node("Mul", [cube, scalar_constant(g, 0.044715, like, "k")], [scaled])
            g.add_node("Add", [x, scaled], [summed])
            root = scalar_constant(g, math.sqrt(2.0 / math.pi), like, "root")
            g.add_node("Mul", [summed, root], [pre])
            g.add_node("Tanh", [pre], [inner])
        else:
            pre = g.fresh_name("gelu_pre")
            g.add_node("Div", [x, scalar_constant(g, math.sqrt(2.0), like, "root2")], [pre])
            g.add_node("Erf", [pre], [inner])
        one_plus, half_x = g.fresh_name("gelu_1p"), g.fresh_name("gelu_halfx")
        g.add_node("Add", [inner, scalar_constant(g, 1.0, like, "one")], [one_plus])
        g.add_node("Mul", [x, scalar_constant(g, 0.5, like, "half")], [half_x])
        g.add_node("Mul", [half_x, one_plus], outputs)


class Mish(_Activation):
    """ONNX ``Mish``: ``x * tanh(softplus(x))`` element-wise."""

    op_type = "Mish"
    since_versions = (18, 22)
    since = 18

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(x)

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        soft, gate = g.fresh_name("mish_softplus"), g.fresh_name("mish_tanh")
        g.add_node("Softplus", [inputs[0]], [soft])
        g.add_node("Tanh", [soft], [gate])
        g.add_node("Mul", [inputs[0], gate], outputs)


def _swish_nodes(op: Operator, g: GraphBuilder, x: str, out: str) -> None:
    """``x * Sigmoid(alpha * x)`` for Swish's and SwiGLU's decompositions."""
    alpha = float(op.attr("alpha"))
    pre, gate = x, g.fresh_name("swish_gate")
    if alpha != 1.0:
        pre = g.fresh_name("swish_scaled")
        g.add_node("Mul", [x, scalar_constant(g, alpha, op.inputs[0], "alpha")], [pre])
    g.add_node("Sigmoid", [pre], [gate])
    g.add_node("Mul", [x, gate], [out])


class Swish(_Activation):
    """ONNX ``Swish``: ``x * sigmoid(alpha * x)`` element-wise (attribute ``alpha``, 1.0)."""

    op_type = "Swish"
    since_versions = (24,)
    since = 24

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(float(self.attr("alpha")) * x)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Always as Sigmoid and Mul: exact, and runnable by onnxruntime, which (as of 1.31)
        has no kernel for Swish-24."""
        self.decompose(g, inputs, outputs)

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        _swish_nodes(self, g, inputs[0], outputs[0])


class SwiGLU(_Activation):
    """``Swish_alpha(A) * B`` for a gate ``A`` and a value ``B`` of the same shape."""

    op_type = "SwiGLU"
    since_versions = (28,)
    since = 28

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        require_float("SwiGLU", "A", a)
        if a.shape != b.shape or a.dtype != b.dtype:
            raise BadInputError(
                f"SwiGLU: inputs A and B must have one shape and dtype (no broadcasting), "
                f"received A {tuple(a.shape)} {dtypes.dtype_name(a.dtype)} and B {tuple(b.shape)} "
                f"{dtypes.dtype_name(b.dtype)}"
            )
        return a * torch.sigmoid(float(self.attr("alpha")) * a) * b

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        gated = g.fresh_name("swiglu_gated")
        _swish_nodes(self, g, inputs[0], gated)
        g.add_node("Mul", [gated, inputs[1]], outputs)


class Shrink(_Activation):
    """``x - bias`` above ``lambd``, ``x + bias`` below ``-lambd``, else 0 (any number type)."""

    op_type = "Shrink"
    since_versions = (9,)
    since = 9

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


# ---- SINGA-named functions ------------------------------------------------------------------


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)`` element-wise (ONNX ``Relu``).

    :param x: a tensor of a signed number type.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean, complex or unsigned.
    """
    return Relu()(x)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` element-wise (ONNX ``Sigmoid``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Sigmoid()(x)


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent element-wise (ONNX ``Tanh``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Tanh()(x)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where x > 0, else ``alpha * (exp(x) - 1)`` (ONNX ``Elu``).

    :param x: a floating-point tensor.
    :param alpha: the scale of the negative part.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Elu(alpha=alpha)(x)


def selu(
    x: Tensor, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875
) -> Tensor:
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


def hardsigmoid(x: Tensor, alpha: float = 0.2, gamma: float = 0.5) -> Tensor:
    """``max(0, min(1, alpha * x + gamma))`` (SINGA calls ONNX's ``beta`` ``gamma``).

    :param x: a floating-point tensor.
    :param alpha: the slope.
    :param gamma: the offset (ONNX ``HardSigmoid``'s ``beta``).
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return HardSigmoid(alpha=alpha, beta=gamma)(x)


def hardswish(x: Tensor) -> Tensor:
    """``x * hardsigmoid(x)`` with ``alpha = 1/6``, ``beta = 0.5`` (ONNX ``HardSwish``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return HardSwish()(x)


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


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``, Phi the standard normal CDF (ONNX ``Gelu``).

    :param x: a floating-point tensor.
    :param approximate: ``"none"`` for the exact erf form, ``"tanh"`` for the tanh formula.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point, or ``approximate`` is neither value.
    """
    return Gelu(approximate=approximate)(x)


def mish(x: Tensor) -> Tensor:
    """``x * tanh(softplus(x))`` element-wise (ONNX ``Mish``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Mish()(x)


def swish(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x * sigmoid(alpha * x)`` element-wise (ONNX ``Swish``).

    :param x: a floating-point tensor.
    :param alpha: the scale inside the sigmoid.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Swish(alpha=alpha)(x)


def swiglu(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """``swish(a, alpha) * b``: a gated linear unit (ONNX ``SwiGLU``).

    :param a: the gate, a floating-point tensor.
    :param b: the value, of ``a``'s shape and dtype (no broadcasting).
    :param alpha: the scale inside the gate's sigmoid.
    :returns: a tensor of ``a``'s shape and dtype.
    :raises BadInputError: ``a`` is not floating-point, or ``b``'s shape or dtype differs.
    """
    return SwiGLU(alpha=alpha)(a, b)


def shrink(x: Tensor, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
    """``x - bias`` above ``lambd``, ``x + bias`` below ``-lambd``, else 0 (ONNX ``Shrink``).

    :param x: a real number tensor (integers stay integers).
    :param bias: the amount moved towards zero.
    :param lambd: the half-width of the band mapped to zero.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean or complex.
    """
    return Shrink(bias=bias, lambd=lambd)(x)

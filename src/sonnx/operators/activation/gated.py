"""Activations that multiply their input by a gate computed from it: HardSwish, Gelu, Mish,
Swish and SwiGLU (whose gate comes from a second input). ONNX added all of them late, so each
exports a decomposition into older operators when the target opset predates it. The other
activations are in :mod:`sonnx.operators.activation.functions`, the softmax family in
:mod:`sonnx.operators.activation.softmax`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from sonnx import dtypes
from sonnx.engine.operator import Operator
from sonnx.engine.singa_functions import (
    FLOAT_X,
    LIKE_X,
    Input,
    Keyword,
    SingaFunction,
    float_function,
)
from sonnx.errors import BadInputError
from sonnx.operators.activation.base import _Activation, scalar_constant
from sonnx.operators.elementwise.base import require_float
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "Gelu",
    "HardSwish",
    "Mish",
    "SwiGLU",
    "Swish",
    "gelu",
    "hardswish",
    "mish",
    "swiglu",
    "swish",
]


class HardSwish(_Activation):
    """ONNX ``HardSwish``: ``x * max(0, min(1, x / 6 + 0.5))`` element-wise."""

    op_type = "HardSwish"
    since_versions = (14, 22)
    since = 14

    singa_functions = (
        float_function(
            "hardswish",
            "``x * hardsigmoid(x)`` with ``alpha = 1/6``, ``beta = 0.5`` (ONNX ``HardSwish``).",
        ),
    )

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x)

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        gate = g.fresh_name("hardswish_gate")
        g.add_node("HardSigmoid", [inputs[0]], [gate], alpha=1.0 / 6.0, beta=0.5)
        g.add_node("Mul", [inputs[0], gate], outputs)


#: The values of ONNX Gelu's ``approximate`` attribute.
GELU_APPROXIMATIONS = ("none", "tanh")


class Gelu(_Activation):
    """``x * Phi(x)``; ``approximate="tanh"`` uses the tanh formula."""

    op_type = "Gelu"
    since_versions = (20,)
    since = 20

    singa_functions = (
        SingaFunction(
            "gelu",
            "``x * Phi(x)``, Phi the standard normal CDF (ONNX ``Gelu``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            keywords=(
                Keyword(
                    "approximate",
                    '``"none"`` for the exact erf form, ``"tanh"`` for the tanh formula.',
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    "``x`` is not floating-point, or ``approximate`` is neither value.",
                ),
            ),
        ),
    )

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

    singa_functions = (
        float_function("mish", "``x * tanh(softplus(x))`` element-wise (ONNX ``Mish``)."),
    )

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

    singa_functions = (
        float_function(
            "swish",
            "``x * sigmoid(alpha * x)`` element-wise (ONNX ``Swish``).",
            Keyword("alpha", "the scale inside the sigmoid."),
        ),
    )

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

    singa_functions = (
        SingaFunction(
            "swiglu",
            "``swish(a, alpha) * b``: a gated linear unit (ONNX ``SwiGLU``).",
            inputs=(
                Input("a", "the gate, a floating-point tensor."),
                Input("b", "the value, of ``a``'s shape and dtype (no broadcasting)."),
            ),
            returns="a tensor of ``a``'s shape and dtype.",
            keywords=(Keyword("alpha", "the scale inside the gate's sigmoid."),),
            raises=(
                (
                    "BadInputError",
                    "``a`` is not floating-point, or ``b``'s shape or dtype differs.",
                ),
            ),
        ),
    )

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


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def hardswish(x: Tensor) -> Tensor:
    """``x * hardsigmoid(x)`` with ``alpha = 1/6``, ``beta = 0.5`` (ONNX ``HardSwish``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return HardSwish()(x)


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

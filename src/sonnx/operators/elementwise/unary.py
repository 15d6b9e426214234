"""One-input element-wise operators: math functions, rounding, sign, NaN/Inf tests, Not; the
trigonometric and hyperbolic functions are in :mod:`sonnx.operators.elementwise.trigonometric`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    LIKE_X,
    NOT_FLOAT,
    Input,
    Keyword,
    SingaFunction,
    float_function,
)
from sonnx.operators.elementwise.base import (
    UNSIGNED,
    is_integer,
    modular,
    onnx_input_name,
    require,
    require_float,
)
from sonnx.tensor import Tensor

__all__ = [
    "Abs",
    "BitwiseNot",
    "Ceil",
    "Erf",
    "Exp",
    "Floor",
    "IsInf",
    "IsNaN",
    "Log",
    "Neg",
    "Not",
    "Reciprocal",
    "Round",
    "Sign",
    "Sqrt",
    "_not",
    "abs",
    "bitwise_not",
    "ceil",
    "erf",
    "exp",
    "floor",
    "isinf",
    "isnan",
    "log",
    "neg",
    "negative",
    "reciprocal",
    "round",
    "sign",
    "sqrt",
]


class FloatUnary(Operator):
    """A float-only ONNX function, computed by the torch function ``fn`` (differentiable)."""

    output_shape = OutputShape.FROM_SHAPES

    fn: ClassVar[Callable[[torch.Tensor], torch.Tensor]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_float(self.op_type, onnx_input_name(self.op_type, 0), x)
        return type(self).fn(x)


class Exp(FloatUnary):
    """ONNX ``Exp``: ``e ** x`` element-wise, for floating-point tensors."""

    op_type = "Exp"
    since_versions = (6, 13)
    fn = staticmethod(torch.exp)

    singa_functions = (float_function("exp", "``e ** x`` element-wise (ONNX ``Exp``)."),)


class Log(FloatUnary):
    """ONNX ``Log``: the natural logarithm element-wise, for floating-point tensors."""

    op_type = "Log"
    since_versions = (6, 13)
    fn = staticmethod(torch.log)

    singa_functions = (float_function("log", "The natural logarithm element-wise (ONNX ``Log``)."),)


class Sqrt(FloatUnary):
    """ONNX ``Sqrt``: the square root element-wise, for floating-point tensors."""

    op_type = "Sqrt"
    since_versions = (6, 13)
    fn = staticmethod(torch.sqrt)

    singa_functions = (float_function("sqrt", "The square root element-wise (ONNX ``Sqrt``)."),)


class Reciprocal(FloatUnary):
    """ONNX ``Reciprocal``: ``1 / x`` element-wise, for floating-point tensors."""

    op_type = "Reciprocal"
    since_versions = (6, 13)
    fn = staticmethod(torch.reciprocal)

    singa_functions = (
        float_function("reciprocal", "``1 / x`` element-wise (ONNX ``Reciprocal``)."),
    )


class Ceil(FloatUnary):
    """ONNX ``Ceil``: the smallest integer value >= x element-wise, for floating-point tensors."""

    op_type = "Ceil"
    since_versions = (6, 13)
    fn = staticmethod(torch.ceil)

    singa_functions = (
        float_function("ceil", "The smallest integer value >= x element-wise (ONNX ``Ceil``)."),
    )


class Floor(FloatUnary):
    """ONNX ``Floor``: the largest integer value <= x element-wise, for floating-point tensors."""

    op_type = "Floor"
    since_versions = (6, 13)
    fn = staticmethod(torch.floor)

    singa_functions = (
        float_function("floor", "The largest integer value <= x element-wise (ONNX ``Floor``)."),
    )


class Round(FloatUnary):
    """Rounds half to even, as ONNX and ``torch.round`` both do."""

    op_type = "Round"
    since_versions = (11, 22)
    fn = staticmethod(torch.round)

    singa_functions = (
        float_function("round", "Rounding half to even element-wise (ONNX ``Round``)."),
    )


class Erf(FloatUnary):
    """ONNX ``Erf``: the Gauss error function element-wise, for floating-point tensors."""

    op_type = "Erf"
    since_versions = (9, 13)
    fn = staticmethod(torch.erf)

    singa_functions = (
        float_function("erf", "The Gauss error function element-wise (ONNX ``Erf``)."),
    )


def _float_for_test(op: str, x: torch.Tensor) -> torch.Tensor:
    """IsNaN/IsInf accept the float8 types too, which torch cannot test: widen them exactly."""
    ok = x.dtype.is_floating_point
    require(op, "X", x, "a floating-point tensor (float8 to float64)", ok)
    return x if dtypes.is_float(x.dtype) else x.to(torch.float32)


class IsNaN(Operator):
    """ONNX ``IsNaN``: a bool tensor, True where the element is NaN (float8 types included)."""

    op_type = "IsNaN"
    since_versions = (9, 13, 20)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "isnan",
            "True where ``x`` is NaN (ONNX ``IsNaN``).",
            inputs=(Input("x", "a floating-point tensor (float8 to float64)."),),
            returns="a bool tensor of ``x``'s shape.",
            raises=NOT_FLOAT,
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isnan(_float_for_test(self.op_type, x))


class IsInf(Operator):
    """Attributes ``detect_negative`` and ``detect_positive`` select which infinities count."""

    op_type = "IsInf"
    since_versions = (10, 20)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "isinf",
            "True where ``x`` is an infinity of a selected sign (ONNX ``IsInf``).",
            inputs=(Input("x", "a floating-point tensor (float8 to float64)."),),
            returns="a bool tensor of ``x``'s shape.",
            keywords=(
                Keyword("detect_negative", "1 to count -inf, 0 not to."),
                Keyword("detect_positive", "1 to count +inf, 0 not to."),
            ),
            raises=NOT_FLOAT,
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _float_for_test(self.op_type, x)
        negative, positive = self.attr("detect_negative"), self.attr("detect_positive")
        if negative and positive:
            return torch.isinf(x)
        if positive:
            return torch.isposinf(x)
        if negative:
            return torch.isneginf(x)
        return torch.zeros_like(x, dtype=torch.bool)


class Abs(Operator):
    """ONNX ``Abs``: the absolute value element-wise, for number tensors."""

    op_type = "Abs"
    since_versions = (6, 13)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "abs",
            "The absolute value element-wise (ONNX ``Abs``).",
            inputs=(Input("x", "a number tensor (unsigned integers come back unchanged)."),),
            returns=LIKE_X,
            raises=(("BadInputError", "``x`` is boolean."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "X", x, "a numeric tensor", x.dtype != torch.bool)
        return x.clone() if x.dtype in UNSIGNED else torch.abs(x)


class Neg(Operator):
    """ONNX ``Neg``: ``-x`` element-wise, for signed number tensors."""

    op_type = "Neg"
    since_versions = (6, 13)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "neg",
            "``-x`` element-wise (ONNX ``Neg``; ``negative`` is the same function).",
            inputs=(Input("x", "a signed integer or floating-point tensor."),),
            returns=LIKE_X,
            raises=(("BadInputError", "``x`` is boolean or unsigned."),),
            aliases=("negative",),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ok = x.dtype != torch.bool and x.dtype not in UNSIGNED
        require(self.op_type, "X", x, "a signed integer or floating-point tensor", ok)
        return torch.neg(x)


class Sign(Operator):
    """ONNX ``Sign``: -1, 0 or 1 by the sign of each element, in the input's type."""

    op_type = "Sign"
    since_versions = (9, 13)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "sign",
            "-1, 0 or 1 by the sign of each element (ONNX ``Sign``).",
            inputs=(Input("x", "a number tensor."),),
            returns=LIKE_X,
            raises=(("BadInputError", "``x`` is boolean."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "input", x, "a numeric tensor", x.dtype != torch.bool)
        if x.dtype in UNSIGNED:
            return (x != 0).to(x.dtype)
        return torch.sign(x)


class Not(Operator):
    """ONNX ``Not``: logical not of a bool tensor."""

    op_type = "Not"
    since_versions = (1,)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "_not",
            "Logical not of a bool tensor (SINGA's name; ONNX ``Not``).",
            inputs=(Input("x", "a bool tensor."),),
            returns="a bool tensor of ``x``'s shape.",
            raises=(("BadInputError", "``x`` is not boolean."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "X", x, "a bool tensor", x.dtype == torch.bool)
        return torch.logical_not(x)


class BitwiseNot(Operator):
    """ONNX ``BitwiseNot``: the bitwise complement of an integer tensor."""

    op_type = "BitwiseNot"
    since_versions = (18,)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "bitwise_not",
            "The bitwise complement element-wise (ONNX ``BitwiseNot``).",
            inputs=(Input("x", "an integer tensor."),),
            returns=LIKE_X,
            raises=(("BadInputError", "``x`` is not an integer tensor."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "X", x, "an integer tensor", is_integer(x.dtype))
        return modular(torch.bitwise_not, x)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def exp(x: Tensor) -> Tensor:
    """``e ** x`` element-wise (ONNX ``Exp``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Exp()(x)


def log(x: Tensor) -> Tensor:
    """The natural logarithm element-wise (ONNX ``Log``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Log()(x)


def sqrt(x: Tensor) -> Tensor:
    """The square root element-wise (ONNX ``Sqrt``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Sqrt()(x)


def reciprocal(x: Tensor) -> Tensor:
    """``1 / x`` element-wise (ONNX ``Reciprocal``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Reciprocal()(x)


def ceil(x: Tensor) -> Tensor:
    """The smallest integer value >= x element-wise (ONNX ``Ceil``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Ceil()(x)


def floor(x: Tensor) -> Tensor:
    """The largest integer value <= x element-wise (ONNX ``Floor``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Floor()(x)


def round(x: Tensor) -> Tensor:
    """Rounding half to even element-wise (ONNX ``Round``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Round()(x)


def erf(x: Tensor) -> Tensor:
    """The Gauss error function element-wise (ONNX ``Erf``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Erf()(x)


def isnan(x: Tensor) -> Tensor:
    """True where ``x`` is NaN (ONNX ``IsNaN``).

    :param x: a floating-point tensor (float8 to float64).
    :returns: a bool tensor of ``x``'s shape.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return IsNaN()(x)


def isinf(x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    """True where ``x`` is an infinity of a selected sign (ONNX ``IsInf``).

    :param x: a floating-point tensor (float8 to float64).
    :param detect_negative: 1 to count -inf, 0 not to.
    :param detect_positive: 1 to count +inf, 0 not to.
    :returns: a bool tensor of ``x``'s shape.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return IsInf(detect_negative=detect_negative, detect_positive=detect_positive)(x)


def abs(x: Tensor) -> Tensor:
    """The absolute value element-wise (ONNX ``Abs``).

    :param x: a number tensor (unsigned integers come back unchanged).
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean.
    """
    return Abs()(x)


def neg(x: Tensor) -> Tensor:
    """``-x`` element-wise (ONNX ``Neg``; ``negative`` is the same function).

    :param x: a signed integer or floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean or unsigned.
    """
    return Neg()(x)


negative = neg


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of each element (ONNX ``Sign``).

    :param x: a number tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is boolean.
    """
    return Sign()(x)


def _not(x: Tensor) -> Tensor:
    """Logical not of a bool tensor (SINGA's name; ONNX ``Not``).

    :param x: a bool tensor.
    :returns: a bool tensor of ``x``'s shape.
    :raises BadInputError: ``x`` is not boolean.
    """
    return Not()(x)


def bitwise_not(x: Tensor) -> Tensor:
    """The bitwise complement element-wise (ONNX ``BitwiseNot``).

    :param x: an integer tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not an integer tensor.
    """
    return BitwiseNot()(x)

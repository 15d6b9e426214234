"""One-input element-wise operators: math functions, rounding, sign, NaN/Inf tests, Not."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape
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
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitwiseNot",
    "Ceil",
    "Cos",
    "Cosh",
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
    "Sin",
    "Sinh",
    "Sqrt",
    "Tan",
    "_not",
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "bitwise_not",
    "ceil",
    "cos",
    "cosh",
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
    "sin",
    "sinh",
    "sqrt",
    "tan",
]


class FloatUnary(Operator):
    """A float-only ONNX function, computed by the torch function ``fn`` (differentiable)."""

    output_shape = OutputShape.FROM_SHAPES

    fn: ClassVar[Callable[[torch.Tensor], torch.Tensor]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_float(self.op_type, onnx_input_name(self.op_type, 0), x)
        return type(self).fn(x)


class Exp(FloatUnary):
    op_type = "Exp"
    since_versions = (6, 13)
    fn = staticmethod(torch.exp)


class Log(FloatUnary):
    op_type = "Log"
    since_versions = (6, 13)
    fn = staticmethod(torch.log)


class Sqrt(FloatUnary):
    op_type = "Sqrt"
    since_versions = (6, 13)
    fn = staticmethod(torch.sqrt)


class Reciprocal(FloatUnary):
    op_type = "Reciprocal"
    since_versions = (6, 13)
    fn = staticmethod(torch.reciprocal)


class Ceil(FloatUnary):
    op_type = "Ceil"
    since_versions = (6, 13)
    fn = staticmethod(torch.ceil)


class Floor(FloatUnary):
    op_type = "Floor"
    since_versions = (6, 13)
    fn = staticmethod(torch.floor)


class Round(FloatUnary):
    """Rounds half to even, as ONNX and ``torch.round`` both do."""

    op_type = "Round"
    since_versions = (11, 22)
    fn = staticmethod(torch.round)


class Erf(FloatUnary):
    op_type = "Erf"
    since_versions = (9, 13)
    fn = staticmethod(torch.erf)


class Sin(FloatUnary):
    op_type = "Sin"
    since_versions = (7, 22)
    fn = staticmethod(torch.sin)


class Cos(FloatUnary):
    op_type = "Cos"
    since_versions = (7, 22)
    fn = staticmethod(torch.cos)


class Tan(FloatUnary):
    op_type = "Tan"
    since_versions = (7, 22)
    fn = staticmethod(torch.tan)


class Asin(FloatUnary):
    op_type = "Asin"
    since_versions = (7, 22)
    fn = staticmethod(torch.asin)


class Acos(FloatUnary):
    op_type = "Acos"
    since_versions = (7, 22)
    fn = staticmethod(torch.acos)


class Atan(FloatUnary):
    op_type = "Atan"
    since_versions = (7, 22)
    fn = staticmethod(torch.atan)


class Sinh(FloatUnary):
    op_type = "Sinh"
    since_versions = (9, 22)
    fn = staticmethod(torch.sinh)


class Cosh(FloatUnary):
    op_type = "Cosh"
    since_versions = (9, 22)
    fn = staticmethod(torch.cosh)


class Asinh(FloatUnary):
    op_type = "Asinh"
    since_versions = (9, 22)
    fn = staticmethod(torch.asinh)


class Acosh(FloatUnary):
    op_type = "Acosh"
    since_versions = (9, 22)
    fn = staticmethod(torch.acosh)


class Atanh(FloatUnary):
    op_type = "Atanh"
    since_versions = (9, 22)
    fn = staticmethod(torch.atanh)


def _float_for_test(op: str, x: torch.Tensor) -> torch.Tensor:
    """IsNaN/IsInf accept the float8 types too, which torch cannot test: widen them exactly."""
    ok = x.dtype.is_floating_point
    require(op, "X", x, "a floating-point tensor (float8 to float64)", ok)
    return x if dtypes.is_float(x.dtype) else x.to(torch.float32)


class IsNaN(Operator):
    op_type = "IsNaN"
    since_versions = (9, 13, 20)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isnan(_float_for_test(self.op_type, x))


class IsInf(Operator):
    """Attributes ``detect_negative`` and ``detect_positive`` select which infinities count."""

    op_type = "IsInf"
    since_versions = (10, 20)
    output_shape = OutputShape.FROM_SHAPES

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
    op_type = "Abs"
    since_versions = (6, 13)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "X", x, "a numeric tensor", x.dtype != torch.bool)
        return x.clone() if x.dtype in UNSIGNED else torch.abs(x)


class Neg(Operator):
    op_type = "Neg"
    since_versions = (6, 13)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ok = x.dtype != torch.bool and x.dtype not in UNSIGNED
        require(self.op_type, "X", x, "a signed integer or floating-point tensor", ok)
        return torch.neg(x)


class Sign(Operator):
    op_type = "Sign"
    since_versions = (9, 13)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "input", x, "a numeric tensor", x.dtype != torch.bool)
        if x.dtype in UNSIGNED:
            return (x != 0).to(x.dtype)
        return torch.sign(x)


class Not(Operator):
    op_type = "Not"
    since_versions = (1,)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "X", x, "a bool tensor", x.dtype == torch.bool)
        return torch.logical_not(x)


class BitwiseNot(Operator):
    op_type = "BitwiseNot"
    since_versions = (18,)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require(self.op_type, "X", x, "an integer tensor", is_integer(x.dtype))
        return modular(torch.bitwise_not, x)


def exp(x: Tensor) -> Tensor:
    return Exp()(x)


def log(x: Tensor) -> Tensor:
    return Log()(x)


def sqrt(x: Tensor) -> Tensor:
    return Sqrt()(x)


def reciprocal(x: Tensor) -> Tensor:
    return Reciprocal()(x)


def ceil(x: Tensor) -> Tensor:
    return Ceil()(x)


def floor(x: Tensor) -> Tensor:
    return Floor()(x)


def round(x: Tensor) -> Tensor:
    """Round half to even."""
    return Round()(x)


def erf(x: Tensor) -> Tensor:
    return Erf()(x)


def sin(x: Tensor) -> Tensor:
    return Sin()(x)


def cos(x: Tensor) -> Tensor:
    return Cos()(x)


def tan(x: Tensor) -> Tensor:
    return Tan()(x)


def asin(x: Tensor) -> Tensor:
    return Asin()(x)


def acos(x: Tensor) -> Tensor:
    return Acos()(x)


def atan(x: Tensor) -> Tensor:
    return Atan()(x)


def sinh(x: Tensor) -> Tensor:
    return Sinh()(x)


def cosh(x: Tensor) -> Tensor:
    return Cosh()(x)


def asinh(x: Tensor) -> Tensor:
    return Asinh()(x)


def acosh(x: Tensor) -> Tensor:
    return Acosh()(x)


def atanh(x: Tensor) -> Tensor:
    return Atanh()(x)


def isnan(x: Tensor) -> Tensor:
    return IsNaN()(x)


def isinf(x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    return IsInf(detect_negative=detect_negative, detect_positive=detect_positive)(x)


def abs(x: Tensor) -> Tensor:
    return Abs()(x)


def neg(x: Tensor) -> Tensor:
    return Neg()(x)


negative = neg


def sign(x: Tensor) -> Tensor:
    return Sign()(x)


def _not(x: Tensor) -> Tensor:
    """Logical not of a bool tensor (SINGA's name)."""
    return Not()(x)


def bitwise_not(x: Tensor) -> Tensor:
    return BitwiseNot()(x)

"""Element-wise math: unary functions, binary arithmetic with broadcasting, comparisons, logical
and bitwise operators, Where, Clip, variadic Max/Min/Mean/Sum, and Cast.

The operators live in ``unary``, ``trigonometric``, ``binary``, ``logic`` and ``select``
(shared helpers in ``base``; element-type conversion in ``cast``); this package gathers the
first five.
"""

# ruff: noqa: F403, F405
from sonnx.engine.operator import Operator
from sonnx.operators.elementwise import binary, logic, select, trigonometric, unary
from sonnx.operators.elementwise.binary import *
from sonnx.operators.elementwise.cast import BitCast, Cast, CastLike
from sonnx.operators.elementwise.logic import *
from sonnx.operators.elementwise.select import *
from sonnx.operators.elementwise.trigonometric import *
from sonnx.operators.elementwise.unary import *

__all__ = [
    *unary.__all__,
    *trigonometric.__all__,
    *binary.__all__,
    *logic.__all__,
    *select.__all__,
]

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Ceil,
    Floor,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Add,
    Sub,
    Mul,
    Div,
    And,
    Or,
    Xor,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    BitwiseNot,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    Max,
    Min,
    Mean,
    Sum,
    Sign,
    Erf,
    Round,
    IsNaN,
    IsInf,
    Not,
    Pow,
    Mod,
    BitShift,
    Equal,
    Where,
    Clip,
    Cast,
    CastLike,
    BitCast,
)

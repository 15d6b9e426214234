"""Comparisons, logical and bitwise operators, BitShift. None of them is differentiable; all
broadcast NumPy-style and require both inputs to have one element type.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx import strings
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.operators.elementwise.base import (
    WIDENED_UINTS,
    is_integer,
    logical_shift_right,
    ordered,
    require,
)
from sonnx.operators.elementwise.binary import B_LIKE_A, BROADCAST_LIKE_A, NO_BOOLEAN, BinaryOp
from sonnx.strings import StringArray
from sonnx.tensor import Tensor

__all__ = [
    "And",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "Equal",
    "Greater",
    "GreaterOrEqual",
    "Less",
    "LessOrEqual",
    "Or",
    "Xor",
    "_and",
    "_or",
    "_xor",
    "bitshift",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "equal",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
]


# What the SINGA-named functions below share.
_A_NUMBERS = Input(
    "a", "a tensor of numbers (a number or array becomes a constant).", annotation="Any"
)
_A_BOOL = Input("a", "a bool tensor.", annotation="Any")
_A_INTEGER = Input("a", "an integer tensor.", annotation="Any")
_B_BOOL = Input("b", "a bool tensor broadcastable with ``a``.", annotation="Any")
_BOOL_RESULT = "a bool tensor of the broadcast shape."
_LOGICAL = (
    ("BadInputError", "the dtypes differ, the shapes do not broadcast, or ``a`` is not boolean."),
)
_BITWISE = (
    (
        "BadInputError",
        "the dtypes differ, the shapes do not broadcast, or ``a`` is not an integer tensor.",
    ),
)


class Equal(BinaryOp):
    """ONNX ``Equal``: ``a == b`` element-wise with broadcasting; a bool tensor."""

    op_type = "Equal"
    since_versions = (7, 11, 13, 19)
    takes_strings = True

    singa_functions = (
        SingaFunction(
            "equal",
            "``a == b`` element-wise, broadcast NumPy-style (ONNX ``Equal``).",
            inputs=(
                Input(
                    "a",
                    (
                        "a tensor of numbers, bools or strings (a number or array becomes a "
                        "constant)."
                    ),
                    annotation="Any",
                ),
                B_LIKE_A,
            ),
            returns=_BOOL_RESULT,
            raises=(("BadInputError", "the dtypes differ or the shapes do not broadcast."),),
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if type(a) is StringArray or type(b) is StringArray:
            return strings.equal(a, b)
        self.check(a, b, numeric=False)
        return torch.eq(a, b)


class Less(BinaryOp):
    """ONNX ``Less``: ``a < b`` element-wise with broadcasting; a bool tensor."""

    op_type = "Less"
    since_versions = (7, 9, 13)

    singa_functions = (
        SingaFunction(
            "less",
            "``a < b`` element-wise, broadcast NumPy-style (ONNX ``Less``).",
            inputs=(_A_NUMBERS, B_LIKE_A),
            returns=_BOOL_RESULT,
            raises=NO_BOOLEAN,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.lt, a, b)


class LessOrEqual(BinaryOp):
    """ONNX ``LessOrEqual``: ``a <= b`` element-wise with broadcasting; a bool tensor."""

    op_type = "LessOrEqual"
    since_versions = (12, 16)

    singa_functions = (
        SingaFunction(
            "less_equal",
            "``a <= b`` element-wise, broadcast NumPy-style (ONNX ``LessOrEqual``).",
            inputs=(_A_NUMBERS, B_LIKE_A),
            returns=_BOOL_RESULT,
            raises=NO_BOOLEAN,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.le, a, b)


class Greater(BinaryOp):
    """ONNX ``Greater``: ``a > b`` element-wise with broadcasting; a bool tensor."""

    op_type = "Greater"
    since_versions = (7, 9, 13)

    singa_functions = (
        SingaFunction(
            "greater",
            "``a > b`` element-wise, broadcast NumPy-style (ONNX ``Greater``).",
            inputs=(_A_NUMBERS, B_LIKE_A),
            returns=_BOOL_RESULT,
            raises=NO_BOOLEAN,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.gt, a, b)


class GreaterOrEqual(BinaryOp):
    """ONNX ``GreaterOrEqual``: ``a >= b`` element-wise with broadcasting; a bool tensor."""

    op_type = "GreaterOrEqual"
    since_versions = (12, 16)

    singa_functions = (
        SingaFunction(
            "greater_equal",
            "``a >= b`` element-wise, broadcast NumPy-style (ONNX ``GreaterOrEqual``).",
            inputs=(_A_NUMBERS, B_LIKE_A),
            returns=_BOOL_RESULT,
            raises=NO_BOOLEAN,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.ge, a, b)


class LogicalOp(BinaryOp):
    """And, Or, Xor: bool inputs only."""

    def check(self, a: torch.Tensor, b: torch.Tensor, numeric: bool = False) -> None:
        super().check(a, b, numeric=False)
        require(self.op_type, "A", a, "a bool tensor", a.dtype == torch.bool)


class And(LogicalOp):
    """ONNX ``And``: logical and of two bool tensors, broadcast NumPy-style."""

    op_type = "And"
    since_versions = (7,)

    singa_functions = (
        SingaFunction(
            "_and",
            "Logical and of bool tensors (SINGA's name; ONNX ``And``).",
            inputs=(_A_BOOL, _B_BOOL),
            returns=_BOOL_RESULT,
            raises=_LOGICAL,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.logical_and(a, b)


class Or(LogicalOp):
    """ONNX ``Or``: logical or of two bool tensors, broadcast NumPy-style."""

    op_type = "Or"
    since_versions = (7,)

    singa_functions = (
        SingaFunction(
            "_or",
            "Logical or of bool tensors (SINGA's name; ONNX ``Or``).",
            inputs=(_A_BOOL, _B_BOOL),
            returns=_BOOL_RESULT,
            raises=_LOGICAL,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.logical_or(a, b)


class Xor(LogicalOp):
    """ONNX ``Xor``: logical exclusive or of two bool tensors, broadcast NumPy-style."""

    op_type = "Xor"
    since_versions = (7,)

    singa_functions = (
        SingaFunction(
            "_xor",
            "Logical exclusive or of bool tensors (SINGA's name; ONNX ``Xor``).",
            inputs=(_A_BOOL, _B_BOOL),
            returns=_BOOL_RESULT,
            raises=_LOGICAL,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.logical_xor(a, b)


class IntegerOp(BinaryOp):
    """BitwiseAnd/Or/Xor and BitShift: integer inputs only (torch has these for every width)."""

    def check(self, a: torch.Tensor, b: torch.Tensor, numeric: bool = True) -> None:
        super().check(a, b)
        require(self.op_type, self.input_names[0], a, "an integer tensor", is_integer(a.dtype))


class BitwiseAnd(IntegerOp):
    """ONNX ``BitwiseAnd``: bitwise and of two integer tensors, broadcast NumPy-style."""

    op_type = "BitwiseAnd"
    since_versions = (18,)

    singa_functions = (
        SingaFunction(
            "bitwise_and",
            "Bitwise and element-wise (ONNX ``BitwiseAnd``).",
            inputs=(_A_INTEGER, B_LIKE_A),
            returns=BROADCAST_LIKE_A,
            raises=_BITWISE,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.bitwise_and(a, b)


class BitwiseOr(IntegerOp):
    """ONNX ``BitwiseOr``: bitwise or of two integer tensors, broadcast NumPy-style."""

    op_type = "BitwiseOr"
    since_versions = (18,)

    singa_functions = (
        SingaFunction(
            "bitwise_or",
            "Bitwise or element-wise (ONNX ``BitwiseOr``).",
            inputs=(_A_INTEGER, B_LIKE_A),
            returns=BROADCAST_LIKE_A,
            raises=_BITWISE,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.bitwise_or(a, b)


class BitwiseXor(IntegerOp):
    """ONNX ``BitwiseXor``: bitwise exclusive or of two integer tensors, broadcast NumPy-style."""

    op_type = "BitwiseXor"
    since_versions = (18,)

    singa_functions = (
        SingaFunction(
            "bitwise_xor",
            "Bitwise exclusive or element-wise (ONNX ``BitwiseXor``).",
            inputs=(_A_INTEGER, B_LIKE_A),
            returns=BROADCAST_LIKE_A,
            raises=_BITWISE,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.bitwise_xor(a, b)


def _shift_amounts(y: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(in-range mask, int64 shift amounts with out-of-range ones replaced by 0)."""
    amount = y.view(torch.int64) if y.dtype == torch.uint64 else y.to(torch.int64)
    # A uint64 amount >= 2**63 reads as negative here, which is out of range either way.
    in_range = (amount >= 0) & (amount < bits)
    return in_range, torch.where(in_range, amount, torch.zeros_like(amount))


class BitShift(IntegerOp):
    """``direction`` LEFT or RIGHT. Right shifts of signed types are arithmetic (opset 28).

    A shift by a negative amount or by the type's width or more gives what the sign fill
    alone gives: -1 for a right shift of a negative X, else 0.
    """

    op_type = "BitShift"
    since_versions = (11, 28)
    input_names = ("X", "Y")

    singa_functions = (
        SingaFunction(
            "bitshift",
            "Shift the bits of ``x`` by ``y`` places (ONNX ``BitShift``).",
            inputs=(
                Input("x", "an integer tensor.", annotation="Any"),
                Input(
                    "y",
                    "the shift amounts, of ``x``'s dtype and broadcastable with it.",
                    annotation="Any",
                ),
            ),
            returns="a tensor of the broadcast shape and ``x``'s dtype.",
            keywords=(Keyword("direction", '``"LEFT"`` or ``"RIGHT"``.', default="LEFT"),),
            raises=(
                (
                    "BadInputError",
                    (
                        "the dtypes differ, the shapes do not broadcast, ``x`` is not an integer "
                        "tensor, or ``direction`` is neither value."
                    ),
                ),
            ),
            details=(
                "Right shifts of signed types are arithmetic; a shift by a negative amount or by "
                "the type's width or more gives the sign fill alone (-1 for a right shift of a "
                "negative ``x``, else 0)."
            ),
        ),
    )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.check(x, y)
        direction = self.attr("direction")
        if direction not in ("LEFT", "RIGHT"):
            raise BadInputError(
                f"BitShift: attribute direction must be 'LEFT' or 'RIGHT', received {direction!r}"
            )
        bits = torch.iinfo(x.dtype).bits
        in_range, amount = _shift_amounts(y, bits)
        dtype = x.dtype
        if dtype == torch.uint64:
            base = x.view(torch.int64)
        elif dtype in WIDENED_UINTS:
            base = x.to(torch.int64)
        else:
            base, amount = x, amount.to(dtype)
        if direction == "LEFT":
            shifted = torch.bitwise_left_shift(base, amount)
            fill = torch.zeros_like(base)
        else:
            shifted = torch.bitwise_right_shift(base, amount)
            fill = torch.where(base < 0, -torch.ones_like(base), torch.zeros_like(base))
            if dtype == torch.uint64:
                # int64's right shift copies the top bit; a uint64 shift must fill with zeros.
                shifted = logical_shift_right(base, amount)
                fill = torch.zeros_like(base)
        out = torch.where(in_range, shifted, fill)
        if dtype == torch.uint64:
            return out.view(torch.uint64)
        return out.to(dtype)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def equal(a: Any, b: Any) -> Tensor:
    """``a == b`` element-wise, broadcast NumPy-style (ONNX ``Equal``).

    :param a: a tensor of numbers, bools or strings (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ or the shapes do not broadcast.
    """
    return Equal()(a, b)


def less(a: Any, b: Any) -> Tensor:
    """``a < b`` element-wise, broadcast NumPy-style (ONNX ``Less``).

    :param a: a tensor of numbers (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or an input is boolean.
    """
    return Less()(a, b)


def less_equal(a: Any, b: Any) -> Tensor:
    """``a <= b`` element-wise, broadcast NumPy-style (ONNX ``LessOrEqual``).

    :param a: a tensor of numbers (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or an input is boolean.
    """
    return LessOrEqual()(a, b)


def greater(a: Any, b: Any) -> Tensor:
    """``a > b`` element-wise, broadcast NumPy-style (ONNX ``Greater``).

    :param a: a tensor of numbers (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or an input is boolean.
    """
    return Greater()(a, b)


def greater_equal(a: Any, b: Any) -> Tensor:
    """``a >= b`` element-wise, broadcast NumPy-style (ONNX ``GreaterOrEqual``).

    :param a: a tensor of numbers (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or an input is boolean.
    """
    return GreaterOrEqual()(a, b)


def _and(a: Any, b: Any) -> Tensor:
    """Logical and of bool tensors (SINGA's name; ONNX ``And``).

    :param a: a bool tensor.
    :param b: a bool tensor broadcastable with ``a``.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or ``a`` is not boolean.
    """
    return And()(a, b)


def _or(a: Any, b: Any) -> Tensor:
    """Logical or of bool tensors (SINGA's name; ONNX ``Or``).

    :param a: a bool tensor.
    :param b: a bool tensor broadcastable with ``a``.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or ``a`` is not boolean.
    """
    return Or()(a, b)


def _xor(a: Any, b: Any) -> Tensor:
    """Logical exclusive or of bool tensors (SINGA's name; ONNX ``Xor``).

    :param a: a bool tensor.
    :param b: a bool tensor broadcastable with ``a``.
    :returns: a bool tensor of the broadcast shape.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or ``a`` is not boolean.
    """
    return Xor()(a, b)


def bitwise_and(a: Any, b: Any) -> Tensor:
    """Bitwise and element-wise (ONNX ``BitwiseAnd``).

    :param a: an integer tensor.
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or ``a`` is not an
        integer tensor.
    """
    return BitwiseAnd()(a, b)


def bitwise_or(a: Any, b: Any) -> Tensor:
    """Bitwise or element-wise (ONNX ``BitwiseOr``).

    :param a: an integer tensor.
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or ``a`` is not an
        integer tensor.
    """
    return BitwiseOr()(a, b)


def bitwise_xor(a: Any, b: Any) -> Tensor:
    """Bitwise exclusive or element-wise (ONNX ``BitwiseXor``).

    :param a: an integer tensor.
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or ``a`` is not an
        integer tensor.
    """
    return BitwiseXor()(a, b)


def bitshift(x: Any, y: Any, direction: str = "LEFT") -> Tensor:
    """Shift the bits of ``x`` by ``y`` places (ONNX ``BitShift``).

    Right shifts of signed types are arithmetic; a shift by a negative amount or by the type's width
    or more gives the sign fill alone (-1 for a right shift of a negative ``x``, else 0).

    :param x: an integer tensor.
    :param y: the shift amounts, of ``x``'s dtype and broadcastable with it.
    :param direction: ``"LEFT"`` or ``"RIGHT"``.
    :returns: a tensor of the broadcast shape and ``x``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, ``x`` is not an integer
        tensor, or ``direction`` is neither value.
    """
    return BitShift(direction=direction)(x, y)

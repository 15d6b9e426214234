"""Comparisons, logical and bitwise operators, BitShift. None of them is differentiable; all
broadcast NumPy-style and require both inputs to have one element type.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx import strings
from sonnx.errors import BadInputError
from sonnx.operators.elementwise.base import (
    WIDENED_UINTS,
    is_integer,
    logical_shift_right,
    ordered,
    require,
)
from sonnx.operators.elementwise.binary import BinaryOp
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


class Equal(BinaryOp):
    op_type = "Equal"
    since_versions = (7, 11, 13, 19)
    takes_strings = True

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if type(a) is StringArray or type(b) is StringArray:
            return strings.equal(a, b)
        self.check(a, b, numeric=False)
        return torch.eq(a, b)


class Less(BinaryOp):
    op_type = "Less"
    since_versions = (7, 9, 13)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.lt, a, b)


class LessOrEqual(BinaryOp):
    op_type = "LessOrEqual"
    since_versions = (12, 16)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.le, a, b)


class Greater(BinaryOp):
    op_type = "Greater"
    since_versions = (7, 9, 13)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.gt, a, b)


class GreaterOrEqual(BinaryOp):
    op_type = "GreaterOrEqual"
    since_versions = (12, 16)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return ordered(torch.ge, a, b)


class LogicalOp(BinaryOp):
    """And, Or, Xor: bool inputs only."""

    def check(self, a: torch.Tensor, b: torch.Tensor, numeric: bool = False) -> None:
        super().check(a, b, numeric=False)
        require(self.op_type, "A", a, "a bool tensor", a.dtype == torch.bool)


class And(LogicalOp):
    op_type = "And"
    since_versions = (7,)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.logical_and(a, b)


class Or(LogicalOp):
    op_type = "Or"
    since_versions = (7,)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.logical_or(a, b)


class Xor(LogicalOp):
    op_type = "Xor"
    since_versions = (7,)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.logical_xor(a, b)


class IntegerOp(BinaryOp):
    """BitwiseAnd/Or/Xor and BitShift: integer inputs only (torch has these for every width)."""

    def check(self, a: torch.Tensor, b: torch.Tensor, numeric: bool = True) -> None:
        super().check(a, b)
        require(self.op_type, self.input_names[0], a, "an integer tensor", is_integer(a.dtype))


class BitwiseAnd(IntegerOp):
    op_type = "BitwiseAnd"
    since_versions = (18,)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.bitwise_and(a, b)


class BitwiseOr(IntegerOp):
    op_type = "BitwiseOr"
    since_versions = (18,)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return torch.bitwise_or(a, b)


class BitwiseXor(IntegerOp):
    op_type = "BitwiseXor"
    since_versions = (18,)

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


def equal(a: Any, b: Any) -> Tensor:
    return Equal()(a, b)


def less(a: Any, b: Any) -> Tensor:
    return Less()(a, b)


def less_equal(a: Any, b: Any) -> Tensor:
    return LessOrEqual()(a, b)


def greater(a: Any, b: Any) -> Tensor:
    return Greater()(a, b)


def greater_equal(a: Any, b: Any) -> Tensor:
    return GreaterOrEqual()(a, b)


def _and(a: Any, b: Any) -> Tensor:
    """Logical and of bool tensors (SINGA's name)."""
    return And()(a, b)


def _or(a: Any, b: Any) -> Tensor:
    return Or()(a, b)


def _xor(a: Any, b: Any) -> Tensor:
    return Xor()(a, b)


def bitwise_and(a: Any, b: Any) -> Tensor:
    return BitwiseAnd()(a, b)


def bitwise_or(a: Any, b: Any) -> Tensor:
    return BitwiseOr()(a, b)


def bitwise_xor(a: Any, b: Any) -> Tensor:
    return BitwiseXor()(a, b)


def bitshift(x: Any, y: Any, direction: str = "LEFT") -> Tensor:
    return BitShift(direction=direction)(x, y)

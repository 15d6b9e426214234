"""Two-input arithmetic with NumPy broadcasting: Add, Sub, Mul, Div, Pow, Mod.

Integer arithmetic wraps around as in C; integer Div truncates toward zero and Mod follows
the ``fmod`` attribute (0: the sign of the divisor, like Python; 1: the sign of the dividend,
like C). The unsigned types torch lacks kernels for are handled as described in
:mod:`sonnx.operators.elementwise.base`.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.elementwise.base import (
    INT64_MIN,
    NO_KERNEL_UINTS,
    WIDENED_UINTS,
    broadcast_shape,
    is_integer,
    logical_shift_right,
    modular,
    require,
    same_dtype,
)
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = ["Add", "Div", "Mod", "Mul", "Pow", "Sub", "add", "div", "mod", "mul", "pow", "sub"]


# What the SINGA-named functions below share.
A_NUMBER = Input("a", "a number tensor (a number or array becomes a constant).", annotation="Any")
B_LIKE_A = Input("b", "a tensor of ``a``'s dtype, broadcastable with it.", annotation="Any")
BROADCAST_LIKE_A = "a tensor of the broadcast shape and ``a``'s dtype."
NO_BOOLEAN = (
    ("BadInputError", "the dtypes differ, the shapes do not broadcast, or an input is boolean."),
)


class BinaryOp(Operator):
    """Two inputs ``A`` and ``B`` of one element type, broadcast NumPy-style."""

    output_shape = OutputShape.FROM_SHAPES

    input_names = ("A", "B")
    # The last input signature that passed the checks: an imported graph runs one operator
    # object many times, mostly on the same shapes, and need not check them again.
    _checked: tuple[Any, ...] | None = None

    def check(self, a: torch.Tensor, b: torch.Tensor, numeric: bool = True) -> None:
        # Not while a graph is traced: shapes may be symbols then, which must neither be
        # compared with a kept signature (a guard pinning the graph) nor kept (for a later
        # trace to meet).
        kept = value_checks()
        signature = (a.shape, b.shape, a.dtype, b.dtype, numeric) if kept else None
        if kept and signature == self._checked:
            return
        same_dtype(self.op_type, self.input_names, (a, b))
        broadcast_shape(self.op_type, self.input_names, (a, b))
        if numeric:
            require(self.op_type, self.input_names[0], a, "a numeric tensor", a.dtype != torch.bool)
        if kept:
            self._checked = signature


class Add(BinaryOp):
    """ONNX ``Add``: ``a + b`` element-wise, broadcast NumPy-style (integers wrap)."""

    op_type = "Add"
    since_versions = (7, 13, 14)

    singa_functions = (
        SingaFunction(
            "add",
            "``a + b`` element-wise, broadcast NumPy-style (ONNX ``Add``; integers wrap).",
            inputs=(A_NUMBER, B_LIKE_A),
            returns=BROADCAST_LIKE_A,
            raises=NO_BOOLEAN,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return modular(torch.add, a, b)


class Sub(BinaryOp):
    """ONNX ``Sub``: ``a - b`` element-wise, broadcast NumPy-style (integers wrap)."""

    op_type = "Sub"
    since_versions = (7, 13, 14)

    singa_functions = (
        SingaFunction(
            "sub",
            "``a - b`` element-wise, broadcast NumPy-style (ONNX ``Sub``; integers wrap).",
            inputs=(A_NUMBER, B_LIKE_A),
            returns=BROADCAST_LIKE_A,
            raises=NO_BOOLEAN,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return modular(torch.sub, a, b)


class Mul(BinaryOp):
    """ONNX ``Mul``: ``a * b`` element-wise, broadcast NumPy-style (integers wrap)."""

    op_type = "Mul"
    since_versions = (7, 13, 14)

    singa_functions = (
        SingaFunction(
            "mul",
            "``a * b`` element-wise, broadcast NumPy-style (ONNX ``Mul``; integers wrap).",
            inputs=(A_NUMBER, B_LIKE_A),
            returns=BROADCAST_LIKE_A,
            raises=NO_BOOLEAN,
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        return modular(torch.mul, a, b)


def _check_divisor(op: str, b: torch.Tensor) -> None:
    if is_integer(b.dtype) and bool((b == 0).any()):
        raise BadInputError(f"{op}: integer division by zero (input B holds a 0)")


def _unsigned_less(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a < b`` for int64 bit patterns of uint64 values."""
    return (a ^ INT64_MIN) < (b ^ INT64_MIN)


def _udivmod64(n: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unsigned 64-bit quotient and remainder from signed int64 ops (Hacker's Delight 9-3).

    ``n`` and ``d`` are uint64 values viewed as int64, ``d`` nonzero and broadcast to ``n``.
    """
    one = torch.ones_like(n)
    # A divisor >= 2**63 (negative as int64) goes into n at most once.
    big_q = torch.where(_unsigned_less(n, d), torch.zeros_like(n), one)
    safe_d = torch.where(d < 0, one, d)
    q = torch.div(logical_shift_right(n, one), safe_d, rounding_mode="trunc") << 1
    r = n - q * safe_d
    q = torch.where(_unsigned_less(r, safe_d), q, q + 1)
    q = torch.where(d < 0, big_q, q)
    return q, n - q * d


def _integer_divmod(
    a: torch.Tensor, b: torch.Tensor, floor_mod: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated quotient and remainder (remainder floored when ``floor_mod``)."""
    dtype = a.dtype
    if dtype == torch.uint64:
        a64, b64 = torch.broadcast_tensors(a.view(torch.int64), b.view(torch.int64))
        q, r = _udivmod64(a64, b64)
        return q.view(torch.uint64), r.view(torch.uint64)
    wide_a, wide_b = (a.to(torch.int64), b.to(torch.int64)) if dtype in WIDENED_UINTS else (a, b)
    minus_one = None
    if wide_a.dtype in (torch.int32, torch.int64):
        # The smallest value over -1 overflows, and the CPU's division traps on it (SIGFPE: the
        # process dies). Divide by 1 there and negate, wrapping as the other overflows do.
        minus_one = wide_b == -1
        wide_b = torch.where(minus_one, torch.ones_like(wide_b), wide_b)
    q = torch.div(wide_a, wide_b, rounding_mode="trunc")
    if minus_one is not None:
        q = torch.where(minus_one, -wide_a, q)
    r = torch.remainder(wide_a, wide_b) if floor_mod else torch.fmod(wide_a, wide_b)
    return q.to(dtype), r.to(dtype)


class Div(BinaryOp):
    """Integer division truncates toward zero, like C (and unlike torch's default)."""

    op_type = "Div"
    since_versions = (7, 13, 14)

    singa_functions = (
        SingaFunction(
            "div",
            (
                "``a / b`` element-wise, broadcast NumPy-style; integer division truncates toward "
                "zero."
            ),
            inputs=(
                Input(
                    "a",
                    "the dividend, a number tensor (a number or array becomes a constant).",
                    annotation="Any",
                ),
                Input(
                    "b",
                    "the divisor, of ``a``'s dtype and broadcastable with it.",
                    annotation="Any",
                ),
            ),
            returns=BROADCAST_LIKE_A,
            raises=(
                (
                    "BadInputError",
                    (
                        "the dtypes differ, the shapes do not broadcast, an input is boolean, or "
                        "an integer ``b`` holds a 0."
                    ),
                ),
            ),
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        if not is_integer(a.dtype):
            return torch.div(a, b)
        _check_divisor(self.op_type, b)
        return _integer_divmod(a, b, floor_mod=False)[0]


class Mod(BinaryOp):
    """``fmod=0``: remainder with the divisor's sign; ``fmod=1``: with the dividend's sign."""

    op_type = "Mod"
    since_versions = (10, 13, 28)

    singa_functions = (
        SingaFunction(
            "mod",
            "Remainder of ``a / b``: with ``b``'s sign (fmod=0) or with ``a``'s sign (fmod=1).",
            inputs=(
                Input("a", "the dividend, a number tensor.", annotation="Any"),
                Input(
                    "b",
                    "the divisor, of ``a``'s dtype and broadcastable with it.",
                    annotation="Any",
                ),
            ),
            returns=BROADCAST_LIKE_A,
            keywords=(
                Keyword(
                    "fmod", "0 for the floored remainder (Python's ``%``), 1 for C's ``fmod``."
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "the dtypes differ, the shapes do not broadcast, an input is boolean, or "
                        "an integer ``b`` holds a 0."
                    ),
                ),
            ),
        ),
    )

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.check(a, b)
        floor_mod = not self.attr("fmod")
        if not is_integer(a.dtype):
            if not floor_mod:
                return torch.fmod(a, b)
            # torch.remainder's own CPU formula, written out: inductor lowers remainder as
            # a - b * floor(a / b), NaN for a finite a over an infinite b (a, or ±inf, here).
            rest = torch.fmod(a, b)
            return torch.where((rest != 0) & ((rest < 0) != (b < 0)), rest + b, rest)
        _check_divisor(self.op_type, b)
        return _integer_divmod(a, b, floor_mod)[1]


class Pow(BinaryOp):
    """``X ** Y``; since opset 12 Y may have another numeric type. The result has X's type."""

    op_type = "Pow"
    since_versions = (7, 12, 13, 15)
    # The exponent.
    parameterising_inputs = frozenset({1})
    input_names = ("X", "Y")

    singa_functions = (
        SingaFunction(
            "pow",
            (
                "``a ** b`` element-wise, broadcast NumPy-style (ONNX ``Pow``); the result has "
                "``a``'s type."
            ),
            inputs=(
                Input("a", "the base, a number tensor.", annotation="Any"),
                Input(
                    "b",
                    "the exponent, a number tensor of any numeric type broadcastable with ``a``.",
                    annotation="Any",
                ),
            ),
            returns=BROADCAST_LIKE_A,
            raises=(
                (
                    "BadInputError",
                    (
                        "the shapes do not broadcast, an input is boolean, or an integer ``a`` "
                        "has a negative integer exponent."
                    ),
                ),
            ),
        ),
    )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        broadcast_shape(self.op_type, self.input_names, (x, y))
        for name, t in zip(self.input_names, (x, y), strict=True):
            require(self.op_type, name, t, "a numeric tensor", t.dtype != torch.bool)
        if y.dtype in NO_KERNEL_UINTS:
            y = y.to(torch.int64)
        if is_integer(x.dtype):
            if y.dtype.is_floating_point:
                # The float power of an integer, truncated back to X's type (as ONNX's reference).
                return torch.pow(x.to(torch.float64), y.to(torch.float64)).to(x.dtype)
            if bool((y < 0).any()):
                raise BadInputError(
                    f"Pow: an integer X needs non-negative integer exponents; input Y holds "
                    f"{int(y.min())}"
                )
            # Exact modulo 2**64, then wrapped to X's width like C integer arithmetic.
            is_u64 = x.dtype == torch.uint64
            base = x.view(torch.int64) if is_u64 else x.to(torch.int64)
            out = torch.pow(base, y.to(torch.int64))
            return out.view(torch.uint64) if is_u64 else out.to(x.dtype)
        out = torch.pow(x, y)
        return out if out.dtype == x.dtype else out.to(x.dtype)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Before opset 12 X and Y share one type: Y is cast to X's type first."""
        x, y = (t.dtype for t in self.inputs[:2] if t is not None)
        if g.opset < 12 and x != y:
            if not dtypes.is_float(x):
                raise ExportError(
                    f"Pow at opset {g.opset} needs a floating-point X, received {x}; export at "
                    "opset 12 or later"
                )
            cast = g.fresh_name("pow_exponent")
            g.add_node("Cast", [inputs[1]], [cast], to=dtypes.torch_to_onnx(x))
            inputs = [inputs[0], cast]
        g.add_node(self.op_type, inputs, outputs)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def add(a: Any, b: Any) -> Tensor:
    """``a + b`` element-wise, broadcast NumPy-style (ONNX ``Add``; integers wrap).

    :param a: a number tensor (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or an input is boolean.
    """
    return Add()(a, b)


def sub(a: Any, b: Any) -> Tensor:
    """``a - b`` element-wise, broadcast NumPy-style (ONNX ``Sub``; integers wrap).

    :param a: a number tensor (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or an input is boolean.
    """
    return Sub()(a, b)


def mul(a: Any, b: Any) -> Tensor:
    """``a * b`` element-wise, broadcast NumPy-style (ONNX ``Mul``; integers wrap).

    :param a: a number tensor (a number or array becomes a constant).
    :param b: a tensor of ``a``'s dtype, broadcastable with it.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, or an input is boolean.
    """
    return Mul()(a, b)


def div(a: Any, b: Any) -> Tensor:
    """``a / b`` element-wise, broadcast NumPy-style; integer division truncates toward zero.

    :param a: the dividend, a number tensor (a number or array becomes a constant).
    :param b: the divisor, of ``a``'s dtype and broadcastable with it.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, an input is boolean, or
        an integer ``b`` holds a 0.
    """
    return Div()(a, b)


def mod(a: Any, b: Any, fmod: int = 0) -> Tensor:
    """Remainder of ``a / b``: with ``b``'s sign (fmod=0) or with ``a``'s sign (fmod=1).

    :param a: the dividend, a number tensor.
    :param b: the divisor, of ``a``'s dtype and broadcastable with it.
    :param fmod: 0 for the floored remainder (Python's ``%``), 1 for C's ``fmod``.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the dtypes differ, the shapes do not broadcast, an input is boolean, or
        an integer ``b`` holds a 0.
    """
    return Mod(fmod=fmod)(a, b)


def pow(a: Any, b: Any) -> Tensor:
    """``a ** b`` element-wise, broadcast NumPy-style (ONNX ``Pow``); the result has ``a``'s type.

    :param a: the base, a number tensor.
    :param b: the exponent, a number tensor of any numeric type broadcastable with ``a``.
    :returns: a tensor of the broadcast shape and ``a``'s dtype.
    :raises BadInputError: the shapes do not broadcast, an input is boolean, or an integer ``a`` has
        a negative integer exponent.
    """
    return Pow()(a, b)

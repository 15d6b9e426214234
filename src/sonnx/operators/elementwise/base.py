"""Shared machinery of the element-wise operators: input checks and the unsigned types torch has
few kernels for.

torch implements almost nothing for ``uint16``/``uint32``/``uint64`` (only ``*``, ``==`` and the
bitwise and/or/xor). ONNX allows them everywhere, so the ops compute on an ``int64`` stand-in
and convert back:

* ``uint16``/``uint32`` widen to ``int64`` exactly; converting back discards the high bits, which
  is the wrap-around ONNX integer arithmetic has.
* ``uint64`` is reinterpreted bit for bit as ``int64``. Two's-complement add, subtract, multiply,
  negate and bitwise ops give the same bits, so :func:`modular` is exact. Order is not preserved,
  so :func:`ordered` flips the top bit, which maps unsigned order onto signed order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import onnx.defs
import torch

from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.precision import autocast_mixes
from sonnx.symbolic_sizes import has_symbols

WIDENED_UINTS = frozenset({torch.uint16, torch.uint32})
NO_KERNEL_UINTS = frozenset({torch.uint16, torch.uint32, torch.uint64})
UNSIGNED = frozenset({torch.uint8, torch.uint16, torch.uint32, torch.uint64})
INT64_MIN = torch.iinfo(torch.int64).min


def is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def modular(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    """``fn`` on tensors of one dtype, with wrap-around for the kernel-less uints.

    Only for operations whose low bits do not depend on the high bits (add, sub, mul, neg,
    bitwise ops, left shift); other dtypes go to ``fn`` unchanged.
    """
    dtype = xs[0].dtype
    if dtype in WIDENED_UINTS:
        return fn(*(x.to(torch.int64) for x in xs)).to(dtype)
    if dtype == torch.uint64:
        return fn(*(x.view(torch.int64) for x in xs)).view(torch.uint64)
    return fn(*xs)


def to_ordered(x: torch.Tensor) -> torch.Tensor:
    """A tensor whose signed order is ``x``'s order (identity for types torch can compare)."""
    if x.dtype in WIDENED_UINTS:
        return x.to(torch.int64)
    if x.dtype == torch.uint64:
        return x.view(torch.int64) ^ INT64_MIN
    return x


def from_ordered(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Undo :func:`to_ordered` for a result made of (selected) ordered values."""
    if dtype in WIDENED_UINTS:
        return y.to(dtype)
    if dtype == torch.uint64:
        return (y ^ INT64_MIN).view(torch.uint64)
    return y


def ordered(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    """``fn`` that selects among or compares its inputs (max, min, clamp) for any dtype."""
    dtype = xs[0].dtype
    if dtype not in NO_KERNEL_UINTS:
        return fn(*xs)
    out = fn(*(to_ordered(x) for x in xs))
    return out if out.dtype == torch.bool else from_ordered(out, dtype)


def logical_shift_right(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``x >> s`` filling with zeros, for int64 bit patterns of uint64 values, 0 <= s < 64."""
    shifted = torch.bitwise_right_shift(x, s)
    mask = torch.bitwise_left_shift(torch.ones_like(s), 64 - s.clamp(min=1)) - 1
    return torch.where(s == 0, x, shifted & mask)


def require_float(op: str, name: str, x: torch.Tensor) -> None:
    """Refuse input ``name`` of node ``op`` unless it is floating-point (the element-wise and
    activation families' one check)."""
    if not dtypes.is_float(x.dtype):
        raise BadInputError(
            f"{op}: input {name} must be a floating-point tensor (float16, bfloat16, float32, "
            f"float64), received {dtypes.dtype_name(x.dtype)}"
        )


def require(op: str, name: str, x: torch.Tensor, allowed: str, ok: bool) -> None:
    """Raise the standard message when ``ok`` is false: ``allowed`` describes the valid dtypes."""
    if not ok:
        raise BadInputError(
            f"{op}: input {name} must be {allowed}, received {dtypes.dtype_name(x.dtype)}"
        )


def same_dtype(op: str, names: Sequence[str], xs: Sequence[torch.Tensor]) -> None:
    """ONNX's single type variable ``T``: every input has the first input's element type."""
    first = xs[0].dtype
    for name, x in zip(names[1:], xs[1:], strict=False):
        if x.dtype != first and not autocast_mixes(xs[0], x):
            raise BadInputError(
                f"{op}: input {name} must have the element type of input {names[0]} "
                f"({dtypes.dtype_name(first)}), received {dtypes.dtype_name(x.dtype)}"
            )


def broadcast_shapes(*shapes: Sequence[int]) -> torch.Size:
    """``torch.broadcast_shapes`` (NumPy rules; RuntimeError when they do not broadcast),
    computed on the shape tuples in plain Python: operators check shapes on every call, and
    torch's version costs several times more."""
    tuples = [tuple(s) for s in shapes]
    if any(has_symbols(s) for s in tuples):  # a symbolic trace: torch's rules on symbols
        return torch.broadcast_shapes(*tuples)
    first = tuples[0]
    if all(s == first for s in tuples[1:]):
        return torch.Size(first)
    out = []
    for i in range(1, max(len(s) for s in tuples) + 1):
        dims = {s[-i] for s in tuples if len(s) >= i} - {1}
        if len(dims) > 1:
            raise RuntimeError(f"shapes {tuples} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return torch.Size(reversed(out))


def broadcast_shape(op: str, names: Sequence[str], xs: Sequence[torch.Tensor]) -> torch.Size:
    """NumPy-style broadcast shape of the inputs, or a clear error naming every shape."""
    try:
        return broadcast_shapes(*(x.shape for x in xs))
    except RuntimeError:
        shown = ", ".join(f"{n} {tuple(x.shape)}" for n, x in zip(names, xs, strict=False))
        raise BadInputError(
            f"{op}: inputs must be broadcastable to one shape (NumPy rules), received {shown}"
        ) from None


@cache
def onnx_input_name(op_type: str, index: int) -> str:
    """The name ONNX gives input ``index`` of ``op_type`` (for error messages)."""
    formal = onnx.defs.get_schema(op_type).inputs
    return formal[min(index, len(formal) - 1)].name

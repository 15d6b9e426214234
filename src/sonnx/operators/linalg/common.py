"""What the matrix products share: torch's matmul with errors that name the operator and both
shapes, and the unsigned types torch cannot multiply or scan on the CPU (computed in int64).
"""

from __future__ import annotations

import torch

from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.operators.elementwise.base import broadcast_shapes
from sonnx.precision import autocast_mixes

WIDENED = frozenset({torch.uint16, torch.uint32, torch.uint64})


def widen(x: torch.Tensor) -> torch.Tensor:
    """Unsigned types torch cannot multiply or scan on the CPU are computed in int64."""
    return x.to(torch.int64) if x.dtype in WIDENED else x


def shape_of(x: torch.Tensor) -> tuple[int, ...]:
    """``x``'s shape as a plain tuple, for error messages."""
    return tuple(x.shape)


def checked_matmul(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """NumPy-style matmul; inputs torch rejects get an error naming the op and both shapes.

    torch checks the shapes and types anyway, so they are checked here only when it raises
    (MatMul is most of a transformer's nodes, and the checks cost as much as a small product).
    """
    if a.dtype in WIDENED or b.dtype in WIDENED:
        check_matmul(op, a, b)
        return torch.matmul(widen(a), widen(b)).to(a.dtype)
    try:
        return torch.matmul(a, b)
    except RuntimeError:
        check_matmul(op, a, b)
        raise


def check_matmul(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """A BadInputError naming what is wrong with ``a @ b``'s shapes or types, if anything."""
    if a.dim() == 0 or b.dim() == 0:
        raise BadInputError(
            f"{op}: inputs must have at least 1 dimension, received shapes {shape_of(a)} and "
            f"{shape_of(b)}"
        )
    k_a = a.shape[-1]
    k_b = b.shape[-2] if b.dim() >= 2 else b.shape[0]
    if k_a != k_b:
        raise BadInputError(
            f"{op}: the last dimension of A ({k_a}) must equal the contracted dimension of B "
            f"({k_b}), received shapes {shape_of(a)} and {shape_of(b)}"
        )
    try:
        broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise BadInputError(
            f"{op}: the batch dimensions of A and B must broadcast, received shapes {shape_of(a)} "
            f"and {shape_of(b)}"
        ) from None
    if a.dtype != b.dtype and not autocast_mixes(a, b):
        raise BadInputError(
            f"{op}: A and B must have one dtype, received {dtypes.dtype_name(a.dtype)} and "
            f"{dtypes.dtype_name(b.dtype)}"
        )

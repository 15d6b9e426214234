"""Helpers shared by the normalization and loss operators: dtype checks, compute precision,
and writing only the attributes an older (or newer) opset's schema knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx.defs
import torch

from sonnx import dtypes
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.elementwise.base import broadcast_shapes

__all__: list[str] = []


def check_float(op: str, name: str, x: torch.Tensor) -> None:
    """Raise unless ``x`` has a floating element type."""
    if not dtypes.is_float(x.dtype):
        raise BadInputError(
            f"{op}: input {name} must be a floating-point tensor (float16, bfloat16, float32 or "
            f"float64), received {dtypes.dtype_name(x.dtype)}"
        )


def check_rank(op: str, name: str, x: torch.Tensor, low: int, expected: str) -> None:
    """Raise unless ``x`` has at least ``low`` dimensions."""
    if x.dim() < low:
        raise BadInputError(
            f"{op}: input {name} must be {expected}, received shape {tuple(x.shape)}"
        )


def check_broadcasts_to(
    op: str,
    name: str,
    t: torch.Tensor,
    target: Sequence[int],
    requirement: str = "must have shape {} or one that broadcasts to it",
) -> None:
    """Raise unless ``t`` broadcasts to ``target`` without growing it; the error says
    ``requirement`` with the target shape in its ``{}``."""
    try:
        ok = broadcast_shapes(t.shape, tuple(target)) == tuple(target)
    except RuntimeError:
        ok = False
    if not ok:
        raise BadInputError(
            f"{op}: input {name} {requirement.format(tuple(target))}, "
            f"received shape {tuple(t.shape)}"
        )


def compute_dtype(dtype: torch.dtype, stash: torch.dtype | None = None) -> torch.dtype:
    """The precision statistics are computed in.

    Half-precision inputs are widened to float32 (ONNX's ``stash_type`` default and what ONNX
    Runtime does); a stash type never narrows a wider input, so float64 stays float64.
    """
    widened = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    if stash is None or stash in (torch.float16, torch.bfloat16):
        return widened
    return torch.promote_types(widened, stash)


def stash_dtype(op: str, code: int) -> torch.dtype:
    """The torch dtype named by a ``stash_type`` attribute (an ONNX element-type code)."""
    try:
        dtype = dtypes.onnx_to_torch(int(code))
    except BadInputError:
        dtype = None
    if dtype is None or not dtypes.is_float(dtype):
        raise BadInputError(
            f"{op}: attribute stash_type must name a floating type, received {code!r}"
        )
    return dtype


def normalize_axis(op: str, axis: int, rank: int) -> int:
    """A possibly negative axis as an index in ``[0, rank)``."""
    if not -rank <= axis < rank:
        raise BadInputError(
            f"{op}: attribute axis must be in [{-rank}, {rank - 1}] for a rank-{rank} input, "
            f"received {axis}"
        )
    return axis % rank


def schema_attributes(op_type: str, opset: int) -> set[str] | None:
    """The attribute names of ``op_type`` at ``opset``, or None if it does not exist there."""
    try:
        return set(onnx.defs.get_schema(op_type, opset, "").attributes)
    except onnx.defs.SchemaError:
        return None


def attrs_at_opset(op_type: str, opset: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` limited to those ``op_type``'s schema at ``opset`` defines.

    Imported nodes carry every attribute of their own version (with defaults filled in); a
    version adapter drops the ones a different opset does not know (``consumed_inputs``,
    ``spatial``, ``is_test``...) after checking the semantics do not depend on them.
    """
    known = schema_attributes(op_type, opset)
    if known is None:
        raise ExportError(f"{op_type} does not exist at opset {opset}")
    return {k: v for k, v in attrs.items() if k in known and v is not None}

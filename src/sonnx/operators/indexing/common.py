"""Helpers shared by the indexing and reduction operators: axis and index checks, the
handling of the unsigned types (uint16/32/64) for which torch has few CPU kernels, and the
int64 index inputs the SINGA-style functions make of Python ints and lists.

torch implements gather/scatter/sum/argmax/... for the signed integer types but not for
uint16/32/64. Data movement and wrap-around arithmetic (+, *) are bit-identical between an
unsigned type and its signed twin, so those ops run on a reinterpreting ``view``; comparisons
run on an order-preserving key (the signed view with its sign bit flipped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.tracing import defer_check, defers_checks_on, value_checks
from sonnx.errors import BadInputError, ExportError
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

SIGNED_TWIN = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def signed_bits(x: torch.Tensor) -> torch.Tensor:
    """``x`` reinterpreted as its signed twin when torch lacks kernels for its unsigned type."""
    twin = SIGNED_TWIN.get(x.dtype)
    return x if twin is None else x.view(twin)


def restore_bits(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Undo :func:`signed_bits`: view ``y`` back as ``dtype`` when that was reinterpreted."""
    return y.view(dtype) if dtype in SIGNED_TWIN else y


def moved(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Run a pure data-movement ``fn`` on ``x``, via the signed twin for unsigned types."""
    return restore_bits(fn(signed_bits(x)), x.dtype)


def moved_pair(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], a: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    """:func:`moved` for a ``fn`` of two tensors; ``b`` is first cast to ``a``'s dtype."""
    return restore_bits(fn(signed_bits(a), signed_bits(b.to(a.dtype))), a.dtype)


def order_key(x: torch.Tensor) -> torch.Tensor:
    """A tensor that sorts and compares exactly like ``x`` and that torch can sort/argmax.

    Unsigned types map to their signed twin with the sign bit flipped (monotone); bool maps to
    uint8 (False < True).
    """
    twin = SIGNED_TWIN.get(x.dtype)
    if twin is not None:
        return x.view(twin) ^ torch.tensor(torch.iinfo(twin).min, dtype=twin, device=x.device)
    if x.dtype == torch.bool:
        return x.to(torch.uint8)
    return x


def norm_axis(op: str, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` made non-negative; BadInputError naming ``op`` otherwise."""
    if not -rank <= axis < rank:
        raise BadInputError(
            f"{op}: {what} must be in [{-rank}, {rank - 1}] for an input of rank {rank}, "
            f"received {axis}"
        )
    return axis % rank


def norm_axes(op: str, axes: Sequence[int], rank: int) -> list[int]:
    """Every axis normalised with :func:`norm_axis`; repeated axes are an error."""
    result = [norm_axis(op, a, rank, "axes") for a in axes]
    if len(set(result)) != len(result):
        raise BadInputError(f"{op}: axes must not repeat an axis, received {list(axes)}")
    return result


def norm_indices(op: str, name: str, indices: torch.Tensor, size: int) -> torch.Tensor:
    """int64 indices into a dimension of ``size`` with negative ones wrapped (ONNX allows
    ``[-size, size)``); out-of-range indices raise BadInputError naming ``op`` and ``name``."""
    idx = indices.to(torch.int64)
    if not value_checks():
        return torch.where(idx < 0, idx + size, idx)

    def message() -> str:
        outside = (idx < -size) | (idx >= size)
        bad = int(idx[outside].reshape(-1)[0])
        return f"{op}: input {name} must hold indices in [{-size}, {size - 1}], received {bad}"

    if defers_checks_on(idx.device):  # checked at the end of the run; clamp until then
        wrapped = torch.where(idx < 0, idx + size, idx)
        defer_check(((wrapped < 0) | (wrapped >= size)).any(), message)
        return wrapped.clamp(0, max(size - 1, 0))
    if idx.numel() == 0:
        return idx
    # One reduction and one host read; most index tensors (token ids, gathers of positions)
    # hold no negative index and are returned as they are.
    least, most = torch.aminmax(idx)
    low, high = int(least), int(most)
    if low < -size or high >= size:
        raise BadInputError(message())
    return idx if low >= 0 else torch.where(idx < 0, idx + size, idx)


def require_int(op: str, name: str, x: torch.Tensor) -> None:
    """BadInputError unless ``x`` has an integer element type."""
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise BadInputError(
            f"{op}: input {name} must have an integer element type, received {dtype_name(x.dtype)}"
        )


def from_order_key(key: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Undo :func:`order_key`: the values of type ``dtype`` whose keys are ``key``."""
    twin = SIGNED_TWIN.get(dtype)
    if twin is not None:
        return (key ^ torch.tensor(torch.iinfo(twin).min, dtype=twin, device=key.device)).view(
            dtype
        )
    if dtype == torch.bool:
        return key.to(torch.bool)
    return key


def require_opset(g: GraphBuilder, op: str, since: int, what: str = "the operator") -> None:
    """ExportError unless the builder's opset is at least ``since``."""
    if g.opset < since:
        raise ExportError(
            f"{op}: {what} exists in ONNX only from opset {since}; cannot export to opset {g.opset}"
        )


def constant_ints(op: str, t: Tensor | None, what: str, opset: int) -> list[int] | None:
    """The values of a constant integer input, for writing it as an older opset's attribute.

    A computed input (one with a creator) cannot become an attribute: ExportError.
    """
    if t is None:
        return None
    if t.creator is not None:
        raise ExportError(
            f"{op}: input {what} is computed in the graph, but opset {opset} needs it as a "
            "constant attribute"
        )
    return [int(v) for v in t.data.reshape(-1).tolist()]


def index_tensor(value: Any, like: Tensor) -> Tensor:
    """An index input: tensors pass through, Python ints/lists become int64 constants."""
    if isinstance(value, Tensor):
        return value
    return Tensor(data=np.asarray(value, dtype=np.int64), device=like.device, requires_grad=False)

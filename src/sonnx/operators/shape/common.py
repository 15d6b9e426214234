"""Helpers shared by the shape-manipulation operators: axes, int64 inputs and older opsets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx.device import as_device
from sonnx.dims import has_dims
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.shape.dims import shape_from_dims
from sonnx.tensor import PlaceHolder, Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder


def normalize_axis(op: str, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` made non-negative; BadInputError otherwise."""
    if not -rank <= axis < rank:
        raise BadInputError(
            f"{op}: {what} must be in [{-rank}, {rank - 1}] for a {rank}-D input, received {axis}"
        )
    return axis % rank


def normalize_axes(op: str, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    """Every axis made non-negative; repeated axes are an error."""
    out = [normalize_axis(op, a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise BadInputError(f"{op}: {what} must not repeat an axis, received {list(axes)}")
    return out


def as_int_list(value: int | Sequence[int] | None) -> list[int] | None:
    """An int or a sequence of ints as a list (None stays None)."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return [int(value)]
    return [int(v) for v in value]


def int64_input(value: Tensor | int | Sequence[int] | None, like: Tensor | None) -> Tensor | None:
    """A Python int list becomes a constant int64 tensor (so the export carries it as an input).

    A sonnx Tensor is passed through unchanged: it may be computed (a dynamic shape).
    """
    if value is None or isinstance(value, Tensor):
        return value
    if has_dims(value):
        # Sizes read from tensors' shapes: a computed input, so exports follow those dims.
        return shape_from_dims(value)
    device = like.data.device if like is not None else as_device(None).torch_device
    data = torch.tensor(as_int_list(value), dtype=torch.int64, device=device)
    return Tensor(data=data, device=device, requires_grad=False)


def constant_input(op: Operator, index: int) -> torch.Tensor | None:
    """The value of input ``index`` when it is a constant (no creator, not a graph input).

    Constant nodes of an imported model arrive as leaf tensors, so they qualify too.
    Returns None when the input is absent or computed.
    """
    if index >= len(op.inputs):
        return None
    t = op.inputs[index]
    if t is None or isinstance(t, PlaceHolder):
        return None
    if t.creator is None or t.creator.op_type == "Constant":
        return t.data
    return None


def ints_for_attribute(
    op: Operator, index: int, name: str, g: GraphBuilder, since: int
) -> list[int] | None:
    """Input ``index`` as a list of ints to write as attribute ``name`` below opset ``since``.

    None when the input is absent; ExportError when it is present but computed at run time.
    """
    if index >= len(op.inputs) or op.inputs[index] is None:
        return None
    value = constant_input(op, index)
    if value is None:
        raise ExportError(
            f"{op.op_type}: at opset {g.opset} '{name}' must be an attribute (it became an input "
            f"in opset {since}), but this graph computes it at run time; export at opset "
            f"{since} or later"
        )
    return [int(v) for v in value.reshape(-1).tolist()]


def require_opset(g: GraphBuilder, op_type: str, since: int, detail: str = "") -> None:
    """ExportError unless the target opset has what this export needs."""
    if g.opset < since:
        what = detail or f"operator {op_type}"
        raise ExportError(
            f"{op_type}: {what} exists only from opset {since}; cannot export at opset {g.opset}"
        )


def attrs_without(attrs: dict[str, Any], *names: str) -> dict[str, Any]:
    """``attrs`` minus ``names`` and minus unset (None) values."""
    return {k: v for k, v in attrs.items() if v is not None and k not in names}

"""Importer adapters for elementwise (operators in :mod:`sonnx.operators.elementwise`, which
lists the classes registered as themselves for the versions that differ only in the types
they accept). The opset-1/6 forms are adapted here so that the recorded graph is the modern one:

* ``consumed_inputs`` (opset 1, an in-place hint) is dropped;
* ``broadcast=1`` with ``axis`` (binary ops before opset 7) becomes NumPy broadcasting by
  giving B trailing size-1 axes;
* Clip's ``min``/``max`` attributes (before opset 11) become constant inputs.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx.engine.operator import Operator
from sonnx.errors import BadModelError
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators import elementwise as ew
from sonnx.operators.shape.layout import unsqueeze
from sonnx.tensor import Tensor

_OPSET1_CLASSES: dict[str, type[Operator]] = {
    cls.op_type: cls
    for cls in (
        ew.Abs, ew.Neg, ew.Exp, ew.Log, ew.Sqrt, ew.Reciprocal, ew.Ceil, ew.Floor,
        ew.Max, ew.Min, ew.Mean, ew.Sum,
    )
}  # fmt: skip

_LEGACY_BROADCAST_CLASSES: dict[str, type[Operator]] = {
    cls.op_type: cls
    for cls in (
        ew.Add, ew.Sub, ew.Mul, ew.Div, ew.Pow, ew.And, ew.Or, ew.Xor,
        ew.Equal, ew.Less, ew.Greater,
    )
}  # fmt: skip


def _run(cls: type[Operator], node: NodeInfo, inputs: list[Tensor | None]) -> Any:
    op = cls()
    op.name = node.name
    return op(*inputs)


@converter("Abs", 1)
@converter("Neg", 1)
@converter("Exp", 1)
@converter("Log", 1)
@converter("Sqrt", 1)
@converter("Reciprocal", 1)
@converter("Ceil", 1)
@converter("Floor", 1)
@converter("Max", 1)
@converter("Min", 1)
@converter("Mean", 1)
@converter("Sum", 1)
def without_consumed_inputs(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Tensor:
    """Opset 1's ``consumed_inputs`` only allowed in-place updates; it changes no value."""
    return _run(_OPSET1_CLASSES[node.op_type], node, inputs)


def _legacy_b(node: NodeInfo, a: Tensor, b: Tensor, attrs: dict[str, Any]) -> Tensor:
    """B reshaped so that NumPy broadcasting places it where ``broadcast=1, axis`` said."""
    if not attrs.get("broadcast") or attrs.get("axis") is None:
        # Without an axis B matches A's trailing dims, which is exactly NumPy broadcasting.
        return b
    axis = attrs["axis"] + a.ndim() if attrs["axis"] < 0 else attrs["axis"]
    trailing = a.ndim() - axis - b.ndim()
    if axis < 0 or trailing < 0:
        raise BadModelError(
            f"{node.op_type} node {node.name!r}: broadcast axis {attrs['axis']} does not fit B of "
            f"shape {b.shape} into A of shape {a.shape}"
        )
    if trailing == 0:
        return b
    return unsqueeze(b, list(range(b.ndim(), b.ndim() + trailing)))


@converter("Add", 1, 6)
@converter("Sub", 1, 6)
@converter("Mul", 1, 6)
@converter("Div", 1, 6)
@converter("Pow", 1)
@converter("And", 1)
@converter("Or", 1)
@converter("Xor", 1)
@converter("Equal", 1)
@converter("Less", 1)
@converter("Greater", 1)
def with_legacy_broadcast(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Tensor:
    """Before opset 7, ``broadcast=1`` let B broadcast onto A, aligned at ``axis``."""
    a, b = inputs[0], inputs[1]
    if a is None or b is None:
        raise BadModelError(f"{node.op_type} node {node.name!r} needs inputs A and B")
    return _run(_LEGACY_BROADCAST_CLASSES[node.op_type], node, [a, _legacy_b(node, a, b, attrs)])


@converter("Clip", 1, 6)
def clip_with_attributes(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Tensor:
    """Clip-1/6 held min and max as float attributes; they become scalar constants."""
    x = inputs[0]
    if x is None:
        raise BadModelError(f"Clip node {node.name!r} needs its input")
    bounds = [
        None
        if attrs.get(name) is None
        else Tensor(
            data=torch.tensor(attrs[name], dtype=x.dtype), device=x.device, requires_grad=False
        )
        for name in ("min", "max")
    ]
    return _run(ew.Clip, node, [x, *bounds])

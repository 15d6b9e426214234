"""Importer registrations for shape manipulation (operators in :mod:`sonnx.operators.shape`).

Older versions that held shapes, axes, pads or split sizes as attributes (Reshape-1, Split-1..11,
Slice-1, Squeeze/Unsqueeze-1..11, Pad-1..2, Tile-1) are converted here into the modern operator
with constant int64 inputs, so the recorded graph is always in the modern form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from sonnx.errors import BadModelError
from sonnx.onnx.registry import NodeInfo, bind_node, converter
from sonnx.operators.shape import (
    Identity,
    Pad,
    Reshape,
    Slice,
    Split,
    Squeeze,
    Tile,
    Unsqueeze,
)
from sonnx.tensor import Tensor


def _ints(values: Sequence[int], like: Tensor) -> Tensor:
    """A constant int64 input built from an old attribute."""
    data = torch.tensor([int(v) for v in values], dtype=torch.int64, device=like.data.device)
    return Tensor(data=data, device=like.device, requires_grad=False)


def _required(node: NodeInfo, attrs: dict[str, Any], name: str) -> Any:
    value = attrs.get(name)
    if value is None:
        raise BadModelError(
            f"node {node.name!r} ({node.op_type}-{node.since_version}) lacks required attribute "
            f"{name!r}"
        )
    return value


@converter("Reshape", 1)
def reshape_v1(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    x = inputs[0]
    return bind_node(Reshape(), node)(x, _ints(_required(node, attrs, "shape"), x))


@converter("Split", 1, 2, 11)
def split_v1(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> tuple[Tensor, ...]:
    """Split-1 took sizes as an optional second input or an attribute; 2 and 11 the attribute."""
    x = inputs[0]
    sizes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    if sizes is None and attrs.get("split"):
        sizes = _ints(attrs["split"], x)
    axis = attrs.get("axis")
    return bind_node(Split(axis=0 if axis is None else axis), node)(x, sizes)


@converter("Slice", 1)
def slice_v1(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    x = inputs[0]
    starts = _ints(_required(node, attrs, "starts"), x)
    ends = _ints(_required(node, attrs, "ends"), x)
    axes = None if attrs.get("axes") is None else _ints(attrs["axes"], x)
    return bind_node(Slice(), node)(x, starts, ends, axes)


@converter("Squeeze", 1, 11)
def squeeze_v1(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    x = inputs[0]
    axes = None if attrs.get("axes") is None else _ints(attrs["axes"], x)
    return bind_node(Squeeze(), node)(x, axes)


@converter("Unsqueeze", 1, 11)
def unsqueeze_v1(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    x = inputs[0]
    return bind_node(Unsqueeze(), node)(x, _ints(_required(node, attrs, "axes"), x))


@converter("Pad", 1, 2)
def pad_v2(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    """Pad-1 named its pads ``paddings``; both held pads and the fill ``value`` as attributes."""
    x = inputs[0]
    pads = _required(node, attrs, "pads" if node.since_version >= 2 else "paddings")
    mode = attrs.get("mode") or "constant"
    value = None
    if mode == "constant":
        fill = torch.tensor(attrs.get("value") or 0.0, device=x.data.device).to(x.dtype)
        value = Tensor(data=fill, device=x.device, requires_grad=False)
    return bind_node(Pad(version=11, mode=mode), node)(x, _ints(pads, x), value)


@converter("Tile", 1)
def tile_v1(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    """Tile-1 repeated along one axis: inputs (input, tiles, axis) as scalars."""
    x, tiles, axis = inputs[0], inputs[1], inputs[2]
    repeats = [1] * x.ndim()
    repeats[int(axis.data.reshape(-1)[0])] = int(tiles.data.reshape(-1)[0])
    return bind_node(Tile(), node)(x, _ints(repeats, x))


@converter("Identity", 1, 13, 14, 16, 19, 21, 23, 24, 25, operator=Identity)
def convert_identity(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> Any:
    """Identity of a tensor is recorded; of a sequence or an optional (14+, 16+) passes it on."""
    value = inputs[0]
    if isinstance(value, Tensor):
        return bind_node(Identity(version=node.since_version), node)(value)
    return value

"""Importer registrations for resize: see sonnx.operators.image.resize.

Resize-10 and every Upsample are adapted to the modern Resize (asymmetric coordinates, floor
rounding for nearest), so the recorded graph is always Resize-19 semantics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sonnx.errors import BadModelError
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators.image.resize import Resize
from sonnx.tensor import Tensor


def _legacy_resize(x: Tensor, scales: Tensor, mode: str, node: NodeInfo) -> Tensor:
    """Resize-10 / Upsample: ``scales`` per axis; nearest floors, linear is asymmetric."""
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    if mode not in ("nearest", "linear"):
        raise BadModelError(
            f"{node.op_type} node {node.name!r}: mode must be nearest or linear, received {mode!r}"
        )
    op = Resize(mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return op(x, None, scales)


def _scales_constant(x: Tensor, values: list[float]) -> Tensor:
    return Tensor(data=np.asarray(values, np.float32), device=x.device, requires_grad=False)


@converter("Resize", 10)
def resize_10(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    x, scales = inputs
    return _legacy_resize(x, scales, attrs["mode"], node)


@converter("Upsample", 9, operator=Resize)
def upsample_9(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    x, scales = inputs
    return _legacy_resize(x, scales, attrs["mode"], node)


@converter("Upsample", 7, operator=Resize)
def upsample_7(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    (x,) = inputs
    if attrs.get("scales") is None:
        raise BadModelError(f"Upsample node {node.name!r}: attribute scales is required")
    return _legacy_resize(x, _scales_constant(x, list(attrs["scales"])), attrs["mode"], node)


@converter("Upsample", 1, operator=Resize)
def upsample_1(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    """Upsample-1 scales the last two axes of a 4-D input by height_scale and width_scale."""
    (x,) = inputs
    if attrs.get("height_scale") is None or attrs.get("width_scale") is None or x.ndim() != 4:
        raise BadModelError(
            f"Upsample node {node.name!r}: Upsample-1 needs a 4-D input and the attributes "
            f"height_scale and width_scale, received shape {x.shape} and {attrs}"
        )
    scales = [1.0, 1.0, float(attrs["height_scale"]), float(attrs["width_scale"])]
    return _legacy_resize(x, _scales_constant(x, scales), attrs["mode"], node)

"""Importer registrations for cast: see sonnx.operators.elementwise.cast."""

from __future__ import annotations

from typing import Any

from onnx import TensorProto

from sonnx.errors import BadModelError
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators.elementwise.cast import Cast
from sonnx.tensor import Tensor


@converter("Cast", 1)
def cast_with_type_name(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Tensor:
    """Cast-1 named the target type with a string (``"FLOAT"``); later versions use the code."""
    name = attrs.get("to")
    if not isinstance(name, str) or name.upper() not in set(TensorProto.DataType.keys()):
        raise BadModelError(
            f"Cast node {node.name!r}: attribute to must name an ONNX type such as 'FLOAT', "
            f"received {name!r}"
        )
    op = Cast(to=TensorProto.DataType.Value(name.upper()))
    op.name = node.name
    return op(*inputs)

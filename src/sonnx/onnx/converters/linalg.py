"""Importer registrations for linalg: see sonnx.operators.linalg.products."""

from __future__ import annotations

from typing import Any

from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators.linalg.products import (
    Gemm,
)
from sonnx.tensor import Tensor


@converter("Gemm", 1, 6)
def gemm_with_broadcast_attr(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Tensor:
    """Gemm-1/6 asked for C's broadcasting with ``broadcast=1``; since opset 7 it is implied.

    A C that needs no broadcasting computes the same either way, so the modern op serves both.
    """
    op = Gemm(**{k: v for k, v in attrs.items() if k != "broadcast"})
    op.name = node.name
    return op(*inputs)

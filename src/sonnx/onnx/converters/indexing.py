"""Importer registrations for indexing: see sonnx.operators.indexing.gather_scatter, .masks
and .select.

Scatter (deprecated in opset 11) and TopK-1 (``k`` as an attribute) are converted to their
modern forms, ScatterElements and TopK with a constant ``K`` input.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators.indexing.gather_scatter import (
    ScatterElements,
    TopK,
)
from sonnx.tensor import Tensor


@converter("Scatter", 9, 11, operator=ScatterElements)
def convert_scatter(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    """Scatter is ScatterElements without a reduction."""
    op = ScatterElements(version=11, axis=attrs["axis"])
    op.name = node.name
    return op(*inputs)


@converter("TopK", 1)
def convert_topk_1(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> tuple[Tensor, Tensor]:
    """TopK-1 takes ``k`` as an attribute; TopK-10 as the input K."""
    x = inputs[0]
    k = Tensor(
        data=torch.tensor([attrs["k"]], dtype=torch.int64), device=x.device, requires_grad=False
    )
    op = TopK(version=10, axis=attrs["axis"])
    op.name = node.name
    return op(x, k)

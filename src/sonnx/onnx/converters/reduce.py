"""Importer registrations for reduce: see sonnx.operators.reduce.reductions.

Before ReduceSum-13 and the other reductions' version 18, ``axes`` was an attribute; those
versions are converted to the modern form with ``axes`` as a constant int64 input.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators.reduce.reductions import (
    ReduceL1,
    ReduceL2,
    ReduceLogSum,
    ReduceLogSumExp,
    ReduceMax,
    ReduceMean,
    ReduceMin,
    ReduceProd,
    ReduceSum,
    ReduceSumSquare,
    Reduction,
)
from sonnx.tensor import Tensor


def _register_attribute_axes(cls: type[Reduction], *versions: int) -> None:
    """Register the versions whose ``axes`` is an attribute, converting to the input form."""

    def convert(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
        x = inputs[0]
        op = cls(version=cls.input_axes_since, keepdims=attrs["keepdims"])
        op.name = node.name
        axes = attrs.get("axes")
        if axes is None:
            return op(x)
        t = torch.tensor(list(axes), dtype=torch.int64, device=x.data.device)
        return op(x, Tensor(data=t, device=x.device, requires_grad=False))

    convert.__name__ = f"convert_{cls.op_type}_axes_attribute"
    converter(cls.op_type, *versions)(convert)


_register_attribute_axes(ReduceSum, 1, 11)
for _cls in (ReduceMean, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum,
             ReduceLogSumExp):  # fmt: skip
    _register_attribute_axes(_cls, 1, 11, 13)
for _cls in (ReduceMax, ReduceMin):
    _register_attribute_axes(_cls, 1, 11, 12, 13)

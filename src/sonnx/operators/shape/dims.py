"""``ShapeFromDims``: a shape list built from tensors' dims, as an operator of its own.

``x.reshape(x.shape[0], -1)`` hands Reshape a list holding a :class:`~sonnx.dims.Dim`. Such a
list becomes this operator's output instead of a constant: it runs as the numbers (computed
from its source tensors' actual shapes) and exports as ``Shape -> Gather -> arithmetic ->
Concat``, so the exported model follows those dims at any size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx.dims import ARITHMETIC, Dim
from sonnx.engine.operator import Operator
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

# ONNX's integer Div truncates toward zero, which equals Python's // for the non-negative
# sizes shape arithmetic deals in.
_ONNX_ARITHMETIC = {"add": "Add", "sub": "Sub", "mul": "Mul", "floordiv": "Div"}


class ShapeFromDims(Operator):
    """A 1-D int64 shape from ints and dims of its input tensors (``values`` are resolved to
    ``int``, ``("dim", input position, axis)`` or ``(op, left, right)``)."""

    op_type = "ShapeFromDims"

    def __init__(self, values: list[Any]) -> None:
        super().__init__()
        self.values = values

    def forward(self, *sources: torch.Tensor) -> torch.Tensor:
        shapes = [tuple(s.shape) for s in sources]
        values = [_evaluate(v, shapes) for v in self.values]
        return torch.tensor(values, dtype=torch.int64)  # host: shape values live on the host

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        shapes: dict[int, str] = {}
        parts: list[str] = []
        run: list[int] = []  # consecutive plain ints, written as one constant
        for value in self.values:
            if isinstance(value, int):
                run.append(value)
                continue
            if run:
                parts.append(g.constant(run, "dims", np.int64))
                run = []
            parts.append(_emit(g, value, inputs, shapes))
        if run:
            parts.append(g.constant(run, "dims", np.int64))
        g.add_node("Concat", parts, outputs, axis=0)


def _evaluate(value: Any, shapes: list[tuple[int, ...]]) -> int:
    if isinstance(value, int):
        return value
    if value[0] == "dim":
        return int(shapes[value[1]][value[2]])
    return ARITHMETIC[value[0]](_evaluate(value[1], shapes), _evaluate(value[2], shapes))


def _emit(g: GraphBuilder, value: Any, inputs: list[str], shapes: dict[int, str]) -> str:
    """The name of a 1-element int64 tensor holding ``value`` at run time."""
    if isinstance(value, int):
        return g.constant([value], "dim", np.int64)
    if value[0] == "dim":
        position, axis = value[1], value[2]
        if position not in shapes:
            shapes[position] = g.fresh_name("shape")
            g.add_node("Shape", [inputs[position]], [shapes[position]])
        out = g.fresh_name("dim")
        g.add_node("Gather", [shapes[position], g.constant([axis], "axis", np.int64)], [out])
        return out
    out = g.fresh_name(value[0])
    left, right = (_emit(g, v, inputs, shapes) for v in value[1:])
    g.add_node(_ONNX_ARITHMETIC[value[0]], [left, right], [out])
    return out


def shape_from_dims(values: Sequence[int]) -> Tensor:
    """The recorded shape tensor of a list holding live :class:`Dim` values (see
    :func:`sonnx.dims.has_dims`)."""
    sources: list[Tensor] = []
    positions: dict[int, int] = {}

    def resolve(value: Any) -> Any:
        if not isinstance(value, Dim):
            return int(value)
        if value.expr[0] == "dim":
            tensor = value.expr[1]()
            if id(tensor) not in positions:
                positions[id(tensor)] = len(sources)
                sources.append(tensor)
            return ("dim", positions[id(tensor)], value.expr[2])
        return (value.expr[0], resolve(value.expr[1]), resolve(value.expr[2]))

    resolved = [resolve(v) for v in values]
    return ShapeFromDims(resolved)(*sources)

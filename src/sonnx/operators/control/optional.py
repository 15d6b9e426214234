"""The optional operators: ONNX ``optional(...)`` values made, tested and opened."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sonnx.engine.values import OptionalValue
from sonnx.errors import BadInputError
from sonnx.operators.control.common import GraphValueOperator, host_scalar_device
from sonnx.tensor import Tensor

__all__ = ["Optional", "OptionalGetElement", "OptionalHasElement"]


class Optional(GraphValueOperator):
    """An optional holding the input (a tensor or sequence), or nothing without one."""

    op_type = "Optional"
    since_versions: ClassVar[tuple[int, ...]] = (15, 28)

    def run(self, inputs: list[Any]) -> OptionalValue:
        """:param inputs: ``[input?]``.
        :returns: the optional."""
        return OptionalValue(inputs[0] if inputs else None)


class OptionalHasElement(GraphValueOperator):
    """Whether an optional holds a value (from opset 18 also: whether the input is given)."""

    op_type = "OptionalHasElement"
    since_versions: ClassVar[tuple[int, ...]] = (15, 18, 28)

    def run(self, inputs: list[Any]) -> Tensor:
        """:param inputs: ``[input?]``.
        :returns: a 0-d boolean tensor."""
        value = inputs[0] if inputs else None
        present = value.has_element if isinstance(value, OptionalValue) else value is not None
        return Tensor(
            data=torch.tensor(present, device=host_scalar_device(value)), requires_grad=False
        )


class OptionalGetElement(GraphValueOperator):
    """The value an optional holds (from opset 18 a plain tensor or sequence passes through)."""

    op_type = "OptionalGetElement"
    since_versions: ClassVar[tuple[int, ...]] = (15, 18, 28)

    def run(self, inputs: list[Any]) -> Any:
        """:param inputs: ``[input]``.
        :returns: the value held."""
        value = inputs[0]
        if not isinstance(value, OptionalValue):
            return value
        if value.value is None:
            raise BadInputError(f"{self.where()}: the optional is empty")
        return value.value

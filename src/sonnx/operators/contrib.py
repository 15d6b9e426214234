"""The base of onnxruntime's ``com.microsoft`` operators (and of the few it registers in the
default domain without an ONNX schema, such as SimplifiedLayerNormalization).

onnx.defs has no schema for them, so nothing fills their absent attributes or checks their
inputs before they run: each class declares the defaults onnxruntime documents
(``docs/ContribOperators.md``; its CPU kernels where the text is silent) and the attributes it
cannot run without, and :meth:`ContribOperator.require` names absent required inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sonnx.engine.operator import Operator, TorchOutputs
from sonnx.errors import BadInputError, BadModelError

__all__ = ["MICROSOFT_DOMAIN", "ContribOperator"]

MICROSOFT_DOMAIN = "com.microsoft"


class ContribOperator(Operator):
    """A schema-less operator: absent attributes take the declared ``defaults``."""

    domain = MICROSOFT_DOMAIN
    #: Attribute name -> the value onnxruntime uses when the node omits it.
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: Attributes the node must set (onnxruntime refuses the node without them).
    required_attributes: ClassVar[frozenset[str]] = frozenset()

    def attr(self, name: str) -> Any:
        """Attribute ``name``: its set value, else the declared default, else None."""
        if name in self.attrs:
            return self.attrs[name]
        if name in self.required_attributes:
            raise BadModelError(
                f"{self.op_type}: required attribute {name!r} is missing, received attributes "
                f"{sorted(self.attrs)}"
            )
        return self.defaults.get(name)

    def label(self) -> str:
        """How errors name the node: ``GroupQueryAttention 'gqa0'``."""
        return f"{self.op_type} {self.name!r}" if self.name else self.op_type

    def require(self, given: dict[str, torch.Tensor | None]) -> None:
        """Raise :class:`BadInputError` naming the required inputs that are absent."""
        missing = [name for name, x in given.items() if x is None]
        if missing:
            raise BadInputError(f"{self.label()}: required input(s) {missing} absent")

    def requested(self, *outputs: torch.Tensor) -> TorchOutputs:
        """The first of ``outputs`` alone, or as many as the node names."""
        n = self.requested_outputs or 1
        return outputs[0] if n == 1 else outputs[:n]

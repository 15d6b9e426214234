"""The base of onnxruntime's ``com.microsoft`` operators, which have no ``onnx.defs`` schema.

Their attribute defaults come from onnxruntime's ``docs/ContribOperators.md`` (its op schemas);
each class declares them in ``defaults``, and :meth:`ContribOperator.attr` reads them there
instead of from ``onnx.defs``. Export writes the node back as it came: only the attributes the
node set, domain ``com.microsoft``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sonnx.autograd.normalization_common import check_float
from sonnx.autograd.operator import Operator, OutputShape, TorchOutputs
from sonnx.errors import BadInputError, BadModelError

__all__: list[str] = []

MICROSOFT_DOMAIN = "com.microsoft"


class ContribOperator(Operator):
    """A schema-less operator whose absent attributes take the documented ``defaults``."""

    domain = MICROSOFT_DOMAIN
    output_shape = OutputShape.FROM_SHAPES
    #: Attribute name -> the value onnxruntime uses when the node omits it.
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: Attributes the node must set (onnxruntime refuses the node without them).
    required: ClassVar[frozenset[str]] = frozenset()

    def attr(self, name: str) -> Any:
        """Attribute ``name``: its set value, else the declared default, else None."""
        if name in self.attrs:
            return self.attrs[name]
        if name in self.required:
            raise BadModelError(
                f"{self.op_type}: required attribute {name!r} is missing, received attributes "
                f"{sorted(self.attrs)}"
            )
        return self.defaults.get(name)

    def requested(self, *outputs: torch.Tensor) -> TorchOutputs:
        """The first of ``outputs`` alone, or as many as the node names."""
        n = self.requested_outputs or 1
        return outputs[0] if n == 1 else outputs[:n]


def check_vector(op: str, name: str, t: torch.Tensor, size: int) -> None:
    """Raise unless ``t`` is a floating 1-D tensor of ``size`` elements (a gamma, a bias)."""
    check_float(op, name, t)
    if tuple(t.shape) != (size,):
        raise BadInputError(
            f"{op}: input {name} must have shape ({size},), received shape {tuple(t.shape)}"
        )


def check_broadcasts_to(op: str, name: str, t: torch.Tensor, target: torch.Size) -> None:
    """Raise unless ``t`` broadcasts to ``target`` without growing it."""
    ok = t.dim() <= len(target) and all(
        d in (1, e) for d, e in zip(reversed(t.shape), reversed(target), strict=False)
    )
    if not ok:
        raise BadInputError(
            f"{op}: input {name} must have shape {tuple(target)} or one that broadcasts to it, "
            f"received shape {tuple(t.shape)}"
        )

"""What every activation shares: the single-node export checked against the target opset's
schema (:class:`StrictExport`, also the base of the linear-algebra and quantization operators),
0-d constants for decompositions, and ``_Activation``, the base
of the element-wise activations in :mod:`sonnx.operators.activation.functions` and
:mod:`sonnx.operators.activation.gated`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx.defs
import torch

from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import ExportError, OpsetTooOldError
from sonnx.operators.elementwise.base import require_float
from sonnx.proto.attributes import schema_defaults
from sonnx.proto.graph_builder import first_opset

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder
    from sonnx.tensor import Tensor

# Attributes that older schemas had and that carry no meaning for the computation.
_LEGACY_ATTRS = frozenset({"consumed_inputs"})


def attrs_for_opset(op: Operator, opset: int) -> dict[str, Any]:
    """``op``'s attributes as the schema in force at ``opset`` spells them.

    Attributes that schema lacks are dropped when they hold their default (or are legacy
    bookkeeping such as ``consumed_inputs``); otherwise the op cannot be written at that opset.
    """
    try:
        schema = onnx.defs.get_schema(op.op_type, opset, op.domain)
    except onnx.defs.SchemaError:
        raise OpsetTooOldError(
            f"{op.op_type}: no such ONNX operator at opset {opset}",
            first_opset(op.op_type, op.domain),
        ) from None
    own_defaults = schema_defaults(op.op_type, op.version, op.domain)
    out: dict[str, Any] = {}
    for name, value in op.attrs.items():
        if value is None:
            continue
        if name in schema.attributes:
            out[name] = value
        elif name not in _LEGACY_ATTRS and value != own_defaults.get(name):
            raise ExportError(
                f"{op.op_type}: attribute {name}={value!r} has no equivalent at opset {opset}"
            )
    return out


def scalar_constant(g: GraphBuilder, value: float, like: Tensor, hint: str = "c") -> str:
    """A 0-d initializer holding ``value`` in ``like``'s element type (bfloat16 included)."""
    value_t = torch.tensor(value, dtype=like.dtype)  # host: an initializer is serialised
    return g.add_initializer(value_t, g.fresh_name(hint))


_UNSIGNED = frozenset({torch.uint8, torch.uint16, torch.uint32, torch.uint64})


class StrictExport(Operator):
    """An operator exported as one node, checked against the target opset's schema."""

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        g.add_node(self.op_type, inputs, outputs, **attrs_for_opset(self, g.opset))


class _Activation(StrictExport):
    """An element-wise activation of one floating-point input.

    ``since`` is the opset that introduced the operator; below it :meth:`decompose` writes an
    equivalent graph of older operators (or the export fails with a clear message).
    """

    output_shape = OutputShape.FROM_SHAPES

    since = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_float(self.op_type, "X", x)
        return self.compute(x)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= self.since:
            super().export(g, inputs, outputs)
        else:
            self.decompose(g, inputs, outputs)

    def decompose(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        raise OpsetTooOldError(
            f"{self.op_type}: needs opset >= {self.since}, cannot be written at opset {g.opset}",
            self.since,
        )

"""com.microsoft 8-bit integer products with float results: MatMulIntegerToFloat and
DynamicQuantizeMatMul (what ``quantize_dynamic`` writes for a MatMul).

The int32 accumulation ``(A - a_zero_point) @ (B - b_zero_point)`` is computed in float64,
which holds every such sum exactly, then converted to float32 and multiplied by the float32
product ``a_scale * b_scale`` before the bias is added: onnxruntime's order, so results agree
to the last bit but for the summation order of the bias-free product (none: it is exact).
Integer inputs carry no gradient. A's dynamic quantization is a step function: its gradient
passes straight through it (:func:`straight_through`), so float layers before a dynamically
quantized product train; the int8 weight is a constant.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sonnx.dtypes import dtype_name
from sonnx.errors import BadInputError
from sonnx.operators.contrib import ContribOperator
from sonnx.operators.quantize.contrib_nbits import ContribQuantOperator
from sonnx.operators.quantize.linear import DynamicQuantizeLinear
from sonnx.operators.quantize.ort_qlinear import QLinearKernel
from sonnx.operators.quantize.straight_through import straight_through

__all__ = ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"]

_BYTES = (torch.int8, torch.uint8)


def _per_column(op: ContribOperator, name: str, p: torch.Tensor | None, n: int) -> torch.Tensor:
    """A scalar, or one value per column of B ([N])."""
    if p is None:
        # host: a 0-d zero, which torch combines with tensors on any device
        return torch.zeros(())
    if p.numel() == 1:
        return p.reshape(())
    if p.shape != (n,):
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: input {name} must be a scalar or have shape ({n},) "
            f"(one per column of B), received {tuple(p.shape)}"
        )
    return p


def integer_product_to_float(
    op: ContribOperator,
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    a_zero_point: torch.Tensor | None,
    b_zero_point: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """``float32((A - a_zp) @ (B - b_zp)) * (a_scale * b_scale) + bias`` in a_scale's type."""
    for name, t in (("A", a), ("B", b)):
        if t.dtype not in _BYTES:
            raise BadInputError(
                f"{op.op_type} node {op.name!r}: input {name} must be int8 or uint8, received "
                f"{dtype_name(t.dtype)}"
            )
    if b.dim() != 2 or a.shape[-1:] != b.shape[:1]:
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: B must be 2-D [K, N] with K A's last dimension, "
            f"received A {tuple(a.shape)} and B {tuple(b.shape)}"
        )
    n = b.shape[1]
    if a_scale.numel() != 1:
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: input a_scale must be a scalar, received shape "
            f"{tuple(a_scale.shape)}"
        )
    a_zp = _per_column(op, "a_zero_point", a_zero_point, 1).to(torch.float64)
    b_zp = _per_column(op, "b_zero_point", b_zero_point, n).to(torch.float64)
    acc = torch.matmul(a.to(torch.float64) - a_zp, b.to(torch.float64) - b_zp)
    scale = a_scale.reshape(()).float() * _per_column(op, "b_scale", b_scale, n).float()
    y = acc.float() * scale
    return (y if bias is None else y + bias.float()).to(a_scale.dtype)


def dynamic_quantized_product(
    op: ContribOperator,
    a: torch.Tensor,
    b: torch.Tensor,
    b_scale: torch.Tensor,
    b_zero_point: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """Float A quantized to uint8 from its own range (DynamicQuantizeLinear), times the
    quantized B as :func:`integer_product_to_float` computes it, differentiable in A through
    :func:`straight_through`.

    :param op: the node, named by errors.
    :param a: the float input ``[..., K]``.
    :param b: the int8 or uint8 weight ``[K, N]``.
    :param b_scale: B's scale, a scalar or one per column.
    :param b_zero_point: B's zero point, likewise (None: 0).
    :param bias: a float ``[N]`` added last (None: none).
    :returns: the float product ``[..., N]``.
    """
    qa, a_scale, a_zero_point = DynamicQuantizeLinear().forward(a)
    y = integer_product_to_float(op, qa, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)
    return straight_through(a, y, b, b_scale, b_zero_point)


class _Bridged(QLinearKernel, ContribQuantOperator):
    """A product onnxruntime's kernel may compute (:mod:`~sonnx.operators.quantize.ort_qlinear`)."""

    def bridged(self, inputs: tuple[torch.Tensor | None, ...]) -> torch.Tensor | None:
        """onnxruntime's product, or None (the torch path runs).

        :param inputs: the node's inputs.
        :returns: the product, or None.
        """
        a, b = inputs[0], inputs[1]
        # A B that is not [K, N] goes to the torch path, which reports it.
        return self.onnxruntime_node(inputs, fits=b.dim() == 2 and a.shape[-1:] == b.shape[:1])


class MatMulIntegerToFloat(_Bridged):
    """MatMulInteger whose int32 result is scaled to float: inputs A, B, a_scale, b_scale,
    optional a_zero_point, b_zero_point (scalar or per column of B) and bias."""

    op_type = "MatMulIntegerToFloat"
    since_versions = (1,)
    parameterising_inputs = frozenset({2, 3, 4, 5})
    defaults: ClassVar[dict[str, Any]] = {}

    def forward(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        a_scale: torch.Tensor,
        b_scale: torch.Tensor,
        a_zero_point: torch.Tensor | None = None,
        b_zero_point: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        inputs = (a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)
        y = self.bridged(inputs)
        if y is not None:
            return y
        return integer_product_to_float(self, *inputs)


class DynamicQuantizeMatMul(_Bridged):
    """Float A quantized to uint8 from its own range (DynamicQuantizeLinear), then
    MatMulIntegerToFloat with the quantized weight B: inputs A, B, b_scale, optional
    b_zero_point and bias. A's gradient passes straight through its quantization."""

    op_type = "DynamicQuantizeMatMul"
    since_versions = (1,)
    parameterising_inputs = frozenset({2, 3})
    defaults: ClassVar[dict[str, Any]] = {}

    def forward(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        b_scale: torch.Tensor,
        b_zero_point: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        y = self.bridged((a, b, b_scale, b_zero_point, bias))
        if y is not None:
            return y
        return dynamic_quantized_product(self, a, b, b_scale, b_zero_point, bias)

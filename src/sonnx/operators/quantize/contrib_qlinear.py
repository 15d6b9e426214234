"""com.microsoft QOperator-form operators (what ``quantize_static(quant_format=QOperator)``
writes): QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
QLinearAveragePool, QLinearGlobalAveragePool, QLinearWhere, QLinearSoftmax and QGemm, with the
com.microsoft spellings of QuantizeLinear and DequantizeLinear.

Each takes uint8 or int8 tensors with per-tensor scales and zero points, computes in float32
from the dequantized values ``(q - zero_point) * scale`` (or, for the products, the exact
integer accumulation scaled by the float32 ratio of the scales), and requantizes with
``round_half_even(y / y_scale) + y_zero_point``, saturated. Where onnxruntime's x86 kernels
order the float32 operations otherwise (QLinearAdd, QLinearMul, QLinearAveragePool), the same
order is followed, so that ties round the same way: the results are equal element for element.
Integer in, integer out: no gradient.

On the CPU, QGemm (where B, C and Y's quantization are the model's constants) and the
elementwise operators onnxruntime runs clearly faster (QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearSoftmax, QLinearConcat) call onnxruntime's
own kernel for their node (:mod:`sonnx.operators.quantize.ort_qlinear`, measured by
``bench/quantized_ops.py``); ``prepare(..., kernels="torch")`` keeps them on the torch path
below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError
from sonnx.operators.contrib import ContribOperator
from sonnx.operators.linalg.integer_products import saturate
from sonnx.operators.pooling.windowed import AveragePool
from sonnx.operators.quantize.contrib_nbits import ContribQuantOperator
from sonnx.operators.quantize.linear import DequantizeLinear as OnnxDequantizeLinear
from sonnx.operators.quantize.linear import QuantizeLinear as OnnxQuantizeLinear
from sonnx.operators.quantize.ort_qlinear import QLinearKernel
from sonnx.operators.quantize.qlinear_softmax import table_softmax

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "DequantizeLinear",
    "QGemm",
    "QLinearAdd",
    "QLinearAveragePool",
    "QLinearConcat",
    "QLinearGlobalAveragePool",
    "QLinearLeakyRelu",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearSoftmax",
    "QLinearWhere",
    "QuantizeLinear",
]

_BYTES = (torch.int8, torch.uint8)


def _scalar(op: ContribOperator, name: str, t: torch.Tensor) -> torch.Tensor:
    if t.numel() != 1:
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: input {name} must be a scalar (per-tensor "
            f"quantization), received shape {tuple(t.shape)}"
        )
    return t.reshape(())


def _quantized(op: ContribOperator, name: str, t: torch.Tensor) -> torch.Tensor:
    if t.dtype not in _BYTES:
        raise BadInputError(
            f"{op.op_type} node {op.name!r}: input {name} must be uint8 or int8, received "
            f"{dtype_name(t.dtype)}"
        )
    return t


def dequantize(
    op: ContribOperator, name: str, q: torch.Tensor, scale: torch.Tensor, zp: torch.Tensor | None
) -> torch.Tensor:
    """``(q - zero_point) * scale`` in float32 (a missing zero point is 0)."""
    _quantized(op, name, q)
    shifted = q.to(torch.int32)
    if zp is not None:
        shifted = shifted - _scalar(op, f"{name}'s zero point", zp).to(torch.int32)
    return shifted.float() * _scalar(op, f"{name}'s scale", scale).float()


def quantize(
    op: ContribOperator, y: torch.Tensor, scale: torch.Tensor, zp: torch.Tensor | None
) -> torch.Tensor:
    """``saturate(round_half_even(y / scale) + zero_point)`` in the zero point's type (uint8
    without one)."""
    dtype = torch.uint8 if zp is None else _quantized(op, "the output zero point", zp).dtype
    q = torch.round(y / _scalar(op, "the output scale", scale).float())
    if zp is not None:
        q = q + zp.reshape(()).float()
    return saturate(q, dtype)


def _rounded(
    op: ContribOperator, y: torch.Tensor, zp: torch.Tensor | None, *then: torch.Tensor
) -> torch.Tensor:
    """``saturate(round_half_even(((zero_point + y) + then[0]) + ...))`` in float32: the zero
    point added before rounding and the terms in this order, as onnxruntime's QLinearAdd and
    QLinearMul kernels add them."""
    dtype = torch.uint8 if zp is None else _quantized(op, "the output zero point", zp).dtype
    total = y if zp is None else _scalar(op, "the output zero point", zp).float() + y
    for term in then:
        total = total + term
    return saturate(total, dtype)


class _QLinear(ContribQuantOperator):
    """A QOperator-form operator: integer inputs, no gradient."""

    defaults: ClassVar[dict[str, Any]] = {}


def _kernel_fits(
    out_zp: torch.Tensor | None, codes: tuple[torch.Tensor, ...], *params: torch.Tensor | None
) -> bool:
    """Whether onnxruntime's kernel computes what the torch path does: the codes of the
    output's type (uint8 without a zero point), every scale and zero point per tensor."""
    dtype = torch.uint8 if out_zp is None else out_zp.dtype
    return all(x.dtype == dtype for x in codes) and all(
        p is None or p.numel() == 1 for p in (out_zp, *params)
    )


class QLinearAdd(QLinearKernel, _QLinear):
    """``C = quantize(A_scale / C_scale * (A - A_zp) + B_scale / C_scale * (B - B_zp))``,
    broadcasting.

    In onnxruntime's float32 order: the zero points folded into one constant
    ``C_zp - (ratio_A * A_zp + ratio_B * B_zp)``, to which the broadcast operand's term is added
    first (a repeated value is a scalar to its kernel), then the other's, on the raw codes.
    """

    op_type = "QLinearAdd"
    since_versions = (1,)
    parameterising_inputs = frozenset({1, 2, 4, 5, 6, 7})

    def forward(
        self,
        a: torch.Tensor,
        a_scale: torch.Tensor,
        a_zp: torch.Tensor | None,
        b: torch.Tensor,
        b_scale: torch.Tensor,
        b_zp: torch.Tensor | None,
        c_scale: torch.Tensor,
        c_zp: torch.Tensor | None = None,
    ) -> torch.Tensor:
        inputs = (a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp)
        y = self.onnxruntime_node(inputs, _kernel_fits(c_zp, (a, b), *inputs[1:3], *inputs[4:7]))
        if y is not None:
            return y
        c = _scalar(self, "C_scale", c_scale).float()
        terms = []
        folded = torch.zeros((), device=a.device)
        for name, x, scale, zp in (("A", a, a_scale, a_zp), ("B", b, b_scale, b_zp)):
            ratio = _scalar(self, f"{name}_scale", scale).float() / c
            terms.append(_quantized(self, name, x).float() * ratio)
            if zp is not None:
                folded = folded + ratio * _scalar(self, f"{name}_zero_point", zp).float()
        if b.numel() < a.numel():
            terms.reverse()
        return _rounded(self, -folded, c_zp, *terms)


class QLinearMul(QLinearKernel, _QLinear):
    """``C = saturate(round(C_zp + (A - A_zp) * (B - B_zp) * (A_scale * B_scale / C_scale)))``:
    as onnxruntime's kernel, the zero point is added before rounding."""

    op_type = "QLinearMul"
    since_versions = (1,)
    parameterising_inputs = frozenset({1, 2, 4, 5, 6, 7})

    def forward(
        self,
        a: torch.Tensor,
        a_scale: torch.Tensor,
        a_zp: torch.Tensor | None,
        b: torch.Tensor,
        b_scale: torch.Tensor,
        b_zp: torch.Tensor | None,
        c_scale: torch.Tensor,
        c_zp: torch.Tensor | None = None,
    ) -> torch.Tensor:
        inputs = (a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp)
        y = self.onnxruntime_node(inputs, _kernel_fits(c_zp, (a, b), *inputs[1:3], *inputs[4:7]))
        if y is not None:
            return y
        one = torch.ones((), device=a.device)
        product = dequantize(self, "A", a, one, a_zp) * dequantize(self, "B", b, one, b_zp)
        multiplier = (a_scale.float() * b_scale.float() / c_scale.float()).reshape(())
        return _rounded(self, product * multiplier, c_zp)


class _QLinearUnary(_QLinear):
    """``Y = quantize(f(dequantize(X)))``: onnxruntime evaluates f once per code (a table)."""

    parameterising_inputs = frozenset({1, 2, 3, 4})
    #: onnxruntime adds the zero point before rounding (its pooling kernels), not after.
    zero_point_first: ClassVar[bool] = False

    def forward(
        self,
        x: torch.Tensor,
        x_scale: torch.Tensor,
        x_zp: torch.Tensor | None,
        y_scale: torch.Tensor,
        y_zp: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if isinstance(self, QLinearKernel):
            fits = x.dim() >= 3 or self.op_type != "QLinearGlobalAveragePool"
            fits = fits and _kernel_fits(y_zp, (x,), x_scale, x_zp, y_scale)
            y = self.onnxruntime_node((x, x_scale, x_zp, y_scale, y_zp), fits)
            if y is not None:
                return y
        return self.torch_path(x, x_scale, x_zp, y_scale, y_zp)

    def torch_path(
        self,
        x: torch.Tensor,
        x_scale: torch.Tensor,
        x_zp: torch.Tensor | None,
        y_scale: torch.Tensor,
        y_zp: torch.Tensor | None,
    ) -> torch.Tensor:
        """Y without onnxruntime's kernel: :meth:`compute` of the dequantized X, quantized.

        :param x: X's codes.
        :param x_scale: X's scale.
        :param x_zp: X's zero point, or None.
        :param y_scale: Y's scale.
        :param y_zp: Y's zero point, or None.
        :returns: Y's codes.
        """
        y = self.compute(dequantize(self, "X", x, x_scale, x_zp))
        if self.zero_point_first:
            return _rounded(self, y / _scalar(self, "Y_scale", y_scale).float(), y_zp)
        return quantize(self, y, y_scale, y_zp)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class QLinearSigmoid(QLinearKernel, _QLinearUnary):
    op_type = "QLinearSigmoid"
    since_versions = (1,)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


class QLinearLeakyRelu(QLinearKernel, _QLinearUnary):
    op_type = "QLinearLeakyRelu"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {"alpha": 0.01}

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x >= 0, x, x * float(self.attr("alpha")))


class QLinearSoftmax(QLinearKernel, _QLinearUnary):
    """Softmax of X's codes along ``axis`` (opset < 13: of the flattened trailing axes from
    ``axis`` on, as ONNX Softmax-1/11; ``opset`` says which), computed as onnxruntime's kernel
    computes it (:mod:`~sonnx.operators.quantize.qlinear_softmax`)."""

    op_type = "QLinearSoftmax"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {"axis": -1}
    required_attributes = frozenset({"opset"})

    def torch_path(
        self,
        x: torch.Tensor,
        x_scale: torch.Tensor,
        x_zp: torch.Tensor | None,
        y_scale: torch.Tensor,
        y_zp: torch.Tensor | None,
    ) -> torch.Tensor:
        """Y as onnxruntime's kernel computes it, from X's codes (no float softmax).

        :param x: X's codes.
        :param x_scale: X's scale.
        :param x_zp: X's zero point (checked; the kernel does not read it), or None.
        :param y_scale: Y's scale.
        :param y_zp: Y's zero point, or None.
        :returns: Y's codes.
        :raises BadInputError: a scale or zero point of more than one element, or a Y zero
            point of another type than X.
        """
        dequantize(self, "X", x, x_scale, x_zp)  # its checks: codes, one scale, one zero point
        _scalar(self, "Y_scale", y_scale)
        if y_zp is not None and y_zp.dtype != x.dtype:
            raise BadInputError(
                f"QLinearSoftmax node {self.name!r}: Y_zero_point must be {dtype_name(x.dtype)} "
                f"as X, received {dtype_name(y_zp.dtype)}"
            )
        axis = int(self.attr("axis")) % max(x.dim(), 1)
        return table_softmax(x, x_scale, y_scale, y_zp, axis, int(self.attr("opset")))


class QLinearAveragePool(_QLinearUnary):
    """AveragePool of the dequantized X (its ONNX attributes; ``channels_last``: NHWC)."""

    op_type = "QLinearAveragePool"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {"channels_last": 0}
    zero_point_first = True

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        pool = AveragePool(**{k: v for k, v in self.attrs.items() if k != "channels_last"})
        if not self.attr("channels_last"):
            return pool.forward(x)
        to_first = (0, x.dim() - 1, *range(1, x.dim() - 1))
        to_last = (0, *range(2, x.dim()), 1)
        return pool.forward(x.permute(to_first)).permute(to_last)


class QLinearGlobalAveragePool(QLinearKernel, _QLinearUnary):
    """The mean of each channel's dequantized values (``channels_last``: NHWC)."""

    op_type = "QLinearGlobalAveragePool"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {"channels_last": 0}

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        if self.attr("channels_last"):
            return x.mean(dim=tuple(range(1, x.dim() - 1)), keepdim=True)
        return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


class QLinearConcat(QLinearKernel, _QLinear):
    """Concat along ``axis`` of inputs given as (tensor, scale, zero point) triples after Y's
    scale and zero point, each requantized to Y's."""

    op_type = "QLinearConcat"
    since_versions = (1,)
    parameterising_inputs = frozenset({0, 1})
    required_attributes = frozenset({"axis"})

    def forward(self, y_scale: torch.Tensor, y_zp: torch.Tensor, *inputs: torch.Tensor) -> Any:
        if not inputs or len(inputs) % 3:
            raise BadInputError(
                f"QLinearConcat node {self.name!r}: after Y_scale and Y_zero_point, inputs come "
                f"in (tensor, scale, zero point) triples, received {len(inputs)} more inputs"
            )
        fits = _kernel_fits(y_zp, inputs[0::3], y_scale, *inputs[1::3], *inputs[2::3])
        y = self.onnxruntime_node((y_scale, y_zp, *inputs), fits)
        if y is not None:
            return y
        parts = [
            quantize(self, dequantize(self, f"input {i // 3}", *inputs[i : i + 3]), y_scale, y_zp)
            for i in range(0, len(inputs), 3)
        ]
        return torch.cat(parts, int(self.attr("axis")))


class QLinearWhere(_QLinear):
    """``Z = where(condition, requantize(X), requantize(Y))`` into Z's scale and zero point."""

    op_type = "QLinearWhere"
    since_versions = (1,)
    parameterising_inputs = frozenset({2, 3, 5, 6, 7, 8})

    def forward(
        self,
        condition: torch.Tensor,
        x: torch.Tensor,
        x_scale: torch.Tensor,
        x_zp: torch.Tensor,
        y: torch.Tensor,
        y_scale: torch.Tensor,
        y_zp: torch.Tensor,
        z_scale: torch.Tensor,
        z_zp: torch.Tensor,
    ) -> torch.Tensor:
        qx = quantize(self, dequantize(self, "X", x, x_scale, x_zp), z_scale, z_zp)
        qy = quantize(self, dequantize(self, "Y", y, y_scale, y_zp), z_scale, z_zp)
        return torch.where(condition.bool(), qx, qy)


class QGemm(QLinearKernel, _QLinear):
    """Quantized Gemm: ``alpha * (A - a_zp) @ (B - b_zp) + C`` accumulated exactly (C an int32
    bias in scale ``a_scale * b_scale``), then scaled by ``alpha * a_scale * b_scale / y_scale``
    and requantized; without y_scale the scaled float result is returned. B's scale and zero
    point may be per column ([N])."""

    op_type = "QGemm"
    since_versions = (1,)
    parameterising_inputs = frozenset({1, 2, 4, 5, 7, 8})
    defaults: ClassVar[dict[str, Any]] = {"alpha": 1.0, "transA": 0, "transB": 0}

    def forward(
        self,
        a: torch.Tensor,
        a_scale: torch.Tensor,
        a_zp: torch.Tensor,
        b: torch.Tensor,
        b_scale: torch.Tensor,
        b_zp: torch.Tensor,
        c: torch.Tensor | None = None,
        y_scale: torch.Tensor | None = None,
        y_zp: torch.Tensor | None = None,
    ) -> torch.Tensor:
        inputs = (a, a_scale, a_zp, b, b_scale, b_zp, c, y_scale, y_zp)
        y = self.onnxruntime_node(inputs, self._kernel_fits(inputs))
        if y is not None:
            return y
        _quantized(self, "A", a)
        _quantized(self, "B", b)
        a64 = a.to(torch.float64) - _scalar(self, "a_zero_point", a_zp).to(torch.float64)
        a64 = a64.t() if self.attr("transA") else a64
        b64 = b.to(torch.float64)
        b64 = b64.t() if self.attr("transB") else b64
        n = b64.shape[1]
        if b_scale.numel() not in (1, n) or b_zp.numel() not in (1, n):
            raise BadInputError(
                f"QGemm node {self.name!r}: b_scale and b_zero_point must be scalars or have "
                f"{n} values (one per column), received {tuple(b_scale.shape)} and "
                f"{tuple(b_zp.shape)}"
            )
        acc = torch.matmul(a64, b64 - b_zp.reshape(-1).to(torch.float64))
        if c is not None:
            acc = acc + c.to(torch.float64)
        scale = (
            float(self.attr("alpha")) * a_scale.float().reshape(()) * b_scale.float().reshape(-1)
        )
        if y_scale is None:
            return acc.float() * scale
        return quantize(
            self,
            acc.float() * (scale / y_scale.float().reshape(())),
            torch.ones((), device=acc.device),
            y_zp,
        )

    def _kernel_fits(self, inputs: tuple[torch.Tensor | None, ...]) -> bool:
        """2-D 8-bit A and B, a per-tensor A, and Y's zero point with its scale (the torch
        path's uint8 default is not onnxruntime's)."""
        a, a_scale, a_zp, b, *_, y_scale, y_zp = inputs
        return (
            a.dim() == b.dim() == 2
            and a.dtype in _BYTES
            and b.dtype in _BYTES
            and a_scale.numel() == 1
            and (a_zp is None or a_zp.numel() == 1)
            and (y_scale is None or (y_zp is not None and y_zp.dtype == a.dtype))
        )


class QuantizeLinear(OnnxQuantizeLinear):
    """com.microsoft QuantizeLinear: ONNX's, with ``axis`` (default 1) for per-axis scales."""

    domain = "com.microsoft"
    since_versions = (1,)

    def attr(self, name: str) -> Any:
        return self.attrs.get(name, 1 if name == "axis" else None)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        Operator.export(self, g, inputs, outputs)


class DequantizeLinear(OnnxDequantizeLinear):
    """com.microsoft DequantizeLinear: ONNX's, with ``axis`` (default 1) for per-axis scales."""

    domain = "com.microsoft"
    since_versions = (1,)

    def attr(self, name: str) -> Any:
        return self.attrs.get(name, 1 if name == "axis" else None)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        Operator.export(self, g, inputs, outputs)

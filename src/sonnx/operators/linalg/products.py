"""Linear algebra and scans: MatMul, Gemm, Einsum, Det, CumSum, CumProd and the integer/quantized
matrix products.

torch lacks CPU kernels for some unsigned types (uint16/32/64 matmul and cumsum); those are
computed in int64 and cast back, which gives the same wrap-around result modulo 2**bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sonnx import dtypes
from sonnx.engine.operator import OutputShape, host_ints
from sonnx.errors import BadInputError
from sonnx.operators.activation.base import StrictExport
from sonnx.operators.elementwise.base import broadcast_shapes
from sonnx.precision import autocast_mixes
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "CumProd",
    "CumSum",
    "Det",
    "Einsum",
    "Gemm",
    "MatMul",
    "MatMulInteger",
    "QLinearMatMul",
    "cumprod",
    "cumsum",
    "det",
    "einsum",
    "gemm",
    "matmul",
    "matmul_integer",
    "qlinear_matmul",
]

_WIDENED = frozenset({torch.uint16, torch.uint32, torch.uint64})


def _widen(x: torch.Tensor) -> torch.Tensor:
    """Unsigned types torch cannot multiply or scan on the CPU are computed in int64."""
    return x.to(torch.int64) if x.dtype in _WIDENED else x


def _shape(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape)


def _matmul(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """NumPy-style matmul; inputs torch rejects get an error naming the op and both shapes.

    torch checks the shapes and types anyway, so they are checked here only when it raises
    (MatMul is most of a transformer's nodes, and the checks cost as much as a small product).
    """
    if a.dtype in _WIDENED or b.dtype in _WIDENED:
        _check_matmul(op, a, b)
        return torch.matmul(_widen(a), _widen(b)).to(a.dtype)
    try:
        return torch.matmul(a, b)
    except RuntimeError:
        _check_matmul(op, a, b)
        raise


def _check_matmul(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """A BadInputError naming what is wrong with ``a @ b``'s shapes or types, if anything."""
    if a.dim() == 0 or b.dim() == 0:
        raise BadInputError(
            f"{op}: inputs must have at least 1 dimension, received shapes {_shape(a)} and "
            f"{_shape(b)}"
        )
    k_a = a.shape[-1]
    k_b = b.shape[-2] if b.dim() >= 2 else b.shape[0]
    if k_a != k_b:
        raise BadInputError(
            f"{op}: the last dimension of A ({k_a}) must equal the contracted dimension of B "
            f"({k_b}), received shapes {_shape(a)} and {_shape(b)}"
        )
    try:
        broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise BadInputError(
            f"{op}: the batch dimensions of A and B must broadcast, received shapes {_shape(a)} "
            f"and {_shape(b)}"
        ) from None
    if a.dtype != b.dtype and not autocast_mixes(a, b):
        raise BadInputError(
            f"{op}: A and B must have one dtype, received {dtypes.dtype_name(a.dtype)} and "
            f"{dtypes.dtype_name(b.dtype)}"
        )


class MatMul(StrictExport):
    """``numpy.matmul``: 1-D operands are promoted and batch dimensions broadcast."""

    op_type = "MatMul"
    since_versions = (1, 9, 13)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _matmul("MatMul", a, b)


class Gemm(StrictExport):
    """``alpha * A' @ B' + beta * C`` with optional transposes; C broadcasts to (M, N)."""

    op_type = "Gemm"
    since_versions = (7, 9, 11, 13)
    output_shape = OutputShape.FROM_SHAPES

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
    ) -> torch.Tensor:
        for name, t in (("A", a), ("B", b)):
            if t.dim() != 2:
                raise BadInputError(f"Gemm: input {name} must be 2-D, received shape {_shape(t)}")
        if self.attr("transA"):
            a = a.t()
        if self.attr("transB"):
            b = b.t()
        alpha, beta = float(self.attr("alpha")), float(self.attr("beta"))
        if (
            c is not None
            and a.dtype.is_floating_point
            and a.dtype == b.dtype == c.dtype
            and a.shape[1] == b.shape[0]
            and c.dim() <= 2
            and all(
                d in (1, e)
                for d, e in zip(reversed(c.shape), (b.shape[1], a.shape[0]), strict=False)
            )
        ):
            # one fused kernel (and one backward node) for the common float case
            return torch.addmm(c, a, b, beta=beta, alpha=alpha)
        y = _matmul("Gemm", a, b)
        if alpha != 1.0:
            y = (y * alpha).to(a.dtype)
        if c is None:
            return y
        try:
            shape = broadcast_shapes(c.shape, y.shape)
        except RuntimeError:
            shape = None
        if shape != y.shape:
            raise BadInputError(
                f"Gemm: input C must broadcast to the product's shape {_shape(y)}, received "
                f"shape {_shape(c)}"
            )
        return y + (c if beta == 1.0 else (c * beta).to(c.dtype))

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        attrs = {k: v for k, v in self.attrs.items() if k != "broadcast" and v is not None}
        ins = list(inputs)
        if (len(ins) < 3 or ins[2] == "") and g.opset < 11:
            # C became optional at opset 11: before, add a zero scalar.
            zero = torch.zeros((), dtype=self.inputs[0].dtype)  # host: a serialised initializer
            ins = [*ins[:2], g.add_initializer(zero, g.fresh_name("gemm_c"))]
        if len(ins) == 3 and g.opset < 7:  # before opset 7 broadcasting C had to be asked for
            attrs["broadcast"] = 1
        g.add_node("Gemm", ins, outputs, **attrs)


class Einsum(StrictExport):
    """Einstein summation as ``torch.einsum`` (explicit, implicit and ellipsis forms)."""

    op_type = "Einsum"
    since_versions = (12, 28)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        equation = self.attr("equation")
        if not equation:
            raise BadInputError("Einsum: attribute equation is required, received none")
        equation = equation.replace(" ", "")
        if not xs or (any(x.dtype != xs[0].dtype for x in xs) and not autocast_mixes(*xs)):
            raise BadInputError(
                "Einsum: needs at least one input, all of one dtype, received dtypes "
                f"{[dtypes.dtype_name(x.dtype) for x in xs]}"
            )
        try:
            return torch.einsum(equation, *[_widen(x) for x in xs]).to(xs[0].dtype)
        except RuntimeError as e:
            shapes = ", ".join(str(_shape(x)) for x in xs)
            raise BadInputError(
                f"Einsum: equation {equation!r} does not fit inputs of shapes {shapes}: {e}"
            ) from None


class Det(StrictExport):
    """Determinants of the square matrices in the last two dimensions."""

    op_type = "Det"
    since_versions = (11, 22)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[-1] != x.shape[-2] or not dtypes.is_float(x.dtype):
            raise BadInputError(
                "Det: input X must be a floating-point tensor of square matrices (..., M, M), "
                f"received shape {_shape(x)} and dtype {dtypes.dtype_name(x.dtype)}"
            )
        # torch has no half-precision LU on the CPU: compute in float32 and round back.
        work = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
        return torch.linalg.det(work).to(x.dtype)


class _Scan(StrictExport):
    """CumSum and CumProd: an inclusive/exclusive, forward/reverse scan along one axis."""

    output_shape = OutputShape.FROM_SHAPES
    # The axis.
    parameterising_inputs = frozenset({1})

    identity = 0

    def scan(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, axis: torch.Tensor) -> torch.Tensor:
        values = host_ints(axis)
        if values is None or len(values) != 1 or axis.dim() > 1:
            raise BadInputError(
                f"{self.op_type}: input axis must be a 0-D or 1-element integer tensor, "
                f"received {None if axis is None else _shape(axis)}"
            )
        rank = x.dim()
        if not -rank <= values[0] < rank:
            raise BadInputError(
                f"{self.op_type}: axis must be in [{-rank}, {rank - 1}] for a {rank}-D input, "
                f"received {values[0]}"
            )
        dim = values[0] % rank
        work = _widen(x)
        if self.attr("reverse"):
            work = work.flip(dim)
        y = self.scan(work, dim)
        if self.attr("exclusive") and y.shape[dim] > 0:
            first = torch.full_like(y.narrow(dim, 0, 1), self.identity)
            y = torch.cat([first, y.narrow(dim, 0, y.shape[dim] - 1)], dim)
        if self.attr("reverse"):
            y = y.flip(dim)
        return y.to(x.dtype)


class CumSum(_Scan):
    """ONNX ``CumSum``: running sums along the axis input (``exclusive``, ``reverse``).
    """

    op_type = "CumSum"
    since_versions = (11, 14)
    identity = 0

    def scan(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cumsum(x, axis, dtype=x.dtype)


class CumProd(_Scan):
    """ONNX ``CumProd``: running products along the axis input (``exclusive``, ``reverse``).
    """

    op_type = "CumProd"
    since_versions = (26,)
    identity = 1

    def scan(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cumprod(x, axis, dtype=x.dtype)


def _zero_point(zp: torch.Tensor | None, row_wise: bool) -> torch.Tensor | int:
    """A zero point ready to subtract: per-row vectors of A become a column (M, 1)."""
    if zp is None:
        return 0
    zp = zp.to(torch.int32)
    if row_wise and zp.dim() == 1 and zp.numel() > 1:
        return zp.unsqueeze(-1)
    return zp


def _int8_types(op: str, **named: torch.Tensor) -> None:
    for name, t in named.items():
        if t.dtype not in (torch.int8, torch.uint8):
            raise BadInputError(
                f"{op}: input {name} must be int8 or uint8, received {dtypes.dtype_name(t.dtype)}"
            )


class MatMulInteger(StrictExport):
    """``(A - a_zero_point) @ (B - b_zero_point)`` on 8-bit integers, accumulated in int32."""

    op_type = "MatMulInteger"
    since_versions = (10,)
    output_shape = OutputShape.FROM_SHAPES
    parameterising_inputs = frozenset({2, 3})

    def forward(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        a_zero_point: torch.Tensor | None = None,
        b_zero_point: torch.Tensor | None = None,
    ) -> torch.Tensor:
        _int8_types("MatMulInteger", A=a, B=b)
        a32 = a.to(torch.int32) - _zero_point(a_zero_point, row_wise=True)
        b32 = b.to(torch.int32) - _zero_point(b_zero_point, row_wise=False)
        if a32.device.type == "cpu" and a32.dim() >= 1 and b32.dim() >= 1:
            return _exact_integer_product(a32, b32)
        return _matmul("MatMulInteger", a32, b32)


#: How many products of two 8-bit differences (each at most 255 in magnitude) float32 sums
#: exactly: every partial sum is an integer below 2**24.
_EXACT_FLOAT32_TERMS = 2**24 // 255**2


def _exact_integer_product(a32: torch.Tensor, b32: torch.Tensor) -> torch.Tensor:
    """``a32 @ b32`` of int32 operands holding 8-bit differences, computed by float32 GEMMs
    over runs of at most 258 terms of the contracted dimension (each exact), summed in int32.

    torch's CPU int32 product has no BLAS kernel: 3-4x slower than float32's (1 thread, an
    int8 encoder's 128 x 256 x 1024 product: 9.3 ms against 2.8 ms), and most of a
    ``quantize_dynamic`` model's time. It also cannot be compiled: inductor's freezing hands
    every product by a constant weight to oneDNN, which takes no int32 ("itensor_view_from_dense
    expects float ... input Int").
    """
    k = a32.shape[-1]
    if b32.shape[-2 if b32.dim() > 1 else 0] != k:
        _check_matmul("MatMulInteger", a32, b32)
    total = None
    for start in range(0, k, _EXACT_FLOAT32_TERMS):
        stop = min(start + _EXACT_FLOAT32_TERMS, k)
        rows = b32[start:stop] if b32.dim() == 1 else b32[..., start:stop, :]
        part = torch.matmul(a32[..., start:stop].float(), rows.float()).to(torch.int32)
        total = part if total is None else total + part
    if total is None:  # an empty contracted dimension
        return _matmul("MatMulInteger", a32, b32)
    return total


def _dequantized(x: torch.Tensor, zp: torch.Tensor, row_wise: bool) -> torch.Tensor:
    """Integers minus their zero point in int32; float8 values are used as they are."""
    if x.dtype.is_floating_point:
        return x.to(torch.float64)
    return x.to(torch.int32) - _zero_point(zp, row_wise)


def _per_row(scale: torch.Tensor) -> torch.Tensor:
    return scale.unsqueeze(-1) if scale.dim() == 1 and scale.numel() > 1 else scale


def saturate(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round half to even and clamp into ``dtype``'s range (float8: to its largest finite)."""
    if dtype.is_floating_point:
        limit = torch.finfo(dtype).max
        return y.clamp(-limit, limit).to(dtype)
    info = torch.iinfo(dtype)
    return torch.round(y).clamp(info.min, info.max).to(dtype)


class QLinearMatMul(StrictExport):
    """Quantized matmul: dequantize A and B, multiply, requantize with y's scale and zero point.

    As the ONNX reference does, the product of the integer matrices is scaled in float64 by
    ``a_scale * b_scale / y_scale`` (computed in the scales' own type) and rounded half to even.
    """

    op_type = "QLinearMatMul"
    since_versions = (10, 21)
    output_shape = OutputShape.FROM_SHAPES
    parameterising_inputs = frozenset({1, 2, 4, 5, 6, 7})

    def forward(
        self,
        a: torch.Tensor,
        a_scale: torch.Tensor,
        a_zero_point: torch.Tensor,
        b: torch.Tensor,
        b_scale: torch.Tensor,
        b_zero_point: torch.Tensor,
        y_scale: torch.Tensor,
        y_zero_point: torch.Tensor,
    ) -> torch.Tensor:
        out_dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
        da = _dequantized(a, a_zero_point, row_wise=True)
        db = _dequantized(b, b_zero_point, row_wise=False)
        if da.dtype != db.dtype:
            da, db = da.to(torch.float64), db.to(torch.float64)
        product = _matmul("QLinearMatMul", da, db).to(torch.float64)
        multiplier = (_per_row(a_scale) * b_scale / y_scale).to(torch.float64)
        y = product * multiplier
        if y_zero_point is not None and not out_dtype.is_floating_point:
            y = y + y_zero_point.to(torch.float64)
        return saturate(y, out_dtype)


# ---- SINGA-named functions ------------------------------------------------------------------


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` as ``numpy.matmul``: 1-D operands promoted, batch dims broadcast (ONNX ``MatMul``).

    :param a: a tensor of at least 1 axis, (..., M, K).
    :param b: a tensor of ``a``'s dtype, (..., K, N).
    :returns: the (..., M, N) product.
    :raises BadInputError: an input is 0-D, the contracted dims differ, the batch dims do not
        broadcast, or the dtypes differ.
    """
    return MatMul()(a, b)


def gemm(
    A: Tensor,
    B: Tensor,
    C: Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> Tensor:
    """``alpha * A' @ B' + beta * C``, ``A'`` and ``B'`` optionally transposed (ONNX ``Gemm``).

    :param A: a 2-D (M, K) tensor, or (K, M) with ``transA``.
    :param B: a 2-D (K, N) tensor, or (N, K) with ``transB``.
    :param C: a tensor broadcasting to (M, N), or None for no bias.
    :param alpha: the scale of the product.
    :param beta: the scale of ``C``.
    :param transA: 1 to transpose ``A`` first.
    :param transB: 1 to transpose ``B`` first.
    :returns: the (M, N) result.
    :raises BadInputError: ``A`` or ``B`` is not 2-D, the inner dims differ, or ``C`` does not
        broadcast to (M, N).
    """
    return Gemm(alpha=alpha, beta=beta, transA=transA, transB=transB)(A, B, C)


def einsum(equation: str, *xs: Tensor) -> Tensor:
    """Einstein summation as ``torch.einsum`` (explicit, implicit and ellipsis; ONNX ``Einsum``).

    :param equation: the subscripts, e.g. ``"bij,bjk->bik"``.
    :param xs: one tensor per operand of ``equation``.
    :returns: the result the equation describes.
    :raises BadInputError: ``equation`` is empty or does not fit the inputs' shapes.
    """
    return Einsum(equation=equation)(*xs)


def det(x: Tensor) -> Tensor:
    """Determinants of the square matrices in the last two axes (ONNX ``Det``).

    :param x: a floating-point (..., M, M) tensor.
    :returns: a (...) tensor of ``x``'s dtype.
    :raises BadInputError: ``x`` is not a floating-point tensor of square matrices.
    """
    return Det()(x)


def _axis_tensor(x: Tensor, axis: int) -> Tensor:
    return Tensor(data=torch.tensor(axis, dtype=torch.int64), device=x.device, requires_grad=False)


def cumsum(x: Tensor, axis: int = 0, exclusive: int = 0, reverse: int = 0) -> Tensor:
    """Running sums along ``axis`` (ONNX ``CumSum``).

    :param x: a number tensor.
    :param axis: the axis to sum along (negative counts from the end).
    :param exclusive: 1 to leave out each element itself (the first sum is 0).
    :param reverse: 1 to sum from the end towards the start.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``axis`` is out of range.
    """
    return CumSum(exclusive=exclusive, reverse=reverse)(x, _axis_tensor(x, axis))


def cumprod(x: Tensor, axis: int = 0, exclusive: int = 0, reverse: int = 0) -> Tensor:
    """Running products along ``axis`` (ONNX ``CumProd``).

    :param x: a number tensor.
    :param axis: the axis to multiply along (negative counts from the end).
    :param exclusive: 1 to leave out each element itself (the first product is 1).
    :param reverse: 1 to multiply from the end towards the start.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``axis`` is out of range.
    """
    return CumProd(exclusive=exclusive, reverse=reverse)(x, _axis_tensor(x, axis))


def matmul_integer(
    a: Tensor, b: Tensor, a_zero_point: Tensor | None = None, b_zero_point: Tensor | None = None
) -> Tensor:
    """``(a - a_zero_point) @ (b - b_zero_point)`` on 8-bit integers, accumulated in int32.

    :param a: an int8 or uint8 (..., M, K) tensor.
    :param b: an int8 or uint8 (..., K, N) tensor.
    :param a_zero_point: ``a``'s zero point: a scalar, or one per row (M,); None for 0.
    :param b_zero_point: ``b``'s zero point: a scalar, or one per column (N,); None for 0.
    :returns: the int32 (..., M, N) product (ONNX ``MatMulInteger``).
    :raises BadInputError: ``a`` or ``b`` is not 8-bit, or the shapes do not multiply.
    """
    return MatMulInteger()(a, b, a_zero_point, b_zero_point)


def qlinear_matmul(
    a: Tensor,
    a_scale: Tensor,
    a_zero_point: Tensor,
    b: Tensor,
    b_scale: Tensor,
    b_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
) -> Tensor:
    """Quantized matmul: dequantize ``a`` and ``b``, multiply, requantize (ONNX ``QLinearMatMul``).

    :param a: the quantized (..., M, K) left operand (8-bit integers or float8).
    :param a_scale: ``a``'s scale: a scalar, or one per row.
    :param a_zero_point: ``a``'s zero point, shaped as ``a_scale``.
    :param b: the quantized (..., K, N) right operand.
    :param b_scale: ``b``'s scale: a scalar, or one per column.
    :param b_zero_point: ``b``'s zero point, shaped as ``b_scale``.
    :param y_scale: the output's scale.
    :param y_zero_point: the output's zero point; its dtype is the output's.
    :returns: the quantized (..., M, N) product, in ``y_zero_point``'s dtype.
    :raises BadInputError: the shapes do not multiply.
    """
    return QLinearMatMul()(
        a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point
    )

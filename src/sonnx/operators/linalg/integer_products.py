"""The integer and quantized matrix products: MatMulInteger and QLinearMatMul.

Exported from :mod:`sonnx.operators.linalg.products` too, where they were first written.
"""

from __future__ import annotations

import torch

from sonnx import dtypes
from sonnx.engine.operator import OutputShape
from sonnx.engine.singa_functions import Input, SingaFunction
from sonnx.errors import BadInputError
from sonnx.operators.activation.base import StrictExport
from sonnx.operators.linalg.common import check_matmul, checked_matmul
from sonnx.tensor import Tensor

__all__ = ["MatMulInteger", "QLinearMatMul", "matmul_integer", "qlinear_matmul"]


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

    singa_functions = (
        SingaFunction(
            "matmul_integer",
            "``(a - a_zero_point) @ (b - b_zero_point)`` on 8-bit integers, accumulated in int32.",
            inputs=(
                Input("a", "an int8 or uint8 (..., M, K) tensor."),
                Input("b", "an int8 or uint8 (..., K, N) tensor."),
                Input(
                    "a_zero_point", "``a``'s zero point: a scalar, or one per row (M,); None for 0."
                ),
                Input(
                    "b_zero_point",
                    "``b``'s zero point: a scalar, or one per column (N,); None for 0.",
                ),
            ),
            returns="the int32 (..., M, N) product (ONNX ``MatMulInteger``).",
            raises=(
                ("BadInputError", "``a`` or ``b`` is not 8-bit, or the shapes do not multiply."),
            ),
        ),
    )

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
        return checked_matmul("MatMulInteger", a32, b32)


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
        check_matmul("MatMulInteger", a32, b32)
    total = None
    for start in range(0, k, _EXACT_FLOAT32_TERMS):
        stop = min(start + _EXACT_FLOAT32_TERMS, k)
        rows = b32[start:stop] if b32.dim() == 1 else b32[..., start:stop, :]
        part = torch.matmul(a32[..., start:stop].float(), rows.float()).to(torch.int32)
        total = part if total is None else total + part
    if total is None:  # an empty contracted dimension
        return checked_matmul("MatMulInteger", a32, b32)
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

    singa_functions = (
        SingaFunction(
            "qlinear_matmul",
            (
                "Quantized matmul: dequantize ``a`` and ``b``, multiply, requantize (ONNX "
                "``QLinearMatMul``)."
            ),
            inputs=(
                Input("a", "the quantized (..., M, K) left operand (8-bit integers or float8)."),
                Input("a_scale", "``a``'s scale: a scalar, or one per row."),
                Input("a_zero_point", "``a``'s zero point, shaped as ``a_scale``."),
                Input("b", "the quantized (..., K, N) right operand."),
                Input("b_scale", "``b``'s scale: a scalar, or one per column."),
                Input("b_zero_point", "``b``'s zero point, shaped as ``b_scale``."),
                Input("y_scale", "the output's scale."),
                Input("y_zero_point", "the output's zero point; its dtype is the output's."),
            ),
            returns="the quantized (..., M, N) product, in ``y_zero_point``'s dtype.",
            raises=(("BadInputError", "the shapes do not multiply."),),
        ),
    )

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
        product = checked_matmul("QLinearMatMul", da, db).to(torch.float64)
        multiplier = (_per_row(a_scale) * b_scale / y_scale).to(torch.float64)
        y = product * multiplier
        if y_zero_point is not None and not out_dtype.is_floating_point:
            y = y + y_zero_point.to(torch.float64)
        return saturate(y, out_dtype)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


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
    op = QLinearMatMul()
    return op(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)

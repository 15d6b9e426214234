"""Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.

A scale (and zero point) is a scalar for per-tensor quantization, a 1-D tensor along ``axis``
for per-axis quantization, or the input's shape with ``axis`` divided into blocks of
``block_size`` for blocked quantization. Rounding is half to even, as ONNX specifies; results
match ``onnx.reference`` (which divides in the scale's precision, float64 for integer inputs).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from sonnx import dtypes
from sonnx.engine.operator import OutputShape
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError, OpsetTooOldError
from sonnx.operators.activation.base import StrictExport
from sonnx.operators.elementwise.cast import (
    FLOAT4,
    SUB_BYTE,
    decode_float4,
    decode_sub_byte,
    encode_float4,
    encode_sub_byte,
    sub_byte_range,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "QuantizeLinear",
    "dequantize_linear",
    "dynamic_quantize_linear",
    "quantize_linear",
]

_FLOAT8 = frozenset(
    {torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz}
)
_INTEGER_TARGETS = frozenset({torch.int8, torch.uint8, torch.int16, torch.uint16})


def _expand(
    op: str, name: str, p: torch.Tensor, shape: torch.Size, axis: int, block_size: int
) -> torch.Tensor:
    """``p`` (a scale or zero point) shaped to broadcast against an input of ``shape``."""
    if p.numel() == 1:
        return p.reshape(())
    rank = len(shape)
    if not -rank <= axis < rank:
        raise BadInputError(
            f"{op}: attribute axis must be in [{-rank}, {rank - 1}] for a {rank}-D input, "
            f"received {axis}"
        )
    axis %= rank
    if not block_size:
        if p.dim() != 1 or p.shape[0] != shape[axis]:
            raise BadInputError(
                f"{op}: input {name} must be a scalar or a 1-D tensor of length {shape[axis]} "
                f"(the input's dimension {axis}), received shape {tuple(p.shape)}"
            )
        dims = [1] * rank
        dims[axis] = shape[axis]
        return p.reshape(dims)
    blocks = -(-shape[axis] // block_size)
    expected = (*shape[:axis], blocks, *shape[axis + 1 :])
    if block_size < 0 or tuple(p.shape) != expected:
        raise BadInputError(
            f"{op}: for blocked quantization along axis {axis} with block_size {block_size}, "
            f"input {name} must have shape {expected}, received {tuple(p.shape)}"
        )
    return p.repeat_interleave(block_size, dim=axis).narrow(axis, 0, shape[axis])


def _axis_and_block(op: StrictExport) -> tuple[int, int]:
    """``axis`` (absent before opset 13: per-tensor only, so any value serves) and block size."""
    axis = op.attr("axis")
    return (1 if axis is None else int(axis)), int(op.attr("block_size") or 0)


def _to_float8(y: torch.Tensor, dtype: torch.dtype, saturate: bool) -> torch.Tensor:
    """Round to a float8 type: saturating to its largest finite value, or overflowing.

    Without saturation an overflow becomes inf where the type has one (e5m2) and NaN elsewhere;
    torch's own cast always saturates, so the overflow is applied explicitly.
    """
    limit = torch.finfo(dtype).max
    clamped = y.clamp(-limit, limit).to(dtype)
    if saturate:
        return clamped
    # Beyond the largest finite value by half its spacing or more, rounding leaves the range.
    info = torch.finfo(dtype)
    spacing = 2.0 ** math.floor(math.log2(limit)) * info.eps
    # A tie rounds to even: down to e4m3fn's largest (even mantissa), up for the others.
    beyond = y.abs() - (limit + spacing / 2)
    overflow = beyond > 0 if dtype == torch.float8_e4m3fn else beyond >= 0
    special = torch.tensor(
        float("inf") if dtype == torch.float8_e5m2 else float("nan"), device=y.device
    )
    return torch.where(overflow, torch.copysign(special, y.float()), clamped.float()).to(dtype)


def _numeric(t: torch.Tensor) -> torch.Tensor:
    """Sub-byte integers and FLOAT4E2M1 (storage-only in torch) as computable values."""
    if t.dtype == FLOAT4:
        return decode_float4(t)
    return decode_sub_byte(t) if t.dtype in SUB_BYTE else t


class QuantizeLinear(StrictExport):
    """``y = saturate(round(x / y_scale) + y_zero_point)`` into the zero point's type.

    Without a zero point the type is ``output_dtype`` (opset 21+), else uint8.
    """

    op_type = "QuantizeLinear"
    since_versions = (10, 13, 19, 21, 23, 24, 25, 28)
    output_shape = OutputShape.FROM_SHAPES
    parameterising_inputs = frozenset({1, 2})

    singa_functions = (
        SingaFunction(
            "quantize_linear",
            (
                "``saturate(round(x / scale) + zero_point)`` in the zero point's type "
                "(QuantizeLinear)."
            ),
            inputs=(
                Input("x", "the float tensor to quantize."),
                Input(
                    "scale", "the scale: a scalar, one per slice along ``axis``, or one per block."
                ),
                Input(
                    "zero_point",
                    (
                        "the zero point, shaped as ``scale``; its dtype is the output's (None: "
                        "uint8 with zero point 0)."
                    ),
                ),
            ),
            returns="the quantized tensor, of ``x``'s shape.",
            keywords=(
                Keyword("axis", "the axis of per-axis or blocked quantization."),
                Keyword(
                    "saturate",
                    "for float8 outputs, 1 clamps to the largest finite value, 0 does not.",
                ),
                Keyword(
                    "block_size",
                    "the block length along ``axis`` for blocked quantization; 0 for none.",
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``scale`` or ``zero_point`` has the wrong shape, ``axis`` is out of "
                        "range, or the quantized type is not one ONNX quantizes to."
                    ),
                ),
            ),
        ),
    )

    def _target(self, zero_point: torch.Tensor | None) -> torch.dtype:
        code = self.attr("output_dtype") or 0
        if zero_point is not None:
            if code and dtypes.onnx_to_torch(code) != zero_point.dtype:
                raise BadInputError(
                    f"QuantizeLinear: attribute output_dtype {dtypes.onnx_type_name(code)} "
                    f"disagrees with y_zero_point's dtype {dtypes.dtype_name(zero_point.dtype)}"
                )
            target = zero_point.dtype
        else:
            target = dtypes.onnx_to_torch(code) if code else torch.uint8
        if target not in _INTEGER_TARGETS | _FLOAT8 | SUB_BYTE.keys() | {FLOAT4}:
            raise BadInputError(
                "QuantizeLinear: the quantized type must be int8, uint8, int16, uint16, a 2- or "
                f"4-bit integer, a float8 type or FLOAT4E2M1, received {dtypes.dtype_name(target)}"
            )
        return target

    def forward(
        self, x: torch.Tensor, y_scale: torch.Tensor, y_zero_point: torch.Tensor | None = None
    ) -> torch.Tensor:
        target = self._target(y_zero_point)
        axis, block = _axis_and_block(self)
        scale = _expand("QuantizeLinear", "y_scale", y_scale, x.shape, axis, block)
        precision = self.attr("precision") or 0
        if precision:
            work = dtypes.onnx_to_torch(precision)
        elif not x.dtype.is_floating_point:
            work = torch.float64
        else:
            work = torch.promote_types(x.dtype, scale.dtype)
        y = x.to(work) / scale.to(work)
        if target in _FLOAT8:
            return _to_float8(y, target, bool(self.attr("saturate")))
        if target == FLOAT4:
            return encode_float4(y)
        y = torch.round(y).to(torch.float64)
        if y_zero_point is not None:
            zp = _expand(
                "QuantizeLinear", "y_zero_point", _numeric(y_zero_point), x.shape, axis, block
            )
            y = y + zp.to(torch.float64)
        if target in SUB_BYTE:
            low, high = sub_byte_range(target)
            return encode_sub_byte(y.clamp(low, high), target)
        info = torch.iinfo(target)
        return y.clamp(info.min, info.max).to(target)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        _check_granularity(self, g)
        super().export(g, inputs, outputs)


class DequantizeLinear(StrictExport):
    """``y = (x - x_zero_point) * x_scale`` in float32, returned in the scale's type.

    ``output_dtype`` (opset 23+) overrides the output type. float8 inputs have no zero point.
    """

    op_type = "DequantizeLinear"
    since_versions = (10, 13, 19, 21, 23, 24, 25, 28)
    output_shape = OutputShape.FROM_SHAPES
    parameterising_inputs = frozenset({1, 2})

    singa_functions = (
        SingaFunction(
            "dequantize_linear",
            "``(x - zero_point) * scale``, returned in the scale's type (ONNX DequantizeLinear).",
            inputs=(
                Input("x", "the quantized tensor."),
                Input(
                    "scale",
                    (
                        "the floating-point scale: a scalar, one per slice along ``axis``, or one "
                        "per block."
                    ),
                ),
                Input(
                    "zero_point",
                    "the zero point, of ``x``'s dtype and ``scale``'s shape; None for 0.",
                ),
            ),
            returns="a tensor of ``x``'s shape in ``scale``'s dtype.",
            keywords=(
                Keyword("axis", "the axis of per-axis or blocked quantization."),
                Keyword(
                    "block_size",
                    "the block length along ``axis`` for blocked quantization; 0 for none.",
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``scale`` is not floating-point, ``zero_point``'s dtype differs from "
                        "``x``'s, or a shape or ``axis`` does not fit."
                    ),
                ),
            ),
        ),
    )

    def forward(
        self, x: torch.Tensor, x_scale: torch.Tensor, x_zero_point: torch.Tensor | None = None
    ) -> torch.Tensor:
        if not x_scale.dtype.is_floating_point:
            raise BadInputError(
                f"DequantizeLinear: input x_scale must be floating-point, received "
                f"{dtypes.dtype_name(x_scale.dtype)}"
            )
        if x_zero_point is not None and x_zero_point.dtype != x.dtype:
            raise BadInputError(
                f"DequantizeLinear: x_zero_point must have x's dtype {dtypes.dtype_name(x.dtype)}, "
                f"received {dtypes.dtype_name(x_zero_point.dtype)}"
            )
        axis, block = _axis_and_block(self)
        scale = _expand("DequantizeLinear", "x_scale", x_scale, x.shape, axis, block)
        dx = _numeric(x).to(torch.float32)
        if x_zero_point is not None and x.dtype not in _FLOAT8 | {FLOAT4}:
            zp = _expand(
                "DequantizeLinear", "x_zero_point", _numeric(x_zero_point), x.shape, axis, block
            )
            dx = dx - zp.to(torch.float32)
        code = self.attr("output_dtype") or 0
        out = dtypes.onnx_to_torch(code) if code else x_scale.dtype
        return (dx * scale.to(torch.float32)).to(out)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        _check_granularity(self, g)
        super().export(g, inputs, outputs)


def _check_granularity(op: StrictExport, g: GraphBuilder) -> None:
    """Per-axis scales need opset 13, blocked ones 21 (block_size is checked as an attribute)."""
    if g.opset < 13 and op.inputs[1] is not None and op.inputs[1].size() > 1:
        raise OpsetTooOldError(
            f"{op.op_type}: a per-axis scale of shape {op.inputs[1].shape} needs opset >= 13, "
            f"cannot be written at opset {g.opset}",
            13,
        )


class DynamicQuantizeLinear(StrictExport):
    """uint8 quantization with scale and zero point computed from the data's range (and 0).

    Returns ``(y, y_scale, y_zero_point)``, computed in float32 as the ONNX reference does.
    """

    op_type = "DynamicQuantizeLinear"
    since_versions = (11,)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "dynamic_quantize_linear",
            "uint8 quantization with a scale and zero point computed from ``x``'s range (and 0).",
            inputs=(Input("x", "a non-empty float32 tensor."),),
            returns=(
                "``(y, y_scale, y_zero_point)``: the uint8 tensor, its float32 scale and its "
                "uint8 zero point (ONNX DynamicQuantizeLinear)."
            ),
            raises=(("BadInputError", "``x`` is not float32 or is empty."),),
            result="tuple[Tensor, Tensor, Tensor]",
        ),
    )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if x.dtype != torch.float32 or x.numel() == 0:
            raise BadInputError(
                "DynamicQuantizeLinear: input x must be a non-empty float32 tensor, received "
                f"dtype {dtypes.dtype_name(x.dtype)} and shape {tuple(x.shape)}"
            )
        x = x.detach()
        scale, zero_point = uint8_range(x)
        y = torch.clamp(torch.round(x / scale) + zero_point, 0.0, 255.0)
        return y.to(torch.uint8), scale, zero_point.to(torch.uint8)


def uint8_range(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DynamicQuantizeLinear's scale and zero point for ``x``: its range widened to hold 0,
    spread over the 255 steps of uint8 (onnxruntime's dynamically quantized operators compute
    theirs the same way).

    :param x: the float32 values whose range to cover.
    :returns: ``(scale, zero_point)``, 0-d float32 tensors (the zero point a whole number).
    """
    # Few operations, no new tensors: DynamicQuantizeLSTM computes one per product per step.
    low, high = torch.aminmax(x)
    low, high = low.clamp(max=0.0), high.clamp(min=0.0)
    span = high - low
    scale = torch.where(span == 0, 1.0, span) / 255.0
    return scale, torch.round(torch.clamp(-low / scale, 0.0, 255.0))


# ---- functions ------------------------------------------------------------------------------


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def quantize_linear(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor | None = None,
    axis: int = 1,
    saturate: int = 1,
    block_size: int = 0,
) -> Tensor:
    """``saturate(round(x / scale) + zero_point)`` in the zero point's type (QuantizeLinear).

    :param x: the float tensor to quantize.
    :param scale: the scale: a scalar, one per slice along ``axis``, or one per block.
    :param zero_point: the zero point, shaped as ``scale``; its dtype is the output's (None: uint8
        with zero point 0).
    :param axis: the axis of per-axis or blocked quantization.
    :param saturate: for float8 outputs, 1 clamps to the largest finite value, 0 does not.
    :param block_size: the block length along ``axis`` for blocked quantization; 0 for none.
    :returns: the quantized tensor, of ``x``'s shape.
    :raises BadInputError: ``scale`` or ``zero_point`` has the wrong shape, ``axis`` is out of
        range, or the quantized type is not one ONNX quantizes to.
    """
    return QuantizeLinear(axis=axis, saturate=saturate, block_size=block_size)(x, scale, zero_point)


def dequantize_linear(
    x: Tensor, scale: Tensor, zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0
) -> Tensor:
    """``(x - zero_point) * scale``, returned in the scale's type (ONNX DequantizeLinear).

    :param x: the quantized tensor.
    :param scale: the floating-point scale: a scalar, one per slice along ``axis``, or one per
        block.
    :param zero_point: the zero point, of ``x``'s dtype and ``scale``'s shape; None for 0.
    :param axis: the axis of per-axis or blocked quantization.
    :param block_size: the block length along ``axis`` for blocked quantization; 0 for none.
    :returns: a tensor of ``x``'s shape in ``scale``'s dtype.
    :raises BadInputError: ``scale`` is not floating-point, ``zero_point``'s dtype differs from
        ``x``'s, or a shape or ``axis`` does not fit.
    """
    return DequantizeLinear(axis=axis, block_size=block_size)(x, scale, zero_point)


def dynamic_quantize_linear(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """uint8 quantization with a scale and zero point computed from ``x``'s range (and 0).

    :param x: a non-empty float32 tensor.
    :returns: ``(y, y_scale, y_zero_point)``: the uint8 tensor, its float32 scale and its uint8 zero
        point (ONNX DynamicQuantizeLinear).
    :raises BadInputError: ``x`` is not float32 or is empty.
    """
    return DynamicQuantizeLinear()(x)

"""Element-type conversion: Cast and CastLike across every ONNX type torch holds (the four 8-bit
float types included, with ONNX's ``saturate`` rules) and BitCast.

The 2- and 4-bit integer types are stored one element per byte (the low bits, as ml_dtypes
stores them) in torch's storage-only int2/uint2/int4/uint4 dtypes and converted here through
int64: conversion into them truncates toward zero and keeps the low bits, as ONNX's reference
does. FLOAT4E2M1 is stored the same way (one value per byte, see :mod:`sonnx.dtypes`).
Casts to and from strings (:mod:`sonnx.strings`) follow onnxruntime where the specification
leaves room: see :func:`parse_strings` and :func:`format_numbers`.
Float-to-float casts are differentiable (the gradient is cast back); the others are not.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import torch
from onnx import TensorProto

from sonnx import dtypes
from sonnx.dtypes import STRING, ElementType
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError, ExportError, OpsetTooOldError
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.strings import StringArray, numbers, object_array
from sonnx.tensor import Tensor

__all__ = ["BitCast", "Cast", "CastLike", "bitcast", "cast", "cast_like"]

FLOAT8 = frozenset(
    {torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz}
)

# torch's conversion to float8_e4m3fn saturates; without saturation ONNX wants NaN for values
# whose rounding exceeds the largest finite value 448, i.e. beyond the midpoint to 480 (464
# itself rounds to even, which is 448).
_E4M3FN_NAN_ABOVE = 464.0


# dtype -> (bits, signed) for the sub-byte integers torch can store but not compute with
SUB_BYTE = {
    torch.int4: (4, True),
    torch.uint4: (4, False),
    torch.int2: (2, True),
    torch.uint2: (2, False),
}


def decode_sub_byte(x: torch.Tensor) -> torch.Tensor:
    """The int64 values of a sub-byte integer tensor."""
    bits, signed = SUB_BYTE[x.dtype]
    raw = x.view(torch.uint8).to(torch.int64) & ((1 << bits) - 1)
    if signed:
        raw = torch.where(raw >= 1 << (bits - 1), raw - (1 << bits), raw)
    return raw


FLOAT4 = torch.float4_e2m1fn_x2  # holding one FLOAT4E2M1 value per byte (see sonnx.dtypes)
_FLOAT4_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def decode_float4(x: torch.Tensor) -> torch.Tensor:
    """The float32 values of a FLOAT4E2M1 tensor (sign bit 3, magnitude code bits 0-2)."""
    code = x.view(torch.uint8).to(torch.int64)
    lut = torch.tensor(_FLOAT4_MAGNITUDES, dtype=torch.float32, device=x.device)
    magnitude = lut[code & 7]
    return torch.where((code & 8) != 0, -magnitude, magnitude)


def encode_float4(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest FLOAT4E2M1 value (ties to the even code), saturating at +-6.

    NaN becomes negative zero, as ONNX's reference implementation gives.
    """
    v = x.detach().to(torch.float32)
    lut = torch.tensor(_FLOAT4_MAGNITUDES, dtype=torch.float32, device=v.device)
    distance = (v.abs().clamp(max=6.0).unsqueeze(-1) - lut).abs()
    # On a tie prefer the even code (lowest mantissa bit 0): a tiny penalty on odd codes.
    distance = distance + (torch.arange(8, device=v.device) % 2) * 1e-7
    code = distance.argmin(-1)
    negative = torch.signbit(v) | torch.isnan(v)
    code = torch.where(negative, code | 8, code)
    return code.to(torch.uint8).view(FLOAT4)


def sub_byte_range(dtype: torch.dtype) -> tuple[int, int]:
    """The smallest and largest value of a sub-byte integer type."""
    bits, signed = SUB_BYTE[dtype]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def encode_sub_byte(x: torch.Tensor, target: torch.dtype) -> torch.Tensor:
    """Truncate toward zero and keep the low bits, stored one element per byte."""
    bits, _ = SUB_BYTE[target]
    return (x.to(torch.int64) & ((1 << bits) - 1)).to(torch.uint8).view(target)


def _to_e8m0(x: torch.Tensor, round_mode: str, saturate: bool) -> torch.Tensor:
    """FLOAT8E8M0 holds only a biased exponent: take float32's exponent bits and round the
    mantissa away as ``round_mode`` says (up, down, nearest); NaN (and, without saturation,
    overflow) becomes 0xFF."""
    bits = x.detach().to(torch.float32).view(torch.int32).to(torch.int64)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    if round_mode == "up":
        exponent = exponent + (mantissa != 0).to(torch.int64)
    elif round_mode == "nearest":
        exponent = exponent + (mantissa >= 0x400000).to(torch.int64)
    elif round_mode != "down":
        raise BadInputError(
            f"Cast: round_mode must be 'up', 'down' or 'nearest', received {round_mode!r}"
        )
    special = (bits & 0x7FFFFFFF) >= 0x7F800000  # inf or NaN in float32
    nan = torch.isnan(x.detach().to(torch.float32))
    if saturate:
        exponent = torch.where(special & ~nan, torch.full_like(exponent, 254), exponent)
        exponent = torch.clamp(exponent, max=254)
    exponent = torch.where(nan | (exponent > 254), torch.full_like(exponent, 255), exponent)
    return exponent.to(torch.uint8).view(torch.float8_e8m0fnu)


def onnx_dtype(op: str, code: int, what: str) -> ElementType:
    """The element type for ONNX type ``code``, or an error saying sonnx cannot hold it."""
    try:
        return dtypes.onnx_to_torch(code)
    except BadInputError:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        raise BadInputError(
            f"{op}: {what} {name} is not supported: sonnx has no tensors of that element type"
        ) from None


def _to_float8(x: torch.Tensor, target: torch.dtype, saturate: bool) -> torch.Tensor:
    """Round to nearest even into a float8 type, saturating or not as ONNX's tables say."""
    source = x if x.dtype.is_floating_point and x.dtype not in FLOAT8 else x.to(torch.float32)
    if saturate:
        limit = torch.finfo(target).max
        return torch.clamp(source, -limit, limit).to(target)
    out = source.to(target)
    if target == torch.float8_e4m3fn:
        overflow = torch.abs(source) > _E4M3FN_NAN_ABOVE
        out = torch.where(overflow, torch.full_like(out, float("nan")), out)
    return out


def convert(
    x: torch.Tensor, target: torch.dtype, saturate: bool, round_mode: str = "up"
) -> torch.Tensor:
    """``x`` converted to ``target`` following ONNX Cast's rules."""
    if x.dtype == target:
        return x.clone()
    if not (dtypes.is_float(x.dtype) and dtypes.is_float(target)):
        x = x.detach()  # only float-to-float casts carry a gradient
    if x.dtype in SUB_BYTE:
        x = decode_sub_byte(x)
        if x.dtype == target:
            return x
    if x.dtype == FLOAT4:
        x = decode_float4(x)
    if target == FLOAT4:
        return encode_float4(x)
    if target in SUB_BYTE:
        return encode_sub_byte(x, target)
    if target == torch.float8_e8m0fnu:
        return _to_e8m0(x, round_mode, saturate)
    if target in FLOAT8:
        return _to_float8(x, target, saturate)
    if x.dtype in FLOAT8:
        x = x.to(torch.float32)  # exact; torch converts float8 to few types directly
    return x.to(target)


# The longest leading number C's strtod / strtoll read (onnxruntime parses with std::stod and
# std::stoll): leading whitespace, a sign, then inf/infinity/nan, a hex or a decimal number.
_FLOAT_PREFIX = re.compile(
    r"\s*[+-]?(?:inf(?:inity)?|nan(?:\(\w*\))?"
    r"|0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?"
    r"|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)",
    re.IGNORECASE,
)
_INT_PREFIX = re.compile(r"\s*[+-]?\d+")
_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (-(2**64 - 1), 2**64 - 1)  # strtoull negates a leading minus modulo 2**64


def _parse_float(op: str, text: str) -> float:
    found = _FLOAT_PREFIX.match(text)
    if found is None:
        raise BadInputError(f"{op}: cannot cast string {text!r} to a float: it is not a number")
    number = found[0].strip()
    body = number.lstrip("+-").lower()
    if body.startswith("0x"):
        return float.fromhex(number)
    if body.startswith("nan"):
        return math.copysign(math.nan, -1.0 if number.startswith("-") else 1.0)
    return float(number)


def _parse_int(op: str, text: str, limits: tuple[int, int]) -> int:
    found = _INT_PREFIX.match(text)
    if found is None:
        raise BadInputError(
            f"{op}: cannot cast string {text!r} to an integer: it does not start with digits"
        )
    value = int(found[0])
    if not limits[0] <= value <= limits[1]:
        raise BadInputError(f"{op}: string {text!r} is out of the range of a 64-bit integer")
    return value


def parse_strings(
    op: str, values: np.ndarray, target: torch.dtype, saturate: bool, round_mode: str
) -> torch.Tensor:
    """Strings as numbers of type ``target``, read as onnxruntime reads them.

    Floats: the leading number, in plain or scientific notation (``"1e-5"``), hex
    (``"0x1p3"``) or one of ``INF``, ``+INF``, ``-INF``, ``NaN`` in any case, read in double
    precision and then cast (float8 with ``saturate``). Integers and bool: the leading decimal
    integer (``"100.5"`` gives 100, ``"0.5"`` gives False), wrapped into narrower types.
    Trailing text is ignored; a string that does not start with a number is an error.
    """
    flat = values.reshape(-1)
    if target.is_complex:
        raise BadInputError(f"{op}: strings cannot be cast to {dtypes.dtype_name(target)}")
    if target.is_floating_point:
        parsed = np.array([_parse_float(op, s) for s in flat], dtype=np.float64)
    elif target == torch.uint64:
        parsed = np.array([_parse_int(op, s, _UINT64) % 2**64 for s in flat], dtype=np.uint64)
    else:
        parsed = np.array([_parse_int(op, s, _INT64) for s in flat], dtype=np.int64)
    return convert(numbers(parsed.reshape(values.shape)), target, saturate, round_mode)


def _format_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "INF" if value > 0 else "-INF"
    return f"{value:.8g}"


def format_numbers(op: str, x: torch.Tensor) -> StringArray:
    """Numbers as strings, written as onnxruntime writes them: floats of every width with 8
    significant digits (``"0.1"``, ``"9.9999997e-06"`` for float32 1e-5, ``"1e+20"``), ``INF``,
    ``-INF`` and ``NaN`` for the special values; integers in decimal; bool as ``"1"``/``"0"``.
    """
    if x.dtype.is_complex:
        raise BadInputError(f"{op}: {dtypes.dtype_name(x.dtype)} cannot be cast to strings")
    x = x.detach()
    if x.dtype in SUB_BYTE:
        x = decode_sub_byte(x)
    elif x.dtype == FLOAT4:
        x = decode_float4(x)
    elif x.dtype.is_floating_point and x.dtype != torch.float64:
        x = x.to(torch.float32)
    values = dtypes.torch_to_array(x.cpu()).reshape(-1).tolist()
    if x.dtype == torch.bool:
        text = ["1" if v else "0" for v in values]
    elif x.dtype.is_floating_point:
        text = [_format_float(v) for v in values]
    else:
        text = [str(v) for v in values]
    return StringArray(object_array(text, tuple(x.shape)))


def cast_any(
    op: str, x: torch.Tensor | StringArray, target: ElementType, saturate: bool, round_mode: str
) -> torch.Tensor | StringArray:
    """``x`` (numbers or strings) converted to ``target`` (a torch dtype or STRING)."""
    if type(x) is StringArray:
        if target is STRING:
            return x.clone()
        return parse_strings(op, x.array, target, saturate, round_mode)
    if target is STRING:
        return format_numbers(op, x)
    return convert(x, target, saturate, round_mode)


class Cast(Operator):
    """Attribute ``to``: the ONNX element-type code; ``saturate`` (opset 19+) governs float8
    overflow; ``round_mode`` (opset 24+) governs rounding into FLOAT8E8M0."""

    op_type = "Cast"
    since_versions = (6, 9, 13, 19, 21, 23, 24, 25, 28)
    takes_strings = True
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor | StringArray) -> torch.Tensor | StringArray:
        target = onnx_dtype(self.op_type, self.attr("to"), "target type (attribute to)")
        saturate, round_mode = self.attr("saturate") != 0, self.attr("round_mode") or "up"
        return cast_any(self.op_type, x, target, saturate, round_mode)

    def export_attrs(self, g: GraphBuilder) -> dict[str, Any]:
        return _cast_attrs(self, g, dtypes.onnx_to_torch(self.attr("to")))


def _cast_attrs(op: Operator, g: GraphBuilder, target: ElementType) -> dict[str, Any]:
    """``to`` plus the attributes that exist at ``g.opset`` (saturate 19+, round_mode 24+)."""
    if target in FLOAT8 and g.opset < 19:
        raise OpsetTooOldError(
            f"{op.op_type} to {dtypes.dtype_name(target)} needs opset 19 or later, exporting at "
            f"{g.opset}",
            19,
        )
    attrs: dict[str, Any] = {"to": dtypes.torch_to_onnx(target)}
    if g.opset >= 19 and op.attrs.get("saturate") is not None:
        attrs["saturate"] = op.attrs["saturate"]
    if g.opset >= 24 and op.attrs.get("round_mode") is not None:
        attrs["round_mode"] = op.attrs["round_mode"]
    return attrs


class CastLike(Operator):
    """Cast ``input`` to the element type of ``target_type`` (whose values are ignored)."""

    op_type = "CastLike"
    since_versions = (15, 19, 21, 23, 24, 25)
    takes_strings = True
    output_shape = OutputShape.FROM_SHAPES
    # Only target_type's element type is read.
    parameterising_inputs = frozenset({1})

    singa_functions = (
        SingaFunction(
            "cast_like",
            "``x`` converted to ``target``'s element type (ONNX ``CastLike``).",
            inputs=(
                Input("x", "the tensor to convert."),
                Input("target", "a tensor whose element type to take (its values are not read)."),
            ),
            returns="a tensor of ``x``'s shape in ``target``'s type.",
            keywords=(
                Keyword(
                    "saturate",
                    (
                        "for float8 targets, 1 clamps out-of-range values to the largest finite "
                        "value, 0 makes them inf or NaN."
                    ),
                ),
            ),
            raises=(("BadInputError", "a string is not a number of ``target``'s type."),),
        ),
    )

    def forward(
        self, x: torch.Tensor | StringArray, target_type: torch.Tensor | StringArray
    ) -> torch.Tensor | StringArray:
        saturate, round_mode = self.attr("saturate") != 0, self.attr("round_mode") or "up"
        return cast_any(self.op_type, x, target_type.dtype, saturate, round_mode)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Before opset 15 (no CastLike) the target type is known here, so write a Cast."""
        target = self.inputs[1]
        if target is None:
            raise ExportError("CastLike: input target_type is missing")
        if g.opset >= 15:
            attrs = {k: v for k, v in _cast_attrs(self, g, target.dtype).items() if k != "to"}
            g.add_node(self.op_type, inputs, outputs, **attrs)
        else:
            g.add_node("Cast", inputs[:1], outputs, **_cast_attrs(self, g, target.dtype))


class BitCast(Operator):
    """Reinterpret the bits as type ``to`` (same element width; little-endian, as torch)."""

    op_type = "BitCast"
    since_versions = (26,)
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        target = onnx_dtype(self.op_type, self.attr("to"), "target type (attribute to)")
        if target is STRING:
            raise BadInputError("BitCast: strings have no fixed bit width; use Cast")
        if x.dtype.itemsize != target.itemsize:
            raise BadInputError(
                f"BitCast: the target type must have the input's bit width; input is "
                f"{dtypes.dtype_name(x.dtype)} ({8 * x.dtype.itemsize} bits), received "
                f"to={dtypes.dtype_name(target)} ({8 * target.itemsize} bits)"
            )
        return x.detach().view(target).clone()


def _onnx_code(dtype: Any) -> int:
    return dtypes.torch_to_onnx(dtypes.as_torch_dtype(dtype))


def cast(x: Tensor, to: Any) -> Tensor:
    """``x`` converted to ``to``, following ONNX ``Cast``'s rules (strings parse and print as
    onnxruntime does).

    :param x: the tensor to convert.
    :param to: the target type: a torch or NumPy dtype, a name (``"float16"``) or an ONNX code.
    :returns: a tensor of ``x``'s shape in type ``to``.
    :raises BadInputError: ``to`` is not a data type sonnx holds, or a string is not a number.
    """
    return Cast(to=_onnx_code(to))(x)


def bitcast(x: Tensor, to: Any) -> Tensor:
    """``x``'s bits reinterpreted as type ``to`` of the same width (ONNX ``BitCast``).

    :param x: a tensor of a fixed-width type (not strings).
    :param to: the target type, as for :func:`cast`, of ``x``'s bit width.
    :returns: a tensor of ``x``'s shape in type ``to``.
    :raises BadInputError: ``to`` is not a data type or is the string type, or the widths differ.
    """
    return BitCast(to=_onnx_code(to))(x)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def cast_like(x: Tensor, target: Tensor, saturate: int = 1) -> Tensor:
    """``x`` converted to ``target``'s element type (ONNX ``CastLike``).

    :param x: the tensor to convert.
    :param target: a tensor whose element type to take (its values are not read).
    :param saturate: for float8 targets, 1 clamps out-of-range values to the largest finite value, 0
        makes them inf or NaN.
    :returns: a tensor of ``x``'s shape in ``target``'s type.
    :raises BadInputError: a string is not a number of ``target``'s type.
    """
    return CastLike(saturate=saturate)(x, target)

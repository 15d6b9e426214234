"""The integer types a model is quantized to, and scales and zero points as onnxruntime
computes them (``onnxruntime.quantization.quant_utils``), so that a model quantized here and
one quantized by onnxruntime carry the same numbers.

Types are named by strings (``"int8"``, ``"uint8"``, ``"int16"``, ``"uint16"``, ``"int4"``,
``"uint4"``) or by onnxruntime's ``QuantType`` members, recognised by their ``name``
(``QInt8`` ...) so that onnxruntime need not be installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from sonnx.errors import BadInputError

__all__ = ["QType", "compute_scale_zp", "data_quant_params", "qtype", "quantize_array"]


@dataclass(frozen=True)
class QType:
    """One quantized integer type: its ONNX element type and its full, symmetric and reduced
    ranges (onnxruntime's ``ONNX_INT_TYPE_RANGE``, ``..._SYMMETRIC_RANGE``,
    ``..._REDUCED_RANGE``)."""

    name: str
    onnx_type: int
    full: tuple[int, int]
    symmetric: tuple[int, int]
    reduced: tuple[int, int]
    bits: int = 8

    @property
    def signed(self) -> bool:
        return self.full[0] < 0

    def qmin_qmax(self, reduce_range: bool, symmetric: bool) -> tuple[int, int]:
        """onnxruntime's ``get_qmin_qmax_for_qType``: the reduced range wins over the
        symmetric one, which only the signed 8- and 16-bit types have."""
        if reduce_range:
            return self.reduced
        return self.symmetric if symmetric else self.full


_TYPES = {
    "int8": QType("int8", onnx.TensorProto.INT8, (-128, 127), (-127, 127), (-64, 64)),
    "uint8": QType("uint8", onnx.TensorProto.UINT8, (0, 255), (0, 255), (0, 127)),
    "int16": QType(
        "int16", onnx.TensorProto.INT16, (-32768, 32767), (-32767, 32767), (-16384, 16384), 16
    ),
    "uint16": QType("uint16", onnx.TensorProto.UINT16, (0, 65535), (0, 65535), (0, 32767), 16),
    "int4": QType("int4", onnx.TensorProto.INT4, (-8, 7), (-8, 7), (-4, 3), 4),
    "uint4": QType("uint4", onnx.TensorProto.UINT4, (0, 15), (0, 15), (0, 7), 4),
}
#: onnxruntime's QuantType member names.
_ORT_NAMES = {
    "QInt8": "int8",
    "QUInt8": "uint8",
    "QInt16": "int16",
    "QUInt16": "uint16",
    "QInt4": "int4",
    "QUInt4": "uint4",
}


def qtype(value: Any, what: str) -> QType:
    """The :class:`QType` named by ``value``: a string such as ``"int8"`` or an onnxruntime
    ``QuantType`` member.

    :raises BadInputError: ``value`` names no supported type (float 8 included), naming
        ``what`` (the argument) and ending in what was received.
    """
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if isinstance(name, str):
        key = _ORT_NAMES.get(name, name.lower())
        if key in _TYPES:
            return _TYPES[key]
    raise BadInputError(
        f"quantize_static: {what} must be one of {sorted(_TYPES)} or an onnxruntime QuantType "
        f"of those ({', '.join(_ORT_NAMES)}), received {value!r}"
    )


def compute_scale_zp(
    rmin: np.ndarray,
    rmax: np.ndarray,
    qmin: int,
    qmax: int,
    symmetric: bool,
    min_real_range: float | None = None,
) -> tuple[int, np.ndarray]:
    """Zero point and scale mapping ``[rmin, rmax]`` (widened to hold 0) onto
    ``[qmin, qmax]``: onnxruntime's ``compute_scale_zp``, float64 arithmetic, the scale
    stored in ``rmax``'s float type. A range narrower than that type's smallest normal gives
    scale 1 and zero point 0."""
    dtype = np.asarray(rmax).dtype
    rmin = np.minimum(rmin, np.array(0, dtype=dtype))
    rmax = np.maximum(rmax, np.array(0, dtype=dtype))
    if min_real_range is not None:
        rmax = max(rmax, rmin + np.asarray(min_real_range, dtype=dtype))
    if symmetric:
        absmax = np.maximum(np.abs(rmin), np.abs(rmax))
        rmin, rmax = -absmax, +absmax
    dr = np.array(rmax, dtype=np.float64) - np.array(rmin, dtype=np.float64)
    scale = np.array(dr / (np.float64(qmax) - np.float64(qmin)))
    if scale < np.finfo(dtype).tiny:
        return 0, np.array(1.0, dtype=dtype)
    if symmetric:
        zero_point = int(np.round((qmin + qmax) / np.float64(2.0)))
    else:
        zero_point = int(np.round(qmin - rmin / scale))
    return zero_point, scale.astype(dtype)


def data_quant_params(
    data: np.ndarray,
    qt: QType,
    symmetric: bool,
    reduce_range: bool,
    min_real_range: float | None = None,
) -> tuple[int, np.ndarray]:
    """Zero point and scale for a weight's values (onnxruntime's
    ``compute_data_quant_params``): the range is the data's min and max."""
    if not data.size:
        return 0, np.array(1.0, dtype=data.dtype)
    qmin, qmax = qt.qmin_qmax(reduce_range, symmetric)
    rmin = np.array(data.min(), dtype=data.dtype)
    rmax = np.array(data.max(), dtype=data.dtype)
    return compute_scale_zp(rmin, rmax, qmin, qmax, symmetric, min_real_range)


def quantize_array(data: np.ndarray, qt: QType, scale: np.ndarray, zero_point: int) -> np.ndarray:
    """``round_half_even(data / scale) + zero_point`` in float32, saturated to the type's full
    range (onnxruntime's ``quantize_nparray``), as int8/uint8/int16/uint16 values (4-bit
    values in int8 or uint8)."""
    q = (data.astype(np.float32) / np.float32(scale)).round() + np.float32(zero_point)
    np.clip(q, qt.full[0], qt.full[1], out=q)
    if qt.bits == 4:
        return q.astype(np.int8 if qt.signed else np.uint8)
    return q.astype(onnx.helper.tensor_dtype_to_np_dtype(qt.onnx_type))

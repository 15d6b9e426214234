"""One table of element types: ONNX ``TensorProto`` codes <-> torch dtypes <-> NumPy dtypes.

sonnx never narrows types silently: an int64 stays int64 and a float64 stays float64.
Strings, which torch cannot hold, have the element type :data:`STRING` (see
:mod:`sonnx.strings`); it stands where a torch dtype would.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
from onnx import TensorProto

from sonnx.errors import BadInputError

# (ONNX code, torch dtype, NumPy dtype: ml_dtypes' types where NumPy itself has none)
_TABLE: list[tuple[int, torch.dtype, np.dtype | None]] = [
    (TensorProto.FLOAT, torch.float32, np.dtype(np.float32)),
    (TensorProto.DOUBLE, torch.float64, np.dtype(np.float64)),
    (TensorProto.FLOAT16, torch.float16, np.dtype(np.float16)),
    (TensorProto.BFLOAT16, torch.bfloat16, np.dtype(ml_dtypes.bfloat16)),
    (TensorProto.INT8, torch.int8, np.dtype(np.int8)),
    (TensorProto.INT16, torch.int16, np.dtype(np.int16)),
    (TensorProto.INT32, torch.int32, np.dtype(np.int32)),
    (TensorProto.INT64, torch.int64, np.dtype(np.int64)),
    (TensorProto.UINT8, torch.uint8, np.dtype(np.uint8)),
    (TensorProto.UINT16, torch.uint16, np.dtype(np.uint16)),
    (TensorProto.UINT32, torch.uint32, np.dtype(np.uint32)),
    (TensorProto.UINT64, torch.uint64, np.dtype(np.uint64)),
    (TensorProto.BOOL, torch.bool, np.dtype(np.bool_)),
    (TensorProto.COMPLEX64, torch.complex64, np.dtype(np.complex64)),
    (TensorProto.COMPLEX128, torch.complex128, np.dtype(np.complex128)),
    (TensorProto.FLOAT8E4M3FN, torch.float8_e4m3fn, np.dtype(ml_dtypes.float8_e4m3fn)),
    (TensorProto.FLOAT8E4M3FNUZ, torch.float8_e4m3fnuz, np.dtype(ml_dtypes.float8_e4m3fnuz)),
    (TensorProto.FLOAT8E5M2, torch.float8_e5m2, np.dtype(ml_dtypes.float8_e5m2)),
    (TensorProto.FLOAT8E5M2FNUZ, torch.float8_e5m2fnuz, np.dtype(ml_dtypes.float8_e5m2fnuz)),
    (TensorProto.FLOAT8E8M0, torch.float8_e8m0fnu, np.dtype(ml_dtypes.float8_e8m0fnu)),
    # Sub-byte integers: one element per byte (the low bits), as ml_dtypes stores them.
    # torch has these dtypes for storage only; sonnx.operators.elementwise.cast converts them.
    (TensorProto.INT4, torch.int4, np.dtype(ml_dtypes.int4)),
    (TensorProto.UINT4, torch.uint4, np.dtype(ml_dtypes.uint4)),
    (TensorProto.INT2, torch.int2, np.dtype(ml_dtypes.int2)),
    (TensorProto.UINT2, torch.uint2, np.dtype(ml_dtypes.uint2)),
    # torch's only 4-bit float is the packed float4_e2m1fn_x2; sonnx stores one FLOAT4E2M1
    # value per byte in it (low bits, as ml_dtypes does) and converts in
    # sonnx.operators.elementwise.cast.
    (TensorProto.FLOAT4E2M1, torch.float4_e2m1fn_x2, np.dtype(ml_dtypes.float4_e2m1fn)),
]


class StringDType:
    """The element type of string tensors (ONNX ``STRING``), for which torch has no dtype.
    There is one instance, :data:`STRING`; it prints as ``string``."""

    is_floating_point = False
    is_complex = False
    is_signed = False

    def __repr__(self) -> str:
        return "string"

    def __reduce__(self) -> str:
        return "STRING"


STRING = StringDType()
ElementType = torch.dtype | StringDType

_ONNX_TO_TORCH: dict[int, ElementType] = {code: t for code, t, _ in _TABLE}
_ONNX_TO_TORCH[TensorProto.STRING] = STRING
_TORCH_TO_ONNX: dict[ElementType, int] = {t: code for code, t, _ in _TABLE}
_TORCH_TO_ONNX[STRING] = TensorProto.STRING
_NUMPY_TO_TORCH = {n: t for _, t, n in _TABLE if n is not None}
_TORCH_TO_NUMPY = {t: n for _, t, n in _TABLE if n is not None}

FLOAT_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def onnx_type_name(code: int) -> str:
    """The name ONNX gives an element-type code (``FLOAT``, ``INT64``).

    :param code: a ``TensorProto.DataType`` code.
    :returns: the upper-case name.
    :raises ValueError: ``code`` is not an ONNX element type.
    """
    return TensorProto.DataType.Name(code)


def dtype_name(dtype: object) -> str:
    """An element type as sonnx shows it to users: ``float32``, ``int64``, ``bool``,
    ``bfloat16``, ``string`` (the lower-case names of ONNX's types that NumPy also uses, never
    torch's ``torch.float32``); ``?`` for None. Accepts whatever :func:`as_torch_dtype` accepts.

    :param dtype: a torch or NumPy dtype, a type name, an ONNX code or None.
    :returns: the name; ``str(dtype)`` for a value that is no data type.
    """
    if dtype is None:
        return "?"
    try:
        element = as_torch_dtype(dtype)
    except (BadInputError, TypeError):
        return str(dtype)
    if element is STRING:
        return "string"
    known = _TORCH_TO_NUMPY.get(element)
    return known.name if known is not None else str(element).removeprefix("torch.")


def onnx_to_torch(code: int) -> ElementType:
    """The torch dtype for an ONNX element-type code (:data:`STRING` for strings).

    :param code: a ``TensorProto.DataType`` code.
    :returns: the torch dtype, or :data:`STRING`.
    :raises BadInputError: no torch dtype holds that ONNX type; the message lists those that do.
    """
    try:
        return _ONNX_TO_TORCH[code]
    except KeyError:
        raise BadInputError(
            f"ONNX element type {onnx_type_name(code)} has no torch equivalent; supported: "
            + ", ".join(onnx_type_name(c) for c in _ONNX_TO_TORCH)
        ) from None


def torch_to_onnx(dtype: ElementType) -> int:
    """The ONNX element-type code for a torch dtype.

    :param dtype: a torch dtype, or :data:`STRING`.
    :returns: the ``TensorProto.DataType`` code.
    :raises BadInputError: ``dtype`` has no ONNX element type.
    """
    try:
        return _TORCH_TO_ONNX[dtype]
    except KeyError:
        raise BadInputError(f"torch dtype {dtype} has no ONNX element type") from None


def numpy_to_torch(dtype: np.dtype | type) -> torch.dtype:
    """The torch dtype for a NumPy dtype (ml_dtypes' bfloat16 and float8 types included).

    :param dtype: a NumPy dtype or scalar type.
    :returns: the torch dtype.
    :raises BadInputError: no torch dtype holds that NumPy type.
    """
    np_dtype = np.dtype(dtype)
    try:
        return _NUMPY_TO_TORCH[np_dtype]
    except KeyError:
        raise BadInputError(f"NumPy dtype {np_dtype} has no torch equivalent") from None


def torch_to_numpy(dtype: ElementType) -> np.dtype | None:
    """The NumPy dtype for a torch dtype (ml_dtypes' for bfloat16 and float8; ``object`` for
    strings), or None.

    :param dtype: a torch dtype, or :data:`STRING`.
    :returns: the NumPy dtype, or None where NumPy has none.
    """
    if dtype is STRING:
        return np.dtype(object)
    return _TORCH_TO_NUMPY.get(dtype)


def _bits_view(itemsize: int) -> tuple[np.dtype, torch.dtype]:
    return {1: (np.dtype(np.uint8), torch.uint8), 2: (np.dtype(np.uint16), torch.uint16)}[itemsize]


def array_to_torch(array: np.ndarray) -> torch.Tensor:
    """A torch tensor with ``array``'s values and exact type; zero-copy where possible.

    ml_dtypes arrays (bfloat16, float8) are reinterpreted bit for bit, since torch cannot read
    them directly.

    :param array: a NumPy array (or anything ``np.asarray`` takes).
    :returns: a host torch tensor of the same shape and element type.
    :raises BadInputError: no torch dtype holds the array's type.
    """
    array = np.asarray(array)
    if not array.flags.c_contiguous or not array.flags.writeable:
        # a copy: torch cannot share read-only memory (e.g. arrays over protobuf bytes), and
        # np.ascontiguousarray would turn a 0-d array into a 1-d one
        array = array.copy(order="C")
    target = _NUMPY_TO_TORCH.get(array.dtype)
    if target is None:
        raise BadInputError(f"NumPy dtype {array.dtype} has no torch equivalent")
    if array.dtype.kind in "biufc" and array.dtype.type.__module__ == "numpy":
        return torch.from_numpy(array)
    np_bits, torch_bits = _bits_view(array.dtype.itemsize)
    return torch.from_numpy(array.view(np_bits)).view(torch_bits).view(target)


def torch_to_array(t: torch.Tensor) -> np.ndarray:
    """The values of a (host) torch tensor as a NumPy array of the exact same type.

    :param t: a torch tensor on the host.
    :returns: a NumPy array of ``t``'s shape and element type (sharing memory where it can).
    :raises BadInputError: NumPy has no type for ``t``'s dtype.
    """
    target = _TORCH_TO_NUMPY.get(t.dtype)
    if target is None:
        raise BadInputError(f"torch dtype {t.dtype} has no NumPy equivalent")
    if target.type.__module__ == "numpy":
        return t.numpy()
    np_bits, torch_bits = _bits_view(target.itemsize)
    return t.contiguous().view(torch_bits).numpy().view(np_bits).view(target)


def as_torch_dtype(dtype: object) -> ElementType:
    """Accept a torch dtype, a NumPy dtype/type, a type name (``"float32"``, ``"string"``) or
    an ONNX code.

    :param dtype: the element type, in any of those spellings.
    :returns: the torch dtype, or :data:`STRING` for strings.
    :raises BadInputError: ``dtype`` is not a data type, or no torch dtype holds it.
    """
    if isinstance(dtype, (torch.dtype, StringDType)):
        return dtype
    if (isinstance(dtype, str) and dtype == "string") or dtype in (str, np.str_, np.bytes_):
        return STRING
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return onnx_to_torch(dtype)
    if (
        isinstance(dtype, str)
        and hasattr(torch, dtype)
        and isinstance(getattr(torch, dtype), torch.dtype)
    ):
        return getattr(torch, dtype)
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise BadInputError(f"not a data type: {dtype!r}") from None
    return STRING if np_dtype.kind in "OUS" else numpy_to_torch(np_dtype)


def is_float(dtype: ElementType) -> bool:
    """True for the floating types that carry gradients (float16, bfloat16, float32, float64).

    :param dtype: a torch dtype, or :data:`STRING`.
    :returns: whether ``dtype`` is one of them.
    """
    return dtype in FLOAT_DTYPES

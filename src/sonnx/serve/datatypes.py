"""The KServe v2 datatypes and how they map to NumPy dtypes and ONNX element types.

One table per direction, so the codec, the model signature and the responses agree on every
name. BYTES is ONNX STRING and decodes to an object array of ``str`` (what sonnx runs string
tensors on); BF16 uses ml_dtypes' bfloat16 (NumPy has none), as tritonclient does.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from sonnx.serve.errors import UnsupportedError

# KServe datatype name -> NumPy dtype of the decoded array (BYTES: an object array of str).
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "BYTES": np.dtype(object),
}

_ONNX_TO_DATATYPE: dict[int, str] = {
    TensorProto.BOOL: "BOOL",
    TensorProto.UINT8: "UINT8",
    TensorProto.UINT16: "UINT16",
    TensorProto.UINT32: "UINT32",
    TensorProto.UINT64: "UINT64",
    TensorProto.INT8: "INT8",
    TensorProto.INT16: "INT16",
    TensorProto.INT32: "INT32",
    TensorProto.INT64: "INT64",
    TensorProto.FLOAT16: "FP16",
    TensorProto.FLOAT: "FP32",
    TensorProto.DOUBLE: "FP64",
    TensorProto.BFLOAT16: "BF16",
    TensorProto.STRING: "BYTES",
}


_NUMPY_TO_DATATYPE = {dtype: name for name, dtype in DATATYPES.items()}


def datatype_of_array(array: np.ndarray, what: str) -> str:
    """The KServe datatype of a computed array (the model's declared type may be wrong)."""
    try:
        return _NUMPY_TO_DATATYPE[array.dtype]
    except KeyError:
        raise UnsupportedError(
            f"{what} has NumPy dtype {array.dtype}, which has no KServe v2 datatype"
        ) from None


def datatype_of_onnx(code: int, what: str) -> str:
    """The KServe datatype of an ONNX element type (STRING is BYTES)."""
    try:
        return _ONNX_TO_DATATYPE[code]
    except KeyError:
        raise UnsupportedError(
            f"{what} has ONNX element type {TensorProto.DataType.Name(code)}, which has no "
            "KServe v2 datatype; supported: " + ", ".join(DATATYPES)
        ) from None

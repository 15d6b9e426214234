"""Decoding ONNX ``AttributeProto`` values into plain Python for converters.

ints and floats stay scalars, strings become ``str``, tensors become NumPy arrays (exactly,
including types NumPy lacks via onnx's own helpers), graphs stay ``GraphProto``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import AttributeProto, helper, numpy_helper


def _decode_string(b: bytes) -> str:
    return b.decode("utf-8")


def decode_attribute(attr: onnx.AttributeProto) -> Any:
    """The value of one attribute in the form converters expect."""
    t = attr.type
    if t == AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t)
    if t == AttributeProto.TENSORS:
        return [numpy_helper.to_array(x) for x in attr.tensors]
    if t == AttributeProto.STRING:
        return _decode_string(attr.s)
    if t == AttributeProto.STRINGS:
        return [_decode_string(s) for s in attr.strings]
    if t == AttributeProto.SPARSE_TENSOR:
        return densify(attr.sparse_tensor)
    value = helper.get_attribute_value(attr)
    if t == AttributeProto.INTS or t == AttributeProto.FLOATS:
        return list(value)
    return value


def densify(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """A dense NumPy array with a sparse tensor's values (indices flat or per-coordinate)."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    dims = tuple(sparse.dims)
    dense = np.zeros(int(np.prod(dims)), dtype=values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(indices.T, dims)
    dense[flat] = values
    return dense.reshape(dims)


def schema_of(
    op_type: str, since_version: int | None, domain: str = ""
) -> onnx.defs.OpSchema | None:
    """The operator's schema in ``onnx.defs`` (the newest when version is None; ``ai.onnx``
    is the default domain), or None where onnx has none (``com.microsoft``'s operators).

    :param op_type: the operator.
    :param since_version: any opset: the schema in force at it is returned.
    :param domain: the operator's domain.
    :returns: the schema, or None.
    """
    d = "" if domain == "ai.onnx" else domain
    try:
        if since_version is None:
            return onnx.defs.get_schema(op_type, d)
        return onnx.defs.get_schema(op_type, since_version, d)
    except onnx.defs.SchemaError:
        return None


@cache
def schema_defaults(op_type: str, since_version: int | None, domain: str = "") -> dict[str, Any]:
    """Decoded default attribute values from ``onnx.defs`` (newest schema when version is None).

    ``since_version`` may be any opset: the schema in force at that opset is used.
    """
    schema = schema_of(op_type, since_version, domain)
    if schema is None:
        return {}
    defaults: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        if attr.default_value is not None and attr.default_value.type != 0:
            defaults[name] = decode_attribute(attr.default_value)
    return defaults

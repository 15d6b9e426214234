"""Table lookups of the ``ai.onnx.ml`` domain: LabelEncoder (versions 1, 2 and 4) and
CategoryMapper, between strings and numbers.

Both map each element of X through a key -> value table given as attributes, with a default
for keys not in the table. Strings are looked up in a dict; numbers by a binary search over the
sorted keys (from version 4 a NaN finds a NaN key, as in onnxruntime), on the host either way:
the tables come from attributes and the strings live there. Nothing here is differentiable.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.operators.ml.common import MLOperator
from sonnx.strings import StringArray, numbers, object_array

__all__ = ["CategoryMapper", "LabelEncoder"]

# LabelEncoder's list attributes by element kind, and the NumPy type each gives.
_KINDS = {"floats": np.dtype(np.float32), "int64s": np.dtype(np.int64), "strings": None}


def lookup(
    x: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any, nan_keys: bool = False
) -> np.ndarray:
    """``values[i]`` where ``x == keys[i]``, else ``default``, elementwise, in values' type;
    with ``nan_keys`` a NaN finds a NaN key."""
    out_dtype = values.dtype
    if x.dtype == object or keys.dtype == object:
        table = dict(zip(keys.tolist(), values.tolist(), strict=True))
        flat = [table.get(v, default) for v in x.reshape(-1).tolist()]
        out = np.empty(len(flat), dtype=out_dtype)
        out[:] = flat
        return out.reshape(x.shape)
    keys = keys.astype(x.dtype)
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_values = keys[order], values[order]
    if not len(keys):
        return np.full(x.shape, default, dtype=out_dtype)
    position = np.clip(np.searchsorted(sorted_keys, x), 0, len(keys) - 1)
    found = sorted_keys[position]
    hit = found == x
    if nan_keys and x.dtype.kind == "f":
        hit |= np.isnan(found) & np.isnan(x)
    return np.where(hit, sorted_values[position], np.asarray(default, dtype=out_dtype))


def _host(op_type: str, x: Any) -> np.ndarray:
    if type(x) is StringArray:
        return x.array
    if not isinstance(x, torch.Tensor):
        raise BadInputError(f"{op_type}: input X must be a tensor, received {type(x).__name__}")
    return dtypes.torch_to_array(x.detach().cpu())


def _result(values: np.ndarray) -> StringArray | torch.Tensor:
    return StringArray(values) if values.dtype == object else numbers(values)


def _strings(values: Any) -> np.ndarray:
    return object_array([v.decode() if isinstance(v, bytes) else str(v) for v in values])


class LabelEncoder(MLOperator):
    """ai.onnx.ml LabelEncoder: each element of X replaced by its value in the key -> value
    table (``default_*`` when absent).

    Version 1 maps strings to their index in ``classes_strings`` or indices back to strings;
    version 2 gives ``keys_*``/``values_*`` lists of floats, int64s or strings; version 4 may
    give them as tensors (``keys_tensor``, ``values_tensor``, ``default_tensor``) of any type.
    """

    op_type = "LabelEncoder"
    since_versions = (1, 2, 4)
    takes_strings = True

    def forward(self, x: Any) -> StringArray | torch.Tensor:
        host = _host(self.op_type, x)
        if self.version is not None and self.version < 2:
            return _result(self._version_1(host))
        keys = self._column("keys")
        values = self._column("values")
        if len(keys) != len(values):
            raise BadInputError(
                f"LabelEncoder: keys and values must have the same length, received "
                f"{len(keys)} keys and {len(values)} values"
            )
        if (keys.dtype == object) != (host.dtype == object):
            raise BadInputError(
                f"LabelEncoder: input X must be of the keys' type "
                f"({dtypes.dtype_name(keys.dtype)}), received {dtypes.dtype_name(host.dtype)}"
            )
        nan_keys = self.version is None or self.version >= 4  # as onnxruntime
        return _result(lookup(host, keys, values, self._default(values), nan_keys))

    def _version_1(self, host: np.ndarray) -> np.ndarray:
        classes = _strings(self.attr("classes_strings") or [])
        index = np.arange(len(classes), dtype=np.int64)
        if host.dtype == object:
            return lookup(host, classes, index, int(self.attr("default_int64")))
        return lookup(host.astype(np.int64), index, classes, str(self.attr("default_string")))

    def _column(self, prefix: str) -> np.ndarray:
        """The keys or values, from whichever ``<prefix>_*`` attribute is set."""
        tensor = self.attrs.get(f"{prefix}_tensor")
        if tensor is not None:
            array = np.asarray(tensor).reshape(-1)
            return _strings(array) if array.dtype.kind in "OUS" else array
        given = [k for k in _KINDS if self.attrs.get(f"{prefix}_{k}") is not None]
        if len(given) != 1:
            raise BadInputError(
                f"LabelEncoder: exactly one of {[f'{prefix}_{k}' for k in _KINDS]} (or "
                f"{prefix}_tensor) must be set, received {[f'{prefix}_{k}' for k in given]}"
            )
        kind = given[0]
        raw = self.attrs[f"{prefix}_{kind}"]
        return _strings(raw) if _KINDS[kind] is None else np.asarray(raw, dtype=_KINDS[kind])

    def _default(self, values: np.ndarray) -> Any:
        tensor = self.attrs.get("default_tensor")
        if tensor is not None:
            value = np.asarray(tensor).reshape(-1)[0]
            return value.decode() if isinstance(value, bytes) else value
        if values.dtype == object:
            return str(self.attr("default_string"))
        if values.dtype.kind == "f":
            return float(self.attr("default_float"))
        return int(self.attr("default_int64"))


class CategoryMapper(MLOperator):
    """ai.onnx.ml CategoryMapper: strings to int64 through the pairs (``cats_strings[i]``,
    ``cats_int64s[i]``) or int64 back to strings; ``default_int64`` / ``default_string`` for
    values not in the table."""

    op_type = "CategoryMapper"
    since_versions = (1,)
    takes_strings = True

    def forward(self, x: Any) -> StringArray | torch.Tensor:
        host = _host(self.op_type, x)
        names = _strings(self.attr("cats_strings") or [])
        ids = np.asarray(self.attr("cats_int64s") or [], dtype=np.int64)
        if len(names) != len(ids):
            raise BadInputError(
                f"CategoryMapper: cats_strings and cats_int64s must have the same length, "
                f"received {len(names)} and {len(ids)}"
            )
        if host.dtype == object:
            return _result(lookup(host, names, ids, int(self.attr("default_int64"))))
        if host.dtype != np.int64:
            raise BadInputError(
                f"CategoryMapper: input X must be strings or int64, received "
                f"{dtypes.dtype_name(host.dtype)}"
            )
        return _result(lookup(host, ids, names, str(self.attr("default_string"))))

"""What a graph input declares: its element type and shape, as :class:`InputSpec`.

:attr:`~sonnx.runtime.rep.SingaRep.input_specs` lists one per input to feed; a run checks what
it is fed against them, and error messages and ``sonnx info`` print them in ONNX's words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import onnx
import torch

from sonnx import dtypes
from sonnx.tensor import Tensor

__all__ = ["InputSpec", "cast_hint", "declared_dims", "input_spec", "is_map_list"]


@dataclass(frozen=True)
class InputSpec:
    """A graph input's declared element type and shape (None or a name for a free dim):
    :attr:`SingaRep.input_specs` lists one per input to feed.

    :param name: the input's name in the graph.
    :param dtype: its element type, a torch dtype (a map's value type; None: not declared).
    :param shape: its dims: an int when fixed, None or a name when free (None: no shape).
    :param kind: ONNX's type kind (``"tensor_type"``, ``"sequence_type"``, ``"map_type"``, ...).
    """

    name: str
    dtype: Any
    shape: tuple[int | str | None, ...] | None
    kind: str = "tensor_type"

    @cached_property
    def _fixed_sizes(self) -> tuple[tuple[int, int], ...]:
        """The declared sizes that are numbers, by dimension."""
        return tuple((i, d) for i, d in enumerate(self.shape or ()) if isinstance(d, int))

    @cached_property
    def plain_array_dtype(self) -> np.dtype | None:
        """The NumPy type of a plain numeric array this tensor input takes as it is (None:
        not a tensor input of a NumPy-native number type)."""
        if self.kind != "tensor_type" or self.dtype is None:
            return None
        found = dtypes.torch_to_numpy(self.dtype)
        if found is None or found.kind not in "biufc" or found.type.__module__ != "numpy":
            return None
        return found

    def admits(self, sizes: Sequence[int]) -> bool:
        """Whether a tensor of ``sizes`` has the declared rank and fixed sizes.

        :param sizes: a tensor's shape.
        :returns: True when it fits the declared shape (always, with no shape declared).
        """
        if self.shape is None:
            return True
        if len(sizes) != len(self.shape):
            return False
        return all(sizes[i] == d for i, d in self._fixed_sizes)

    def describe(self) -> str:
        """The type in ONNX's words, as error messages and ``sonnx info`` print it.

        :returns: e.g. ``"float32 (batch, 1, 28, 28)"``; ``?`` for an unnamed dim or no shape.
        """
        dims = (
            "?"
            if self.shape is None
            else "(" + ", ".join("?" if d is None else str(d) for d in self.shape) + ")"
        )
        return f"{dtypes.dtype_name(self.dtype)} {dims}"


def declared_dims(value: onnx.ValueInfoProto) -> tuple[int | str | None, ...] | None:
    """A tensor value's declared dims (an int, a symbolic name, or None), or None if unknown."""
    tt = value.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.WhichOneof("value") == "dim_value" and d.dim_value > 0:
            dims.append(d.dim_value)
        else:
            # A -1 or 0 dim_value (paddle2onnx writes -1) or a missing dim means any size, as
            # in onnxruntime.
            dims.append(d.dim_param or None)
    return tuple(dims)


def input_spec(value: onnx.ValueInfoProto) -> InputSpec:
    """The :class:`InputSpec` of a graph input's declared type."""
    kind = value.type.WhichOneof("value")
    if kind == "map_type":
        values = value.type.map_type.value_type.tensor_type.elem_type
        return InputSpec(value.name, dtypes.onnx_to_torch(values) if values else None, None, kind)
    if kind != "tensor_type":
        return InputSpec(value.name, None, None, kind or "tensor_type")
    tt = value.type.tensor_type
    dtype = dtypes.onnx_to_torch(tt.elem_type) if tt.elem_type else None
    return InputSpec(value.name, dtype, declared_dims(value))


def cast_hint(value: Any, dtype: Any) -> str:
    """How to give ``value`` the element type an input expects, in the words of its kind
    (sonnx narrows no type silently: ``np.random.rand`` makes float64, models take float32).

    :param value: the value fed (a Tensor, a torch tensor, an array or anything else).
    :param dtype: the element type the input declares (a torch dtype).
    :returns: the hint, ``"; cast it with ..."``, or ``""`` where there is none to give.
    """
    name = dtypes.dtype_name(dtype)
    if isinstance(value, Tensor):
        return f"; cast it with x.as_type({name!r})"
    if isinstance(value, torch.Tensor):
        return f"; cast it with x.to(torch.{name})"
    if dtypes.torch_to_numpy(dtype) is None or name == "string":
        return ""
    target = f"{'np' if hasattr(np, name) else 'ml_dtypes'}.{name}"
    if isinstance(value, np.ndarray):
        return f"; cast it with x.astype({target})"
    return f"; make it with np.asarray(x, dtype={target})"


def is_map_list(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of dicts: a ``seq(map(K, V))`` input (ZipMap's
    output fed back).

    :param value: the value fed.
    :returns: True for a non-empty list of mappings.
    """
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)

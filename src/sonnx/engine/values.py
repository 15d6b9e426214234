"""Non-tensor ONNX values: sequences of tensors, optionals and sequences of maps.

They sit beside the operator contract because operators make and take them (SequenceConstruct,
Optional, ZipMap). A graph value is a :class:`~sonnx.tensor.Tensor`, a
:class:`TensorSequence`, an :class:`OptionalValue`, a :class:`MapValue` or a
:class:`MapSequence`. The tensors inside are ordinary recorded tensors, so gradients flow
through sequence operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sonnx.tensor import Tensor


class TensorSequence(list):
    """An ONNX ``seq(tensor)``: a list of tensors, plus its element type for empty sequences."""

    def __init__(self, items: list[Tensor] = (), dtype: torch.dtype | None = None) -> None:
        super().__init__(items)
        self.dtype = dtype if dtype is not None else (items[0].dtype if items else None)
        self.name: str | None = None


@dataclass
class OptionalValue:
    """An ONNX ``optional(...)``: a tensor or sequence, or nothing."""

    value: Tensor | TensorSequence | None
    name: str | None = None

    @property
    def has_element(self) -> bool:
        return self.value is not None


class MapSequence(list):
    """An ONNX ``seq(map(K, V))``: a list of plain dicts (label -> probability), as ZipMap
    returns it and as onnxruntime gives it to Python. It carries no gradient."""

    def __init__(self, items: list[dict] = ()) -> None:
        super().__init__(items)
        self.name: str | None = None


class MapValue(dict):
    """An ONNX ``map(K, V)`` value: a plain dict, with ``value_type`` the declared element
    type of its values (a torch dtype or :data:`~sonnx.dtypes.STRING`; None if undeclared)."""

    def __init__(self, items: dict, value_type: Any = None) -> None:
        super().__init__(items)
        self.value_type = value_type
        self.name: str | None = None


GraphValue = Tensor | TensorSequence | OptionalValue | MapSequence | MapValue


def is_single_value(result: Any) -> bool:
    """True when a converter returned one graph value rather than a tuple of outputs."""
    return result is None or isinstance(
        result, (Tensor, TensorSequence, OptionalValue, MapSequence, MapValue)
    )

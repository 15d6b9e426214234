"""Making tensors from data (NumPy, torch, constants, random) and reading their values back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.strings import StringArray
from sonnx.tensor.core import Tensor, float32


def from_numpy(array: np.ndarray, dev: Device | None = None) -> Tensor:
    """A tensor holding ``array``'s values with its dtype (zero-copy on the CPU).

    :param array: the values.
    :param dev: the device (None: the default device).
    :returns: a tensor that does not require gradients.
    :raises BadInputError: ``array`` is not a NumPy array.
    """
    if not isinstance(array, np.ndarray):
        raise BadInputError(f"from_numpy expects a NumPy array, received {type(array).__name__}")
    return Tensor(data=array, device=dev, requires_grad=False)


def from_torch(t: torch.Tensor, requires_grad: bool = False) -> Tensor:
    """Wrap a torch tensor without copying it.

    :param t: the torch tensor; the sonnx tensor lives on its device.
    :param requires_grad: whether gradients may flow through it.
    :returns: the sonnx tensor.
    :raises BadInputError: ``t`` is not a torch tensor.
    """
    if not isinstance(t, torch.Tensor):
        raise BadInputError(f"from_torch expects a torch tensor, received {type(t).__name__}")
    return Tensor(data=t, device=Device(t.device), requires_grad=requires_grad)


def to_numpy(t: Tensor) -> np.ndarray:
    """The tensor's values as a NumPy array on the host, of exactly the same element type.

    bfloat16 and float8 come back as ml_dtypes arrays (NumPy itself has no such types);
    strings as a NumPy ``object`` array of ``str``, as onnxruntime returns them.

    :param t: the tensor.
    :returns: the values on the host (for a CPU tensor of a NumPy type, an array sharing its
        memory).
    """
    if isinstance(t.data, StringArray):
        return t.data.array
    return dtypes.torch_to_array(t.data.detach().cpu())


def to_host(t: Tensor) -> Tensor:
    """A copy of ``t`` on the CPU, with its name, outside the graph.

    :param t: the tensor.
    :returns: the host tensor, sharing no memory with ``t`` even when ``t`` is on the CPU
        (``t`` itself is left where it is).
    """
    if isinstance(t.data, StringArray):
        return t.clone()  # strings live on the host already
    return Tensor(data=t.data.detach().to("cpu", copy=True), requires_grad=False, name=t.name)


def zeros(shape: Sequence[int], dev: Device | None = None, dtype: Any = float32) -> Tensor:
    """A tensor of zeros that does not require gradients.

    :param shape: its shape.
    :param dev: its device (None: the default device).
    :param dtype: its element type.
    :returns: the tensor.
    :raises BadInputError: a bad shape or an unknown dtype.
    """
    return Tensor(shape=shape, device=dev, dtype=dtype, requires_grad=False)


def ones(shape: Sequence[int], dev: Device | None = None, dtype: Any = float32) -> Tensor:
    """A tensor of ones that does not require gradients.

    :param shape: its shape.
    :param dev: its device (None: the default device).
    :param dtype: its element type.
    :returns: the tensor.
    :raises BadInputError: a bad shape, an unknown dtype, or strings (which have no one).
    """
    t = zeros(shape, dev, dtype)
    if isinstance(t.data, StringArray):
        raise BadInputError(
            "ones: strings have no one, received dtype string; "
            "zeros(shape, dtype='string') gives empty strings"
        )
    return t.set_value(1)


def random(shape: Sequence[int], dev: Device | None = None) -> Tensor:
    """Uniform samples from [0, 1).

    :param shape: its shape.
    :param dev: its device (None: the default device).
    :returns: a float32 tensor that does not require gradients.
    :raises BadInputError: a bad shape.
    """
    return zeros(shape, dev).uniform(0.0, 1.0)

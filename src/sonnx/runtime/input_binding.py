"""What a run is fed, bound to the graph's inputs and checked against their declarations.

:meth:`SingaRep.run <sonnx.runtime.rep.SingaRep.run>` takes a list in the inputs' order, a dict
by name, or one value for a one-input model; each value a sonnx Tensor, a torch tensor or a
NumPy array (a dict for a map input, a list for a sequence, None for an empty optional).
:func:`bind_inputs` turns that into one graph value per input, refusing with a
:class:`~sonnx.errors.BadInputError` that names the input what its :class:`InputSpec` does not
admit (element type, fixed dims, device).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.onnx.values import (
    GraphValue,
    MapSequence,
    MapValue,
    OptionalValue,
    TensorSequence,
)
from sonnx.runtime.array_runs import is_plain_array
from sonnx.runtime.input_specs import InputSpec, cast_hint, is_map_list
from sonnx.tensor import Tensor, computed_tensor

__all__ = ["bind_inputs"]


def bind_inputs(inputs: Any, specs: Sequence[InputSpec], device: Device) -> dict[str, Any]:
    """One graph value per input fed, by input name.

    :param inputs: what the run was given (see the module docstring).
    :param specs: the graph's inputs to feed, in order.
    :param device: the model's device; tensors fed must be on it.
    :returns: the bound values by input name (Tensors, or map, sequence and optional values).
    :raises BadInputError: an input is missing, unknown, on another device, or not of its
        declared element type or fixed dims.
    """
    if type(inputs) is list and device.torch_device.type == "cpu":
        bound = _bind_plain_arrays(inputs, specs)
        if bound is not None:
            return bound
    names = [s.name for s in specs]
    if isinstance(inputs, Mapping):
        unknown = set(inputs) - set(names)
        if unknown:
            raise BadInputError(
                f"run: unknown input name(s) {sorted(unknown)}; the model's inputs are {names}"
            )
        pairs = [(s, inputs[s.name]) for s in specs if s.name in inputs]
        missing = [s.name for s in specs if s.name not in inputs]
    else:
        if isinstance(inputs, (Tensor, np.ndarray)):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) > len(specs):
            raise BadInputError(
                f"run: the model takes {len(specs)} input(s) {names}, received {len(inputs)}"
            )
        pairs = list(zip(specs, inputs, strict=False))
        missing = [s.name for s in specs[len(inputs) :]]
    if missing:
        raise BadInputError(f"run: no value given for input(s) {missing}")
    return {spec.name: _check_input(spec, value, device) for spec, value in pairs}


def _bind_plain_arrays(arrays: list[Any], specs: Sequence[InputSpec]) -> dict[str, Tensor] | None:
    """The binding of a list of one NumPy array per input, each C-ordered, writable, of
    the declared number type and of sizes the input admits, in one short loop (the general
    path costs 5-8 us per input); None for anything else, which the general path binds or
    refuses with its errors."""
    if len(arrays) != len(specs):
        return None
    bound: dict[str, Tensor] = {}
    for spec, a in zip(specs, arrays, strict=True):
        if not is_plain_array(a, spec.plain_array_dtype) or not spec.admits(a.shape):
            return None
        bound[spec.name] = computed_tensor(torch.from_numpy(a))
    return bound


def _as_tensor(spec: InputSpec, value: Any, device: Device) -> Tensor:
    name = spec.name
    if isinstance(value, Tensor):
        if value.data.device != device.torch_device:
            raise BadInputError(
                f"run: input {name!r} is on {value.device}, the model on {device}; "
                "move it with Tensor.to_device"
            )
        return value
    data = value if isinstance(value, torch.Tensor) else np.asarray(value)
    try:
        if isinstance(data, np.ndarray) and data.dtype.kind in "biufc":
            # The common case, NumPy numbers, without Tensor's general conversion.
            t = dtypes.array_to_torch(data)
            target = device.torch_device
            return computed_tensor(t if target.type == "cpu" else t.to(target))
        return Tensor(data=data, device=device, requires_grad=False)
    except BadInputError as e:  # a string or object array: say which input it was
        raise BadInputError(
            f"run: input {name!r} expects {spec.describe()}, received an array of "
            f"{data.dtype} with shape {tuple(data.shape)} ({e})"
        ) from e


def _check_input(spec: InputSpec, value: Any, device: Device) -> GraphValue:
    if spec.kind == "map_type":
        if not isinstance(value, Mapping):
            raise BadInputError(
                f"run: input {spec.name!r} is a map; give a dict, received {type(value).__name__}"
            )
        return MapValue(dict(value), spec.dtype)
    if spec.kind == "sequence_type" and is_map_list(value):
        return MapSequence([dict(v) for v in value])
    if spec.kind == "sequence_type":
        return TensorSequence([_as_tensor(spec, v, device) for v in value])
    if spec.kind == "optional_type":
        if value is None:
            return OptionalValue(None)
        if isinstance(value, list):
            return OptionalValue(TensorSequence([_as_tensor(spec, v, device) for v in value]))
        return OptionalValue(_as_tensor(spec, value, device))
    return _check_tensor(spec, value, device)


def _check_tensor(spec: InputSpec, value: Any, device: Device) -> Tensor:
    t = _as_tensor(spec, value, device)
    data = t.data
    if spec.dtype is not None and data.dtype != spec.dtype:
        raise BadInputError(
            f"run: input {spec.name!r} expects {spec.describe()}, received "
            f"{dtypes.dtype_name(t.dtype)} with shape {tuple(data.shape)}"
            f"{cast_hint(value, spec.dtype)}"
        )
    if spec.shape == () and data.dim() > 0 and data.numel() == 1:
        # A one-element tensor is accepted for a scalar input (official cases feed them).
        t = Tensor(data=data.reshape(()), requires_grad=t.requires_grad, name=t.name)
    elif not spec.admits(data.shape):  # torch's sizes: Tensor.shape builds exportable Dims
        raise BadInputError(
            f"run: input {spec.name!r} expects {spec.describe()}, received shape {t.shape}"
        )
    return t

"""Calibration: run the float model in sonnx over the calibration feeds and find each
tensor's range the way onnxruntime's calibrators do (``onnxruntime.quantization.calibrate``).

- ``minmax``: the smallest and largest value over every batch (``MinMaxCalibrater``; with
  ``moving_average``, the mean of the per-batch minima and maxima);
- ``percentile``: the range holding 99.999 % of the values (``PercentileCalibrater``: 2048
  bins, symmetric by default);
- ``entropy``: the range of least KL divergence (``EntropyCalibrater``: 128 bins, 128
  quantized bins).

The calibration is an iterable of feeds (dicts by input name, or lists in input order) or an
object with onnxruntime's ``CalibrationDataReader`` contract (``get_next()`` returning a dict,
then None).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from sonnx.errors import BadInputError
from sonnx.quantization.histograms import entropy_range, percentile_range

__all__ = ["CalibrationOptions", "calibrate", "calibration_method", "tensors_to_calibrate"]

_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
_METHODS = {"minmax": "minmax", "percentile": "percentile", "entropy": "entropy"}


@dataclass(frozen=True)
class CalibrationOptions:
    """How ranges are found: the method and onnxruntime's calibration ``extra_options``
    (``CalibTensorRangeSymmetric``, ``CalibMovingAverage``, ``CalibPercentile``); None keeps
    the method's own default (symmetric only for ``percentile``)."""

    method: str = "minmax"
    symmetric: bool | None = None
    moving_average: bool = False
    percentile: float = 99.999


def calibration_method(value: Any) -> str:
    """``"minmax"``, ``"percentile"`` or ``"entropy"`` from a string or an onnxruntime
    ``CalibrationMethod`` member (by its name).

    :raises BadInputError: any other method, ending in what was received.
    """
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if isinstance(name, str) and name.lower() in _METHODS:
        return _METHODS[name.lower()]
    raise BadInputError(
        f"quantize_static: calibrate_method must be one of {sorted(_METHODS)} (or "
        f"onnxruntime's CalibrationMethod.MinMax, Percentile, Entropy), received {value!r}"
    )


def tensors_to_calibrate(model: onnx.ModelProto, op_types: set[str]) -> list[str]:
    """The float tensors read or written by a node of ``op_types`` that are not initializers,
    in graph order: the tensors onnxruntime's calibrators measure. ``model`` has been through
    shape inference, so an intermediate's type is known."""
    graph = model.graph
    infos = {v.name: v for v in [*graph.value_info, *graph.output, *graph.input]}
    initializers = {t.name for t in graph.initializer}
    names: dict[str, None] = {}
    for node in graph.node:
        if node.op_type not in op_types:
            continue
        for name in itertools.chain(node.input, node.output):
            info = infos.get(name)
            if (
                info is not None
                and info.type.HasField("tensor_type")
                and info.type.tensor_type.elem_type in _FLOATS
                and name not in initializers
            ):
                names[name] = None
    return list(names)


def calibrate(
    model: onnx.ModelProto, calibration: Any, names: list[str], options: CalibrationOptions
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each of ``names``' (low, high) range, in the tensor's float type, over the feeds of
    ``calibration`` run through ``model`` in sonnx.

    :raises BadInputError: a feed names an unknown input, misses one, or has the wrong dtype
        or fixed dims (the error names the input and the batch), or there is no feed at all.
    """
    from sonnx.runtime.rep import prepare
    from sonnx.tensor.creation import to_numpy

    rep = prepare(model)
    specs = _input_specs(model)
    # minmax keeps each batch's min and max only; the histogram methods need every value
    keep = _min_max if options.method == "minmax" else np.ravel
    seen: dict[str, list[np.ndarray]] = {n: [] for n in names}
    fed = 0
    for feed in _feeds(calibration, specs):
        values = rep.run(feed, aux_output=names)[len(rep.outputs) :]
        for name, value in zip(names, values, strict=True):
            seen[name].append(keep(to_numpy(value)))
        fed += 1
    if not fed:
        raise BadInputError(
            "quantize_static: calibration gave no feed; it needs at least one (a dict by "
            f"input name, or a list in input order), received {_describe(calibration)}"
        )
    return {name: _range(batches, options) for name, batches in seen.items()}


def _min_max(value: np.ndarray) -> np.ndarray:
    """A batch's min and max, as onnxruntime's ReduceMin/ReduceMax give them (NaN when
    empty)."""
    if not value.size:
        return np.array([np.nan, np.nan], dtype=value.dtype)
    return np.array([value.min(), value.max()], dtype=value.dtype)


def _range(batches: list[np.ndarray], options: CalibrationOptions) -> tuple[Any, Any]:
    if options.method == "minmax":
        lows, highs = [b[0] for b in batches], [b[1] for b in batches]
        if options.moving_average:
            low, high = np.nanmean(lows, axis=0), np.nanmean(highs, axis=0)
        else:
            low, high = np.nanmin(lows, axis=0), np.nanmax(highs, axis=0)
        if options.symmetric:
            bound = np.maximum(np.abs(low), np.abs(high))
            return -bound, bound
        return low, high
    values = np.concatenate(batches)
    if options.method == "percentile":
        symmetric = True if options.symmetric is None else options.symmetric
        return percentile_range(values, options.percentile, symmetric)
    return entropy_range(values)


@dataclass(frozen=True)
class _Spec:
    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...] | None


def _input_specs(model: onnx.ModelProto) -> list[_Spec]:
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = (
            tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
            if tensor.HasField("shape")
            else None
        )
        specs.append(
            _Spec(value.name, onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type), dims)
        )
    return specs


def _feeds(calibration: Any, specs: list[_Spec]) -> Iterator[dict[str, np.ndarray]]:
    """The validated feeds of ``calibration``, one dict of arrays by input name each."""
    if hasattr(calibration, "get_next"):
        batches: Iterable[Any] = iter(calibration.get_next, None)
    elif isinstance(calibration, Iterable) and not isinstance(calibration, (str, bytes, dict)):
        batches = calibration
    else:
        raise BadInputError(
            "quantize_static: calibration must be an iterable of feeds or an object with "
            f"get_next() (onnxruntime's CalibrationDataReader), received {_describe(calibration)}"
        )
    for index, batch in enumerate(batches):
        yield _checked(batch, specs, index)


def _checked(batch: Any, specs: list[_Spec], index: int) -> dict[str, np.ndarray]:
    where = f"quantize_static: calibration feed {index}"
    if isinstance(batch, dict):
        known = {s.name for s in specs}
        unknown = sorted(set(batch) - known)
        missing = [s.name for s in specs if s.name not in batch]
        if unknown or missing:
            raise BadInputError(
                f"{where}: expected inputs {sorted(known)}, unknown {unknown}, missing "
                f"{missing}; received keys {sorted(batch)}"
            )
        values = [batch[s.name] for s in specs]
    elif isinstance(batch, (list, tuple)):
        if len(batch) != len(specs):
            raise BadInputError(
                f"{where}: expected {len(specs)} values in input order "
                f"{[s.name for s in specs]}, received {len(batch)}"
            )
        values = list(batch)
    else:
        raise BadInputError(
            f"{where}: expected a dict by input name or a list in input order, received "
            f"{_describe(batch)}"
        )
    return {s.name: _checked_array(v, s, where) for s, v in zip(specs, values, strict=True)}


def _checked_array(value: Any, spec: _Spec, where: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != spec.dtype:
        raise BadInputError(
            f"{where}: input {spec.name!r} must be {spec.dtype}, received {array.dtype}"
        )
    if spec.dims is not None and (
        len(spec.dims) != array.ndim
        or any(d is not None and d != n for d, n in zip(spec.dims, array.shape, strict=True))
    ):
        declared = "(" + ", ".join("?" if d is None else str(d) for d in spec.dims) + ")"
        raise BadInputError(
            f"{where}: input {spec.name!r} must have shape {declared}, received shape {array.shape}"
        )
    return array


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]

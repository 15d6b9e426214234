"""Importer registrations for the ai.onnx.ml operators: see sonnx.operators.ml (transforms,
linear, svm, trees and lookup). ZipMap, DictVectorizer and CastMap, whose inputs or outputs are
maps rather than tensors, are converter functions here."""

from __future__ import annotations

from typing import Any

import numpy as np

from sonnx import dtypes
from sonnx.device import get_default_device
from sonnx.errors import BadInputError
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.onnx.values import MapSequence
from sonnx.operators.ml.common import ML_DOMAIN
from sonnx.tensor import Tensor


@converter("ZipMap", 1, domain=ML_DOMAIN)
def ZipMap(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> MapSequence:
    """Each row of X (N, C) float32 as a dict {class label: score}, like onnxruntime."""
    ints, strings = attrs.get("classlabels_int64s"), attrs.get("classlabels_strings")
    labels = list(strings) if strings else [int(v) for v in ints or []]
    x = inputs[0].data
    if x.dim() == 1:
        x = x.reshape(1, -1)
    if x.dim() != 2 or x.shape[1] != len(labels):
        raise BadInputError(
            f"ZipMap {node.name!r}: input X must be (N, {len(labels)}), one column per class "
            f"label, received shape {tuple(x.shape)}"
        )
    rows = x.detach().to("cpu", dtype=x.dtype).tolist()  # host: the maps are Python values
    return MapSequence([dict(zip(labels, row, strict=True)) for row in rows])


def _rows(node: NodeInfo, value: Any) -> list[dict]:
    """A map input as a list of dict rows (one map, or a sequence of them)."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return list(value)
    raise BadInputError(
        f"{node.op_type} {node.name!r}: input X must be a map (a dict) or a sequence of maps, "
        f"received {type(value).__name__}"
    )


def _as_output(values: np.ndarray) -> Tensor:
    return Tensor(data=values, device=get_default_device(), requires_grad=False)


@converter("DictVectorizer", 1, domain=ML_DOMAIN)
def DictVectorizer(node: NodeInfo, inputs: list[Any], attrs: dict[str, Any]) -> Tensor:
    """Each map as one row (1, vocabulary) of its values at the vocabulary's positions (0 or ""
    where a key is absent; keys outside the vocabulary are dropped), as onnxruntime does; a
    sequence of maps gives one row each."""
    vocabulary = attrs.get("string_vocabulary") or attrs.get("int64_vocabulary") or []
    column = {key: i for i, key in enumerate(vocabulary)}
    rows = _rows(node, inputs[0])
    value_type = getattr(inputs[0], "value_type", None)
    sample = next((v for row in rows for v in row.values()), 0.0)
    if value_type is dtypes.STRING or isinstance(sample, str):
        out = np.full((len(rows), len(vocabulary)), "", dtype=object)
    else:
        np_type = dtypes.torch_to_numpy(value_type) if value_type is not None else None
        out = np.zeros((len(rows), len(vocabulary)), dtype=np_type or np.float32)
    for r, row in enumerate(rows):
        for key, value in row.items():
            if key in column:
                out[r, column[key]] = value
    return _as_output(out)


@converter("CastMap", 1, domain=ML_DOMAIN)
def CastMap(node: NodeInfo, inputs: list[Any], attrs: dict[str, Any]) -> Tensor:
    """A map(int64, V) as a (1, n) tensor: its values in increasing key order (DENSE), or at
    positions 0..max_map-1 by key with 0 elsewhere (SPARSE); cast to float32, int64 (truncated)
    or strings formatted with six decimals, exactly as onnxruntime writes them."""
    [row] = _rows(node, inputs[0])
    cast_to, form = str(attrs.get("cast_to")), str(attrs.get("map_form"))
    if form == "SPARSE":
        size = int(attrs.get("max_map"))
        bad = [k for k in row if not 0 <= int(k) < size]
        if bad:
            raise BadInputError(
                f"CastMap {node.name!r}: SPARSE keys must be in [0, {size - 1}] (max_map), "
                f"received {sorted(bad)}"
            )
        present = [k in row for k in range(size)]
        values = [row.get(k, 0) for k in range(size)]
    else:
        present = [True] * len(row)
        values = [row[k] for k in sorted(row)]
    numeric = np.asarray(values, dtype=np.float64)
    if cast_to == "TO_STRING":  # onnxruntime fills SPARSE gaps with the text "0.f"
        text = [f"{v:f}" if here else "0.f" for v, here in zip(numeric, present, strict=True)]
        out = np.array(text, dtype=object)
    elif cast_to == "TO_INT64":
        out = np.trunc(numeric).astype(np.int64)
    else:
        out = numeric.astype(np.float32)
    return _as_output(out.reshape(1, -1))

"""The ONNX model a prepared graph keeps: its structure, without the bytes of its weights.

Once :func:`~sonnx.runtime.rep.prepare` has decoded the initializers into the program's
tensors, a model that also kept their bytes would hold every weight twice (a 7B float16 LLM:
14 GB twice). The kept model (``SingaRep.model``) therefore has every node, input, output and
initializer *header* (name, element type, dims), but the data of each initializer of at least
:data:`LARGE_INITIALIZER_BYTES` that the program holds is cleared: the program's tensors are
the one copy. Smaller initializers keep their data, so shape inference still reads the shape,
axes and index constants it needs. (A model read from its path never holds the data of the
large ones, by the same threshold: see :mod:`sonnx.onnx.model_file`.)

Whatever needs the values reads them from the tensors: the exporter writes each initializer
from the tensor of its name, :func:`with_current_values` builds a whole model again, on
demand, with the tensors' current values (trained weights included), and
:func:`save_with_values` writes a model file whose large initializers' values go from their
tensors to its external data file one at a time, never all held by a proto at once.

Only the main graph's dense initializers are stripped; those of subgraphs (``If`` branches,
``Loop`` bodies) and sparse ones are kept as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx
import torch
from google.protobuf.message import Message

from sonnx import dtypes
from sonnx.onnx.model_file import LARGE_INITIALIZER_BYTES
from sonnx.proto.graph_builder import tensor_proto
from sonnx.tensor import Tensor

__all__ = [
    "LARGE_INITIALIZER_BYTES",
    "save_with_values",
    "with_current_values",
    "without_large_values",
]

#: The fields of a TensorProto that hold its values (all but one are empty in any tensor).
_DATA_FIELDS = frozenset(
    {
        "raw_data",
        "float_data",
        "int32_data",
        "string_data",
        "int64_data",
        "double_data",
        "uint64_data",
    }
)

#: What a header written by :func:`save_with_values` takes from its value, not from ``model``.
_LAYOUT_FIELDS = frozenset({"dims", "data_type", "data_location", "external_data"})


def without_large_values(
    model: onnx.ModelProto, constants: Mapping[str, Tensor]
) -> onnx.ModelProto:
    """A copy of ``model`` whose large initializers held in ``constants`` have no data.

    The copy is built field by field, never through a full ``CopyFrom``, so the weights' bytes
    are not copied even for a moment, and ``model`` itself is left as it is.

    :param model: the model as loaded.
    :param constants: the tensors the prepared program holds, by name.
    :returns: the model to keep beside the tensors.
    """
    kept = _without_initializers(model)
    for init in model.graph.initializer:
        header = kept.graph.initializer.add()
        large = init.name in constants and _data_bytes(init) >= LARGE_INITIALIZER_BYTES
        _copy_fields(init, header, skip=_DATA_FIELDS if large else frozenset())
    return kept


def with_current_values(model: onnx.ModelProto, constants: Mapping[str, Tensor]) -> onnx.ModelProto:
    """A copy of ``model`` in which every initializer held in ``constants`` has the tensor's
    current value (trained weights, updated statistics); the others are copied as they are.

    :param model: a kept model (:func:`without_large_values`) or any model of the same graph.
    :param constants: the tensors the prepared program holds, by name.
    :returns: a complete model: what ``model`` was when loaded, with the current weights.
    """
    full = _without_initializers(model)
    for init in model.graph.initializer:
        current = constants.get(init.name)
        value = init if current is None else tensor_proto(current.data, init.name)
        full.graph.initializer.add().CopyFrom(value)
    return full


def save_with_values(
    model: onnx.ModelProto, path: Path, value_of: Callable[[str], torch.Tensor | None]
) -> None:
    """Write ``model`` to ``path``, each initializer holding ``value_of(its name)`` (None: what
    ``model`` holds for it), those of :data:`LARGE_INITIALIZER_BYTES` and more in the external
    data file ``<file name>.data`` beside it (replaced if there).

    Each value goes to the file on its own, straight from its tensor's memory where ONNX lays
    out its elements as NumPy does (no copy), so no proto ever holds the weights' bytes:
    ``onnx.save`` of a whole model would (a protobuf message frees none of its fields' bytes
    until the whole message goes).

    :param model: the model: a kept model (headers without bytes) or any other.
    :param path: the model file to write.
    :param value_of: each initializer's value by name (a torch tensor, or a string array
        as a string tensor holds it), or None to keep ``model``'s.
    """
    location = f"{path.name}.data"
    out = _without_initializers(model)
    with open(path.parent / location, "wb") as data:
        for init in model.graph.initializer:
            value = value_of(init.name)
            array = _plain_array(value) if isinstance(value, torch.Tensor) else None
            if array is not None and array.nbytes >= LARGE_INITIALIZER_BYTES:
                header = out.graph.initializer.add()
                _copy_fields(init, header, skip=_DATA_FIELDS | _LAYOUT_FIELDS)
                header.data_type = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
                header.dims.extend(array.shape)
                _refer(header, location, data.tell(), array.nbytes)
                data.write(array.data)
                continue
            full = init if value is None else tensor_proto(value, init.name)
            raw = full.raw_data if full.HasField("raw_data") else b""
            if len(raw) < LARGE_INITIALIZER_BYTES:
                out.graph.initializer.add().CopyFrom(full)
                continue
            header = out.graph.initializer.add()
            _copy_fields(full, header, skip=_DATA_FIELDS | {"data_location", "external_data"})
            _refer(header, location, data.tell(), len(raw))
            data.write(raw)
    onnx.save(out, str(path))


def _plain_array(value: torch.Tensor) -> np.ndarray | None:
    """``value``'s elements as a contiguous NumPy array (over its memory on the host) when
    ONNX stores them byte for byte as NumPy does (bool, ints, floats); None for the types ONNX
    packs or NumPy lacks (4-bit, bfloat16, float8: :func:`tensor_proto` writes those)."""
    array = dtypes.torch_to_array(value.detach().cpu())
    if array.dtype.kind not in "biuf" or not array.dtype.isnative:
        return None
    return np.ascontiguousarray(array)


def _refer(header: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """Point ``header`` at ``length`` bytes at ``offset`` of the external data file."""
    header.data_location = onnx.TensorProto.EXTERNAL
    for key, text in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = header.external_data.add()
        entry.key, entry.value = key, text


def _without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` but for its graph's initializers, which the caller adds."""
    copy = onnx.ModelProto()
    _copy_fields(model, copy, skip={"graph"})
    _copy_fields(model.graph, copy.graph, skip={"initializer"})
    return copy


def _data_bytes(init: onnx.TensorProto) -> int:
    """The size of an initializer's values from its dims and element type (``ByteSize`` would
    serialize the tensor, a copy of its bytes; a string counts as a pointer's 8 bytes)."""
    itemsize = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    return math.prod(init.dims) * itemsize


def _copy_fields(source: Message, target: Message, skip: frozenset[str] | set[str]) -> None:
    """Copy every field set in ``source`` into the empty ``target``, except those in ``skip``,
    which are never read (``ListFields`` would hand out a copy of a tensor's bytes)."""
    for field in source.DESCRIPTOR.fields:
        if field.name in skip:
            continue
        value = getattr(source, field.name)
        if isinstance(value, Message):
            if source.HasField(field.name):
                getattr(target, field.name).CopyFrom(value)
        elif isinstance(value, (bytes, str, int, float)):  # enums are ints
            if source.HasField(field.name):
                setattr(target, field.name, value)
        elif len(value):  # a repeated field
            getattr(target, field.name).extend(value)

"""Reading a model file with its large weights left on disk until each becomes a tensor.

Parsing a whole ``.onnx`` file holds its bytes and the parsed ModelProto at once, and
protobuf's arena frees none of a message's bytes until the whole message goes: turning the
weights into tensors then holds them a third time (an LLM of 7 GB would need over 20 GB to
load). :func:`read_model_file` therefore walks the file's protobuf wire format itself, over
a memory map that touches only the pages it reads, and parses everything except the
``raw_data`` of the main graph's large initializers: each of those is left as a header
(name, element type, dims) and a :class:`StoredWeight`, the byte range of the file that
holds its values. :func:`read_stored_weight` later reads one such range straight into the
array that becomes the weight's tensor, so each weight's bytes are in memory once.

A large initializer kept in an external data file is the same thing in another file:
:func:`defer_external_weights` turns its (already checked) reference into a StoredWeight.
"""

from __future__ import annotations

import math
import mmap
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from sonnx.errors import BadModelError

__all__ = [
    "LARGE_INITIALIZER_BYTES",
    "StoredWeight",
    "defer_external_weights",
    "read_model_file",
    "read_stored_weight",
]

#: Initializers of this many bytes or more are read from the file only as they become
#: tensors (and lose their data in the model a prepared graph keeps: see
#: :mod:`sonnx.runtime.kept_model`). Smaller ones are parsed with the model, so shape
#: inference reads the shape, axes and index constants it needs.
LARGE_INITIALIZER_BYTES = 1024

_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
_LENGTH_DELIMITED = 2

#: Element types whose raw bytes pack several elements into one byte: read through onnx.
_PACKED = {
    getattr(onnx.TensorProto, name)
    for name in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2", "FLOAT6E2M3", "FLOAT6E3M2")
    if hasattr(onnx.TensorProto, name)
}


@dataclass(frozen=True)
class StoredWeight:
    """Where the values of an initializer lie: ``length`` bytes at ``offset`` in ``path``."""

    path: Path
    offset: int
    length: int


def read_model_file(path: Path) -> tuple[onnx.ModelProto, dict[str, StoredWeight]]:
    """The model in ``path`` without the data of its main graph's large ``raw_data``
    initializers, and where in the file each of those lies (by initializer name).

    :raises BadModelError: the file is not a valid ONNX model.
    """
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            raise BadModelError(f"{path} is not an ONNX model: it has no graph")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            buffer = memoryview(mapped)
            try:
                model, stored = _ModelWalk(buffer, path).model()
            except (DecodeError, IndexError, RuntimeError, ValueError) as e:
                raise BadModelError(
                    f"{path} is not a valid ONNX model (protobuf decode failed: {e})"
                ) from None
            finally:
                buffer.release()
    if not model.HasField("graph"):
        raise BadModelError(f"{path} is not an ONNX model: it has no graph")
    return model, stored


def defer_external_weights(model: onnx.ModelProto, base: Path) -> dict[str, StoredWeight]:
    """Turn the external data references of the main graph's large initializers into
    StoredWeights (by name), leaving each initializer a header without data.

    The references must have been checked (:func:`~sonnx.onnx.model_loading.check_tensors`:
    a relative location inside ``base``, a range inside the file)."""
    stored = {}
    for init in model.graph.initializer:
        if not onnx.external_data_helper.uses_external_data(init):
            continue
        info = {e.key: e.value for e in init.external_data}
        target = (base / info["location"]).resolve()
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else target.stat().st_size - offset
        if length >= LARGE_INITIALIZER_BYTES:
            stored[init.name] = StoredWeight(target, offset, length)
            init.ClearField("data_location")
            del init.external_data[:]
    return stored


def read_stored_weight(init: onnx.TensorProto, stored: StoredWeight) -> np.ndarray:
    """The values of ``init`` (its header) from where they are stored, as a writable array.

    Plain element types are read straight into the array's memory; packed ones (int4 and
    the like) and big-endian hosts go through ``onnx.numpy_helper``, which unpacks them.
    """
    buffer = bytearray(stored.length)
    with open(stored.path, "rb") as f:
        f.seek(stored.offset)
        if f.readinto(buffer) != stored.length:
            raise BadModelError(
                f"initializer {init.name!r}: {stored.path} ends before the {stored.length} "
                f"bytes at offset {stored.offset}"
            )
    dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
    if (
        init.data_type not in _PACKED
        and sys.byteorder == "little"
        and math.prod(init.dims) * dtype.itemsize == stored.length
    ):
        return np.frombuffer(buffer, dtype).reshape(tuple(init.dims))
    with_data = onnx.TensorProto()
    with_data.CopyFrom(init)
    with_data.raw_data = bytes(buffer)
    del buffer
    return np.array(numpy_helper.to_array(with_data))


class _ModelWalk:
    """One pass over a serialized ModelProto, descending only into the graph and its
    initializers; every other field is handed to protobuf's parser as it is.

    Protobuf allows a message's fields in any order and merges repeated occurrences, so the
    fields left out of a piece can be added to the parsed message afterwards."""

    def __init__(self, buffer: memoryview, path: Path) -> None:
        self.buffer = buffer
        self.path = path
        self.stored: dict[str, StoredWeight] = {}

    def model(self) -> tuple[onnx.ModelProto, dict[str, StoredWeight]]:
        model = onnx.ModelProto()
        rest = bytearray()
        for number, wire, start, value, end in self._fields(0, len(self.buffer)):
            if number == _GRAPH and wire == _LENGTH_DELIMITED:
                self._merge_graph(model.graph, value, end)
            else:
                rest += self.buffer[start:end]
        model.MergeFromString(bytes(rest))
        return model, self.stored

    def _merge_graph(self, graph: onnx.GraphProto, begin: int, stop: int) -> None:
        rest = bytearray()
        for number, wire, start, value, end in self._fields(begin, stop):
            if number == _INITIALIZER and wire == _LENGTH_DELIMITED:
                self._add_initializer(graph.initializer.add(), value, end)
            else:
                rest += self.buffer[start:end]
        graph.MergeFromString(bytes(rest))

    def _add_initializer(self, init: onnx.TensorProto, begin: int, stop: int) -> None:
        rest = bytearray()
        raw = None  # the last raw_data field wins, as in protobuf
        for number, wire, start, value, end in self._fields(begin, stop):
            if number == _RAW_DATA and wire == _LENGTH_DELIMITED:
                raw = (start, value, end)
            else:
                rest += self.buffer[start:end]
        if raw is not None and raw[2] - raw[1] < LARGE_INITIALIZER_BYTES:
            rest += self.buffer[raw[0] : raw[2]]
            raw = None
        init.MergeFromString(bytes(rest))
        if raw is not None:
            self.stored[init.name] = StoredWeight(self.path, raw[1], raw[2] - raw[1])

    def _fields(self, begin: int, stop: int) -> Iterator[tuple[int, int, int, int, int]]:
        """Each field of the message in ``buffer[begin:stop]``: its number, wire type, and
        where its tag, its value and its end lie."""
        at = begin
        while at < stop:
            start = at
            tag, at = self._varint(at)
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                _, end = self._varint(at)
            elif wire == 1:
                end = at + 8
            elif wire == _LENGTH_DELIMITED:
                length, at = self._varint(at)
                end = at + length
            elif wire == 5:
                end = at + 4
            else:
                raise DecodeError(f"unexpected wire type {wire} of field {number} at byte {start}")
            if end > len(self.buffer):
                raise DecodeError(
                    f"field {number} at byte {start} runs past the end of the file "
                    f"({len(self.buffer)} bytes): truncated?"
                )
            if end > stop:
                raise DecodeError(f"field {number} at byte {start} runs past its message's end")
            yield number, wire, start, at, end
            at = end

    def _varint(self, at: int) -> tuple[int, int]:
        """The varint at ``at`` and the position after it."""
        value = shift = 0
        while True:
            if at >= len(self.buffer):
                raise DecodeError(
                    f"the file ends inside a field's tag or length at byte {at}: truncated?"
                )
            byte = self.buffer[at]
            value |= (byte & 0x7F) << shift
            at += 1
            if byte < 0x80:
                return value, at
            shift += 7
            if shift > 63:
                raise DecodeError(f"a varint longer than 10 bytes at byte {at}")

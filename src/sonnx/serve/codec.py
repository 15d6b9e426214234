"""Tensors on the wire: the KServe v2 JSON encoding and the binary tensor data extension.

A request body is a JSON header, optionally followed by raw tensor bytes whose split is given
by ``Inference-Header-Content-Length`` and each input's ``binary_data_size`` parameter. This
module turns such a body into NumPy arrays and outputs back into a body; it checks that the
body is consistent with itself (value counts, byte sizes, datatypes) but knows nothing about
models: :mod:`sonnx.serve.signature` checks a request against the model.

Binary data is little-endian, element after element in row-major order; BYTES elements are
each a 4-byte little-endian length followed by the bytes. BYTES tensors are ONNX STRING
tensors, which hold text, so they decode (from JSON strings or binary elements) to object
arrays of ``str``; a binary element that is not valid UTF-8 is the client's error (400, naming
the input and the element), never replaced or passed on as raw bytes. String outputs are
encoded as UTF-8.

JSON floats round-trip exactly (``repr`` of a float32 read back as float32 gives the same
bits); NaN and infinities are written as the non-standard ``NaN`` / ``Infinity`` literals that
Python and rapidjson read, so clients needing strict JSON should ask for binary outputs.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sonnx.serve.datatypes import DATATYPES
from sonnx.serve.errors import InvalidRequestError, UnsupportedError
from sonnx.strings import object_array

# JSON headers (or BYTES bodies) above this are decoded, and outputs above this encoded, in a
# worker thread, off the event loop (by both the HTTP and the gRPC endpoint).
OFFLOAD_BYTES = 256 * 1024


@dataclass
class RequestTensor:
    """One decoded input: its declared datatype and shape and the array holding its values."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    array: np.ndarray


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    binary: bool


@dataclass
class InferRequest:
    """A decoded inference request. ``outputs`` None means every output of the model."""

    id: str | None
    inputs: list[RequestTensor]
    outputs: list[RequestedOutput] | None
    binary_output: bool
    timeout_s: float | None


# ---- decoding ------------------------------------------------------------------------------
def decode_request(body: bytes, header_length: int | None) -> InferRequest:
    """Decode a request body; ``header_length`` is ``Inference-Header-Content-Length``."""
    if header_length is not None and not 0 <= header_length <= len(body):
        raise InvalidRequestError(
            f"Inference-Header-Content-Length must be between 0 and the body size "
            f"{len(body)}, received {header_length}"
        )
    split = len(body) if header_length is None else header_length
    header = _parse_json(body[:split])
    binary = memoryview(body)[split:]
    params = _object(header.get("parameters", {}), "request 'parameters'")
    if "sequence_id" in params:
        raise UnsupportedError("sequence batching (parameter 'sequence_id') is not supported")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise InvalidRequestError(
            f"request 'inputs' must be a non-empty list, received {_short(raw_inputs)}"
        )
    inputs: list[RequestTensor] = []
    offset = 0
    for raw in raw_inputs:
        tensor, offset = _decode_input(_object(raw, "each entry of 'inputs'"), binary, offset)
        inputs.append(tensor)
    if offset != len(binary):
        raise InvalidRequestError(
            f"the inputs' binary_data_size parameters add up to {offset} bytes, but the body "
            f"carries {len(binary)} bytes of binary data after the JSON header"
        )
    names = [t.name for t in inputs]
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"each input may be given once, received inputs {names}")
    binary_output = _flag(params.get("binary_data_output", False), "binary_data_output")
    return InferRequest(
        id=_request_id(header.get("id")),
        inputs=inputs,
        outputs=_requested_outputs(header.get("outputs"), binary_output),
        binary_output=binary_output,
        timeout_s=_timeout(params.get("timeout")),
    )


def _parse_json(data: bytes | memoryview) -> dict[str, Any]:
    try:
        value = json.loads(bytes(data))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"the request header is not valid JSON: {e}") from None
    return _object(value, "the request header")


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{what} must be a JSON object, received {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, (bytes, memoryview)) else "binary data"
    return text if len(text) <= 60 else text[:57] + "..."


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequestError(f"parameter {name!r} must be true or false, received {value!r}")
    return value


def _request_id(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InvalidRequestError(f"request 'id' must be a string, received {_short(value)}")


def _timeout(value: Any) -> float | None:
    """The ``timeout`` parameter, in microseconds as Triton's clients send it, as seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequestError(
            f"parameter 'timeout' must be a positive integer number of microseconds, "
            f"received {value!r}"
        )
    return value / 1e6


def _requested_outputs(value: Any, binary_default: bool) -> list[RequestedOutput] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRequestError(f"request 'outputs' must be a list, received {_short(value)}")
    outputs = []
    for raw in value:
        entry = _object(raw, "each entry of 'outputs'")
        name = entry.get("name")
        if not isinstance(name, str):
            raise InvalidRequestError(f"each output needs a string 'name', received {entry}")
        params = _object(entry.get("parameters", {}), f"output {name!r} 'parameters'")
        if "classification" in params:
            raise UnsupportedError(
                f"output {name!r}: the classification extension is not supported"
            )
        binary = _flag(params.get("binary_data", binary_default), "binary_data")
        outputs.append(RequestedOutput(name, binary))
    return outputs


def _decode_input(
    raw: dict[str, Any], binary: memoryview, offset: int
) -> tuple[RequestTensor, int]:
    """One input tensor and the offset just past its binary data (if any)."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"each input needs a non-empty string 'name', received {raw}")
    datatype, shape = raw.get("datatype"), raw.get("shape")
    check_declared(name, datatype, shape)
    params = _object(raw.get("parameters", {}), f"input {name!r} 'parameters'")
    size = params.get("binary_data_size")
    count = math.prod(shape)
    if size is None:
        if "data" not in raw:
            raise InvalidRequestError(
                f"input {name!r} has neither 'data' nor a 'binary_data_size' parameter"
            )
        array = decode_json_data(raw["data"], datatype, count, name)
    else:
        if "data" in raw:
            raise InvalidRequestError(
                f"input {name!r} has both 'data' and a 'binary_data_size' parameter"
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidRequestError(
                f"input {name!r}: 'binary_data_size' must be a non-negative integer, "
                f"received {size!r}"
            )
        if offset + size > len(binary):
            raise InvalidRequestError(
                f"input {name!r}: binary_data_size {size} runs past the end of the body "
                f"({len(binary) - offset} bytes of binary data left)"
            )
        array = decode_binary_data(binary[offset : offset + size], datatype, count, name)
        offset += size
    return RequestTensor(name, datatype, tuple(shape), array.reshape(shape)), offset


def check_declared(name: str, datatype: Any, shape: Any) -> None:
    """Check an input's declared ``datatype`` (a KServe name) and ``shape`` (a list of
    non-negative ints); shared with the gRPC codec so both protocols word errors alike."""
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise InvalidRequestError(
            f"input {name!r}: 'datatype' must be one of {', '.join(DATATYPES)}, received "
            f"{_short(datatype)}"
        )
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise InvalidRequestError(
            f"input {name!r}: 'shape' must be a list of non-negative integers, received "
            f"{_short(shape)}"
        )


def decode_json_data(data: Any, datatype: str, count: int, name: str) -> np.ndarray:
    """The values of a JSON ``data`` field (flat or nested row-major) as a flat array."""
    if datatype == "BYTES":
        flat = _flatten(data if isinstance(data, list) else [data])
        if not all(isinstance(v, str) for v in flat):
            raise InvalidRequestError(
                f"input {name!r} (BYTES): JSON data must be a (nested) list of strings, "
                f"received {_short(data)}"
            )
        return check_count(object_array(flat), count, name)
    target = DATATYPES[datatype]
    if target.kind in "iu":
        return check_count(_integers(data, target, name, datatype), count, name)
    try:
        values = np.asarray(data)
    except ValueError:
        values = np.asarray(None)  # ragged nesting: reported below
    if values.size and values.dtype.kind not in ("b" if datatype == "BOOL" else "iuf"):
        what = "true/false" if datatype == "BOOL" else "numbers"
        raise InvalidRequestError(
            f"input {name!r} ({datatype}): JSON data must be a (nested) list of {what}, "
            f"received {_short(data)}"
        )
    return check_count(values.reshape(-1).astype(target), count, name)


def _integers(data: Any, target: np.dtype, name: str, datatype: str) -> np.ndarray:
    """JSON integers checked one by one: NumPy would read 1.5 or ``true`` as an integer, and
    a mix of UINT64 values above 2**63 with small ones as (rounded) float64."""
    flat = _flatten(data if isinstance(data, list) else [data])
    if not all(type(v) is int for v in flat):
        raise InvalidRequestError(
            f"input {name!r} ({datatype}): JSON data must be a (nested) list of integers, "
            f"received {_short(data)}"
        )
    try:
        return np.array(flat, dtype=target)
    except OverflowError:
        info = np.iinfo(target)
        raise InvalidRequestError(
            f"input {name!r} ({datatype}): values must lie in [{info.min}, {info.max}], "
            f"received values from {min(flat)} to {max(flat)}"
        ) from None


def _flatten(values: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for v in values:
        if isinstance(v, list):
            flat.extend(_flatten(v))
        else:
            flat.append(v)
    return flat


def check_count(array: np.ndarray, count: int, name: str) -> np.ndarray:
    if array.size != count:
        raise InvalidRequestError(
            f"input {name!r}: its shape holds {count} value(s), received {array.size}"
        )
    return array


def decode_binary_data(data: memoryview, datatype: str, count: int, name: str) -> np.ndarray:
    """The values of one input's binary data as a flat array (read-only, over ``data``)."""
    if datatype == "BYTES":
        return decode_bytes_tensor(data, count, name)
    target = DATATYPES[datatype]
    if len(data) != count * target.itemsize:
        raise InvalidRequestError(
            f"input {name!r}: {count} {datatype} value(s) need {count * target.itemsize} "
            f"bytes, binary_data_size is {len(data)}"
        )
    if datatype == "BOOL":
        raw = np.frombuffer(data, dtype=np.uint8)
        if raw.size and raw.max() > 1:
            raise InvalidRequestError(f"input {name!r} (BOOL): bytes must be 0 or 1")
        return raw.view(np.bool_)
    return np.frombuffer(data, dtype=target)


def decode_bytes_tensor(data: bytes | memoryview, count: int, name: str) -> np.ndarray:
    """BYTES elements (4-byte little-endian length, then UTF-8 bytes) as an object array of
    ``str``."""
    view = memoryview(data)
    items: list[memoryview] = []
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise InvalidRequestError(f"input {name!r} (BYTES): truncated length prefix")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise InvalidRequestError(
                f"input {name!r} (BYTES): element {len(items)} claims {length} bytes, "
                f"{len(view) - offset} remain"
            )
        items.append(view[offset : offset + length])
        offset += length
    return decode_bytes_elements(items, count, name)


def decode_bytes_elements(items: Sequence[bytes | memoryview], count: int, name: str) -> np.ndarray:
    """BYTES elements (UTF-8) as a flat object array of ``str``, ``count`` of them."""
    return check_count(
        object_array([_utf8(raw, name, index) for index, raw in enumerate(items)]), count, name
    )


def _utf8(raw: bytes | memoryview, name: str, index: int) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequestError(
            f"input {name!r} (BYTES): element {index} is not valid UTF-8 ({e.reason} at byte "
            f"{e.start}); BYTES inputs are ONNX STRING tensors and must hold UTF-8 text"
        ) from None


# ---- encoding ------------------------------------------------------------------------------
def encode_bytes_tensor(array: np.ndarray) -> bytes:
    """An object array of ``bytes``/``str`` in the BYTES binary layout."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        raw = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts += [struct.pack("<I", len(raw)), raw]
    return b"".join(parts)


@dataclass
class ResponseTensor:
    name: str
    datatype: str
    array: np.ndarray
    binary: bool


def encode_response(
    model_name: str, model_version: str, request_id: str | None, outputs: list[ResponseTensor]
) -> tuple[bytes, dict[str, str]]:
    """The response body and its content headers (binary outputs follow the JSON header)."""
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for out in outputs:
        entry: dict[str, Any] = {
            "name": out.name,
            "datatype": out.datatype,
            "shape": list(out.array.shape),
        }
        if out.binary:
            blob = _to_bytes(out.array, out.datatype)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _to_json_values(out.array, out.datatype, out.name)
        entries.append(entry)
    header: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        header["id"] = request_id
    header["outputs"] = entries
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if not blobs:
        return text, {"Content-Type": "application/json"}
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(text)),
    }
    return b"".join([text, *blobs]), headers


def _to_bytes(array: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        return encode_bytes_tensor(array)
    return np.ascontiguousarray(array).tobytes()


def _to_json_values(array: np.ndarray, datatype: str, name: str) -> list[Any]:
    flat = array.reshape(-1)
    if datatype == "BYTES":
        try:
            return [v if isinstance(v, str) else bytes(v).decode("utf-8") for v in flat]
        except UnicodeDecodeError:
            raise InvalidRequestError(
                f"output {name!r} holds bytes that are not UTF-8; request it with binary_data true"
            ) from None
    if datatype in ("FP16", "BF16"):
        flat = flat.astype(np.float32)
    return flat.tolist()

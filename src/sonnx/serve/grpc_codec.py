"""Tensors in the gRPC messages of the Open Inference Protocol (``inference.ModelInferRequest``
and ``ModelInferResponse``, the protobuf classes ``tritonclient[grpc]`` ships).

An input's values come either in ``raw_input_contents`` (one blob per input, in the order of
``inputs``; what ``tritonclient.grpc`` sends) laid out exactly like the HTTP binary tensor data
extension, or in the typed ``contents`` field of its datatype (``fp32_contents`` for FP32,
``int_contents`` for INT8/16/32, ``bytes_contents`` for BYTES, ...; FP16 and BF16 have none and
must be raw). Both decode through :mod:`sonnx.serve.codec`, so the arrays, and the error
messages, are the same as over HTTP. Outputs are always returned as ``raw_output_contents``
(BYTES as 4-byte-length-prefixed elements), which every Triton client reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from sonnx.serve import codec
from sonnx.serve.errors import InvalidRequestError, UnsupportedError

# The typed ``InferTensorContents`` field that carries each datatype (FP16/BF16: raw only).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def decode_infer_request(request: pb.ModelInferRequest) -> codec.InferRequest:
    """The inputs, requested outputs and timeout of a ``ModelInferRequest``."""
    params = request.parameters
    if "sequence_id" in params:
        raise UnsupportedError("sequence batching (parameter 'sequence_id') is not supported")
    if not request.inputs:
        raise InvalidRequestError("request 'inputs' must be a non-empty list, received []")
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidRequestError(
            f"raw_input_contents must hold one entry per input ({len(request.inputs)}), "
            f"received {len(raw)}"
        )
    inputs = [
        _decode_input(tensor, raw[i] if raw else None) for i, tensor in enumerate(request.inputs)
    ]
    names = [t.name for t in inputs]
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"each input may be given once, received inputs {names}")
    return codec.InferRequest(
        id=request.id or None,
        inputs=inputs,
        outputs=_requested_outputs(request.outputs),
        binary_output=True,
        timeout_s=_timeout(params),
    )


def _decode_input(
    tensor: pb.ModelInferRequest.InferInputTensor, raw: bytes | None
) -> codec.RequestTensor:
    name, datatype, shape = tensor.name, tensor.datatype, list(tensor.shape)
    if not name:
        raise InvalidRequestError("each input needs a non-empty 'name'")
    codec.check_declared(name, datatype, shape)
    count = math.prod(shape)
    filled = [f.name for f, _ in tensor.contents.ListFields()]
    if raw is not None:
        if filled:
            raise InvalidRequestError(
                f"input {name!r} has both raw_input_contents and typed contents {filled}; "
                "send one of them"
            )
        array = codec.decode_binary_data(memoryview(raw), datatype, count, name)
    else:
        array = _decode_contents(tensor.contents, filled, datatype, count, name)
    return codec.RequestTensor(name, datatype, tuple(shape), array.reshape(shape))


def _decode_contents(
    contents: pb.InferTensorContents, filled: list[str], datatype: str, count: int, name: str
) -> np.ndarray:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidRequestError(
            f"input {name!r} ({datatype}): {datatype} values have no typed contents field; "
            "send them in raw_input_contents"
        )
    if filled not in ([], [field]):
        raise InvalidRequestError(
            f"input {name!r} ({datatype}): values belong in contents.{field}, received {filled}"
        )
    values = getattr(contents, field)
    if datatype == "BYTES":
        return codec.decode_bytes_elements(values, count, name)
    # Integers are range-checked (300 is no INT8) and counted as JSON data is.
    return codec.decode_json_data(list(values), datatype, count, name)


def _requested_outputs(
    outputs: Iterable[pb.ModelInferRequest.InferRequestedOutputTensor],
) -> list[codec.RequestedOutput] | None:
    requested = []
    for output in outputs:
        if "classification" in output.parameters:
            raise UnsupportedError(
                f"output {output.name!r}: the classification extension is not supported"
            )
        requested.append(codec.RequestedOutput(output.name, binary=True))
    return requested or None


def _timeout(params: Mapping[str, pb.InferParameter]) -> float | None:
    """The ``timeout`` parameter, in microseconds as Triton's clients send it, as seconds."""
    if "timeout" not in params:
        return None
    param = params["timeout"]
    kind = param.WhichOneof("parameter_choice")
    value = getattr(param, kind) if kind else None
    if kind not in ("int64_param", "uint64_param") or value <= 0:
        raise InvalidRequestError(
            f"parameter 'timeout' must be a positive integer number of microseconds, "
            f"received {value!r}"
        )
    return value / 1e6


def encode_infer_response(
    model_name: str, model_version: str, request_id: str | None, outputs: list[codec.ResponseTensor]
) -> pb.ModelInferResponse:
    """A ``ModelInferResponse`` carrying every output in ``raw_output_contents``."""
    response = pb.ModelInferResponse(
        model_name=model_name, model_version=model_version, id=request_id or ""
    )
    for out in outputs:
        response.outputs.add(name=out.name, datatype=out.datatype, shape=out.array.shape)
        response.raw_output_contents.append(_raw(out.array, out.datatype))
    return response


def _raw(array: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        return codec.encode_bytes_tensor(array)
    return np.ascontiguousarray(array).tobytes()

"""The tensor codec alone: JSON and binary decoding, BYTES, and responses read back by
tritonclient's own parser."""

from __future__ import annotations

import json
import re

import ml_dtypes
import numpy as np
import pytest
from tritonclient.http import InferResult
from tritonclient.utils import serialize_byte_tensor

from sonnx.serve import codec, datatypes
from sonnx.serve.errors import InvalidRequestError, UnsupportedError


def request(*inputs: dict, **extra) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def test_bytes_round_trip_matches_tritonclient_layout() -> None:
    values = np.array(["hello", "", "gr\u00fc\u00df", "\u732b\U0001f408"], dtype=object)
    encoded = codec.encode_bytes_tensor(values)
    assert encoded == serialize_byte_tensor(values).item()  # a 0-d object array of bytes
    decoded = codec.decode_bytes_tensor(encoded, 4, "text")
    assert decoded.dtype == object and list(decoded) == list(values)  # str, as sonnx runs them
    as_bytes = np.array([v.encode() for v in values], dtype=object)
    assert codec.encode_bytes_tensor(as_bytes) == encoded


def test_bytes_that_are_not_utf8_are_named() -> None:
    data = serialize_byte_tensor(np.array([b"ok", b"\xff\xfe"], dtype=object)).item()
    message = "input 'text' (BYTES): element 1 is not valid UTF-8 (invalid start byte at byte 0)"
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        codec.decode_bytes_tensor(data, 2, "text")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x05\x00\x00", "truncated length prefix"),
        (b"\x09\x00\x00\x00abc", "element 0 claims 9 bytes, 3 remain"),
        (b"\x01\x00\x00\x00a", "its shape holds 2 value(s), received 1"),
    ],
)
def test_bad_bytes_data_is_named(data: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        codec.decode_bytes_tensor(data, 2, "text")


def test_bytes_in_json_and_binary_requests() -> None:
    blob = codec.encode_bytes_tensor(np.array([b"a", b"bc"], dtype=object))
    header = request(
        {"name": "j", "shape": [1, 2], "datatype": "BYTES", "data": [["x", "y\u00e9"]]},
        {"name": "b", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": 11}},
    )
    decoded = codec.decode_request(header + blob, len(header))
    assert decoded.inputs[0].array.tolist() == [["x", "y\u00e9"]]
    assert decoded.inputs[1].array.tolist() == ["a", "bc"]
    assert all(a.dtype == object for a in (decoded.inputs[0].array, decoded.inputs[1].array))
    numbers = request({"name": "j", "shape": [2], "datatype": "BYTES", "data": ["x", 3]})
    with pytest.raises(InvalidRequestError, match=r"list of strings, received \["):
        codec.decode_request(numbers, None)


def test_json_numbers_are_checked_per_datatype() -> None:
    big = [2**64 - 1, 3, 2**63]
    exact = codec.decode_json_data(big, "UINT64", 3, "ids")
    assert exact.dtype == np.uint64 and exact.tolist() == big
    nested = codec.decode_json_data([[1.5, -2.0], [0.25, 3]], "BF16", 4, "x")
    assert nested.dtype == ml_dtypes.bfloat16 and nested.astype(np.float32).tolist() == [
        1.5,
        -2.0,
        0.25,
        3.0,
    ]
    with pytest.raises(InvalidRequestError, match=r"values must lie in \[-128, 127\], received"):
        codec.decode_json_data([1, 300], "INT8", 2, "x")
    with pytest.raises(InvalidRequestError, match=r"list of integers, received \[1\.5\]"):
        codec.decode_json_data([1.5], "INT64", 1, "x")
    with pytest.raises(InvalidRequestError, match="list of integers"):
        codec.decode_json_data([True], "INT32", 1, "x")
    with pytest.raises(InvalidRequestError, match="list of true/false"):
        codec.decode_json_data([1, 0], "BOOL", 2, "x")
    with pytest.raises(InvalidRequestError, match="list of numbers"):
        codec.decode_json_data([[1.0, 2.0], [3.0]], "FP32", 3, "x")


def test_binary_bool_must_be_zero_or_one() -> None:
    with pytest.raises(InvalidRequestError, match="input 'm' \\(BOOL\\): bytes must be 0 or 1"):
        codec.decode_binary_data(memoryview(b"\x00\x02"), "BOOL", 2, "m")


@pytest.mark.parametrize(
    ("body", "header_length", "message"),
    [
        (
            request({"name": "x", "shape": [1], "datatype": "FP8", "data": [1]}),
            None,
            "'datatype' must be one of BOOL",
        ),
        (
            request({"name": "x", "shape": [-1], "datatype": "FP32", "data": [1]}),
            None,
            "'shape' must be a list of non-negative integers",
        ),
        (
            request({"name": "x", "shape": [1], "datatype": "FP32"}),
            None,
            "neither 'data' nor a 'binary_data_size'",
        ),
        (
            request(
                {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                {"name": "x", "shape": [1], "datatype": "FP32", "data": [2]},
            ),
            None,
            "each input may be given once",
        ),
        (
            request(
                {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                parameters={"sequence_id": 3},
            ),
            None,
            "sequence batching",
        ),
        (
            request(
                {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                parameters={"timeout": -5},
            ),
            None,
            "'timeout' must be a positive integer",
        ),
        (
            request({"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}) + b"xx",
            10_000,
            "between 0 and the body size",
        ),
        (
            request(
                {
                    "name": "x",
                    "shape": [1],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 8},
                }
            ),
            None,
            "runs past the end",
        ),
    ],
)
def test_malformed_requests_are_named(body: bytes, header_length, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        codec.decode_request(body, header_length)


def test_leftover_binary_data_is_an_error() -> None:
    header = request({"name": "x", "shape": [1], "datatype": "FP32", "data": [1]})
    with pytest.raises(InvalidRequestError, match="add up to 0 bytes, but the body carries 4"):
        codec.decode_request(header + bytes(4), len(header))


def test_classification_output_is_unsupported() -> None:
    body = request(
        {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
        outputs=[{"name": "y", "parameters": {"classification": 3}}],
    )
    with pytest.raises(UnsupportedError, match="classification extension"):
        codec.decode_request(body, None)


def test_responses_read_back_by_tritonclient() -> None:
    floats = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    halves = floats.astype(np.float16)
    words = np.array([[b"ab"], [b"c"]], dtype=object)
    outputs = [
        codec.ResponseTensor("json", "FP32", floats, binary=False),
        codec.ResponseTensor("bin", "FP16", halves, binary=True),
        codec.ResponseTensor("words", "BYTES", words, binary=True),
        codec.ResponseTensor("flags", "BOOL", floats > 0, binary=False),
    ]
    body, headers = codec.encode_response("m", "3", "req-9", outputs)
    assert headers["Content-Type"] == "application/octet-stream"
    result = InferResult.from_response_body(
        body, header_length=int(headers["Inference-Header-Content-Length"])
    )
    assert result.get_response()["id"] == "req-9"
    np.testing.assert_array_equal(result.as_numpy("json"), floats)  # JSON floats are exact
    np.testing.assert_array_equal(result.as_numpy("bin"), halves)
    assert result.as_numpy("words").tolist() == words.tolist()
    np.testing.assert_array_equal(result.as_numpy("flags"), floats > 0)


def test_json_only_response_and_bf16_as_numbers() -> None:
    values = np.array([1.5, -0.25], dtype=ml_dtypes.bfloat16)
    body, headers = codec.encode_response(
        "m", "1", None, [codec.ResponseTensor("y", "BF16", values, binary=False)]
    )
    assert headers == {"Content-Type": "application/json"}
    assert json.loads(body)["outputs"] == [
        {"name": "y", "datatype": "BF16", "shape": [2], "data": [1.5, -0.25]}
    ]


def test_datatypes_of_arrays_and_onnx_types() -> None:
    assert datatypes.datatype_of_array(np.zeros(1, ml_dtypes.bfloat16), "y") == "BF16"
    assert datatypes.datatype_of_array(np.array([b"x"], dtype=object), "y") == "BYTES"
    with pytest.raises(UnsupportedError, match="complex64, which has no KServe v2 datatype"):
        datatypes.datatype_of_array(np.zeros(1, np.complex64), "output 'y'")
    assert datatypes.datatype_of_onnx(8, "input 'text'") == "BYTES"  # TensorProto.STRING
    with pytest.raises(UnsupportedError, match="input 'z' has ONNX element type COMPLEX64"):
        datatypes.datatype_of_onnx(14, "input 'z'")

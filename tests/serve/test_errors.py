"""Bad requests get a clear 4xx naming what is wrong, and the server keeps serving."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonnx import tensor
from tests.serve import helpers

IMAGE = np.zeros((1, *helpers.CNN_IMAGE), np.float32)


@pytest.fixture
def still_serving(server, client, reps):
    """After the test's bad requests, the server still answers a good one correctly."""
    yield
    assert client.is_server_live()
    status, _, body = helpers.http(
        server.port, "POST", "/v2/models/cnn/infer", helpers.infer_body("input", IMAGE)
    )
    assert status == 200
    got = np.array(json.loads(body)["outputs"][0]["data"], np.float32).reshape(1, 10)
    np.testing.assert_array_equal(got, tensor.to_numpy(reps["cnn/1"].run([IMAGE])[0]))


def post(server, path: str, body: bytes, **headers: str) -> tuple[int, str]:
    status, _, data = helpers.http(server.port, "POST", path, body, headers)
    return status, json.loads(data)["error"]


CASES = {
    "malformed JSON": (b'{"inputs": [', "not valid JSON"),
    "not an object": (b"[1, 2]", "must be a JSON object, received [1, 2]"),
    "no inputs": (b'{"inputs": []}', "'inputs' must be a non-empty list"),
    "wrong shape": (
        helpers.infer_body("input", np.zeros((1, 3, 8, 8), np.float32)),
        "input 'input' expects shape [-1, 3, 16, 16] (-1: any size), received [1, 3, 8, 8]",
    ),
    "wrong datatype": (
        helpers.infer_body("input", IMAGE.astype(np.float64), "FP64"),
        "input 'input' expects datatype FP32, received FP64",
    ),
    "unknown input": (
        helpers.infer_body("image", IMAGE),
        "unknown input(s) ['image']; the model's inputs are ['input']",
    ),
    "too few values": (
        json.dumps(
            {
                "inputs": [
                    {"name": "input", "shape": [1, 3, 16, 16], "datatype": "FP32", "data": [1]}
                ]
            }
        ).encode(),
        "input 'input': its shape holds 768 value(s), received 1",
    ),
    "strings as FP32": (
        json.dumps(
            {"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": ["a"]}]}
        ).encode(),
        "input 'input' (FP32): JSON data must be a (nested) list of numbers",
    ),
    "batch above max_batch_size": (
        helpers.infer_body("input", np.zeros((33, *helpers.CNN_IMAGE), np.float32)),
        "must be at most max_batch_size 32, received 33",
    ),
    "unknown output": (
        json.dumps(
            {
                "inputs": json.loads(helpers.infer_body("input", IMAGE))["inputs"],
                "outputs": [{"name": "probabilities"}],
            }
        ).encode(),
        "unknown output(s) ['probabilities']; the model's outputs are ['output']",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_request_is_400_with_a_clear_message(server, still_serving, case: str) -> None:
    body, message = CASES[case]
    status, error = post(server, "/v2/models/cnn/infer", body)
    assert status == 400
    assert message in error


def test_binary_size_mismatch_is_400(server, still_serving) -> None:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 3, 16, 16],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 100},
                }
            ]
        }
    ).encode()
    body = header + bytes(100)
    status, error = post(
        server,
        "/v2/models/cnn/infer",
        body,
        **{"Inference-Header-Content-Length": str(len(header))},
    )
    assert status == 400
    assert "768 FP32 value(s) need 3072 bytes, binary_data_size is 100" in error


def test_unknown_model_and_route_are_404(server, client, still_serving) -> None:
    status, error = post(server, "/v2/models/resnet/infer", helpers.infer_body("input", IMAGE))
    assert status == 404
    assert "unknown model 'resnet'" in error and "'cnn'" in error
    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("resnet")
    assert err.value.status() == "404"
    status, _, body = helpers.http(server.port, "GET", "/v3/nothing")
    assert status == 404 and json.loads(body) == {"error": "Not Found"}


def test_100_mb_body_is_413_and_the_connection_closes(server, still_serving) -> None:
    size = 100 * 2**20
    head = (
        f"POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    chunk = b" " * 2**20
    status, response = helpers.stream_request(server.port, head, (chunk for _ in range(100)))
    assert status == 413
    assert b"exceeds the server's limit of 4194304 bytes" in response
    assert b"connection: close" in response.lower()


def test_chunked_body_over_the_limit_is_413_while_streaming(server, still_serving) -> None:
    head = b"POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b" " * 2**20
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    status, response = helpers.stream_request(server.port, head, (chunk for _ in range(64)))
    assert status == 413
    assert b"exceeds the server's limit" in response


def test_deadline_passed_is_504(client, still_serving) -> None:
    given = httpclient.InferInput("input", list(IMAGE.shape), "FP32")
    given.set_data_from_numpy(IMAGE)
    with pytest.raises(InferenceServerException, match="deadline") as err:
        client.infer("cnn", [given], timeout=1)  # microseconds: expired before it can run
    assert err.value.status() == "504"


def test_sonnx_error_while_running_is_400(client, still_serving) -> None:
    """A token id past the vocabulary passes the shape checks; sonnx's Gather rejects it."""
    ids, mask, segments = (t.numpy() for t in helpers.bert_inputs(batch=1))
    ids[0, 3] = helpers.VOCAB + 1000
    given = []
    for name, array in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", segments)):
        given.append(httpclient.InferInput(name, list(array.shape), "INT64"))
        given[-1].set_data_from_numpy(array)
    with pytest.raises(
        InferenceServerException,
        match=r"Gather: input indices must hold indices in \[-50, 49\], received 1050",
    ) as err:
        client.infer("bert", given)
    assert err.value.status() == "400"


def test_compressed_body_is_refused_clearly(server, still_serving) -> None:
    status, error = post(
        server,
        "/v2/models/cnn/infer",
        helpers.infer_body("input", IMAGE),
        **{"Content-Encoding": "gzip"},
    )
    assert status == 400 and "Content-Encoding 'gzip' is not supported" in error

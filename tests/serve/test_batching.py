"""Dynamic batching and overload against the real server: merged runs give each client its
own rows, a full queue answers 503 with Retry-After, and /metrics shows both."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.http as httpclient

from sonnx import tensor
from tests.serve import helpers


def image_input(image: np.ndarray) -> httpclient.InferInput:
    given = httpclient.InferInput("input", list(image.shape), "FP32")
    given.set_data_from_numpy(image)
    return given


def test_concurrent_requests_are_merged_and_equal_one_by_one(server, client, reps) -> None:
    images = np.random.default_rng(7).standard_normal((32, 1, *helpers.CNN_IMAGE))
    images = images.astype(np.float32)
    runs_before = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="cnn")
    rows_before = helpers.metric(server.port, "sonnx_serve_batch_size_sum", model="cnn")
    one_by_one = [client.infer("cnn", [image_input(x)]).as_numpy("output") for x in images]
    pending = [client.async_infer("cnn", [image_input(x)]) for x in images]
    together = [p.get_result(timeout=60).as_numpy("output") for p in pending]
    rep = reps["cnn/1"]
    for x, alone, merged in zip(images, one_by_one, together, strict=True):
        np.testing.assert_array_equal(alone, tensor.to_numpy(rep.run([x])[0]))
        # torch picks kernels by batch size, so a merged row may differ in the last bits
        np.testing.assert_allclose(merged, alone, rtol=1e-5, atol=1e-6)
        assert merged.argmax() == alone.argmax()
    runs = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="cnn") - runs_before
    rows = helpers.metric(server.port, "sonnx_serve_batch_size_sum", model="cnn") - rows_before
    assert rows == 64
    assert runs < 64 - 1, f"{runs} runs for 64 requests: nothing was merged"
    assert helpers.metric(server.port, "sonnx_serve_queue_depth", model="cnn") == 0


def test_padded_batches_give_the_same_bits_merged_or_alone(server, client) -> None:
    images = np.random.default_rng(8).standard_normal((32, 1, *helpers.CNN_IMAGE))
    images = images.astype(np.float32)
    runs_before = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="cnn-padded")
    one_by_one = [client.infer("cnn-padded", [image_input(x)]).as_numpy("output") for x in images]
    pending = [client.async_infer("cnn-padded", [image_input(x)]) for x in images]
    together = [p.get_result(timeout=60).as_numpy("output") for p in pending]
    for alone, merged in zip(one_by_one, together, strict=True):
        np.testing.assert_array_equal(merged, alone)
    runs = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="cnn-padded")
    assert runs - runs_before < 64 - 1, "nothing was merged"


def test_full_queue_is_503_and_every_200_is_its_own_result(server, reps) -> None:
    """64 clients at once against max_queue_size 4 (max_batch_size 4)."""
    rng = np.random.default_rng(8)
    images = rng.standard_normal((64, 1, *helpers.SLOW_IMAGE)).astype(np.float32)

    def send(image: np.ndarray) -> tuple[int, dict[str, str], bytes]:
        body, length = helpers.binary_infer_body("input", image)
        headers = {"Inference-Header-Content-Length": length}
        return helpers.http(server.port, "POST", "/v2/models/slow/infer", body, headers)

    with ThreadPoolExecutor(max_workers=64) as pool:
        answers = list(pool.map(send, images))
    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(503) > 0 and statuses.count(200) > 0, statuses
    rep = reps["slow/1"]
    for image, (status, headers, body) in zip(images, answers, strict=True):
        if status == 503:
            assert headers["retry-after"] == "1"
            assert "max_queue_size 4" in json.loads(body)["error"]
            continue
        got = helpers.binary_output(body, headers["inference-header-content-length"], (1, 10))
        np.testing.assert_allclose(got, tensor.to_numpy(rep.run([image])[0]), rtol=1e-4, atol=1e-5)
    failures = helpers.metric(
        server.port, "sonnx_serve_request_failures_total", model="slow", code="503"
    )
    assert failures == statuses.count(503)
    assert client_is_served(server)


def client_is_served(server) -> bool:
    status, _, _ = helpers.http(server.port, "GET", "/v2/health/ready")
    return status == 200

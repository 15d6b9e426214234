"""String models behind the server: ONNX STRING is KServe BYTES, in JSON and binary, one by one
and dynamically batched, through tritonclient; results equal ``prepare().run`` exactly."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonnx import tensor
from tests.serve import helpers

WORDS = np.array([["cat", "d\u00f6g"], ["", "cat"], ["\u732b", "cat "]], dtype=object)


def run(rep, inputs) -> list[np.ndarray]:
    return [tensor.to_numpy(t) for t in rep.run(inputs)]


def as_text(array: np.ndarray) -> np.ndarray:
    """tritonclient reads binary BYTES outputs as ``bytes`` and JSON ones as ``str``."""
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(array)


def text_input(words: np.ndarray, binary: bool) -> httpclient.InferInput:
    given = httpclient.InferInput("text", list(words.shape), "BYTES")
    return given.set_data_from_numpy(words, binary_data=binary)


def features_input(x: np.ndarray, binary: bool) -> httpclient.InferInput:
    given = httpclient.InferInput("X", list(x.shape), "FP32")
    return given.set_data_from_numpy(x, binary_data=binary)


def test_metadata_says_bytes(client) -> None:
    text = client.get_model_metadata("text")
    assert text["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1, 2]}]
    assert [(o["name"], o["datatype"]) for o in text["outputs"]] == [
        ("is_cat", "BOOL"),
        ("echo", "BYTES"),
    ]
    labels = client.get_model_metadata("labels")
    assert [(o["name"], o["datatype"], o["shape"]) for o in labels["outputs"]] == [
        ("label", "BYTES", [-1]),
        ("probabilities", "FP32", [-1, 3]),
    ]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_string_model_equals_prepare_run(client, reps, binary: bool) -> None:
    wanted = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("is_cat", "echo")]
    result = client.infer("text", [text_input(WORDS, binary)], outputs=wanted)
    is_cat, echo = run(reps["text/1"], {"text": WORDS})
    assert ("data" in result.get_response()["outputs"][1]) is not binary
    np.testing.assert_array_equal(result.as_numpy("is_cat"), is_cat)
    got = result.as_numpy("echo")
    assert got.dtype == object and as_text(got).tolist() == echo.tolist()
    assert echo[2].tolist() == ["\u732b", "cat ", "cat ", "\u732b"]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_classifier_with_string_labels_equals_prepare_run(client, reps, binary: bool) -> None:
    x, _ = helpers.labelled_features(7, seed=12)
    wanted = [
        httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("label", "probabilities")
    ]
    result = client.infer("labels", [features_input(x, binary)], outputs=wanted)
    label, probabilities = run(reps["labels/1"], [x])
    assert as_text(result.as_numpy("label")).tolist() == label.tolist()
    np.testing.assert_array_equal(result.as_numpy("probabilities"), probabilities)
    assert label.tolist() == helpers.fitted_classifier().predict(x).tolist()


def test_concurrent_string_requests_are_merged_and_each_gets_its_own(server, client, reps):
    rng = np.random.default_rng(13)
    vocabulary = np.array(["cat", "dog", "", "\u732b", "bird"], dtype=object)
    words = [vocabulary[rng.integers(0, len(vocabulary), (1, 2))] for _ in range(16)]
    features = [helpers.labelled_features(1, seed=20 + i)[0] for i in range(16)]
    runs_before = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="text")
    pending = [client.async_infer("text", [text_input(w, i % 2 == 0)]) for i, w in enumerate(words)]
    labelled = [client.async_infer("labels", [features_input(x, True)]) for x in features]
    for w, p in zip(words, pending, strict=True):
        result = p.get_result(timeout=60)
        is_cat, echo = run(reps["text/1"], {"text": w})
        np.testing.assert_array_equal(result.as_numpy("is_cat"), is_cat)
        assert as_text(result.as_numpy("echo")).tolist() == echo.tolist()
    for x, p in zip(features, labelled, strict=True):
        result = p.get_result(timeout=60)
        label, probabilities = run(reps["labels/1"], [x])
        assert as_text(result.as_numpy("label")).tolist() == label.tolist()
        # torch picks kernels by batch size, so a merged row may differ in the last bits
        np.testing.assert_allclose(result.as_numpy("probabilities"), probabilities, rtol=1e-5)
    runs = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="text") - runs_before
    assert runs < len(words), f"{runs} runs for {len(words)} string requests: nothing merged"


def test_bytes_that_are_not_utf8_are_a_400_naming_the_input(client) -> None:
    given = text_input(np.array([[b"ok", b"\xff"]], dtype=object), binary=True)
    with pytest.raises(InferenceServerException, match="input 'text' \\(BYTES\\): element 1") as e:
        client.infer("text", [given])
    assert e.value.status() == "400"
    assert "must hold UTF-8 text" in str(e.value)
    assert client.is_model_ready("text")


def test_numbers_sent_as_bytes_are_a_400_naming_the_input(server) -> None:
    body = helpers.infer_body("X", np.zeros((1, 4), np.float32), "BYTES")
    status, _, answer = helpers.http(server.port, "POST", "/v2/models/labels/infer", body)
    assert status == 400
    assert b"input 'X' (BYTES): JSON data must be a (nested) list of strings" in answer

"""The gRPC endpoint through Triton's own client (tritonclient.grpc): health, metadata,
inference equal to ``prepare().run``, BYTES tensors, typed contents, batching shared with HTTP,
status codes and messages, the API key and a graceful SIGTERM."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

import sonnx
from sonnx import cli, tensor
from sonnx.serve import create_app
from sonnx.serve.grpc_service import GrpcEndpoint
from sonnx.serve.server import bind_socket
from tests.serve import helpers

WORDS = np.array([["cat", "d\u00f6g"], ["", "cat"], ["\u732b", "cat "]], dtype=object)


def run(rep, inputs) -> list[np.ndarray]:
    return [tensor.to_numpy(t) for t in rep.run(inputs)]


def grpc_input(name: str, array: np.ndarray, datatype: str = "FP32") -> grpcclient.InferInput:
    given = grpcclient.InferInput(name, list(array.shape), datatype)
    return given.set_data_from_numpy(array)


def status_of(error: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return error.value.status().removeprefix("StatusCode.")


# ---- health and metadata -------------------------------------------------------------------
def test_health(grpc_client) -> None:
    assert grpc_client.is_server_live()
    assert grpc_client.is_server_ready()
    assert grpc_client.is_model_ready("cnn")
    assert grpc_client.is_model_ready("versioned", "1")
    assert not grpc_client.is_model_ready("versioned", "7")
    assert not grpc_client.is_model_ready("no_such_model")
    meta = grpc_client.get_server_metadata()
    assert meta.name == "sonnx" and "model_repository" in meta.extensions


def test_model_metadata_has_datatypes_and_dynamic_dims(grpc_client) -> None:
    cnn = grpc_client.get_model_metadata("cnn")
    assert (cnn.name, cnn.platform, list(cnn.versions)) == ("cnn", "sonnx_onnx", ["1"])
    assert [(t.name, t.datatype, list(t.shape)) for t in cnn.inputs] == [
        ("input", "FP32", [-1, *helpers.CNN_IMAGE])
    ]
    bert = grpc_client.get_model_metadata("bert")
    assert [(t.name, t.datatype, list(t.shape)) for t in bert.inputs] == [
        (name, "INT64", [-1, -1]) for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    assert [(t.name, list(t.shape)) for t in bert.outputs] == [
        ("logits", [-1, -1, 4]),
        ("pooled", [-1, 4]),
    ]
    text = grpc_client.get_model_metadata("text")
    assert [(t.name, t.datatype) for t in [*text.inputs, *text.outputs]] == [
        ("text", "BYTES"),
        ("is_cat", "BOOL"),
        ("echo", "BYTES"),
    ]
    assert list(grpc_client.get_model_metadata("versioned").versions) == ["1", "2"]


def test_unimplemented_rpcs_say_so(grpc_client) -> None:
    with pytest.raises(InferenceServerException) as err:
        grpc_client.get_model_config("cnn")
    assert status_of(err) == "UNIMPLEMENTED"


# ---- inference -----------------------------------------------------------------------------
def test_cnn_equals_prepare_run(grpc_client, reps) -> None:
    images = np.random.default_rng(1).standard_normal((3, *helpers.CNN_IMAGE)).astype(np.float32)
    result = grpc_client.infer("cnn", [grpc_input("input", images)], request_id="r1")
    assert result.get_response().id == "r1"
    assert result.get_response().model_version == "1"
    np.testing.assert_array_equal(result.as_numpy("output"), run(reps["cnn/1"], [images])[0])


def test_versions_and_several_int64_inputs(grpc_client, reps) -> None:
    ids, mask, segments = (t.numpy() for t in helpers.bert_inputs(2, seed=4))
    inputs = [
        grpc_input("input_ids", ids, "INT64"),
        grpc_input("attention_mask", mask, "INT64"),
        grpc_input("token_type_ids", segments, "INT64"),
    ]
    wanted = [grpcclient.InferRequestedOutput("pooled")]
    result = grpc_client.infer("bert", inputs, outputs=wanted)
    assert [o.name for o in result.get_response().outputs] == ["pooled"]
    expected = run(reps["bert/1"], [ids, mask, segments])[1]
    np.testing.assert_array_equal(result.as_numpy("pooled"), expected)
    image = np.ones((1, *helpers.CNN_IMAGE), np.float32)
    for version in ("1", "2"):
        got = grpc_client.infer("versioned", [grpc_input("input", image)], model_version=version)
        expected = run(reps[f"versioned/{version}"], [image])[0]
        np.testing.assert_array_equal(got.as_numpy("output"), expected)


def test_string_models_equal_prepare_run(grpc_client, reps) -> None:
    result = grpc_client.infer("text", [grpc_input("text", WORDS, "BYTES")])
    is_cat, echo = run(reps["text/1"], {"text": WORDS})
    np.testing.assert_array_equal(result.as_numpy("is_cat"), is_cat)
    got = result.as_numpy("echo")
    assert got.dtype == object
    assert [[v.decode() for v in row] for row in got] == echo.tolist()
    x, _ = helpers.labelled_features(5, seed=3)
    labels = grpc_client.infer("labels", [grpc_input("X", x)])
    label, probabilities = run(reps["labels/1"], {"X": x})
    assert [v.decode() for v in labels.as_numpy("label")] == label.tolist()
    np.testing.assert_array_equal(labels.as_numpy("probabilities"), probabilities)


def stub(server) -> service_pb2_grpc.GRPCInferenceServiceStub:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.logged('grpc_listening')['port']}")
    return service_pb2_grpc.GRPCInferenceServiceStub(channel)


def typed_request(model: str, name: str, datatype: str, shape, **contents) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(
        name=name, datatype=datatype, shape=shape, contents=pb.InferTensorContents(**contents)
    )
    return request


def test_typed_contents_decode_like_raw(server, reps) -> None:
    """The ``contents`` fields other clients send; outputs still come back raw."""
    words = [w.encode() for w in WORDS.reshape(-1)]
    response = stub(server).ModelInfer(
        typed_request("text", "text", "BYTES", [3, 2], bytes_contents=words)
    )
    assert [o.name for o in response.outputs] == ["is_cat", "echo"]
    is_cat = np.frombuffer(response.raw_output_contents[0], np.bool_).reshape(3, 2)
    np.testing.assert_array_equal(is_cat, run(reps["text/1"], {"text": WORDS})[0])
    request = typed_request("bert", "input_ids", "INT64", [1, 2], int64_contents=[1, 2])
    for name in ("attention_mask", "token_type_ids"):
        request.inputs.add(
            name=name,
            datatype="INT64",
            shape=[1, 2],
            contents=pb.InferTensorContents(int64_contents=[1, 0]),
        )
    response = stub(server).ModelInfer(request)
    pooled = np.frombuffer(response.raw_output_contents[1], np.float32).reshape(1, 4)
    ids, mask = np.array([[1, 2]]), np.array([[1, 0]])
    np.testing.assert_array_equal(pooled, run(reps["bert/1"], [ids, mask, mask])[1])


def test_typed_contents_errors_name_the_input(server) -> None:
    cases = [
        (
            typed_request("cnn", "input", "FP32", [1, 3, 16, 16], int_contents=[1]),
            "input 'input' (FP32): values belong in contents.fp32_contents",
        ),
        (
            typed_request("text", "text", "BYTES", [1, 2], bytes_contents=[b"a", b"\xff"]),
            "input 'text' (BYTES): element 1 is not valid UTF-8",
        ),
        (
            typed_request("identity", "in_INT8", "INT8", [1, 3], int_contents=[1, 2, 300]),
            "input 'in_INT8' (INT8): values must lie in [-128, 127]",
        ),
        (
            typed_request("cnn", "input", "FP32", [1, 3, 16, 16], fp32_contents=[1.0]),
            "input 'input': its shape holds 768 value(s), received 1",
        ),
    ]
    for request, message in cases:
        with pytest.raises(grpc.RpcError) as err:
            stub(server).ModelInfer(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in err.value.details()


def test_concurrent_grpc_requests_are_batched(server, grpc_client, reps) -> None:
    images = np.random.default_rng(5).standard_normal((32, 1, *helpers.CNN_IMAGE))
    images = images.astype(np.float32)
    runs_before = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="cnn")
    grpc_before = helpers.metric(
        server.port, "sonnx_serve_requests_total", model="cnn", protocol="grpc"
    )

    def send(image: np.ndarray) -> np.ndarray:
        return grpc_client.infer("cnn", [grpc_input("input", image)]).as_numpy("output")

    with ThreadPoolExecutor(max_workers=len(images)) as pool:
        together = list(pool.map(send, images))
    runs = helpers.metric(server.port, "sonnx_serve_batch_size_count", model="cnn") - runs_before
    grpc_requests = helpers.metric(
        server.port, "sonnx_serve_requests_total", model="cnn", protocol="grpc"
    )
    assert grpc_requests - grpc_before == len(images)
    assert runs < len(images), f"{runs} runs for {len(images)} requests: nothing was merged"
    for image, merged in zip(images, together, strict=True):
        alone = run(reps["cnn/1"], [image])[0]
        # torch picks kernels by batch size, so a merged row may differ in the last bits
        np.testing.assert_allclose(merged, alone, rtol=1e-5, atol=1e-6)


# ---- status codes ---------------------------------------------------------------------------
def test_unknown_model_is_not_found(server, grpc_client) -> None:
    image = np.zeros((1, *helpers.CNN_IMAGE), np.float32)
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("no_such_model", [grpc_input("input", image)])
    assert status_of(err) == "NOT_FOUND"
    assert "unknown model 'no_such_model'" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        grpc_client.get_model_metadata("no_such_model")
    assert status_of(err) == "NOT_FOUND"
    failures = helpers.metric(
        server.port,
        "sonnx_serve_request_failures_total",
        model="_unknown",
        protocol="grpc",
        code="NOT_FOUND",
    )
    assert failures >= 1


def test_wrong_shape_is_invalid_argument_with_the_http_message(grpc_client, client) -> None:
    image = np.zeros((1, 3, 8, 8), np.float32)
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("cnn", [grpc_input("input", image)])
    assert status_of(err) == "INVALID_ARGUMENT"
    assert "input 'input' expects shape [-1, 3, 16, 16]" in err.value.message()
    assert "received [1, 3, 8, 8]" in err.value.message()
    given = httpclient.InferInput("input", list(image.shape), "FP32")
    given.set_data_from_numpy(image)
    with pytest.raises(InferenceServerException) as http_err:
        client.infer("cnn", [given])
    assert http_err.value.status() == "400"
    assert http_err.value.message() == err.value.message()


def test_request_timeout_is_deadline_exceeded(grpc_client) -> None:
    """A ``timeout`` of 1 microsecond has passed before the request is queued."""
    image = np.zeros((1, *helpers.SLOW_IMAGE), np.float32)
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("slow", [grpc_input("input", image)], timeout=1)
    assert status_of(err) == "DEADLINE_EXCEEDED"
    assert "did not finish before its deadline" in err.value.message()


def test_message_above_the_limit_is_resource_exhausted(grpc_client) -> None:
    big = np.zeros((200_000, 3), np.float64)  # 4.8 MB against --max-request-mb 4
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("identity", [grpc_input("in_FP64", big, "FP64")])
    assert status_of(err) == "RESOURCE_EXHAUSTED"


def test_full_queue_is_resource_exhausted(grpc_client, reps) -> None:
    """64 clients at once against max_queue_size 4 (max_batch_size 4)."""
    images = np.random.default_rng(8).standard_normal((64, 1, *helpers.SLOW_IMAGE))
    images = images.astype(np.float32)

    def send(image: np.ndarray) -> np.ndarray | InferenceServerException:
        try:
            return grpc_client.infer("slow", [grpc_input("input", image)]).as_numpy("output")
        except InferenceServerException as e:
            return e

    with ThreadPoolExecutor(max_workers=len(images)) as pool:
        answers = list(pool.map(send, images))
    refused = [a for a in answers if isinstance(a, InferenceServerException)]
    assert {a.status() for a in refused} == {"StatusCode.RESOURCE_EXHAUSTED"}
    assert "max_queue_size 4" in refused[0].message()
    assert len(refused) < len(images)
    for image, answer in zip(images, answers, strict=True):
        if not isinstance(answer, InferenceServerException):
            expected = run(reps["slow/1"], [image])[0]
            np.testing.assert_allclose(answer, expected, rtol=1e-4, atol=1e-5)


# ---- API key, repository, process ------------------------------------------------------------
def test_api_key_guards_everything_but_health(tmp_path: Path) -> None:
    helpers.write_model(tmp_path, "identity", 1, helpers.identity_model())
    endpoint = GrpcEndpoint("127.0.0.1", 0, api_key="s3cret")
    with helpers.thread_server(create_app(tmp_path, api_key="s3cret", services=[endpoint])):
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{endpoint.bound_port}")
        assert client.is_server_live()
        deadline = time.monotonic() + 60  # the model loads in the background
        while not client.is_server_ready():
            assert time.monotonic() < deadline, "not ready within 60 s"
            time.sleep(0.05)
        for headers in (None, {"authorization": "Bearer s3cre"}, {"x-api-key": "wrong"}):
            with pytest.raises(InferenceServerException) as err:
                client.get_server_metadata(headers=headers)
            assert status_of(err) == "UNAUTHENTICATED"
            assert "missing or wrong API key" in err.value.message()
        key = {"authorization": "Bearer s3cret"}
        assert client.get_server_metadata(headers=key).name == "sonnx"
        assert client.is_model_ready("identity", headers={"x-api-key": "s3cret"})
        values = np.arange(6, dtype=np.int32).reshape(2, 3)
        inputs = [
            grpc_input(f"in_{t}", values.astype(d), t) for t, (d, _) in helpers.DATATYPES.items()
        ]
        result = client.infer("identity", inputs, headers=key)
        np.testing.assert_array_equal(result.as_numpy("out_INT64"), values.astype(np.int64))
        _repository_round_trip(client, key)
        client.close()


def _repository_round_trip(client: grpcclient.InferenceServerClient, key: dict) -> None:
    index = client.get_model_repository_index(headers=key)
    assert [(m.name, m.version, m.state) for m in index.models] == [("identity", "1", "READY")]
    client.unload_model("identity", headers=key)
    assert not client.is_model_ready("identity", headers=key)
    client.load_model("identity", headers=key)
    assert client.is_model_ready("identity", headers=key)
    with pytest.raises(InferenceServerException) as err:
        client.load_model("no_such_model", headers=key)
    assert status_of(err) == "NOT_FOUND"


def test_sigterm_lets_in_flight_grpc_requests_finish_and_exits_0(tmp_path: Path) -> None:
    path = helpers.write_model(tmp_path, "slow", 1, helpers.slow_model(), {"max_queue_size": 64})
    server = helpers.ServerProcess(tmp_path, "--grpc-port", "0")
    client = grpcclient.InferenceServerClient(
        f"127.0.0.1:{server.logged('grpc_listening')['port']}"
    )
    images = np.random.default_rng(9).standard_normal((12, 1, *helpers.SLOW_IMAGE))
    images = images.astype(np.float32)

    def send(image: np.ndarray) -> np.ndarray:
        return client.infer("slow", [grpc_input("input", image)]).as_numpy("output")

    try:
        with ThreadPoolExecutor(max_workers=len(images)) as pool:
            answers = pool.map(send, images)
            in_flight = _wait_until_received(server.port, len(images))
            server.proc.terminate()  # SIGTERM
            answers = list(answers)
        assert in_flight > 0, "every request had finished before SIGTERM: nothing was tested"
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.stop()
        client.close()
    rep = sonnx.prepare(path)
    for image, got in zip(images, answers, strict=True):
        np.testing.assert_array_equal(got, run(rep, [image])[0])


def _wait_until_received(port: int, count: int, timeout: float = 30.0) -> float:
    """Scrape /metrics until the server has received ``count`` gRPC requests; the number in
    flight then. Each scrape is a round trip, so the loop needs no sleep; it is bounded."""
    deadline = time.monotonic() + timeout
    for _ in range(10_000):
        received = helpers.metric(port, "sonnx_serve_requests_total", model="slow", protocol="grpc")
        if received >= count:
            return helpers.metric(port, "sonnx_serve_requests_in_flight", model="slow")
        if time.monotonic() > deadline:
            break
    raise TimeoutError(f"the server received {received} of {count} requests in {timeout} s")


def test_serve_command_reports_a_grpc_port_in_use(tmp_path: Path, capsys) -> None:
    taken = bind_socket("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        code = cli.main(["serve", "--model-repository", str(tmp_path), "--grpc-port", str(port)])
    finally:
        taken.close()
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err

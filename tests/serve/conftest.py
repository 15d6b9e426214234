"""The repository every server test serves, one real server process for the module-level
tests (HTTP and gRPC), and tritonclient connected to it over each protocol."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import sonnx
from tests.serve import helpers


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repository")
    batching = {"max_batch_size": 32, "max_queue_delay_ms": 20, "max_queue_size": 128}
    helpers.write_model(root, "cnn", 1, helpers.cnn_model(seed=0), batching)
    padded = {**batching, "padded_batches": True}
    helpers.write_model(root, "cnn-padded", 1, helpers.cnn_model(seed=0), padded)
    helpers.write_model(root, "bert", 1, helpers.bert_model(), {"max_batch_size": 8})
    helpers.write_model(root, "versioned", 1, helpers.cnn_model(seed=1), {"versions": "all"})
    helpers.write_model(root, "versioned", 2, helpers.cnn_model(seed=2))
    overload = {"max_batch_size": 4, "max_queue_size": 4, "max_queue_delay_ms": 2}
    helpers.write_model(root, "slow", 1, helpers.slow_model(), overload)
    helpers.write_model(root, "identity", 1, helpers.identity_model())
    strings = {"max_batch_size": 16, "max_queue_delay_ms": 20}
    helpers.write_model(root, "text", 1, helpers.string_model(), strings)
    helpers.write_model(root, "labels", 1, helpers.classifier_model(), strings)
    helpers.write_checkpoint(root, "checkpoint", 1)
    return root


@pytest.fixture(scope="session")
def reps(repository: Path) -> dict[str, sonnx.SingaRep]:
    """Each served model prepared in this process: the reference for every response."""
    return {
        f"{model.parent.name}/{model.name}": sonnx.prepare(model / "model.onnx")
        for model in sorted(repository.glob("*/[0-9]*"))
        if model.parent.name != "checkpoint"
    }


@pytest.fixture(scope="session")
def server(repository: Path):
    process = helpers.ServerProcess(repository, "--max-request-mb", "4", "--grpc-port", "0")
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="session")
def client(server: helpers.ServerProcess):
    client = httpclient.InferenceServerClient(server.url, network_timeout=60.0, concurrency=64)
    yield client
    client.close()


@pytest.fixture(scope="session")
def grpc_client(server: helpers.ServerProcess):
    """tritonclient.grpc connected to the same server's gRPC port."""
    port = server.logged("grpc_listening")["port"]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    yield client
    client.close()

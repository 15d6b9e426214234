"""Load requests answer a failed load as an error, and readiness is Triton's strict readiness
(issue 47 items 5 and 6), through the app in this process."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from starlette.testclient import TestClient

from sonnx.serve.app import create_app
from sonnx.serve.errors import ModelLoadError
from sonnx.serve.metrics import ServeMetrics
from sonnx.serve.repository import ModelRepository
from tests.serve import helpers

ROW = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}


def identity() -> onnx.ModelProto:
    """``x`` [n, 3] -> ``y``, the same values."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", helpers.OPSET)])


@contextmanager
def started(root: Path, **options: bool) -> Iterator[TestClient]:
    """The app over ``root``, once its start-up load has finished."""
    app = create_app(root, **options)
    with TestClient(app) as client:
        deadline = time.monotonic() + 60
        while not app.state.repository.loaded_all:
            assert time.monotonic() < deadline, "the start-up load did not finish in 60 s"
            time.sleep(0.05)
        yield client


def test_a_reload_with_a_bad_config_key_answers_400_and_keeps_serving(tmp_path: Path) -> None:
    helpers.write_model(tmp_path, "m", 1, identity())
    with started(tmp_path) as client:
        (tmp_path / "m" / "config.json").write_text(json.dumps({"max_batchsize": 4}))
        reply = client.post("/v2/repository/models/m/load")
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert "model 'm' failed to reload, still serving versions [1]" in error
        assert "unknown key(s) ['max_batchsize']" in error
        served = client.post("/v2/models/m/infer", json=ROW)
        assert served.status_code == 200
        assert served.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0]
        assert client.get("/v2/health/ready").json() == {"ready": True}
        (tmp_path / "m" / "config.json").unlink()
        assert client.post("/v2/repository/models/m/load").status_code == 200
        assert client.post("/v2/repository/index").json()[0]["reason"] == ""


def test_a_first_load_of_a_truncated_model_answers_400(tmp_path: Path) -> None:
    helpers.write_model(tmp_path, "good", 1, helpers.identity_model())
    with started(tmp_path) as client:
        path = helpers.write_model(tmp_path, "late", 1, helpers.identity_model())
        path.write_bytes(path.read_bytes()[:20])
        reply = client.post("/v2/repository/models/late/load")
        assert reply.status_code == 400
        assert "model 'late' failed to load" in reply.json()["error"]
        assert client.get("/v2/models/late/ready").status_code == 503


def test_strict_readiness_is_not_ready_while_a_model_is_unavailable(tmp_path: Path) -> None:
    helpers.write_model(tmp_path, "good", 1, helpers.identity_model())
    helpers.write_model(tmp_path, "typo", 1, helpers.identity_model(), {"max_batchsize": 4})
    with started(tmp_path) as client:
        reply = client.get("/v2/health/ready")
        assert reply.status_code == 503
        assert reply.json() == {"ready": False, "unavailable": ["typo"]}
        client.post("/v2/repository/models/typo/unload")
        assert client.get("/v2/health/ready").status_code == 200
    with started(tmp_path, strict_readiness=False) as client:
        assert client.get("/v2/health/ready").json() == {"ready": True}


def test_an_empty_repository_is_ready_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sonnx.serve"), started(tmp_path) as client:
        assert client.get("/v2/health/ready").status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("holds no model directory" in w for w in warnings), warnings


def test_strict_load_raises_the_reason_and_a_plain_load_records_it(tmp_path: Path) -> None:
    helpers.write_model(tmp_path, "typo", 1, helpers.identity_model(), {"versions": [2]})
    repository = ModelRepository(tmp_path, ServeMetrics())

    async def main() -> None:
        await repository.load("typo")
        assert repository.unavailable() == ["typo"]
        with pytest.raises(ModelLoadError, match=r"versions \[2\] not found; on disk: \[1\]"):
            await repository.load("typo", strict=True)

    asyncio.run(main())
    repository.loaded_all = True
    assert not repository.ready
    repository.strict_readiness = False
    assert repository.ready

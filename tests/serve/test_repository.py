"""The repository alone: version selection, load failures kept with their reason, reloads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from sonnx.serve.errors import (
    ConfigError,
    InvalidRequestError,
    ModelNotFoundError,
    ModelRunError,
)
from sonnx.serve.metrics import ServeMetrics
from sonnx.serve.repository import ModelRepository, _runner
from tests.serve import helpers


def loaded(root: Path) -> ModelRepository:
    repository = ModelRepository(root, ServeMetrics())

    async def main() -> None:
        await repository.load_all()

    asyncio.run(main())
    return repository


def test_newest_version_by_default_and_chosen_versions(tmp_path: Path) -> None:
    for version in (1, 3, 10):
        helpers.write_model(tmp_path, "latest", version, helpers.identity_model())
        helpers.write_model(tmp_path, "chosen", version, helpers.identity_model())
    (tmp_path / "chosen" / "config.json").write_text(json.dumps({"versions": [1, 3]}))
    (tmp_path / "latest" / "notes").mkdir()  # not a version directory: ignored
    repository = loaded(tmp_path)
    assert repository.versions("latest") == ["10"]
    assert repository.versions("chosen") == ["1", "3"]
    assert repository.get("chosen").version == 3
    with pytest.raises(ModelNotFoundError, match="no version '10' loaded"):
        repository.get("chosen", "10")
    assert repository.ready


def test_load_failures_are_kept_with_their_reason(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    helpers.write_model(tmp_path, "typo", 1, helpers.identity_model(), {"max_batchsize": 4})
    helpers.write_model(tmp_path, "missing", 1, helpers.identity_model(), {"versions": [2]})
    helpers.write_model(tmp_path, "good", 1, helpers.identity_model())
    repository = loaded(tmp_path)
    reasons = {row["name"]: row["reason"] for row in repository.index()}
    assert "no version directory" in reasons["empty"]
    assert "unknown key(s) ['max_batchsize']" in reasons["typo"]
    assert "versions [2] not found; on disk: [1]" in reasons["missing"]
    with pytest.raises(InvalidRequestError, match="model 'typo' is not available"):
        repository.get("typo")
    assert [row["name"] for row in repository.index(ready_only=True)] == ["good"]
    with pytest.raises(ModelNotFoundError, match="unknown model 'nope'"):
        repository.get("nope")


def test_missing_repository_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        ModelRepository(tmp_path / "nothing", ServeMetrics())


class Failing:
    outputs = ["y"]

    def __init__(self, error: Exception) -> None:
        self.error = error

    def run(self, inputs):
        raise self.error


def test_value_errors_from_torch_are_the_clients_400() -> None:
    run = _runner("m", Failing(IndexError("index 7 is out of bounds")))
    with pytest.raises(ModelRunError, match="model 'm' cannot run this request: IndexError"):
        run(0, {"x": np.zeros(1)})
    run = _runner("m", Failing(RuntimeError("out of memory")))
    with pytest.raises(RuntimeError, match="out of memory"):  # the server's fault: a 500
        run(0, {"x": np.zeros(1)})

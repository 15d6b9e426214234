"""config.json validation: defaults, every key, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonnx.serve.config import ModelConfig, load_config, parse_config
from sonnx.serve.errors import ConfigError


def test_missing_file_gives_the_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path / "config.json")
    assert config == ModelConfig()
    assert not config.batching and config.versions == "latest"


def test_every_key_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        '{"max_batch_size": 16, "max_queue_delay_ms": 2.5, "max_queue_size": 8,'
        ' "instance_count": 2, "device": "cpu", "use_graph": true, "padded_batches": true,'
        ' "request_timeout_ms": 500, "versions": [3, 1],'
        ' "inputs": {"x": {"shape": [-1, 3]}}, "outputs": {"y": {"shape": [-1]}}}'
    )
    config = load_config(path)
    assert config == ModelConfig(
        max_batch_size=16,
        max_queue_delay_ms=2.5,
        max_queue_size=8,
        instance_count=2,
        device="cpu",
        use_graph=True,
        padded_batches=True,
        request_timeout_ms=500.0,
        versions=(1, 3),
        inputs={"x": (-1, 3)},
        outputs={"y": (-1,)},
    )
    assert config.batching


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"max_batchsize": 4}, "unknown key(s) ['max_batchsize']; known keys are"),
        ({"max_batch_size": -1}, "'max_batch_size' must be an integer >= 0, received -1"),
        ({"max_queue_size": 0}, "'max_queue_size' must be an integer >= 1"),
        ({"instance_count": 1.5}, "'instance_count' must be an integer"),
        ({"max_queue_delay_ms": "2"}, "'max_queue_delay_ms' must be a number >= 0.0"),
        ({"use_graph": 1}, "'use_graph' must be true or false"),
        ({"padded_batches": "yes"}, "'padded_batches' must be true or false"),
        ({"padded_batches": True}, "'padded_batches' needs a 'max_batch_size' above 0"),
        ({"device": 0}, "'device' must be a string"),
        ({"versions": [0]}, "'versions' must be"),
        ({"versions": "newest"}, "'versions' must be"),
        ({"inputs": {"x": [1, 2]}}, "inputs.x must be"),
        ({"outputs": {"y": {"shape": [-2]}}}, "outputs.y must be"),
        ([1], "expected a JSON object, received list"),
    ],
)
def test_bad_config_names_the_key(raw, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "m/config.json")
    assert message in str(err.value)
    assert str(err.value).startswith("m/config.json")


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{max_batch_size: 4}")
    with pytest.raises(ConfigError, match=r"config\.json: not valid JSON"):
        load_config(path)

"""sonnx.onnx.model_file: a model file is parsed without the bytes of its large weights, which
are read, one by one, from where they lie (the model file or an external data file)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sonnx.errors import BadModelError
from sonnx.onnx.model_file import LARGE_INITIALIZER_BYTES, read_model_file, read_stored_weight
from sonnx.onnx.model_loading import load_model

RNG = np.random.default_rng(0)
WEIGHTS = {
    "w": RNG.standard_normal((64, 64)).astype(np.float32),  # 16 KiB
    "b": RNG.standard_normal(64).astype(np.float32),  # 256 bytes: parsed with the model
    "half": RNG.standard_normal((32, 32)).astype(ml_dtypes.bfloat16),
    "nibbles": RNG.integers(-8, 8, (64, 64)).astype(ml_dtypes.int4),  # packed two a byte
}


def _model() -> onnx.ModelProto:
    """Every weight passed through to an output (the graph's nodes do not matter here)."""
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"]) for name in WEIGHTS]
    outputs = [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, None) for n in WEIGHTS]
    initializers = [numpy_helper.from_array(value, name) for name, value in WEIGHTS.items()]
    graph = helper.make_graph(nodes, "weights", [], outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.metadata_props.add(key="after", value="the graph")  # a top-level field after it
    return model


def test_large_raw_data_is_left_in_the_file_and_the_rest_parsed(tmp_path: Path) -> None:
    original = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(original.SerializeToString())
    model, stored = read_model_file(path)
    large = {i.name for i in original.graph.initializer if len(i.raw_data) >= 1024}
    assert set(stored) == large == {"w", "half", "nibbles"}
    assert model.ByteSize() < LARGE_INITIALIZER_BYTES
    file_bytes = path.read_bytes()
    for init in model.graph.initializer:
        if init.name in stored:
            assert not init.HasField("raw_data")
            where = stored[init.name]
            init.raw_data = file_bytes[where.offset : where.offset + where.length]
    assert model == original  # with the bytes put back, exactly the model saved


@pytest.mark.parametrize("name", ["w", "half", "nibbles"])
def test_a_stored_weight_reads_as_the_array_saved(tmp_path: Path, name: str) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    model, stored = read_model_file(path)
    header = next(i for i in model.graph.initializer if i.name == name)
    array = read_stored_weight(header, stored[name])
    assert array.flags.writeable and array.dtype == WEIGHTS[name].dtype
    np.testing.assert_array_equal(array, WEIGHTS[name])


def test_external_data_of_large_weights_is_stored_and_small_loaded(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path), save_as_external_data=True, location="m.data", size_threshold=0)
    model, stored = load_model(path)
    assert set(stored) == {"w", "half", "nibbles"}
    assert {w.path for w in stored.values()} == {(tmp_path / "m.data").resolve()}
    headers = {i.name: i for i in model.graph.initializer}
    for name, where in stored.items():
        assert not headers[name].external_data and not headers[name].HasField("raw_data")
        np.testing.assert_array_equal(read_stored_weight(headers[name], where), WEIGHTS[name])
    np.testing.assert_array_equal(numpy_helper.to_array(headers["b"]), WEIGHTS["b"])


@pytest.mark.parametrize("cut", [0.3, 0.5, 0.9])
def test_a_truncated_file_is_a_bad_model(tmp_path: Path, cut: float) -> None:
    data = _model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(BadModelError, match=r"not a valid ONNX model .*: truncated\?"):
        read_model_file(path)


def test_an_empty_file_is_a_bad_model(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(BadModelError, match="no graph"):
        read_model_file(path)


def test_a_stored_range_past_the_end_of_its_file_is_a_bad_model(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    model, stored = read_model_file(path)
    header = next(i for i in model.graph.initializer if i.name == "w")
    path.write_bytes(b"")  # the file changed after it was parsed
    with pytest.raises(BadModelError, match=r"'w'.*ends before"):
        read_stored_weight(header, stored["w"])

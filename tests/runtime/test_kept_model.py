"""The model a SingaRep keeps has no bytes of its large weights; values come from the tensors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd, opt
from sonnx.runtime.kept_model import LARGE_INITIALIZER_BYTES, save_with_values
from sonnx.tensor import Tensor, to_numpy

RNG = np.random.default_rng(0)
#: Initializers of the test model: large ones of several element types, and small ones.
INITIALIZERS = {
    "w": RNG.standard_normal((64, 64)).astype(np.float32),  # 16 KiB
    "b": RNG.standard_normal(64).astype(np.float32),  # 256 bytes: kept
    "shape": np.array([-1, 128], np.int64),  # read by shape inference: kept
    "table": np.arange(300, dtype=np.int64),  # 2.4 KiB
    "q": RNG.integers(-128, 128, (64, 64)).astype(np.int8),
    "q_scale": np.array(0.01, np.float32),
    "half": RNG.standard_normal((32, 32)).astype(ml_dtypes.bfloat16),
    "nibbles": RNG.integers(-8, 8, (64, 64)).astype(ml_dtypes.int4),
    "words": np.array([f"word{i}" for i in range(200)], dtype=object),
}
LARGE = {"w", "table", "q", "half", "nibbles", "words"}


def _model() -> onnx.ModelProto:
    """x @ w + b reshaped by ``shape``; a Gather from ``table``; the other initializers
    dequantized, cast or passed through to outputs."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["y"]),
        helper.make_node("Reshape", ["y", "shape"], ["y2"]),
        helper.make_node("Gather", ["table", "index"], ["picked"]),
        helper.make_node("DequantizeLinear", ["q", "q_scale"], ["dq"]),
        helper.make_node("MatMul", ["x", "dq"], ["xq"]),
        helper.make_node("Cast", ["half"], ["widened"], to=TensorProto.FLOAT),
        helper.make_node("DequantizeLinear", ["nibbles", "q_scale"], ["unpacked"]),
        helper.make_node("Identity", ["words"], ["same_words"]),
    ]
    outputs = {
        "y2": (TensorProto.FLOAT, ["M", 128]),
        "picked": (TensorProto.INT64, ["K"]),
        "xq": (TensorProto.FLOAT, ["N", 64]),
        "widened": (TensorProto.FLOAT, [32, 32]),
        "unpacked": (TensorProto.FLOAT, [64, 64]),
        "same_words": (TensorProto.STRING, [200]),
    }
    graph = helper.make_graph(
        nodes,
        "kept",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64]),
            helper.make_tensor_value_info("index", TensorProto.INT64, ["K"]),
        ],
        [helper.make_tensor_value_info(name, *info) for name, info in outputs.items()],
        [numpy_helper.from_array(value, name) for name, value in INITIALIZERS.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


FEEDS = {"x": RNG.standard_normal((2, 64)).astype(np.float32), "index": np.array([3, 299])}


def _values(model: onnx.ModelProto) -> dict[str, tuple[int, list[int], bytes]]:
    """Each initializer's element type, dims and values as bytes (strings joined)."""
    found = {}
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        data = "|".join(array.ravel()).encode() if array.dtype == object else array.tobytes()
        found[init.name] = (init.data_type, list(init.dims), data)
    return found


def test_the_kept_model_has_every_initializer_header_but_no_bytes_of_large_ones() -> None:
    original = _model()
    loaded = original.SerializeToString()
    rep = sonnx.prepare(original)
    assert rep.source.model is rep.model
    assert original.SerializeToString() == loaded  # the caller's model is left as it is
    kept = {i.name: i for i in rep.model.graph.initializer}
    for init in original.graph.initializer:
        header = kept[init.name]
        assert (header.data_type, list(header.dims)) == (init.data_type, list(init.dims))
        if init.name in LARGE:
            assert header.ByteSize() < LARGE_INITIALIZER_BYTES // 4, init.name
        else:
            assert header == init, init.name
    assert list(rep.model.graph.node) == list(original.graph.node)
    assert rep.model.ByteSize() < 2 * LARGE_INITIALIZER_BYTES


def test_shape_inference_still_reads_the_small_constants() -> None:
    rep = sonnx.prepare(_model())
    assert rep.shapes["y2"].endswith(", 128)")  # from the value of ``shape``
    assert rep.shapes["widened"] == "(32, 32)"


def test_current_model_is_the_loaded_model_with_the_current_weights() -> None:
    original = _model()
    rep = sonnx.prepare(original)
    assert _values(rep.current_model()) == _values(original)
    assert list(rep.current_model().graph.node) == list(original.graph.node)
    with torch.no_grad():
        rep.constants["w"].data.add_(1.0)
    current = {i.name: numpy_helper.to_array(i) for i in rep.current_model().graph.initializer}
    np.testing.assert_array_equal(current["w"], INITIALIZERS["w"] + 1.0)


def test_an_untrained_export_writes_every_initializer_as_loaded() -> None:
    original = _model()
    rep = sonnx.prepare(original)
    xs = {n: Tensor(data=a, requires_grad=False) for n, a in FEEDS.items()}
    exported = sonnx.to_onnx(list(xs.values()), rep.run(xs))
    assert _values(exported) == _values(original)


def _mlp() -> onnx.ModelProto:
    """x @ w1 -> Relu -> @ w2, weights of 16 KiB each."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    rng = np.random.default_rng(1)
    weights = [
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) / 8, name)
        for name in ("w1", "w2")
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_an_export_after_training_gives_onnxruntime_the_trained_outputs() -> None:
    original = _mlp()
    rep = sonnx.prepare(original)
    x = Tensor(data=FEEDS["x"], requires_grad=False)
    autograd.training = True
    (y,) = rep.run([x])
    opt.SGD(lr=0.1)(autograd.reduce_mean(autograd.mul(y, y), keepdims=0))
    autograd.training = False
    (trained,) = rep.run([x])
    exported = sonnx.to_onnx([x], [trained])
    np.testing.assert_allclose(_ort(exported, FEEDS["x"]), to_numpy(trained), rtol=1e-5, atol=1e-6)
    assert not np.allclose(_ort(original, FEEDS["x"]), to_numpy(trained), atol=1e-3)
    first = (rep.current_model().graph.initializer[0], original.graph.initializer[0])
    assert not np.allclose(*map(numpy_helper.to_array, first))


def test_a_model_from_a_file_with_external_data_is_kept_without_its_bytes(tmp_path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), str(path), save_as_external_data=True, location="mlp.onnx.data")
    rep = sonnx.prepare(str(path))
    assert all(init.ByteSize() < 64 for init in rep.model.graph.initializer)
    np.testing.assert_allclose(
        to_numpy(rep.run([FEEDS["x"]])[0]), _ort(_mlp(), FEEDS["x"]), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("external", [False, True], ids=["weights-in-the-file", "external-data"])
def test_a_model_prepared_from_its_file_runs_and_exports_as_from_its_proto(
    tmp_path, external: bool
) -> None:
    """prepare(path) reads each large weight from the file into its tensor: the same run
    and the same export as prepare(proto), whatever the element type (int4 packed, strings
    kept in the model)."""
    original = _model()
    path = tmp_path / "kept.onnx"
    onnx.save(
        _model(), str(path), save_as_external_data=external, location="kept.data", size_threshold=0
    )  # a model of its own: saving moves its data out
    from_file, from_proto = sonnx.prepare(str(path)), sonnx.prepare(original)
    assert {i.name for i in from_file.model.graph.initializer if i.ByteSize() > 64} == {"b"}
    xs = {n: Tensor(data=a, requires_grad=False) for n, a in FEEDS.items()}
    outputs = from_file.run(xs)
    for ours, theirs in zip(outputs, from_proto.run(xs), strict=True):
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(theirs))
    assert _values(sonnx.to_onnx(list(xs.values()), outputs)) == _values(original)
    assert _values(from_file.current_model()) == _values(original)


def test_save_with_values_writes_the_tensors_values_beside_a_kept_model(tmp_path) -> None:
    """Every element type from the rep's tensors (plain ones straight from their memory,
    bfloat16 and int4 through their protos, strings kept inside the file); a value the
    callback changes is written changed; onnxruntime runs the file."""
    original = _model()
    rep = sonnx.prepare(original)
    changed = torch.from_numpy(INITIALIZERS["w"] * 2)

    def value_of(name: str) -> torch.Tensor | None:
        return changed if name == "w" else rep.constants[name].data

    path = tmp_path / "saved.onnx"
    save_with_values(rep.model, path, value_of)
    assert path.stat().st_size < 4 * LARGE_INITIALIZER_BYTES  # the large values are outside
    saved = onnx.load(str(path))
    expected = onnx.ModelProto()
    expected.CopyFrom(original)
    expected.graph.initializer[0].CopyFrom(numpy_helper.from_array(changed.numpy(), "w"))
    assert _values(saved) == _values(expected)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        session.run(["y2"], FEEDS)[0].reshape(-1, 64),
        FEEDS["x"] @ (2 * INITIALIZERS["w"]) + INITIALIZERS["b"],
        rtol=1e-5,
        atol=1e-5,
    )

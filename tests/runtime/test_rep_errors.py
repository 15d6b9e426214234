"""Every failure a model or an input causes is a sonnx error naming the node, the input and
what was expected: schema checks before anything runs, and whatever a running node raises."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.errors import BadInputError, BadModelError, ResourceLimitError, SonnxError
from sonnx.operators.activation.functions import Relu
from sonnx.runtime import subgraphs

F = TensorProto.FLOAT


def _model(nodes, inits=(), dims=(2, 3), outputs=("y",), opset=17, inputs=("x",)):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, list(dims)) for n in inputs],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


X = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            helper.make_node("Reshape", ["x"], ["y"], name="r"),
            r"node 'r' \(Reshape-14\): expected 2 input\(s\) \(data, shape\), received 1: \['x'\]",
        ),
        (
            helper.make_node("Add", ["x", ""], ["y"], name="a"),
            r"'a' \(Add-14\): input 1 \(B\) is required, received an empty name in \['x', ''\]",
        ),
        (
            helper.make_node("Relu", ["x", "x"], ["y"], name="r"),
            r"expected 1 input\(s\) \(X\), received 2",
        ),
        (
            helper.make_node("Concat", [], ["y"], axis=0, name="c"),
            r"node 'c' \(Concat-13\): expected at least 1 input\(s\) \(inputs\.\.\.\), received 0",
        ),
        (
            helper.make_node("Relu", ["x"], ["y", "z"], name="r"),
            r"expected 1 output\(s\) \(Y\), received 2: \['y', 'z'\]",
        ),
        (
            helper.make_node("Relu", ["x"], ["y"], alpha=0.1, name="r"),
            r"attribute 'alpha' is not an attribute of Relu-14; expected one of \[\]",
        ),
        (
            helper.make_node("Concat", ["x", "x"], ["y"], axis=1.5, name="c"),
            r"attribute 'axis' must be of type INT, received FLOAT",
        ),
        (
            helper.make_node("Cast", ["x"], ["y"], name="c"),
            r"node 'c' \(Cast-13\): required attribute\(s\) \['to'\] missing, received \[\]",
        ),
    ],
)
def test_nodes_breaking_their_schema_are_refused_before_running(node, message) -> None:
    with pytest.raises(BadModelError, match=message):
        sonnx.prepare(_model([node]))


def test_optional_inputs_may_be_left_out_and_variadic_ones_repeat() -> None:
    clip = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    hi = numpy_helper.from_array(np.array(2.0, np.float32), "hi")
    assert sonnx.prepare(_model([clip], [hi])).run([X])[0].numpy().max() == 2.0
    concat = helper.make_node("Concat", ["x", "x", "x"], ["y"], axis=0)
    assert sonnx.prepare(_model([concat])).run([X])[0].shape == (6, 3)


def test_a_mistyped_weight_is_reported_with_the_types_its_input_allows() -> None:
    w = numpy_helper.from_array(np.ones((2, 3), np.int64), "w")
    v = numpy_helper.from_array(np.ones((2, 3), np.float32), "v")
    model = _model([helper.make_node("Add", ["v", "w"], ["y"], name="add")], [v, w])
    with pytest.raises(BadModelError, match=r"'add' \(Add-14\): inputs 0 and 1 share type T"):
        sonnx.prepare(model)
    flags = numpy_helper.from_array(np.ones((2, 3), np.bool_), "flags")
    relu = helper.make_node("Relu", ["flags"], ["y"], name="relu")
    with pytest.raises(
        BadModelError, match=r"input 0 \(X\) must be one of .*received tensor\(bool\)"
    ):
        sonnx.prepare(_model([relu], [flags]))


def test_an_error_of_an_operator_gains_the_node_identity() -> None:
    model = _model([helper.make_node("Concat", ["x", "x"], ["y"], axis=5, name="cat")])
    with pytest.raises(BadInputError) as info:
        sonnx.prepare(model).run([X])
    assert str(info.value).startswith("node 'cat' (Concat-13): Concat: axis must be in [-2, 1]")
    assert info.value.node == "'cat' (Concat-13)"


def _failing_relu(monkeypatch, error: Exception) -> None:
    def forward(self, x):
        raise error

    monkeypatch.setattr(Relu, "forward", forward)


def test_a_raw_exception_in_a_node_becomes_a_typed_error_keeping_the_cause(monkeypatch) -> None:
    """The class follows the cause: a node fed by an input of open shape blames the input; a
    node reading only fully declared inputs blames the model."""
    original = RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)\nmore")
    _failing_relu(monkeypatch, original)
    node = helper.make_node("Relu", ["x"], ["y"], name="act")
    with pytest.raises(BadInputError) as info:
        sonnx.prepare(_model([node], dims=("n", 3))).run([X])
    assert str(info.value) == (
        "node 'act' (Relu-14) could not run: RuntimeError: mat1 and mat2 shapes cannot be "
        "multiplied (2x3 and 4x5); received inputs x: float32 (2, 3)"
    )
    assert info.value.__cause__ is original
    with pytest.raises(BadModelError) as info:
        sonnx.prepare(_model([node])).run([X])
    assert not isinstance(info.value, BadInputError)
    assert info.value.__cause__ is original


def test_running_out_of_memory_in_a_node_is_a_resource_limit(monkeypatch) -> None:
    _failing_relu(monkeypatch, torch.OutOfMemoryError("CUDA out of memory"))
    with pytest.raises(ResourceLimitError, match=r"'r' \(Relu-14\) could not run: OutOfMemory"):
        sonnx.prepare(_model([helper.make_node("Relu", ["x"], ["y"], name="r")])).run([X])


def _if_model(then_nodes) -> onnx.ModelProto:
    then_g = helper.make_graph(
        then_nodes, "then", [], [helper.make_tensor_value_info("t", F, None)]
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, None)],
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    node = helper.make_node(
        "If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="branch"
    )
    return _model([node], [cond])


def test_an_error_inside_a_branch_names_the_inner_and_the_enclosing_node() -> None:
    model = _if_model([helper.make_node("Concat", ["x", "x"], ["t"], axis=7, name="inner")])
    with pytest.raises(BadInputError) as info:
        sonnx.prepare(model).run([X])
    assert str(info.value).startswith(
        "in a subgraph of node 'branch' (If-16), node 'inner' (Concat-13): Concat: axis"
    )


def test_an_endless_loop_stops_at_the_iteration_limit(monkeypatch) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Identity", ["v"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", F, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", F, None),
        ],
    )
    loop = helper.make_node("Loop", ["", "go", "x"], ["v_final"], body=body, name="forever")
    relu = helper.make_node("Relu", ["v_final"], ["y"])
    go = numpy_helper.from_array(np.array(True), "go")
    rep = sonnx.prepare(_model([loop, relu], [go]))
    monkeypatch.setenv(subgraphs.LOOP_LIMIT_VAR, "50")
    with pytest.raises(ResourceLimitError, match=r"'forever' \(Loop-16\).*more than 50 times"):
        rep.run([X])


def test_a_constant_node_that_cannot_be_evaluated_is_named() -> None:
    bad = helper.make_node("Constant", [], ["c"], value_float=1.0, value_int=2, name="two")
    add = helper.make_node("Add", ["x", "c"], ["y"])
    with pytest.raises(SonnxError, match=r"node 'two' \(Constant-13\): Constant: exactly one"):
        sonnx.prepare(_model([bad, add]))


def test_a_graph_input_of_an_unknown_element_type_is_a_bad_model() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])])
    model.graph.input[0].type.tensor_type.elem_type = 99
    with pytest.raises(BadModelError, match="graph input 'x' declares element type 99"):
        sonnx.prepare(model)


# ---- files and external data ------------------------------------------------------------------


def _external_model(tmp_path, location: str, **extra: str) -> str:
    w = numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w")
    (tmp_path / "outside.bin").write_bytes(w.raw_data)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(w.raw_data)
    os.symlink(tmp_path / "outside.bin", folder / "link.bin")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, **extra}.items():
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [w])
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_external_data_next_to_the_model_loads(tmp_path) -> None:
    rep = sonnx.prepare(_external_model(tmp_path, "weights.bin"))
    np.testing.assert_allclose(rep.run([X])[0].numpy(), X + 0.5)


@pytest.mark.parametrize(
    ("location", "extra", "why"),
    [
        ("../outside.bin", {}, "may not leave the model's directory"),
        ("../../etc/passwd", {}, "may not leave the model's directory"),
        ("/etc/passwd", {}, "must be a path relative to the model's directory"),
        ("C:\\Windows\\win.ini", {}, "must be a path relative"),
        ("link.bin", {}, "through a symbolic link"),
        ("missing.bin", {}, "file not found"),
        ("weights.bin", {"offset": "20", "length": "24"}, "inside the file of 24 bytes"),
        ("weights.bin", {"length": "-1"}, "range must lie inside the file"),
        ("weights.bin", {"offset": "x"}, "offset and length must be integers"),
    ],
)
def test_external_data_escapes_and_bad_ranges_are_refused(tmp_path, location, extra, why) -> None:
    with pytest.raises(BadModelError, match="external data") as info:
        sonnx.prepare(_external_model(tmp_path, location, **extra))
    assert why in str(info.value)
    assert str(info.value).endswith(f"received location {location!r}")


def test_external_data_of_a_model_given_as_bytes_is_never_read(tmp_path) -> None:
    path = _external_model(tmp_path, "weights.bin")
    with open(path, "rb") as f:
        data = f.read()
    with pytest.raises(BadModelError, match="external file, which sonnx reads only for a model"):
        sonnx.prepare(data)
    with pytest.raises(BadModelError, match="external file"):
        sonnx.prepare(onnx.load_from_string(data))


def test_truncated_files_and_cycles_are_bad_models(tmp_path) -> None:
    data = _model([helper.make_node("Relu", ["x"], ["y"])]).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadModelError, match="not a valid ONNX model"):
        sonnx.prepare(str(path))
    cycle = _model(
        [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Add", ["x", "a"], ["b"])],
        outputs=("b",),
    )
    with pytest.raises(BadModelError, match="cycle"):
        sonnx.prepare(cycle)


def test_prepare_on_a_device_torch_does_not_know_names_it_and_the_devices_accepted() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])])
    with pytest.raises(BadInputError, match=r"expected 'cpu', 'cuda' or 'cuda:N'.*received 'tpu'"):
        sonnx.prepare(model, device="tpu")

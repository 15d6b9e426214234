"""sonnx.onnx.model_loading: a model whose names are not UTF-8 text is a BadModelError naming
the field, however it is given (bytes, a path, a ModelProto parsed from such bytes)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadModelError

F = TensorProto.FLOAT


def _model() -> onnx.ModelProto:
    """x -> LeakyRelu (node 'act', attribute alpha) -> If whose branch is an Identity -> y."""
    branch = helper.make_graph(
        [helper.make_node("Identity", ["hidden"], ["branch_out"], name="inner")],
        "branch",
        [],
        [helper.make_tensor_value_info("branch_out", F, [2])],
    )
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["hidden"], name="act", alpha=0.5),
        helper.make_node("Constant", [], ["cond"], value_int=1),
        helper.make_node("Cast", ["cond"], ["flag"], to=TensorProto.BOOL),
        helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=branch),
    ]
    x, y = helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("y", F, [2])
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _corrupt(text: bytes, at: int = 0) -> bytes:
    """The model's bytes with byte ``at`` of the string ``text`` (found with its length
    prefix, wherever it is serialized) made 0xFF, which UTF-8 never uses."""
    data = _model().SerializeToString()
    needle = bytes([len(text)]) + text
    assert needle in data
    return data.replace(needle, needle[: at + 1] + b"\xff" + needle[at + 2 :])


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (b"act", "model.graph.node[0].name"),
        (b"LeakyRelu", "model.graph.node[0].op_type"),
        (b"alpha", "model.graph.node[0].attribute[0].name"),
        (b"hidden", "model.graph.node[0].output[0]"),
        (b"x", "model.graph.node[0].input[0]"),  # also graph.input[0]: the walk's first
        (b"inner", "model.graph.node[3].attribute[0].g.node[0].name"),
    ],
)
def test_a_name_that_is_not_utf8_is_a_bad_model_naming_the_field(text, field) -> None:
    with pytest.raises(BadModelError, match="^" + re.escape(f"{field} is not UTF-8 text")):
        sonnx.prepare(_corrupt(text))


def test_the_check_covers_paths_and_parsed_model_protos(tmp_path) -> None:
    data = _corrupt(b"LeakyRelu", at=4)
    path = tmp_path / "flipped.onnx"
    path.write_bytes(data)
    message = "op_type is not UTF-8 text; received the bytes b'Leak\\xffRelu'"
    with pytest.raises(BadModelError, match=re.escape(message)):
        sonnx.prepare(path)
    proto = onnx.ModelProto()
    proto.ParseFromString(data)  # protobuf accepts it: the name comes back as bytes
    assert isinstance(proto.graph.node[0].op_type, bytes)
    with pytest.raises(BadModelError, match="op_type is not UTF-8 text"):
        sonnx.prepare(proto)


def test_a_domain_that_is_not_utf8_is_a_bad_model() -> None:
    model = _model()
    model.graph.node[0].domain = "ai.onnx"
    data = model.SerializeToString().replace(b"ai.onnx", b"ai.o\xffnx")
    with pytest.raises(BadModelError, match=r"model.graph.node\[0\].domain is not UTF-8 text"):
        sonnx.prepare(data)


def test_names_in_other_scripts_are_text_and_load() -> None:
    model = _model()
    model.graph.node[0].name = "aktivierung_größe_激活"
    x = np.array([-2.0, 3.0], np.float32)
    (y,) = sonnx.prepare(model.SerializeToString()).run([x])
    np.testing.assert_array_equal(y.numpy(), [-1.0, 3.0])


def test_a_directory_is_named_as_one_not_as_a_missing_file(tmp_path) -> None:
    with pytest.raises(BadModelError, match=r"is a directory, expected an \.onnx file"):
        sonnx.prepare(tmp_path)
    with pytest.raises(BadModelError, match="ONNX model file not found"):
        sonnx.prepare(tmp_path / "missing.onnx")

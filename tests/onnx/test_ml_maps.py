"""Map values of the ai.onnx.ml domain: DictVectorizer and CastMap read a dict (ONNX
``map(K, V)``) and give a tensor; results equal onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError


def map_model(node, key_type: int, value_type: int, out_type: int):
    map_type = helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(value_type, None))
    graph = helper.make_graph(
        [node],
        "maps",
        [helper.make_value_info("x", map_type)],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets)


def run_both(model, value):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    [expected] = session.run(None, {"x": value})
    [got] = sonnx.prepare(model).run({"x": value})
    return got.numpy(), expected


def test_dict_vectorizer_with_a_string_vocabulary():
    node = helper.make_node(
        "DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml", string_vocabulary=["a", "b", "c"]
    )
    model = map_model(node, TensorProto.STRING, TensorProto.FLOAT, TensorProto.FLOAT)
    got, expected = run_both(model, {"c": 1.5, "a": 2.0, "unknown": 4.0})
    assert got.dtype == expected.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


def test_dict_vectorizer_with_an_int64_vocabulary():
    node = helper.make_node(
        "DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml", int64_vocabulary=[7, 3, 5]
    )
    model = map_model(node, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT)
    got, expected = run_both(model, {5: -1.0, 7: 0.25})
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("form", ["DENSE", "SPARSE"])
@pytest.mark.parametrize(
    ("cast_to", "out_type"),
    [
        ("TO_FLOAT", TensorProto.FLOAT),
        ("TO_INT64", TensorProto.INT64),
        ("TO_STRING", TensorProto.STRING),
    ],
)
def test_cast_map(form, cast_to, out_type):
    node = helper.make_node(
        "CastMap", ["x"], ["y"], domain="ai.onnx.ml", cast_to=cast_to, map_form=form, max_map=6
    )
    model = map_model(node, TensorProto.INT64, TensorProto.FLOAT, out_type)
    got, expected = run_both(model, {3: 1.5, 0: 2.25, 1: -1.75})
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_a_tensor_fed_to_a_map_input_is_refused():
    node = helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml")
    model = map_model(node, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT)
    with pytest.raises(BadInputError, match=r"input 'x' is a map; give a dict, received ndarray"):
        sonnx.prepare(model).run({"x": np.ones(3, np.float32)})


def test_sparse_keys_beyond_max_map_are_named():
    node = helper.make_node(
        "CastMap", ["x"], ["y"], domain="ai.onnx.ml", map_form="SPARSE", max_map=2
    )
    model = map_model(node, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT)
    with pytest.raises(BadInputError, match=r"keys must be in \[0, 1\].*received \[4\]"):
        sonnx.prepare(model).run({"x": {4: 1.0}})

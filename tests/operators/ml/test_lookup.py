"""LabelEncoder (versions 1, 2, 4) and CategoryMapper: every direction between strings and
numbers, defaults and NaN keys, against onnxruntime; errors name what was expected."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.errors import BadInputError

ML = "ai.onnx.ml"


def one_node_model(node, in_type: int, out_type: int, ml_opset: int):
    graph = helper.make_graph(
        [node],
        "lookup",
        [helper.make_tensor_value_info("x", in_type, None)],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)]
    return helper.make_model(graph, opset_imports=opsets)


def check(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    [expected] = session.run(None, {"x": x})
    [got] = sonnx.prepare(model).run({"x": x})
    got = got.numpy()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


WORDS = np.array([["cat", "dog"], ["eel", "cat"]], dtype=object)


@pytest.mark.parametrize("to_strings", [False, True])
def test_label_encoder_version_1(to_strings):
    attrs = {"classes_strings": ["cat", "dog", "ant"], "default_int64": 9, "default_string": "?"}
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    if to_strings:
        model = one_node_model(node, TensorProto.INT64, TensorProto.STRING, 1)
        check(model, np.array([0, 2, 7, 1], dtype=np.int64))
    else:
        model = one_node_model(node, TensorProto.STRING, TensorProto.INT64, 1)
        check(model, WORDS)


@pytest.mark.parametrize(
    ("keys", "values", "in_type", "out_type", "x"),
    [
        (
            {"keys_strings": ["cat", "dog"]},
            {"values_floats": [0.5, -1.0]},
            TensorProto.STRING,
            TensorProto.FLOAT,
            WORDS,
        ),
        (
            {"keys_int64s": [3, 1]},
            {"values_strings": ["three", "one"]},
            TensorProto.INT64,
            TensorProto.STRING,
            np.array([1, 2, 3], np.int64),
        ),
        (
            {"keys_floats": [0.5, np.nan]},
            {"values_int64s": [5, 7]},
            TensorProto.FLOAT,
            TensorProto.INT64,
            np.array([0.5, np.nan, 2.0], np.float32),
        ),
    ],
)
def test_label_encoder_version_2(keys, values, in_type, out_type, x):
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **keys, **values)
    check(one_node_model(node, in_type, out_type, 2), x)


def test_label_encoder_version_4_matches_nan_keys():
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain=ML,
        keys_tensor=numpy_helper.from_array(np.array([0.5, np.nan], np.float32)),
        values_tensor=numpy_helper.from_array(np.array([5, 7], np.int64)),
    )
    model = one_node_model(node, TensorProto.FLOAT, TensorProto.INT64, 4)
    check(model, np.array([0.5, np.nan, 2.0], np.float32))


def test_label_encoder_version_4_tensors_with_a_default_tensor():
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain=ML,
        keys_tensor=numpy_helper.from_array(np.array(["cat", "eel"], dtype=object)),
        values_tensor=numpy_helper.from_array(np.array([1.25, 2.5], dtype=np.float64)),
        default_tensor=numpy_helper.from_array(np.array([-3.0], dtype=np.float64)),
    )
    check(one_node_model(node, TensorProto.STRING, TensorProto.DOUBLE, 4), WORDS)


@pytest.mark.parametrize("to_strings", [False, True])
def test_category_mapper(to_strings):
    node = helper.make_node(
        "CategoryMapper",
        ["x"],
        ["y"],
        domain=ML,
        cats_strings=["cat", "dog"],
        cats_int64s=[10, 20],
        default_int64=-5,
        default_string="none",
    )
    if to_strings:
        model = one_node_model(node, TensorProto.INT64, TensorProto.STRING, 1)
        check(model, np.array([[20, 10], [3, 20]], np.int64))
    else:
        check(one_node_model(node, TensorProto.STRING, TensorProto.INT64, 1), WORDS)


def test_label_encoder_refuses_numbers_for_string_keys():
    node = helper.make_node(
        "LabelEncoder", ["x"], ["y"], domain=ML, keys_strings=["a"], values_int64s=[1]
    )
    model = one_node_model(node, TensorProto.INT64, TensorProto.INT64, 2)
    with pytest.raises(BadInputError, match=r"input X must be of the keys' type \(string\)"):
        sonnx.prepare(model).run({"x": np.array([1], np.int64)})

"""Which values are strings and which steps read or make them, known before any run."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.onnx.model_loading import opset_versions
from sonnx.runtime.string_steps import string_steps, typed_strings
from tests.onnx.string_front_ends import front_end


def test_type_inference_finds_the_strings_a_front_end_reads_and_makes() -> None:
    model = front_end()
    strings = typed_strings(model.graph, opset_versions(model))
    assert strings == {"phonemes", "voiced", "levels", "echo"}


def test_a_graph_of_numbers_is_not_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT64)],
        "numbers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["N"])],
    )

    def refuse(model: onnx.ModelProto) -> onnx.ModelProto:
        raise AssertionError("type inference ran on a graph where no string can arise")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refuse)
    assert typed_strings(graph, {"": 13}) == frozenset()


def test_strings_follow_constants_through_steps_that_move_elements() -> None:
    """Without typed values (an operator type inference does not know), a string constant
    still marks the steps that read it and those reading what they moved."""
    vocabulary = np.array(["a", "b", "c"], dtype=object)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["vocabulary", "ids"], ["picked"], name="pick"),
            helper.make_node("Identity", ["picked"], ["words"], name="copy"),
            helper.make_node("Add", ["ids", "ids"], ["twice"], name="twice"),
        ],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
        [
            helper.make_tensor_value_info("words", TensorProto.STRING, ["N"]),
            helper.make_tensor_value_info("twice", TensorProto.INT64, ["N"]),
        ],
        [numpy_helper.from_array(vocabulary, "vocabulary")],
    )
    program = sonnx.prepare(helper.make_model(graph)).program
    untyped = dataclasses.replace(program, string_values=frozenset())
    for p in (program, untyped):
        found = {p.steps[i].info.name: why for i, why in string_steps(p).items()}
        assert found == dict.fromkeys(["pick", "copy"], "it reads strings, which stay on the host")

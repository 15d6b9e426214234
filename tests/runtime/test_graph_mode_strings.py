"""Graph mode on a model with string inputs and outputs: the steps that read or make strings
run eagerly by design (no compiled graph takes a string, and none is tried), the steps between
them are compiled, and the results equal the eager run's, which equal onnxruntime's.

One compile (the front end's float steps), about 15-40 s.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import sonnx
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.string_front_ends import OUTPUTS, front_end, in_onnxruntime, phonemes

STRING_NODES = {"encode", "voiced", "decode", "echo"}


def _assert_same(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if e.dtype == object:
            assert g.tolist() == e.tolist()
        else:
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_a_string_front_end_compiles_its_number_steps_and_matches_eager_and_onnxruntime() -> None:
    model = front_end()
    graph_rep, eager_rep = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for count in (7, 4, 9):
            x = phonemes(count)
            expected = [to_numpy(t) for t in eager_rep.run([x])]
            _assert_same(expected, in_onnxruntime(model, x))
            _assert_same([to_numpy(t) for t in graph_rep.run([x])], expected)
    runner = graph_rep.graph_runner
    # Only the NonZero is found while tracing (and said so); the string steps are known before.
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "'where_voiced'" in said[0], said
    parts = runner.parts()
    compiled = [p.nodes for p in parts if p.compiled]
    assert compiled == [("one_hot", "embed", "relu", "add", "loudest", "is_voiced")]
    eager = {p.nodes[0]: p.why_eager for p in parts if not p.compiled}
    assert set(eager) == {*STRING_NODES, "where_voiced"}
    assert eager["encode"] == eager["echo"] == "it reads strings, which stay on the host"
    assert eager["decode"] == "it makes strings, which stay on the host"
    assert runner.compile_count == 1  # the lengths 7, 4 and 9 share one symbolic graph

    # The compiled run exports the original graph, which onnxruntime runs alike.
    x = Tensor(data=phonemes(6), requires_grad=False)
    outputs = graph_rep.run([x])
    exported = sonnx.to_onnx([x], outputs)
    onnx.checker.check_model(exported, full_check=True)
    assert [o.name for o in exported.graph.output] == OUTPUTS
    _assert_same(in_onnxruntime(exported, phonemes(6)), [to_numpy(t) for t in outputs])


def test_a_model_of_strings_alone_runs_eagerly_without_compiling_or_warning() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("StringNormalizer", ["words"], ["lower"], case_change_action="LOWER"),
            helper.make_node("Reshape", ["lower", "shape"], ["column"]),
        ],
        "strings",
        [helper.make_tensor_value_info("words", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("column", TensorProto.STRING, ["N", 1])],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rep = sonnx.prepare(model, use_graph=True)
    words = np.array(["Go", "END", "x"], dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (column,) = rep.run([words])
    assert to_numpy(column).tolist() == [["go"], ["end"], ["x"]]
    assert rep.graph_runner.compile_count == 0
    assert all(not p.compiled for p in rep.graph_runner.parts())


@pytest.mark.parametrize("appended", [False, True], ids=["in_order", "appended"])
def test_the_string_steps_are_known_before_any_run(appended: bool) -> None:
    rep = sonnx.prepare(front_end(appended), use_graph=True)
    eager = {rep.steps[i].info.name for i in rep.graph_runner.eager_steps}
    assert eager == STRING_NODES
